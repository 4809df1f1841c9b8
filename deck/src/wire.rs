//! DECK's packets, carried as the message layer's active messages (one
//! handler id each). Fields are little-endian; every decoder checks lengths
//! and returns `None` for a malformed packet (counted and dropped, never a
//! panic). The formats are in deck/README.md ("Protocol").

/// Active-message handler ids DECK uses (0xDEC0..).
pub mod am {
    /// An eager message for a mailbox: [`super::PostHeader`] then the data.
    pub const POST: u16 = 0xDEC0;
    /// A large message announced: [`super::Rts`]; the data follows as a
    /// tagged rendezvous send with tag = token in [`super::DATA_CONTEXT`].
    pub const RTS: u16 = 0xDEC1;
    /// A mailbox of the sender's is gone: [`super::Gone`].
    pub const GONE: u16 = 0xDEC2;
    /// Credit returned: 8 bytes, the bytes retrieved.
    pub const CREDIT: u16 = 0xDEC3;
    /// The naming service: [`super::Name`].
    pub const NAME: u16 = 0xDEC4;
    /// A barrier step: [`super::BarrierStep`].
    pub const BARRIER: u16 = 0xDEC5;
}

/// The message layer's context for the data of large messages.
pub const DATA_CONTEXT: u32 = 0xDEC0_0001;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// What precedes an eager message's data.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PostHeader {
    /// The mailbox on the receiving node.
    pub mbox: u32,
}

impl PostHeader {
    /// Encoded length.
    pub const LEN: usize = 8;

    /// The header's bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..4].copy_from_slice(&self.mbox.to_le_bytes());
        b
    }

    /// The header at the start of `b`.
    pub fn decode(b: &[u8]) -> Option<PostHeader> {
        if b.len() < Self::LEN {
            return None;
        }
        Some(PostHeader {
            mbox: u32_at(b, 0)?,
        })
    }
}

/// A large message announced.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Rts {
    /// The mailbox on the receiving node.
    pub mbox: u32,
    /// The tag its data comes with.
    pub token: u32,
    /// Its length.
    pub len: u64,
}

impl Rts {
    /// Encoded length.
    pub const LEN: usize = 16;

    /// The packet's bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..4].copy_from_slice(&self.mbox.to_le_bytes());
        b[4..8].copy_from_slice(&self.token.to_le_bytes());
        b[8..].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// The packet in `b`.
    pub fn decode(b: &[u8]) -> Option<Rts> {
        if b.len() != Self::LEN {
            return None;
        }
        Some(Rts {
            mbox: u32_at(b, 0)?,
            token: u32_at(b, 4)?,
            len: u64_at(b, 8)?,
        })
    }
}

/// The sender's mailbox `mbox` is gone; `token` (non-zero) names a large
/// message to it that was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Gone {
    /// The mailbox, on the node that sends this.
    pub mbox: u32,
    /// The refused large message's token, or 0.
    pub token: u32,
}

impl Gone {
    /// Encoded length.
    pub const LEN: usize = 8;

    /// The packet's bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..4].copy_from_slice(&self.mbox.to_le_bytes());
        b[4..].copy_from_slice(&self.token.to_le_bytes());
        b
    }

    /// The packet in `b`.
    pub fn decode(b: &[u8]) -> Option<Gone> {
        if b.len() != Self::LEN {
            return None;
        }
        Some(Gone {
            mbox: u32_at(b, 0)?,
            token: u32_at(b, 4)?,
        })
    }
}

/// Credit returned.
pub fn encode_credit(bytes: u64) -> [u8; 8] {
    bytes.to_le_bytes()
}

/// Credit in `b`.
pub fn decode_credit(b: &[u8]) -> Option<u64> {
    if b.len() != 8 {
        return None;
    }
    u64_at(b, 0)
}

