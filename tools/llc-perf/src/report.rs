//! Results: the JSON document, CSV rows, readable tables, and the
//! comparison against TCP with the project's targets.

use std::fmt::Write as _;

use serde::Serialize;

use crate::driver::{Settings, TransportResult};
use crate::transports::Kind;

/// The machine, for the record.
#[derive(Clone, Debug, Serialize)]
pub struct HostInfo {
    /// `uname -r`-like kernel release.
    pub kernel: String,
    /// CPUs online.
    pub cpus: usize,
    /// The host's name.
    pub hostname: String,
    /// When the run started, UTC, `YYYY-MM-DD HH:MM`.
    pub started_utc: String,
    /// /proc/loadavg when the run started.
    pub load_avg_start: String,
    /// /proc/loadavg when it ended.
    pub load_avg_end: String,
}

impl HostInfo {
    /// What can be read now (the end load is filled in later).
    pub fn now() -> HostInfo {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        HostInfo {
            kernel: read("/proc/sys/kernel/osrelease"),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            hostname: read("/proc/sys/kernel/hostname"),
            started_utc: utc_now(),
            load_avg_start: read("/proc/loadavg"),
            load_avg_end: String::new(),
        }
    }

    /// Note the load at the end.
    pub fn finish(&mut self) {
        self.load_avg_end = std::fs::read_to_string("/proc/loadavg")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
    }
}

/// The current time, UTC, as `YYYY-MM-DD HH:MM` (no time-zone database
/// needed: days since the epoch to a civil date, as in Howard Hinnant's
/// `civil_from_days`).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_string(secs)
}

fn utc_string(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (hh, mm) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}")
}

/// One figure of the comparison.
#[derive(Clone, Debug, Serialize)]
pub struct CmpRow {
    /// Transport.
    pub transport: Kind,
    /// The figure (unit in the comparison's `metric`).
    pub value: f64,
    /// value / reference's value.
    pub ratio: f64,
}

/// A figure compared across transports against the fastest TCP.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// Test and key, e.g. `latency.one_way_median_us`.
    pub metric: String,
    /// Link MTU.
    pub mtu: Option<u32>,
    /// Message size.
    pub bytes: usize,
    /// The fastest TCP transport for this figure.
    pub reference: Kind,
    /// Higher is better (rates) or lower (times)?
    pub higher_is_better: bool,
    /// Every transport's figure.
    pub rows: Vec<CmpRow>,
}

/// One of the project's targets, checked.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    /// What is compared.
    pub name: String,
    /// The measured ratio.
    pub ratio: f64,
    /// What `ratio` is in: `x` (a ratio) or ` µs` (a difference).
    pub unit: &'static str,
    /// The goal, e.g. `<= 0.5`.
    pub goal: String,
    /// Met in this run?
    pub met: bool,
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// `llc-perf`.
    pub tool: &'static str,
    /// Its version.
    pub version: &'static str,
    /// `demo` or `client`.
    pub mode: &'static str,
    /// The command line.
    pub command: String,
    /// The machine.
    pub host: HostInfo,
    /// What was asked.
    pub settings: Settings,
    /// Testbed and environment notes.
    pub notes: Vec<String>,
    /// Transports that could not be measured, with the reason.
    pub unavailable: Vec<(Kind, String)>,
    /// One entry per transport and link MTU.
    pub results: Vec<TransportResult>,
    /// The comparison table.
    pub comparison: Vec<Comparison>,
    /// The targets.
    pub targets: Vec<Target>,
}

fn lat_at(r: &TransportResult, bytes: usize) -> Option<f64> {
    r.latency
        .iter()
        .find(|p| p.bytes == bytes)
        .map(|p| p.one_way_median_us)
}

fn bw_at(r: &TransportResult, bytes: usize) -> Option<f64> {
    r.bandwidth
        .iter()
        .find(|p| p.bytes == bytes)
        .map(|p| p.gbit_s)
}

type Getter = fn(&TransportResult, usize) -> Option<f64>;

