//! The message layer's packet header, carried at the start of every
//! transport message. Specified in docs/MESSAGES.md; little-endian, because
//! every host this layer targets is, and the header is read on every message.
//!
//! Decoding never panics: a short or unknown packet is an error the engine
//! counts and drops.

use crate::matching::Envelope;

/// Header length in bytes.
pub const HEADER_LEN: usize = 48;

/// What a packet is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// First packet on a connection, both ways: who the sender is and the
    /// eager credit window it grants. Body: the sender's address as text.
    Hello = 1,
    /// A tagged message with its payload.
    Eager = 2,
    /// Request to send a tagged message of `len` bytes (rendezvous).
    Rts = 3,
    /// Clear to send: the receiver matched `id` (the sender's request) and
    /// will place the data for its request `aux`.
    Cts = 4,
    /// Rendezvous data for the receiver's request `id` at `offset`.
    Data = 5,
    /// Active message for handler `am`.
    Am = 6,
    /// Write the body into region `id` at `offset`; operation `aux`.
    Put = 7,
    /// Read `len` bytes of region `id` at `offset`; operation `aux`.
    Get = 8,
    /// Data answering a `Get`: operation `aux`, at `offset` of the read.
    GetReply = 9,
    /// A `Put` operation `aux` is complete at the target.
    PutAck = 10,
    /// Returns eager credit only (nothing else to carry it).
    Credit = 11,
    /// The rendezvous data of the sender's request `id` is all placed: the
    /// send is complete.
    Done = 12,
    /// Several small `Eager` and `Am` packets to one peer in one transport
    /// message: `len` = how many. Body: per packet a 16-bit length, then
    /// the packet (its own header, credit zero, and body). The bundle's
    /// header carries the credit for all of them.
    Bundle = 13,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Hello,
            2 => Kind::Eager,
            3 => Kind::Rts,
            4 => Kind::Cts,
            5 => Kind::Data,
            6 => Kind::Am,
            7 => Kind::Put,
            8 => Kind::Get,
            9 => Kind::GetReply,
            10 => Kind::PutAck,
            11 => Kind::Credit,
            12 => Kind::Done,
            13 => Kind::Bundle,
            _ => return None,
        })
    }
}

/// Header flags.
pub mod flags {
    /// Last packet of a multi-packet operation (Put, GetReply).
    pub const LAST: u8 = 1;
    /// Cts: the posted buffer is too short; the sender completes without
    /// sending data. Put/Get replies: the target refused the access.
    pub const REFUSED: u8 = 2;
    /// Hello: the sender takes `Bundle` packets (a peer that does not say
    /// so gets every packet alone).
    pub const BUNDLES: u8 = 4;
    /// Eager, Rts: an untagged message (libfabric's FI_MSG): `tag` and
    /// `context` are zero and not matched; only untagged receives take it.
    pub const UNTAGGED: u8 = 8;
    /// Eager, Rts: `aux` holds 8 bytes of remote data for the receiver's
    /// completion (libfabric's fi_senddata).
    pub const REMOTE_DATA: u8 = 16;
}

/// Bytes before each packet in a `Bundle`: its length, little-endian.
pub const BUNDLE_ITEM_PREFIX: usize = 2;

/// Longest packet (header included) a `Bundle` carries: small messages,
/// where a transport message of their own costs more than copying them.
pub const BUNDLE_ITEM_MAX: usize = 1024;

/// The packets of a `Bundle`'s body, in order; stops at the first item that
/// does not fit the body (the caller counts it as malformed).
pub fn bundle_items(body: &[u8]) -> impl Iterator<Item = Result<&[u8], DecodeError>> {
    let mut rest = body;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some((len, after)) = rest.split_first_chunk::<BUNDLE_ITEM_PREFIX>() else {
            let n = rest.len();
            rest = &[];
            return Some(Err(DecodeError::Short(n)));
        };
        let len = u16::from_le_bytes(*len) as usize;
        match after.split_at_checked(len) {
            Some((item, next)) if len >= HEADER_LEN => {
                rest = next;
                Some(Ok(item))
            }
            _ => {
                rest = &[];
                Some(Err(DecodeError::Short(len.min(after.len()))))
            }
        }
    })
}

