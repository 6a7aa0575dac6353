//! Semantic checks of a parsed [`Config`]: each problem names the key and the fix.
//!
//! A file per table, as `config/` has: `listener.rs`, `target.rs`, `limits.rs`, `arena.rs`,
//! `subsystem.rs` (with its namespaces), `backend.rs`; this file runs them, checks what spans
//! tables (NQNs, referrals) and re-checks the limits against an RDMA device at start.

mod arena;
mod backend;
mod limits;
mod listener;
mod subsystem;
mod target;

use std::collections::HashSet;
use std::fmt;

use super::{validate_nqn, Config, DISCOVERY_NQN};

pub use listener::{ana_state_names, parse_ana_group};

/// One thing wrong with a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The offending key, as a path: `limits.max_io_size`, `subsystem[0].namespace[1].nsid`.
    pub key: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn fail(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }
}

pub(super) fn check(cfg: &Config) -> Vec<Problem> {
    let mut c = Checker {
        problems: Vec::new(),
    };
    listener::check_listeners(cfg, &mut c);
    target::check_target(cfg, &mut c);
    limits::check_limits(cfg, &mut c);
    arena::check_arena(cfg, &mut c);
    if cfg.subsystems.is_empty() {
        c.fail(
            "subsystem",
            "no subsystem is configured (add a [[subsystem]] table with an nqn)",
        );
    }
    let mut nqns = HashSet::new();
    for (i, s) in cfg.subsystems.iter().enumerate() {
        let key = format!("subsystem[{i}]");
        if !nqns.insert(s.nqn.as_str()) {
            c.fail(
                format!("{key}.nqn"),
                format!(
                    "{:?} is used by two subsystems (give each its own NQN)",
                    s.nqn
                ),
            );
        }
        subsystem::check_subsystem(cfg, s, &key, &mut c);
    }
    if let Some(d) = &cfg.target.discovery_nqn {
        if let Err(e) = validate_nqn(d) {
            c.fail("target.discovery_nqn", e);
        } else if d == DISCOVERY_NQN || nqns.contains(d.as_str()) {
            c.fail(
                "target.discovery_nqn",
                format!(
                    "{d:?} is the well-known discovery NQN or a subsystem's NQN (give the \
                     discovery service a name of its own, e.g. \
                     \"nqn.2014-08.org.nvmexpress:uuid:<uuid>\", or remove the key)"
                ),
            );
        }
    }
    for (i, r) in cfg.referrals.iter().enumerate() {
        if let Err(why) = r.transport.kind().check_referral() {
            c.fail(format!("referral[{i}].transport"), why);
        }
        if r.port == 0 {
            c.fail(
                format!("referral[{i}].port"),
                "0 is not a port (the other target's discovery port, usually 4420)",
            );
        }
        if cfg
            .listeners
            .iter()
            .any(|l| l.address == r.address && l.port == r.port)
        {
            c.fail(
                format!("referral[{i}]"),
                format!(
                    "{}:{} is this target's own listener (a referral points to another \
                     discovery service)",
                    r.address, r.port
                ),
            );
        }
    }
    c.problems
}

pub(super) fn check_device(
    cfg: &Config,
    attr: &rdmablk::fabric::DeviceAttr,
    send_wrs_per_request: u32,
) -> Vec<Problem> {
    let mut c = Checker {
        problems: Vec::new(),
    };
    let depth = cfg.limits.max_queue_depth;
    let send_wrs = u64::from(depth) * u64::from(send_wrs_per_request.max(1));
    if depth > attr.max_qp_wr || send_wrs > u64::from(attr.max_qp_wr) {
        c.fail(
            "limits.max_queue_depth",
            format!(
                "{depth} needs {send_wrs} send work requests per queue but device {} allows {} \
                 (lower limits.max_queue_depth to {})",
                attr.name,
                attr.max_qp_wr,
                attr.max_qp_wr / send_wrs_per_request.max(1)
            ),
        );
    }
    if attr.max_mr_size > 0 && cfg.arena.bytes.bytes() > attr.max_mr_size {
        c.fail(
            "arena.bytes",
            format!(
                "{} is larger than device {}'s largest memory region ({} bytes; lower it)",
                cfg.arena.bytes, attr.name, attr.max_mr_size
            ),
        );
    }
    if attr.max_qp > 0 && cfg.limits.max_connections > attr.max_qp {
        // Not an error: limits.max_connections counts NVMe/TCP queues too, and its default
        // (4096) is above some devices' count (siw: 1024). An RDMA queue beyond the device's
        // queue pairs is refused with a CM reject, as any other that finds no room.
        tracing::warn!(
            "limits.max_connections {} is more than device {}'s {} queue pairs: RDMA queues \
             beyond them are refused (lower limits.max_connections to say so at start)",
            cfg.limits.max_connections,
            attr.name,
            attr.max_qp
        );
    }
    c.problems
}
