//! The benchmarks' ratio tables as SVG bar charts (`rdmablk-chart`, plotters): one horizontal
//! bar per row from 0 to its ratio, the range of its repeats as a whisker, a line at 1.0 (the
//! baseline), and the value written beside the bar as the Markdown table shows it.
//!
//! Input: tab-separated lines `label  ratio  low  high` (low and high `-` with one repeat);
//! blank lines and `#` comments are skipped. tools/bench/lib/benchjson.py writes them beside
//! each table (`ratios.tsv`).

use std::path::Path;

use anyhow::{anyhow, bail, Context};
use plotters::prelude::*;

/// One bar: a row of a ratio table.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub ratio: f64,
    /// The smallest and largest of the repeats' ratios, when there were several.
    pub range: Option<(f64, f64)>,
}

impl Bar {
    /// The value as the Markdown table prints it: `1.02` or `1.02 (0.95-1.10)`.
    pub fn text(&self) -> String {
        match self.range {
            Some((lo, hi)) => format!("{:.2} ({lo:.2}-{hi:.2})", self.ratio),
            None => format!("{:.2}", self.ratio),
        }
    }
}

/// Parses the TSV; an error names the line and what is wrong with it.
pub fn parse(text: &str) -> anyhow::Result<Vec<Bar>> {
    let mut bars = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let at = || format!("line {}: {line:?}", i + 1);
        if f.len() != 4 {
            bail!(
                "{}: want 4 tab-separated fields (label, ratio, low, high)",
                at()
            );
        }
        let num = |s: &str| -> anyhow::Result<f64> {
            let v: f64 = s
                .parse()
                .with_context(|| format!("{}: {s:?} is not a number", at()))?;
            if !v.is_finite() || v < 0.0 {
                bail!("{}: {s:?} is not a ratio (finite, >= 0)", at());
            }
            Ok(v)
        };
        let ratio = num(f[1])?;
        let range = match (f[2], f[3]) {
            ("-", "-") => None,
            (lo, hi) => Some((num(lo)?, num(hi)?)),
        };
        bars.push(Bar {
            label: f[0].to_string(),
            ratio,
            range,
        });
    }
    if bars.is_empty() {
        bail!("no rows");
    }
    Ok(bars)
}

fn err<E: std::fmt::Display>(e: E) -> anyhow::Error {
    anyhow!("drawing the chart: {e}")
}

/// Draws `bars` under `title` to `path`.
pub fn write_svg(path: &Path, title: &str, bars: &[Bar]) -> anyhow::Result<()> {
    let n = bars.len();
    let height = 90 + 28 * n as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let x_max = bars
        .iter()
        .map(|b| b.range.map_or(b.ratio, |r| r.1).max(b.ratio))
        .fold(1.0, f64::max)
        * 1.25;
    let label_width = bars
        .iter()
        .map(|b| b.label.chars().count())
        .max()
        .unwrap_or(0) as u32;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(20 + 7 * label_width)
        .build_cartesian_2d(0.0..x_max, 0.0..n as f64)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("ratio (1.0 = the baseline)")
        .draw()
        .map_err(err)?;
    let blue = RGBColor(31, 119, 180);
    // Row k from the top: y in [n-k-1, n-k].
    let row = |k: usize| (n - k - 1) as f64;
    chart
        .draw_series(bars.iter().enumerate().map(|(k, b)| {
            Rectangle::new(
                [(0.0, row(k) + 0.2), (b.ratio, row(k) + 0.8)],
                blue.mix(0.7).filled(),
            )
        }))
        .map_err(err)?;
    chart
        .draw_series(bars.iter().enumerate().filter_map(|(k, b)| {
            b.range.map(|(lo, hi)| {
                PathElement::new(vec![(lo, row(k) + 0.5), (hi, row(k) + 0.5)], BLACK)
            })
        }))
        .map_err(err)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(1.0, 0.0), (1.0, n as f64)],
            RED.stroke_width(2),
        )))
        .map_err(err)?;
    let font = ("sans-serif", 13).into_font();
    chart
        .draw_series(bars.iter().enumerate().map(|(k, b)| {
            let x = b.range.map_or(b.ratio, |r| r.1.max(b.ratio));
            Text::new(b.text(), (x + x_max * 0.01, row(k) + 0.65), font.clone())
        }))
        .map_err(err)?;
    // Row labels, right-aligned against the plot's left edge.
    let plot = chart.plotting_area();
    let (left, _) = plot.get_pixel_range();
    let style =
        ("sans-serif", 13)
            .into_font()
            .color(&BLACK)
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Right,
                plotters::style::text_anchor::VPos::Center,
            ));
    for (k, b) in bars.iter().enumerate() {
        let (_, y) = chart.backend_coord(&(0.0, row(k) + 0.5));
        root.draw_text(&b.label, &style, (left.start - 6, y))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rows_with_and_without_a_range() {
        let bars = parse("# c\n4k qd1: soft / local\t0.93\t0.90\t0.97\nx\t1.5\t-\t-\n\n").unwrap();
        assert_eq!(bars.len(), 2);
        assert_eq!(bars[0].text(), "0.93 (0.90-0.97)");
        assert_eq!(bars[1].text(), "1.50");
    }

    #[test]
    fn bad_rows_name_their_line() {
        let e = parse("a\t1.0\t-\t-\nb\tfast\t-\t-\n").unwrap_err();
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        assert!(parse("a\t1.0\n").is_err());
        assert!(parse("a\t-1\t-\t-\n").is_err());
        assert!(parse("\n# only a comment\n").is_err());
    }
}
