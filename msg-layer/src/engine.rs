//! The protocol engine: peers, requests, matching, eager and rendezvous,
//! active messages and RMA over one [`Transport`].
//!
//! It is single-threaded and never blocks; [`crate::Endpoint`] puts it behind
//! a lock and decides who drives it (the waiting caller or the progress
//! thread). Active-message deliveries and peer failures are collected here
//! and handed to their callbacks by the endpoint after the lock is released,
//! so a callback may call the endpoint again.
//!
//! Per peer, everything we send goes through one FIFO queue, so messages
//! leave in the order they were posted (MPI's non-overtaking rule needs it):
//! a message waits at the head while the peer's eager credit or the
//! transport's send buffer is short, and the ones behind it wait too.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use std::sync::Arc;

use bytes::Bytes;
use llc_stack::rng::Rng;

use crate::addr::Addr;
use crate::config::{Config, INITIAL_CREDIT};
use crate::error::Error;
use crate::matching::{Matched, Matcher, Pattern, PeerId, PostId, Posting, Source};
use crate::placement::{DataPlacement, RecvBuffer, Registry};
use crate::rma::{MemoryRegion, RegionKey};
use crate::transport::{ConnId, SendError, Transport, TransportEvent};
use crate::wire::{flags, DecodeError, Header, Kind, HEADER_LEN};

/// The reason a peer's requests fail with when it closed its connection in
/// order (it finished, e.g. MPI_Finalize), as opposed to a failure.
pub const PEER_CLOSED: &str = "the peer closed the connection";

/// What a completed request tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The peer: the sender of a received message, the target otherwise.
    pub source: PeerId,
    /// Tag (0 for RMA and active messages).
    pub tag: u32,
    /// Context (0 for RMA and active messages).
    pub context: u32,
    /// Bytes moved.
    pub len: usize,
}

/// A completed request: its status and, for receives and gets, the buffer
/// (cut to the received length).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// What was moved, from or to whom.
    pub status: Status,
    /// The receive or get buffer.
    pub data: Option<Vec<u8>>,
}

/// Counters of one endpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Eager messages sent.
    pub eager_sent: u64,
    /// Rendezvous messages sent.
    pub rndv_sent: u64,
    /// Messages received (eager and rendezvous).
    pub received: u64,
    /// Messages that arrived before their receive was posted.
    pub unexpected: u64,
    /// Rendezvous bytes the transport wrote straight into receive buffers.
    pub rndv_bytes_placed: u64,
    /// Rendezvous bytes copied into receive buffers by the engine.
    pub rndv_bytes_copied: u64,
    /// Times a message waited at the head of a peer's queue for credit.
    pub credit_stalls: u64,
    /// Times the transport's send buffer was full.
    pub transport_stalls: u64,
    /// Active messages delivered to handlers.
    pub am_delivered: u64,
    /// Packets dropped as malformed or out of place (counted, never fatal).
    pub bad_packets: u64,
    /// Peers that failed.
    pub peers_failed: u64,
}

