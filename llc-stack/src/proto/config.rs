//! Tunables of the reliable transport, with the reasoning behind each default.

use std::time::Duration;

use crate::wire::AuthKey;

/// Settings shared by every connection of an endpoint.
#[derive(Clone, Debug)]
pub struct Config {
    /// Our LLC SAP (individual, not null); see [`crate::wire::llc`].
    pub sap: u8,
    /// Receive buffer per connection in bytes. The advertised credit (in
    /// frames) is this divided by the fragment size, clamped to
    /// [`Config::min_window_frames`]..=[`Config::max_window_frames`]. It bounds the
    /// data a peer may have in flight towards us, so a receiver never has to
    /// drop a frame for lack of buffer space.
    pub recv_buffer_bytes: usize,
    /// Smallest credit window in frames.
    pub min_window_frames: u32,
    /// Largest credit window in frames; also the largest congestion window.
    pub max_window_frames: u32,
    /// Complete messages waiting for the application may use this many bytes
    /// before the credit stops advancing (flow control towards the sender).
    pub undelivered_limit_bytes: usize,
    /// Largest message accepted; longer ones are a protocol violation.
    pub max_message_len: usize,
    /// Bytes of messages queued or unacknowledged per connection above which
    /// `send` refuses new messages (back-pressure instead of unbounded memory).
    pub send_buffer_bytes: usize,
    /// Congestion window at the start, in frames. A LAN has a short, cheap
    /// feedback loop, so start well above TCP's 10 segments.
    pub initial_cwnd: u32,
    /// Floor of the congestion window in frames.
    pub min_cwnd: u32,
    /// Retransmission timeout before any RTT sample.
    pub initial_rto: Duration,
    /// Floor of the retransmission timeout. Well above veth and LAN RTTs
    /// (microseconds) but above scheduler hiccups of a busy host too, so that
    /// a descheduled peer does not cause spurious retransmission storms.
    pub min_rto: Duration,
    /// Ceiling of the retransmission timeout after back-off.
    pub max_rto: Duration,
    /// Retransmission timeouts in a row (no progress in between) after which
    /// the connection fails. With doubling from `min_rto` capped at `max_rto`
    /// this bounds the time a dead peer can hold a request.
    pub max_retransmits: u32,
    /// SYNs sent before `connect` fails.
    pub max_syn_retries: u32,
    /// Report an [`Event::Acked`](super::Event::Acked) for every message the
    /// peer acknowledged. Applications that learn of completion otherwise
    /// (a reply, or not at all) turn it off and save an event per message
    /// on the acknowledgement's path.
    pub acked_events: bool,
    /// Acknowledge after this many in-order data frames at the latest.
    pub ack_every: u32,
    /// Longest delay of an acknowledgement when fewer frames arrived and
    /// the sender did not ask for one soon: announced to the peer in the
    /// handshake as our `max_ack_delay` (its tail-loss probe waits that much
    /// longer). Long enough that the reply of an application whose process
    /// waits its turn for a core (many processes per core, as a file
    /// system's servers and clients run) still carries the acknowledgement,
    /// instead of each end sending one of its own: with 10 µs, 64 BMI
    /// clients of one server cost 5 frames per request against TCP's 2.
    pub ack_delay: Duration,
    /// Longest delay of an acknowledgement the sender asked for with
    /// ACK_SOON (it has sent all it has and a send completes on the
    /// acknowledgement). Long enough for a running application to answer a
    /// request, so that the acknowledgement rides on the reply; short
    /// enough that a sender waiting for it is not held.
    pub ack_soon_delay: Duration,
    /// Send a keepalive probe after this long without hearing from the peer.
    pub keepalive_interval: Duration,
    /// Fail the connection after this long without hearing from the peer.
    pub idle_timeout: Duration,
    /// A half-open inbound connection (SYN-ACK sent, nothing heard back) is
    /// forgotten after this long.
    pub handshake_timeout: Duration,
    /// Most inbound connections in the half-open state at once; further SYNs
    /// are dropped and counted (SYN flood bound).
    pub max_half_open: usize,
    /// Most connections an endpoint holds.
    pub max_connections: usize,
    /// Delay-based window control (docs/PROTOCOL.md 3.9): while the round
    /// trip shows a queue, the window stops growing and shrinks in
    /// proportion, so that bulk transfers keep no standing queue in front of
    /// the receiver (small messages on the same path then wait microseconds,
    /// not milliseconds). Off by default: with a receiver that stops polling
    /// for long stretches (e.g. verifying each 1 MiB message) the short queue
    /// runs dry and loss-free goodput drops by about a quarter.
    pub delay_control: bool,
    /// Frames the device can hold for all connections together (set by
    /// [`Stack::new`](crate::Stack::new) from the device's receive queue;
    /// `None`: unbounded). Every connection's credit window is at most an
    /// equal share of it, so that many peers sending at once (incast)
    /// cannot overflow the queue either.
    pub rx_budget_frames: Option<u32>,
    /// Per-job frame authentication key. With a key, every transport frame
    /// sent carries a keyed MAC and every transport frame received must carry
    /// a valid one (else it is dropped and counted); without one (the
    /// default), frames carrying a MAC are dropped and counted. Both ends of
    /// a connection need the same key. See docs/SECURITY.md.
    pub auth_key: Option<AuthKey>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sap: crate::wire::llc::DEFAULT_SAP,
            recv_buffer_bytes: 8 << 20,
            min_window_frames: 32,
            max_window_frames: 4096,
            undelivered_limit_bytes: 64 << 20,
            max_message_len: 1 << 30,
            send_buffer_bytes: 64 << 20,
            initial_cwnd: 64,
            min_cwnd: 2,
            initial_rto: Duration::from_millis(5),
            min_rto: Duration::from_millis(2),
            max_rto: Duration::from_millis(500),
            max_retransmits: 12,
            max_syn_retries: 12,
            acked_events: true,
            ack_every: 8,
            ack_delay: Duration::from_micros(250),
            ack_soon_delay: Duration::from_micros(10),
            keepalive_interval: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(5),
            max_half_open: 256,
            max_connections: 4096,
            delay_control: false,
            rx_budget_frames: None,
            auth_key: None,
        }
    }
}

impl Config {
    /// Credit window in frames for fragments of `frag_len` bytes.
    pub fn window_frames(&self, frag_len: usize) -> u32 {
        let frames = self.recv_buffer_bytes / frag_len.max(1);
        (frames as u32).clamp(self.min_window_frames, self.max_window_frames)
    }

    /// Bytes of authentication trailer on every transport frame (0 without a key).
    pub fn trailer_len(&self) -> usize {
        if self.auth_key.is_some() {
            crate::wire::auth::TAG_LEN
        } else {
            0
        }
    }

    /// The trailer frames are emitted with.
    pub(crate) fn trailer(&self) -> crate::wire::Trailer<'_> {
        match &self.auth_key {
            Some(k) => crate::wire::Trailer::Key(k),
            None => crate::wire::Trailer::None,
        }
    }
}
