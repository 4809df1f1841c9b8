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

    #[inline(always)]
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
        let wait = Duration::from_nanos(self.rack_rtt_ns) + self.reorder_window();
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
        self.timers.set(Timer::Reorder, next);
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

#[cfg(test)]
mod tests {
    use super::super::harness::{deliver, pattern, transmit_all, Pair};
    use super::*;
    use crate::proto::config::Config;

    #[test]
    fn acknowledgements_grow_the_window() {
        let mut p = Pair::new();
        let cwnd0 = p.a.cwnd();
        assert_eq!(cwnd0, Config::default().initial_cwnd);
        let frag = p.a.fragment_len();
        // Slow start: one frame more per frame acknowledged.
        p.a.send(pattern(cwnd0 as usize * frag, 1).into()).unwrap();
        assert_eq!(
            p.round_trip(Duration::from_micros(30)).len(),
            cwnd0 as usize
        );
        assert_eq!(p.a.cwnd(), 2 * cwnd0);
        // Congestion avoidance: one frame more per window acknowledged.
        let w = p.a.cwnd();
        p.a.ssthresh = w;
        p.a.send(pattern(w as usize * frag, 2).into()).unwrap();
        assert_eq!(p.round_trip(Duration::from_micros(30)).len(), w as usize);
        assert_eq!(p.a.cwnd(), w + 1);
        assert_eq!(p.a.stats().loss_episodes, 0);
    }

    #[test]
    fn a_timeout_collapses_the_window() {
        let mut p = Pair::new();
        let frag = p.a.fragment_len();
        p.a.send(pattern(20 * frag, 1).into()).unwrap();
        assert_eq!(transmit_all(&mut p.a, p.now).len(), 20);
        let rto = p.a.timers.get(Timer::Rto).unwrap();
        p.advance_to(rto);
        assert_eq!(p.a.stats().timeouts, 1);
        assert_eq!(p.a.cwnd(), Config::default().min_cwnd);
        // Half of what was in flight when the timeout fired.
        assert_eq!(p.a.ssthresh, 10);
        assert_eq!(p.a.n_lost, 20);
    }

    /// A burst of ten frames after a round trip of 20 µs; the fourth is
    /// lost and the others' acknowledgement takes `rtt`. Returns A's window
    /// before the loss is found and after.
    fn loss_in_a_burst(rtt: Duration) -> (Pair, u32, u32) {
        let mut p = Pair::new();
        p.a.send(pattern(10, 0).into()).unwrap();
        p.round_trip(Duration::from_micros(20));
        assert_eq!(p.a.stats().min_rtt_ns, 20_000);
        let frag = p.a.fragment_len();
        p.a.send(pattern(10 * frag, 1).into()).unwrap();
        let t = p.now;
        let frames = transmit_all(&mut p.a, t);
        assert_eq!(frames.len(), 10);
        for (i, f) in frames.iter().enumerate() {
            if i != 3 {
                deliver(&mut p.b, t, f);
            }
        }
        let acks = transmit_all(&mut p.b, t);
        assert!(!acks.is_empty());
        p.now = t + rtt;
        for f in &acks {
            deliver(&mut p.a, p.now, f);
        }
        assert_eq!(p.a.n_sacked, 6);
        let before = p.a.cwnd();
        // RACK: lost once out for the delivered frames' round trip plus the
        // reordering allowance (a quarter of the smallest RTT, at least 50 µs).
        let due =
            p.a.timers
                .get(Timer::Reorder)
                .expect("the reordering timer");
        assert_eq!(due, t + rtt + Duration::from_micros(50));
        assert_eq!(p.a.n_lost, 0);
        p.advance_to(due);
        assert_eq!(p.a.n_lost, 1);
        assert_eq!(p.a.stats().loss_episodes, 1);
        let after = p.a.cwnd();
        let resent = transmit_all(&mut p.a, p.now);
        assert_eq!(resent.len(), 1);
        assert_eq!(p.a.stats().retransmits, 1);
        (p, before, after)
    }

    #[test]
    fn a_loss_behind_a_queue_cuts_the_window() {
        // 200 µs against a smallest round trip of 20 µs: frames queue.
        let (p, before, after) = loss_in_a_burst(Duration::from_micros(200));
        assert!(p.a.queue_building());
        // Nothing but the lost frame was still in flight: down to the floor.
        assert_eq!(after, Config::default().min_cwnd);
        assert!(before > after);
        assert_eq!(p.a.ssthresh, after);
    }

    #[test]
    fn a_random_loss_on_an_idle_path_keeps_the_window() {
        let (p, before, after) = loss_in_a_burst(Duration::from_micros(20));
        assert!(!p.a.queue_building());
        assert_eq!(after, before);
    }
}
