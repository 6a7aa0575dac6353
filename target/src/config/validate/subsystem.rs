//! Checks of `[[subsystem]]` and its namespaces: NQNs, hosts, controller IDs, serial
//! numbers, namespace IDs and UUIDs, ANA groups, visibility, QoS limits and shared
//! reservations (each namespace's backend is `backend.rs`'s).

use std::collections::HashSet;

use super::backend::check_backend;
use super::Checker;
use crate::config::{
    validate_nqn, validate_uuid, Config, NamespaceConfig, QosConfig, SubsystemConfig,
    ANA_GROUP_MAX, CNTLID_MAX, CNTLID_MIN, DISCOVERY_NQN, MAX_NAMESPACES_PER_SUBSYSTEM,
    QOS_MIN_BANDWIDTH, QOS_MIN_IOPS,
};

pub(super) fn check_subsystem(cfg: &Config, s: &SubsystemConfig, key: &str, c: &mut Checker) {
    if let Err(e) = validate_nqn(&s.nqn) {
        c.fail(format!("{key}.nqn"), e);
    }
    if s.nqn == DISCOVERY_NQN {
        c.fail(
            format!("{key}.nqn"),
            "is the discovery NQN, which the target serves itself (choose another NQN)",
        );
    }
    match (s.allow_any_host, s.hosts.is_empty()) {
        (true, false) => c.fail(
            format!("{key}.hosts"),
            "is set together with allow_any_host = true (remove one of them)",
        ),
        (false, true) => c.fail(
            format!("{key}.hosts"),
            "is empty and allow_any_host is false, so no host could connect \
             (list host NQNs in hosts, or set allow_any_host = true)",
        ),
        _ => {}
    }
    let mut hosts = HashSet::new();
    for (j, h) in s.hosts.iter().enumerate() {
        if let Err(e) = validate_nqn(h.nqn()) {
            c.fail(format!("{key}.hosts[{j}]"), e);
        }
        if !hosts.insert(h.nqn()) {
            c.fail(
                format!("{key}.hosts[{j}]"),
                format!("{:?} is listed twice", h.nqn()),
            );
        }
        if let Err(e) = h.resolve() {
            c.fail(format!("{key}.hosts[{j}]"), e);
        }
        if let Err(e) = h.tls_psk() {
            c.fail(format!("{key}.hosts[{j}]"), e);
        }
    }
    if s.cntlid_min < CNTLID_MIN || s.cntlid_max > CNTLID_MAX || s.cntlid_min > s.cntlid_max {
        c.fail(
            format!("{key}.cntlid_min"),
            format!(
                "{}..={} is not a controller ID range (use {CNTLID_MIN} <= cntlid_min <= \
                 cntlid_max <= {CNTLID_MAX:#x}; gateways of one subsystem take disjoint ranges)",
                s.cntlid_min, s.cntlid_max
            ),
        );
    }
    if let Some(sn) = &s.serial {
        if sn.is_empty() || sn.len() > 20 || !sn.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            c.fail(
                format!("{key}.serial"),
                format!("{sn:?} is not 1 to 20 printable ASCII characters"),
            );
        }
    }
    if s.namespaces.len() > MAX_NAMESPACES_PER_SUBSYSTEM {
        c.fail(
            format!("{key}.namespace"),
            format!(
                "{} namespaces, the limit is {MAX_NAMESPACES_PER_SUBSYSTEM} (split the subsystem)",
                s.namespaces.len()
            ),
        );
    }
    let mut nsids = HashSet::new();
    let mut uuids = HashSet::new();
    for (j, ns) in s.namespaces.iter().enumerate() {
        let nkey = format!("{key}.namespace[{j}]");
        if !nsids.insert(ns.nsid) {
            c.fail(
                format!("{nkey}.nsid"),
                format!(
                    "{} is used twice in this subsystem (give each namespace its own)",
                    ns.nsid
                ),
            );
        }
        if let Some(u) = &ns.uuid {
            if !uuids.insert(u.to_ascii_lowercase()) {
                c.fail(format!("{nkey}.uuid"), format!("{u} is used twice"));
            }
        }
        check_namespace(cfg, ns, &nkey, c);
        check_visibility(s, ns, &nkey, c);
        check_qos(&ns.qos, &format!("{nkey}.qos"), c);
        check_qos(&ns.host_qos, &format!("{nkey}.host_qos"), c);
        if let Some(d) = &ns.shared_reservations {
            if !d.is_absolute() {
                c.fail(
                    format!("{nkey}.shared_reservations"),
                    format!(
                        "{} is not an absolute path (write it from /, the same on every gateway)",
                        d.display()
                    ),
                );
            }
        }
    }
}