impl Stats {
    /// Every counter with its name.
    pub fn counters(&self) -> [(&'static str, u64); 11] {
        [
            ("eager_sent", self.eager_sent),
            ("rndv_sent", self.rndv_sent),
            ("received", self.received),
            ("unexpected", self.unexpected),
            ("rndv_bytes_placed", self.rndv_bytes_placed),
            ("rndv_bytes_copied", self.rndv_bytes_copied),
            ("credit_stalls", self.credit_stalls),
            ("transport_stalls", self.transport_stalls),
            ("am_delivered", self.am_delivered),
            ("bad_packets", self.bad_packets),
            ("peers_failed", self.peers_failed),
        ]
    }
}

/// A peer's failure, for the endpoint's failure callback.
#[derive(Clone, Debug)]
pub(crate) struct PeerFailure {
    pub peer: PeerId,
    pub error: Error,
}

/// An active message for a handler.
#[derive(Debug)]
pub(crate) struct AmDelivery {
    pub handler: u16,
    pub peer: PeerId,
    /// The whole packet; the payload starts at [`HEADER_LEN`].
    pub packet: Vec<u8>,
}

#[derive(Debug, PartialEq, Eq)]
enum PeerState {
    /// We wait for the peer's `Hello` (it connects to us).
    Awaiting,
    /// Connection opened or identified: traffic may flow.
    Ready,
    /// Failed; the reason.
    Failed(String),
}

#[derive(Debug)]
struct Out {
    hdr: Header,
    body: Bytes,
    /// Bytes sent between the header and `body` (usually none): a layer
    /// above's own header, so that a body it lends is sent without being
    /// copied behind it first.
    prefix: Bytes,
    /// Eager credit this packet uses.
    cost: u32,
    /// Request complete once the packet is handed to the transport.
    completes: Option<u64>,
}

#[derive(Debug)]
struct Peer {
    addr: Option<Addr>,
    /// The connection we send on.
    conn: Option<ConnId>,
    state: PeerState,
    /// Eager credit we may still use towards the peer.
    credit: u64,
    /// Credit we owe the peer (its messages we consumed).
    owed: u64,
    /// Bytes of its unexpected messages we buffer, as credit counts them.
    unexpected: usize,
    queue: VecDeque<Out>,
    /// On the engine's attention list.
    marked: bool,
}

#[derive(Debug)]
enum ConnRole {
    /// Accepted; the peer has not said who it is yet.
    Unidentified,
    Peer(PeerId),
}

/// A message waiting for its receive.
#[derive(Debug)]
enum Unexpected {
    /// Eager payload: the whole packet, payload after the header.
    Eager(Vec<u8>),
    /// Rendezvous announcement: the sender's request.
    Rts { sreq: u64 },
}

#[derive(Debug)]
enum ReqState {
    /// A send queued, or a rendezvous send waiting for its CTS.
    Send {
        peer: PeerId,
        /// Rendezvous data, kept until the receiver is ready.
        rndv: Option<Bytes>,
        status: Status,
    },
    /// A receive posted and not matched.
    Posted {
        buf: Vec<u8>,
        post: PostId,
    },
    /// A rendezvous receive matched; data arriving.
    Receiving {
        /// Also in the placement registry, for the transport to fill.
        buf: Arc<RecvBuffer>,
        status: Status,
        /// The sender's request, told when all data is placed.
        sreq: u64,
    },
    /// A put waiting for its acknowledgement.
    Put {
        status: Status,
    },
    /// A get waiting for its data.
    Get {
        buf: Vec<u8>,
        status: Status,
        received: usize,
    },
    Done(Result<Completion, Error>),
}

/// The engine of one endpoint.
pub(crate) struct Engine<T: Transport> {
    t: T,
    cfg: Config,
    local: Addr,
    peers: Vec<Peer>,
    /// Peers `progress` must visit: packets wait in their queue (for credit
    /// or transport room), or credit we owe them grew. The others need
    /// nothing, so an idle call costs the same with 2 peers or 2,000.
    attention: Vec<PeerId>,
    /// The list being worked through (kept for its allocation).
    attention_work: Vec<PeerId>,
    by_addr: FxHashMap<Addr, PeerId>,
    by_conn: FxHashMap<ConnId, ConnRole>,
    matcher: Matcher<u64, Unexpected>,
    reqs: FxHashMap<u64, ReqState>,
    next_req: u64,
    regions: FxHashMap<u64, Arc<dyn MemoryRegion>>,
    /// Receive buffers the transport may fill directly.
    placements: Registry,
    rng: Rng,
    events: Vec<TransportEvent>,
    /// Bytes of unexpected messages buffered, as credit counts them.
    unexpected_bytes: usize,
    /// Packets handed to the transport, ever.
    handed: u64,
    pub(crate) am_deliveries: Vec<AmDelivery>,
    pub(crate) failures: Vec<PeerFailure>,
    stats: Stats,
}

impl<T: Transport> Engine<T> {
    pub fn new(mut t: T, cfg: Config) -> Result<Self, Error> {
        cfg.validate()?;
        let placements = Registry::default();
        t.set_placement(Box::new(DataPlacement(placements.clone())));
        Ok(Engine {
            local: t.local_addr(),
            t,
            placements,
            cfg,
            peers: Vec::new(),
            attention: Vec::new(),
            attention_work: Vec::new(),
            by_addr: FxHashMap::default(),
            by_conn: FxHashMap::default(),
            matcher: Matcher::new(),
            reqs: FxHashMap::default(),
            next_req: 1,
            regions: FxHashMap::default(),
            rng: Rng::from_entropy(),
            events: Vec::new(),
            unexpected_bytes: 0,
            handed: 0,
            am_deliveries: Vec::new(),
            failures: Vec::new(),
            stats: Stats::default(),
        })
    }

    pub fn transport(&self) -> &T {
        &self.t
    }

    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.t
    }

