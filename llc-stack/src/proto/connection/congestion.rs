//! Congestion response: the window's growth (slow start, additive
//! increase), its cuts for queueing delay and for loss, loss detection
//! (RACK), and the undoing of a spurious retransmission timeout.
//!
//! [`Congestion`] owns the window and the state that moves it; the rest
//! of the connection reports acknowledgements, losses and timeouts to it
//! and asks it whether a frame may go, as quinn-proto's paths hold their
//! congestion controller.

use std::time::Duration;

use super::timers::Timer;
use super::Connection;
use crate::proto::config::Config;
use crate::proto::rtt::RttEstimator;
use crate::proto::seq::Seq;
use crate::time::Instant;

/// Scheduling noise allowed on top of twice the smallest round trip before
/// a round trip counts as queueing.
const DELAY_SLACK_NS: u64 = 20_000;

/// The congestion window and everything that moves it: the one owner of
/// `cwnd`, so that growth, cuts and the undoing of a spurious timeout
/// are read in one place (the send and timer code only report events to
/// it and ask whether the window allows a frame).
#[derive(Debug)]
pub(super) struct Congestion {
    /// Frames that may be in flight (neither acknowledged nor lost).
    cwnd: u32,
    /// Slow start ends here.
    ssthresh: u32,
    /// Frames acknowledged towards the next increment in congestion
    /// avoidance (one frame more per window acknowledged).
    cwnd_acc: u32,
    /// The configuration's floor and ceiling of the window (copied: the
    /// controller needs nothing else of it).
    min_cwnd: u32,
    max_cwnd: u32,
    /// Shrink the window when the round trip shows a queue
    /// ([`Config::delay_control`]).
    delay_control: bool,
    /// In recovery until the cumulative point reaches this sequence number
    /// (the next one to send when the loss episode began): the window is
    /// cut at most once per episode and does not grow in it.
    recovery_end: Option<Seq>,
    /// What a retransmission timeout took away, kept until the first
    /// acknowledgement after it tells whether the timeout was spurious.
    rto_undo: Option<RtoUndo>,
    /// When the window was last shrunk for queueing delay (at most once per
    /// round trip).
    last_delay_cut: Instant,
}

/// The congestion state before a run of retransmission timeouts, and when
/// the first of them fired (wire timestamp).
#[derive(Copy, Clone, Debug)]
struct RtoUndo {
    at_ts: u32,
    cwnd: u32,
    ssthresh: u32,
}

/// What the controller reads of the round trip: the estimator's smoothed
/// and latest samples, and the smallest sample seen (0: none yet).
#[derive(Clone, Copy)]
pub(super) struct RttView<'a> {
    pub(super) rtt: &'a RttEstimator,
    pub(super) min_rtt_ns: u64,
}

impl RttView<'_> {
    /// True when the latest RTT sample shows frames queueing on the path:
    /// more than twice the smallest RTT seen plus 20 µs of scheduling noise.
    /// Without samples yet, assume a queue.
    #[inline]
    pub(super) fn queue_building(&self) -> bool {
        self.min_rtt_ns == 0 || self.rtt.latest().as_nanos() as u64 > self.delay_target_ns()
    }

    /// Round-trip time above which frames are taken to be queueing: twice
    /// the smallest seen, plus scheduling noise.
    fn delay_target_ns(&self) -> u64 {
        2 * self.min_rtt_ns + DELAY_SLACK_NS
    }
}

impl Congestion {
    /// The window a new connection starts with: `initial_cwnd`, in slow
    /// start up to the largest window.
    pub(super) fn new(cfg: &Config) -> Self {
        Congestion {
            cwnd: cfg.initial_cwnd.min(cfg.max_window_frames),
            ssthresh: cfg.max_window_frames,
            cwnd_acc: 0,
            min_cwnd: cfg.min_cwnd,
            max_cwnd: cfg.max_window_frames,
            delay_control: cfg.delay_control,
            recovery_end: None,
            rto_undo: None,
            last_delay_cut: Instant::ZERO,
        }
    }

    /// The congestion window in frames.
    #[inline(always)]
    pub(super) fn window(&self) -> u32 {
        self.cwnd
    }

    /// True when `flight` frames in flight leave room for one more.
    #[inline(always)]
    pub(super) fn allows(&self, flight: u32) -> bool {
        flight < self.cwnd
    }

    /// Neither in a loss episode nor waiting to judge a timeout: an
    /// acknowledgement can only grow (or delay-cut) the window.
    #[inline(always)]
    pub(super) fn is_steady(&self) -> bool {
        self.rto_undo.is_none() && self.recovery_end.is_none()
    }

    /// In a loss episode (the window neither grows nor is cut again).
    #[inline(always)]
    pub(super) fn in_recovery(&self) -> bool {
        self.recovery_end.is_some()
    }

