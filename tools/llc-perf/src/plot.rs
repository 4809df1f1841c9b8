//! The SVG plot: one-way latency and bandwidth against message size, log-log,
//! one curve per transport (and link MTU). SVG text needs no font files.

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

fn chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    ylabel: &str,
    series: &[Series],
) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("drawing {title}: {e}");
    let Some(((x0, x1), (y0, y1))) = bounds(series) else {
        area.titled(&format!("{title}: no data"), ("sans-serif", 20))
            .map_err(|e| err(&e))?;
        return Ok(());
    };
    let mut c = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(ylabel)
        .x_label_formatter(&|v| human_bytes(*v))
        .y_label_formatter(&|v| format!("{v:.3}"))
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

fn human_bytes(v: f64) -> String {
    let v = v.round();
    if v >= (1 << 20) as f64 {
        format!("{}M", v / (1 << 20) as f64)
    } else if v >= 1024.0 {
        format!("{}K", v / 1024.0)
    } else {
        format!("{v}")
    }
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
    chart(&left, "one-way latency (RTT/2, median)", "µs", &lat)?;
    chart(&right, "bandwidth (window of isends)", "Gbit/s", &bw)?;
    root.present()
        .map_err(|e| anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}
