//! Time as the protocol sees it: a monotonic nanosecond counter.
//!
//! The sans-IO layers never read a clock; the caller passes `now` in. Real drivers
//! take it from [`Instant::now`], simulations from a virtual clock, so the same
//! state machine runs deterministically in tests and at full speed on a link.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an arbitrary epoch (boot for
/// [`Instant::now`], zero in simulations).
#[derive(Copy, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Instant {
    nanos: u64,
}

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant { nanos: 0 };

    /// A point `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant { nanos }
    }

    /// A point `micros` microseconds after the epoch.
    pub const fn from_micros(micros: u64) -> Self {
        Instant {
            nanos: micros * 1_000,
        }
    }

    /// A point `millis` milliseconds after the epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Instant {
            nanos: millis * 1_000_000,
        }
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.nanos
    }

    /// Microseconds since the epoch (truncated).
    pub const fn as_micros(self) -> u64 {
        self.nanos / 1_000
    }

    /// The monotonic clock (`CLOCK_MONOTONIC`, the clock of
    /// `std::time::Instant`), in nanoseconds since boot. Read directly: a
    /// busy-polling loop reads it on every pass, and the subtraction and
    /// checks of `std::time::Instant::elapsed` cost as much as the read.
    pub fn now() -> Self {
        Instant {
            nanos: crate::sys::monotonic_nanos(),
        }
    }

    /// `nanos` nanoseconds later (saturating): the timers' arithmetic, kept
    /// in integers on the per-frame path.
    #[inline]
    pub const fn add_nanos(self, nanos: u64) -> Self {
        Instant {
            nanos: self.nanos.saturating_add(nanos),
        }
    }

    /// Time elapsed since `earlier`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.nanos.saturating_sub(earlier.nanos))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        Instant {
            nanos: self.nanos.saturating_add(rhs.as_nanos() as u64),
        }
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = *self + rhs;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_micros(5);
        assert_eq!(t + Duration::from_micros(3), Instant::from_micros(8));
        assert_eq!(Instant::from_micros(8) - t, Duration::from_micros(3));
        assert_eq!(t - Instant::from_micros(8), Duration::ZERO);
        assert!(Instant::now() <= Instant::now());
    }
}
