//! Checks of `[target]`: the workers, their CPUs, the keep-alive granularity, the timeouts
//! and the state directory.

use super::Checker;
use crate::config::{Config, MAX_WORKER_THREADS};

pub(super) fn check_target(cfg: &Config, c: &mut Checker) {
    let t = &cfg.target;
    if let Some(d) = &t.state_dir {
        if !d.is_absolute() {
            c.fail(
                "target.state_dir",
                format!("{} is not an absolute path (write it from /)", d.display()),
            );
        }
    }
    if t.worker_threads == 0 || t.worker_threads > MAX_WORKER_THREADS {
        c.fail(
            "target.worker_threads",
            format!(
                "{} is out of range (set 1..={MAX_WORKER_THREADS}; one per core you give the target)",
                t.worker_threads
            ),
        );
    }
    if let (Some(list), Some(allowed)) = (&t.worker_cpus, crate::config::allowed_cpus()) {
        let outside: Vec<usize> = list
            .cpus()
            .iter()
            .copied()
            .filter(|c| !allowed.cpus().contains(c))
            .collect();
        if !outside.is_empty() {
            let (which, verb) = match outside.len() {
                1 => ("CPU", "is not one"),
                _ => ("CPUs", "are not ones"),
            };
            let list: Vec<String> = outside.iter().map(usize::to_string).collect();
            c.fail(
                "target.worker_cpus",
                format!(
                    "{which} {} {verb} this process may run on (it may run on {allowed}: \
                     list only those, or widen its affinity: taskset, or the service's \
                     CPUAffinity=)",
                    list.join(", ")
                ),
            );
        }
    }
    let kas = t.keep_alive_granularity_ms;
    if kas == 0 || kas % 100 != 0 || kas / 100 > u16::MAX as u32 {
        c.fail(
            "target.keep_alive_granularity_ms",
            format!(
                "{kas} is not a non-zero multiple of 100 ms (KAS counts 100 ms units; use 1000)"
            ),
        );
    }
    if t.connect_timeout_ms > MAX_CONNECT_TIMEOUT_MS {
        c.fail(
            "target.connect_timeout_ms",
            format!(
                "{} is out of range (set 0..={MAX_CONNECT_TIMEOUT_MS}; hosts send Connect right \
                 after the RDMA connection is up, 10000 is ample; 0 disables)",
                t.connect_timeout_ms
            ),
        );
    }
    if t.poll_spin_us > MAX_POLL_SPIN_US {
        c.fail(
            "target.poll_spin_us",
            format!(
                "{} is out of range (set 0..={MAX_POLL_SPIN_US}: a spell of polling after work; \
                 50 covers a host's next command at queue depth 1; poll_mode = \"busy\" \
                 polls always)",
                t.poll_spin_us
            ),
        );
    }
    if t.tcp_place_from != 0
        && !(MIN_TCP_PLACE_FROM..=MAX_TCP_PLACE_FROM).contains(&t.tcp_place_from)
    {
        c.fail(
            "target.tcp_place_from",
            format!(
                "{} is out of range (set 0 to never place H2CData, or \
                 {MIN_TCP_PLACE_FROM}..={MAX_TCP_PLACE_FROM} bytes: below a few KiB the extra \
                 read costs more than the copy it saves; an H2CData PDU is at most 128 KiB)",
                t.tcp_place_from
            ),
        );
    }
    if t.tcp_pass_bytes_per_host != 0
        && !(MIN_TCP_PASS_BYTES..=MAX_TCP_PASS_BYTES).contains(&t.tcp_pass_bytes_per_host)
    {
        c.fail(
            "target.tcp_pass_bytes_per_host",
            format!(
                "{} is out of range (set 0 for no limit, or {MIN_TCP_PASS_BYTES}..={MAX_TCP_PASS_BYTES} \
                 bytes: a host's share of a worker's pass; 131072, the default, is one 128 KiB \
                 H2CData)",
                t.tcp_pass_bytes_per_host
            ),
        );
    }
    if t.response_timeout_ms > MAX_CONNECT_TIMEOUT_MS {
        c.fail(
            "target.response_timeout_ms",
            format!(
                "{} is out of range (set 0..={MAX_CONNECT_TIMEOUT_MS}; 30000 matches the Linux \
                 host's I/O timeout; 0 disables)",
                t.response_timeout_ms
            ),
        );
    }
}

/// Smallest non-zero `target.tcp_place_from` (bytes).
const MIN_TCP_PLACE_FROM: u32 = 1024;
/// Largest `target.tcp_place_from`: the target's MAXH2CDATA (no H2CData is longer).
const MAX_TCP_PLACE_FROM: u32 = crate::nvmf::transport::tcp::MAXH2CDATA;

/// Smallest non-zero `target.tcp_pass_bytes_per_host`: a page.
const MIN_TCP_PASS_BYTES: u32 = 4096;
/// Largest `target.tcp_pass_bytes_per_host` (64 MiB: several socket buffers' worth).
const MAX_TCP_PASS_BYTES: u32 = 64 << 20;

/// Longest `target.poll_spin_us` (10 ms).
const MAX_POLL_SPIN_US: u32 = 10_000;

/// Longest `target.connect_timeout_ms` and `target.response_timeout_ms` (10 minutes).
const MAX_CONNECT_TIMEOUT_MS: u32 = 600_000;