impl Report {
    /// Fill in `comparison` and `targets` from `results`.
    pub fn compare(&mut self) {
        let mut mtus: Vec<Option<u32>> = self.results.iter().map(|r| r.mtu).collect();
        mtus.dedup();
        let metrics: [(&str, usize, bool, Getter); 9] = [
            ("latency.one_way_median_us", 8, false, lat_at),
            ("latency.one_way_median_us", 65536, false, lat_at),
            ("latency.one_way_median_us", 1 << 20, false, lat_at),
            ("bandwidth.gbit_s", 65536, true, bw_at),
            ("bandwidth.gbit_s", 1 << 20, true, bw_at),
            ("bibw.gbit_s", 1 << 20, true, |r, b| {
                r.bibw.iter().find(|p| p.bytes == b).map(|p| p.gbit_s)
            }),
            ("msgrate.msgs_per_s", 8, true, |r, b| {
                r.msgrate
                    .iter()
                    .find(|p| p.bytes == b)
                    .map(|p| p.msgs_per_s)
            }),
            ("overhead.os_us", 8, false, |r, b| {
                r.overhead.iter().find(|p| p.bytes == b).map(|p| p.os_us)
            }),
            ("overhead.or_us", 8, false, |r, b| {
                r.overhead.iter().find(|p| p.bytes == b).map(|p| p.or_us)
            }),
        ];
        self.comparison.clear();
        for mtu in &mtus {
            let runs: Vec<&TransportResult> =
                self.results.iter().filter(|r| r.mtu == *mtu).collect();
            for (metric, bytes, higher, get) in metrics {
                let vals: Vec<(Kind, f64)> = runs
                    .iter()
                    .filter_map(|r| get(r, bytes).map(|v| (r.transport, v)))
                    .collect();
                let best_tcp = vals
                    .iter()
                    .filter(|(k, _)| !k.is_llc())
                    .copied()
                    .reduce(|a, b| {
                        let better = if higher { b.1 > a.1 } else { b.1 < a.1 };
                        if better {
                            b
                        } else {
                            a
                        }
                    });
                let Some((reference, rv)) = best_tcp else {
                    continue;
                };
                self.comparison.push(Comparison {
                    metric: metric.into(),
                    mtu: *mtu,
                    bytes,
                    reference,
                    higher_is_better: higher,
                    rows: vals
                        .iter()
                        .map(|&(transport, value)| CmpRow {
                            transport,
                            value,
                            ratio: value / rv,
                        })
                        .collect(),
                });
            }
        }
        self.targets.clear();
        let find = |k: Kind, mtu: Option<u32>| {
            self.results
                .iter()
                .find(|r| r.transport == k && r.mtu == mtu)
        };
        let largest = mtus
            .iter()
            .copied()
            .filter(|m| {
                self.results
                    .iter()
                    .any(|r| r.mtu == *m && bw_at(r, 1 << 20).is_some())
            })
            .max()
            .flatten();
        // Issue 24's figures "each transport at its best MTU": an LLC
        // transport's best over the MTUs measured against the best of every
        // TCP set-up over them (a user picks TCP's best MTU too).
        if mtus.len() > 1 {
            let goals: [(&str, usize, bool, Getter); 3] = [
                ("1 MiB bandwidth", 1 << 20, true, bw_at),
                ("64 KiB one-way latency", 65536, false, lat_at),
                ("1 MiB one-way latency", 1 << 20, false, lat_at),
            ];
            for (what, bytes, higher, get) in goals {
                let best = |llc: bool, only: Option<Kind>| {
                    self.results
                        .iter()
                        .filter(|r| {
                            r.transport.is_llc() == llc
                                && (only.is_none() || only == Some(r.transport))
                        })
                        .filter_map(|r| get(r, bytes).map(|v| (r.transport, r.mtu, v)))
                        .reduce(|a, b| if (b.2 > a.2) == higher { b } else { a })
                };
                let Some((tk, tm, tv)) = best(false, None) else {
                    continue;
                };
                for llc in [Kind::LlcXdp, Kind::LlcPacket] {
                    if let Some((_, m, v)) = best(true, Some(llc)) {
                        let ratio = v / tv;
                        self.targets.push(Target {
                            name: format!(
                                "{what}, each at its best MTU: {llc} (MTU {}) vs {tk} (MTU {})",
                                mtu_str(m),
                                mtu_str(tm)
                            ),
                            ratio,
                            unit: "x",
                            goal: if higher { ">= 1.0" } else { "<= 1.0" }.into(),
                            met: if higher { ratio >= 1.0 } else { ratio <= 1.0 },
                        });
                    }
                }
            }
        }
        // Incast (issue 24): the median over rounds of each LLC transport's
        // goodput against the best TCP's median, with its median fairness.
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        let incast: Vec<(Kind, Option<u32>, f64, f64)> = self
            .results
            .iter()
            .filter_map(|r| {
                let g = median(r.incast.iter().map(|p| p.gbit_s).collect())?;
                let f = median(r.incast.iter().map(|p| p.jain_fairness).collect())?;
                Some((r.transport, r.mtu, g, f))
            })
            .collect();
        if let Some(&(tk, tm, tg, _)) = incast
            .iter()
            .filter(|(k, ..)| !k.is_llc())
            .max_by(|a, b| a.2.total_cmp(&b.2))
        {
            for &(k, m, g, f) in incast.iter().filter(|(k, m, ..)| k.is_llc() && *m == tm) {
                let ratio = g / tg;
                self.targets.push(Target {
                    name: format!(
                        "incast goodput, MTU {}, median of rounds: {k} (fairness {f:.3}) vs {tk}",
                        mtu_str(m)
                    ),
                    ratio,
                    unit: "x",
                    goal: ">= 1.0, fairness >= 0.95".into(),
                    met: ratio >= 1.0 && f >= 0.95,
                });
            }
        }
        // Issue 23: what the message layer adds to its own link's floor.
        for r in self.results.iter().filter(|r| r.transport.is_llc()) {
            if let (Some(before), Some(lat)) = (r.link_floor_one_way_us, lat_at(r, 8)) {
                // Against the mean of the floors before and after the sweep,
                // both shown: when they differ much, the machine changed
                // pace meanwhile and the difference is that uncertain.
                let (floor, shown) = match r.link_floor_after_one_way_us {
                    Some(after) => (
                        (before + after) / 2.0,
                        format!("{before:.2} before, {after:.2} after"),
                    ),
                    None => (before, format!("{before:.2}")),
                };
                let above = lat - floor;
                self.targets.push(Target {
                    name: format!(
                        "8 B one-way above the link floor ({shown} µs), {}, MTU {}",
                        r.transport,
                        mtu_str(r.mtu)
                    ),
                    ratio: above,
                    unit: " µs",
                    goal: "<= 0.3 µs".into(),
                    met: above <= 0.3,
                });
            }
        }
        for mtu in &mtus {
            if let (Some(x), Some(t)) = (find(Kind::LlcXdp, *mtu), find(Kind::TcpUring, *mtu)) {
                if let (Some(a), Some(b)) = (lat_at(x, 8), lat_at(t, 8)) {
                    let ratio = a / b;
                    self.targets.push(Target {
                        name: format!(
                            "8 B one-way latency, llc-xdp vs tcp-uring (busy-poll), MTU {}",
                            mtu_str(*mtu)
                        ),
                        ratio,
                        unit: "x",
                        goal: "<= 0.5".into(),
                        met: ratio <= 0.5,
                    });
                }
            }
            // The bandwidth goal holds at the largest MTU the link allows
            // (both sides use it); smaller MTUs are in the comparison only.
            if *mtu != largest {
                continue;
            }
            for llc in [Kind::LlcXdp, Kind::LlcPacket] {
                if let (Some(x), Some(t)) = (find(llc, *mtu), find(Kind::TcpUring, *mtu)) {
                    if let (Some(a), Some(b)) = (bw_at(x, 1 << 20), bw_at(t, 1 << 20)) {
                        let ratio = a / b;
                        self.targets.push(Target {
                            name: format!(
                                "1 MiB bandwidth, {llc} vs tcp-uring, MTU {}",
                                mtu_str(*mtu)
                            ),
                            ratio,
                            unit: "x",
                            goal: ">= 1.0".into(),
                            met: ratio >= 1.0,
                        });
                    }
                }
            }
        }
    }