/// Naming-service operations.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum NameOp {
    /// Bind `name` to (node, mbox); answered by `Done` or `Exists`.
    Bind = 1,
    /// Remove the binding of `name` to (node, mbox).
    Unbind = 2,
    /// Look `name` up, waiting up to `wait_ms` for it to be bound;
    /// answered by `Found` or `Missing`.
    Lookup = 3,
    /// Bound.
    Done = 4,
    /// Bound already (to `node`, `mbox`).
    Exists = 5,
    /// The name is bound to (`node`, `mbox`).
    Found = 6,
    /// Not bound within the lookup's wait.
    Missing = 7,
}

/// A naming-service request or answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name {
    /// The operation.
    pub op: NameOp,
    /// Pairs a request with its answer (the asker's counter).
    pub req: u32,
    /// Node of the mailbox.
    pub node: u32,
    /// The mailbox on that node.
    pub mbox: u32,
    /// How long a lookup may wait for the name (ms).
    pub wait_ms: u32,
    /// The name.
    pub name: String,
}

impl Name {
    const FIXED: usize = 17;
    /// Longest name.
    pub const MAX_NAME: usize = 1024;

    /// The packet's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(Self::FIXED + self.name.len());
        b.push(self.op as u8);
        b.extend_from_slice(&self.req.to_le_bytes());
        b.extend_from_slice(&self.node.to_le_bytes());
        b.extend_from_slice(&self.mbox.to_le_bytes());
        b.extend_from_slice(&self.wait_ms.to_le_bytes());
        b.extend_from_slice(self.name.as_bytes());
        b
    }

    /// The packet in `b`.
    pub fn decode(b: &[u8]) -> Option<Name> {
        if b.len() < Self::FIXED || b.len() > Self::FIXED + Self::MAX_NAME {
            return None;
        }
        let op = match b[0] {
            1 => NameOp::Bind,
            2 => NameOp::Unbind,
            3 => NameOp::Lookup,
            4 => NameOp::Done,
            5 => NameOp::Exists,
            6 => NameOp::Found,
            7 => NameOp::Missing,
            _ => return None,
        };
        Some(Name {
            op,
            req: u32_at(b, 1)?,
            node: u32_at(b, 5)?,
            mbox: u32_at(b, 9)?,
            wait_ms: u32_at(b, 13)?,
            name: std::str::from_utf8(&b[Self::FIXED..]).ok()?.to_owned(),
        })
    }
}

/// A barrier step: the sender reached round `round` of barrier `epoch`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct BarrierStep {
    /// The barrier's number (each process counts its barriers).
    pub epoch: u64,
    /// The dissemination round.
    pub round: u32,
}

impl BarrierStep {
    /// Encoded length.
    pub const LEN: usize = 12;

    /// The packet's bytes.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0; Self::LEN];
        b[..8].copy_from_slice(&self.epoch.to_le_bytes());
        b[8..].copy_from_slice(&self.round.to_le_bytes());
        b
    }

    /// The packet in `b`.
    pub fn decode(b: &[u8]) -> Option<BarrierStep> {
        if b.len() != Self::LEN {
            return None;
        }
        Some(BarrierStep {
            epoch: u64_at(b, 0)?,
            round: u32_at(b, 8)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_round_trip_and_short_ones_are_refused() {
        let r = Rts {
            mbox: 3,
            token: 9,
            len: 1 << 33,
        };
        assert_eq!(Rts::decode(&r.encode()), Some(r));
        assert_eq!(Rts::decode(&r.encode()[..15]), None);
        let n = Name {
            op: NameOp::Lookup,
            req: 1,
            node: 2,
            mbox: 3,
            wait_ms: 4,
            name: "box".into(),
        };
        assert_eq!(Name::decode(&n.encode()), Some(n.clone()));
        let mut bad = n.encode();
        bad[0] = 99;
        assert_eq!(Name::decode(&bad), None);
        assert_eq!(Name::decode(&bad[..5]), None);
        let g = Gone { mbox: 1, token: 2 };
        assert_eq!(Gone::decode(&g.encode()), Some(g));
        let s = BarrierStep { epoch: 5, round: 1 };
        assert_eq!(BarrierStep::decode(&s.encode()), Some(s));
        assert_eq!(PostHeader::decode(&[1, 0, 0]), None);
        assert_eq!(decode_credit(&[0; 7]), None);
    }
}