    pub fn local_addr(&self) -> Addr {
        self.local
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn unexpected_bytes(&self) -> usize {
        self.unexpected_bytes
    }

    pub fn peer_addr(&self, p: PeerId) -> Option<Addr> {
        self.peers.get(p as usize).and_then(|p| p.addr)
    }

    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    // ----- peers -----

    fn new_peer(&mut self, addr: Option<Addr>, state: PeerState) -> PeerId {
        let id = self.peers.len() as PeerId;
        self.peers.push(Peer {
            addr,
            conn: None,
            state,
            credit: INITIAL_CREDIT as u64,
            owed: 0,
            unexpected: 0,
            queue: VecDeque::new(),
            marked: false,
        });
        if let Some(a) = addr {
            self.by_addr.insert(a, id);
        }
        id
    }

    fn hello(&self) -> Out {
        let mut hdr = Header::new(Kind::Hello);
        hdr.len = self.cfg.eager_window as u64;
        Out {
            hdr,
            body: Bytes::from(self.local.to_string()),
            prefix: Bytes::new(),
            cost: 0,
            completes: None,
        }
    }

    /// Open a connection to `addr` (this side initiates).
    pub fn connect(&mut self, addr: Addr) -> Result<PeerId, Error> {
        if let Some(&p) = self.by_addr.get(&addr) {
            if self.peers[p as usize].conn.is_some() {
                return Ok(p);
            }
        }
        let conn = self.t.connect(&addr)?;
        let p = match self.by_addr.get(&addr) {
            Some(&p) => p,
            None => self.new_peer(Some(addr), PeerState::Ready),
        };
        self.by_conn.insert(conn, ConnRole::Peer(p));
        let hello = self.hello();
        let peer = &mut self.peers[p as usize];
        peer.conn = Some(conn);
        peer.state = PeerState::Ready;
        peer.queue.push_front(hello);
        self.flush_peer(p);
        Ok(p)
    }

    /// Know a peer by address, MPI style: of each pair, the endpoint with the
    /// smaller address connects and the other waits for it.
    pub fn add_peer(&mut self, addr: Addr) -> Result<PeerId, Error> {
        if let Some(&p) = self.by_addr.get(&addr) {
            return Ok(p);
        }
        if self.local < addr {
            self.connect(addr)
        } else if self.local == addr {
            Err(Error::Transport(
                crate::transport::TransportError::Address {
                    addr: addr.to_string(),
                    reason: "that is this endpoint's own address (use a loopback path instead)"
                        .into(),
                },
            ))
        } else {
            Ok(self.new_peer(Some(addr), PeerState::Awaiting))
        }
    }

    fn fail_peer(&mut self, p: PeerId, reason: String) {
        let peer = &mut self.peers[p as usize];
        if let PeerState::Failed(_) = peer.state {
            return;
        }
        tracing::debug!(peer = p, %reason, "peer failed");
        peer.state = PeerState::Failed(reason.clone());
        self.stats.peers_failed += 1;
        let err = Error::PeerFailed { peer: p, reason };
        let queued: Vec<Out> = peer.queue.drain(..).collect();
        for o in queued {
            if let Some(r) = o.completes {
                self.finish(r, Err(err.clone()));
            }
        }
        self.unexpected_bytes -= std::mem::take(&mut self.peers[p as usize].unexpected);
        for r in self.matcher.remove_peer(p) {
            self.finish(r, Err(err.clone()));
        }
        let doomed: Vec<u64> = self
            .reqs
            .iter()
            .filter(|(_, st)| match st {
                ReqState::Send { peer, .. } => *peer == p,
                ReqState::Receiving { status, .. }
                | ReqState::Put { status }
                | ReqState::Get { status, .. } => status.source == p,
                ReqState::Posted { .. } | ReqState::Done(_) => false,
            })
            .map(|(&r, _)| r)
            .collect();
        for r in doomed {
            self.placements
                .lock()
                .expect("placement registry")
                .remove(&r);
            self.finish(r, Err(err.clone()));
        }
        self.failures.push(PeerFailure {
            peer: p,
            error: err,
        });
    }

    fn peer_error(&self, p: PeerId) -> Option<Error> {
        match self.peers.get(p as usize) {
            None => Some(Error::UnknownPeer(p)),
            Some(Peer {
                state: PeerState::Failed(reason),
                ..
            }) => Some(Error::PeerFailed {
                peer: p,
                reason: reason.clone(),
            }),
            Some(_) => None,
        }
    }

    // ----- requests -----

    fn new_req(&mut self, st: ReqState) -> u64 {
        let r = self.next_req;
        self.next_req += 1;
        self.reqs.insert(r, st);
        r
    }

    fn finish(&mut self, r: u64, res: Result<Completion, Error>) {
        if let Some(st) = self.reqs.get_mut(&r) {
            if !matches!(st, ReqState::Done(_)) {
                *st = ReqState::Done(res);
            }
        }
    }

    /// The result of `r` if it is complete (and forget it).
    pub fn take(&mut self, r: u64) -> Option<Result<Completion, Error>> {
        match self.reqs.get(&r) {
            None => Some(Err(Error::UnknownRequest(r))),
            Some(ReqState::Done(_)) => match self.reqs.remove(&r) {
                Some(ReqState::Done(res)) => Some(res),
                _ => unreachable!("checked above"),
            },
            Some(_) => None,
        }
    }

    pub fn is_done(&self, r: u64) -> bool {
        !matches!(self.reqs.get(&r), Some(st) if !matches!(st, ReqState::Done(_)))
    }

    fn push(&mut self, p: PeerId, out: Out) {
        self.peers[p as usize].queue.push_back(out);
        self.flush_peer(p);
    }

    /// A request born failed (bad peer, too long): reported by wait, like
    /// any other failure.
    fn failed_req(&mut self, e: Error) -> u64 {
        self.new_req(ReqState::Done(Err(e)))
    }

    pub fn isend(&mut self, p: PeerId, tag: u32, context: u32, data: Bytes) -> u64 {
        if let Some(e) = self.peer_error(p) {
            return self.failed_req(e);
        }
        let status = Status {
            source: p,
            tag,
            context,
            len: data.len(),
        };
        if data.len() <= self.cfg.eager_limit {
            let r = self.new_req(ReqState::Send {
                peer: p,
                rndv: None,
                status,
            });
            let mut hdr = Header::tagged(Kind::Eager, tag, context);
            hdr.len = data.len() as u64;
            let cost = (HEADER_LEN + data.len()) as u32;
            self.stats.eager_sent += 1;
            self.push(
                p,
                Out {
                    hdr,
                    body: data,
                    prefix: Bytes::new(),
                    cost,
                    completes: Some(r),
                },
            );
            r
        } else {
            let len = data.len() as u64;
            let r = self.new_req(ReqState::Send {
                peer: p,
                rndv: Some(data),
                status,
            });
            let mut hdr = Header::tagged(Kind::Rts, tag, context);
            hdr.id = r;
            hdr.len = len;
            self.stats.rndv_sent += 1;
            self.push(
                p,
                Out {
                    hdr,
                    body: Bytes::new(),
                    prefix: Bytes::new(),
                    cost: HEADER_LEN as u32,
                    completes: None,
                },
            );
            r
        }
    }

    pub fn irecv(&mut self, pattern: Pattern, buf: Vec<u8>) -> u64 {
        if let Source::Peer(p) = pattern.source {
            if let Some(e) = self.peer_error(p) {
                return self.failed_req(e);
            }
        }
        let r = self.next_req;
        self.next_req += 1;
        match self.matcher.post(pattern, r) {
            Posting::Queued(post) => {
                self.reqs.insert(r, ReqState::Posted { buf, post });
            }
            Posting::Matched(m) => {
                let cost = match m.msg {
                    Unexpected::Eager(_) => HEADER_LEN + m.len,
                    Unexpected::Rts { .. } => HEADER_LEN,
                };
                self.peers[m.env.source as usize].unexpected -= cost;
                self.unexpected_bytes -= cost;
                self.reqs.insert(
                    r,
                    ReqState::Posted {
                        buf,
                        post: PostId(0),
                    },
                );
                self.matched(m);
            }
        }
        r
    }

    /// Cancel a posted receive that has not matched. True when cancelled.
    pub fn cancel(&mut self, r: u64) -> bool {
        let Some(ReqState::Posted { post, .. }) = self.reqs.get(&r) else {
            return false;
        };
        if self.matcher.cancel(*post).is_some() {
            self.finish(r, Err(Error::Cancelled));
            true
        } else {
            false
        }
    }

    pub fn iprobe(&self, pattern: &Pattern) -> Option<Status> {
        self.matcher.probe(pattern).map(|(env, len)| Status {
            source: env.source,
            tag: env.tag,
            context: env.context,
            len,
        })
    }

    /// A receive met its message.
    fn matched(&mut self, m: Matched<u64, Unexpected>) {
        let Matched {
            recv,
            env,
            len,
            msg,
        } = m;
        let Some(ReqState::Posted { buf, .. }) = self.reqs.remove(&recv) else {
            return;
        };
        let status = Status {
            source: env.source,
            tag: env.tag,
            context: env.context,
            len,
        };
        self.stats.received += 1;
        match msg {
            Unexpected::Eager(packet) => {
                self.return_credit(env.source, (HEADER_LEN + len) as u64);
                let mut buf = buf;
                let payload = &packet[HEADER_LEN..];
                let res = if len <= buf.len() {
                    buf.truncate(len);
                    buf.copy_from_slice(payload);
                    Ok(Completion {
                        status,
                        data: Some(buf),
                    })
                } else {
                    Err(Error::Truncated {
                        message_len: len,
                        buffer_len: buf.len(),
                    })
                };
                self.reqs.insert(recv, ReqState::Done(res));
            }
            Unexpected::Rts { sreq } => {
                self.return_credit(env.source, HEADER_LEN as u64);
                let mut hdr = Header::new(Kind::Cts);
                hdr.id = sreq;
                hdr.aux = recv;
                hdr.len = len as u64;
                if len > buf.len() {
                    hdr.flags |= flags::REFUSED;
                    self.reqs.insert(
                        recv,
                        ReqState::Done(Err(Error::Truncated {
                            message_len: len,
                            buffer_len: buf.len(),
                        })),
                    );
                } else {
                    let mut buf = buf;
                    buf.truncate(len);
                    let buf = Arc::new(RecvBuffer::new(buf));
                    self.placements
                        .lock()
                        .expect("placement registry")
                        .insert(recv, buf.clone());
                    self.reqs
                        .insert(recv, ReqState::Receiving { buf, status, sreq });
                }
                self.push(
                    env.source,
                    Out {
                        hdr,
                        body: Bytes::new(),
                        prefix: Bytes::new(),
                        cost: 0,
                        completes: None,
                    },
                );
            }
        }
    }

    fn return_credit(&mut self, p: PeerId, n: u64) {
        self.peers[p as usize].owed += n;
        self.mark(p);
    }

    /// Put `p` on the attention list for the next `progress`.
    fn mark(&mut self, p: PeerId) {
        let peer = &mut self.peers[p as usize];
        if !peer.marked {
            peer.marked = true;
            self.attention.push(p);
        }
    }

    // ----- active messages and RMA -----

    pub fn am_send(&mut self, p: PeerId, handler: u16, data: Bytes) -> u64 {
        if let Some(e) = self.peer_error(p) {
            return self.failed_req(e);
        }
        let status = Status {
            source: p,
            tag: 0,
            context: 0,
            len: data.len(),
        };
        let r = self.new_req(ReqState::Send {
            peer: p,
            rndv: None,
            status,
        });
        let mut hdr = Header::new(Kind::Am);
        hdr.am = handler;
        self.push(
            p,
            Out {
                hdr,
                body: data,
                prefix: Bytes::new(),
                cost: 0,
                completes: Some(r),
            },
        );
        r
    }

    /// True when a message to `p` would be handed to the transport at once
    /// instead of waiting in the peer's queue (not yet connected, or the
    /// transport pushing back, or earlier messages waiting for credit).
    pub fn sends_now(&self, p: PeerId) -> bool {
        self.peers
            .get(p as usize)
            .is_some_and(|peer| peer.state == PeerState::Ready && peer.queue.is_empty())
    }

    /// An active message with no request to take: for callers (the MPI
    /// shim) that learn of failures from the failure callback and would
    /// otherwise have to collect one completion per message.
    pub fn am_post(&mut self, p: PeerId, handler: u16, data: Bytes) -> Result<(), Error> {
        self.am_post_parts(p, handler, Bytes::new(), data)
    }

    /// [`Engine::am_post`] of the message `prefix ++ body`, with `body`
    /// handed to the transport as it is (not copied behind the prefix).
    pub fn am_post_parts(
        &mut self,
        p: PeerId,
        handler: u16,
        prefix: Bytes,
        body: Bytes,
    ) -> Result<(), Error> {
        if let Some(e) = self.peer_error(p) {
            return Err(e);
        }
        let mut hdr = Header::new(Kind::Am);
        hdr.am = handler;
        self.push(
            p,
            Out {
                hdr,
                body,
                prefix,
                cost: 0,
                completes: None,
            },
        );
        Ok(())
    }

    pub fn register(&mut self, region: Arc<dyn MemoryRegion>) -> RegionKey {
        loop {
            let k = self.rng.next_u64();
            if k != 0 && !self.regions.contains_key(&k) {
                self.regions.insert(k, region);
                return RegionKey(k);
            }
        }
    }

    pub fn deregister(&mut self, key: RegionKey) -> bool {
        self.regions.remove(&key.0).is_some()
    }

    pub fn put(&mut self, p: PeerId, key: RegionKey, offset: u64, data: Bytes) -> u64 {
        if let Some(e) = self.peer_error(p) {
            return self.failed_req(e);
        }
        let status = Status {
            source: p,
            tag: 0,
            context: 0,
            len: data.len(),
        };
        let r = self.new_req(ReqState::Put { status });
        let total = data.len() as u64;
        self.push_pieces(p, &data, |off, _, last| {
            let mut hdr = Header::new(Kind::Put);
            hdr.id = key.0;
            hdr.aux = r;
            hdr.offset = offset + off;
            hdr.len = total;
            if last {
                hdr.flags |= flags::LAST;
            }
            hdr
        });
        r
    }

    /// Queue `data` to `p` in `rndv_chunk` pieces (at least one, so that an
    /// empty operation is still answered), each under the header `piece`
    /// makes from its offset, length and whether it is the last; then send
    /// what the transport takes.
    fn push_pieces(&mut self, p: PeerId, data: &Bytes, piece: impl Fn(u64, usize, bool) -> Header) {
        let chunk = self.cfg.rndv_chunk;
        let queue = &mut self.peers[p as usize].queue;
        let mut off = 0;
        loop {
            let n = (data.len() - off).min(chunk);
            let last = off + n == data.len();
            queue.push_back(Out {
                hdr: piece(off as u64, n, last),
                body: data.slice(off..off + n),
                prefix: Bytes::new(),
                cost: 0,
                completes: None,
            });
            off += n;
            if last {
                break;
            }
        }
        self.flush_peer(p);
    }

    pub fn get(&mut self, p: PeerId, key: RegionKey, offset: u64, buf: Vec<u8>) -> u64 {
        if let Some(e) = self.peer_error(p) {
            return self.failed_req(e);
        }
        let status = Status {
            source: p,
            tag: 0,
            context: 0,
            len: buf.len(),
        };
        let len = buf.len() as u64;
        let r = self.new_req(ReqState::Get {
            buf,
            status,
            received: 0,
        });
        let mut hdr = Header::new(Kind::Get);
        hdr.id = key.0;
        hdr.aux = r;
        hdr.offset = offset;
        hdr.len = len;
        self.push(
            p,
            Out {
                hdr,
                body: Bytes::new(),
                prefix: Bytes::new(),
                cost: 0,
                completes: None,
            },
        );
        r
    }

    /// The region `key` if `offset..offset + len` lies inside it.
    fn region_range(
        &self,
        key: u64,
        offset: u64,
        len: u64,
    ) -> Result<Arc<dyn MemoryRegion>, String> {
        let region = self
            .regions
            .get(&key)
            .ok_or_else(|| format!("no region with key {key:#x}"))?;
        let end = offset.checked_add(len).ok_or("range overflows")?;
        if end > region.len() as u64 {
            return Err(format!(
                "bytes {offset}..{end} lie outside the region of {} bytes",
                region.len()
            ));
        }
        Ok(region.clone())
    }

    // ----- progress -----

    /// One pass: the transport's progress, then every event handled, then
    /// every peer queue moved as far as credit and transport allow.
    ///
    /// What the events made us send goes out in a second transport pass
    /// before returning, so a caller that finds its request complete and
    /// stops making progress leaves nothing waiting in the transport.
    pub fn progress(&mut self) -> Result<bool, Error> {
        let mut moved = false;
        for _ in 0..2 {
            let handed_before = self.handed;
            let mut events = std::mem::take(&mut self.events);
            moved |= self.t.progress(&mut events)?;
            for ev in events.drain(..) {
                self.handle_event(ev);
            }
            self.events = events;
            let mut work = std::mem::take(&mut self.attention_work);
            std::mem::swap(&mut work, &mut self.attention);
            for &p in &work {
                self.peers[p as usize].marked = false;
            }
            for &p in &work {
                if !self.peers[p as usize].queue.is_empty() {
                    self.flush_peer(p);
                }
                self.maybe_return_credit(p);
            }
            work.clear();
            self.attention_work = work;
            if self.handed == handed_before {
                break;
            }
        }
        Ok(moved)
    }

    /// Active messages or peer failures wait for the application's
    /// callbacks.
    /// Give a delivered packet's buffer back to the transport.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.t.recycle(buf);
    }

