//! Round-trip time estimation and the retransmission timeout (RFC 6298).

use std::time::Duration;

/// Smoothed RTT, its variation, and the timeout derived from them. Kept in
/// integer nanoseconds: this runs on every acknowledgement, and `Duration`
/// arithmetic (seconds plus normalised nanoseconds) costs several times more.
#[derive(Clone, Debug)]
pub struct RttEstimator {
    /// Smoothed RTT; 0 before the first sample.
    srtt: u64,
    rttvar: u64,
    min_rto: u64,
    max_rto: u64,
    initial_rto: u64,
    latest: u64,
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos().min(u64::MAX as u128) as u64
}

impl RttEstimator {
    /// An estimator with no samples yet.
    pub fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        RttEstimator {
            srtt: 0,
            rttvar: 0,
            min_rto: nanos(min_rto),
            max_rto: nanos(max_rto),
            initial_rto: nanos(initial_rto),
            latest: 0,
        }
    }

    /// Feed one RTT sample.
    pub fn sample(&mut self, rtt: Duration) {
        self.sample_nanos(nanos(rtt));
    }

    /// [`RttEstimator::sample`] in nanoseconds.
    #[inline]
    pub(crate) fn sample_nanos(&mut self, rtt: u64) {
        let rtt = rtt.max(1);
        self.latest = rtt;
        if self.srtt == 0 {
            self.srtt = rtt;
            self.rttvar = rtt / 2;
        } else {
            let err = self.srtt.abs_diff(rtt);
            self.rttvar = (self.rttvar * 3 + err) / 4;
            self.srtt = (self.srtt * 7 + rtt) / 8;
        }
    }

    /// Smoothed RTT (zero before the first sample).
    pub fn srtt(&self) -> Duration {
        Duration::from_nanos(self.srtt)
    }

    /// [`RttEstimator::srtt`] in nanoseconds.
    #[inline]
    pub(crate) fn srtt_nanos(&self) -> u64 {
        self.srtt
    }

    /// Mean deviation of the samples (zero before the first sample).
    pub fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }

    /// Most recent sample.
    pub fn latest(&self) -> Duration {
        Duration::from_nanos(self.latest)
    }

    /// [`RttEstimator::rto`] in nanoseconds.
    #[inline]
    pub(crate) fn rto_nanos(&self) -> u64 {
        if self.srtt == 0 {
            self.initial_rto
        } else {
            (self.srtt + self.rttvar * 4).clamp(self.min_rto, self.max_rto)
        }
    }

    /// Retransmission timeout before back-off.
    pub fn rto(&self) -> Duration {
        Duration::from_nanos(self.rto_nanos())
    }

    /// Timeout after `backoff` doublings, capped at the maximum (or at the
    /// base timeout when that is larger, e.g. the initial one).
    pub fn rto_backed_off(&self, backoff: u32) -> Duration {
        Duration::from_nanos(self.rto_backed_off_nanos(backoff))
    }

    /// [`RttEstimator::rto_backed_off`] in nanoseconds.
    #[inline]
    pub(crate) fn rto_backed_off_nanos(&self, backoff: u32) -> u64 {
        let base = self.rto_nanos();
        // No back-off (every new frame's case): the base as it is.
        if backoff == 0 {
            return base;
        }
        let backed = base.saturating_mul(1u64 << backoff.min(32));
        backed.min(self.max_rto.max(base))
    }

    /// The larger of two smoothed RTTs and the smoothed RTT plus four
    /// deviations, in nanoseconds: the base of the tail-loss probe timeout.
    #[inline]
    pub(crate) fn probe_base_nanos(&self) -> u64 {
        (self.srtt * 2).max(self.srtt + self.rttvar * 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converges_and_clamps() {
        let ms = Duration::from_millis;
        let mut r = RttEstimator::new(ms(5), ms(2), ms(500));
        assert_eq!(r.rto(), ms(5));
        for _ in 0..50 {
            r.sample(Duration::from_micros(10));
        }
        assert_eq!(r.rto(), ms(2));
        assert!(r.srtt() < Duration::from_micros(20));
        for _ in 0..50 {
            r.sample(ms(100));
        }
        assert!(r.rto() >= ms(100) && r.rto() <= ms(500));
        assert_eq!(r.rto_backed_off(10), ms(500));
    }
}
