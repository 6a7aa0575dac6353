//! What differs between the running configuration and a new one: the keys only a restart may
//! change (a reload that changes them is refused), and the [`Plan`] of what changes live.

use std::collections::{HashMap, HashSet};

use crate::config::{Config, ListenerConfig, NamespaceConfig, QosConfig, SubsystemConfig};

/// Keys whose change needs a restart.
pub(super) fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut keys = Vec::new();
    if old.arena != new.arena {
        keys.push("[arena]".to_string());
    }
    if old.limits != new.limits {
        keys.push("[limits]".to_string());
    }
    if old.control != new.control {
        keys.push("[control]".to_string());
    }
    if old.metrics != new.metrics {
        keys.push("[metrics]".to_string());
    }
    let (a, b) = (&old.target, &new.target);
    for (key, same) in [
        (
            "target.worker_threads",
            a.worker_threads == b.worker_threads,
        ),
        ("target.worker_cpus", a.worker_cpus == b.worker_cpus),
        ("target.poll_mode", a.poll_mode == b.poll_mode),
        ("target.poll_spin_us", a.poll_spin_us == b.poll_spin_us),
        (
            "target.tcp_place_from",
            a.tcp_place_from == b.tcp_place_from,
        ),
        (
            "target.tcp_pass_bytes_per_host",
            a.tcp_pass_bytes_per_host == b.tcp_pass_bytes_per_host,
        ),
        (
            "target.keep_alive_granularity_ms",
            a.keep_alive_granularity_ms == b.keep_alive_granularity_ms,
        ),
        (
            "target.default_keep_alive_timeout_ms",
            a.default_keep_alive_timeout_ms == b.default_keep_alive_timeout_ms,
        ),
        (
            "target.connect_timeout_ms",
            a.connect_timeout_ms == b.connect_timeout_ms,
        ),
        (
            "target.response_timeout_ms",
            a.response_timeout_ms == b.response_timeout_ms,
        ),
        ("target.discovery_nqn", a.discovery_nqn == b.discovery_nqn),
        ("target.io_statistics", a.io_statistics == b.io_statistics),
    ] {
        if !same {
            keys.push(key.to_string());
        }
    }
    let old_subs: HashMap<&str, &SubsystemConfig> =
        old.subsystems.iter().map(|s| (s.nqn.as_str(), s)).collect();
    for (i, s) in new.subsystems.iter().enumerate() {
        if let Some(o) = old_subs.get(s.nqn.as_str()) {
            if o.serial != s.serial {
                keys.push(format!(
                    "subsystem[{i}].serial (or remove the subsystem and add it back)"
                ));
            }
            if (o.cntlid_min, o.cntlid_max) != (s.cntlid_min, s.cntlid_max) {
                keys.push(format!(
                    "subsystem[{i}].cntlid_min/cntlid_max (or remove the subsystem and add it \
                     back)"
                ));
            }
        }
    }
    keys
}

/// What differs between the running configuration and the new one.
#[derive(Debug, Default)]
pub(super) struct Plan {
    pub(super) added_subsystems: Vec<SubsystemConfig>,
    pub(super) removed_subsystems: Vec<String>,
    /// Per subsystem kept: namespaces added (or replaced: new settings), and NSIDs removed (or
    /// replaced).
    pub(super) added_namespaces: Vec<(String, NamespaceConfig)>,
    pub(super) removed_namespaces: Vec<(String, u32)>,
    /// Kept namespaces whose `hosts` changed: subsystem, NSID, the new list.
    pub(super) visibility_changed: Vec<(String, u32, Option<Vec<String>>)>,
    /// Kept namespaces whose `qos` or `host_qos` changed: subsystem, NSID, the new limits
    /// (namespace, per host).
    pub(super) qos_changed: Vec<(String, u32, QosConfig, QosConfig)>,
    /// Subsystems whose host list (or a host's keys) changed.
    pub(super) hosts_changed: Vec<(String, SubsystemConfig)>,
    /// Some subsystem's allowed host NQNs changed (what the discovery log shows).
    pub(super) allow_lists_changed: bool,
    pub(super) added_listeners: Vec<ListenerConfig>,
    pub(super) removed_listeners: Vec<ListenerConfig>,
    pub(super) referrals_changed: bool,
}

