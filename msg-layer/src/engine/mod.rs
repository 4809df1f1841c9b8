//! The protocol engine, sans I/O: peers, requests, matching, eager and
//! rendezvous, active messages and RMA, as a state machine.
//!
//! Like `llc_stack::proto`, the engine does no I/O and owns no transport. It
//! is fed what the transport reported ([`Engine::handle_event`]) and the
//! application's operations (`isend`, `irecv`, `put`, ...), and it hands out
//! the packets to send through [`Engine::transmit`], to any [`Outlet`]: the
//! transport in [`crate::Endpoint`], a recorder in the unit tests. Results
//! are taken per request ([`Engine::take`]); active-message deliveries and
//! peer failures are collected for the endpoint to hand to callbacks after
//! its lock is released. The engine keeps no timers: the transport's own
//! (retransmission, keepalive) end a silent peer with a `Closed` event.
//!
//! Per peer, everything we send goes through one FIFO queue, so messages
//! leave in the order they were posted (MPI's non-overtaking rule needs it):
//! a message waits at the head while the peer's eager credit or the
//! transport's send buffer is short, and the ones behind it wait too.
//!
//! One file per protocol: [`peers`] (hello, credit, the send queues,
//! failure), [`p2p`] (matching, eager, rendezvous), [`am`] (active
//! messages), [`rma`] (registered memory, put, get); [`dispatch`] routes
//! each incoming packet to its protocol.

use std::sync::Arc;

use bytes::Bytes;
use llc_stack::rng::Rng;
use rustc_hash::FxHashMap;

use crate::addr::Addr;
use crate::config::Config;
use crate::error::Error;
use crate::matching::{Envelope, Matcher, PeerId, PostId};
use crate::placement::{DataPlacement, RecvBuffer, Regions, Registry};
use crate::rma::MemoryRegion;
use crate::transport::{ConnId, SendError, Transport, TransportError, TransportEvent};
use crate::wire::Header;

mod am;
mod dispatch;
mod p2p;
mod packet;
mod peers;
pub(crate) use packet::SHORT_PREFIX;
mod fabric;
mod loopback;
mod multi;
mod reqs;
mod rma;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_fabric;
#[cfg(test)]
mod tests_loopback;

pub use fabric::Claimed;
pub use multi::{MultiPiece, MultiRecv};
pub(crate) use p2p::MsgHead;
use packet::Out;
pub(crate) use peers::AddPeer;
use peers::{ConnRole, Peer};

/// What a completed request tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The peer: the sender of a received message, the target otherwise.
    pub source: PeerId,
    /// Tag (0 for RMA and active messages).
    pub tag: u32,
    /// Context (0 for RMA and active messages).
    pub context: u32,
    /// Bytes moved: a truncating receive's buffer length when the message
    /// was longer ([`crate::Endpoint::irecv_into`]).
    pub len: usize,
    /// The remote data the sender attached (libfabric's CQ data), for a
    /// received message; `None` otherwise.
    pub data: Option<u64>,
    /// The message's full length as the sender sent it (`len` for
    /// everything but a truncated receive).
    pub msg_len: usize,
}

impl Status {
    /// The status of a message with envelope `env` received whole.
    #[inline(always)]
    pub(crate) fn received(env: &Envelope, len: usize, data: Option<u64>) -> Status {
        Status {
            source: env.source,
            tag: env.tag,
            context: env.context,
            len,
            data,
            msg_len: len,
        }
    }

    /// The status of an active message or RMA operation with `peer` (no
    /// tag, no context).
    pub(crate) fn one_sided(peer: PeerId, len: usize) -> Status {
        Status {
            source: peer,
            tag: 0,
            context: 0,
            len,
            data: None,
            msg_len: len,
        }
    }
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
    /// `Bundle` packets sent: small packets that queued behind each other
    /// to one peer, in one transport message.
    pub bundles_sent: u64,
    /// Packets that left inside a bundle.
    pub bundled: u64,
    /// Pieces of peers' puts the transport wrote straight into regions.
    pub put_pieces_placed: u64,
    /// Bytes of peers' puts copied into regions by the engine.
    pub put_bytes_copied: u64,
    /// Pieces of our gets' replies the transport wrote straight into their
    /// destinations.
    pub get_pieces_placed: u64,
    /// Bytes of our regions copied out to answer peers' gets (a region
    /// that cannot lend its bytes).
    pub get_bytes_copied: u64,
}

