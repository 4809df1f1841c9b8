//! When a waiting loop polls again and when it sleeps.
//!
//! One policy for every loop that waits on the network (the stack's
//! [`crate::Stack::run_until`], the message layer's waiters and its progress
//! thread): poll again at once while rounds move something; keep polling
//! for a spin budget after the last round that did (a reply is usually a few
//! microseconds away, and a sleep costs a wake-up); then sleep in the link's
//! wait for as long as the timers and the caller's deadline allow, and start
//! a new spin budget on waking.

use std::time::Duration;

use crate::time::Instant;

/// What a waiting loop does after a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// The round moved something: poll again at once.
    Busy,
    /// Nothing moved, within the spin budget: poll again (letting other
    /// threads in first).
    Spin,
    /// Nothing moved for the whole budget: sleep in the link's wait.
    Sleep,
}

/// The spin-then-sleep policy's state: when the last round moved something.
#[derive(Clone, Copy, Debug)]
pub struct Pacer {
    spin: Duration,
    last_active: Instant,
}

impl Pacer {
    /// A loop starting at `now` that spins `spin` after its last activity.
    pub fn new(spin: Duration, now: Instant) -> Self {
        Pacer {
            spin,
            last_active: now,
        }
    }

    /// A round ended at `now`, and `moved` says whether it did anything.
    #[inline]
    pub fn after_round(&mut self, moved: bool, now: Instant) -> Pace {
        if moved {
            self.last_active = now;
            Pace::Busy
        } else if now.saturating_duration_since(self.last_active) <= self.spin {
            Pace::Spin
        } else {
            Pace::Sleep
        }
    }

    /// How long since the last round that moved something (or the wake).
    #[inline]
    pub fn idle_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_active)
    }

    /// The loop woke from a sleep at `now`: a new spin budget starts.
    pub fn woke(&mut self, now: Instant) {
        self.last_active = now;
    }

    /// The longest sleep at `now`: the least of what the link's timers
    /// allow (`None`: no limit), the loop's own cap and the time left to its
    /// deadline; `None` when nothing limits it.
    pub fn sleep_limit(
        allowed: Option<Duration>,
        cap: Option<Duration>,
        deadline: Option<Instant>,
        now: Instant,
    ) -> Option<Duration> {
        let left = deadline.map(|d| d.saturating_duration_since(now));
        [allowed, cap, left].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_while_moving_then_spin_then_sleep_and_a_new_budget_on_waking() {
        let spin = Duration::from_micros(50);
        let t0 = Instant::from_micros(1_000);
        let mut p = Pacer::new(spin, t0);
        assert_eq!(
            p.after_round(false, t0 + Duration::from_micros(10)),
            Pace::Spin
        );
        assert_eq!(
            p.after_round(true, t0 + Duration::from_micros(40)),
            Pace::Busy
        );
        // The budget counts from the last activity, not from the start.
        assert_eq!(
            p.after_round(false, t0 + Duration::from_micros(80)),
            Pace::Spin
        );
        assert_eq!(
            p.after_round(false, t0 + Duration::from_micros(91)),
            Pace::Sleep
        );
        assert_eq!(
            p.idle_for(t0 + Duration::from_micros(91)),
            Duration::from_micros(51)
        );
        p.woke(t0 + Duration::from_micros(500));
        assert_eq!(
            p.after_round(false, t0 + Duration::from_micros(520)),
            Pace::Spin
        );
        // No spin budget: sleep as soon as a round moves nothing.
        let mut q = Pacer::new(Duration::ZERO, t0);
        assert_eq!(
            q.after_round(false, t0 + Duration::from_nanos(1)),
            Pace::Sleep
        );
    }

    #[test]
    fn the_sleep_is_bounded_by_timers_cap_and_deadline() {
        let now = Instant::from_millis(10);
        let ms = Duration::from_millis;
        assert_eq!(Pacer::sleep_limit(None, None, None, now), None);
        assert_eq!(
            Pacer::sleep_limit(Some(ms(5)), Some(ms(2)), None, now),
            Some(ms(2))
        );
        assert_eq!(
            Pacer::sleep_limit(Some(ms(5)), None, Some(Instant::from_millis(13)), now),
            Some(ms(3))
        );
        // A deadline already passed: no sleep at all.
        assert_eq!(
            Pacer::sleep_limit(None, Some(ms(1)), Some(Instant::from_millis(9)), now),
            Some(Duration::ZERO)
        );
    }
}
