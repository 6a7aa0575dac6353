//! `rdmablk-target --config FILE`: serve the configured namespaces to NVMe-oF hosts over RDMA
//! and NVMe/TCP until SIGINT or SIGTERM, then drain, flush and exit 0 (1 if a namespace's
//! final flush failed: its data may not be durable). SIGHUP re-reads FILE and applies what
//! changed (see `docs/operations.md`).

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use rdmablk_target::config::{ArenaConfig, Config};
use rdmablk_target::control::ControlServer;
use rdmablk_target::metrics::MetricsServer;
use rdmablk_target::{cli_docs, systemd, Target};

/// rdmablk NVMe-oF target daemon (RDMA and NVMe/TCP).
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    long_about = "rdmablk NVMe-oF target daemon: serves the namespaces of its configuration \
                  file to NVMe-oF hosts over RDMA and NVMe/TCP until SIGINT or SIGTERM, then \
                  drains, flushes and exits 0; SIGHUP re-reads the file and applies what \
                  changed. It prints `listening ADDR` per listener and then `ready` on standard \
                  output once every listener, the control socket and the metrics endpoint \
                  accept.",
    after_help = "rdmablk-target --generate man|bash|zsh|fish prints its manual page or a shell \
                  completion script."
)]
struct Args {
    /// Configuration file (see config/rdmablk-target.toml for every knob).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    /// Check the configuration and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> std::process::ExitCode {
    if let Some(code) = cli_docs::generate_if_asked(Args::command, "8", man_sections) {
        return code;
    }
    let args = Args::parse();
    match run(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmablk-target: error: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each cause once: our errors already carry their
/// source's text in their own message, so a cause that the line already says is left out.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

fn run(args: Args) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cfg = Config::from_file(&args.config)?;
    if cfg.arena.sized_from_limits {
        tracing::info!(
            "[arena] bytes not set: sized {} for {} RDMA queues at limits.max_queue_depth {} \
             and data pools of {} (limits.max_io_size {}; set [arena] bytes and \
             data_bytes to choose)",
            cfg.arena.bytes,
            cfg.limits
                .max_connections
                .min(ArenaConfig::DEFAULT_CONNECTIONS),
            cfg.limits.max_queue_depth,
            rdmablk_target::config::ByteSize(cfg.data_pool_bytes()),
            cfg.limits.max_io_size,
        );
    }
    if args.check {
        println!("{}: configuration is valid", args.config.display());
        return Ok(());
    }
    // Block the signals (SIGINT, SIGTERM, SIGHUP) before any thread starts, so every thread inherits the mask and the
    // main thread alone receives them through sigwait.
    let signals = block_signals().context("blocking SIGINT/SIGTERM")?;
    let target = Target::start(cfg).context("starting the target")?;
    let handle = target.handle();
    handle.set_config_path(args.config.clone());
    let socket = handle.control_socket();
    let _control = if socket.as_os_str().is_empty() {
        None
    } else {
        Some(ControlServer::start(handle.clone(), &socket).context("starting the control socket")?)
    };
    let _metrics = match handle.metrics_address() {
        Some(addr) => Some(
            MetricsServer::start(handle.clone(), addr).context("starting the metrics endpoint")?,
        ),
        None => None,
    };
    // Every listener, the control socket and the metrics endpoint are bound and listening
    // (each `start` returns after listen(2)), so a connection made from now on is accepted.
    // One machine-readable line per listener, then `ready`: the line scripts and tests wait
    // for (docs/target.md), printed when systemd is told READY=1, never before.
    for addr in target.local_addrs() {
        println!("listening {addr}");
    }
    systemd::notify("READY=1");
    println!("ready");
    let sig = loop {
        let Some(sig) = wait_signal(&signals).context("waiting for a signal")? else {
            // A second without a signal: every worker must still be there.
            if let Some((index, how)) = target.lost_worker() {
                tracing::error!(
                    worker = index,
                    "worker thread rdmablk-w{index} {how}: its \
                    connections and queues are dead; exiting for the service manager to restart \
                    the target"
                );
                eprintln!("rdmablk-target: worker thread rdmablk-w{index} {how}; exiting");
                // No orderly shutdown: it would wait for the lost worker. Every write the
                // hosts saw acknowledged is on the backend already (as at a SIGKILL). The
                // control socket's file goes, as at a clean exit (its server is not dropped:
                // a request in flight may be waiting on the lost worker).
                if _control.is_some() {
                    let _ = std::fs::remove_file(&socket);
                }
                std::process::exit(EXIT_LOST_WORKER);
            }
            continue;
        };
        if sig != libc::SIGHUP {
            break sig;
        }
        // Reload: all or nothing; a refusal leaves the running configuration serving.
        systemd::notify("RELOADING=1");
        match handle.reload() {
            Ok(changes) if changes.is_empty() => tracing::info!("reload: nothing changed"),
            Ok(changes) => tracing::info!(changes = changes.len(), "reload applied"),
            Err(e) => tracing::error!("reload refused: {e}"),
        }
        systemd::notify("READY=1");
    };
    systemd::notify("STOPPING=1");
    tracing::info!(signal = sig, "shutting down");
    target.shutdown_checked()?;
    tracing::info!("target stopped");
    Ok(())
}

fn block_signals() -> std::io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data that sigemptyset initialises; the calls get valid
    // pointers to it and change only this thread's signal mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(std::io::Error::from_raw_os_error(rc));
        }
        Ok(set)
    }
}

/// The exit status when a worker thread is lost (EX_SOFTWARE).
const EXIT_LOST_WORKER: i32 = 70;

/// The next of the blocked signals, or `None` after a second without one.
fn wait_signal(set: &libc::sigset_t) -> std::io::Result<Option<i32>> {
    let timeout = libc::timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    // SAFETY: `set` is an initialised signal set, `timeout` a valid timespec; no siginfo is
    // asked for.
    let rc = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &timeout) };
    if rc >= 0 {
        return Ok(Some(rc));
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EINTR) => Ok(None),
        _ => Err(e),
    }
}

/// What the manual page adds to the options: the configuration reference, the signals, the
/// files.
fn man_sections() -> Vec<cli_docs::Section> {
    vec![
        (
            "CONFIGURATION",
            cli_docs::paragraph(
                "The configuration file is TOML. Unknown keys are errors; every problem is \
                 reported at start with its key and the fix. The reference below is \
                 config/rdmablk-target.toml of the source tree (installed as an example): \
                 every key, its default and its unit.",
            ) + &cli_docs::verbatim(cli_docs::CONFIG_REFERENCE),
        ),
        (
            "SIGNALS",
            cli_docs::paragraph(
                "SIGINT, SIGTERM: drain the hosts' commands, flush every namespace, exit 0 \
                 (1 if a final flush failed). SIGHUP: re-read the configuration file and apply \
                 what changed, all or nothing (a refused file changes nothing and the log says \
                 why).",
            ),
        ),
        (
            "EXIT STATUS",
            cli_docs::paragraph(
                "0 after SIGINT or SIGTERM with every namespace flushed; 1 on a configuration \
                 or start error (the message names the key or the device), or when a final \
                 flush failed; 70 when a worker thread is gone while the target runs (a panic, \
                 or a thread the kernel killed in an oops: see dmesg), checked every second, \
                 so that the service manager restarts the target instead of leaving its hosts \
                 on dead queues.",
            ),
        ),
        (
            "FILES",
            cli_docs::paragraph(
                "/run/rdmablk/ctl.sock: the default control socket ([control] socket), used by \
                 rdmablk-ctl(8).",
            ),
        ),
        cli_docs::see_also(),
    ]
}
