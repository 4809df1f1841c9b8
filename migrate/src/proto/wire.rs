//! The runtimes' packets (docs/MIGRATION.md, "Message formats"): little
//! endian, one kind byte first. `decode` never panics: a short or unknown
//! packet is an error the caller counts and drops.

use super::{HostId, Loc, TaskId};

/// Packet kinds.
mod kind {
    pub const INTER: u8 = 1;
    pub const LOCAL: u8 = 2;
    pub const MIGRATE: u8 = 3;
    pub const REFUSED: u8 = 4;
    pub const WHERE: u8 = 5;
    pub const HERE: u8 = 6;
    pub const ACK: u8 = 7;
}

/// INTER flag: the sender's runtime does not know the destination's
/// freshest location (the seed's flag).
pub const FLAG_STALE: u8 = 1;
/// INTER flag: a tombstone for a message a home refused; it carries no
/// payload and only moves the receiver's per-pair sequence on.
pub const FLAG_SKIP: u8 = 2;
/// INTER flag: acknowledgements ride along (n u16 + n ACK entries between
/// the header and the payload). Set by the encoder, never kept.
pub const FLAG_ACKS: u8 = 4;

/// A message between tasks, with both ends' locations as its carrier knew them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inter {
    pub flags: u8,
    /// Runtimes that forwarded it so far.
    pub hops: u8,
    /// Per-pair sequence number (1, 2, ... for each (src, dst)).
    pub seq: u64,
    pub src: TaskId,
    pub src_loc: Loc,
    pub dst: TaskId,
    pub dst_loc: Loc,
    pub payload: Vec<u8>,
    /// Acknowledgements for the next runtime, piggybacked on this packet
    /// (hop by hop: taken off where it arrives).
    pub acks: Vec<AckEntry>,
}

impl Inter {
    pub const HEADER: usize = 1 + 1 + 1 + 1 + 8 + 8 + 8 + 8 + 8;

    pub fn stale(&self) -> bool {
        self.flags & FLAG_STALE != 0
    }

    pub fn skip(&self) -> bool {
        self.flags & FLAG_SKIP != 0
    }
}

/// Why a message was refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RefuseReason {
    /// The home's buffer for tasks of unknown location was full.
    HomeFull = 1,
    /// The task was on a host that failed.
    TaskLost = 2,
    /// The message went around more runtimes than the hop limit allows.
    TooManyHops = 3,
}

/// A task in transit: everything that moves with it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TaskImage {
    pub id: TaskId,
    /// Migrations made so far, this one included.
    pub migrations: u32,
    /// The application's serialized state.
    pub app: Vec<u8>,
    /// Last sequence number sent to each correspondent.
    pub sent: Vec<(TaskId, u64)>,
    /// Last sequence number delivered from each correspondent.
    pub recvd: Vec<(TaskId, u64)>,
    /// Messages that arrived ahead of their turn (the resequencing queue).
    pub ahead: Vec<Inter>,
    /// Messages in order, not yet taken by the application (the mailbox).
    pub mailbox: Vec<(TaskId, Vec<u8>)>,
    /// When the migration started, on the sender's clock (ns; for figures).
    pub started_ns: u64,
    /// Messages this task sent and no receiver acknowledged yet, in send
    /// order per addressee: (addressee, seq, payload). They move with the
    /// sender so that it can send them again after a host failure.
    pub unacked: Vec<(TaskId, u64, Vec<u8>)>,
    /// Failed hosts its old host knew of (it resent for those already).
    pub dead: Vec<HostId>,
}

/// One pair's cumulative acknowledgement: `dst` has every message of the
/// pair `src -> dst` up to `seq` (delivered or skipped in order).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AckEntry {
    /// The sending task, and where the acknowledging runtime believes it is.
    pub src: TaskId,
    pub src_loc: Loc,
    pub dst: TaskId,
    pub seq: u64,
}

impl AckEntry {
    pub const LEN: usize = 8 + 8 + 8 + 8;
}

/// Everything runtimes send each other.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Packet {
    Inter(Inter),
    /// A task's location (the seed's LOCAL).
    Local {
        task: TaskId,
        loc: Loc,
    },
    Migrate(Box<TaskImage>),
    /// A message could not be delivered; goes to the sender task's runtime.
    Refused {
        reason: RefuseReason,
        src: TaskId,
        src_loc: Loc,
        dst: TaskId,
        seq: u64,
    },
    /// Locate-by-broadcast baseline: who knows where `task` is?
    Where {
        task: TaskId,
    },
    /// Locate-by-broadcast baseline: the answer (`None`: not known here).
    Here {
        task: TaskId,
        loc: Option<Loc>,
    },
    /// Cumulative per-pair acknowledgements, batched per sender host.
    Ack(Vec<AckEntry>),
}