    /// A retransmission timeout waits to be judged spurious or not.
    #[inline(always)]
    pub(super) fn judges_timeout(&self) -> bool {
        self.rto_undo.is_some()
    }

    /// The cumulative point moved to `snd_una`: the loss episode ends once
    /// it passed every frame sent before the episode began.
    #[inline(always)]
    pub(super) fn on_cumulative_ack(&mut self, snd_una: Seq) {
        if let Some(end) = self.recovery_end {
            if !snd_una.lt(end) {
                self.recovery_end = None;
            }
        }
    }

    /// The window answers acknowledgements with [`Self::cut_for_delay`]
    /// rather than growth when the round trip shows a queue
    /// ([`Config::delay_control`]).
    #[inline(always)]
    pub(super) fn watches_delay(&self) -> bool {
        self.delay_control
    }

    /// `acked` frames newly acknowledged outside recovery: one frame more
    /// per frame in slow start, per window in congestion avoidance.
    #[inline(always)]
    pub(super) fn grow(&mut self, acked: u32) {
        if self.cwnd < self.ssthresh {
            self.cwnd = (self.cwnd + acked).min(self.ssthresh);
        } else {
            self.cwnd_acc += acked;
            if self.cwnd_acc >= self.cwnd {
                self.cwnd_acc -= self.cwnd;
                self.cwnd += 1;
            }
        }
        self.cwnd = self.cwnd.min(self.max_cwnd);
    }

    /// The round trip shows a queue (see [`RttView::queue_building`]): stop
    /// growing, leave slow start, and shrink the window in proportion to the
    /// excess delay, at most once per round trip and by at most half (as
    /// delay-based datacenter transports do). A short queue keeps the
    /// receiver busy; a long one only adds latency, and a lost frame's
    /// repair would wait behind it. True when the window shrank.
    pub(super) fn cut_for_delay(&mut self, now: Instant, rtt: RttView<'_>) -> bool {
        let srtt = rtt.rtt.srtt();
        if now < self.last_delay_cut + srtt {
            return false;
        }
        self.last_delay_cut = now;
        let latest = rtt.rtt.latest().as_nanos() as u64;
        let target = rtt.delay_target_ns();
        if latest <= target {
            return false;
        }
        let excess = ((latest - target) as f64 / latest as f64).min(1.0);
        let factor = 1.0 - 0.5 * excess;
        self.cwnd = ((self.cwnd as f64 * factor) as u32).max(self.min_cwnd);
        self.ssthresh = self.cwnd;
        self.cwnd_acc = 0;
        true
    }

    /// A loss episode begins, `snd_nxt` being the next frame to send. With a
    /// queue behind it (the latest round trip well above the path's
    /// minimum: frames wait somewhere, as in incast) the window halves, as
    /// in Reno, from the `flight` still out. Without one, the loss was a
    /// random drop or a corrupted frame on an idle path: the frames are
    /// repaired without slowing down, since on a LAN the window that fills
    /// the path is small and halving it on every random loss starves the
    /// link (Reno at 1% loss held about 12 frames against a 35-frame path).
    pub(super) fn on_loss(&mut self, snd_nxt: Seq, flight: u32, queue_building: bool) {
        self.recovery_end = Some(snd_nxt);
        if !queue_building {
            return;
        }
        self.ssthresh = (flight / 2).max(self.min_cwnd);
        self.cwnd = self.ssthresh.max(self.min_cwnd);
        self.cwnd_acc = 0;
    }

    /// A retransmission timeout fired at wire time `at_ts` with `flight`
    /// frames out and `snd_nxt` next: the window collapses to its floor
    /// and recovery lasts until what was sent is acknowledged. The state
    /// before the first timeout of a run is kept for [`Self::undo_timeout`].
    pub(super) fn on_timeout(&mut self, at_ts: u32, snd_nxt: Seq, flight: u32) {
        if self.rto_undo.is_none() {
            self.rto_undo = Some(RtoUndo {
                at_ts,
                cwnd: self.cwnd,
                ssthresh: self.ssthresh,
            });
        }
        self.ssthresh = (flight / 2).max(self.min_cwnd);
        self.cwnd = self.min_cwnd;
        self.cwnd_acc = 0;
        self.recovery_end = Some(snd_nxt);
    }

    /// The first acknowledgement of new data after a retransmission
    /// timeout, echoing `ecr`. When it echoes a frame sent before the
    /// timeout fired, the original transmissions got through and only
    /// their acknowledgements were late: the window the timeout collapsed
    /// is given back (RFC 4015) and true is returned. Either way the
    /// timeout is judged.
    pub(super) fn undo_timeout(&mut self, ecr: u32) -> bool {
        let Some(u) = self.rto_undo.take() else {
            return false;
        };
        if ecr == 0 || u.at_ts.wrapping_sub(ecr) as i32 <= 0 {
            return false;
        }
        self.cwnd = self.cwnd.max(u.cwnd);
        self.ssthresh = self.ssthresh.max(u.ssthresh);
        self.cwnd_acc = 0;
        self.recovery_end = None;
        true
    }

