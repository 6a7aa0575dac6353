//! `--plot FILE.svg`: the run drawn with plotters, as SVG: IOPS and mean completion latency
//! per second of the run (what the progress line saw), and the distribution of completion
//! latencies on a log scale, whose legend carries the totals the text report prints (IOPS,
//! p50, p99, p99.9).

use std::path::Path;

use anyhow::anyhow;
use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::{format_count, sig_us, RunReport};
use super::stats::{rates, OpStats};

/// One second of the run, as the progress line measured it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the start, at the end of this second.
    pub t_s: u64,
    /// Reads and writes completed in this second.
    pub read_iops: f64,
    pub write_iops: f64,
    /// Mean completion latency of this second's reads and writes, µs (None: none completed).
    pub read_lat_us: Option<f64>,
    pub write_lat_us: Option<f64>,
}

const READ: RGBColor = RGBColor(31, 119, 180);
const WRITE: RGBColor = RGBColor(214, 39, 40);
/// Bins per power of ten of the latency histogram.
const BINS_PER_DECADE: u32 = 20;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// Which directions the run did, with their totals: (name, colour, stats, per-second IOPS and
/// latency).
struct Direction<'r> {
    name: &'static str,
    color: RGBColor,
    op: &'r OpStats,
    iops: fn(&Sample) -> f64,
    lat: fn(&Sample) -> Option<f64>,
}

fn directions<'r>(report: &'r RunReport<'_>) -> Vec<Direction<'r>> {
    let (reads, writes) = report.cfg.rw.directions(report.cfg.rwmixread);
    let mut v = Vec::new();
    if reads || report.total.read.ios > 0 {
        v.push(Direction {
            name: "read",
            color: READ,
            op: &report.total.read,
            iops: |s| s.read_iops,
            lat: |s| s.read_lat_us,
        });
    }
    if writes || report.total.write.ios > 0 {
        v.push(Direction {
            name: "write",
            color: WRITE,
            op: &report.total.write,
            iops: |s| s.write_iops,
            lat: |s| s.write_lat_us,
        });
    }
    v
}

/// The legend line of one direction: `read: 52.3k IOPS, p50 18 µs, p99 40 µs, p99.9 61 µs`,
/// the figures as the text report prints them.
fn summary(name: &str, op: &OpStats, elapsed_ns: u64) -> String {
    let (iops, _) = rates(op, elapsed_ns);
    let p = |pct: f64| sig_us(op.lat.percentile_ns(pct) as f64 / 1000.0);
    format!(
        "{name}: {} IOPS, p50 {} µs, p99 {} µs, p99.9 {} µs",
        format_count(iops),
        p(50.0),
        p(99.0),
        p(99.9)
    )
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing the plot: {e}")
}

/// Writes the plot of `report` (its totals and its per-second timeline) to `path`.
pub fn write_svg(path: &Path, report: &RunReport<'_>) -> anyhow::Result<()> {
    let timeline = &report.timeline;
    let root = SVGBackend::new(path, (1000, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, rest) = root.split_vertically(40);
    let cfg = report.cfg;
    let heading = format!(
        "rdmablk-perf {}: {} bs={} iodepth={} numjobs={}",
        report.engine,
        cfg.rw.as_str(),
        cfg.bs,
        cfg.iodepth,
        cfg.numjobs
    );
    top.draw_text(
        &heading,
        &("sans-serif", 20).into_font().color(&BLACK),
        (12, 12),
    )
    .map_err(err)?;
    let dirs = directions(report);
    let panels = rest.split_evenly((3, 1));
    timeline_panel(
        &panels[0],
        &dirs,
        timeline,
        ("IOPS, each second", "IOPS"),
        |d, s| Some((d.iops)(s)),
    )?;
    timeline_panel(
        &panels[1],
        &dirs,
        timeline,
        ("mean completion latency, each second (µs)", "µs"),
        |d, s| (d.lat)(s),
    )?;
    histogram_panel(&panels[2], &dirs, report.total.elapsed_ns)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One per-second curve per direction: `value` of each second (None: no point that second).
fn timeline_panel(
    area: &Area<'_>,
    dirs: &[Direction<'_>],
    t: &[Sample],
    (caption, unit): (&str, &str),
    value: fn(&Direction<'_>, &Sample) -> Option<f64>,
) -> anyhow::Result<()> {
    let x_max = t.last().map_or(1, |s| s.t_s).max(1);
    let y_max = t
        .iter()
        .flat_map(|s| dirs.iter().filter_map(move |d| value(d, s)))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0..x_max, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(unit)
        .y_label_formatter(&|v| format_count(*v))
        .draw()
        .map_err(err)?;
    for d in dirs {
        let color = d.color;
        chart
            .draw_series(LineSeries::new(
                t.iter().filter_map(|s| value(d, s).map(|v| (s.t_s, v))),
                color.stroke_width(2),
            ))
            .map_err(err)?
            .label(d.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    legend(&mut chart)
}

fn histogram_panel(area: &Area<'_>, dirs: &[Direction<'_>], elapsed_ns: u64) -> anyhow::Result<()> {
    // Per direction: (low µs, high µs, percent of its I/Os) of each non-empty bin.
    let bins: Vec<Vec<(f64, f64, f64)>> = dirs
        .iter()
        .map(|d| {
            let n = d.op.lat.count().max(1) as f64;
            d.op.lat
                .log_bins(BINS_PER_DECADE)
                .into_iter()
                .map(|(lo, hi, c)| (lo / 1000.0, hi / 1000.0, c as f64 * 100.0 / n))
                .collect()
        })
        .collect();
    let all = || bins.iter().flatten();
    let x_min = all().map(|b| b.0).fold(f64::INFINITY, f64::min);
    let x_max = all().map(|b| b.1).fold(0.0, f64::max);
    let (x_min, x_max) = if x_min < x_max {
        (x_min, x_max)
    } else {
        (0.1, 1000.0)
    };
    let y_max = all().map(|b| b.2).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "completion latency distribution (log scale)",
            ("sans-serif", 16),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("µs")
        .y_desc("% of I/Os")
        .draw()
        .map_err(err)?;
    for (d, bins) in dirs.iter().zip(&bins) {
        let color = d.color;
        chart
            .draw_series(bins.iter().map(|&(lo, hi, pct)| {
                Rectangle::new([(lo, 0.0), (hi, pct)], color.mix(0.5).filled())
            }))
            .map_err(err)?
            .label(summary(d.name, d.op, elapsed_ns))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], color.filled()));
    }
    legend(&mut chart)
}

fn legend<'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(err)
}