/// A packet that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than its fields.
    #[error("truncated {what} packet ({len} bytes)")]
    Truncated {
        /// The packet kind.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// An unknown kind or reason byte.
    #[error("unknown packet kind or field value {0}")]
    Unknown(u8),
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn loc(&mut self, l: Loc) {
        self.u32(l.host);
        self.u32(l.fresh);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
    /// An INTER header (with its piggybacked ACKs when `acks`).
    fn inter(&mut self, m: &Inter, acks: bool) {
        let acks = acks && !m.acks.is_empty();
        self.u8(kind::INTER);
        self.u8(m.flags & !FLAG_ACKS | if acks { FLAG_ACKS } else { 0 });
        self.u8(m.hops);
        self.u8(0);
        self.u64(m.seq);
        self.u64(m.src.0);
        self.loc(m.src_loc);
        self.u64(m.dst.0);
        self.loc(m.dst_loc);
        if acks {
            self.0
                .extend_from_slice(&(m.acks.len() as u16).to_le_bytes());
            for e in &m.acks {
                self.ack(e);
            }
        }
    }
    fn ack(&mut self, e: &AckEntry) {
        self.u64(e.src.0);
        self.loc(e.src_loc);
        self.u64(e.dst.0);
        self.u64(e.seq);
    }
}

struct R<'a> {
    b: &'a [u8],
    what: &'static str,
    len: usize,
}

impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Truncated {
                what: self.what,
                len: self.len,
            });
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn task(&mut self) -> Result<TaskId, WireError> {
        Ok(TaskId(self.u64()?))
    }
    fn loc(&mut self) -> Result<Loc, WireError> {
        Ok(Loc {
            host: self.u32()? as HostId,
            fresh: self.u32()?,
        })
    }
    fn bytes(&mut self) -> Result<Vec<u8>, WireError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    /// A count of items each at least `min` bytes long (a bad count cannot
    /// make us allocate more than the packet could hold).
    fn count(&mut self, min: usize) -> Result<usize, WireError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.b.len() {
            return Err(WireError::Truncated {
                what: self.what,
                len: self.len,
            });
        }
        Ok(n)
    }
    fn ack(&mut self) -> Result<AckEntry, WireError> {
        Ok(AckEntry {
            src: self.task()?,
            src_loc: self.loc()?,
            dst: self.task()?,
            seq: self.u64()?,
        })
    }
    /// An INTER after its kind byte.
    fn inter(&mut self) -> Result<Inter, WireError> {
        let flags = self.u8()?;
        let hops = self.u8()?;
        self.u8()?;
        let mut m = Inter {
            flags: flags & !FLAG_ACKS,
            hops,
            seq: self.u64()?,
            src: self.task()?,
            src_loc: self.loc()?,
            dst: self.task()?,
            dst_loc: self.loc()?,
            payload: Vec::new(),
            acks: Vec::new(),
        };
        if flags & FLAG_ACKS != 0 {
            let n = u16::from_le_bytes(self.take(2)?.try_into().expect("2")) as usize;
            if n * AckEntry::LEN > self.b.len() {
                return Err(WireError::Truncated {
                    what: self.what,
                    len: self.len,
                });
            }
            for _ in 0..n {
                m.acks.push(self.ack()?);
            }
        }
        Ok(m)
    }
}

/// The destination and hop count of an INTER packet, without parsing the
/// rest (the simulator watches every packet).
pub fn peek_inter(b: &[u8]) -> Option<(TaskId, u8)> {
    if b.len() < Inter::HEADER || b[0] != kind::INTER {
        return None;
    }
    let dst = u64::from_le_bytes(b[28..36].try_into().ok()?);
    Some((TaskId(dst), b[2]))
}

