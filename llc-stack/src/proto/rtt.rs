//! Round-trip time estimation and the retransmission timeout (RFC 6298).

use std::time::Duration;

/// Smoothed RTT, its variation, and the timeout derived from them.
#[derive(Clone, Debug)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    min_rto: Duration,
    max_rto: Duration,
    initial_rto: Duration,
    latest: Duration,
}

impl RttEstimator {
    /// An estimator with no samples yet.
    pub fn new(initial_rto: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            min_rto,
            max_rto,
            initial_rto,
            latest: Duration::ZERO,
        }
    }

    /// Feed one RTT sample.
    pub fn sample(&mut self, rtt: Duration) {
        self.latest = rtt;
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let err = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
    }

    /// Smoothed RTT (zero before the first sample).
    pub fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(Duration::ZERO)
    }

    /// Most recent sample.
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// Retransmission timeout before back-off.
    pub fn rto(&self) -> Duration {
        match self.srtt {
            None => self.initial_rto,
            Some(srtt) => (srtt + self.rttvar * 4).clamp(self.min_rto, self.max_rto),
        }
    }

    /// Timeout after `backoff` doublings, capped.
    pub fn rto_backed_off(&self, backoff: u32) -> Duration {
        let base = self.rto();
        base.checked_mul(1u32 << backoff.min(16))
            .unwrap_or(self.max_rto)
            .min(self.max_rto.max(base))
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
