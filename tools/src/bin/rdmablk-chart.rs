//! `rdmablk-chart`: a benchmark's ratio table (TSV) as an SVG bar chart
//! ([`rdmablk_tools::chart`]). The tools/bench scripts run it beside each Markdown table.

use std::path::PathBuf;

use clap::{CommandFactory, Parser};
use rdmablk_target::cli_docs;
use rdmablk_tools::chart;

/// Draws a ratio table as a horizontal bar chart (SVG): one bar per row, the repeats' range as
/// a whisker, a line at 1.0, each value written as the Markdown table prints it.
#[derive(Parser, Debug)]
#[command(name = "rdmablk-chart", version)]
struct Args {
    /// Tab-separated rows: label, ratio, low, high ("-" "-" without a range).
    tsv: PathBuf,
    /// The SVG file to write.
    #[arg(long, short, value_name = "FILE.svg")]
    out: PathBuf,
    /// The chart's title.
    #[arg(long, default_value = "")]
    title: String,
}

fn main() -> std::process::ExitCode {
    if let Some(code) =
        cli_docs::generate_if_asked(Args::command, "1", || vec![cli_docs::see_also()])
    {
        return code;
    }
    let args = Args::parse();
    let run = || -> anyhow::Result<()> {
        let text = std::fs::read_to_string(&args.tsv)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", args.tsv.display()))?;
        let bars =
            chart::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e:#}", args.tsv.display()))?;
        chart::write_svg(&args.out, &args.title, &bars)
            .map_err(|e| anyhow::anyhow!("{}: {e:#}", args.out.display()))
    };
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmablk-chart: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
