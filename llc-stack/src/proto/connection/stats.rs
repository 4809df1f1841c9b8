//! Per-connection counters.

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