impl Stats {
    /// Every counter with its name.
    pub fn counters(&self) -> [(&'static str, u64); 17] {
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
            ("bundles_sent", self.bundles_sent),
            ("bundled", self.bundled),
            ("put_pieces_placed", self.put_pieces_placed),
            ("put_bytes_copied", self.put_bytes_copied),
            ("get_pieces_placed", self.get_pieces_placed),
            ("get_bytes_copied", self.get_bytes_copied),
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
    /// The whole packet; the payload starts at [`crate::wire::HEADER_LEN`].
    pub packet: Vec<u8>,
}

/// Where the engine hands the packets it sends: the transport, or a test's
/// recorder. It may push back ([`SendError::WouldBlock`]); the packet then
/// stays at the head of its peer's queue for the next [`Engine::transmit`].
pub(crate) trait Outlet {
    /// Queue the packet `head ++ body` on `conn`.
    fn send(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError>;

    /// Queue a packet whose sender waits for its release (see
    /// [`Transport::send_awaited`]).
    fn send_awaited(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        self.send(conn, head, body)
    }

    /// Open a connection to `to` (see [`Transport::connect`]).
    fn connect(&mut self, to: &Addr) -> Result<ConnId, TransportError>;

    /// See [`Transport::peers_accept`].
    fn peers_accept(&self) -> bool;

    /// See [`Transport::bundle_len`].
    fn bundle_len(&self) -> usize {
        0
    }
}

impl<T: Transport + ?Sized> Outlet for T {
    #[inline(always)]
    fn send(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        Transport::send(self, conn, head, body)
    }

    #[inline(always)]
    fn send_awaited(&mut self, conn: ConnId, head: &[u8], body: Bytes) -> Result<(), SendError> {
        Transport::send_awaited(self, conn, head, body)
    }

    fn connect(&mut self, to: &Addr) -> Result<ConnId, TransportError> {
        Transport::connect(self, to)
    }

    fn peers_accept(&self) -> bool {
        Transport::peers_accept(self)
    }

    fn bundle_len(&self) -> usize {
        Transport::bundle_len(self)
    }
}

/// A message waiting for its receive.
#[derive(Debug)]
enum Unexpected {
    /// Eager payload: the whole packet, payload after the header.
    Eager(Vec<u8>),
    /// Rendezvous announcement: the sender's request.
    Rts { sreq: u64, remote_data: Option<u64> },
}

impl Unexpected {
    /// The remote data the message carries.
    fn remote_data(&self) -> Option<u64> {
        match self {
            Unexpected::Eager(packet) => Header::decode(packet)
                .ok()
                .and_then(|h| p2p::remote_data(&h)),
            Unexpected::Rts { remote_data, .. } => *remote_data,
        }
    }
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
    /// A receive into the caller's memory posted and not matched: a
    /// longer message fills it and is cut (`Endpoint::irecv_into`).
    PostedInto {
        dst: GetDst,
        post: PostId,
    },
    /// A multi-receive buffer (libfabric's FI_MULTI_RECV), posted until
    /// released or cancelled.
    Multi(Box<multi::MultiState>),
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
    /// A get whose data goes straight into the caller's memory.
    GetInto {
        /// Also in the placement hook's table of get destinations.
        dst: GetDst,
        status: Status,
    },
    Done(Result<Completion, Error>),
}

/// Where a get into the caller's memory writes.
#[derive(Clone)]
pub(crate) struct GetDst(pub Arc<dyn MemoryRegion>);

impl std::fmt::Debug for GetDst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GetDst({} bytes)", self.0.len())
    }
}

/// Multi-receive activity, readable without the engine's lock: a caller
/// that polls its multi-receive buffers after every round of progress
/// looks at them only when something may have changed.
#[derive(Debug, Default)]
pub struct MultiActivity {
    /// Bumped whenever a buffer gains a piece (or its last one).
    pub(crate) pieces: std::sync::atomic::AtomicU64,
    /// Rendezvous messages are landing in a buffer: their pieces appear
    /// only when a caller takes the buffer's pieces.
    pub(crate) subs: std::sync::atomic::AtomicBool,
}

impl MultiActivity {
    /// A value that changes whenever there may be new pieces to take;
    /// `None` while there always may be (rendezvous messages in flight
    /// into a buffer).
    pub fn stamp(&self) -> Option<u64> {
        use std::sync::atomic::Ordering;
        (!self.subs.load(Ordering::Acquire)).then(|| self.pieces.load(Ordering::Acquire))
    }
}

/// The engine of one endpoint.
pub(crate) struct Engine {
    cfg: Config,
    local: Addr,
    peers: Vec<Peer>,
    /// Peers [`Engine::transmit`] must visit: packets wait in their queue
    /// (new, or held back for credit or transport room), or credit we owe
    /// them grew. The others need nothing, so an idle call costs the same
    /// with 2 peers or 2,000.
    attention: Vec<PeerId>,
    /// The list being worked through (kept for its allocation).
    attention_work: Vec<PeerId>,
    /// Packets for one connection outside any peer's queue (a `Hello`
    /// answered on a second connection of the same peer).
    direct: Vec<(ConnId, Out)>,
    by_addr: FxHashMap<Addr, PeerId>,
    by_conn: FxHashMap<ConnId, ConnRole>,
    /// The connection the last packet came on and its peer, found without
    /// hashing when the next one comes on it too (cleared whenever
    /// `by_conn` changes).
    last_conn: Option<(ConnId, PeerId)>,
    matcher: Matcher<u64, Unexpected>,
    reqs: reqs::ReqTable,
    /// Registered regions (shared with the placement hook, which writes
    /// peers' puts into them).
    regions: Regions,
    /// Receive buffers the transport may fill directly.
    placements: Registry,
    /// Destinations of our gets, by request: the transport writes the
    /// replies' pieces straight into them.
    gets: Regions,
    rng: Rng,
    /// Bytes of unexpected messages buffered, as credit counts them.
    unexpected_bytes: usize,
    /// Packets handed to the outlet, ever.
    handed: u64,
    pub(crate) am_deliveries: Vec<AmDelivery>,
    pub(crate) failures: Vec<PeerFailure>,
    /// Packets whose payload was copied out, for the endpoint to give back
    /// to the transport ([`Transport::recycle`]).
    pub(crate) spent: Vec<Vec<u8>>,
    /// Requests nobody will take (libfabric's inject): forgotten once done.
    detached: Vec<u64>,
    /// Rendezvous messages landing in a multi-receive buffer: (their
    /// receive, the buffer's request, their offset in it).
    multi_subs: Vec<(u64, u64, usize)>,
    /// What a caller polling multi-receive buffers reads without the lock
    /// ([`MultiActivity`]).
    pub(crate) multi_activity: Arc<MultiActivity>,
    /// This endpoint as its own peer, once something sent to itself.
    own: Option<PeerId>,
    stats: Stats,
}

impl Engine {
    /// The engine of the endpoint at `local`.
    pub fn new(local: Addr, cfg: Config) -> Result<Self, Error> {
        cfg.validate()?;
        Ok(Engine {
            local,
            placements: Registry::default(),
            gets: Regions::default(),
            cfg,
            peers: Vec::new(),
            attention: Vec::new(),
            attention_work: Vec::new(),
            direct: Vec::new(),
            by_addr: FxHashMap::default(),
            by_conn: FxHashMap::default(),
            last_conn: None,
            matcher: Matcher::new(),
            reqs: reqs::ReqTable::default(),
            regions: Regions::default(),
            rng: Rng::from_entropy(),
            unexpected_bytes: 0,
            handed: 0,
            am_deliveries: Vec::new(),
            failures: Vec::new(),
            spent: Vec::new(),
            detached: Vec::new(),
            own: None,
            multi_subs: Vec::new(),
            multi_activity: Arc::default(),
            stats: Stats::default(),
        })
    }

