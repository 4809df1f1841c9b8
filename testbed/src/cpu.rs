//! How busy the machine's CPUs were over a measurement: a benchmark that
//! reports a rate also says whether the CPUs or waiting bounded it.

/// Busy and total CPU time of all CPUs so far, in clock ticks (the `cpu`
/// line of /proc/stat); `None` where it cannot be read.
fn ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse(stat.lines().next()?)
}

/// The busy and total ticks of a `cpu` line: user, nice, system, idle,
/// iowait, irq, softirq, steal (idle and iowait are not busy).
fn parse(line: &str) -> Option<(u64, u64)> {
    let mut words = line.split_whitespace();
    if words.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = words
        .take(8)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let idle = v.get(3)? + v.get(4)?;
    let total: u64 = v.iter().sum();
    Some((total.checked_sub(idle)?, total))
}

/// A reading taken at the start of a measurement.
#[derive(Clone, Copy, Debug)]
pub struct CpuBusy(Option<(u64, u64)>);

impl CpuBusy {
    /// Read the counters now.
    pub fn start() -> CpuBusy {
        CpuBusy(ticks())
    }

    /// The share of all CPUs' time that was busy since [`CpuBusy::start`],
    /// 0.0..=1.0; `None` where /proc/stat cannot be read or no clock tick
    /// (10 ms on most kernels) passed.
    pub fn share(&self) -> Option<f64> {
        share(self.0?, ticks()?)
    }
}

fn share(then: (u64, u64), now: (u64, u64)) -> Option<f64> {
    let total = now.1.checked_sub(then.1).filter(|&t| t > 0)?;
    let busy = now.0.saturating_sub(then.0).min(total);
    Some(busy as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_line_gives_busy_and_total() {
        let line = "cpu  100 5 50 800 20 3 2 0 0 0";
        assert_eq!(parse(line), Some((160, 980)));
        assert_eq!(parse("cpu0 1 2 3 4 5 6 7 8"), None, "a single CPU's line");
        assert_eq!(parse("cpu 1 2 x"), None);
    }

    #[test]
    fn share_is_busy_over_total_between_readings() {
        assert_eq!(share((100, 1000), (150, 1100)), Some(0.5));
        assert_eq!(share((100, 1000), (100, 1000)), None, "no tick passed");
    }

    #[test]
    fn a_reading_on_linux_is_a_share() {
        let b = CpuBusy::start();
        // Burn a few ticks' worth so that at least one passes.
        let until = std::time::Instant::now() + std::time::Duration::from_millis(30);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        let s = b.share().expect("/proc/stat and a tick");
        assert!(s > 0.0 && s <= 1.0, "{s}");
    }
}