impl Plan {
    pub(super) fn of(old: &Config, new: &Config) -> Plan {
        let mut p = Plan::default();
        let old_subs: HashMap<&str, &SubsystemConfig> =
            old.subsystems.iter().map(|s| (s.nqn.as_str(), s)).collect();
        let new_nqns: HashSet<&str> = new.subsystems.iter().map(|s| s.nqn.as_str()).collect();
        for s in &old.subsystems {
            if !new_nqns.contains(s.nqn.as_str()) {
                p.removed_subsystems.push(s.nqn.clone());
            }
        }
        for s in &new.subsystems {
            let Some(o) = old_subs.get(s.nqn.as_str()) else {
                p.added_subsystems.push(s.clone());
                continue;
            };
            // Key files are read again at every reload: a rotated key applies to new
            // connections even when the file's text names the same files.
            let keys_from_files = s.hosts.iter().any(|h| h.has_key_file());
            let nqns = |c: &SubsystemConfig| {
                (
                    c.allow_any_host,
                    c.hosts
                        .iter()
                        .map(|h| h.nqn().to_owned())
                        .collect::<Vec<_>>(),
                )
            };
            if nqns(o) != nqns(s) {
                p.allow_lists_changed = true;
            }
            if o.allow_any_host != s.allow_any_host || o.hosts != s.hosts || keys_from_files {
                p.hosts_changed.push((s.nqn.clone(), s.clone()));
            }
            let old_ns: HashMap<u32, &NamespaceConfig> =
                o.namespaces.iter().map(|n| (n.nsid, n)).collect();
            let new_ns: HashMap<u32, &NamespaceConfig> =
                s.namespaces.iter().map(|n| (n.nsid, n)).collect();
            // A namespace whose settings but `hosts`, `qos` and `host_qos` are the same is
            // kept (those change in place); any other change replaces it.
            for n in &o.namespaces {
                match new_ns.get(&n.nsid) {
                    Some(m) if same_but_live(n, m) => {
                        if n.hosts != m.hosts {
                            p.visibility_changed
                                .push((s.nqn.clone(), n.nsid, m.hosts.clone()));
                        }
                        if n.qos != m.qos || n.host_qos != m.host_qos {
                            p.qos_changed
                                .push((s.nqn.clone(), n.nsid, m.qos, m.host_qos));
                        }
                    }
                    _ => p.removed_namespaces.push((s.nqn.clone(), n.nsid)),
                }
            }
            for n in &s.namespaces {
                if !old_ns.get(&n.nsid).is_some_and(|m| same_but_live(m, n)) {
                    p.added_namespaces.push((s.nqn.clone(), n.clone()));
                }
            }
        }
        let key = |l: &ListenerConfig| l.key();
        let old_l: HashSet<_> = old.listeners.iter().map(key).collect();
        let new_l: HashSet<_> = new.listeners.iter().map(key).collect();
        p.added_listeners = new
            .listeners
            .iter()
            .filter(|l| !old_l.contains(&key(l)))
            .cloned()
            .collect();
        p.removed_listeners = old
            .listeners
            .iter()
            .filter(|l| !new_l.contains(&key(l)))
            .cloned()
            .collect();
        p.referrals_changed = old.referrals != new.referrals;
        p
    }

    pub(super) fn discovery_changes(&self) -> bool {
        !self.added_subsystems.is_empty()
            || !self.removed_subsystems.is_empty()
            || self.allow_lists_changed
            || !self.added_listeners.is_empty()
            || !self.removed_listeners.is_empty()
            || self.referrals_changed
    }
}

/// Whether two namespace settings differ at most in what changes live (`hosts`, `qos`,
/// `host_qos`).
fn same_but_live(a: &NamespaceConfig, b: &NamespaceConfig) -> bool {
    let strip = |n: &NamespaceConfig| NamespaceConfig {
        hosts: None,
        qos: QosConfig::default(),
        host_qos: QosConfig::default(),
        ..n.clone()
    };
    strip(a) == strip(b)
}
