//! The fabric conformance suite as a program: runs every case on one provider, in one process
//! or against a server peer in another.
//!
//! ```text
//! rdmablk-conformance --provider soft                      # in-process, 127.0.0.1
//! rdmablk-conformance --provider verbs --addr 10.0.2.15    # in-process on rxe0
//! rdmablk-conformance --provider soft --serve 127.0.0.1:0  # server peer (prints its address)
//! rdmablk-conformance --provider soft --connect 127.0.0.1:PORT [--shutdown-server]
//! ```
//! Exits non-zero if any case failed or if no case ran and passed.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Parser;
use rdmablk::fabric::ProviderKind;
use rdmablk_tests::{harness, Env, Mode};

#[derive(Parser, Debug)]
#[command(about = "Fabric conformance suite: every fabric provider must pass it")]
struct Args {
    /// Fabric provider: soft or verbs.
    #[arg(long, default_value = "soft")]
    provider: ProviderKind,
    /// In-process mode: the local IP to listen and connect on (for verbs, an IP of the RDMA
    /// device). Default 127.0.0.1 for soft.
    #[arg(long)]
    addr: Option<IpAddr>,
    /// Run only the cases whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    /// List the case names and exit.
    #[arg(long)]
    list: bool,
    /// Run the server peer on ADDR (port 0 picks one; the address is printed) until a client
    /// sends the quit hello.
    #[arg(long, value_name = "ADDR", conflicts_with = "connect")]
    serve: Option<SocketAddr>,
    /// Run the client half of every case against a server peer at ADDR.
    #[arg(long, value_name = "ADDR")]
    connect: Option<SocketAddr>,
    /// With --connect: ask the server peer to exit after the run.
    #[arg(long, requires = "connect")]
    shutdown_server: bool,
}

fn main() -> anyhow::Result<ExitCode> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if args.list {
        for c in harness::selected(args.filter.as_deref()) {
            println!("{}", c.name);
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(addr) = args.serve {
        harness::serve(args.provider, addr, true, |a| {
            println!("listening on {a}");
            let _ = std::io::stdout().flush();
        })
        .map_err(anyhow::Error::msg)
        .context("conformance server")?;
        return Ok(ExitCode::SUCCESS);
    }
    let env = match args.connect {
        Some(server) => Env {
            kind: args.provider,
            listen_addr: server,
            mode: Mode::Connect {
                shutdown_server: args.shutdown_server,
            },
        },
        None => {
            let ip = match (args.addr, args.provider) {
                (Some(ip), _) => ip,
                (None, ProviderKind::Soft) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                (None, ProviderKind::Verbs) => {
                    bail!("--provider verbs needs --addr <IP of the RDMA device> (e.g. 10.0.2.15 for rxe0 in the VM)")
                }
            };
            Env {
                kind: args.provider,
                listen_addr: SocketAddr::new(ip, 0),
                mode: Mode::InProcess,
            }
        }
    };
    let report = harness::run(&env, args.filter.as_deref());
    if report.cases.is_empty() {
        eprintln!("error: no case matches the filter {:?}", args.filter);
    }
    Ok(if report.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