    pub fn has_callbacks(&self) -> bool {
        !self.am_deliveries.is_empty() || !self.failures.is_empty()
    }

    /// True when nothing we sent waits in our queues or unacknowledged in
    /// the transport.
    pub fn flushed(&self) -> bool {
        self.queues_empty() && self.t.flushed()
    }

    /// Send an explicit credit return when a good part of the window is owed
    /// and no other packet is about to carry it.
    fn maybe_return_credit(&mut self, p: PeerId) {
        let peer = &self.peers[p as usize];
        if peer.owed >= (self.cfg.eager_window / 4) as u64
            && peer.queue.is_empty()
            && peer.state == PeerState::Ready
        {
            self.push(
                p,
                Out {
                    hdr: Header::new(Kind::Credit),
                    body: Bytes::new(),
                    prefix: Bytes::new(),
                    cost: 0,
                    completes: None,
                },
            );
        }
    }

    /// Send what the queue of `p` holds while credit and the transport
    /// allow; what stays keeps `p` on the attention list.
    fn flush_peer(&mut self, p: PeerId) {
        self.send_queued(p);
        if !self.peers[p as usize].queue.is_empty() {
            self.mark(p);
        }
    }

    fn send_queued(&mut self, p: PeerId) {
        let peer = &mut self.peers[p as usize];
        let Some(conn) = peer.conn else {
            return;
        };
        if peer.state != PeerState::Ready {
            return;
        }
        while let Some(out) = peer.queue.front_mut() {
            if out.cost as u64 > peer.credit {
                self.stats.credit_stalls += 1;
                break;
            }
            let give = peer.owed.min(u32::MAX as u64);
            out.hdr.credit = give as u32;
            let sent = if out.prefix.is_empty() {
                self.t.send(conn, &out.hdr.encode(), out.body.clone())
            } else {
                let mut head = Vec::with_capacity(HEADER_LEN + out.prefix.len());
                head.extend_from_slice(&out.hdr.encode());
                head.extend_from_slice(&out.prefix);
                self.t.send(conn, &head, out.body.clone())
            };
            match sent {
                Ok(()) => {
                    self.handed += 1;
                    peer.credit -= out.cost as u64;
                    peer.owed -= give;
                    let out = peer.queue.pop_front().expect("front exists");
                    if let Some(r) = out.completes {
                        if let Some(ReqState::Send { status, .. }) = self.reqs.remove(&r) {
                            self.reqs
                                .insert(r, ReqState::Done(Ok(Completion { status, data: None })));
                        }
                    }
                }
                Err(SendError::WouldBlock) => {
                    self.stats.transport_stalls += 1;
                    break;
                }
                Err(SendError::Closed) => break, // the Closed event fails the peer
                Err(SendError::TooLong { len, max }) => {
                    let out = peer.queue.pop_front().expect("front exists");
                    if let Some(r) = out.completes {
                        self.finish(r, Err(Error::TooLong { len, max }));
                    }
                    return self.send_queued(p);
                }
            }
        }
    }

