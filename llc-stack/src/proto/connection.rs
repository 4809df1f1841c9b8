//! One reliable connection as a sans-IO state machine.
//!
//! Inputs: [`Connection::handle_frame`] (a verified transport frame from the
//! peer) and [`Connection::handle_timeout`] (time passing). Outputs:
//! [`Connection::poll_transmit`] (the next frame to send, written in place),
//! [`Connection::poll_timeout`] (when to call `handle_timeout` next) and
//! [`Connection::poll_event`]. No clock is read and no I/O is done here.
//!
//! Terms (see docs/PROTOCOL.md): a *message* is what the application sends; it
//! is cut into *fragments*, each carried by one DATA *frame* with its own
//! sequence number. Frames are acknowledged cumulatively (`ack`: next expected)
//! plus SACK blocks; the receiver grants *credit* (`window_end`) in frames.
//!
//! Send side: selective repeat. A frame is declared lost when a frame sent
//! after it was acknowledged and a reordering allowance passed (time-based, as
//! RACK does), or when the retransmission timeout fires. A congestion window
//! (slow start, additive increase, halving once per loss episode, collapse on
//! timeout) and the peer's credit both bound what is in flight.
//!
//! Receive side: each fragment is copied once, straight to its place in the
//! message's buffer, even when it arrives out of order; messages are delivered
//! whole and in order.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use std::sync::Arc;

use bytes::Bytes;

use super::buf_pool::BufPool;
use super::config::Config;
use super::error::ConnectionError;
use super::placement::{Placement, Sink};
use super::rtt::RttEstimator;
use super::seq::Seq;
use crate::time::Instant;
use crate::wire::transport::{flags, max_payload, MAX_SACK_BLOCKS};
use crate::wire::{self, Addresses, FrameType, SackBlock, TransportFrame, TransportHeader};

/// Where a connection is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// We sent SYN and wait for SYN-ACK.
    SynSent,
    /// We answered a SYN and wait for the peer's first frame.
    SynReceived,
    /// Data flows both ways.
    Established,
    /// The application closed; our CLOSE goes out after the queued data.
    Closing,
    /// Finished (cleanly or not); the endpoint removes it.
    Closed,
}

/// What a connection reports to the application.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Connected,
    /// A whole message arrived, in order.
    Message {
        /// Sender's message id.
        msg_id: u32,
        /// The message.
        data: Vec<u8>,
    },
    /// Every fragment of one of our messages was acknowledged by the peer.
    Acked {
        /// Id returned by `send`.
        msg_id: u32,
    },
    /// The connection ended: `None` for an orderly close, else why it failed.
    /// Messages not yet acknowledged are lost with it.
    Closed(Option<ConnectionError>),
}

/// Why `send` refused a message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The send buffer is full; retry after `Acked` events.
    #[error("send buffer full ({queued} bytes queued); wait for acknowledgements")]
    BufferFull {
        /// Bytes queued or unacknowledged now.
        queued: usize,
    },
    /// The message is longer than the protocol allows.
    #[error("message of {0} bytes exceeds the maximum message length")]
    TooLong(usize),
    /// The connection is closing or closed.
    #[error("connection is closed")]
    Closed,
}

/// Per-connection counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// DATA frames sent for the first time.
    pub data_frames_sent: u64,
    /// DATA and CLOSE frames sent again.
    pub retransmits: u64,
    /// Retransmissions caused by a timeout rather than by SACK evidence.
    pub timeouts: u64,
    /// Of those timeouts, the ones found spurious (the peer had the frames;
    /// its acknowledgements were late) and undone.
    pub spurious_timeouts: u64,
    /// Tail-loss probes: the newest frame resent after a probe timeout.
    pub tail_probes: u64,
    /// Pure ACK frames sent.
    pub acks_sent: u64,
    /// Frames received and accepted.
    pub frames_received: u64,
    /// Sequenced frames received twice (already had them).
    pub duplicates: u64,
    /// Sequenced frames beyond the credit we granted (dropped, not answered).
    pub beyond_window: u64,
    /// Sequenced frames so far behind the receive window that they cannot be
    /// a late duplicate (dropped, not answered): forged or replayed.
    pub out_of_window: u64,
    /// Frames that broke a protocol rule (dropped).
    pub violations: u64,
    /// Messages delivered to the application.
    pub messages_received: u64,
    /// Messages fully acknowledged by the peer.
    pub messages_acked: u64,
    /// Loss episodes (the window halves only when a queue shows).
    pub loss_episodes: u64,
    /// Round trips in which the window shrank for queueing delay.
    pub delay_cuts: u64,
    /// Frames of every type sent.
    pub frames_sent: u64,
    /// Payload bytes received in accepted DATA frames (duplicates excluded).
    pub payload_bytes_received: u64,
    /// RTT samples taken.
    pub rtt_samples: u64,
    /// Smoothed RTT in nanoseconds (0 before the first sample).
    pub srtt_ns: u64,
    /// Smallest RTT sample in nanoseconds (0 before the first sample).
    pub min_rtt_ns: u64,
    /// Latest RTT sample in nanoseconds.
    pub latest_rtt_ns: u64,
}

impl ConnStats {
    /// Every counter with its name, in declaration order (for tools that
    /// print or serialise them).
    pub fn counters(&self) -> [(&'static str, u64); 21] {
        [
            ("data_frames_sent", self.data_frames_sent),
            ("retransmits", self.retransmits),
            ("tail_probes", self.tail_probes),
            ("timeouts", self.timeouts),
            ("spurious_timeouts", self.spurious_timeouts),
            ("acks_sent", self.acks_sent),
            ("frames_received", self.frames_received),
            ("duplicates", self.duplicates),
            ("beyond_window", self.beyond_window),
            ("out_of_window", self.out_of_window),
            ("violations", self.violations),
            ("messages_received", self.messages_received),
            ("messages_acked", self.messages_acked),
            ("loss_episodes", self.loss_episodes),
            ("delay_cuts", self.delay_cuts),
            ("frames_sent", self.frames_sent),
            ("payload_bytes_received", self.payload_bytes_received),
            ("rtt_samples", self.rtt_samples),
            ("srtt_ns", self.srtt_ns),
            ("min_rtt_ns", self.min_rtt_ns),
            ("latest_rtt_ns", self.latest_rtt_ns),
        ]
    }
}

/// A late duplicate can only be behind the receive window by about one
/// window (the sender never has more than a window in flight, and links
/// keep frames nearly in order); frames further behind than this many
/// windows, or [`MIN_DUPLICATE_HORIZON`] frames, are forged or replayed.
const DUPLICATE_HORIZON_WINDOWS: u32 = 4;
/// Floor of the duplicate horizon in frames.
const MIN_DUPLICATE_HORIZON: u32 = 1 << 16;
const _: () = assert!(MIN_DUPLICATE_HORIZON < 1 << 30);

/// Timers, indexed into a table.
#[derive(Copy, Clone, Debug)]
enum Timer {
    /// Retransmission (and SYN retry).
    Rto = 0,
    /// Delayed acknowledgement.
    Ack = 1,
    /// Keepalive probe, and window probe while the peer grants no credit.
    Probe = 2,
    /// Idle limit / half-open limit.
    Idle = 3,
    /// Tail-loss probe: the last frames of a burst went unanswered for a
    /// couple of round trips (no later frame can reveal their loss).
    Tail = 4,
    /// RACK's reordering timer: a frame sent before one already delivered
    /// becomes lost once it has been out for a round trip plus the
    /// reordering allowance, without waiting for a later acknowledgement.
    Reorder = 5,
}
const TIMER_COUNT: usize = 6;
/// Scheduling noise allowed on top of twice the smallest round trip before
/// a round trip counts as queueing.
const DELAY_SLACK_NS: u64 = 20_000;
/// Acknowledged messages up to this size keep their buffers until the
/// driver's next idle moment ([`Connection::release_acked`]); larger ones
/// are freed at once (their free is small beside their transfer).
const RETIRE_MAX_BYTES: usize = 16 << 10;
/// Most acknowledged buffers held for release; past it they are freed at
/// once, so a driver that is never idle holds at most this many.
pub(crate) const RETIRE_LIMIT: usize = 64;

/// One of our messages, kept from `send` until the peer acknowledged its
/// last fragment. Frames in flight refer to it by id and offset, so cutting
/// and retransmitting fragments costs no reference counting or allocation.
/// The message is `head ++ body`: layers above put their own header in front
/// of a payload they lend, and neither is copied before the frame is written.
#[derive(Debug)]
struct OutMsg {
    msg_id: u32,
    head: Bytes,
    body: Bytes,
    /// Offset of the next fragment to cut.
    next_off: usize,
}

impl OutMsg {
    fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    /// Bytes `off..off + len` of `head ++ body`, as at most two slices.
    fn range(&self, off: usize, len: usize) -> [&[u8]; 2] {
        let h = self.head.len();
        let end = off + len;
        if end <= h {
            [&self.head[off..end], &[]]
        } else if off >= h {
            [&self.body[off - h..end - h], &[]]
        } else {
            [&self.head[off..], &self.body[..end - h]]
        }
    }
}

/// What a sequenced frame in flight carries.
#[derive(Debug)]
enum Cargo {
    Data {
        msg_id: u32,
        off: u32,
        len: u32,
        last: bool,
    },
    Close,
}

#[derive(Debug)]
struct InFlight {
    cargo: Cargo,
    sent_at: Instant,
    sacked: bool,
    lost: bool,
    retransmitted: bool,
}

/// The congestion state before a run of retransmission timeouts, and when
/// the first of them fired (wire timestamp).
#[derive(Copy, Clone, Debug)]
struct RtoUndo {
    at_ts: u32,
    cwnd: u32,
    ssthresh: u32,
}

/// What the receiver remembers of a sequenced frame until it is in order.
#[derive(Copy, Clone, Debug)]
struct RecvMeta {
    msg_id: u32,
    last: bool,
    close: bool,
}

/// A message being reassembled: its first `keep` bytes in `data`, the rest
/// (if a [`Placement`] took it) written straight to `sink`.
struct Assembly {
    data: Vec<u8>,
    len: usize,
    keep: usize,
    sink: Option<Arc<dyn Sink>>,
}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly")
            .field("len", &self.len)
            .field("keep", &self.keep)
            .field("placed", &self.sink.is_some())
            .finish()
    }
}