    /// Slow start's end, for tests that move it.
    #[cfg(test)]
    pub(super) fn ssthresh(&self) -> u32 {
        self.ssthresh
    }

    /// Leave slow start at `w` frames (tests of congestion avoidance).
    #[cfg(test)]
    pub(super) fn set_ssthresh(&mut self, w: u32) {
        self.ssthresh = w;
    }
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
        if !self.cc.undo_timeout(ecr) {
            return;
        }
        self.stats.spurious_timeouts += 1;
        self.snd.forget_losses();
    }

    /// The congestion window's answer to `acked` newly acknowledged frames
    /// outside recovery: growth, unless it watches the delay and the round
    /// trip shows a queue. (The round trip is read, and the cut's result
    /// checked, only off the common path.)
    #[inline(always)]
    pub(super) fn grow_or_cut(&mut self, now: Instant, acked: u32) {
        if self.cc.watches_delay() && self.queue_building() {
            self.cut_for_delay(now);
        } else {
            self.cc.grow(acked);
        }
    }

    /// [`Congestion::cut_for_delay`], counted when the window shrank.
    #[inline(never)]
    fn cut_for_delay(&mut self, now: Instant) {
        let rtt = RttView {
            rtt: self.timing.rtt(),
            min_rtt_ns: self.stats.min_rtt_ns,
        };
        if self.cc.cut_for_delay(now, rtt) {
            self.stats.delay_cuts += 1;
        }
    }

    /// RACK (RFC 8985): a frame sent before one that was since delivered is
    /// lost once it has been out for that frame's round trip plus the
    /// reordering allowance. Those not yet overdue arm the reordering timer,
    /// so that a loss near the end of a burst, or while the window is full,
    /// is found without a later acknowledgement.
    #[inline(never)]
    pub(super) fn detect_losses(&mut self, now: Instant) {
        let wait = self.snd.rack_rtt() + self.reorder_window();
        let (found, next) = self.snd.detect_losses(now, wait);
        self.timers.set(Timer::Reorder, next);
        if found && !self.cc.in_recovery() {
            self.enter_recovery();
        }
    }

    /// RACK's reordering allowance (RFC 8985): a quarter of the smallest
    /// round trip, not of the smoothed one, which a queue inflates (with a
    /// full receive ring, srtt/4 was half a millisecond on veth, and every
    /// repair waited that long); at least 50 µs of scheduling noise.
    fn reorder_window(&self) -> Duration {
        let base = if self.stats.min_rtt_ns == 0 {
            self.timing.rtt().srtt()
        } else {
            Duration::from_nanos(self.stats.min_rtt_ns)
        };
        (base / 4).max(Duration::from_micros(50))
    }

    /// A loss episode: counted, and the window cut if a queue shows
    /// ([`Congestion::on_loss`]).
    #[inline(never)]
    fn enter_recovery(&mut self) {
        self.stats.loss_episodes += 1;
        let queue = self.queue_building();
        self.cc.on_loss(self.snd.nxt(), self.snd.flight(), queue);
    }

    /// True when the latest RTT sample shows frames queueing on the path
    /// ([`RttView::queue_building`]).
    pub(super) fn queue_building(&self) -> bool {
        let rtt = RttView {
            rtt: self.timing.rtt(),
            min_rtt_ns: self.stats.min_rtt_ns,
        };
        rtt.queue_building()
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
        p.a.cc.set_ssthresh(w);
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
        assert_eq!(p.a.cc.ssthresh(), 10);
        assert_eq!(p.a.snd.lost_count(), 20);
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
        assert_eq!(p.a.snd.sacked_count(), 6);
        let before = p.a.cwnd();
        // RACK: lost once out for the delivered frames' round trip plus the
        // reordering allowance (a quarter of the smallest RTT, at least 50 µs).
        let due =
            p.a.timers
                .get(Timer::Reorder)
                .expect("the reordering timer");
        assert_eq!(due, t + rtt + Duration::from_micros(50));
        assert_eq!(p.a.snd.lost_count(), 0);
        p.advance_to(due);
        assert_eq!(p.a.snd.lost_count(), 1);
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
        assert_eq!(p.a.cc.ssthresh(), after);
    }

    #[test]
    fn a_random_loss_on_an_idle_path_keeps_the_window() {
        let (p, before, after) = loss_in_a_burst(Duration::from_micros(20));
        assert!(!p.a.queue_building());
        assert_eq!(after, before);
    }
}