    fn handle_event(&mut self, ev: TransportEvent) {
        match ev {
            TransportEvent::Connected(_) => {}
            TransportEvent::Accepted(c) => {
                self.by_conn.insert(c, ConnRole::Unidentified);
            }
            TransportEvent::Message(c, packet) => self.handle_packet(c, packet),
            TransportEvent::Closed(c, reason) => {
                if let Some(ConnRole::Peer(p)) = self.by_conn.remove(&c) {
                    let peer = &self.peers[p as usize];
                    // A second connection from a peer (both sides connected)
                    // closing leaves the one we send on.
                    if peer.conn == Some(c) || peer.conn.is_none() {
                        let reason = reason
                            .map(|e| e.to_string())
                            .unwrap_or_else(|| PEER_CLOSED.into());
                        self.fail_peer(p, reason);
                    }
                }
            }
        }
    }

    fn bad_packet(&mut self, why: &dyn std::fmt::Display) {
        self.stats.bad_packets += 1;
        tracing::debug!(%why, "message-layer packet dropped");
    }

    fn handle_packet(&mut self, c: ConnId, packet: Vec<u8>) {
        let hdr = match Header::decode(&packet) {
            Ok(h) => h,
            Err(e @ (DecodeError::Short(_) | DecodeError::UnknownKind(_))) => {
                return self.bad_packet(&e)
            }
        };
        let p = match self.by_conn.get(&c) {
            Some(ConnRole::Peer(p)) => *p,
            Some(ConnRole::Unidentified) if hdr.kind == Kind::Hello => {
                return self.handle_hello(c, &hdr, &packet[HEADER_LEN..]);
            }
            _ => return self.bad_packet(&format!("{:?} before Hello", hdr.kind)),
        };
        let body_len = packet.len() - HEADER_LEN;
        self.peers[p as usize].credit += hdr.credit as u64;
        match hdr.kind {
            Kind::Hello => {
                // The answer to ours: the window the peer grants.
                let extra = hdr.len.saturating_sub(INITIAL_CREDIT as u64);
                self.peers[p as usize].credit += extra;
            }
            Kind::Credit => {}
            Kind::Eager => {
                if hdr.len != body_len as u64 {
                    return self.bad_packet(&"eager length mismatch");
                }
                let env = hdr.envelope(p);
                match self
                    .matcher
                    .arrive(env, body_len, Unexpected::Eager(packet))
                {
                    Some(m) => self.matched(m),
                    None => {
                        self.stats.unexpected += 1;
                        self.unexpected_bytes += HEADER_LEN + body_len;
                        self.peers[p as usize].unexpected += HEADER_LEN + body_len;
                    }
                }
            }
            Kind::Rts => {
                let env = hdr.envelope(p);
                let len = usize::try_from(hdr.len).unwrap_or(usize::MAX);
                match self
                    .matcher
                    .arrive(env, len, Unexpected::Rts { sreq: hdr.id })
                {
                    Some(m) => self.matched(m),
                    None => {
                        self.stats.unexpected += 1;
                        self.unexpected_bytes += HEADER_LEN;
                        self.peers[p as usize].unexpected += HEADER_LEN;
                    }
                }
            }
            Kind::Cts => self.handle_cts(p, &hdr),
            Kind::Done => match self.reqs.get(&hdr.id) {
                Some(ReqState::Send {
                    peer, rndv: None, ..
                }) if *peer == p => {
                    let Some(ReqState::Send { status, .. }) = self.reqs.remove(&hdr.id) else {
                        unreachable!("matched above")
                    };
                    self.reqs.insert(
                        hdr.id,
                        ReqState::Done(Ok(Completion { status, data: None })),
                    );
                }
                _ => self.bad_packet(&"Done for no rendezvous send"),
            },
            Kind::Data => {
                let Some(ReqState::Receiving { buf, status, .. }) = self.reqs.get(&hdr.id) else {
                    return self.bad_packet(&"data for no receive");
                };
                if status.source != p {
                    return self.bad_packet(&"data from another peer");
                }
                // An empty body: the transport placed it already.
                let off = usize::try_from(hdr.offset).unwrap_or(usize::MAX);
                if body_len > 0 && !buf.write(off, &packet[HEADER_LEN..]) {
                    return self.bad_packet(&"data outside the receive");
                }
                if body_len > 0 {
                    self.stats.rndv_bytes_copied += body_len as u64;
                } else {
                    self.stats.rndv_bytes_placed += hdr.len;
                }
                if buf.is_full() {
                    let Some(ReqState::Receiving { buf, status, sreq }) = self.reqs.remove(&hdr.id)
                    else {
                        unreachable!("matched above")
                    };
                    self.placements
                        .lock()
                        .expect("placement registry")
                        .remove(&hdr.id);
                    let buf = buf.into_vec();
                    let mut done = Header::new(Kind::Done);
                    done.id = sreq;
                    self.push(
                        p,
                        Out {
                            hdr: done,
                            body: Bytes::new(),
                            prefix: Bytes::new(),
                            cost: 0,
                            completes: None,
                        },
                    );
                    self.reqs.insert(
                        hdr.id,
                        ReqState::Done(Ok(Completion {
                            status,
                            data: Some(buf),
                        })),
                    );
                }
            }
            Kind::Am => {
                self.stats.am_delivered += 1;
                self.am_deliveries.push(AmDelivery {
                    handler: hdr.am,
                    peer: p,
                    packet,
                });
            }
            Kind::Put => {
                let res = self.region_range(hdr.id, hdr.offset, body_len as u64);
                let refused = match &res {
                    Ok(region) => {
                        region.write(hdr.offset as usize, &packet[HEADER_LEN..]);
                        false
                    }
                    Err(_) => true,
                };
                if hdr.flags & flags::LAST != 0 || refused {
                    let mut ack = Header::new(Kind::PutAck);
                    ack.aux = hdr.aux;
                    if refused {
                        ack.flags |= flags::REFUSED;
                    }
                    let body = res.err().map(Bytes::from).unwrap_or_default();
                    self.push(
                        p,
                        Out {
                            hdr: ack,
                            body,
                            prefix: Bytes::new(),
                            cost: 0,
                            completes: None,
                        },
                    );
                }
            }
            Kind::PutAck => {
                if let Some(ReqState::Put { .. }) = self.reqs.get(&hdr.aux) {
                    let Some(ReqState::Put { status }) = self.reqs.remove(&hdr.aux) else {
                        unreachable!("checked above")
                    };
                    let res = if hdr.flags & flags::REFUSED != 0 {
                        Err(Error::RmaRefused(
                            String::from_utf8_lossy(&packet[HEADER_LEN..]).into_owned(),
                        ))
                    } else {
                        Ok(Completion { status, data: None })
                    };
                    self.reqs.insert(hdr.aux, ReqState::Done(res));
                }
                // A second ack of a refused multi-packet put is ignored.
            }
            Kind::Get => self.handle_get(p, &hdr),
            Kind::GetReply => self.handle_get_reply(p, &hdr, &packet),
        }
    }