impl Assembly {
    fn put(&mut self, off: usize, bytes: &[u8]) {
        let end = off + bytes.len();
        if off < self.keep {
            let n = end.min(self.keep) - off;
            self.data[off..off + n].copy_from_slice(&bytes[..n]);
        }
        if end > self.keep {
            if let Some(sink) = &self.sink {
                let start = off.max(self.keep);
                sink.write(start - self.keep, &bytes[start - off..]);
            }
        }
    }
}

/// A reliable connection to one peer port.
#[derive(Debug)]
pub struct Connection {
    cfg: Config,
    state: State,
    addr: Addresses,
    local_port: u16,
    peer_port: u16,
    local_cookie: u32,
    peer_cookie: u32,
    local_mtu: usize,
    frag_len: usize,

    // Send side.
    isn: Seq,
    snd_una: Seq,
    snd_nxt: Seq,
    peer_window_end: Seq,
    next_msg_id: u32,
    /// Messages not yet fully acknowledged, in id order.
    send_msgs: VecDeque<OutMsg>,
    /// Buffers of small acknowledged messages, freed by `release_acked`:
    /// freeing them in the ACK's path would delay the reply to it.
    retired: Vec<OutMsg>,
    /// Index in `send_msgs` of the first message with fragments still unsent.
    next_unsent: usize,
    /// Bytes of messages queued or unacknowledged.
    send_bytes: usize,
    inflight: VecDeque<InFlight>,
    lost_queue: VecDeque<Seq>,
    n_sacked: usize,
    n_lost: usize,
    cwnd: u32,
    ssthresh: u32,
    /// What a retransmission timeout took away, kept until the first
    /// acknowledgement after it tells whether the timeout was spurious.
    rto_undo: Option<RtoUndo>,
    cwnd_acc: u32,
    recovery_end: Option<Seq>,
    /// When the window was last shrunk for queueing delay (at most once per
    /// round trip).
    last_delay_cut: Instant,
    /// RACK (RFC 8985): send time and sequence number of the most recently
    /// sent frame that was delivered, and its round trip.
    rack_time: Instant,
    rack_seq: Seq,
    rack_rtt: Duration,
    /// A tail-loss probe may send one retransmission beyond the congestion
    /// window (the frames that fill it may be lost too, and nothing would
    /// drain it before the RTO).
    probe_credit: bool,
    /// Tail-loss probes sent since the last delivery; each waits twice as
    /// long as the one before.
    probes_in_a_row: u32,
    rtt: RttEstimator,
    backoff: u32,
    syn_attempts: u32,
    close_requested: bool,
    close_queued: bool,
    probe_due: bool,
    syn_ack_due: bool,

    // Receive side.
    rcv_nxt: Seq,
    window_end: Seq,
    window_frames: u32,
    /// The window this connection's configuration gives, before the
    /// endpoint's sharing of the receive budget.
    full_window_frames: u32,
    recv_meta: VecDeque<Option<RecvMeta>>,
    n_out_of_order: usize,
    /// The out-of-order frame that arrived last: its SACK block goes first
    /// (RFC 2018), so a sender that lost an ACK still hears of it.
    last_out_of_order: Seq,
    assemblies: HashMap<u32, Assembly>,
    undelivered_bytes: usize,
    ack_pending: u32,
    ack_now: bool,
    window_was_closed: bool,
    ts_recent: u32,
    last_rx: Instant,
    peer_closed: bool,

    timers: [Option<Instant>; TIMER_COUNT],
    events: VecDeque<Event>,
    stats: ConnStats,
}

/// Microsecond timestamp for the wire; 0 means "none", so it is avoided.
/// RACK: remember in `rack` the most recently sent frame an ACK delivers.
/// A retransmitted frame may have been delivered by its original
/// transmission, so it counts only when the ACK echoes the retransmission's
/// timestamp (`echoed`; never for SACKed frames).
#[inline]
fn note_delivered(rack: &mut Option<(Instant, Seq)>, f: &InFlight, seq: Seq, echoed: bool) {
    if f.retransmitted && !echoed {
        return;
    }
    if rack.is_none_or(|(t, _)| f.sent_at >= t) {
        *rack = Some((f.sent_at, seq));
    }
}

fn wire_ts(now: Instant) -> u32 {
    (now.as_micros() as u32).max(1)
}

