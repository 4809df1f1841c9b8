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
    /// Messages the application queued (`send` took them).
    pub messages_sent: u64,
    /// Bytes of the messages the application queued.
    pub payload_bytes_sent: u64,
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
    pub fn counters(&self) -> [(&'static str, u64); 23] {
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
            ("messages_sent", self.messages_sent),
            ("messages_acked", self.messages_acked),
            ("loss_episodes", self.loss_episodes),
            ("delay_cuts", self.delay_cuts),
            ("frames_sent", self.frames_sent),
            ("payload_bytes_received", self.payload_bytes_received),
            ("payload_bytes_sent", self.payload_bytes_sent),
            ("rtt_samples", self.rtt_samples),
            ("srtt_ns", self.srtt_ns),
            ("min_rtt_ns", self.min_rtt_ns),
            ("latest_rtt_ns", self.latest_rtt_ns),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::super::harness::{messages, pattern, Pair};
    use super::*;

    #[test]
    fn counters_follow_the_traffic() {
        let mut p = Pair::new();
        let (a0, b0) = (p.a.stats().clone(), p.b.stats().clone());
        let sizes = [10, 2000, 300];
        for (i, n) in sizes.iter().enumerate() {
            p.a.send(pattern(*n, i as u8).into()).unwrap();
        }
        let sent = p.round_trip(Duration::from_micros(30));
        let (a, b) = (p.a.stats(), p.b.stats());
        assert_eq!(sent.len(), 4);
        assert_eq!(a.data_frames_sent - a0.data_frames_sent, 4);
        assert_eq!(a.frames_sent - a0.frames_sent, 4);
        assert_eq!(a.messages_acked, 3);
        assert_eq!(a.messages_sent, 3);
        assert_eq!(a.payload_bytes_sent, 2310);
        assert_eq!(a.retransmits + a.timeouts + a.tail_probes, 0);
        assert_eq!(b.frames_received - b0.frames_received, 4);
        assert_eq!(b.messages_received, 3);
        assert_eq!(b.payload_bytes_received, 2310);
        assert_eq!(b.acks_sent - b0.acks_sent, 1);
        assert_eq!(b.duplicates + b.violations + b.beyond_window, 0);
        assert_eq!(a.rtt_samples, 1);
        assert_eq!(a.latest_rtt_ns, 30_000);
        assert_eq!(a.min_rtt_ns, 30_000);
        assert_eq!(a.srtt_ns, 30_000);
        assert_eq!(messages(&mut p.b).len(), 3);
    }

    #[test]
    fn counters_name_every_field_once() {
        let mut s = ConnStats::default();
        let fields: [&mut u64; 23] = [
            &mut s.data_frames_sent,
            &mut s.retransmits,
            &mut s.timeouts,
            &mut s.spurious_timeouts,
            &mut s.tail_probes,
            &mut s.acks_sent,
            &mut s.frames_received,
            &mut s.duplicates,
            &mut s.beyond_window,
            &mut s.out_of_window,
            &mut s.violations,
            &mut s.messages_received,
            &mut s.messages_sent,
            &mut s.messages_acked,
            &mut s.loss_episodes,
            &mut s.delay_cuts,
            &mut s.frames_sent,
            &mut s.payload_bytes_received,
            &mut s.payload_bytes_sent,
            &mut s.rtt_samples,
            &mut s.srtt_ns,
            &mut s.min_rtt_ns,
            &mut s.latest_rtt_ns,
        ];
        for (i, f) in fields.into_iter().enumerate() {
            *f = i as u64 + 1;
        }
        let c = s.counters();
        let names: HashSet<_> = c.iter().map(|(n, _)| *n).collect();
        let values: HashSet<_> = c.iter().map(|(_, v)| *v).collect();
        assert_eq!(names.len(), 23);
        assert_eq!(values, (1..=23).collect());
        assert_eq!(c[1], ("retransmits", s.retransmits));
        assert_eq!(c[2], ("tail_probes", s.tail_probes));
        assert_eq!(c[22], ("latest_rtt_ns", s.latest_rtt_ns));
    }
}