    fn handle_hello(&mut self, c: ConnId, hdr: &Header, body: &[u8]) {
        let addr: Option<Addr> = std::str::from_utf8(body).ok().and_then(|s| s.parse().ok());
        let Some(addr) = addr else {
            return self.bad_packet(&"Hello without a valid address");
        };
        let p = match self.by_addr.get(&addr) {
            Some(&p) => p,
            None => self.new_peer(Some(addr), PeerState::Awaiting),
        };
        self.by_conn.insert(c, ConnRole::Peer(p));
        let hello = self.hello();
        let peer = &mut self.peers[p as usize];
        if let PeerState::Failed(_) = peer.state {
            // A restarted peer: a fresh start under the same id.
            peer.credit = INITIAL_CREDIT as u64;
            peer.owed = 0;
            peer.conn = None;
        }
        peer.credit += hdr.len.saturating_sub(INITIAL_CREDIT as u64);
        if peer.conn.is_none() {
            peer.conn = Some(c);
            peer.state = PeerState::Ready;
            peer.queue.push_front(hello);
        } else {
            // Both sides connected: answer on this connection too so the
            // peer learns our window, and keep sending on ours.
            let hdr = hello.hdr.encode();
            let _ = self.t.send(c, &hdr, hello.body);
        }
        self.flush_peer(p);
    }

