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
//!
//! The code is split by concern, one `impl Connection` block per file, and
//! each concern's state is a struct of its own whose fields only its file
//! touches (as quinn-proto's paths own their congestion controller and RTT
//! estimator): this file holds the connection's life (state, handshake),
//! the public verbs and the dispatch of frames and timers; `ends.rs` the
//! two ends' addresses and fragment size (`Ends`); `send.rs` our
//! sequence space (`SendQueue`: queued messages, frames in flight,
//! repairs, the peer's credit), cutting and transmitting frames and taking
//! acknowledgements; `recv.rs` the receive side (`Reassembly`: credit,
//! frames held out of order, messages being put together; `PendingAck`:
//! the acknowledgement we owe), placing frames, delivering messages and
//! writing acknowledgements and SACK blocks; `timers.rs` the timer table
//! (`Timers`), the path's round trip and the timeouts derived from it
//! (`PathTiming`) and the keepalive (`Keepalive`); `congestion.rs` the
//! congestion window (`Congestion`, the only code that moves it) and
//! loss detection; `stats.rs` the counters.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;

use super::buf_pool::BufPool;
use super::config::Config;
use super::conn_table::ConnHandle;
use super::error::ConnectionError;
use super::placement::Placement;
use super::seq::Seq;
use crate::time::Instant;
use crate::wire::{Addresses, FrameType, Tail, TransportFrame, TransportHeader};

mod congestion;
mod ends;
mod recv;
mod send;
mod stats;
mod timers;

#[cfg(test)]
mod harness;
#[cfg(test)]
mod prediction_tests;

