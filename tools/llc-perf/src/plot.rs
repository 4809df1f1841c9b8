//! The SVG plot: one-way latency and bandwidth against message size, log-log,
//! one curve per transport (and link MTU). SVG text needs no font files.
//!
//! Sizes are labelled as people write them (1, 64, 1 Ki, 64 Ki, 1 Mi), with
//! ticks at the measured powers of two rather than where a log scale would
//! put them (9.765625K); values carry no needless decimals; each panel says
//! what was measured, over which transports and MTU, where and when.

use std::path::Path;

use anyhow::{anyhow, Result};
use plotters::prelude::*;

use crate::report::{mtu_str, Report};

const COLORS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

type Series = (String, Vec<(f64, f64)>);

fn bounds(series: &[Series]) -> Option<((f64, f64), (f64, f64))> {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        if x > 0.0 && y > 0.0 && y.is_finite() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    }
    (x0 < x1 && y0 <= y1).then_some(((x0, x1 * 1.2), (y0 / 1.5, y1 * 1.5)))
}

/// Labelled and unlabelled size ticks: the measured sizes that are powers
/// of two, every `step`-th power labelled (counting down from the largest,
/// which is always labelled) so that at most eleven labels share the axis.
fn size_ticks(series: &[Series]) -> (Vec<f64>, Vec<f64>) {
    let mut exps: Vec<u32> = series
        .iter()
        .flat_map(|s| s.1.iter())
        .filter(|&&(x, y)| x >= 1.0 && y > 0.0 && y.is_finite())
        .map(|&(x, _)| x as u64)
        .filter(|x| x.is_power_of_two())
        .map(|x| x.trailing_zeros())
        .collect();
    exps.sort_unstable();
    exps.dedup();
    let top = exps.last().copied().unwrap_or(0);
    let step = (exps.len() as u32).div_ceil(11).max(1);
    let (bold, light): (Vec<u32>, Vec<u32>) = exps.into_iter().partition(|e| (top - e) % step == 0);
    let v = |e: Vec<u32>| e.into_iter().map(|e| (1u64 << e) as f64).collect();
    (v(bold), v(light))
}

fn chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    subtitle: &str,
    ylabel: &str,
    series: &[Series],
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {title}: {e}");
    let area = area
        .titled(title, ("sans-serif", 20))
        .map_err(|e| err(&e))?;
    let area = area
        .titled(subtitle, ("sans-serif", 13))
        .map_err(|e| err(&e))?;
    let Some(((x0, x1), (y0, y1))) = bounds(series) else {
        area.titled("no data", ("sans-serif", 16))
            .map_err(|e| err(&e))?;
        return Ok(());
    };
    let (bold, light) = size_ticks(series);
    let mut c = ChartBuilder::on(&area)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .with_key_points(bold)
                .with_light_points(light),
            (y0..y1).log_scale(),
        )
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(ylabel)
        .x_label_formatter(&|v| size_label(*v))
        .y_label_formatter(&|v| value_label(*v))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = pts
            .iter()
            .copied()
            .filter(|&(x, y)| x > 0.0 && y > 0.0 && y.is_finite())
            .collect();
        c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        c.draw_series(pts.into_iter().map(|p| Circle::new(p, 2, color.filled())))
            .map_err(|e| err(&e))?;
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| err(&e))?;
    Ok(())
}

/// A size in binary units: 1, 64, 1 Ki, 64 Ki, 1 Mi, 1 Gi.
fn size_label(v: f64) -> String {
    let v = v.round() as u64;
    for (unit, shift) in [("Gi", 30), ("Mi", 20), ("Ki", 10)] {
        if v >= 1 << shift && v.trailing_zeros() >= shift {
            return format!("{} {unit}", v >> shift);
        }
    }
    v.to_string()
}

