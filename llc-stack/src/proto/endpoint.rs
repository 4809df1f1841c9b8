//! All connections of one interface and SAP, as a sans-IO state machine.
//!
//! The endpoint parses every received frame once, answers LLC TEST and XID
//! commands, accepts SYNs on listening ports, matches other frames to a
//! connection by (peer MAC, peer port, local port) and checks both cookies
//! before the connection sees the frame. Everything it drops is counted by
//! reason in [`EndpointStats`].
//!
//! Call order for a driver, each round: `handle_frame` for every received
//! frame, `handle_timeout` when `poll_timeout` has passed, then take events
//! with `poll_event` (the application may `send` in reaction), then
//! `poll_transmit` until it returns `None`. Taking events before transmitting
//! lets replies carry the acknowledgement instead of a separate ACK frame.

use std::cmp::Reverse;
use std::collections::binary_heap::PeekMut;
use std::collections::{BinaryHeap, HashSet, VecDeque};

use bytes::Bytes;

use super::buf_pool::BufPool;
use super::config::Config;
pub use super::conn_table::ConnHandle;
use super::conn_table::ConnTable;
use super::connection::{ConnStats, Connection, Event, SendError, State};
use super::error::ConnectionError;
use super::placement::Placement;
use crate::rng::Rng;
use crate::time::Instant;
use crate::wire::{
    self, Addresses, Body, Command, FrameType, MacAddr, Tail, TransportHeader, WireError,
};

/// Frames dropped, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DropStats {
    /// Shorter than their headers.
    pub truncated: u64,
    /// 802.3 length field larger than the frame.
    pub bad_length: u64,
    /// Not an LLC frame (another EtherType).
    pub not_llc: u64,
    /// LLC frames for another SAP.
    pub other_sap: u64,
    /// LLC control fields we do not handle.
    pub unsupported_control: u64,
    /// Unknown transport version.
    pub bad_version: u64,
    /// Too many SACK blocks.
    pub bad_sack_count: u64,
    /// CRC32C mismatch.
    pub bad_checksum: u64,
    /// Transport frames addressed to another MAC.
    pub not_for_us: u64,
    /// Unknown transport frame type.
    pub unknown_type: u64,
    /// No connection matches (answered with RESET).
    pub no_connection: u64,
    /// Cookies do not match the connection (stale incarnation or forgery).
    pub stale_cookie: u64,
    /// SYN to a port nobody listens on (answered with RESET).
    pub no_listener: u64,
    /// SYN refused by the half-open or connection limit.
    pub syn_limit: u64,
    /// TEST/XID answer or RESET not sent because the control queue was full.
    pub control_queue_full: u64,
    /// TEST/XID responses nobody asked this endpoint for.
    pub unsolicited_response: u64,
    /// Sequenced frames beyond the credit granted (forged, or a broken peer).
    pub beyond_window: u64,
    /// Sequenced frames far behind the receive window (forged or replayed).
    pub out_of_window: u64,
    /// A key is configured and the frame carries no authentication tag.
    pub auth_missing: u64,
    /// A key is configured and the frame's tag is wrong: forged, or the
    /// peer has another key.
    pub auth_failed: u64,
    /// No key is configured and the frame carries an authentication tag
    /// (the peer has a key we lack).
    pub auth_unexpected: u64,
}

impl DropStats {
    fn count_wire(&mut self, e: WireError) {
        let c = match e {
            WireError::Truncated => &mut self.truncated,
            WireError::BadLength => &mut self.bad_length,
            WireError::NotLlc => &mut self.not_llc,
            WireError::OtherSap => &mut self.other_sap,
            WireError::UnsupportedControl => &mut self.unsupported_control,
            WireError::BadVersion => &mut self.bad_version,
            WireError::BadSackCount => &mut self.bad_sack_count,
            WireError::BadChecksum => &mut self.bad_checksum,
            WireError::BufferTooSmall => &mut self.truncated,
        };
        *c += 1;
    }

    /// Every dropped frame.
    pub fn total(&self) -> u64 {
        self.counters().iter().map(|(_, n)| n).sum()
    }

    /// Every reason with its count, in declaration order (for tools that
    /// print or serialise them).
    pub fn counters(&self) -> [(&'static str, u64); 21] {
        [
            ("truncated", self.truncated),
            ("bad_length", self.bad_length),
            ("not_llc", self.not_llc),
            ("other_sap", self.other_sap),
            ("unsupported_control", self.unsupported_control),
            ("bad_version", self.bad_version),
            ("bad_sack_count", self.bad_sack_count),
            ("bad_checksum", self.bad_checksum),
            ("not_for_us", self.not_for_us),
            ("unknown_type", self.unknown_type),
            ("no_connection", self.no_connection),
            ("stale_cookie", self.stale_cookie),
            ("no_listener", self.no_listener),
            ("syn_limit", self.syn_limit),
            ("control_queue_full", self.control_queue_full),
            ("unsolicited_response", self.unsolicited_response),
            ("beyond_window", self.beyond_window),
            ("out_of_window", self.out_of_window),
            ("auth_missing", self.auth_missing),
            ("auth_failed", self.auth_failed),
            ("auth_unexpected", self.auth_unexpected),
        ]
    }
}

/// Endpoint counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndpointStats {
    /// Frames handed to `handle_frame`.
    pub rx_frames: u64,
    /// Frames produced by `poll_transmit`.
    pub tx_frames: u64,
    /// TEST commands answered.
    pub test_answered: u64,
    /// XID commands answered.
    pub xid_answered: u64,
    /// RESET frames sent.
    pub resets_sent: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Dropped frames by reason.
    pub dropped: DropStats,
}

impl EndpointStats {
    /// Every counter except the drop reasons (see [`DropStats::counters`])
    /// with its name.
    pub fn counters(&self) -> [(&'static str, u64); 6] {
        [
            ("rx_frames", self.rx_frames),
            ("tx_frames", self.tx_frames),
            ("test_answered", self.test_answered),
            ("xid_answered", self.xid_answered),
            ("resets_sent", self.resets_sent),
            ("accepted", self.accepted),
        ]
    }
}

/// Why `connect` failed at once.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// The endpoint holds its maximum number of connections.
    #[error("too many connections (limit {0})")]
    TooManyConnections(usize),
    /// A connection with these ports to this peer exists already.
    #[error("a connection from local port {local} to {peer} port {remote} exists already")]
    InUse {
        /// Local port.
        local: u16,
        /// Peer MAC.
        peer: MacAddr,
        /// Peer port.
        remote: u16,
    },
    /// No ephemeral port is free.
    #[error("no free local port")]
    NoFreePort,
    /// Group MACs cannot be connected to.
    #[error("cannot connect to a group address {0}")]
    GroupAddress(MacAddr),
}

/// A frame the endpoint itself must send (not owned by a connection).
#[derive(Debug)]
enum ControlFrame {
    Llc {
        addr: Addresses,
        response: bool,
        command: Command,
        info: Vec<u8>,
    },
    Reset {
        addr: Addresses,
        header: TransportHeader,
    },
}

/// Most endpoint-level frames (TEST/XID answers, RESETs) waiting to be sent;
/// beyond this they are dropped and counted, so a flood cannot grow memory.
const CONTROL_QUEUE_LIMIT: usize = 256;
/// First bytes of the information field of a reachability probe (a TEST
/// command): "LLCR", then the prober's port (big-endian) and a nonce. A
/// TEST answer copies the field, so devices shared by several endpoints
/// steer the answer by that port (PROTOCOL.md 3.13).
pub const PROBE_MAGIC: [u8; 4] = *b"LLCR";

/// First ephemeral port.
const EPHEMERAL_START: u16 = 49152;
/// Smallest credit window a connection is given when many share the
/// receive budget: below it a connection could hardly make progress (and
/// the budget's 1/8 headroom absorbs what such floors overcommit).
const MIN_WINDOW_SHARE: u32 = 4;

#[derive(Debug)]
struct Entry {
    conn: Connection,
    inbound: bool,
    announced: bool,
    peer: MacAddr,
    /// In the transmit queue ([`Endpoint::ready`]).
    queued: bool,
    /// In [`Endpoint::changed`]: its deadline may have moved.
    changed: bool,
    /// The deadline this connection has in the timer queue, if any: the
    /// queue's other entries for it are stale. At or before the
    /// connection's own next deadline (armed lazily, see
    /// [`Endpoint::update_timers`]). In nanoseconds, [`NOT_ARMED`] for none
    /// (no deadline is there: it is the end of time), so the checks on every
    /// change are integer comparisons.
    armed: u64,
}

/// [`Entry::armed`] when the connection has no entry in the timer queue.
const NOT_ARMED: u64 = u64::MAX;

/// What [`Entry::note`] files a changed connection in.
#[derive(Debug, Default)]
struct Queues {
    /// Connections that changed since they last sent (and so may have a
    /// frame to send), each once, served round robin: the busy-poll loop
    /// asks on every pass, and with a thousand connected peers walking them
    /// all would cost more than the message.
    ready: VecDeque<ConnHandle>,
    /// Connections changed since the timer queue was last brought up to
    /// date: a frame changes its connection's deadline several times, and
    /// only the last one counts.
    changed: Vec<ConnHandle>,
}

impl Entry {
    /// After anything that may have changed this connection (`h`): queue
    /// it to be asked for a frame, and note that its deadline may have
    /// moved.
    #[inline]
    fn note(&mut self, h: ConnHandle, q: &mut Queues) {
        if !self.queued {
            self.queued = true;
            q.ready.push_back(h);
        }
        if !self.changed {
            self.changed = true;
            q.changed.push(h);
        }
    }

    fn new(h: ConnHandle, mut conn: Connection, inbound: bool, peer: MacAddr) -> Self {
        conn.set_handle(h);
        Entry {
            conn,
            inbound,
            announced: !inbound,
            peer,
            queued: false,
            changed: false,
            armed: NOT_ARMED,
        }
    }
}

type Key = (MacAddr, u16, u16);

/// Connection keys are looked up once per received frame. Fx hashing:
/// SipHash's flooding resistance buys nothing here, because keys are
/// (MAC, port, port) of frames that passed the CRC and a peer may only create
/// connections up to the configured limits.
type KeyMap = rustc_hash::FxHashMap<Key, ConnHandle>;

/// The connections by key, with the last key a received frame found: a
/// busy connection's frames come one after another, and comparing a key
/// costs less than hashing it. Every change to the map forgets it.
#[derive(Debug, Default)]
struct KeyIndex {
    map: KeyMap,
    last: Option<(Key, ConnHandle)>,
    /// The bytes of the last frame that found its connection (see
    /// [`RxPrediction`]), forgotten with `last`.
    predict: Option<RxPrediction>,
}