#[cfg(test)]
thread_local! {
    /// Set by tests that compare header prediction with the general path.
    pub(crate) static NO_PREDICTION: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True unless a test turned header prediction off (always, outside tests).
#[inline(always)]
pub(crate) fn prediction_on() -> bool {
    #[cfg(test)]
    if NO_PREDICTION.with(|c| c.get()) {
        return false;
    }
    true
}

use congestion::Congestion;
use ends::Ends;
use recv::{PendingAck, Reassembly};
use send::SendQueue;
#[cfg(test)]
pub(crate) use send::RETIRE_LIMIT;
pub use stats::ConnStats;
use timers::{Keepalive, PathTiming, Timer, Timers};

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

/// The handshake's progress: how many SYNs we sent, and whether a SYN or
/// SYN-ACK is to go (a first one, or again after a loss).
#[derive(Debug, Default)]
struct Handshake {
    attempts: u32,
    due: bool,
}

impl Handshake {
    /// Send our SYN or SYN-ACK (again) at the next chance.
    fn request(&mut self) {
        self.due = true;
    }

    /// A SYN or SYN-ACK is to go.
    fn is_due(&self) -> bool {
        self.due
    }

    /// True once when one is due (it is being sent).
    fn take(&mut self) -> bool {
        std::mem::take(&mut self.due)
    }

    /// One more SYN went out.
    fn count_attempt(&mut self) {
        self.attempts += 1;
    }

    /// SYNs sent so far (0: the peer opened the connection).
    fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// A reliable connection to one peer port.
#[derive(Debug)]
pub struct Connection {
    cfg: Config,
    state: State,
    /// The application asked to close (the CLOSE follows the queued data).
    close_requested: bool,
    /// Addresses, ports, cookies, frame prefix and fragment size.
    ends: Ends,
    /// SYNs sent, and whether a SYN or SYN-ACK is to go.
    handshake: Handshake,

    // Send side.
    /// Our sequence space: queued messages, frames in flight, repairs,
    /// RACK's latest delivery, the peer's credit.
    snd: SendQueue,
    /// The congestion window, its growth and cuts.
    cc: Congestion,
    /// The round trip, back-off and probes the timeouts come from.
    timing: PathTiming,

    // Receive side.
    /// Credit, frames held out of order, messages being put together.
    rcv: Reassembly,
    /// The acknowledgement we owe the peer.
    ack: PendingAck,
    /// When we last heard from the peer; a keepalive due.
    alive: Keepalive,

    /// The deadlines of every timer.
    timers: Timers,
    events: VecDeque<Event>,
    /// The endpoint's name for this connection, for the events it queues
    /// straight into the endpoint's queue.
    handle: ConnHandle,
    stats: ConnStats,
}

/// Microsecond timestamp for the wire; 0 means "none", so it is avoided.
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
        c.handshake.request(); // our SYN
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
        c.answer_syn(now, syn);
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
        let ends = Ends::new(
            addr,
            local_port,
            peer_port,
            local_cookie,
            local_mtu,
            cfg.trailer_len(),
        );
        let window_frames = cfg.window_frames(ends.frag_len());
        let isn = Seq(isn);
        Connection {
            state: State::SynSent,
            ends,
            snd: SendQueue::new(isn),
            cc: Congestion::new(&cfg),
            timing: PathTiming::new(&cfg),
            handshake: Handshake::default(),
            close_requested: false,
            rcv: Reassembly::new(window_frames, isn, cfg.undelivered_limit_bytes),
            ack: PendingAck::default(),
            alive: Keepalive::new(now),
            timers: Timers::NONE,
            events: VecDeque::new(),
            handle: ConnHandle(0),
            stats: ConnStats::default(),
            cfg,
        }
    }

    /// The peer's announced `max_ack_delay` in microseconds (a SYN's or
    /// SYN-ACK's `frag_off`; 0: none announced), bounded by our largest
    /// timeout so that a hostile value cannot stall the tail-loss probe.
    fn set_peer_max_ack_delay(&mut self, micros: u32) {
        self.timing.set_peer_max_ack_delay(micros, self.cfg.max_rto);
    }

    /// The peer's announced longest acknowledgement delay (zero: none).
    pub fn peer_max_ack_delay(&self) -> Duration {
        self.timing.peer_max_ack_delay()
    }

    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Our cookie for this connection.
    pub fn local_cookie(&self) -> u32 {
        self.ends.local_cookie()
    }

    /// The peer's cookie (0 until the handshake told us).
    pub fn peer_cookie(&self) -> u32 {
        self.ends.peer_cookie()
    }

    /// Our port.
    pub fn local_port(&self) -> u16 {
        self.ends.local_port()
    }

    /// The peer's port.
    pub fn peer_port(&self) -> u16 {
        self.ends.peer_port()
    }

    /// Addresses used on frames we send.
    pub fn addresses(&self) -> &Addresses {
        self.ends.addr()
    }

    /// Counters.
    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }

    /// Smoothed round-trip time.
    pub fn srtt(&self) -> Duration {
        self.timing.rtt().srtt()
    }

    /// Mean deviation of the RTT samples (RFC 6298's RTTVAR).
    pub fn rtt_var(&self) -> Duration {
        self.timing.rtt().rttvar()
    }

    /// Frames the peer's credit still lets us send (its window end minus
    /// our next sequence number).
    pub fn send_credit(&self) -> u32 {
        self.snd.credit()
    }

    /// Frames sent and not yet acknowledged cumulatively.
    pub fn in_flight(&self) -> usize {
        self.snd.in_flight()
    }

    /// Congestion window in frames.
    pub fn cwnd(&self) -> u32 {
        self.cc.window()
    }

    /// Payload bytes per DATA frame.
    pub fn fragment_len(&self) -> usize {
        self.ends.frag_len()
    }

    /// Congestion window in frames.
    pub fn congestion_window(&self) -> u32 {
        self.cc.window()
    }

    /// Bytes of our messages queued or not yet acknowledged.
    pub fn send_buffered(&self) -> usize {
        self.snd.buffered()
    }

    /// True when every message we sent was acknowledged.
    pub fn is_send_idle(&self) -> bool {
        self.snd.is_idle()
    }

    /// Free the buffers of acknowledged messages held back from the
    /// acknowledgement's path. Drivers call this when idle (the `Stack`
    /// does on a receive pass that found no frame); without it at most
    /// `RETIRE_LIMIT` small buffers wait.
    pub fn release_acked(&mut self) {
        self.snd.release_acked();
    }

    /// Acknowledged messages whose buffers wait for
    /// [`Connection::release_acked`].
    pub fn acked_held(&self) -> usize {
        self.snd.acked_held()
    }

    /// True when we owe the peer an acknowledgement (due now or delayed).
    pub fn ack_pending(&self) -> bool {
        self.ack.is_due_now() || self.timers.get(Timer::Ack).is_some()
    }

    /// Queue a message. Returns its id, which a later `Acked` event names.
    /// Inlined, with the queueing: a short message's send cost less than
    /// the call and its result returned through memory.
    #[inline]
    pub fn send(&mut self, data: Bytes) -> Result<u32, SendError> {
        self.queue_message(&[], data, false)
    }

    /// Queue the message `head ++ body` without joining the two.
    pub fn send_parts(&mut self, head: &[u8], body: Bytes) -> Result<u32, SendError> {
        self.send_parts_with(head, body, false)
    }

    /// [`Connection::send_parts`] of a message whose sender waits for its
    /// acknowledgement (a body lent until then): its last frame asks the
    /// peer to acknowledge soon (ACK_SOON) rather than within the peer's
    /// `max_ack_delay`. With `acked_events` on every message is awaited.
    pub fn send_parts_awaited(&mut self, head: &[u8], body: Bytes) -> Result<u32, SendError> {
        self.send_parts_with(head, body, true)
    }

    #[inline]
    pub(crate) fn send_parts_with(
        &mut self,
        head: &[u8],
        body: Bytes,
        awaited: bool,
    ) -> Result<u32, SendError> {
        self.queue_message(head, body, awaited)
    }

    /// What every send does, inlined into [`Connection::send`] and
    /// [`Connection::send_parts_with`].
    #[inline(always)]
    fn queue_message(&mut self, head: &[u8], body: Bytes, awaited: bool) -> Result<u32, SendError> {
        if self.close_requested || self.state == State::Closed {
            return Err(SendError::Closed);
        }
        let len = head.len() + body.len();
        if len > self.cfg.max_message_len || len > u32::MAX as usize {
            return Err(SendError::TooLong(len));
        }
        if self.snd.is_full_for(len, self.cfg.send_buffer_bytes) {
            return Err(SendError::BufferFull {
                queued: self.snd.buffered(),
            });
        }
        self.stats.messages_sent += 1;
        self.stats.payload_bytes_sent += len as u64;
        Ok(self.snd.push(len, head, body, awaited))
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
    /// Both ends opened this connection at once (same ports) and the
    /// peer's SYN wins: answer it as though we had been listening, keeping
    /// this connection's handle and the messages queued on it. Our SYN,
    /// which the peer drops, is forgotten.
    pub(crate) fn adopt_syn(&mut self, now: Instant, syn: &TransportHeader) {
        debug_assert_eq!(self.state, State::SynSent);
        self.timing.reset_backoff();
        self.timers = Timers::NONE;
        self.answer_syn(now, syn);
    }

    /// Take the peer's SYN: its cookie, MTU, ACK delay and initial sequence
    /// number, and a SYN-ACK to send, within the handshake timeout.
    fn answer_syn(&mut self, now: Instant, syn: &TransportHeader) {
        self.state = State::SynReceived;
        self.ends.set_peer_cookie(syn.src_cookie.get());
        self.ends
            .set_peer_mtu(syn.msg_len.get() as usize, self.cfg.trailer_len());
        self.set_peer_max_ack_delay(syn.frag_off.get());
        self.rcv.start(Seq(syn.seq.get()));
        self.handshake.request();
        self.timers
            .set(Timer::Idle, Some(now + self.cfg.handshake_timeout));
    }

    pub(crate) fn resend_syn_ack(&mut self) {
        if self.state == State::SynReceived {
            self.handshake.request();
        }
    }

    /// Limit the credit window to `share` frames of the endpoint's receive
    /// budget (`None`: the configured window). A smaller window takes effect
    /// as the peer's frames arrive (what was advertised is never taken
    /// back), unless nothing was advertised yet.
    pub(crate) fn set_window_share(&mut self, share: Option<u32>) {
        let advertised = self.state != State::SynReceived || self.stats.frames_sent > 0;
        self.rcv.set_share(share, !advertised);
    }

    /// The current credit window in frames.
    pub fn window_frames(&self) -> u32 {
        self.rcv.window_frames()
    }

    /// The application took a delivered message of `len` bytes: give the
    /// credit back, and announce it if the window had stopped.
    pub(crate) fn message_consumed(&mut self, len: usize) {
        self.rcv.consumed(len, &mut self.ack);
    }

    fn fail(&mut self, reason: ConnectionError) {
        if self.state != State::Closed {
            tracing::debug!(port = self.ends.local_port(), ?reason, "connection failed");
            self.state = State::Closed;
            self.events.push_back(Event::Closed(Some(reason)));
            self.timers = Timers::NONE;
        }
    }

    fn finish(&mut self) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.events.push_back(Event::Closed(None));
            self.timers = Timers::NONE;
        }
    }

    /// Next event for the application.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Name this connection `h` in the events it queues.
    pub(crate) fn set_handle(&mut self, h: ConnHandle) {
        self.handle = h;
    }

    /// True when `poll_event` has something, or the connection ended: what
    /// its owner must look at after a frame (cheap).
    #[inline]
    pub fn needs_collecting(&self) -> bool {
        !self.events.is_empty() || self.state == State::Closed
    }

    /// When `handle_timeout` should be called next.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next()
    }

    /// True once the connection ended and its final event was taken.
    pub fn is_drained(&self) -> bool {
        self.state == State::Closed && self.events.is_empty() && !self.ack.is_due_now()
    }

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
        self.handle_frame_to(now, frame, placement, pool, None);
    }

    /// [`Connection::handle_frame_placed`] that queues a message delivered
    /// whole straight into `events` (the endpoint's queue) when nothing is
    /// queued here before it: the endpoint then need not move it over.
    pub(crate) fn handle_frame_to(
        &mut self,
        now: Instant,
        frame: &TransportFrame<'_>,
        placement: Option<&mut dyn Placement>,
        pool: &mut BufPool,
        events: Option<&mut VecDeque<(ConnHandle, Event)>>,
    ) {
        let h = frame.header;
        // Our wire clock, read once: the timestamp to echo and the RTT
        // sample both take it.
        let wts = wire_ts(now);
        if self.predicted(frame) {
            // Header prediction: what the dispatch below does for this
            // frame, without the checks it already passed.
            self.alive.heard(now);
            self.stats.frames_received += 1;
            self.deliver_in_order_single(now, wts, h, frame.payload, pool, events);
        } else {
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
            self.alive.heard(now);
            self.stats.frames_received += 1;
            if !settled {
                self.rearm_idle(now);
            }
            // Settled: the idle and keepalive deadlines follow `last_rx` lazily
            // (see `on_timer`): pushing both back on every frame costs more than
            // one early wake-up per interval.
            match h.frame_type() {
                FrameType::Data | FrameType::Close => {
                    self.receive_sequenced(now, frame, placement, pool, events)
                }
                FrameType::Ping => self.ack.request_now(),
                FrameType::Reset => {
                    self.handle_reset();
                    return;
                }
                _ => {}
            }
            if self.state == State::Closed {
                return;
            }
        }
        self.process_ack(now, wts, h, frame.sacks);
    }

    /// A RESET for an established connection.
    #[cold]
    #[inline(never)]
    fn handle_reset(&mut self) {
        // A reset after our CLOSE was sent means the peer already
        // took the close and forgot us: that is a clean end.
        if self.snd.close_queued() {
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
                if h.dst_cookie.get() != self.ends.local_cookie() {
                    return true;
                }
                self.ends.set_peer_cookie(h.src_cookie.get());
                self.ends
                    .set_peer_mtu(h.msg_len.get() as usize, self.cfg.trailer_len());
                self.set_peer_max_ack_delay(h.frag_off.get());
                self.rcv.start(Seq(h.seq.get()));
                self.snd.set_peer_window_end(Seq(h.window_end.get()));
                self.establish(now);
                self.ack.request_now();
                self.alive.heard(now);
                self.stats.frames_received += 1;
                true
            }
            (State::SynSent, FrameType::Reset) => {
                self.fail(ConnectionError::Refused(self.ends.peer_port()));
                true
            }
            (State::SynSent, _) => true,
            (_, FrameType::SynAck) => {
                // Our handshake ACK was lost: repeat it.
                self.ack.request_now();
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
        self.timing.reset_backoff();
        self.timers.set(Timer::Rto, None);
        self.events.push_back(Event::Connected);
        self.rearm_idle(now);
        self.timers
            .set(Timer::Probe, Some(now + self.cfg.keepalive_interval));
    }

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
            if self.timers.get(t).is_some_and(|d| d <= now) {
                self.timers.set(t, None);
                self.on_timer(now, t);
            }
        }
    }

    /// Write the next frame to send into `buf` (a device TX buffer) and return
    /// its length, or `None` when there is nothing to send now.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.poll_transmit_to(now, buf, None)
    }

    /// [`Connection::poll_transmit`] for a device that sends a frame's end
    /// from where it lies ([`crate::link::TxToken::consume_gather`]): a long
    /// payload may stay in the message, returned as the frame's tail (with
    /// a key, the tag is written after the frame's start and goes last).
    #[must_use]
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(usize, Option<Tail>)> {
        let mut tail = None;
        let n = self.poll_transmit_to(now, buf, Some(&mut tail))?;
        Some((n, tail))
    }

    fn poll_transmit_to(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        tail: Option<&mut Option<Tail>>,
    ) -> Option<usize> {
        let n = self.next_transmit(now, buf, tail);
        self.stats.frames_sent += n.is_some() as u64;
        n
    }
}