impl Connection {
    /// A connection we initiate: it will send SYN on the next `poll_transmit`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn connect(
        cfg: Config,
        now: Instant,
        addr: Addresses,
        local_port: u16,
        peer_port: u16,
        local_cookie: u32,
        isn: u32,
        local_mtu: usize,
    ) -> Self {
        let mut c = Connection::new(
            cfg,
            now,
            addr,
            local_port,
            peer_port,
            local_cookie,
            isn,
            local_mtu,
        );
        c.state = State::SynSent;
        c.syn_ack_due = true; // our SYN
        c
    }

    /// A connection accepted from a SYN; it will answer with SYN-ACK.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept(
        cfg: Config,
        now: Instant,
        addr: Addresses,
        local_port: u16,
        syn: &TransportHeader,
        local_cookie: u32,
        isn: u32,
        local_mtu: usize,
    ) -> Self {
        let peer_port = syn.src_port.get();
        let mut c = Connection::new(
            cfg,
            now,
            addr,
            local_port,
            peer_port,
            local_cookie,
            isn,
            local_mtu,
        );
        c.state = State::SynReceived;
        c.peer_cookie = syn.src_cookie.get();
        c.set_peer_mtu(syn.msg_len.get() as usize);
        c.rcv_nxt = Seq(syn.seq.get());
        c.window_end = c.rcv_nxt.add(c.window_frames);
        c.syn_ack_due = true;
        c.timers[Timer::Idle as usize] = Some(now + c.cfg.handshake_timeout);
        c
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        cfg: Config,
        now: Instant,
        addr: Addresses,
        local_port: u16,
        peer_port: u16,
        local_cookie: u32,
        isn: u32,
        local_mtu: usize,
    ) -> Self {
        let frag_len = max_payload(local_mtu, 0)
            .saturating_sub(cfg.trailer_len())
            .max(1);
        let window_frames = cfg.window_frames(frag_len);
        let rtt = RttEstimator::new(cfg.initial_rto, cfg.min_rto, cfg.max_rto);
        let isn = Seq(isn);
        Connection {
            state: State::SynSent,
            addr,
            local_port,
            peer_port,
            local_cookie,
            peer_cookie: 0,
            local_mtu,
            frag_len,
            isn,
            snd_una: isn,
            snd_nxt: isn,
            peer_window_end: isn,
            next_msg_id: 0,
            send_msgs: VecDeque::new(),
            retired: Vec::new(),
            next_unsent: 0,
            send_bytes: 0,
            inflight: VecDeque::new(),
            lost_queue: VecDeque::new(),
            n_sacked: 0,
            n_lost: 0,
            cwnd: cfg.initial_cwnd.min(cfg.max_window_frames),
            ssthresh: cfg.max_window_frames,
            rto_undo: None,
            cwnd_acc: 0,
            recovery_end: None,
            last_delay_cut: Instant::ZERO,
            rack_time: Instant::ZERO,
            rack_seq: isn,
            rack_rtt: Duration::ZERO,
            probe_credit: false,
            probes_in_a_row: 0,
            rtt,
            backoff: 0,
            syn_attempts: 0,
            close_requested: false,
            close_queued: false,
            probe_due: false,
            syn_ack_due: false,
            rcv_nxt: Seq(0),
            window_end: Seq(0),
            window_frames,
            full_window_frames: window_frames,
            recv_meta: VecDeque::new(),
            n_out_of_order: 0,
            last_out_of_order: isn,
            assemblies: HashMap::new(),
            undelivered_bytes: 0,
            ack_pending: 0,
            ack_now: false,
            window_was_closed: false,
            ts_recent: 0,
            last_rx: now,
            peer_closed: false,
            timers: [None; TIMER_COUNT],
            events: VecDeque::new(),
            stats: ConnStats::default(),
            cfg,
        }
    }

    fn set_peer_mtu(&mut self, peer_mtu: usize) {
        // The smaller MTU of the two ends decides the fragment size; a peer
        // that states none (0) is taken to have ours.
        let mtu = if peer_mtu == 0 {
            self.local_mtu
        } else {
            peer_mtu.min(self.local_mtu)
        };
        self.frag_len = max_payload(mtu, 0)
            .saturating_sub(self.cfg.trailer_len())
            .max(1);
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Our cookie for this connection.
    pub fn local_cookie(&self) -> u32 {
        self.local_cookie
    }

    /// The peer's cookie (0 until the handshake told us).
    pub fn peer_cookie(&self) -> u32 {
        self.peer_cookie
    }

    /// Our port.
    pub fn local_port(&self) -> u16 {
        self.local_port
    }

    /// The peer's port.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// Addresses used on frames we send.
    pub fn addresses(&self) -> &Addresses {
        &self.addr
    }

    /// Counters.
    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }

    /// Smoothed round-trip time.
    pub fn srtt(&self) -> Duration {
        self.rtt.srtt()
    }

    /// Congestion window in frames.
    pub fn cwnd(&self) -> u32 {
        self.cwnd
    }

    /// Payload bytes per DATA frame.
    pub fn fragment_len(&self) -> usize {
        self.frag_len
    }

    /// Congestion window in frames.
    pub fn congestion_window(&self) -> u32 {
        self.cwnd
    }

    /// Bytes of our messages queued or not yet acknowledged.
    pub fn send_buffered(&self) -> usize {
        self.send_bytes
    }

    /// True when every message we sent was acknowledged.
    pub fn is_send_idle(&self) -> bool {
        self.send_msgs.is_empty()
    }

    /// Free the buffers of acknowledged messages held back from the
    /// acknowledgement's path. Drivers call this when idle (the `Stack`
    /// does on a receive pass that found no frame); without it at most
    /// `RETIRE_LIMIT` small buffers wait.
    pub fn release_acked(&mut self) {
        self.retired.clear();
    }

    /// Acknowledged messages whose buffers wait for
    /// [`Connection::release_acked`].
    pub fn acked_held(&self) -> usize {
        self.retired.len()
    }

    /// True when we owe the peer an acknowledgement (due now or delayed).
    pub fn ack_pending(&self) -> bool {
        self.ack_now || self.timers[Timer::Ack as usize].is_some()
    }

    /// Queue a message. Returns its id, which a later `Acked` event names.
    pub fn send(&mut self, data: Bytes) -> Result<u32, SendError> {
        self.send_parts(Bytes::new(), data)
    }

    /// Queue the message `head ++ body` without joining the two.
    pub fn send_parts(&mut self, head: Bytes, body: Bytes) -> Result<u32, SendError> {
        if self.close_requested || self.state == State::Closed {
            return Err(SendError::Closed);
        }
        let len = head.len() + body.len();
        if len > self.cfg.max_message_len || len > u32::MAX as usize {
            return Err(SendError::TooLong(len));
        }
        if self.send_bytes > 0 && self.send_bytes + len > self.cfg.send_buffer_bytes {
            return Err(SendError::BufferFull {
                queued: self.send_bytes,
            });
        }
        let msg_id = self.next_msg_id;
        self.next_msg_id = self.next_msg_id.wrapping_add(1);
        self.send_bytes += len;
        self.send_msgs.push_back(OutMsg {
            msg_id,
            head,
            body,
            next_off: 0,
        });
        Ok(msg_id)
    }

    /// Close after every queued message is delivered: a CLOSE frame follows
    /// the data, and `Closed(None)` is reported once the peer acknowledged it.
    pub fn close(&mut self) {
        if self.state == State::Closed {
            return;
        }
        self.close_requested = true;
        if self.state == State::Established {
            self.state = State::Closing;
        }
    }

    /// Fail the connection now, without telling the peer.
    pub fn abort(&mut self, reason: ConnectionError) {
        self.fail(reason);
    }

    /// The peer repeated its SYN (our SYN-ACK was lost): answer again.
    pub(crate) fn resend_syn_ack(&mut self) {
        if self.state == State::SynReceived {
            self.syn_ack_due = true;
        }
    }

    /// Limit the credit window to `share` frames of the endpoint's receive
    /// budget (`None`: the configured window). A smaller window takes effect
    /// as the peer's frames arrive (what was advertised is never taken
    /// back), unless nothing was advertised yet.
    pub(crate) fn set_window_share(&mut self, share: Option<u32>) {
        self.window_frames = share.map_or(self.full_window_frames, |s| {
            self.full_window_frames.min(s.max(1))
        });
        if self.state == State::SynReceived && self.stats.frames_sent == 0 {
            self.window_end = self.rcv_nxt.add(self.window_frames);
        }
    }

    /// The current credit window in frames.
    pub fn window_frames(&self) -> u32 {
        self.window_frames
    }

    /// The application took a delivered message of `len` bytes: give the
    /// credit back, and announce it if the window had stopped.
    pub(crate) fn message_consumed(&mut self, len: usize) {
        self.undelivered_bytes = self.undelivered_bytes.saturating_sub(len);
        if self.window_was_closed && self.undelivered_bytes < self.cfg.undelivered_limit_bytes {
            self.window_was_closed = false;
            self.ack_now = true;
        }
    }

    fn fail(&mut self, reason: ConnectionError) {
        if self.state != State::Closed {
            tracing::debug!(port = self.local_port, ?reason, "connection failed");
            self.state = State::Closed;
            self.events.push_back(Event::Closed(Some(reason)));
            self.timers = [None; TIMER_COUNT];
        }
    }

    fn finish(&mut self) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.events.push_back(Event::Closed(None));
            self.timers = [None; TIMER_COUNT];
        }
    }

    /// Next event for the application.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When `handle_timeout` should be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.iter().flatten().min().copied()
    }

    /// True once the connection ended and its final event was taken.
    pub fn is_drained(&self) -> bool {
        self.state == State::Closed && self.events.is_empty() && !self.ack_now
    }

    // ----- receiving ---------------------------------------------------------

    /// Process a frame addressed to this connection (ports and cookies already
    /// matched by the endpoint, CRC verified by the parser).
    pub fn handle_frame(&mut self, now: Instant, frame: &TransportFrame<'_>) {
        self.handle_frame_placed(now, frame, None, &mut BufPool::default());
    }

    /// [`Connection::handle_frame`], asking `placement` where new
    /// multi-fragment messages go, and reassembling large messages into
    /// buffers from `pool`.
    pub fn handle_frame_placed(
        &mut self,
        now: Instant,
        frame: &TransportFrame<'_>,
        placement: Option<&mut dyn Placement>,
        pool: &mut BufPool,
    ) {
        let h = frame.header;
        if self.state == State::Closed {
            return;
        }
        if h.frame_type().is_sequenced() && !self.seq_plausible(Seq(h.seq.get())) {
            return;
        }
        let settled = matches!(self.state, State::Established | State::Closing)
            && !matches!(h.frame_type(), FrameType::SynAck | FrameType::Syn);
        if !settled && self.handle_handshake_frame(now, h) {
            return;
        }
        self.last_rx = now;
        self.stats.frames_received += 1;
        if !settled {
            self.rearm_idle(now);
        }
        // Settled: the idle and keepalive deadlines follow `last_rx` lazily
        // (see `on_timer`): pushing both back on every frame costs more than
        // one early wake-up per interval.
        match h.frame_type() {
            FrameType::Data | FrameType::Close => {
                self.receive_sequenced(now, frame, placement, pool)
            }
            FrameType::Ping => self.ack_now = true,
            FrameType::Reset => {
                self.handle_reset();
                return;
            }
            _ => {}
        }
        if self.state != State::Closed {
            self.process_ack(now, h, frame.sacks);
        }
    }

    /// A RESET for an established connection.
    #[cold]
    #[inline(never)]
    fn handle_reset(&mut self) {
        // A reset after our CLOSE was sent means the peer already
        // took the close and forgot us: that is a clean end.
        if self.close_queued {
            self.finish();
        } else {
            self.fail(ConnectionError::Reset);
        }
    }

    /// The handshake's frames, and any frame before the connection is
    /// established (kept out of the data path's code). True when the frame
    /// was consumed here.
    #[cold]
    #[inline(never)]
    fn handle_handshake_frame(&mut self, now: Instant, h: &TransportHeader) -> bool {
        match (self.state, h.frame_type()) {
            (State::SynSent, FrameType::SynAck) => {
                if h.dst_cookie.get() != self.local_cookie {
                    return true;
                }
                self.peer_cookie = h.src_cookie.get();
                self.set_peer_mtu(h.msg_len.get() as usize);
                self.rcv_nxt = Seq(h.seq.get());
                self.window_end = self.rcv_nxt.add(self.window_frames);
                self.peer_window_end = Seq(h.window_end.get());
                self.establish(now);
                self.ack_now = true;
                self.last_rx = now;
                self.stats.frames_received += 1;
                true
            }
            (State::SynSent, FrameType::Reset) => {
                self.fail(ConnectionError::Refused(self.peer_port));
                true
            }
            (State::SynSent, _) => true,
            (_, FrameType::SynAck) => {
                // Our handshake ACK was lost: repeat it.
                self.ack_now = true;
                true
            }
            (_, FrameType::Syn) => true, // handled by the endpoint
            (State::SynReceived, FrameType::Reset) => false,
            (State::SynReceived, _) => {
                self.establish(now);
                false
            }
            _ => false,
        }
    }

    fn establish(&mut self, now: Instant) {
        self.state = if self.close_requested {
            State::Closing
        } else {
            State::Established
        };
        self.backoff = 0;
        self.timers[Timer::Rto as usize] = None;
        self.events.push_back(Event::Connected);
        self.rearm_idle(now);
        self.timers[Timer::Probe as usize] = Some(now + self.cfg.keepalive_interval);
    }

    fn rearm_idle(&mut self, now: Instant) {
        self.timers[Timer::Idle as usize] = Some(now + self.cfg.idle_timeout);
        if self.timers[Timer::Probe as usize].is_some() {
            self.timers[Timer::Probe as usize] = Some(now + self.probe_interval());
        }
    }

    /// When the connection fails for silence: an idle timeout after the
    /// last frame heard.
    fn idle_deadline(&self) -> Instant {
        self.last_rx + self.cfg.idle_timeout
    }

    fn probe_interval(&self) -> Duration {
        if self.window_blocked() {
            self.rtt.rto_backed_off(self.backoff)
        } else {
            self.cfg.keepalive_interval
        }
    }

    /// A sequenced frame is only looked at when its sequence number is below
    /// the credit we granted and at most a duplicate horizon behind
    /// `rcv_nxt`: neither bound is ever crossed by the true peer, so frames
    /// outside are forged (or replayed from long ago). They are counted and
    /// dropped whole (their acknowledgement fields are not trusted either)
    /// and not answered, so that forged frames cannot make us send.
    fn seq_plausible(&mut self, seq: Seq) -> bool {
        if !seq.lt(self.window_end) {
            self.stats.beyond_window += 1;
            return false;
        }
        let horizon = self
            .window_frames
            .saturating_mul(DUPLICATE_HORIZON_WINDOWS)
            .max(MIN_DUPLICATE_HORIZON);
        if self.rcv_nxt.diff(seq) > horizon as i32 {
            self.stats.out_of_window += 1;
            return false;
        }
        true
    }

    fn receive_sequenced(
        &mut self,
        now: Instant,
        frame: &TransportFrame<'_>,
        placement: Option<&mut dyn Placement>,
        pool: &mut BufPool,
    ) {
        let h = frame.header;
        // A whole message in one frame, in order: deliver it without the
        // reassembly map (the common small-message case, whose code stays
        // small; everything else takes the general path).
        if Seq(h.seq.get()) == self.rcv_nxt && h.frame_type() == FrameType::Data {
            let msg_len = h.msg_len.get() as usize;
            if h.frag_off.get() == 0
                && frame.payload.len() == msg_len
                && h.has(flags::LAST_FRAGMENT)
                && msg_len <= self.cfg.max_message_len
            {
                self.deliver_in_order_single(now, h, h.msg_id.get(), frame.payload, pool);
                return;
            }
        }
        self.receive_sequenced_general(now, frame, placement, pool);
    }

    /// [`Self::receive_sequenced`] for duplicates, frames out of order,
    /// fragments and CLOSE.
    #[inline(never)]
    fn receive_sequenced_general(
        &mut self,
        now: Instant,
        frame: &TransportFrame<'_>,
        placement: Option<&mut dyn Placement>,
        pool: &mut BufPool,
    ) {
        let h = frame.header;
        let seq = Seq(h.seq.get());
        if seq.lt(self.rcv_nxt) {
            self.stats.duplicates += 1;
            self.ack_now = true;
            // A retransmission of what we have (our ACK was lost): echo its
            // timestamp, so that the ACK it provokes measures this round
            // trip and not the time since the original was sent (RFC 7323
            // 4.3 updates TS.Recent for such segments too).
            let ts = h.ts_val.get();
            if (ts.wrapping_sub(self.ts_recent) as i32) > 0 {
                self.ts_recent = ts;
            }
            return;
        }
        let idx = seq.diff(self.rcv_nxt) as usize;
        if idx < self.recv_meta.len() && self.recv_meta[idx].is_some() {
            self.stats.duplicates += 1;
            self.ack_now = true;
            return;
        }
        let meta = if h.frame_type() == FrameType::Close {
            RecvMeta {
                msg_id: 0,
                last: false,
                close: true,
            }
        } else {
            let msg_len = h.msg_len.get() as usize;
            let off = h.frag_off.get() as usize;
            let len = frame.payload.len();
            if msg_len > self.cfg.max_message_len
                || off + len > msg_len
                || (len == 0 && msg_len != 0)
            {
                self.stats.violations += 1;
                return;
            }
            let msg_id = h.msg_id.get();
            let asm = self.assemblies.entry(msg_id).or_insert_with(|| {
                let placed = match placement {
                    Some(p) if off == 0 => p.place(msg_len, frame.payload),
                    _ => None,
                };
                match placed {
                    Some((keep, sink)) if keep <= msg_len => Assembly {
                        data: vec![0u8; keep],
                        len: msg_len,
                        keep,
                        sink: Some(sink),
                    },
                    _ => Assembly {
                        data: pool.zeroed(msg_len),
                        len: msg_len,
                        keep: msg_len,
                        sink: None,
                    },
                }
            });
            if asm.len != msg_len {
                self.stats.violations += 1;
                return;
            }
            asm.put(off, frame.payload);
            self.stats.payload_bytes_received += len as u64;
            RecvMeta {
                msg_id,
                last: h.has(flags::LAST_FRAGMENT),
                close: false,
            }
        };
        if self.recv_meta.len() <= idx {
            self.recv_meta.resize(idx + 1, None);
        }
        self.recv_meta[idx] = Some(meta);
        if idx == 0 {
            self.ts_recent = h.ts_val.get();
        } else {
            self.n_out_of_order += 1;
            self.last_out_of_order = seq;
            self.ack_now = true;
        }
        self.advance_in_order(Some(seq));
        self.after_sequenced(now, h);
    }

    /// Move `rcv_nxt` over every frame now in order and deliver the messages
    /// they complete. `fresh` is the frame just received, which was never
    /// counted as out of order.
    fn advance_in_order(&mut self, fresh: Option<Seq>) {
        while let Some(Some(meta)) = self.recv_meta.front().copied() {
            self.recv_meta.pop_front();
            if Some(self.rcv_nxt) != fresh {
                self.n_out_of_order -= 1;
            }
            self.rcv_nxt = self.rcv_nxt.add(1);
            if meta.close {
                self.peer_closed = true;
            } else if meta.last {
                if let Some(asm) = self.assemblies.remove(&meta.msg_id) {
                    self.undelivered_bytes += asm.data.len();
                    self.stats.messages_received += 1;
                    self.events.push_back(Event::Message {
                        msg_id: meta.msg_id,
                        data: asm.data,
                    });
                }
            }
        }
    }

    /// Acknowledgement bookkeeping after a new sequenced frame, and the end
    /// of the connection once the peer's CLOSE is in order.
    fn after_sequenced(&mut self, now: Instant, h: &TransportHeader) {
        self.ack_pending += 1;
        if self.ack_pending >= self.cfg.ack_every || h.has(flags::ACK_NOW) || self.peer_closed {
            self.ack_now = true;
        } else {
            let delay = if h.has(flags::ACK_SOON) {
                self.cfg.ack_soon_delay
            } else {
                self.cfg.ack_delay
            };
            let due = now + delay;
            let t = &mut self.timers[Timer::Ack as usize];
            *t = Some(t.map_or(due, |d| d.min(due)));
        }
        if self.peer_closed {
            // Everything before the CLOSE is delivered; acknowledge it, then end.
            let unacked = self.send_msgs.len() + self.inflight.len();
            self.ack_now = true;
            if unacked == 0 {
                self.finish();
            } else {
                self.fail(ConnectionError::PeerClosed(self.unacked_messages()));
            }
        }
    }

    fn deliver_in_order_single(
        &mut self,
        now: Instant,
        h: &TransportHeader,
        msg_id: u32,
        payload: &[u8],
        pool: &mut BufPool,
    ) {
        self.ts_recent = h.ts_val.get();
        self.rcv_nxt = self.rcv_nxt.add(1);
        self.recv_meta.pop_front();
        self.undelivered_bytes += payload.len();
        self.stats.payload_bytes_received += payload.len() as u64;
        self.stats.messages_received += 1;
        self.events.push_back(Event::Message {
            msg_id,
            data: pool.copy_of(payload),
        });
        // Frames that arrived early may now be in order.
        if !self.recv_meta.is_empty() {
            self.advance_in_order(None);
        }
        self.after_sequenced(now, h);
    }

    fn unacked_messages(&self) -> usize {
        self.send_msgs.len()
    }

    fn process_ack(&mut self, now: Instant, h: &TransportHeader, sacks: &[SackBlock]) {
        let ack = Seq(h.ack.get());
        if self.snd_nxt.lt(ack) || ack.lt(self.snd_una) {
            // Acknowledges something never sent, or is older than what we know.
            if self.snd_nxt.lt(ack) {
                self.stats.violations += 1;
            }
            return;
        }
        let window_end = Seq(h.window_end.get());
        if self.peer_window_end.lt(window_end)
            && window_end.diff(ack) as u32 <= self.cfg.max_window_frames.max(1 << 16)
        {
            self.peer_window_end = window_end;
        }
        let mut newly_acked = 0u32;
        let mut cumulative = 0u32;
        // The most recently sent frame this ACK delivers (RACK).
        let mut rack: Option<(Instant, Seq)> = None;
        let ecr = h.ts_ecr.get();
        // A retransmitted frame may have been delivered by its original
        // transmission (a spurious repair): taking its new send time would
        // declare everything sent before it lost, a cascade of spurious
        // repairs behind a deep queue. It counts only when the ACK echoes
        // the retransmission's timestamp (the receiver echoes the frame that
        // moved its cumulative point), so SACKed retransmissions never do.
        let echoes = |f: &InFlight| ecr != 0 && ecr.wrapping_sub(wire_ts(f.sent_at)) as i32 >= 0;
        while self.snd_una.lt(ack) {
            let Some(f) = self.inflight.pop_front() else {
                break;
            };
            let seq = self.snd_una;
            self.snd_una = self.snd_una.add(1);
            newly_acked += 1;
            cumulative += 1;
            if f.sacked {
                self.n_sacked -= 1;
            } else {
                note_delivered(&mut rack, &f, seq, echoes(&f));
            }
            if f.lost {
                self.n_lost -= 1;
            }
            match f.cargo {
                Cargo::Data { msg_id, last, .. } => {
                    if last {
                        // Frames are acknowledged in order, so this is the
                        // oldest message.
                        let m = self
                            .send_msgs
                            .pop_front()
                            .expect("an unacknowledged message");
                        debug_assert_eq!(m.msg_id, msg_id);
                        self.next_unsent = self.next_unsent.saturating_sub(1);
                        self.send_bytes -= m.len();
                        self.stats.messages_acked += 1;
                        if self.cfg.acked_events {
                            self.events.push_back(Event::Acked { msg_id });
                        }
                        if m.len() <= RETIRE_MAX_BYTES && self.retired.len() < RETIRE_LIMIT {
                            self.retired.push(m);
                        }
                    }
                }
                Cargo::Close => {
                    self.finish();
                    return;
                }
            }
        }
        if !sacks.is_empty() {
            newly_acked += self.apply_sacks(sacks, &mut rack);
        }
        if let Some((t, seq)) = rack {
            if t > self.rack_time || (t == self.rack_time && self.rack_seq.lt(seq)) {
                self.rack_time = t;
                self.rack_seq = seq;
                self.rack_rtt = now.saturating_duration_since(t);
            }
        }
        if newly_acked > 0 {
            self.probes_in_a_row = 0;
            // Only an ACK that moves the cumulative point echoes the
            // timestamp of the frame that moved it. One that only SACKs
            // frames beyond a hole echoes the last in-order frame, sent
            // before the hole: that sample would count the whole time the
            // hole stayed open and inflate the RTO under loss.
            if self.rto_undo.is_some() && cumulative > 0 {
                self.check_rto(ecr);
            }
            if ecr != 0 && cumulative > 0 {
                let rtt_us = wire_ts(now).wrapping_sub(ecr);
                if rtt_us < 60_000_000 {
                    self.rtt.sample(Duration::from_micros(rtt_us as u64));
                    let s = &mut self.stats;
                    let ns = rtt_us as u64 * 1000;
                    s.rtt_samples += 1;
                    s.latest_rtt_ns = ns;
                    s.min_rtt_ns = if s.min_rtt_ns == 0 {
                        ns
                    } else {
                        s.min_rtt_ns.min(ns)
                    };
                    s.srtt_ns = self.rtt.srtt().as_nanos() as u64;
                }
            }
            self.backoff = 0;
            self.timers[Timer::Rto as usize] = if self.inflight.is_empty() {
                None
            } else {
                Some(now + self.rtt.rto())
            };
            self.timers[Timer::Tail as usize] = if self.inflight.is_empty() {
                None
            } else {
                Some(now + self.probe_timeout())
            };
        }
        if let Some(end) = self.recovery_end {
            if !self.snd_una.lt(end) {
                self.recovery_end = None;
            }
        }
        if self.n_sacked > 0 {
            self.detect_losses(now);
        }
        if newly_acked > 0 && self.recovery_end.is_none() {
            if self.cfg.delay_control && self.queue_building() {
                self.cut_for_delay(now);
            } else {
                self.grow_cwnd(newly_acked);
            }
        }
        if self.window_blocked() {
            self.timers[Timer::Probe as usize] = Some(now + self.probe_interval());
        }
    }

    /// Mark the frames `sacks` report as held by the peer; returns how many
    /// were new. Out of line: loss-free exchanges carry no blocks.
    #[inline(never)]
    fn apply_sacks(&mut self, sacks: &[SackBlock], rack: &mut Option<(Instant, Seq)>) -> u32 {
        let mut newly = 0;
        for b in sacks.iter().take(MAX_SACK_BLOCKS) {
            let (start, end) = (Seq(b.start.get()), Seq(b.end.get()));
            let start = start.max(self.snd_una);
            if !start.lt(end) || self.snd_nxt.lt(end) {
                continue;
            }
            let (i0, i1) = (
                start.diff(self.snd_una) as usize,
                end.diff(self.snd_una) as usize,
            );
            let i1 = i1.min(self.inflight.len());
            if i0 >= i1 {
                continue;
            }
            for (i, f) in self.inflight.range_mut(i0..i1).enumerate() {
                if !f.sacked {
                    f.sacked = true;
                    self.n_sacked += 1;
                    if f.lost {
                        f.lost = false;
                        self.n_lost -= 1;
                    }
                    newly += 1;
                    note_delivered(rack, f, self.snd_una.add((i0 + i) as u32), false);
                }
            }
        }
        newly
    }

    /// The first acknowledgement of new data after a retransmission
    /// timeout. When it echoes a frame sent before the timeout fired, the
    /// original transmissions got through and only their acknowledgements
    /// were late (a descheduled peer, a host hiccup): the timeout was
    /// spurious (Eifel detection, RFC 3522). Then the window it collapsed
    /// is given back (RFC 4015) and the frames it declared lost are not
    /// resent. Without an echo there is no evidence either way: the
    /// timeout stands.
    #[inline(never)]
    fn check_rto(&mut self, ecr: u32) {
        let Some(u) = self.rto_undo.take() else {
            return;
        };
        if ecr == 0 || u.at_ts.wrapping_sub(ecr) as i32 <= 0 {
            return;
        }
        self.stats.spurious_timeouts += 1;
        self.cwnd = self.cwnd.max(u.cwnd);
        self.ssthresh = self.ssthresh.max(u.ssthresh);
        self.cwnd_acc = 0;
        self.recovery_end = None;
        for f in self.inflight.iter_mut() {
            f.lost = false;
        }
        self.n_lost = 0;
        self.lost_queue.clear();
    }

    fn grow_cwnd(&mut self, acked: u32) {
        if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + acked).min(self.ssthresh);
        } else {
            self.cwnd_acc += acked;
            if self.cwnd_acc >= self.cwnd {
                self.cwnd_acc -= self.cwnd;
                self.cwnd += 1;
            }
        }
        self.cwnd = self.cwnd.min(self.cfg.max_window_frames);
    }

    /// The round trip shows a queue (see [`Self::queue_building`]): stop
    /// growing, leave slow start, and shrink the window in proportion to the
    /// excess delay, at most once per round trip and by at most half (as
    /// delay-based datacenter transports do). A short queue keeps the
    /// receiver busy; a long one only adds latency, and a lost frame's
    /// repair would wait behind it.
    #[inline(never)]
    fn cut_for_delay(&mut self, now: Instant) {
        let srtt = self.rtt.srtt();
        if now < self.last_delay_cut + srtt {
            return;
        }
        self.last_delay_cut = now;
        let rtt = self.rtt.latest().as_nanos() as u64;
        let target = self.delay_target_ns();
        if rtt <= target {
            return;
        }
        let excess = ((rtt - target) as f64 / rtt as f64).min(1.0);
        let factor = 1.0 - 0.5 * excess;
        self.cwnd = ((self.cwnd as f64 * factor) as u32).max(self.cfg.min_cwnd);
        self.ssthresh = self.cwnd;
        self.cwnd_acc = 0;
        self.stats.delay_cuts += 1;
    }

    /// RACK (RFC 8985): a frame sent before one that was since delivered is
    /// lost once it has been out for that frame's round trip plus the
    /// reordering allowance. Those not yet overdue arm the reordering timer,
    /// so that a loss near the end of a burst, or while the window is full,
    /// is found without a later acknowledgement.
    #[inline(never)]
    fn detect_losses(&mut self, now: Instant) {
        let wait = self.rack_rtt + self.reorder_window();
        let (rack_time, rack_seq) = (self.rack_time, self.rack_seq);
        let mut found = false;
        let mut next: Option<Instant> = None;
        for (i, f) in self.inflight.iter_mut().enumerate() {
            if f.sacked || f.lost {
                continue;
            }
            let seq = self.snd_una.add(i as u32);
            let sent_before = f.sent_at < rack_time || (f.sent_at == rack_time && seq.lt(rack_seq));
            if !sent_before {
                continue;
            }
            let due = f.sent_at + wait;
            if due <= now {
                f.lost = true;
                self.n_lost += 1;
                self.lost_queue.push_back(seq);
                found = true;
            } else {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        self.timers[Timer::Reorder as usize] = next;
        if found && self.recovery_end.is_none() {
            self.enter_recovery(now);
        }
    }

    /// RACK's reordering allowance (RFC 8985): a quarter of the smallest
    /// round trip, not of the smoothed one, which a queue inflates (with a
    /// full receive ring, srtt/4 was half a millisecond on veth, and every
    /// repair waited that long); at least 50 µs of scheduling noise.
    fn reorder_window(&self) -> Duration {
        let base = if self.stats.min_rtt_ns == 0 {
            self.rtt.srtt()
        } else {
            Duration::from_nanos(self.stats.min_rtt_ns)
        };
        (base / 4).max(Duration::from_micros(50))
    }

    /// A loss episode. With a queue behind it (the latest round trip well
    /// above the path's minimum: frames wait somewhere, as in incast) the
    /// window halves, as in Reno. Without one, the loss was a random drop or
    /// a corrupted frame on an idle path: the frames are repaired without
    /// slowing down, since on a LAN the window that fills the path is small
    /// and halving it on every random loss starves the link (Reno at 1% loss
    /// held about 12 frames against a 35-frame path).
    #[inline(never)]
    fn enter_recovery(&mut self, _now: Instant) {
        self.stats.loss_episodes += 1;
        self.recovery_end = Some(self.snd_nxt);
        if !self.queue_building() {
            return;
        }
        self.ssthresh = (self.flight() / 2).max(self.cfg.min_cwnd);
        self.cwnd = self.ssthresh.max(self.cfg.min_cwnd);
        self.cwnd_acc = 0;
    }

    /// True when the latest RTT sample shows frames queueing on the path:
    /// more than twice the smallest RTT seen plus 20 µs of scheduling noise.
    /// Without samples yet, assume a queue.
    fn queue_building(&self) -> bool {
        let min = self.stats.min_rtt_ns;
        min == 0 || self.rtt.latest().as_nanos() as u64 > self.delay_target_ns()
    }

    /// Round-trip time above which frames are taken to be queueing: twice
    /// the smallest seen, plus scheduling noise.
    fn delay_target_ns(&self) -> u64 {
        2 * self.stats.min_rtt_ns + DELAY_SLACK_NS
    }

    /// Frames in flight that are neither acknowledged nor known lost.
    fn flight(&self) -> u32 {
        (self.inflight.len() - self.n_sacked - self.n_lost) as u32
    }

    fn window_blocked(&self) -> bool {
        self.has_unsent() && !self.snd_nxt.lt(self.peer_window_end) && self.inflight.is_empty()
    }

    // ----- timers --------------------------------------------------------------

    /// Process every timer that expired at `now`. Spurious calls are harmless.
    pub fn handle_timeout(&mut self, now: Instant) {
        for t in [
            Timer::Idle,
            Timer::Rto,
            Timer::Ack,
            Timer::Probe,
            Timer::Tail,
            Timer::Reorder,
        ] {
            if self.state == State::Closed {
                return;
            }
            if self.timers[t as usize].is_some_and(|d| d <= now) {
                self.timers[t as usize] = None;
                self.on_timer(now, t);
            }
        }
    }

    fn on_timer(&mut self, now: Instant, t: Timer) {
        match t {
            Timer::Idle => match self.state {
                // Half-open: forget silently; the application never saw it.
                State::SynReceived => {
                    self.state = State::Closed;
                    self.timers = [None; TIMER_COUNT];
                }
                State::Established | State::Closing if now < self.idle_deadline() => {
                    // Heard from the peer since the deadline was set.
                    self.timers[Timer::Idle as usize] = Some(self.idle_deadline());
                }
                _ => self.fail(ConnectionError::IdleTimeout(self.cfg.idle_timeout)),
            },
            Timer::Rto => {
                if self.state == State::SynSent {
                    if self.syn_attempts > self.cfg.max_syn_retries {
                        self.fail(if self.cfg.auth_key.is_some() {
                            ConnectionError::AuthConnectTimeout(self.syn_attempts)
                        } else {
                            ConnectionError::ConnectTimeout(self.syn_attempts)
                        });
                    } else {
                        self.backoff += 1;
                        self.syn_ack_due = true;
                    }
                    return;
                }
                if self.inflight.is_empty() {
                    return;
                }
                self.backoff += 1;
                if self.backoff > self.cfg.max_retransmits {
                    self.fail(ConnectionError::RetransmitLimit(self.backoff - 1));
                    return;
                }
                self.stats.timeouts += 1;
                if self.rto_undo.is_none() {
                    self.rto_undo = Some(RtoUndo {
                        at_ts: wire_ts(now),
                        cwnd: self.cwnd,
                        ssthresh: self.ssthresh,
                    });
                }
                self.ssthresh = (self.flight() / 2).max(self.cfg.min_cwnd);
                self.cwnd = self.cfg.min_cwnd;
                self.cwnd_acc = 0;
                self.recovery_end = Some(self.snd_nxt);
                self.lost_queue.clear();
                self.n_lost = 0;
                for (i, f) in self.inflight.iter_mut().enumerate() {
                    f.lost = !f.sacked;
                    if f.lost {
                        self.n_lost += 1;
                        self.lost_queue.push_back(self.snd_una.add(i as u32));
                    }
                }
                self.timers[Timer::Rto as usize] =
                    Some(now + self.rtt.rto_backed_off(self.backoff));
            }
            Timer::Ack => {
                if self.ack_pending > 0 {
                    self.ack_now = true;
                }
            }
            Timer::Probe => {
                if matches!(self.state, State::Established | State::Closing) {
                    let due = self.last_rx + self.probe_interval();
                    if now < due {
                        // Heard from the peer since the deadline was set.
                        self.timers[Timer::Probe as usize] = Some(due);
                        return;
                    }
                    self.probe_due = true;
                    self.timers[Timer::Probe as usize] = Some(now + self.probe_interval());
                }
            }
            Timer::Tail => self.tail_probe(),
            Timer::Reorder => {
                if matches!(self.state, State::Established | State::Closing) {
                    self.detect_losses(now);
                }
            }
        }
    }

    /// Probe timeout after the last transmission: twice the smoothed RTT
    /// (the receiver acknowledges a burst's last frame at once, ACK_NOW) plus
    /// scheduling slack, far below the RTO floor.
    fn probe_timeout(&self) -> Duration {
        self.rtt.srtt() * 2 + Duration::from_micros(50)
    }

    /// When the next tail-loss probe is due after a retransmission: the
    /// probe timeout, doubled for every probe already sent without a
    /// delivery since, and none once that reaches the RTO, which takes over
    /// (its back-off and retry bound decide a dead peer's fate). The RTO
    /// floor is fifty round trips on a LAN, so a lost probe (or its lost
    /// answer) gets a second chance well before it.
    fn next_probe(&self, now: Instant) -> Option<Instant> {
        let wait = self.probe_timeout() * (1u32 << self.probes_in_a_row.min(16));
        (wait < self.rtt.rto()).then_some(now + wait)
    }

    /// Nothing was delivered for a probe timeout: send one frame beyond the
    /// congestion window, so that its acknowledgement (with SACK) reveals
    /// what was lost, instead of waiting for the RTO (RACK-TLP, RFC 8985).
    /// The frame is the first repair already due, else the newest
    /// unacknowledged frame. Not a congestion signal.
    #[inline(never)]
    fn tail_probe(&mut self) {
        if !matches!(self.state, State::Established | State::Closing) {
            return;
        }
        if self.n_lost == 0 {
            let Some(i) = self.inflight.iter().rposition(|f| !f.sacked && !f.lost) else {
                return;
            };
            self.inflight[i].lost = true;
            self.n_lost += 1;
            self.lost_queue.push_back(self.snd_una.add(i as u32));
        }
        self.probe_credit = true;
        self.probes_in_a_row += 1;
        self.stats.tail_probes += 1;
    }

    // ----- transmitting --------------------------------------------------------

    /// Write the next frame to send into `buf` (a device TX buffer) and return
    /// its length, or `None` when there is nothing to send now.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let n = self.next_transmit(now, buf);
        self.stats.frames_sent += n.is_some() as u64;
        n
    }

    fn next_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        match self.state {
            State::Closed => {
                // A final acknowledgement (of the peer's CLOSE) may remain.
                return if self.ack_now {
                    self.emit_control(now, buf, FrameType::Ack, 0)
                } else {
                    None
                };
            }
            State::SynSent => {
                if !self.syn_ack_due {
                    return None;
                }
                self.syn_ack_due = false;
                self.syn_attempts += 1;
                self.timers[Timer::Rto as usize] =
                    Some(now + self.rtt.rto_backed_off(self.backoff));
                return self.emit_control(now, buf, FrameType::Syn, 0);
            }
            State::SynReceived => {
                if self.syn_ack_due {
                    self.syn_ack_due = false;
                    return self.emit_control(now, buf, FrameType::SynAck, 0);
                }
                return None;
            }
            State::Established | State::Closing => {}
        }
        if let Some(n) = self.poll_retransmit(now, buf) {
            return Some(n);
        }
        if let Some(n) = self.poll_new_frame(now, buf) {
            return Some(n);
        }
        if self.probe_due {
            self.probe_due = false;
            return self.emit_control(now, buf, FrameType::Ping, flags::ACK_NOW);
        }
        if self.ack_now {
            self.stats.acks_sent += 1;
            return self.emit_control(now, buf, FrameType::Ack, 0);
        }
        None
    }

    /// True when `poll_transmit` may produce a frame now (cheap; drivers use
    /// it to skip asking the device for a transmit buffer).
    pub fn wants_transmit(&self) -> bool {
        match self.state {
            State::Closed => self.ack_now,
            State::SynSent | State::SynReceived => self.syn_ack_due,
            State::Established | State::Closing => {
                self.ack_now
                    || self.probe_due
                    || (!self.lost_queue.is_empty() && (self.can_send() || self.probe_credit))
                    || ((self.has_unsent() || (self.close_requested && !self.close_queued))
                        && self.snd_nxt.lt(self.peer_window_end)
                        && self.can_send())
            }
        }
    }

    fn has_unsent(&self) -> bool {
        self.next_unsent < self.send_msgs.len()
    }

    fn can_send(&self) -> bool {
        self.flight() < self.cwnd
    }

    fn poll_retransmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        while let Some(&seq) = self.lost_queue.front() {
            let idx = seq.diff(self.snd_una);
            let live = idx >= 0
                && (idx as usize) < self.inflight.len()
                && self.inflight[idx as usize].lost;
            if !live {
                self.lost_queue.pop_front();
                continue;
            }
            if !self.can_send() && !self.probe_credit {
                return None;
            }
            self.probe_credit = false;
            self.lost_queue.pop_front();
            self.timers[Timer::Tail as usize] = self.next_probe(now);
            let f = &mut self.inflight[idx as usize];
            f.lost = false;
            f.retransmitted = true;
            f.sent_at = now;
            self.n_lost -= 1;
            self.stats.retransmits += 1;
            let ack = if self.lost_queue.is_empty() {
                flags::ACK_NOW
            } else {
                0
            };
            return self.emit_sequenced(now, buf, seq, idx as usize, ack);
        }
        None
    }

    fn poll_new_frame(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        if !self.snd_nxt.lt(self.peer_window_end) || !self.can_send() {
            return None;
        }
        let cargo = if let Some(m) = self.send_msgs.get_mut(self.next_unsent) {
            let off = m.next_off;
            let len = (m.len() - off).min(self.frag_len);
            m.next_off += len;
            let last = m.next_off == m.len();
            let cargo = Cargo::Data {
                msg_id: m.msg_id,
                off: off as u32,
                len: len as u32,
                last,
            };
            if last {
                self.next_unsent += 1;
            }
            cargo
        } else if self.close_requested && !self.close_queued && self.state == State::Closing {
            self.close_queued = true;
            Cargo::Close
        } else {
            return None;
        };
        let seq = self.snd_nxt;
        self.snd_nxt = self.snd_nxt.add(1);
        self.inflight.push_back(InFlight {
            cargo,
            sent_at: now,
            sacked: false,
            lost: false,
            retransmitted: false,
        });
        self.stats.data_frames_sent += 1;
        self.timers[Timer::Tail as usize] = Some(now + self.probe_timeout());
        if self.timers[Timer::Rto as usize].is_none() {
            self.timers[Timer::Rto as usize] = Some(now + self.rtt.rto_backed_off(self.backoff));
        }
        // Ask for an immediate ACK when this is the last frame we may send
        // for now although more is queued: we would otherwise wait for the
        // delayed-ACK timer. When we have sent all we have, a prompt ACK is
        // enough (ACK_SOON): it lets a reply from the peer's application
        // carry it, so a request and its response cost one frame each.
        let ack = if !self.has_unsent() {
            flags::ACK_SOON
        } else if self.snd_nxt.lt(self.peer_window_end) && self.flight() < self.cwnd {
            0
        } else {
            flags::ACK_NOW
        };
        let idx = self.inflight.len() - 1;
        self.emit_sequenced(now, buf, seq, idx, ack)
    }

    fn ack_fields(&mut self, h: &mut TransportHeader) {
        if self.undelivered_bytes < self.cfg.undelivered_limit_bytes {
            self.window_end = self.window_end.max(self.rcv_nxt.add(self.window_frames));
        } else {
            self.window_was_closed = true;
        }
        h.ack = self.rcv_nxt.0.into();
        h.window_end = self.window_end.0.into();
        h.ts_ecr = self.ts_recent.into();
        self.ack_pending = 0;
        self.ack_now = false;
        self.timers[Timer::Ack as usize] = None;
    }

    fn sack_blocks(&self, room: usize) -> ([SackBlock; MAX_SACK_BLOCKS], usize) {
        let mut out = [SackBlock::default(); MAX_SACK_BLOCKS];
        let max = room.min(MAX_SACK_BLOCKS);
        if self.n_out_of_order == 0 || max == 0 {
            return (out, 0);
        }
        // Runs of frames held beyond `rcv_nxt`, as index ranges: the run
        // holding the frame that arrived last, and the highest runs.
        let recent = usize::try_from(self.last_out_of_order.diff(self.rcv_nxt)).ok();
        let mut highest = [(0usize, 0usize); MAX_SACK_BLOCKS];
        let (mut runs, mut recent_run, mut start) = (0usize, None, None);
        let len = self.recv_meta.len();
        for i in 0..=len {
            let held = i < len && self.recv_meta[i].is_some();
            match (held, start) {
                (true, None) => start = Some(i),
                (false, Some(s)) => {
                    highest[runs % MAX_SACK_BLOCKS] = (s, i);
                    runs += 1;
                    if recent.is_some_and(|r| s <= r && r < i) {
                        recent_run = Some((s, i));
                    }
                    start = None;
                }
                _ => {}
            }
        }
        let block = |(s, e): (usize, usize)| {
            SackBlock::new(self.rcv_nxt.add(s as u32).0, self.rcv_nxt.add(e as u32).0)
        };
        let mut n = 0;
        if let Some(r) = recent_run {
            out[0] = block(r);
            n = 1;
        }
        for k in 1..=runs.min(MAX_SACK_BLOCKS) {
            let r = highest[(runs - k) % MAX_SACK_BLOCKS];
            if n == max {
                break;
            }
            if Some(r) != recent_run {
                out[n] = block(r);
                n += 1;
            }
        }
        (out, n)
    }

    fn base_header(&self, now: Instant, kind: FrameType, flag_bits: u8) -> TransportHeader {
        TransportHeader {
            kind: kind.into(),
            flags: flag_bits,
            src_port: self.local_port.into(),
            dst_port: self.peer_port.into(),
            src_cookie: self.local_cookie.into(),
            dst_cookie: self.peer_cookie.into(),
            seq: self.snd_nxt.0.into(),
            ts_val: wire_ts(now).into(),
            ..Default::default()
        }
    }

    fn emit_control(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        kind: FrameType,
        flag_bits: u8,
    ) -> Option<usize> {
        let mut h = self.base_header(now, kind, flag_bits);
        match kind {
            FrameType::Syn => {
                h.seq = self.isn.0.into();
                h.msg_len = (self.local_mtu as u32).into();
            }
            FrameType::SynAck => {
                h.seq = self.isn.0.into();
                h.msg_len = (self.local_mtu as u32).into();
                self.ack_fields(&mut h);
            }
            _ => self.ack_fields(&mut h),
        }
        let (sacks, n) = if matches!(kind, FrameType::Ack | FrameType::Ping) {
            self.sack_blocks(MAX_SACK_BLOCKS)
        } else {
            ([SackBlock::default(); MAX_SACK_BLOCKS], 0)
        };
        wire::emit_transport_with(buf, &self.addr, &h, &sacks[..n], &[], self.cfg.trailer()).ok()
    }

    fn emit_sequenced(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        seq: Seq,
        idx: usize,
        ack_request: u8,
    ) -> Option<usize> {
        let mut h = self.base_header(now, FrameType::Data, ack_request);
        h.seq = seq.0.into();
        self.ack_fields(&mut h);
        let payload: [&[u8]; 2] = match self.inflight[idx].cargo {
            Cargo::Data {
                msg_id,
                off,
                len,
                last,
            } => {
                let first = self.send_msgs.front().expect("a message in flight").msg_id;
                let m = &self.send_msgs[msg_id.wrapping_sub(first) as usize];
                h.msg_id = msg_id.into();
                h.msg_len = (m.len() as u32).into();
                h.frag_off = off.into();
                if last {
                    h.flags |= flags::LAST_FRAGMENT;
                }
                m.range(off as usize, len as usize)
            }
            Cargo::Close => {
                h.kind = FrameType::Close.into();
                [&[], &[]]
            }
        };
        let payload_len = payload[0].len() + payload[1].len();
        // Carry SACK blocks when they fit beside the payload within the
        // fragment size both ends accept.
        let room =
            self.frag_len.saturating_sub(payload_len) / crate::wire::transport::SACK_BLOCK_LEN;
        let (sacks, n) = self.sack_blocks(room);
        wire::emit_transport_gather(
            buf,
            &self.addr,
            &h,
            &sacks[..n],
            payload,
            self.cfg.trailer(),
        )
        .ok()
    }
}