    /// What the transport consults to write rendezvous data straight into
    /// matched receive buffers ([`Transport::set_placement`]).
    pub fn placement(&self) -> DataPlacement {
        DataPlacement {
            recvs: self.placements.clone(),
            regions: self.regions.clone(),
            gets: self.gets.clone(),
        }
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

    /// Packets handed to the outlet so far: a caller that sees it grow
    /// knows the transport has something new to put on the wire.
    pub fn handed(&self) -> u64 {
        self.handed
    }

    // ----- requests -----

    #[inline(always)]
    fn new_req(&mut self, st: ReqState) -> u64 {
        self.reqs.alloc(st)
    }

    fn finish(&mut self, r: u64, res: Result<Completion, Error>) {
        if let Some(st) = self.reqs.get_mut(&r) {
            if !matches!(st, ReqState::Done(_)) {
                *st = ReqState::Done(res);
            }
        }
    }

    /// A request born failed (bad peer, too long): reported by wait, like
    /// any other failure.
    fn failed_req(&mut self, e: Error) -> u64 {
        self.new_req(ReqState::Done(Err(e)))
    }

    /// The result of `r` if it is complete (and forget it).
    #[inline(always)]
    pub fn take(&mut self, r: u64) -> Option<Result<Completion, Error>> {
        self.reqs.take_done(r)
    }

    pub fn is_done(&self, r: u64) -> bool {
        !matches!(self.reqs.get(&r), Some(st) if !matches!(st, ReqState::Done(_)))
    }

    // ----- what goes out -----

    /// Hand `o` every packet that may leave now: the peers on the attention
    /// list, as far as their credit and `o` allow, and a credit return to
    /// each peer owed a good part of its window with nothing else to carry
    /// it. What stays keeps its peer on the list.
    #[inline]
    pub fn transmit<O: Outlet + ?Sized>(&mut self, o: &mut O) {
        // Most calls (every idle progress pass) find nothing to do.
        if !self.attention.is_empty() || !self.direct.is_empty() {
            self.transmit_queued(o);
        }
    }

    fn transmit_queued<O: Outlet + ?Sized>(&mut self, o: &mut O) {
        if !self.direct.is_empty() {
            for (c, out) in std::mem::take(&mut self.direct) {
                let _ = o.send(c, &out.hdr.encode(), out.body);
            }
        }
        if self.attention.is_empty() {
            return;
        }
        let mut work = std::mem::take(&mut self.attention_work);
        std::mem::swap(&mut work, &mut self.attention);
        for &p in &work {
            self.peers[p as usize].marked = false;
        }
        for &p in &work {
            if !self.peers[p as usize].queue.is_empty() {
                self.flush_peer(p, o);
            }
            self.maybe_return_credit(p, o);
        }
        work.clear();
        self.attention_work = work;
    }

    /// Active messages or peer failures wait for the application's
    /// callbacks.
    pub fn has_callbacks(&self) -> bool {
        !self.am_deliveries.is_empty() || !self.failures.is_empty()
    }

    /// True when nothing waits to be handed to the transport.
    pub fn queues_empty(&self) -> bool {
        self.direct.is_empty() && self.peers.iter().all(|p| p.queue.is_empty())
    }

    /// The connection each peer sends on (to close them all).
    pub fn connections(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.peers.iter().filter_map(|p| p.conn)
    }

    // ----- what comes in -----

    /// Take in what the transport reported.
    pub fn handle_event(&mut self, ev: TransportEvent) {
        match ev {
            TransportEvent::Connected(_) => {}
            TransportEvent::Accepted(c) => {
                // Already ours if we sent on it before it was up (the peer
                // opened it as we tried to: `send_queued`).
                self.by_conn.entry(c).or_insert(ConnRole::Unidentified);
            }
            TransportEvent::Message(c, packet) => self.handle_packet(c, packet),
            TransportEvent::Closed(c, reason) => self.connection_closed(c, reason),
        }
    }

    fn bad_packet(&mut self, why: &dyn std::fmt::Display) {
        self.stats.bad_packets += 1;
        tracing::debug!(%why, "message-layer packet dropped");
    }
}