/// A value with the decimals it needs (three significant digits at
/// most): 10, 2.5, 0.25, not 10.000.
fn value_label(v: f64) -> String {
    if !v.is_finite() || v == 0.0 {
        return "0".into();
    }
    let decimals = (2 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// "what and where" under each panel's title: transports, link MTUs,
/// the testbed or host, and when the run started.
fn subtitle(report: &Report) -> String {
    let mut kinds: Vec<String> = Vec::new();
    for r in &report.results {
        let k = r.transport.to_string();
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    let mut mtus: Vec<String> = report.results.iter().map(|r| mtu_str(r.mtu)).collect();
    mtus.sort();
    mtus.dedup();
    let place = if report.mode == "demo" {
        "veth pair between two namespaces".to_string()
    } else {
        format!("{} to its server", report.host.hostname)
    };
    format!(
        "{} · MTU {} · {place} · {} UTC",
        kinds.join(", "),
        mtus.join("/"),
        report.host.started_utc
    )
}

/// Draw the latency and bandwidth curves of `report` into `path`.
pub fn write(report: &Report, path: &Path) -> Result<()> {
    let several_mtus = {
        let mut m: Vec<_> = report.results.iter().map(|r| r.mtu).collect();
        m.sort();
        m.dedup();
        m.len() > 1
    };
    let label = |r: &crate::driver::TransportResult| {
        if several_mtus {
            format!("{} (MTU {})", r.transport, mtu_str(r.mtu))
        } else {
            r.transport.to_string()
        }
    };
    let lat: Vec<Series> = report
        .results
        .iter()
        .filter(|r| !r.latency.is_empty())
        .map(|r| {
            (
                label(r),
                r.latency
                    .iter()
                    .map(|p| (p.bytes as f64, p.one_way_median_us))
                    .collect(),
            )
        })
        .collect();
    let bw: Vec<Series> = report
        .results
        .iter()
        .filter(|r| !r.bandwidth.is_empty())
        .map(|r| {
            (
                label(r),
                r.bandwidth
                    .iter()
                    .map(|p| (p.bytes as f64, p.gbit_s))
                    .collect(),
            )
        })
        .collect();
    let root = SVGBackend::new(path, (1400, 600)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow!("drawing {}: {e}", path.display()))?;
    let (left, right) = root.split_horizontally(700);
    let sub = subtitle(report);
    chart(&left, "one-way latency (RTT/2, median)", &sub, "µs", &lat)?;
    let window = report.settings.window;
    chart(
        &right,
        &format!("bandwidth (window of {window} isends)"),
        &sub,
        "Gbit/s",
        &bw,
    )?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{self, LatencyPoint, RatePoint, Settings, Test};
    use crate::report::HostInfo;
    use crate::transports::Kind;

    #[test]
    fn labels_read_as_people_write_them() {
        let sizes: Vec<String> = [1u64, 8, 64, 512, 1024, 4096, 65536, 1 << 20, 1 << 30]
            .iter()
            .map(|&v| size_label(v as f64))
            .collect();
        assert_eq!(
            sizes,
            ["1", "8", "64", "512", "1 Ki", "4 Ki", "64 Ki", "1 Mi", "1 Gi"]
        );
        let values: Vec<String> = [10.0, 100.0, 2.5, 0.25, 0.001, 1234.6, 4.56789]
            .iter()
            .map(|&v| value_label(v))
            .collect();
        assert_eq!(
            values,
            ["10", "100", "2.5", "0.25", "0.001", "1235", "4.57"]
        );
    }

    fn report() -> Report {
        let sizes = driver::netpipe_sizes(1 << 20);
        let mut results = Vec::new();
        for (i, kind) in [Kind::LlcPacket, Kind::Tcp].into_iter().enumerate() {
            let mut r = driver::empty_result(kind, Some(1500));
            let base = 2.0 + 5.0 * i as f64;
            r.latency = sizes
                .iter()
                .map(|&b| LatencyPoint {
                    bytes: b,
                    reps: 10,
                    one_way_min_us: base,
                    one_way_median_us: base + b as f64 / 1000.0,
                    one_way_mean_us: base + b as f64 / 1000.0,
                    one_way_p99_us: base * 2.0,
                })
                .collect();
            r.bandwidth = driver::pow2_sizes(1 << 20)
                .into_iter()
                .map(|b| RatePoint {
                    bytes: b,
                    window: 64,
                    messages: 1000,
                    gbit_s: (b as f64 / 1e4).min(20.0 - 5.0 * i as f64),
                    msgs_per_s: 1e5,
                    pairs: 1,
                    per_pair_msgs_per_s: vec![],
                })
                .collect();
            results.push(r);
        }
        Report {
            tool: "llc-perf",
            version: env!("CARGO_PKG_VERSION"),
            mode: "demo",
            command: "llc-perf demo".into(),
            host: HostInfo::now(),
            settings: Settings {
                tests: vec![Test::Latency, Test::Bandwidth],
                rounds: 1,
                window: 64,
                max_size: 1 << 20,
                target_ms: 1.0,
                verify: false,
                quick: false,
                pow2_sizes: false,
                overlap_bytes: 0,
                pairs: 1,
                pair_cpus: vec![],
                floor_work: vec![],
            },
            notes: vec![],
            unavailable: vec![],
            results,
            comparison: vec![],
            targets: vec![],
        }
    }

    /// The texts of an SVG's `<text>` elements, in order.
    fn svg_texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .map(|t| {
                let body = &t[t.find('>').unwrap() + 1..];
                body[..body.find("</text>").unwrap()].trim().to_string()
            })
            .collect()
    }

    #[test]
    fn plot_ticks_titles_and_rendering() {
        let dir = std::env::temp_dir().join(format!("llc-perf-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        struct Cleanup(std::path::PathBuf);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let _cleanup = Cleanup(dir.clone());
        let svg_path = dir.join("plot.svg");
        let rep = report();
        write(&rep, &svg_path).unwrap();
        let svg = std::fs::read_to_string(&svg_path).unwrap();
        let texts = svg_texts(&svg);
        // Both panels: size ticks at every other measured power of two,
        // from 1 to the largest size, in binary units.
        let pow2 = [
            "1", "4", "16", "64", "256", "1 Ki", "4 Ki", "16 Ki", "64 Ki", "256 Ki", "1 Mi",
        ];
        let panels: Vec<&[String]> = texts
            .split(|t| t == "message size (bytes)")
            .skip(1)
            .collect();
        assert_eq!(panels.len(), 2, "{texts:?}");
        for panel in panels {
            assert!(
                panel.windows(pow2.len()).any(|w| w == pow2),
                "size ticks {pow2:?} in {panel:?}"
            );
        }
        // No log-scale artefacts, no needless decimals.
        for t in &texts {
            assert!(!t.contains('K') || t.ends_with("Ki"), "size label {t:?}");
            if let Ok(v) = t.parse::<f64>() {
                assert_eq!(*t, value_label(v), "value label {t:?}");
                assert!(!(t.contains('.') && t.ends_with('0')), "{t:?}");
            }
        }
        // Titles: what, and under it transports, MTU, where and when.
        assert!(texts.iter().any(|t| t == "one-way latency (RTT/2, median)"));
        assert!(texts.iter().any(|t| t == "bandwidth (window of 64 isends)"));
        let sub: Vec<&String> = texts.iter().filter(|t| t.contains(" UTC")).collect();
        assert_eq!(sub.len(), 2, "{texts:?}");
        let date = &rep.host.started_utc[..10];
        assert!(
            sub[0].starts_with("llc-packet, tcp · MTU 1500 · veth pair") && sub[0].contains(date),
            "{sub:?}"
        );
        // Rendered by librsvg as a user's viewer would.
        let png = dir.join("plot.png");
        match std::process::Command::new("rsvg-convert")
            .arg(&svg_path)
            .arg("-o")
            .arg(&png)
            .output()
        {
            Err(e) => println!(
                "SKIPPED rendering the plot: rsvg-convert is not installed ({e}); \
                 scripts/install-deps.sh installs librsvg2-bin"
            ),
            Ok(o) => {
                assert!(
                    o.status.success(),
                    "rsvg-convert: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                let b = std::fs::read(&png).unwrap();
                assert_eq!(&b[..8], b"\x89PNG\r\n\x1a\n");
                let w = u32::from_be_bytes(b[16..20].try_into().unwrap());
                let h = u32::from_be_bytes(b[20..24].try_into().unwrap());
                assert_eq!((w, h), (1400, 600));
                // Not a blank page: the curves' colours are in the image.
                assert!(b.len() > 10_000, "PNG of {} bytes", b.len());
            }
        }
    }
}