    /// CSV: one row per transport, test, size and figure.
    pub fn csv(&self) -> String {
        let mut s = String::from("transport,detail,mtu,test,bytes,key,value\n");
        for r in &self.results {
            let v = serde_json::to_value(r).expect("results serialize");
            for test in [
                "latency",
                "bandwidth",
                "bibw",
                "msgrate",
                "overhead",
                "overlap",
                "incast",
            ] {
                let Some(points) = v[test].as_array() else {
                    continue;
                };
                for p in points {
                    let Some(obj) = p.as_object() else { continue };
                    let bytes = obj.get("bytes").and_then(|b| b.as_u64()).unwrap_or(0);
                    for (k, val) in obj {
                        if k == "bytes" {
                            continue;
                        }
                        let val = match val {
                            serde_json::Value::Bool(b) => b.to_string(),
                            other => other.to_string(),
                        };
                        let _ = writeln!(
                            s,
                            "{},\"{}\",{},{test},{bytes},{k},{val}",
                            r.transport,
                            r.detail.replace('"', "'"),
                            r.mtu.map_or(String::new(), |m| m.to_string())
                        );
                    }
                }
            }
        }
        s
    }

    /// The OSU micro-benchmarks' layout: per transport and link MTU, one
    /// block per test in the format of osu_latency, osu_bw, osu_bibw and
    /// osu_mbw_mr (`%-10s%20s` headers, `%-10d%20.2f` rows, decimal MB/s,
    /// mean one-way latency in µs). Lines that are not data start with `#`,
    /// as OSU's do, so tools that read OSU output read this too.
    pub fn osu(&self) -> String {
        let mut s = String::new();
        let version = self.version;
        for r in &self.results {
            let mut block = |name: &str,
                             columns: &[&str],
                             extra: Option<String>,
                             rows: Vec<(usize, Vec<f64>)>,
                             trailer: Vec<String>| {
                if rows.is_empty() {
                    return;
                }
                if !s.is_empty() {
                    s.push('\n');
                }
                let _ = writeln!(s, "# llc-perf {name} Test v{version}");
                let _ = writeln!(
                    s,
                    "# Transport: {} ({}), link MTU {}",
                    r.transport,
                    r.detail,
                    mtu_str(r.mtu)
                );
                if let Some(e) = extra {
                    let _ = writeln!(s, "{e}");
                }
                let _ = write!(s, "{:<10}", "# Size");
                for c in columns {
                    let _ = write!(s, "{c:>20}");
                }
                s.push('\n');
                for (bytes, vals) in rows {
                    let _ = write!(s, "{bytes:<10}");
                    for v in vals {
                        let _ = write!(s, "{v:>20.2}");
                    }
                    s.push('\n');
                }
                for t in trailer {
                    let _ = writeln!(s, "{t}");
                }
            };
            block(
                "Latency",
                &["Latency (us)"],
                None,
                r.latency
                    .iter()
                    .map(|p| (p.bytes, vec![p.one_way_mean_us]))
                    .collect(),
                vec![],
            );
            // OSU's MB/s are decimal: bytes / 1e6 per second.
            let mb_s = |gbit_s: f64| gbit_s * 1e9 / 8.0 / 1e6;
            block(
                "Bandwidth",
                &["Bandwidth (MB/s)"],
                None,
                r.bandwidth
                    .iter()
                    .map(|p| (p.bytes, vec![mb_s(p.gbit_s)]))
                    .collect(),
                vec![],
            );
            block(
                "Bi-Directional Bandwidth",
                &["Bandwidth (MB/s)"],
                None,
                r.bibw
                    .iter()
                    .map(|p| (p.bytes, vec![mb_s(p.gbit_s)]))
                    .collect(),
                vec![],
            );
            // As osu_mbw_mr: the pairs' rates added up; each pair's after
            // the rows, as comments, when there are several.
            let window = r.msgrate.first().map_or(0, |p| p.window);
            let pairs = r.msgrate.first().map_or(1, |p| p.pairs);
            block(
                "Multiple Bandwidth / Message Rate",
                &["MB/s", "Messages/s"],
                Some(format!("# [ pairs: {pairs} ] [ window size: {window} ]")),
                r.msgrate
                    .iter()
                    .map(|p| (p.bytes, vec![mb_s(p.gbit_s), p.msgs_per_s]))
                    .collect(),
                r.msgrate
                    .iter()
                    .filter(|p| p.per_pair_msgs_per_s.len() > 1)
                    .map(|p| {
                        let each: Vec<String> = p
                            .per_pair_msgs_per_s
                            .iter()
                            .map(|v| format!("{v:.2}"))
                            .collect();
                        format!("# {} B, Messages/s per pair: {}", p.bytes, each.join(" "))
                    })
                    .collect(),
            );
            if let Some(e) = &r.error {
                let _ = writeln!(s, "# {}: stopped: {e}", r.transport);
            }
        }
        for (k, why) in &self.unavailable {
            let _ = writeln!(s, "# {k}: not measured: {why}");
        }
        s
    }