/// `qos` of a namespace: limits high enough that held commands do not time out on hosts.
fn check_qos(q: &QosConfig, key: &str, c: &mut Checker) {
    if let Some(n) = q.iops {
        if n < QOS_MIN_IOPS {
            c.fail(
                format!("{key}.iops"),
                format!(
                    "{n} is below {QOS_MIN_IOPS}: a host's queue of held commands would outlast \
                     its I/O timeout (raise it, or remove the key for no limit)"
                ),
            );
        }
    }
    for (name, b) in [
        ("bandwidth", q.bandwidth),
        ("read_bandwidth", q.read_bandwidth),
        ("write_bandwidth", q.write_bandwidth),
    ] {
        if let Some(b) = b {
            if b.bytes() < QOS_MIN_BANDWIDTH {
                c.fail(
                    format!("{key}.{name}"),
                    format!(
                        "{b} per second is below 1 MiB (raise it, or remove the key for no \
                         limit)"
                    ),
                );
            }
        }
    }
}

/// `hosts` of a namespace: host NQNs the subsystem admits, each once.
fn check_visibility(s: &SubsystemConfig, ns: &NamespaceConfig, key: &str, c: &mut Checker) {
    let Some(hosts) = &ns.hosts else { return };
    let mut seen = HashSet::new();
    for (j, h) in hosts.iter().enumerate() {
        let hkey = format!("{key}.hosts[{j}]");
        if let Err(e) = validate_nqn(h) {
            c.fail(hkey, e);
            continue;
        }
        if !seen.insert(h.as_str()) {
            c.fail(hkey, format!("{h:?} is listed twice"));
        } else if !s.allow_any_host && !s.hosts.iter().any(|x| x.nqn() == h) {
            c.fail(
                hkey,
                format!(
                    "{h:?} is not in the subsystem's hosts, so it could never connect to see \
                     the namespace (add it to the subsystem's hosts, or remove it here)"
                ),
            );
        }
    }
}

fn check_namespace(cfg: &Config, ns: &NamespaceConfig, key: &str, c: &mut Checker) {
    if ns.nsid == 0 || ns.nsid == u32::MAX {
        c.fail(
            format!("{key}.nsid"),
            format!(
                "{:#x} is reserved (0 and 0xFFFFFFFF are not namespace IDs; use 1, 2, ...)",
                ns.nsid
            ),
        );
    }
    if ns.block_size != 512 && ns.block_size != 4096 {
        c.fail(
            format!("{key}.block_size"),
            format!("{} is not supported (use 512 or 4096)", ns.block_size),
        );
    } else if cfg.limits.max_io_size % ns.block_size != 0 {
        c.fail(
            "limits.max_io_size",
            format!(
                "{} is not a multiple of {key}.block_size {} (make it one)",
                cfg.limits.max_io_size, ns.block_size
            ),
        );
    }
    if let Some(u) = &ns.uuid {
        if let Err(e) = validate_uuid(u) {
            c.fail(format!("{key}.uuid"), e);
        }
    }
    if !(1..=ANA_GROUP_MAX).contains(&ns.ana_group) {
        c.fail(
            format!("{key}.ana_group"),
            format!(
                "{} is not an ANA group ID (use 1 to {ANA_GROUP_MAX})",
                ns.ana_group
            ),
        );
    }
    check_backend(&ns.backend, ns.block_size, &format!("{key}.backend"), c);
}