/// Endpoint-level header prediction: the bytes of a received frame that
/// decide, before its connection's own checks, where it goes (both MACs,
/// the LLC header, the transport version and the ports), as the last frame
/// that reached a connection had them. A frame with the same bytes passes
/// the LLC checks and finds the same connection, so it skips them: a few
/// wide compares instead of the LLC parse, the address check and the key
/// lookup. Everything else (the frame's own length field, its transport
/// header and CRC, authentication, the frame type, the cookies) is checked
/// as on the general path.
#[derive(Copy, Clone, Debug)]
struct RxPrediction {
    /// Bytes 0..12 of the frame: destination and source MAC.
    macs: [u8; 12],
    /// Bytes 14..18: DSAP, SSAP, control, transport version.
    llc: [u8; 4],
    /// Bytes 21..25: source and destination port.
    ports: [u8; 4],
    handle: ConnHandle,
}

/// Where the bytes [`RxPrediction`] compares end.
const PREDICTED_SPAN: usize = 25;

impl RxPrediction {
    /// The prediction for frames like `bytes` (at least
    /// [`PREDICTED_SPAN`] long), going to `handle`.
    fn of(bytes: &[u8], handle: ConnHandle) -> Self {
        let at = |i: usize| -> [u8; 4] { bytes[i..i + 4].try_into().expect("4 bytes") };
        RxPrediction {
            macs: bytes[..12].try_into().expect("12 bytes"),
            llc: at(14),
            ports: at(21),
            handle,
        }
    }

    /// The connection of `bytes`, when they match.
    #[inline(always)]
    fn handle_of(&self, bytes: &[u8]) -> Option<ConnHandle> {
        let b: &[u8; PREDICTED_SPAN] = bytes.get(..PREDICTED_SPAN)?.try_into().ok()?;
        let same = b[..12] == self.macs && b[14..18] == self.llc && b[21..25] == self.ports;
        same.then_some(self.handle)
    }
}

impl KeyIndex {
    /// The connection of a received frame's key.
    #[inline]
    fn find(&mut self, key: &Key) -> Option<ConnHandle> {
        if let Some((k, h)) = self.last {
            if k == *key {
                return Some(h);
            }
        }
        let h = *self.map.get(key)?;
        self.last = Some((*key, h));
        Some(h)
    }

    fn get(&self, key: &Key) -> Option<&ConnHandle> {
        self.map.get(key)
    }

    fn contains_key(&self, key: &Key) -> bool {
        self.map.contains_key(key)
    }

    fn insert(&mut self, key: Key, h: ConnHandle) {
        self.last = None;
        self.predict = None;
        self.map.insert(key, h);
    }

    fn remove(&mut self, key: &Key) {
        self.last = None;
        self.predict = None;
        self.map.remove(key);
    }
}

/// All connections of one interface and SAP.
#[derive(Debug)]
pub struct Endpoint {
    cfg: Config,
    mac: MacAddr,
    mtu: usize,
    rng: Rng,
    conns: ConnTable<Entry>,
    by_key: KeyIndex,
    listening: HashSet<u16>,
    /// Peers that answered a reachability probe.
    probe_answers: HashSet<MacAddr>,
    /// The one port of an endpoint that shares its interface with others
    /// ([`Endpoint::bind`]): its connections all leave from it.
    bound: Option<u16>,
    next_handle: u32,
    next_ephemeral: u16,
    /// Connections to transmit from, and connections whose deadlines moved.
    queues: Queues,
    /// Every connection's next deadline (a min-heap; an entry whose time is
    /// no longer its connection's `armed` is stale and skipped), so that
    /// finding and running due timers does not visit idle connections.
    timers: BinaryHeap<Reverse<(Instant, ConnHandle)>>,
    half_open: usize,
    control: VecDeque<ControlFrame>,
    events: VecDeque<(ConnHandle, Event)>,
    stats: EndpointStats,
    /// Connections that hold acknowledged buffers for `release_acked`
    /// (so that an idle pass does not visit every connection).
    acked_holders: Vec<ConnHandle>,
    /// The connections whose timers are due (kept for its allocation).
    due: Vec<ConnHandle>,
    placement: Option<PlacementBox>,
    /// Delivered buffers given back ([`Endpoint::recycle`]) for the next
    /// large messages.
    pool: BufPool,
}

/// The layer above's [`Placement`], shown by name only.
struct PlacementBox(Box<dyn Placement>);

impl std::fmt::Debug for PlacementBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Placement")
    }
}

impl Endpoint {
    /// An endpoint for interface address `mac` on a link of `mtu`, drawing
    /// cookies and initial sequence numbers from `rng`.
    pub fn new(cfg: Config, mac: MacAddr, mtu: usize, rng: Rng) -> Self {
        Endpoint {
            cfg,
            mac,
            mtu,
            rng,
            conns: ConnTable::default(),
            by_key: KeyIndex::default(),
            listening: HashSet::new(),
            bound: None,
            probe_answers: HashSet::new(),
            next_handle: 1,
            next_ephemeral: EPHEMERAL_START,
            queues: Queues::default(),
            timers: BinaryHeap::new(),
            half_open: 0,
            control: VecDeque::new(),
            events: VecDeque::new(),
            stats: EndpointStats::default(),
            acked_holders: Vec::new(),
            due: Vec::new(),
            pool: BufPool::default(),
            placement: None,
        }
    }

    /// Our MAC.
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// Our SAP.
    pub fn sap(&self) -> u8 {
        self.cfg.sap
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Payload bytes one data frame of a connection carries on this link
    /// (a peer with a smaller MTU makes it less).
    pub fn frame_payload(&self) -> usize {
        crate::wire::transport::max_payload(self.mtu, 0).saturating_sub(self.cfg.trailer_len())
    }

    /// Counters.
    pub fn stats(&self) -> &EndpointStats {
        &self.stats
    }

    /// Accept connections to `port`.
    pub fn listen(&mut self, port: u16) {
        self.listening.insert(port);
    }

    /// Make `port` this endpoint's only port: accept connections to it and
    /// open every connection from it. An endpoint that shares its interface
    /// with other endpoints of the host receives only its own port's frames
    /// (the link filters by port), so it cannot use ephemeral ports; the
    /// message layer opens at most one connection per peer, so (peer, peer
    /// port, this port) stays a unique key.
    pub fn bind(&mut self, port: u16) {
        self.listen(port);
        self.bound = Some(port);
    }

    /// The port given to [`Endpoint::bind`], if any.
    pub fn bound_port(&self) -> Option<u16> {
        self.bound
    }

    /// Ask whether `peer` can be reached on the link: a TEST command whose
    /// information field is a reachability probe ([`PROBE_MAGIC`], our
    /// bound port, a nonce), answered by whichever endpoint of `peer`
    /// answers TEST. The answer comes back to this endpoint (devices that
    /// filter by port let probe answers for their port in) and shows in
    /// [`Endpoint::probe_answered`]. Needs a bound port ([`Endpoint::bind`]).
    /// Returns false when the control queue is full (try again later).
    pub fn probe(&mut self, peer: MacAddr) -> bool {
        let Some(port) = self.bound else {
            return false;
        };
        let mut info = [0u8; 8];
        info[..4].copy_from_slice(&PROBE_MAGIC);
        info[4..6].copy_from_slice(&port.to_be_bytes());
        info[6..8].copy_from_slice(&(self.rng.next_u32() as u16).to_be_bytes());
        self.queue_control(ControlFrame::Llc {
            addr: Addresses {
                dst: peer,
                src: self.mac,
                dsap: self.cfg.sap,
                ssap: self.cfg.sap,
            },
            response: false,
            command: Command::Test { pf: true },
            info: info.to_vec(),
        })
    }

    /// Whether `peer` answered one of our probes ([`Endpoint::probe`]).
    pub fn probe_answered(&self, peer: MacAddr) -> bool {
        self.probe_answers.contains(&peer)
    }

    fn is_our_probe(&self, info: &[u8]) -> bool {
        info.len() >= 6
            && info[..4] == PROBE_MAGIC
            && self.bound == Some(u16::from_be_bytes([info[4], info[5]]))
    }

    /// Stop accepting connections to `port` (existing ones stay).
    pub fn unlisten(&mut self, port: u16) {
        self.listening.remove(&port);
    }

    /// Number of live connections.
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// A connection, if it is still there.
    pub fn connection(&self, h: ConnHandle) -> Option<&Connection> {
        self.conns.get(&h).map(|e| &e.conn)
    }

    /// The peer of a connection: MAC and port.
    pub fn peer(&self, h: ConnHandle) -> Option<(MacAddr, u16)> {
        self.conns.get(&h).map(|e| (e.peer, e.conn.peer_port()))
    }

    /// True when the peer opened the connection.
    pub fn is_inbound(&self, h: ConnHandle) -> Option<bool> {
        self.conns.get(&h).map(|e| e.inbound)
    }

    /// Counters of one connection.
    pub fn connection_stats(&self, h: ConnHandle) -> Option<&ConnStats> {
        self.conns.get(&h).map(|e| e.conn.stats())
    }

    fn addresses(&self, peer: MacAddr) -> Addresses {
        Addresses {
            dst: peer,
            src: self.mac,
            dsap: self.cfg.sap,
            ssap: self.cfg.sap,
        }
    }

    fn new_handle(&mut self) -> ConnHandle {
        let h = ConnHandle(self.next_handle);
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        h
    }

    /// Open a connection to `peer_port` at `peer`, from `local_port` or, when
    /// `None`, from the bound port ([`Endpoint::bind`]) or a free ephemeral
    /// port. `Connected` follows when the peer
    /// answers; `Closed(Some(ConnectTimeout))` when it never does.
    pub fn connect(
        &mut self,
        now: Instant,
        peer: MacAddr,
        peer_port: u16,
        local_port: Option<u16>,
    ) -> Result<ConnHandle, ConnectError> {
        if peer.is_group() {
            return Err(ConnectError::GroupAddress(peer));
        }
        if self.conns.len() >= self.cfg.max_connections {
            return Err(ConnectError::TooManyConnections(self.cfg.max_connections));
        }
        let local = match (local_port, self.bound) {
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) => self.ephemeral_port(peer, peer_port)?,
        };
        let key = (peer, peer_port, local);
        if self.by_key.contains_key(&key) {
            return Err(ConnectError::InUse {
                local,
                peer,
                remote: peer_port,
            });
        }
        let cookie = self.rng.nonzero_u32();
        let isn = self.rng.next_u32();
        let conn = Connection::connect(
            self.cfg.clone(),
            now,
            self.addresses(peer),
            local,
            peer_port,
            cookie,
            isn,
            self.mtu,
        );
        let h = self.new_handle();
        self.by_key.insert(key, h);
        self.conns.insert(h, Entry::new(h, conn, false, peer));
        self.share_receive_budget();
        self.refresh(h);
        Ok(h)
    }

    /// Give every connection an equal share of the receive budget
    /// ([`Config::rx_budget_frames`]); called when connections come and go.
    fn share_receive_budget(&mut self) {
        let Some(budget) = self.cfg.rx_budget_frames else {
            return;
        };
        let share = budget / (self.conns.len().max(1) as u32);
        // Connections come and go one at a time: this walk is theirs.
        for (&h, e) in self.conns.iter_mut() {
            e.conn.set_window_share(Some(share.max(MIN_WINDOW_SHARE)));
            e.note(h, &mut self.queues);
        }
    }

