//! Congestion response: the window's growth (slow start, additive
//! increase), its cuts for queueing delay and for loss, loss detection
//! (RACK), and the undoing of a spurious retransmission timeout.

use std::time::Duration;

use super::timers::Timer;
use super::Connection;
use crate::time::Instant;

/// Scheduling noise allowed on top of twice the smallest round trip before
/// a round trip counts as queueing.
const DELAY_SLACK_NS: u64 = 20_000;

/// The congestion state before a run of retransmission timeouts, and when
/// the first of them fired (wire timestamp).
#[derive(Copy, Clone, Debug)]
pub(super) struct RtoUndo {
    pub(super) at_ts: u32,
    pub(super) cwnd: u32,
    pub(super) ssthresh: u32,
}

impl Connection {
    /// The first acknowledgement of new data after a retransmission
    /// timeout. When it echoes a frame sent before the timeout fired, the
    /// original transmissions got through and only their acknowledgements
    /// were late (a descheduled peer, a host hiccup): the timeout was
    /// spurious (Eifel detection, RFC 3522). Then the window it collapsed
    /// is given back (RFC 4015) and the frames it declared lost are not
    /// resent. Without an echo there is no evidence either way: the
    /// timeout stands.
    #[inline(never)]
    pub(super) fn check_rto(&mut self, ecr: u32) {
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

    pub(super) fn grow_cwnd(&mut self, acked: u32) {
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
    pub(super) fn cut_for_delay(&mut self, now: Instant) {
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
    pub(super) fn detect_losses(&mut self, now: Instant) {
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
    pub(super) fn queue_building(&self) -> bool {
        let min = self.stats.min_rtt_ns;
        min == 0 || self.rtt.latest().as_nanos() as u64 > self.delay_target_ns()
    }

    /// Round-trip time above which frames are taken to be queueing: twice
    /// the smallest seen, plus scheduling noise.
    fn delay_target_ns(&self) -> u64 {
        2 * self.stats.min_rtt_ns + DELAY_SLACK_NS
    }

    /// Frames in flight that are neither acknowledged nor known lost.
    pub(super) fn flight(&self) -> u32 {
        (self.inflight.len() - self.n_sacked - self.n_lost) as u32
    }
}
