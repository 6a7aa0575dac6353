//! `rdmablk-perf`: parses the flags and runs [`rdmablk_tools::perf::main`].

use std::io::IsTerminal;

use clap::{CommandFactory, Parser};
use rdmablk_target::cli_docs;
use rdmablk_tools::perf::{self, args::Args};

fn main() -> std::process::ExitCode {
    if let Some(code) =
        cli_docs::generate_if_asked(Args::command, "1", || vec![cli_docs::see_also()])
    {
        return code;
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colours only for a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            // clap exits 2 on bad flags, but 2 means "verify failed" here: usage errors are 1.
            let _ = e.print();
            std::process::exit(if e.use_stderr() {
                perf::EXIT_USAGE
            } else {
                perf::EXIT_OK
            });
        }
    };
    std::process::exit(perf::main(&args));
}