    fn ephemeral_port(&mut self, peer: MacAddr, peer_port: u16) -> Result<u16, ConnectError> {
        for _ in 0..=(u16::MAX - EPHEMERAL_START) {
            let p = self.next_ephemeral;
            self.next_ephemeral = if p == u16::MAX {
                EPHEMERAL_START
            } else {
                p + 1
            };
            if !self.listening.contains(&p) && !self.by_key.contains_key(&(peer, peer_port, p)) {
                return Ok(p);
            }
        }
        Err(ConnectError::NoFreePort)
    }

    /// Queue a message on a connection. Always inlined: the message goes
    /// from its sender into the queue without a call between.
    #[inline(always)]
    pub fn send(&mut self, h: ConnHandle, data: impl Into<Bytes>) -> Result<u32, SendError> {
        match self.conns.get_mut(&h) {
            Some(e) => {
                let r = e.conn.send(data.into());
                e.note(h, &mut self.queues);
                r
            }
            None => Err(SendError::Closed),
        }
    }

    /// Queue the message `head ++ body` on a connection without joining the
    /// two (a header of the layer above in front of a payload it lends). The
    /// head is copied, inside the message when short; the body is not.
    #[inline]
    pub fn send_parts(
        &mut self,
        h: ConnHandle,
        head: &[u8],
        body: Bytes,
    ) -> Result<u32, SendError> {
        self.send_parts_with(h, head, body, false)
    }

    /// [`Endpoint::send_parts`] of a message whose sender waits for the
    /// peer's acknowledgement (a lent body): see
    /// [`Connection::send_parts_awaited`].
    #[inline]
    pub fn send_parts_awaited(
        &mut self,
        h: ConnHandle,
        head: &[u8],
        body: Bytes,
    ) -> Result<u32, SendError> {
        self.send_parts_with(h, head, body, true)
    }

    /// Inlined, as [`Endpoint::send`] is: the message layer sends every
    /// message this way, and two calls cost more than its queueing.
    #[inline(always)]
    fn send_parts_with(
        &mut self,
        h: ConnHandle,
        head: &[u8],
        body: Bytes,
        awaited: bool,
    ) -> Result<u32, SendError> {
        match self.conns.get_mut(&h) {
            Some(e) => {
                let r = e.conn.send_parts_with(head, body, awaited);
                e.note(h, &mut self.queues);
                r
            }
            None => Err(SendError::Closed),
        }
    }

    /// The connection to `peer_port` at `peer` from `local_port`, whoever
    /// opened it.
    pub fn connection_between(
        &self,
        peer: MacAddr,
        peer_port: u16,
        local_port: u16,
    ) -> Option<ConnHandle> {
        self.by_key.get(&(peer, peer_port, local_port)).copied()
    }

    /// Every connection's counters.
    pub fn connection_stats_all(&self) -> impl Iterator<Item = (ConnHandle, &ConnStats)> {
        self.conns.iter().map(|(h, e)| (*h, e.conn.stats()))
    }

    /// Let `placement` decide where incoming multi-fragment messages go
    /// (see [`super::placement`]); `None` reassembles everything here.
    pub fn set_placement(&mut self, placement: Option<Box<dyn Placement>>) {
        self.placement = placement.map(PlacementBox);
    }