/// A decoded header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Packet kind.
    pub kind: Kind,
    /// [`flags`].
    pub flags: u8,
    /// Active-message handler id.
    pub am: u16,
    /// Eager credit (bytes) the sender returns to the receiver.
    pub credit: u32,
    /// Message tag.
    pub tag: u32,
    /// Message context.
    pub context: u32,
    /// Request, region or operation id, by kind.
    pub id: u64,
    /// Second id, by kind.
    pub aux: u64,
    /// Byte offset, by kind.
    pub offset: u64,
    /// Length, by kind (message length for Eager and Rts).
    pub len: u64,
}

/// Why a packet was not decoded.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than the header.
    #[error("packet of {0} bytes is shorter than the header")]
    Short(usize),
    /// Unknown kind.
    #[error("unknown packet kind {0}")]
    UnknownKind(u8),
}

impl Header {
    /// A header of `kind` with every other field zero.
    pub fn new(kind: Kind) -> Header {
        Header {
            kind,
            flags: 0,
            am: 0,
            credit: 0,
            tag: 0,
            context: 0,
            id: 0,
            aux: 0,
            offset: 0,
            len: 0,
        }
    }

    /// A tagged-message header.
    pub fn tagged(kind: Kind, tag: u32, context: u32) -> Header {
        Header {
            tag,
            context,
            ..Header::new(kind)
        }
    }

    /// Encode.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.kind as u8;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.am.to_le_bytes());
        b[4..8].copy_from_slice(&self.credit.to_le_bytes());
        b[8..12].copy_from_slice(&self.tag.to_le_bytes());
        b[12..16].copy_from_slice(&self.context.to_le_bytes());
        b[16..24].copy_from_slice(&self.id.to_le_bytes());
        b[24..32].copy_from_slice(&self.aux.to_le_bytes());
        b[32..40].copy_from_slice(&self.offset.to_le_bytes());
        b[40..48].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decode the header at the start of `packet`; the body follows it.
    pub fn decode(packet: &[u8]) -> Result<Header, DecodeError> {
        let b: &[u8; HEADER_LEN] = packet
            .get(..HEADER_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(DecodeError::Short(packet.len()))?;
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        Ok(Header {
            kind: Kind::from_u8(b[0]).ok_or(DecodeError::UnknownKind(b[0]))?,
            flags: b[1],
            am: u16_at(2),
            credit: u32_at(4),
            tag: u32_at(8),
            context: u32_at(12),
            id: u64_at(16),
            aux: u64_at(24),
            offset: u64_at(32),
            len: u64_at(40),
        })
    }

    /// The envelope of a message (`Eager`, `Rts`) from `source`.
    #[inline]
    pub fn envelope(&self, source: u32) -> Envelope {
        Envelope {
            source,
            tag: self.tag,
            context: self.context,
            untagged: self.flags & flags::UNTAGGED != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip() {
        let h = Header {
            kind: Kind::Cts,
            flags: flags::LAST,
            am: 0xbeef,
            credit: 123_456,
            tag: 7,
            context: 0xdead_beef,
            id: u64::MAX - 1,
            aux: 42,
            offset: 1 << 40,
            len: 65536,
        };
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        assert_eq!(Header::decode(&[2; 47]), Err(DecodeError::Short(47)));
        let mut b = h.encode();
        b[0] = 0;
        assert_eq!(Header::decode(&b), Err(DecodeError::UnknownKind(0)));
    }

    #[test]
    fn bundle_items_split_and_refuse_short_ones() {
        let a = Header::new(Kind::Am).encode();
        let mut body = Vec::new();
        for extra in [0usize, 3] {
            body.extend_from_slice(&((HEADER_LEN + extra) as u16).to_le_bytes());
            body.extend_from_slice(&a);
            body.resize(body.len() + extra, 7);
        }
        let items: Vec<_> = bundle_items(&body).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(items[1].as_ref().unwrap().len(), HEADER_LEN + 3);
        // Cut inside the second item: the first still decodes, then an error.
        let cut: Vec<_> = bundle_items(&body[..body.len() - 1]).collect();
        assert!(cut[0].is_ok() && cut[1].is_err() && cut.len() == 2);
        // An item shorter than a header is malformed.
        let tiny = [4u8, 0, 1, 2, 3, 4];
        assert!(bundle_items(&tiny).next().unwrap().is_err());
    }

    proptest! {
        #[test]
        fn bundle_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let total: usize = bundle_items(&bytes).map(|i| i.map_or(0, |i| i.len())).sum();
            prop_assert!(total <= bytes.len());
        }

        #[test]
        fn decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(h) = Header::decode(&bytes) {
                prop_assert_eq!(&h.encode()[..], &bytes[..HEADER_LEN]);
            }
        }
    }
}