impl Packet {
    /// The packet's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(64));
        match self {
            Packet::Inter(m) => {
                w.0.reserve(Inter::HEADER + m.payload.len() + 2 + m.acks.len() * AckEntry::LEN);
                w.inter(m, true);
                w.0.extend_from_slice(&m.payload);
            }
            Packet::Local { task, loc } => {
                w.u8(kind::LOCAL);
                w.u64(task.0);
                w.loc(*loc);
            }
            Packet::Migrate(t) => {
                w.u8(kind::MIGRATE);
                w.u64(t.id.0);
                w.u32(t.migrations);
                w.u64(t.started_ns);
                w.bytes(&t.app);
                for list in [&t.sent, &t.recvd] {
                    w.u32(list.len() as u32);
                    for (id, seq) in list.iter() {
                        w.u64(id.0);
                        w.u64(*seq);
                    }
                }
                w.u32(t.ahead.len() as u32);
                for m in &t.ahead {
                    w.inter(m, false);
                    w.bytes(&m.payload);
                }
                w.u32(t.mailbox.len() as u32);
                for (from, b) in &t.mailbox {
                    w.u64(from.0);
                    w.bytes(b);
                }
                w.u32(t.unacked.len() as u32);
                for (dst, seq, b) in &t.unacked {
                    w.u64(dst.0);
                    w.u64(*seq);
                    w.bytes(b);
                }
                w.u32(t.dead.len() as u32);
                for h in &t.dead {
                    w.u32(*h);
                }
            }
            Packet::Refused {
                reason,
                src,
                src_loc,
                dst,
                seq,
            } => {
                w.u8(kind::REFUSED);
                w.u8(*reason as u8);
                w.u64(src.0);
                w.loc(*src_loc);
                w.u64(dst.0);
                w.u64(*seq);
            }
            Packet::Where { task } => {
                w.u8(kind::WHERE);
                w.u64(task.0);
            }
            Packet::Here { task, loc } => {
                w.u8(kind::HERE);
                w.u64(task.0);
                w.u8(loc.is_some() as u8);
                w.loc(loc.unwrap_or_default());
            }
            Packet::Ack(entries) => {
                w.u8(kind::ACK);
                w.u32(entries.len() as u32);
                for e in entries {
                    w.ack(e);
                }
            }
        }
        w.0
    }

    /// Parse a packet; never panics.
    pub fn decode(b: &[u8]) -> Result<Packet, WireError> {
        let Some(&k) = b.first() else {
            return Err(WireError::Truncated {
                what: "empty",
                len: 0,
            });
        };
        let what = match k {
            kind::INTER => "INTER",
            kind::LOCAL => "LOCAL",
            kind::MIGRATE => "MIGRATE",
            kind::REFUSED => "REFUSED",
            kind::WHERE => "WHERE",
            kind::HERE => "HERE",
            kind::ACK => "ACK",
            other => return Err(WireError::Unknown(other)),
        };
        let mut r = R {
            b: &b[1..],
            what,
            len: b.len(),
        };
        Ok(match k {
            kind::INTER => {
                let mut m = r.inter()?;
                m.payload = r.b.to_vec();
                Packet::Inter(m)
            }
            kind::LOCAL => Packet::Local {
                task: r.task()?,
                loc: r.loc()?,
            },
            kind::MIGRATE => {
                let id = r.task()?;
                let migrations = r.u32()?;
                let started_ns = r.u64()?;
                let app = r.bytes()?;
                let mut lists = [Vec::new(), Vec::new()];
                for l in lists.iter_mut() {
                    let n = r.count(16)?;
                    for _ in 0..n {
                        l.push((r.task()?, r.u64()?));
                    }
                }
                let [sent, recvd] = lists;
                let n = r.count(Inter::HEADER)?;
                let mut ahead = Vec::with_capacity(n);
                for _ in 0..n {
                    let k = r.u8()?;
                    if k != kind::INTER {
                        return Err(WireError::Unknown(k));
                    }
                    let mut m = r.inter()?;
                    m.payload = r.bytes()?;
                    ahead.push(m);
                }
                let n = r.count(12)?;
                let mut mailbox = Vec::with_capacity(n);
                for _ in 0..n {
                    mailbox.push((r.task()?, r.bytes()?));
                }
                let n = r.count(20)?;
                let mut unacked = Vec::with_capacity(n);
                for _ in 0..n {
                    unacked.push((r.task()?, r.u64()?, r.bytes()?));
                }
                let n = r.count(4)?;
                let mut dead = Vec::with_capacity(n);
                for _ in 0..n {
                    dead.push(r.u32()?);
                }
                Packet::Migrate(Box::new(TaskImage {
                    id,
                    migrations,
                    app,
                    sent,
                    recvd,
                    ahead,
                    mailbox,
                    started_ns,
                    unacked,
                    dead,
                }))
            }
            kind::REFUSED => {
                let reason = match r.u8()? {
                    1 => RefuseReason::HomeFull,
                    2 => RefuseReason::TaskLost,
                    3 => RefuseReason::TooManyHops,
                    other => return Err(WireError::Unknown(other)),
                };
                Packet::Refused {
                    reason,
                    src: r.task()?,
                    src_loc: r.loc()?,
                    dst: r.task()?,
                    seq: r.u64()?,
                }
            }
            kind::WHERE => Packet::Where { task: r.task()? },
            kind::ACK => {
                let n = r.count(AckEntry::LEN)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(r.ack()?);
                }
                Packet::Ack(v)
            }
            _ => {
                let task = r.task()?;
                let some = r.u8()? != 0;
                let loc = r.loc()?;
                Packet::Here {
                    task,
                    loc: some.then_some(loc),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inter() -> Inter {
        Inter {
            flags: FLAG_STALE,
            hops: 2,
            seq: 7,
            src: TaskId(1),
            src_loc: Loc { host: 3, fresh: 2 },
            dst: TaskId(9),
            dst_loc: Loc { host: 0, fresh: 0 },
            payload: b"hello".to_vec(),
            acks: Vec::new(),
        }
    }

    #[test]
    fn inter_bytes() {
        let b = Packet::Inter(inter()).encode();
        assert_eq!(b.len(), Inter::HEADER + 5);
        assert_eq!(&b[..4], &[1, 1, 2, 0]);
        assert_eq!(&b[4..12], &7u64.to_le_bytes());
        assert_eq!(&b[Inter::HEADER..], b"hello");
        assert_eq!(Packet::decode(&b).unwrap(), Packet::Inter(inter()));
    }

    #[test]
    fn every_kind_round_trips_and_truncation_is_an_error() {
        let packets = vec![
            Packet::Inter(inter()),
            Packet::Inter(Inter {
                acks: vec![AckEntry {
                    src: TaskId(9),
                    src_loc: Loc { host: 3, fresh: 2 },
                    dst: TaskId(1),
                    seq: 5,
                }],
                ..inter()
            }),
            Packet::Local {
                task: TaskId(5),
                loc: Loc { host: 1, fresh: 4 },
            },
            Packet::Migrate(Box::new(TaskImage {
                id: TaskId(9),
                migrations: 3,
                app: vec![1, 2, 3],
                sent: vec![(TaskId(1), 4)],
                recvd: vec![(TaskId(2), 5), (TaskId(3), 1)],
                ahead: vec![inter()],
                mailbox: vec![(TaskId(1), b"x".to_vec())],
                started_ns: 42,
                unacked: vec![(TaskId(2), 6, b"yz".to_vec())],
                dead: vec![3],
            })),
            Packet::Ack(vec![
                AckEntry {
                    src: TaskId(1),
                    src_loc: Loc { host: 2, fresh: 3 },
                    dst: TaskId(4),
                    seq: 17,
                },
                AckEntry {
                    src: TaskId(5),
                    src_loc: Loc { host: 0, fresh: 1 },
                    dst: TaskId(4),
                    seq: 2,
                },
            ]),
            Packet::Refused {
                reason: RefuseReason::TaskLost,
                src: TaskId(1),
                src_loc: Loc { host: 2, fresh: 1 },
                dst: TaskId(2),
                seq: 3,
            },
            Packet::Where { task: TaskId(8) },
            Packet::Here {
                task: TaskId(8),
                loc: Some(Loc { host: 1, fresh: 2 }),
            },
            Packet::Here {
                task: TaskId(8),
                loc: None,
            },
        ];
        for p in packets {
            let b = p.encode();
            assert_eq!(Packet::decode(&b).unwrap(), p);
            // INTER's payload is the rest of the packet: any cut of the
            // header fails, and so does any cut of the others.
            let min = if matches!(p, Packet::Inter(_)) {
                Inter::HEADER
            } else {
                b.len()
            };
            for n in 0..min {
                assert!(Packet::decode(&b[..n]).is_err(), "{p:?} cut at {n}");
            }
        }
        assert_eq!(Packet::decode(&[0x77]), Err(WireError::Unknown(0x77)));
    }

    #[test]
    fn huge_counts_are_refused_without_allocating() {
        let mut b = vec![kind::MIGRATE];
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes()); // app
        b.extend_from_slice(&u32::MAX.to_le_bytes()); // sent count
        assert!(matches!(
            Packet::decode(&b),
            Err(WireError::Truncated { .. })
        ));
    }
}