    /// Give back the buffer of a delivered [`Event::Message`] once its
    /// contents are no longer needed: a later large message is reassembled
    /// into it instead of into fresh memory (see [`super::buf_pool`]).
    /// Optional; small buffers and those beyond the pool's bound are freed.
    /// Inlined (with [`BufPool::put`]): every delivered buffer comes back
    /// this way, and keeping a small one costs less than the call did.
    #[inline]
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.put(buf);
    }

    /// The buffers kept for reuse.
    pub fn buf_pool(&self) -> &BufPool {
        &self.pool
    }

    /// True when every message sent on every connection was acknowledged
    /// and every acknowledgement we owe was sent: the state in which a
    /// process may stop making progress without leaving a peer
    /// retransmitting.
    pub fn quiescent(&self) -> bool {
        self.conns.values().all(|e| {
            e.conn.state() == State::Closed || (e.conn.is_send_idle() && !e.conn.ack_pending())
        })
    }

    /// Close a connection once its queued messages are delivered.
    pub fn close(&mut self, h: ConnHandle) {
        if let Some(e) = self.conns.get_mut(&h) {
            e.conn.close();
        }
        self.refresh(h);
    }

    /// Fail a connection now; the peer is not told.
    pub fn abort(&mut self, h: ConnHandle) {
        if let Some(e) = self.conns.get_mut(&h) {
            e.conn.abort(ConnectionError::Aborted);
        }
        self.collect(h);
    }

    /// Next event. Taking a `Message` returns its credit to the connection.
    /// The empty check is inlined into the caller: an application drains
    /// events until none is left, so every round ends with an empty call.
    #[must_use]
    #[inline]
    pub fn poll_event(&mut self) -> Option<(ConnHandle, Event)> {
        if self.events.is_empty() {
            return None;
        }
        self.take_event()
    }

    /// [`Endpoint::poll_event`] when there is one. Inlined into the
    /// application's loop: a call returning the event through memory cost
    /// as much as taking it.
    #[inline(always)]
    fn take_event(&mut self) -> Option<(ConnHandle, Event)> {
        let ev = self.events.pop_front()?;
        if let (h, Event::Message { data, .. }) = &ev {
            if let Some(e) = self.conns.get_mut(h) {
                e.conn.message_consumed(data.len());
                e.note(*h, &mut self.queues);
            }
        }
        Some(ev)
    }

    /// Free the buffers of acknowledged messages that connections held
    /// back from the acknowledgement's path (see
    /// [`Connection::release_acked`]). Cheap when there are none; drivers
    /// call it when idle.
    pub fn release_acked(&mut self) {
        // Popped, not drained: the order does not matter, and a drain's
        // set-up costs more than the usual one connection.
        while let Some(h) = self.acked_holders.pop() {
            if let Some(e) = self.conns.get_mut(&h) {
                e.conn.release_acked();
            }
        }
    }

    /// Earliest timer of any connection.
    #[must_use]
    #[inline]
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        if !self.queues.changed.is_empty() {
            self.update_timers();
        }
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Run every timer due at `now`. Out of line: inlined into the
    /// driver's receive pass (its one caller there), the timers' work made
    /// every pass set up the registers and stack it needs.
    #[inline(never)]
    pub fn handle_timeout(&mut self, now: Instant) {
        self.update_timers();
        let mut due = std::mem::take(&mut self.due);
        while let Some(&Reverse((t, h))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            if let Some(e) = self.conns.get_mut(&h) {
                if e.armed == t.as_nanos() {
                    // Disarmed: `refresh` arms what the timer leaves.
                    e.armed = NOT_ARMED;
                    due.push(h);
                }
            }
        }
        for &h in &due {
            if let Some(e) = self.conns.get_mut(&h) {
                e.conn.handle_timeout(now);
            }
            self.collect(h);
        }
        due.clear();
        self.due = due;
    }

    /// [`Entry::note`] for connection `h`, if it is there.
    fn refresh(&mut self, h: ConnHandle) {
        if let Some(e) = self.conns.get_mut(&h) {
            e.note(h, &mut self.queues);
        }
    }

    /// Give the timer queue the deadlines of the connections that changed,
    /// and leave a live entry on top (unless a connection went since: its
    /// stale entry only wakes the driver early, and goes then). Inlined
    /// (into `poll_timeout`): every receive pass after a change asks.
    #[inline]
    fn update_timers(&mut self) {
        // Indexed, then cleared: cheaper than a draining iterator for the
        // one connection a round trip changes.
        for i in 0..self.queues.changed.len() {
            let h = self.queues.changed[i];
            let Some(e) = self.conns.get_mut(&h) else {
                continue;
            };
            e.changed = false;
            let t = e.conn.poll_timeout();
            // Armed lazily: an entry at or before the new deadline stays.
            // A frame moves the deadline later and its answer back; should
            // the early entry fire, the connection finds nothing due and is
            // armed again (at most one early wake per deadline).
            if t.is_none_or(|t| e.armed <= t.as_nanos()) {
                continue;
            }
            let old = std::mem::replace(&mut e.armed, t.map_or(NOT_ARMED, Instant::as_nanos));
            let on_top = self
                .timers
                .peek()
                .is_some_and(|Reverse(top)| old == top.0.as_nanos() && top.1 == h);
            if on_top {
                // The busy connection's entry is usually the earliest: move
                // it in place instead of burying a stale one.
                let mut top = self.timers.peek_mut().expect("on top");
                match t {
                    // Sifted down when `top` drops.
                    Some(t) => top.0 .0 = t,
                    None => drop(PeekMut::pop(top)),
                }
            } else if let Some(t) = t {
                self.timers.push(Reverse((t, h)));
            }
            // Only a deadline that moved can leave a stale entry on top.
            self.settle_timers();
        }
        self.queues.changed.clear();
    }

    /// Drop stale entries from the top of the timer queue, and rebuild it
    /// should stale entries buried inside pile up.
    fn settle_timers(&mut self) {
        while let Some(&Reverse((t, h))) = self.timers.peek() {
            if self.conns.get(&h).is_some_and(|e| e.armed == t.as_nanos()) {
                break;
            }
            self.timers.pop();
        }
        // Stale entries buried inside go when they reach the top; should
        // they pile up, rebuild from what is armed.
        if self.timers.len() > 2 * self.conns.len() + 16 {
            // In place: the queue keeps its allocation.
            let mut v = std::mem::take(&mut self.timers).into_vec();
            v.retain(|Reverse((t, h))| self.conns.get(h).is_some_and(|e| e.armed == t.as_nanos()));
            self.timers = BinaryHeap::from(v);
        }
    }

    /// Move a connection's events to the endpoint queue, and forget it once
    /// it is finished.
    fn collect(&mut self, h: ConnHandle) {
        let Some(e) = self.conns.get_mut(&h) else {
            return;
        };
        while let Some(ev) = e.conn.poll_event() {
            match ev {
                Event::Connected if e.inbound => {
                    e.announced = true;
                    self.half_open -= 1;
                    self.events.push_back((h, Event::Connected));
                }
                // A half-open inbound connection ends silently: nobody knew it.
                Event::Closed(_) if !e.announced => {}
                ev => self.events.push_back((h, ev)),
            }
        }
        if e.conn.is_drained() {
            let e = self.conns.remove(&h).expect("present");
            if e.inbound && !e.announced {
                self.half_open -= 1;
            }
            self.by_key
                .remove(&(e.peer, e.conn.peer_port(), e.conn.local_port()));
            self.share_receive_budget();
            // Its timer and transmit queue entries go when reached.
        } else {
            e.note(h, &mut self.queues);
        }
    }

    /// Process one received frame (Ethernet header first). Out of line: a
    /// driver's receive pass is mostly idle, and inlined here the frame's
    /// work made every pass set up its registers and stack.
    #[inline(never)]
    pub fn handle_frame(&mut self, now: Instant, bytes: &[u8]) {
        self.stats.rx_frames += 1;
        if let Some(handle) = self.predicted_connection(bytes) {
            if let Some(span) = wire::length_form_llc_span(bytes) {
                // What the general path below does for this frame, without
                // the checks the prediction stands for.
                let t = match wire::parse_transport(span) {
                    Ok(t) => t,
                    Err(e) => {
                        self.stats.dropped.count_wire(e);
                        return;
                    }
                };
                if (self.cfg.auth_key.is_some() || t.auth_tag.is_some())
                    && !self.authenticate(bytes, &t)
                {
                    return;
                }
                let kind = t.header.frame_type();
                match kind {
                    FrameType::Unknown(_) => self.stats.dropped.unknown_type += 1,
                    FrameType::Syn => {
                        let h = t.header;
                        let src = MacAddr(bytes[6..12].try_into().expect("6 bytes"));
                        self.handle_syn(now, (src, h.src_port.get(), h.dst_port.get()), h);
                    }
                    _ => self.frame_to_connection(now, &t, kind, handle),
                }
                return;
            }
        }
        let frame = match wire::parse(bytes, Some(self.cfg.sap)) {
            Ok(f) => f,
            Err(e) => {
                self.stats.dropped.count_wire(e);
                return;
            }
        };
        let addr = frame.addr;
        match frame.body {
            Body::Test {
                response: false,
                pf,
                info,
            } => {
                if self.queue_control(ControlFrame::Llc {
                    addr: Addresses {
                        dst: addr.src,
                        src: self.mac,
                        dsap: addr.ssap,
                        ssap: self.cfg.sap,
                    },
                    response: true,
                    command: Command::Test { pf },
                    info: info.to_vec(),
                }) {
                    self.stats.test_answered += 1;
                }
            }
            Body::Xid {
                response: false,
                pf,
                ..
            } => {
                if self.queue_control(ControlFrame::Llc {
                    addr: Addresses {
                        dst: addr.src,
                        src: self.mac,
                        dsap: addr.ssap,
                        ssap: self.cfg.sap,
                    },
                    response: true,
                    command: Command::Xid { pf },
                    info: wire::XID_INFO.to_vec(),
                }) {
                    self.stats.xid_answered += 1;
                }
            }
            Body::Test {
                response: true,
                info,
                ..
            } if self.is_our_probe(info) => {
                self.probe_answers.insert(addr.src);
            }
            Body::Test { .. } | Body::Xid { .. } => self.stats.dropped.unsolicited_response += 1,
            Body::Transport(t) => {
                if addr.dst != self.mac {
                    self.stats.dropped.not_for_us += 1;
                    return;
                }
                // One branch when authentication is off and the frame has no tag.
                if (self.cfg.auth_key.is_some() || t.auth_tag.is_some())
                    && !self.authenticate(bytes, &t)
                {
                    return;
                }
                let h = t.header;
                let kind = h.frame_type();
                if let FrameType::Unknown(_) = kind {
                    self.stats.dropped.unknown_type += 1;
                    return;
                }
                let key = (addr.src, h.src_port.get(), h.dst_port.get());
                if kind == FrameType::Syn {
                    self.handle_syn(now, key, h);
                    return;
                }
                let Some(handle) = self.by_key.find(&key) else {
                    self.stats.dropped.no_connection += 1;
                    if kind != FrameType::Reset {
                        self.queue_reset(addr.src, h);
                    }
                    return;
                };
                self.by_key.predict = Some(RxPrediction::of(bytes, handle));
                self.frame_to_connection(now, &t, kind, handle);
            }
        }
    }

    /// The connection [`RxPrediction`] gives a frame of these bytes.
    #[inline(always)]
    fn predicted_connection(&self, bytes: &[u8]) -> Option<ConnHandle> {
        if !super::connection::prediction_on() {
            return None;
        }
        self.by_key.predict.as_ref()?.handle_of(bytes)
    }

    /// A transport frame of a known type other than SYN, from the peer of
    /// connection `handle` (its key found): the cookies' check, then the
    /// connection takes it.
    #[inline(always)]
    fn frame_to_connection(
        &mut self,
        now: Instant,
        t: &wire::TransportFrame<'_>,
        kind: FrameType,
        handle: ConnHandle,
    ) {
        let h = t.header;
        let e = self
            .conns
            .get_mut(&handle)
            .expect("keyed connection exists");
        let c = &e.conn;
        let cookies_match = h.dst_cookie.get() == c.local_cookie()
            && (h.src_cookie.get() == c.peer_cookie()
                || (c.state() == State::SynSent && kind == FrameType::SynAck));
        if !cookies_match {
            self.stats.dropped.stale_cookie += 1;
            return;
        }
        let s = e.conn.stats();
        let before = (s.beyond_window, s.out_of_window);
        let placement = self
            .placement
            .as_mut()
            .map(|p| &mut *p.0 as &mut dyn Placement);
        let held_before = e.conn.acked_held();
        e.conn
            .handle_frame_to(now, t, placement, &mut self.pool, Some(&mut self.events));
        if held_before == 0 && e.conn.acked_held() > 0 {
            self.acked_holders.push(handle);
        }
        let s = e.conn.stats();
        let d = &mut self.stats.dropped;
        d.beyond_window += s.beyond_window - before.0;
        d.out_of_window += s.out_of_window - before.1;
        // What `collect` does for a connection with no events (the
        // common case: a message delivered whole went straight to
        // our queue), without looking it up again.
        if e.conn.needs_collecting() {
            self.collect(handle);
        } else {
            e.note(handle, &mut self.queues);
        }
    }

    /// Check a transport frame's authentication against our key (or our
    /// lack of one); count and refuse it when it fails.
    fn authenticate(&mut self, bytes: &[u8], t: &wire::TransportFrame<'_>) -> bool {
        let d = &mut self.stats.dropped;
        match (&self.cfg.auth_key, t.auth_tag) {
            (Some(key), Some(_)) => {
                let ok = key.verify(bytes, t.signed_len());
                d.auth_failed += !ok as u64;
                ok
            }
            (Some(_), None) => {
                d.auth_missing += 1;
                false
            }
            (None, Some(_)) => {
                d.auth_unexpected += 1;
                false
            }
            (None, None) => true,
        }
    }

    fn handle_syn(&mut self, now: Instant, key: Key, h: &TransportHeader) {
        let (peer, _, local_port) = key;
        if let Some(&existing) = self.by_key.get(&key) {
            let e = self
                .conns
                .get_mut(&existing)
                .expect("keyed connection exists");
            if e.conn.peer_cookie() == h.src_cookie.get() {
                e.conn.resend_syn_ack();
                self.refresh(existing);
                return;
            }
            if e.conn.state() == State::SynSent {
                // Both ends opened at once with the same ports (each wanted
                // to send first): one connection comes of it. The SYN of
                // the end with the lower (address, port) stands; the other
                // end answers it on the connection it opened (PROTOCOL.md
                // 3.5).
                if (self.mac, local_port) < (peer, h.src_port.get()) {
                    tracing::debug!(%peer, "simultaneous open: our SYN stands");
                    return;
                }
                tracing::debug!(%peer, "simultaneous open: answering the peer's SYN");
                e.conn.adopt_syn(now, h);
                self.refresh(existing);
                return;
            }
            // Same address and ports, new cookie: the peer restarted.
            e.conn.abort(ConnectionError::PeerRestarted);
            self.collect(existing);
            if let Some(&still) = self.by_key.get(&key) {
                // Not drained yet (events pending): detach it from the key.
                debug_assert_eq!(still, existing);
                self.by_key.remove(&key);
            }
        }
        if !self.listening.contains(&local_port) {
            self.stats.dropped.no_listener += 1;
            self.queue_reset(peer, h);
            return;
        }
        if self.half_open >= self.cfg.max_half_open || self.conns.len() >= self.cfg.max_connections
        {
            self.stats.dropped.syn_limit += 1;
            return;
        }
        let cookie = self.rng.nonzero_u32();
        let isn = self.rng.next_u32();
        let conn = Connection::accept(
            self.cfg.clone(),
            now,
            self.addresses(peer),
            local_port,
            h,
            cookie,
            isn,
            self.mtu,
        );
        let handle = self.new_handle();
        self.half_open += 1;
        self.stats.accepted += 1;
        self.by_key.insert(key, handle);
        self.conns
            .insert(handle, Entry::new(handle, conn, true, peer));
        self.share_receive_budget();
        self.refresh(handle);
    }

    fn queue_control(&mut self, f: ControlFrame) -> bool {
        if self.control.len() >= CONTROL_QUEUE_LIMIT {
            self.stats.dropped.control_queue_full += 1;
            return false;
        }
        self.control.push_back(f);
        true
    }

    /// Answer a frame for a connection we do not have: the RESET echoes its
    /// cookies crosswise, so only the true peer can match it.
    fn queue_reset(&mut self, peer: MacAddr, h: &TransportHeader) {
        let header = TransportHeader {
            kind: FrameType::Reset.into(),
            src_port: h.dst_port,
            dst_port: h.src_port,
            src_cookie: h.dst_cookie,
            dst_cookie: h.src_cookie,
            ack: h.seq,
            ..Default::default()
        };
        if self.queue_control(ControlFrame::Reset {
            addr: self.addresses(peer),
            header,
        }) {
            self.stats.resets_sent += 1;
        }
    }

    /// True when `poll_transmit` may produce a frame now. Cheap enough to call
    /// on every busy-poll pass, so that an idle driver does not ask the
    /// device for transmit buffers it would hand back unused. Forgets the
    /// queued connections in front that have nothing to send. Always
    /// inlined: the driver's transmit half asks before and after every
    /// frame.
    #[inline(always)]
    pub fn wants_transmit(&mut self) -> bool {
        if !self.control.is_empty() {
            return true;
        }
        while let Some(&h) = self.queues.ready.front() {
            match self.conns.get_mut(&h) {
                Some(e) if e.conn.wants_transmit() => return true,
                Some(e) => e.queued = false,
                None => {}
            }
            self.queues.ready.pop_front();
        }
        false
    }

    /// Write the next frame to send into `buf`; `None` when nothing is due.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.transmit(now, buf, None)
    }

    /// [`Endpoint::poll_transmit`] for a device that sends a frame's end
    /// from where it lies ([`crate::link::TxToken::consume_gather`]): the
    /// frame is `buf[..n]` followed by the returned tail, a long payload
    /// left in its message instead of copied (then the tag, with a key:
    /// [`Tail`]).
    #[must_use]
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(usize, Option<Tail>)> {
        let mut tail = None;
        let n = self.transmit(now, buf, Some(&mut tail))?;
        Some((n, tail))
    }

    fn transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        mut tail: Option<&mut Option<Tail>>,
    ) -> Option<usize> {
        if !self.control.is_empty() {
            if let Some(n) = self.transmit_control(buf) {
                return Some(n);
            }
        }
        // Round robin over the connections that asked: one frame from the
        // first, which goes to the back if it has more. Each is looked at
        // once per call at most, so one that wants to send but cannot (its
        // frame does not fit `buf`) does not hold the loop.
        for _ in 0..self.queues.ready.len() {
            let Some(h) = self.queues.ready.pop_front() else {
                break;
            };
            let Some(e) = self.conns.get_mut(&h) else {
                continue;
            };
            // Asked without `wants_transmit` first: a connection writes a
            // frame exactly when it wants to send (the driver just asked
            // [`Endpoint::wants_transmit`]), so the common call would test
            // it twice. One with nothing to send is noted below as after
            // any change (its deadline stays; the timer queue finds that).
            // Still marked queued while it sends, so that collecting its
            // events does not queue it again: it goes to the back only if
            // it has more to send.
            let sent = match tail.as_deref_mut() {
                Some(slot) => e.conn.poll_transmit_gather(now, buf).map(|(n, t)| {
                    *slot = t;
                    n
                }),
                None => e.conn.poll_transmit(now, buf),
            };
            let e = if e.conn.needs_collecting() {
                self.collect(h);
                self.conns.get_mut(&h)
            } else {
                // What `collect` does for a connection with no events (the
                // common case), without looking it up again.
                e.note(h, &mut self.queues);
                Some(e)
            };
            if let Some(e) = e {
                if e.conn.wants_transmit() {
                    self.queues.ready.push_back(h);
                } else {
                    e.queued = false;
                }
            }
            if let Some(n) = sent {
                self.stats.tx_frames += 1;
                return Some(n);
            }
        }
        self.debug_check_queued();
        None
    }

    /// The oldest control frame (an LLC answer, a reset) into `buf`, ahead
    /// of the connections' frames. Out of line: rare beside them.
    #[inline(never)]
    fn transmit_control(&mut self, buf: &mut [u8]) -> Option<usize> {
        let n = match self.control.pop_front()? {
            ControlFrame::Llc {
                addr,
                response,
                command,
                info,
            } => wire::emit_llc_control(buf, &addr, response, command, &info),
            ControlFrame::Reset { addr, header } => {
                wire::emit_transport_with(buf, &addr, &header, &[], &[], self.cfg.trailer())
            }
        };
        let n = n.ok()?;
        self.stats.tx_frames += 1;
        Some(n)
    }

    /// Every connection that wants to send is in the transmit queue: a
    /// change to a connection that skipped [`Endpoint::refresh`] would leave
    /// its frames unsent. Checked in debug builds, for endpoints small
    /// enough that the walk costs nothing.
    fn debug_check_queued(&self) {
        if cfg!(debug_assertions) && self.conns.len() <= 64 {
            for (h, e) in self.conns.iter() {
                debug_assert!(
                    e.queued || !e.conn.wants_transmit(),
                    "connection {h:?} wants to send but is not queued"
                );
                debug_assert!(
                    e.changed
                        || e.conn
                            .poll_timeout()
                            .is_none_or(|t| e.armed <= t.as_nanos()),
                    "connection {h:?}'s deadline is not covered by the timer queue"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::connection::RETIRE_LIMIT;
    use crate::wire::{llc, Frame};

    const ME: MacAddr = MacAddr([2, 0, 0, 0, 0, 1]);
    const PEER: MacAddr = MacAddr([2, 0, 0, 0, 0, 2]);

    fn endpoint() -> Endpoint {
        Endpoint::new(Config::default(), ME, 1500, Rng::new(9))
    }

    fn to_me(sap: u8) -> Addresses {
        Addresses {
            dst: ME,
            src: PEER,
            dsap: llc::DEFAULT_SAP,
            ssap: sap,
        }
    }

    fn transmit(ep: &mut Endpoint) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 1514];
        let n = ep.poll_transmit(Instant::ZERO, &mut buf)?;
        buf.truncate(n);
        Some(buf)
    }

    #[test]
    fn answers_test_and_xid_as_802_2_requires() {
        let mut ep = endpoint();
        let mut buf = [0u8; 128];
        for pf in [true, false] {
            let n = wire::emit_llc_control(
                &mut buf,
                &to_me(0x7c),
                false,
                Command::Test { pf },
                b"probe",
            )
            .unwrap();
            ep.handle_frame(Instant::ZERO, &buf[..n]);
            let out = transmit(&mut ep).expect("TEST answered");
            let f = wire::parse(&out, None).unwrap();
            assert_eq!((f.addr.dst, f.addr.src), (PEER, ME));
            assert_eq!(
                out[15],
                0x7c | llc::SAP_RESPONSE_BIT,
                "SSAP carries the response bit"
            );
            match f.body {
                Body::Test {
                    response: true,
                    pf: f_bit,
                    info,
                } => {
                    assert_eq!(f_bit, pf, "F bit equals the P bit");
                    assert_eq!(info, b"probe", "information field echoed");
                }
                other => panic!("{other:?}"),
            }
        }
        let n = wire::emit_llc_control(
            &mut buf,
            &to_me(0x7c),
            false,
            Command::Xid { pf: true },
            &[],
        )
        .unwrap();
        ep.handle_frame(Instant::ZERO, &buf[..n]);
        let out = transmit(&mut ep).expect("XID answered");
        assert!(matches!(
            wire::parse(&out, None).unwrap(),
            Frame { body: Body::Xid { response: true, pf: true, info }, .. } if info == wire::XID_INFO
        ));
        // Responses are never answered.
        let n = wire::emit_llc_control(
            &mut buf,
            &to_me(0x7c),
            true,
            Command::Test { pf: true },
            b"x",
        )
        .unwrap();
        ep.handle_frame(Instant::ZERO, &buf[..n]);
        assert!(transmit(&mut ep).is_none());
        assert_eq!(ep.stats().dropped.unsolicited_response, 1);
        assert_eq!((ep.stats().test_answered, ep.stats().xid_answered), (2, 1));
    }

    #[test]
    fn a_probe_is_answered_by_the_peers_test_responder() {
        let mut a = endpoint();
        assert!(!a.probe(PEER), "no bound port, no probe");
        a.bind(4000);
        assert!(a.probe(PEER));
        let command = transmit(&mut a).expect("a TEST command");
        assert_eq!(&command[17..21], b"LLCR");
        assert_eq!(command[21..23], 4000u16.to_be_bytes());
        let mut b = Endpoint::new(Config::default(), PEER, 1500, Rng::new(3));
        b.handle_frame(Instant::ZERO, &command);
        let answer = transmit(&mut b).expect("the TEST answer");
        assert!(!a.probe_answered(PEER));
        a.handle_frame(Instant::ZERO, &answer);
        assert!(a.probe_answered(PEER));
        assert_eq!(a.stats().dropped.unsolicited_response, 0);
        // An answer to another port's probe is not ours.
        let mut other = endpoint();
        other.bind(4001);
        other.handle_frame(Instant::ZERO, &answer);
        assert!(!other.probe_answered(PEER));
        assert_eq!(other.stats().dropped.unsolicited_response, 1);
    }

    #[test]
    fn a_bound_endpoint_opens_every_connection_from_its_port() {
        let mut ep = endpoint();
        ep.bind(5000);
        assert_eq!(ep.bound_port(), Some(5000));
        let peer = MacAddr([2, 9, 9, 9, 9, 9]);
        ep.connect(Instant::ZERO, peer, 7, None).unwrap();
        ep.connect(Instant::ZERO, peer, 8, None).unwrap();
        let mut src_ports = Vec::new();
        while let Some(out) = transmit(&mut ep) {
            let h = wire::transport_header(&out).expect("a SYN");
            assert_eq!(h.frame_type(), FrameType::Syn);
            src_ports.push((h.src_port.get(), h.dst_port.get()));
        }
        src_ports.sort();
        assert_eq!(src_ports, [(5000, 7), (5000, 8)]);
        // (peer, 7, 5000) exists: a second connection cannot have that key.
        assert!(matches!(
            ep.connect(Instant::ZERO, peer, 7, None),
            Err(ConnectError::InUse {
                local: 5000,
                remote: 7,
                ..
            })
        ));
    }

    #[test]
    fn strangers_get_reset_and_everything_dropped_is_counted() {
        let mut ep = endpoint();
        let h = TransportHeader {
            kind: FrameType::Data.into(),
            src_port: 5.into(),
            dst_port: 6.into(),
            src_cookie: 0x11.into(),
            dst_cookie: 0x22.into(),
            seq: 40.into(),
            ..Default::default()
        };
        let mut buf = [0u8; 256];
        let n = wire::emit_transport(&mut buf, &to_me(0x7c), &h, &[], b"hi").unwrap();
        ep.handle_frame(Instant::ZERO, &buf[..n]);
        let out = transmit(&mut ep).expect("RESET for an unknown connection");
        let Body::Transport(t) = wire::parse(&out, None).unwrap().body else {
            panic!()
        };
        assert_eq!(t.header.frame_type(), FrameType::Reset);
        assert_eq!(
            (t.header.src_cookie.get(), t.header.dst_cookie.get()),
            (0x22, 0x11),
            "cookies crossed"
        );
        assert_eq!((t.header.src_port.get(), t.header.dst_port.get()), (6, 5));
        assert_eq!(ep.stats().dropped.no_connection, 1);
        // A RESET is never answered.
        let mut r = h;
        r.kind = FrameType::Reset.into();
        let n = wire::emit_transport(&mut buf, &to_me(0x7c), &r, &[], &[]).unwrap();
        ep.handle_frame(Instant::ZERO, &buf[..n]);
        assert!(transmit(&mut ep).is_none());
        // Corrupted, foreign-MAC and unknown-type frames are dropped and counted.
        let n = wire::emit_transport(&mut buf, &to_me(0x7c), &h, &[], b"hi").unwrap();
        buf[n - 1] ^= 1;
        ep.handle_frame(Instant::ZERO, &buf[..n]);
        let mut other = to_me(0x7c);
        other.dst = MacAddr([2, 9, 9, 9, 9, 9]);
        let n = wire::emit_transport(&mut buf, &other, &h, &[], b"hi").unwrap();
        ep.handle_frame(Instant::ZERO, &buf[..n]);
        let mut u = h;
        u.kind = 99;
        let n = wire::emit_transport(&mut buf, &to_me(0x7c), &u, &[], &[]).unwrap();
        ep.handle_frame(Instant::ZERO, &buf[..n]);
        ep.handle_frame(Instant::ZERO, &[0u8; 5]);
        let d = &ep.stats().dropped;
        assert_eq!(
            (d.bad_checksum, d.not_for_us, d.unknown_type, d.truncated),
            (1, 1, 1, 1)
        );
        assert_eq!(d.total(), 6);
        assert!(transmit(&mut ep).is_none());
    }

    #[test]
    fn syn_to_a_closed_port_is_refused_and_half_open_is_bounded() {
        let cfg = Config {
            max_half_open: 2,
            ..Config::default()
        };
        let mut ep = Endpoint::new(cfg, ME, 1500, Rng::new(1));
        let mut buf = [0u8; 256];
        let syn = |port: u16| TransportHeader {
            kind: FrameType::Syn.into(),
            src_port: port.into(),
            dst_port: 7.into(),
            src_cookie: (port as u32 + 1).into(),
            ..Default::default()
        };
        let n = wire::emit_transport(&mut buf, &to_me(0x7c), &syn(100), &[], &[]).unwrap();
        ep.handle_frame(Instant::ZERO, &buf[..n]);
        assert_eq!(ep.stats().dropped.no_listener, 1);
        assert!(transmit(&mut ep).is_some(), "RESET sent");
        ep.listen(7);
        for port in 200..210 {
            let n = wire::emit_transport(&mut buf, &to_me(0x7c), &syn(port), &[], &[]).unwrap();
            ep.handle_frame(Instant::ZERO, &buf[..n]);
        }
        assert_eq!(ep.connection_count(), 2);
        assert_eq!(ep.stats().dropped.syn_limit, 8);
        // Half-open connections are forgotten after the handshake timeout, silently.
        let later = Instant::ZERO + ep.config().handshake_timeout;
        ep.handle_timeout(later);
        while transmit(&mut ep).is_some() {}
        assert_eq!(ep.connection_count(), 0);
        assert!(ep.poll_event().is_none());
    }

    /// Move frames both ways until neither end has anything to send.
    /// `tap` sees (and may keep) every frame from `a` to `b`.
    fn shuttle(a: &mut Endpoint, b: &mut Endpoint, now: Instant, tap: &mut Vec<Vec<u8>>) {
        for _ in 0..10_000 {
            let mut moved = false;
            while let Some(f) = transmit_at(a, now) {
                b.handle_frame(now, &f);
                tap.push(f);
                moved = true;
            }
            while let Some(f) = transmit_at(b, now) {
                a.handle_frame(now, &f);
                moved = true;
            }
            if !moved {
                return;
            }
        }
        panic!("endpoints never went quiet");
    }

    fn transmit_at(ep: &mut Endpoint, now: Instant) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 1514];
        let n = ep.poll_transmit(now, &mut buf)?;
        buf.truncate(n);
        Some(buf)
    }

    fn keyed(mac: MacAddr, key: Option<&[u8]>, seed: u64) -> Endpoint {
        let cfg = Config {
            auth_key: key.map(crate::wire::AuthKey::derive),
            max_syn_retries: 2,
            ..Config::default()
        };
        Endpoint::new(cfg, mac, 1500, Rng::new(seed))
    }

    /// A (at PEER) connected to B's port 7 at `t0`: both endpoints, A's
    /// handle and B's.
    fn connected_pair(t0: Instant) -> (Endpoint, Endpoint, ConnHandle, ConnHandle) {
        let mut a = keyed(PEER, None, 1);
        let mut b = keyed(ME, None, 2);
        b.listen(7);
        let c = a.connect(t0, ME, 7, None).unwrap();
        shuttle(&mut a, &mut b, t0, &mut Vec::new());
        let hb = *b.conns.keys().next().unwrap();
        (a, b, c, hb)
    }

    /// Both ends, bound to the same port, open a connection to each other
    /// at once, with messages queued: the SYNs cross, the higher address
    /// answers the lower's on the connection it opened, and both ends'
    /// handles carry the messages of one connection.
    #[test]
    fn simultaneous_opens_make_one_connection() {
        let t0 = Instant::from_micros(1);
        for first in [false, true] {
            let mut low = keyed(ME, None, 1);
            let mut high = keyed(PEER, None, 2);
            assert!(ME < PEER);
            low.bind(7);
            high.bind(7);
            let cl = low.connect(t0, PEER, 7, None).unwrap();
            let ch = high.connect(t0, ME, 7, None).unwrap();
            low.send(cl, vec![1; 8]).unwrap();
            high.send(ch, vec![2; 8]).unwrap();
            // Either SYN may land first.
            if first {
                let f = transmit_at(&mut high, t0).expect("high's SYN");
                low.handle_frame(t0, &f);
            }
            shuttle(&mut low, &mut high, t0, &mut Vec::new());
            assert_eq!(low.connection_count(), 1);
            assert_eq!(high.connection_count(), 1);
            for (ep, h) in [(&mut low, cl), (&mut high, ch)] {
                assert_eq!(
                    ep.connection(h).map(|c| c.state()),
                    Some(State::Established)
                );
            }
            assert_eq!(messages(&mut low), vec![vec![2; 8]]);
            assert_eq!(messages(&mut high), vec![vec![1; 8]]);
        }
    }

    /// The frame that completes an inbound handshake may carry the first
    /// message: `Connected` comes before it, though the message would go
    /// straight to the endpoint's queue on an established connection.
    #[test]
    fn the_first_message_follows_connected() {
        let t0 = Instant::ZERO;
        let mut a = keyed(PEER, None, 1);
        let mut b = keyed(ME, None, 2);
        b.listen(7);
        let c = a.connect(t0, ME, 7, None).unwrap();
        a.send(c, vec![5u8; 8]).unwrap();
        let mut tap = Vec::new();
        shuttle(&mut a, &mut b, t0, &mut tap);
        assert_eq!(
            tap.len(),
            2,
            "SYN, then the message with the handshake's ACK"
        );
        let evs: Vec<_> = std::iter::from_fn(|| b.poll_event())
            .map(|(_, ev)| ev)
            .collect();
        let msg = Event::Message {
            msg_id: 0,
            data: vec![5; 8],
        };
        assert_eq!(evs, [Event::Connected, msg]);
    }

    fn messages(ep: &mut Endpoint) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some((_, ev)) = ep.poll_event() {
            if let Event::Message { data, .. } = ev {
                out.push(data);
            }
        }
        out
    }

    #[test]
    fn matching_keys_connect_and_replays_deliver_nothing_twice() {
        let mut a = keyed(PEER, Some(b"k1"), 1);
        let mut b = keyed(ME, Some(b"k1"), 2);
        b.listen(7);
        let t0 = Instant::ZERO;
        let c = a.connect(t0, ME, 7, None).unwrap();
        let mut tap = Vec::new();
        shuttle(&mut a, &mut b, t0, &mut tap);
        assert_eq!(a.connection(c).unwrap().state(), State::Established);
        // Fragments leave room for the trailer: a full frame still fits the MTU.
        let frag = a.connection(c).unwrap().fragment_len();
        assert_eq!(frag, 1500 - 3 - 56 - 16);
        a.send(c, vec![7u8; 3 * frag]).unwrap();
        shuttle(&mut a, &mut b, t0, &mut tap);
        assert!(tap.iter().all(|f| f.len() <= 1514), "frames fit the MTU");
        assert_eq!(messages(&mut b), vec![vec![7u8; 3 * frag]]);
        // Replaying everything a sent delivers nothing again.
        let before = b.stats().dropped.total();
        for f in tap.clone() {
            b.handle_frame(t0, &f);
        }
        shuttle(&mut a, &mut b, t0, &mut Vec::new());
        assert!(messages(&mut b).is_empty());
        assert_eq!(
            b.stats().dropped.total(),
            before,
            "replays are duplicates, not drops"
        );
        let h = b.conns.keys().next().copied().unwrap();
        assert!(b.connection_stats(h).unwrap().duplicates >= 3);
        // A forged frame (the right cookies, a fresh sequence number) without
        // the key is refused: missing tag, or a tag by another key.
        let data = tap
            .iter()
            .rev()
            .find(|f| wire::transport_header(f).is_some_and(|h| h.frame_type() == FrameType::Data));
        let mut h = wire::transport_header(data.unwrap()).unwrap();
        h.seq = (h.seq.get() + 1).into();
        h.msg_id = (h.msg_id.get() + 1).into();
        let mut buf = [0u8; 256];
        let other = crate::wire::AuthKey::derive(b"k2");
        let addr = Addresses {
            dst: ME,
            src: PEER,
            dsap: llc::DEFAULT_SAP,
            ssap: llc::DEFAULT_SAP,
        };
        for trailer in [wire::Trailer::None, wire::Trailer::Key(&other)] {
            h.msg_len = 4.into();
            let n = wire::emit_transport_with(&mut buf, &addr, &h, &[], b"evil", trailer).unwrap();
            b.handle_frame(t0, &buf[..n]);
        }
        assert!(messages(&mut b).is_empty());
        let d = &b.stats().dropped;
        assert_eq!((d.auth_missing, d.auth_failed), (1, 1));
    }

    #[test]
    fn mismatched_keys_cannot_connect_and_say_why() {
        for (ka, kb) in [
            (Some(&b"k1"[..]), Some(&b"k2"[..])),
            (Some(b"k1"), None),
            (None, Some(b"k1")),
        ] {
            let mut a = keyed(PEER, ka, 1);
            let mut b = keyed(ME, kb, 2);
            b.listen(7);
            let mut now = Instant::ZERO;
            let c = a.connect(now, ME, 7, None).unwrap();
            let mut closed = None;
            for _ in 0..100 {
                shuttle(&mut a, &mut b, now, &mut Vec::new());
                while let Some((h, ev)) = a.poll_event() {
                    if let (true, Event::Closed(e)) = (h == c, ev) {
                        closed = Some(e);
                    }
                }
                if closed.is_some() {
                    break;
                }
                now = a.poll_timeout().expect("SYN retry timer");
                a.handle_timeout(now);
            }
            let expect = if ka.is_some() {
                ConnectionError::AuthConnectTimeout(3)
            } else {
                ConnectionError::ConnectTimeout(3)
            };
            assert_eq!(closed, Some(Some(expect.clone())));
            assert!(expect.to_string().contains("peer does not answer"));
            let d = &b.stats().dropped;
            let counted = match (ka, kb) {
                (Some(_), Some(_)) => d.auth_failed,
                (Some(_), None) => d.auth_unexpected,
                _ => d.auth_missing,
            };
            assert_eq!(counted, 3, "every SYN counted: {d:?}");
            assert_eq!(d.total(), 3);
            assert_eq!((b.stats().accepted, b.stats().resets_sent), (0, 0));
        }
    }

    #[test]
    fn connections_share_the_receive_budget() {
        let cfg = Config {
            rx_budget_frames: Some(120),
            ..Config::default()
        };
        let mut b = Endpoint::new(cfg, ME, 1500, Rng::new(9));
        b.listen(7);
        let t0 = Instant::ZERO;
        let windows = |b: &Endpoint| -> Vec<u32> {
            b.conns.values().map(|e| e.conn.window_frames()).collect()
        };
        let mut peers: Vec<(Endpoint, ConnHandle)> = Vec::new();
        for i in 0..3u8 {
            let mut a = keyed(MacAddr([2, 0, 0, 0, 1, i]), None, u64::from(i) + 1);
            let c = a.connect(t0, ME, 7, None).unwrap();
            shuttle(&mut a, &mut b, t0, &mut Vec::new());
            assert_eq!(a.connection(c).unwrap().state(), State::Established);
            // Each new connection shrinks everyone's share.
            let n = i as u32 + 1;
            assert!(
                windows(&b).iter().all(|&w| w == 120 / n),
                "{:?}",
                windows(&b)
            );
            peers.push((a, c));
        }
        // A sender cannot put more than its share in flight: its peer window
        // after the handshake is the share it was given.
        let (a, c) = &mut peers[2];
        a.send(*c, vec![1u8; 100 * 1400]).unwrap();
        let mut sent = 0;
        while transmit_at(a, t0).is_some() {
            sent += 1;
        }
        assert!(sent <= 40, "{sent} frames in flight, share 40");
        // One leaves: the others get more.
        let (mut a0, c0) = peers.remove(0);
        a0.close(c0);
        let mut now = t0;
        for _ in 0..500 {
            shuttle(&mut a0, &mut b, now, &mut Vec::new());
            if b.connection_count() == 2 {
                break;
            }
            now += std::time::Duration::from_millis(10);
            b.handle_timeout(now);
            a0.handle_timeout(now);
        }
        assert_eq!(b.connection_count(), 2);
        assert!(windows(&b).iter().all(|&w| w == 60), "{:?}", windows(&b));
    }

    #[test]
    fn a_reply_carries_the_acknowledgement_of_its_request() {
        let t0 = Instant::ZERO;
        let (mut a, mut b, c, hb) = connected_pair(t0);
        let (a0, b0) = (
            a.connection_stats(c).unwrap().clone(),
            b.connection_stats(hb).unwrap().clone(),
        );
        for i in 0..100u32 {
            let now = t0 + std::time::Duration::from_micros(u64::from(i) * 4);
            a.send(c, i.to_le_bytes().to_vec()).unwrap();
            let request = transmit_at(&mut a, now).expect("the request");
            b.handle_frame(now, &request);
            assert_eq!(messages(&mut b), vec![i.to_le_bytes().to_vec()]);
            assert!(
                transmit_at(&mut b, now).is_none(),
                "no acknowledgement of its own while a reply may still carry it"
            );
            b.send(hb, (!i).to_le_bytes().to_vec()).unwrap();
            let reply = transmit_at(&mut b, now).expect("the reply");
            a.handle_frame(now, &reply);
            assert_eq!(messages(&mut a), vec![(!i).to_le_bytes().to_vec()]);
            assert!(transmit_at(&mut a, now).is_none());
        }
        let (a1, b1) = (
            a.connection_stats(c).unwrap(),
            b.connection_stats(hb).unwrap(),
        );
        assert_eq!(a1.frames_sent - a0.frames_sent, 100, "{a1:?}");
        assert_eq!(b1.frames_sent - b0.frames_sent, 100, "{b1:?}");
        assert_eq!((a1.acks_sent, b1.acks_sent), (a0.acks_sent, b0.acks_sent));
        assert_eq!(a1.messages_acked - a0.messages_acked, 100);
        assert!(a1.rtt_samples > a0.rtt_samples);
    }

    #[test]
    fn acknowledged_buffers_are_freed_when_idle_and_never_pile_up() {
        let mut a = Endpoint::new(
            Config {
                acked_events: false,
                ..Config::default()
            },
            PEER,
            1500,
            Rng::new(1),
        );
        let mut b = keyed(ME, None, 2);
        b.listen(7);
        let t0 = Instant::ZERO;
        let c = a.connect(t0, ME, 7, None).unwrap();
        shuttle(&mut a, &mut b, t0, &mut Vec::new());
        while a.poll_event().is_some() {}
        let held = |a: &Endpoint| a.connection(c).unwrap().acked_held();
        // Deliver, then let B's delayed acknowledgement fall due.
        let mut now = t0;
        let mut settle = |a: &mut Endpoint, b: &mut Endpoint| {
            shuttle(a, b, now, &mut Vec::new());
            now += std::time::Duration::from_millis(1);
            b.handle_timeout(now);
            shuttle(a, b, now, &mut Vec::new());
        };

        // A small message's buffer outlives its acknowledgement until the
        // driver is idle; no Acked event is reported when they are off.
        let small = Bytes::from(vec![1u8; 64]);
        a.send(c, small.clone()).unwrap();
        settle(&mut a, &mut b);
        assert_eq!(messages(&mut b), vec![vec![1u8; 64]]);
        assert_eq!(a.connection_stats(c).unwrap().messages_acked, 1);
        assert!(a.poll_event().is_none(), "acked_events off: no Acked event");
        assert_eq!(held(&a), 1);
        assert!(!small.is_unique(), "held until the idle moment");
        a.release_acked();
        assert_eq!(held(&a), 0);
        assert!(small.is_unique(), "freed by release_acked");

        // A large one is freed with its acknowledgement.
        let large = Bytes::from(vec![2u8; 64 << 10]);
        a.send(c, large.clone()).unwrap();
        settle(&mut a, &mut b);
        assert_eq!(messages(&mut b).len(), 1);
        assert_eq!(held(&a), 0);
        assert!(large.is_unique());

        // A driver that is never idle holds a bounded number.
        for i in 0..(RETIRE_LIMIT as u32 + 10) {
            a.send(c, i.to_le_bytes().to_vec()).unwrap();
            settle(&mut a, &mut b);
        }
        assert_eq!(held(&a), RETIRE_LIMIT);
        assert_eq!(messages(&mut b).len(), RETIRE_LIMIT + 10);
        a.release_acked();
        assert_eq!(held(&a), 0);
    }

    /// Keepalive and idle deadlines count from the last frame heard, though
    /// frames no longer push them back one by one: a peer that keeps
    /// talking is neither probed nor timed out; once it falls silent, the
    /// probe goes out one keepalive interval later and the connection fails
    /// one idle timeout after the last frame, not after the first.
    #[test]
    fn keepalive_and_idle_deadlines_follow_the_last_frame_heard() {
        use std::time::Duration;
        let t0 = Instant::ZERO;
        let (mut a, mut b, c, hb) = connected_pair(t0);
        let cfg = Config::default();
        let step = Duration::from_millis(5);
        let is_ping = |f: &[u8]| {
            matches!(wire::parse(f, None), Ok(Frame { body: Body::Transport(t), .. })
                if t.header.frame_type() == FrameType::Ping)
        };
        // B talks every 300 ms for 3 idle timeouts' worth of keepalive
        // intervals; A answers (its ACKs reach B) but never needs a probe.
        let mut now = t0;
        let talk_until = t0 + cfg.keepalive_interval * 12;
        let mut next_talk = t0;
        let mut last_heard = t0;
        while now < talk_until {
            if now >= next_talk {
                b.send(hb, vec![5u8; 10]).unwrap();
                next_talk = now + Duration::from_millis(300);
            }
            if a.poll_timeout().is_some_and(|t| t <= now) {
                a.handle_timeout(now);
            }
            if b.poll_timeout().is_some_and(|t| t <= now) {
                b.handle_timeout(now);
            }
            while let Some(f) = transmit_at(&mut b, now) {
                a.handle_frame(now, &f);
                last_heard = now;
            }
            while let Some(f) = transmit_at(&mut a, now) {
                assert!(!is_ping(&f), "A probed a peer it hears from ({now:?})");
                b.handle_frame(now, &f);
            }
            now += step;
        }
        assert_eq!(messages(&mut a).len(), 40);
        assert_eq!(a.connection(c).unwrap().state(), State::Established);
        // B falls silent (and hears nothing more): A probes one keepalive
        // interval after the last frame, then gives up one idle timeout
        // after it.
        let mut first_ping = None;
        let failed_at = loop {
            if a.poll_timeout().is_some_and(|t| t <= now) {
                a.handle_timeout(now);
            }
            while let Some(f) = transmit_at(&mut a, now) {
                if is_ping(&f) && first_ping.is_none() {
                    first_ping = Some(now);
                }
            }
            if let Some((_, Event::Closed(Some(e)))) = a.poll_event() {
                assert!(matches!(e, ConnectionError::IdleTimeout(_)), "{e:?}");
                break now;
            }
            assert!(now < last_heard + cfg.idle_timeout * 2, "A never timed out");
            now += step;
        };
        let first_ping = first_ping.expect("a keepalive probe");
        assert!(
            first_ping >= last_heard + cfg.keepalive_interval,
            "{first_ping:?}"
        );
        assert!(first_ping < last_heard + cfg.keepalive_interval + step * 2);
        assert!(failed_at >= last_heard + cfg.idle_timeout, "{failed_at:?}");
        assert!(failed_at < last_heard + cfg.idle_timeout + step * 2);
    }

    /// A recycled buffer receives the next large message (zeroed first, so
    /// nothing of the old one shows through), single-frame and reassembled
    /// alike; small buffers are not kept.
    #[test]
    fn recycled_buffers_receive_the_next_large_messages() {
        let t0 = Instant::ZERO;
        let (mut a, mut b, c, _) = connected_pair(t0);
        let frag = a.connection(c).unwrap().fragment_len();
        let mut tap = Vec::new();
        let mut deliver = |a: &mut Endpoint, b: &mut Endpoint, msg: Vec<u8>| {
            a.send(c, msg).unwrap();
            shuttle(a, b, t0, &mut tap);
            let mut got = messages(b);
            assert_eq!(got.len(), 1);
            got.pop().unwrap()
        };
        let first: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let got = deliver(&mut a, &mut b, first.clone());
        assert!(got == first);
        let ptr = got.as_ptr();
        b.recycle(got);
        assert_eq!(b.buf_pool().len(), 1);
        // Shorter, and with holes where the old message had bytes.
        let second = vec![9u8; 200_000];
        let got = deliver(&mut a, &mut b, second.clone());
        assert_eq!(got.as_ptr(), ptr, "reassembled into the recycled buffer");
        assert!(got == second);
        assert!(b.buf_pool().is_empty());
        b.recycle(got);
        if frag >= crate::proto::buf_pool::MIN_CAPACITY {
            let single = vec![3u8; frag];
            let got = deliver(&mut a, &mut b, single.clone());
            assert_eq!(got.as_ptr(), ptr, "copied into the recycled buffer");
            assert!(got == single);
            b.recycle(got);
        }
        b.recycle(vec![0u8; 100]);
        assert_eq!(b.buf_pool().len(), 1, "a small buffer was kept");
    }

    #[test]
    fn a_spurious_retransmission_timeout_is_undone_and_a_real_one_stands() {
        use std::time::Duration;
        let t0 = Instant::ZERO;
        let (mut a, mut b, c, _) = connected_pair(t0);
        let frag = a.connection(c).unwrap().fragment_len();
        let window = a.connection(c).unwrap().congestion_window();
        let min_cwnd = Config::default().min_cwnd;
        assert!(window > min_cwnd);
        // Longer than any timeout before back-off (no RTT sample yet: the
        // initial one).
        let rto = Config::default().initial_rto.max(Config::default().min_rto);
        let stats = |a: &Endpoint| a.connection_stats(c).unwrap().clone();
        // B receives a burst at once, but its acknowledgements reach A only
        // after A's retransmission timeout fired (a descheduled peer).
        let t1 = t0 + Duration::from_millis(1);
        a.send(c, vec![1u8; 40 * frag]).unwrap();
        while let Some(f) = transmit_at(&mut a, t1) {
            b.handle_frame(t1, &f);
        }
        let mut late_acks = Vec::new();
        while let Some(f) = transmit_at(&mut b, t1) {
            late_acks.push(f);
        }
        assert!(!late_acks.is_empty());
        let t2 = t1 + rto * 2;
        a.handle_timeout(t2);
        assert_eq!(stats(&a).timeouts, 1);
        assert_eq!(a.connection(c).unwrap().congestion_window(), min_cwnd);
        for f in &late_acks {
            a.handle_frame(t2, f);
        }
        assert_eq!(stats(&a).spurious_timeouts, 1);
        assert!(a.connection(c).unwrap().congestion_window() >= window);
        let mut tap = Vec::new();
        shuttle(&mut a, &mut b, t2, &mut tap);
        assert_eq!(stats(&a).retransmits, 0, "frames the peer had were resent");
        assert!(
            messages(&mut b) == [vec![1u8; 40 * frag]],
            "the burst was not delivered"
        );
        // A burst that is really lost: the acknowledgement after the timeout
        // echoes a retransmission, and the timeout stands.
        let t3 = t2 + Duration::from_millis(1);
        a.send(c, vec![2u8; 8 * frag]).unwrap();
        while transmit_at(&mut a, t3).is_some() {}
        let mut now = loop {
            let now = a.poll_timeout().expect("a timer");
            a.handle_timeout(now);
            if stats(&a).timeouts == 2 {
                break now;
            }
            // Tail-loss probes before the timeout are lost too.
            while transmit_at(&mut a, now).is_some() {}
            assert!(now < t3 + Duration::from_secs(1), "no timeout");
        };
        // The repair, with time running for the delayed acknowledgements.
        let mut got = Vec::new();
        for _ in 0..1000 {
            shuttle(&mut a, &mut b, now, &mut tap);
            got.extend(messages(&mut b));
            if !got.is_empty() {
                break;
            }
            now += Duration::from_micros(50);
            for ep in [&mut a, &mut b] {
                if ep.poll_timeout().is_some_and(|t| t <= now) {
                    ep.handle_timeout(now);
                }
            }
        }
        assert!(
            got == [vec![2u8; 8 * frag]],
            "the lost burst was not repaired"
        );
        assert_eq!(stats(&a).spurious_timeouts, 1);
        assert!(stats(&a).retransmits >= 8);
        assert!(a.connection(c).unwrap().congestion_window() < window);
    }

    /// A peer busy elsewhere reads the burst and the retransmission that
    /// our timeout sent in one pass and answers with one acknowledgement:
    /// it echoes the original's timestamp, so the timeout is found
    /// spurious and the window given back.
    #[test]
    fn a_timeout_is_undone_when_the_peer_reads_original_and_retransmission_together() {
        use std::time::Duration;
        let t0 = Instant::ZERO;
        let (mut a, mut b, c, _) = connected_pair(t0);
        let frag = a.connection(c).unwrap().fragment_len();
        let window = a.connection(c).unwrap().congestion_window();
        let rto = Config::default().initial_rto.max(Config::default().min_rto);
        let stats = |a: &Endpoint| a.connection_stats(c).unwrap().clone();
        let t1 = t0 + Duration::from_millis(1);
        a.send(c, vec![7u8; 16 * frag]).unwrap();
        let mut queued = Vec::new();
        while let Some(f) = transmit_at(&mut a, t1) {
            queued.push(f);
        }
        let t2 = t1 + rto * 2;
        a.handle_timeout(t2);
        assert_eq!(stats(&a).timeouts, 1);
        while let Some(f) = transmit_at(&mut a, t2) {
            queued.push(f);
        }
        assert!(stats(&a).retransmits >= 1);
        // B reads everything that waited for it, then answers once.
        for f in &queued {
            b.handle_frame(t2, f);
        }
        let acks: Vec<_> = std::iter::from_fn(|| transmit_at(&mut b, t2)).collect();
        assert!(!acks.is_empty());
        for f in &acks {
            a.handle_frame(t2, f);
        }
        assert_eq!(stats(&a).spurious_timeouts, 1, "the timeout stood");
        assert!(a.connection(c).unwrap().congestion_window() >= window);
        assert!(messages(&mut b) == [vec![7u8; 16 * frag]]);
    }

    #[test]
    fn sequence_numbers_far_outside_the_window_are_dropped_and_counted() {
        let mut a = keyed(PEER, None, 1);
        let mut b = keyed(ME, None, 2);
        b.listen(7);
        let t0 = Instant::ZERO;
        let c = a.connect(t0, ME, 7, None).unwrap();
        let mut tap = Vec::new();
        a.send(c, b"first".to_vec()).unwrap();
        shuttle(&mut a, &mut b, t0, &mut tap);
        assert_eq!(messages(&mut b), vec![b"first".to_vec()]);
        let data = tap
            .iter()
            .find(|f| wire::transport_header(f).is_some_and(|h| h.frame_type() == FrameType::Data));
        let base = wire::transport_header(data.unwrap()).unwrap();
        let addr = Addresses {
            dst: ME,
            src: PEER,
            dsap: llc::DEFAULT_SAP,
            ssap: llc::DEFAULT_SAP,
        };
        let mut buf = [0u8; 256];
        let seq0 = base.seq.get();
        // Ahead of the credit (2^31 ahead counts as ahead), and far behind: 3 + 2 frames.
        for (i, off) in [
            1u32 << 20,
            1 << 30,
            0u32.wrapping_sub(1 << 20),
            0u32.wrapping_sub(1 << 30),
            1 << 31,
        ]
        .into_iter()
        .enumerate()
        {
            let mut h = base;
            h.seq = seq0.wrapping_add(off).into();
            h.ack = (h.ack.get() + 1000 + i as u32).into(); // must not be trusted
            let n = wire::emit_transport(&mut buf, &addr, &h, &[], b"first").unwrap();
            b.handle_frame(t0, &buf[..n]);
        }
        assert!(!b.wants_transmit(), "forged frames are not answered");
        let d = &b.stats().dropped;
        assert_eq!((d.beyond_window, d.out_of_window), (3, 2), "{d:?}");
        let h = b.conns.keys().next().copied().unwrap();
        let s = b.connection_stats(h).unwrap();
        assert_eq!((s.beyond_window, s.out_of_window, s.violations), (3, 2, 0));
        // The connection still works.
        a.send(c, b"second".to_vec()).unwrap();
        shuttle(&mut a, &mut b, t0, &mut Vec::new());
        assert_eq!(messages(&mut b), vec![b"second".to_vec()]);
        // Its acknowledgement (ACK_SOON, nothing goes back) is due shortly.
        let later = b.poll_timeout().expect("an acknowledgement is due");
        assert!(later <= t0 + Config::default().ack_soon_delay);
        b.handle_timeout(later);
        shuttle(&mut a, &mut b, later, &mut Vec::new());
        let s = a.connection_stats(c).unwrap();
        assert!(s.frames_sent >= 3 && s.rtt_samples >= 1, "{s:?}");
    }

    /// One world of [`endpoint_prediction_matches_the_general_path`]: B
    /// listening, A and C (other MACs) talking to it.
    struct World {
        b: Endpoint,
        peers: Vec<(Endpoint, Option<ConnHandle>)>,
    }

    impl World {
        fn new() -> Self {
            let mut b = keyed(ME, None, 2);
            b.listen(7);
            let third = MacAddr([2, 0, 0, 0, 0, 3]);
            World {
                b,
                peers: vec![(keyed(PEER, None, 1), None), (keyed(third, None, 3), None)],
            }
        }

        /// Run `op` on this world with endpoint and connection prediction
        /// `on`; returns what B sent and its events.
        fn step(&mut self, on: bool, now: Instant, op: &Op) -> String {
            crate::proto::connection::NO_PREDICTION.with(|c| c.set(!on));
            let mut log = String::new();
            let (p, c) = &mut self.peers[op.peer];
            if op.restart {
                let mac = p.mac();
                *p = keyed(mac, None, op.seed);
                *c = None;
            }
            if c.is_none() {
                *c = p.connect(now, ME, 7, None).ok();
            }
            if let Some(c) = *c {
                let _ = p.send(c, vec![op.seed as u8; op.len]);
            }
            for _ in 0..50 {
                let mut moved = false;
                while let Some(mut f) = transmit_at(&mut self.peers[op.peer].0, now) {
                    if let Some((at, x)) = op.mutate {
                        let at = at % f.len();
                        f[at] ^= x;
                    }
                    self.b.handle_frame(now, &f);
                    if op.duplicate {
                        self.b.handle_frame(now, &f);
                    }
                    moved = true;
                }
                while let Some(f) = transmit_at(&mut self.b, now) {
                    log += &format!("{f:?}\n");
                    for (q, _) in &mut self.peers {
                        q.handle_frame(now, &f);
                    }
                    moved = true;
                }
                let (p, _) = &mut self.peers[op.peer];
                while let Some(ev) = p.poll_event() {
                    log += &format!("peer {ev:?}\n");
                }
                while let Some(ev) = self.b.poll_event() {
                    log += &format!("{ev:?}\n");
                }
                if !moved {
                    break;
                }
            }
            self.b.handle_timeout(now);
            let next = self.b.poll_timeout();
            log += &format!("{:?} {next:?}", self.b.stats);
            for (h, s) in self.b.connection_stats_all() {
                log += &format!(" {h:?} {s:?}");
            }
            crate::proto::connection::NO_PREDICTION.with(|c| c.set(false));
            log
        }
    }

    struct Op {
        peer: usize,
        restart: bool,
        seed: u64,
        len: usize,
        mutate: Option<(usize, u8)>,
        duplicate: bool,
    }

    /// Endpoint-level prediction against the general path: two copies of
    /// the same exchange (two peers taking turns, corrupted frames,
    /// duplicates, a peer restarting on the same port), one with
    /// prediction off, must send the same frames, give the same events and
    /// count the same.
    #[test]
    fn endpoint_prediction_matches_the_general_path() {
        for seed in 0..20 {
            let mut rng = Rng::new(seed);
            let (mut fast, mut slow) = (World::new(), World::new());
            let mut now = Instant::from_micros(1);
            for _ in 0..200 {
                now += std::time::Duration::from_micros(rng.below(3000));
                let op = Op {
                    peer: rng.below(2) as usize,
                    restart: rng.chance(0.02),
                    seed: rng.next_u64(),
                    len: [8, 64, 3000][rng.below(3) as usize],
                    // Some in what the prediction compares or skips.
                    mutate: rng
                        .chance(0.2)
                        .then(|| (rng.below(48) as usize, 1 + rng.below(255) as u8)),
                    duplicate: rng.chance(0.1),
                };
                let (f, s) = (fast.step(true, now, &op), slow.step(false, now, &op));
                assert_eq!(f, s, "seed {seed}");
            }
        }
    }
}