    fn handle_cts(&mut self, p: PeerId, hdr: &Header) {
        let Some(ReqState::Send {
            peer,
            rndv: Some(_),
            ..
        }) = self.reqs.get(&hdr.id)
        else {
            return self.bad_packet(&"CTS for no rendezvous send");
        };
        if *peer != p {
            return self.bad_packet(&"CTS from another peer");
        }
        let Some(ReqState::Send {
            rndv: Some(data),
            status,
            ..
        }) = self.reqs.remove(&hdr.id)
        else {
            unreachable!("checked above")
        };
        if hdr.flags & flags::REFUSED != 0 || data.is_empty() {
            // The receiver's buffer was too short: it reports the truncation;
            // the send is complete (MPI semantics).
            self.reqs.insert(
                hdr.id,
                ReqState::Done(Ok(Completion { status, data: None })),
            );
            return;
        }
        self.reqs.insert(
            hdr.id,
            ReqState::Send {
                peer: p,
                rndv: None,
                status,
            },
        );
        // `data` is not empty here: empty messages go eagerly.
        let rreq = hdr.aux;
        self.push_pieces(p, &data, |off, n, _| {
            let mut h = Header::new(Kind::Data);
            h.id = rreq;
            h.offset = off;
            h.len = n as u64;
            h
        });
    }