    /// The readable tables.
    pub fn tables(&self) -> String {
        let mut s = String::new();
        let mut mtus: Vec<Option<u32>> = self.results.iter().map(|r| r.mtu).collect();
        mtus.dedup();
        for mtu in mtus {
            let runs: Vec<&TransportResult> =
                self.results.iter().filter(|r| r.mtu == mtu).collect();
            let _ = writeln!(s, "\n=== link MTU {} ===", mtu_str(mtu));
            for r in &runs {
                let _ = writeln!(s, "  {:<11} {}", r.transport.name(), r.detail);
            }
            let head = |s: &mut String, first: &str| {
                let _ = write!(s, "{first:>10}");
                for r in &runs {
                    let _ = write!(s, " {:>12}", r.transport.name());
                }
                s.push('\n');
            };
            if runs.iter().any(|r| !r.latency.is_empty()) {
                let _ = writeln!(s, "\nlatency: one-way median µs (RTT/2)");
                head(&mut s, "bytes");
                let mut sizes: Vec<usize> = runs
                    .iter()
                    .flat_map(|r| r.latency.iter().map(|p| p.bytes))
                    .collect();
                sizes.sort_unstable();
                sizes.dedup();
                for b in sizes {
                    let _ = write!(s, "{b:>10}");
                    for r in &runs {
                        let _ = write!(
                            s,
                            " {:>12}",
                            r.latency
                                .iter()
                                .find(|p| p.bytes == b)
                                .map_or("-".into(), |p| fmt_num(p.one_way_median_us))
                        );
                    }
                    s.push('\n');
                }
                let _ = writeln!(s, "\nlatency at 8 B: min / median / p99 µs");
                for r in &runs {
                    if let Some(p) = r.latency.iter().find(|p| p.bytes == 8) {
                        let _ = writeln!(
                            s,
                            "  {:<11} {:>8.2} {:>8.2} {:>8.2}  ({} round trips)",
                            r.transport.name(),
                            p.one_way_min_us,
                            p.one_way_median_us,
                            p.one_way_p99_us,
                            p.reps
                        );
                    }
                }
            }
            for (name, get) in [
                (
                    "bandwidth",
                    (|r| &r.bandwidth) as fn(&TransportResult) -> &Vec<_>,
                ),
                ("bibw", |r| &r.bibw),
                ("msgrate", |r| &r.msgrate),
            ] {
                if runs.iter().all(|r| get(r).is_empty()) {
                    continue;
                }
                let w = runs
                    .iter()
                    .find_map(|r| get(r).first())
                    .map_or(0, |p| p.window);
                let pairs = runs
                    .iter()
                    .find_map(|r| get(r).first())
                    .map_or(1, |p| p.pairs);
                if name == "msgrate" && pairs > 1 {
                    let _ = writeln!(
                        s,
                        "\nmsgrate: messages/s, window {w}, {pairs} pairs at once (the sum of their rates)"
                    );
                } else if name == "msgrate" {
                    let _ = writeln!(s, "\nmsgrate: messages/s, window {w}");
                } else {
                    let _ = writeln!(s, "\n{name}: Gbit/s of payload, window {w}");
                }
                head(&mut s, "bytes");
                let mut sizes: Vec<usize> = runs
                    .iter()
                    .flat_map(|r| get(r).iter().map(|p| p.bytes))
                    .collect();
                sizes.sort_unstable();
                sizes.dedup();
                for b in sizes {
                    let _ = write!(s, "{b:>10}");
                    for r in &runs {
                        let v = get(r).iter().find(|p| p.bytes == b).map(|p| {
                            if name == "msgrate" {
                                p.msgs_per_s
                            } else {
                                p.gbit_s
                            }
                        });
                        let _ = write!(s, " {:>12}", v.map_or("-".into(), fmt_num));
                    }
                    s.push('\n');
                }
                if name == "msgrate" && pairs > 1 {
                    let _ = writeln!(s, "\nmsgrate per pair: messages/s, pair 0 first");
                    for r in &runs {
                        for p in get(r) {
                            let each: Vec<String> =
                                p.per_pair_msgs_per_s.iter().map(|&v| fmt_num(v)).collect();
                            let _ = writeln!(
                                s,
                                "  {:<11} {:>8} B  {}",
                                r.transport.name(),
                                p.bytes,
                                each.join("  ")
                            );
                        }
                    }
                }
            }
            point_table(
                &mut s,
                &runs,
                |r| &r.overhead,
                &format!(
                    "\noverhead at 8 B (gap minus compute): µs\n  {:<11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
                    "", "gap_s", "C'_s", "Os", "gap_r", "C'_r", "Or"
                ),
                |p| {
                    format!(
                        "{:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                        p.send_gap_us,
                        p.send_compute_us,
                        p.os_us,
                        p.recv_gap_us,
                        p.recv_compute_us,
                        p.or_us
                    )
                },
            );
            point_table(
                &mut s,
                &runs,
                |r| &r.overlap,
                &format!(
                    "\noverlap: isend, compute 2x the transfer, wait (medians)\n  {:<11} {:>9} {:>9} {:>12} {:>12} {:>9}",
                    "", "bytes", "progress", "transfer µs", "in wait µs", "overlap"
                ),
                |p| {
                    format!(
                        "{:>9} {:>9} {:>12.1} {:>12.1} {:>8.0}%",
                        p.bytes,
                        if p.progress_thread { "thread" } else { "off" },
                        p.transfer_us,
                        p.wait_us,
                        p.overlap_pct
                    )
                },
            );
            point_table(
                &mut s,
                &runs,
                |r| &r.incast,
                &format!(
                    "\nincast: N senders to one receiver through a bridge (one line per round)\n  {:<11} {:>7} {:>9} {:>8} {:>8} {:>9} {:>12} {:>9}",
                    "", "senders", "bytes", "window", "Gbit/s", "fairness", "shares", "retrans"
                ),
                |p| {
                    format!(
                        "{:>7} {:>9} {:>8} {:>8.2} {:>9.3} {:>5.2}..{:<5.2} {:>9}",
                        p.senders,
                        p.bytes,
                        p.window,
                        p.gbit_s,
                        p.jain_fairness,
                        p.min_share,
                        p.max_share,
                        p.retransmits
                    )
                },
            );
        }
        if !self.comparison.is_empty() {
            let _ = writeln!(
                s,
                "\n=== comparison: each figure / the fastest TCP's (same run, each on its own veth pair) ==="
            );
            for c in &self.comparison {
                let _ = write!(
                    s,
                    "{:<27} {:>8} B  MTU {:>5}  vs {:<9}:",
                    c.metric,
                    c.bytes,
                    mtu_str(c.mtu),
                    c.reference.name()
                );
                for row in &c.rows {
                    let _ = write!(
                        s,
                        "  {} {} ({:.2}x)",
                        row.transport.name(),
                        fmt_num(row.value),
                        row.ratio
                    );
                }
                s.push('\n');
            }
        }
        if !self.targets.is_empty() {
            let _ = writeln!(s, "\n=== targets ===");
            for t in &self.targets {
                let _ = writeln!(
                    s,
                    "  {:<62} {:>6.2}{} (goal {}): {}",
                    t.name,
                    t.ratio,
                    t.unit,
                    t.goal,
                    if t.met { "MET" } else { "NOT MET" }
                );
            }
        }
        for r in &self.results {
            if let Some(e) = &r.error {
                let _ = writeln!(
                    s,
                    "\nFAILED: {} at MTU {}: {e} (not measured further)",
                    r.transport,
                    mtu_str(r.mtu)
                );
            }
        }
        for (k, why) in &self.unavailable {
            let _ = writeln!(s, "\nnot measured: {k}: {why}");
        }
        let _ = writeln!(
            s,
            "\nload average: {} at the start, {} at the end ({} CPUs, kernel {})",
            self.host.load_avg_start, self.host.load_avg_end, self.host.cpus, self.host.kernel
        );
        s
    }
}

/// A table of one line per transport and point: `header` once when any run
/// has points, then the transport's name and `line` of each point.
fn point_table<P>(
    s: &mut String,
    runs: &[&TransportResult],
    points: impl Fn(&TransportResult) -> &Vec<P>,
    header: &str,
    line: impl Fn(&P) -> String,
) {
    if runs.iter().all(|r| points(r).is_empty()) {
        return;
    }
    let _ = writeln!(s, "{header}");
    for r in runs {
        for p in points(r) {
            let _ = writeln!(s, "  {:<11} {}", r.transport.name(), line(p));
        }
    }
}

/// A MTU for a table.
pub fn mtu_str(m: Option<u32>) -> String {
    m.map_or("?".into(), |m| m.to_string())
}

/// Three significant digits, no exponent for the usual ranges.
pub fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.3}M", v / 1e6)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 || a == 0.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

#[cfg(test)]
mod tests {
    use super::utc_string;

    #[test]
    fn utc_dates() {
        assert_eq!(utc_string(0), "1970-01-01 00:00");
        assert_eq!(utc_string(951_782_400), "2000-02-29 00:00");
        assert_eq!(utc_string(1_795_547_302), "2026-11-24 19:08");
    }
}
