//! `rdmablk-perf`: parses the flags and runs [`rdmablk_tools::perf::main`].

use clap::Parser;
use rdmablk_tools::perf::{self, args::Args};

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    std::process::exit(perf::main(&args));
}
