//! Round-trip statistics and their iputils-style and JSON renderings.

use serde::Serialize;

/// What a ping run measured.
#[derive(Debug, Default)]
pub struct RttStats {
    pub transmitted: u64,
    pub received: u64,
    rtts_ns: Vec<u64>,
}

/// The JSON document `--json` prints.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub peer: String,
    pub interface: String,
    pub mode: &'static str,
    pub backend: String,
    pub size: usize,
    pub transmitted: u64,
    pub received: u64,
    pub loss_pct: f64,
    pub rtt_min_us: f64,
    pub rtt_avg_us: f64,
    pub rtt_max_us: f64,
    pub rtt_mdev_us: f64,
    pub rtt_median_us: f64,
    pub rtt_p99_us: f64,
    /// One-way latency estimate: half the median round trip.
    pub one_way_median_us: f64,
    pub elapsed_ms: f64,
}

impl RttStats {
    pub fn record(&mut self, rtt_ns: u64) {
        self.received += 1;
        self.rtts_ns.push(rtt_ns);
    }

    pub fn loss_pct(&self) -> f64 {
        if self.transmitted == 0 {
            0.0
        } else {
            100.0 * (self.transmitted - self.received) as f64 / self.transmitted as f64
        }
    }

    /// min, avg, max, mdev (as iputils computes it: `sqrt(E[x²] - E[x]²)`), in µs.
    pub fn min_avg_max_mdev(&self) -> (f64, f64, f64, f64) {
        if self.rtts_ns.is_empty() {
            return (0.0, 0.0, 0.0, 0.0);
        }
        let us: Vec<f64> = self.rtts_ns.iter().map(|&n| n as f64 / 1000.0).collect();
        let n = us.len() as f64;
        let min = us.iter().copied().fold(f64::INFINITY, f64::min);
        let max = us.iter().copied().fold(0.0, f64::max);
        let avg = us.iter().sum::<f64>() / n;
        let sq = us.iter().map(|x| x * x).sum::<f64>() / n;
        let mdev = (sq - avg * avg).max(0.0).sqrt();
        (min, avg, max, mdev)
    }

    /// The `q` quantile (0..=1) in µs.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.rtts_ns.is_empty() {
            return 0.0;
        }
        let mut v = self.rtts_ns.clone();
        v.sort_unstable();
        let i = ((v.len() - 1) as f64 * q).round() as usize;
        v[i] as f64 / 1000.0
    }

    #[allow(clippy::too_many_arguments)]
    pub fn summary(
        &self,
        peer: String,
        interface: String,
        mode: &'static str,
        backend: String,
        size: usize,
        elapsed_ms: f64,
    ) -> Summary {
        let (min, avg, max, mdev) = self.min_avg_max_mdev();
        let median = self.quantile_us(0.5);
        Summary {
            peer,
            interface,
            mode,
            backend,
            size,
            transmitted: self.transmitted,
            received: self.received,
            loss_pct: self.loss_pct(),
            rtt_min_us: min,
            rtt_avg_us: avg,
            rtt_max_us: max,
            rtt_mdev_us: mdev,
            rtt_median_us: median,
            rtt_p99_us: self.quantile_us(0.99),
            one_way_median_us: median / 2.0,
            elapsed_ms,
        }
    }
}

impl Summary {
    /// The iputils-style closing lines.
    pub fn print_text(&self) {
        println!();
        println!("--- {} llc-ping statistics ---", self.peer);
        println!(
            "{} packets transmitted, {} received, {}% packet loss, time {:.0}ms",
            self.transmitted,
            self.received,
            trim(self.loss_pct),
            self.elapsed_ms
        );
        if self.received > 0 {
            println!(
                "rtt min/avg/max/mdev = {:.3}/{:.3}/{:.3}/{:.3} µs",
                self.rtt_min_us, self.rtt_avg_us, self.rtt_max_us, self.rtt_mdev_us
            );
            println!(
                "rtt median {:.3} µs, p99 {:.3} µs; one-way (median/2) {:.3} µs",
                self.rtt_median_us, self.rtt_p99_us, self.one_way_median_us
            );
        }
    }
}

fn trim(x: f64) -> String {
    let s = format!("{x:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures() {
        let mut s = RttStats {
            transmitted: 4,
            ..Default::default()
        };
        for ns in [1000, 2000, 3000] {
            s.record(ns);
        }
        let (min, avg, max, mdev) = s.min_avg_max_mdev();
        assert_eq!((min, avg, max), (1.0, 2.0, 3.0));
        assert!((mdev - (2.0f64 / 3.0).sqrt()).abs() < 1e-9);
        assert_eq!(s.loss_pct(), 25.0);
        assert_eq!(s.quantile_us(0.5), 2.0);
        assert_eq!(trim(25.0), "25");
        assert_eq!(trim(0.5), "0.5");
    }
}