    fn handle_get(&mut self, p: PeerId, hdr: &Header) {
        let mut reply = Header::new(Kind::GetReply);
        reply.aux = hdr.aux;
        let region = match self.region_range(hdr.id, hdr.offset, hdr.len) {
            Ok(r) => r,
            Err(why) => {
                reply.flags |= flags::REFUSED | flags::LAST;
                return self.push(
                    p,
                    Out {
                        hdr: reply,
                        body: Bytes::from(why),
                        prefix: Bytes::new(),
                        cost: 0,
                        completes: None,
                    },
                );
            }
        };
        let mut data = vec![0u8; hdr.len as usize];
        region.read(hdr.offset as usize, &mut data);
        let data = Bytes::from(data);
        self.push_pieces(p, &data, |off, _, last| {
            let mut h = reply;
            h.offset = off;
            if last {
                h.flags |= flags::LAST;
            }
            h
        });
    }

    fn handle_get_reply(&mut self, p: PeerId, hdr: &Header, packet: &[u8]) {
        let Some(ReqState::Get {
            buf,
            status,
            received,
        }) = self.reqs.get_mut(&hdr.aux)
        else {
            return self.bad_packet(&"get reply for no get");
        };
        let body = &packet[HEADER_LEN..];
        if status.source != p {
            return self.bad_packet(&"get reply from another peer");
        }
        if hdr.flags & flags::REFUSED != 0 {
            let why = String::from_utf8_lossy(body).into_owned();
            return self.finish(hdr.aux, Err(Error::RmaRefused(why)));
        }
        let off = hdr.offset as usize;
        if off.checked_add(body.len()).is_none_or(|e| e > buf.len()) {
            return self.bad_packet(&"get reply outside the buffer");
        }
        buf[off..off + body.len()].copy_from_slice(body);
        *received += body.len();
        if hdr.flags & flags::LAST != 0 {
            let Some(ReqState::Get { buf, status, .. }) = self.reqs.remove(&hdr.aux) else {
                unreachable!("matched above")
            };
            self.reqs.insert(
                hdr.aux,
                ReqState::Done(Ok(Completion {
                    status,
                    data: Some(buf),
                })),
            );
        }
    }

    /// Close every connection (messages queued are still delivered).
    pub fn close_all(&mut self) {
        for peer in &self.peers {
            if let Some(c) = peer.conn {
                self.t.close(c);
            }
        }
    }

    /// True when nothing waits to be handed to the transport.
    pub fn queues_empty(&self) -> bool {
        self.peers.iter().all(|p| p.queue.is_empty())
    }
}
