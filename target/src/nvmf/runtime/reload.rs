//! Live reconfiguration: a new configuration is validated, then applied all or nothing.
//!
//! What may change while hosts are connected: subsystems (added, removed), their namespaces
//! (added, removed, replaced when a namespace's settings change; a namespace's `hosts` and
//! `qos` change in place) and host lists, listeners, referrals. Everything else (arena, threads, limits, keep-alive settings) changes only with
//! a restart, and a reload that changes it is refused naming the keys.
//!
//! Order (what can fail comes first, so a refusal leaves the running target untouched):
//! 1. open every new namespace (a slot in the namespace table each) and have every worker
//!    open its queue to it; bind every new listener. Any failure undoes these and refuses.
//! 2. publish: the new subsystem and host lists are swapped in; controllers of removed
//!    subsystems, and of hosts no longer allowed, are torn down; controllers whose namespaces
//!    changed (for their host: a namespace it saw or sees) get a Namespace Attribute Changed
//!    event; discovery controllers a Discovery Log
//!    Change event.
//! 3. retire: workers close their queues to removed namespaces once the I/O already in
//!    flight there is done, flush them, and the namespaces are closed; removed listeners stop
//!    and their connections close.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::bounded;

use super::port::Port;
use crate::config::{
    Config, ConfigError, ListenerConfig, NamespaceConfig, QosConfig, SubsystemConfig,
};
use crate::namespace::visibility::Visibility;
use crate::namespace::Namespace;
use crate::nvmf::subsystems::subsystem::{HostList, Subsystem};
use crate::nvmf::worker::ns_queues::Ack;
use crate::nvmf::worker::WorkerMsg;
use crate::nvmf::{open_namespace, Shared, TargetHandle};

/// How long workers get to open a namespace queue.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long workers get to finish a removed namespace's I/O and flush it.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(40);

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "{} only change with a restart: put the running values back in the file, or restart \
         the target (nothing was changed)", keys.join(", ")
    )]
    RestartNeeded { keys: Vec<String> },
    #[error("{0} (nothing was changed)")]
    Apply(String),
    #[error("no configuration file to reload (the target was started from a string)")]
    NoFile,
    #[error("the target is shutting down")]
    Stopping,
}

/// What a reload changed, one line per change (empty: the file says what runs).
pub type Changes = Vec<String>;

impl TargetHandle {
    /// Re-reads the configuration file the target was started with and applies it.
    pub fn reload(&self) -> Result<Changes, ReloadError> {
        let path = self.0.config_path.get().ok_or(ReloadError::NoFile)?;
        match Config::from_file(path) {
            Ok(cfg) => self.apply(cfg),
            Err(e) => {
                self.0
                    .counters
                    .reloads_refused
                    .fetch_add(1, Ordering::Relaxed);
                Err(e.into())
            }
        }
    }

    /// Applies `new` (see the module documentation).
    pub fn apply(&self, new: Config) -> Result<Changes, ReloadError> {
        let r = self.apply_inner(new);
        let c = &self.0.counters;
        match &r {
            Ok(_) => c.reloads_applied.fetch_add(1, Ordering::Relaxed),
            Err(_) => c.reloads_refused.fetch_add(1, Ordering::Relaxed),
        };
        r
    }

    fn apply_inner(&self, new: Config) -> Result<Changes, ReloadError> {
        let shared = &self.0;
        let _serial = shared.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        if shared.stopping() {
            return Err(ReloadError::Stopping);
        }
        new.validate()?;
        let old = shared.live.load_full();
        let keys = restart_only_changes(&old, &new);
        if !keys.is_empty() {
            return Err(ReloadError::RestartNeeded { keys });
        }
        let plan = Plan::of(&old, &new);
        let prepared = prepare(shared, &plan, &new)?;
        let changes = publish(shared, &plan, &new, prepared);
        shared.live.store(Arc::new(new));
        Ok(changes)
    }
}

/// Keys whose change needs a restart.
fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
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
struct Plan {
    added_subsystems: Vec<SubsystemConfig>,
    removed_subsystems: Vec<String>,
    /// Per subsystem kept: namespaces added (or replaced: new settings), and NSIDs removed (or
    /// replaced).
    added_namespaces: Vec<(String, NamespaceConfig)>,
    removed_namespaces: Vec<(String, u32)>,
    /// Kept namespaces whose `hosts` changed: subsystem, NSID, the new list.
    visibility_changed: Vec<(String, u32, Option<Vec<String>>)>,
    /// Kept namespaces whose `qos` or `host_qos` changed: subsystem, NSID, the new limits
    /// (namespace, per host).
    qos_changed: Vec<(String, u32, QosConfig, QosConfig)>,
    /// Subsystems whose host list (or a host's keys) changed.
    hosts_changed: Vec<(String, SubsystemConfig)>,
    /// Some subsystem's allowed host NQNs changed (what the discovery log shows).
    allow_lists_changed: bool,
    added_listeners: Vec<ListenerConfig>,
    removed_listeners: Vec<ListenerConfig>,
    referrals_changed: bool,
}

impl Plan {
    fn of(old: &Config, new: &Config) -> Plan {
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

    fn discovery_changes(&self) -> bool {
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

/// A namespace change, and which hosts it concerns.
enum NsEvent {
    /// Added, removed, replaced or grown: hosts that saw or see it.
    Changed(u32, Vec<Arc<Visibility>>),
    /// Its host list changed: hosts for which it appeared or vanished.
    Visibility(u32, Arc<Visibility>, Arc<Visibility>),
}

impl NsEvent {
    /// The NSID, if the change concerns `hostnqn`.
    fn for_host(&self, hostnqn: &str) -> Option<u32> {
        let concerns = match self {
            NsEvent::Changed(_, seen) => seen.iter().any(|v| v.allows(hostnqn)),
            NsEvent::Visibility(_, before, after) => {
                before.allows(hostnqn) != after.allows(hostnqn)
            }
        };
        concerns.then_some(match self {
            NsEvent::Changed(id, _) | NsEvent::Visibility(id, ..) => *id,
        })
    }
}

/// What step 1 made ready: namespaces open (by subsystem NQN) and listeners bound.
struct Prepared {
    namespaces: Vec<(String, Arc<Namespace>)>,
    listeners: Vec<Port>,
}

fn prepare(shared: &Arc<Shared>, plan: &Plan, new: &Config) -> Result<Prepared, ReloadError> {
    let mut ready = Prepared {
        namespaces: Vec::new(),
        listeners: Vec::new(),
    };
    let wanted = plan
        .added_subsystems
        .iter()
        .flat_map(|s| s.namespaces.iter().map(move |n| (s.nqn.as_str(), n)))
        .chain(plan.added_namespaces.iter().map(|(q, n)| (q.as_str(), n)));
    for (nqn, n) in wanted {
        match open_namespace(nqn, n, &shared.namespaces, new.target.state_dir.as_deref()) {
            Ok(ns) => {
                super::gateways::attach(shared, nqn, &ns);
                ready.namespaces.push((nqn.to_owned(), ns))
            }
            Err(e) => {
                undo(shared, ready);
                return Err(ReloadError::Apply(e.to_string()));
            }
        }
    }
    for (_, ns) in &ready.namespaces {
        let ns2 = Arc::clone(ns);
        if let Err(e) = broadcast(shared, OPEN_TIMEOUT, |ack| {
            WorkerMsg::OpenNamespace(Arc::clone(&ns2), ack)
        }) {
            undo(shared, ready);
            return Err(ReloadError::Apply(format!("namespace {}: {e}", ns2.nsid())));
        }
    }
    for l in &plan.added_listeners {
        let index = new
            .listeners
            .iter()
            .position(|x| x == l)
            .unwrap_or_default();
        match Port::start(shared, l, index) {
            Ok(running) => ready.listeners.push(running),
            Err(e) => {
                undo(shared, ready);
                return Err(ReloadError::Apply(e.to_string()));
            }
        }
    }
    Ok(ready)
}

/// Undoes a [`prepare`] that failed half way.
fn undo(shared: &Shared, ready: Prepared) {
    for l in ready.listeners {
        l.stop();
    }
    for (_, ns) in ready.namespaces {
        retire(shared, &ns);
    }
}

/// Closes every worker's queue to `ns` (after its I/O), flushes it, frees its slot.
fn retire(shared: &Shared, ns: &Arc<Namespace>) {
    let slot = ns.slot();
    if let Err(e) = broadcast(shared, CLOSE_TIMEOUT, |ack| {
        WorkerMsg::CloseNamespace(slot, ack)
    }) {
        tracing::error!(nsid = ns.nsid(), error = %e, "closing a removed namespace");
    }
    shared.namespaces.release(slot);
}

fn publish(shared: &Arc<Shared>, plan: &Plan, new: &Config, ready: Prepared) -> Changes {
    let mut changes = Vec::new();
    let running = shared.subsystems.load_full();
    let by_nqn: HashMap<&str, &Arc<Subsystem>> =
        running.iter().map(|s| (s.nqn.as_str(), s)).collect();
    let mut opened: HashMap<&str, Vec<Arc<Namespace>>> = HashMap::new();
    for (nqn, ns) in &ready.namespaces {
        opened.entry(nqn.as_str()).or_default().push(Arc::clone(ns));
    }
    // The new subsystem list, existing subsystems kept (controllers hold them).
    let mut list = Vec::new();
    let mut retired = Vec::new();
    let mut touched: Vec<(Arc<Subsystem>, Vec<NsEvent>)> = Vec::new();
    for s in &new.subsystems {
        let fresh = opened.remove(s.nqn.as_str()).unwrap_or_default();
        let Some(sub) = by_nqn.get(s.nqn.as_str()) else {
            changes.push(format!("subsystem {} added", s.nqn));
            list.push(Arc::new(Subsystem::new(s, fresh)));
            continue;
        };
        let gone: Vec<u32> = plan
            .removed_namespaces
            .iter()
            .filter(|(q, _)| q == &s.nqn)
            .map(|(_, id)| *id)
            .collect();
        let mut events = Vec::new();
        let mut nss: Vec<Arc<Namespace>> = sub
            .namespaces()
            .iter()
            .filter(|n| {
                let keep = !gone.contains(&n.nsid());
                if !keep {
                    events.push(NsEvent::Changed(n.nsid(), vec![n.visibility().get()]));
                    retired.push(Arc::clone(n));
                }
                keep
            })
            .cloned()
            .collect();
        // Kept namespaces whose host list changed: it changes in place.
        for (_, id, hosts) in plan.visibility_changed.iter().filter(|(q, ..)| q == &s.nqn) {
            let Some(n) = nss.iter().find(|n| n.nsid() == *id) else {
                continue;
            };
            let after = Visibility::of(hosts.as_deref());
            let before = n.visibility().set(after.clone());
            changes.push(format!(
                "subsystem {} namespace {id} visible to {}",
                s.nqn,
                match &after {
                    Visibility::All => "every host".to_owned(),
                    Visibility::Hosts(h) if h.is_empty() => "no host".to_owned(),
                    Visibility::Hosts(h) => h.join(", "),
                }
            ));
            events.push(NsEvent::Visibility(*id, before, Arc::new(after)));
        }
        // Kept namespaces whose QoS limits changed: in place, no event (hosts see no change).
        for (_, id, q, hq) in plan.qos_changed.iter().filter(|(x, ..)| x == &s.nqn) {
            if let Some(n) = nss.iter().find(|n| n.nsid() == *id) {
                n.qos().set(q);
                n.host_qos().set(hq);
                changes.push(format!(
                    "subsystem {} namespace {id} qos {q}, per host {hq}",
                    s.nqn
                ));
            }
        }
        // Kept namespaces whose file or device grew on disk: the new capacity, and an event.
        for n in nss.iter() {
            match n.refresh_capacity() {
                Ok(Some(blocks)) => {
                    events.push(NsEvent::Changed(n.nsid(), vec![n.visibility().get()]));
                    changes.push(format!(
                        "subsystem {} namespace {} grew to {blocks} blocks",
                        s.nqn,
                        n.nsid()
                    ));
                }
                Ok(None) => {}
                Err(why) => tracing::warn!(nsid = n.nsid(), "reload: {why}"),
            }
        }
        for n in &fresh {
            events.push(NsEvent::Changed(n.nsid(), vec![n.visibility().get()]));
            let what = if gone.contains(&n.nsid()) {
                "replaced"
            } else {
                "added"
            };
            changes.push(format!("subsystem {} namespace {} {what}", s.nqn, n.nsid()));
        }
        for id in &gone {
            if !fresh.iter().any(|n| n.nsid() == *id) {
                changes.push(format!("subsystem {} namespace {id} removed", s.nqn));
            }
        }
        let membership_changed = !gone.is_empty() || !fresh.is_empty();
        nss.extend(fresh);
        if membership_changed {
            sub.set_namespaces(nss);
        }
        if !events.is_empty() {
            touched.push((Arc::clone(sub), events));
        }
        if let Some((_, c)) = plan.hosts_changed.iter().find(|(q, _)| q == &s.nqn) {
            sub.set_hosts(HostList::of(c));
            changes.push(format!(
                "subsystem {} hosts (or their keys) reloaded",
                s.nqn
            ));
        }
        list.push(Arc::clone(sub));
    }
    for nqn in &plan.removed_subsystems {
        if let Some(sub) = by_nqn.get(nqn.as_str()) {
            retired.extend(sub.namespaces().iter().cloned());
            changes.push(format!("subsystem {nqn} removed"));
        }
    }
    shared.subsystems.store(Arc::new(list));

    // Controllers: those that lost their subsystem or their host's access go; the others of
    // a changed subsystem hear which namespaces changed.
    let removed: HashSet<&str> = plan.removed_subsystems.iter().map(|s| s.as_str()).collect();
    for c in shared.controllers.all() {
        if c.subsys.is_discovery() {
            continue;
        }
        if removed.contains(c.subsys.nqn.as_str()) || !c.subsys.allows(&c.hostnqn) {
            tracing::info!(cntlid = c.cntlid, subnqn = %c.subsys.nqn, hostnqn = %c.hostnqn,
                "controller torn down: its subsystem or its host's access was removed");
            changes.push(format!(
                "controller {} ({}) disconnected",
                c.cntlid, c.hostnqn
            ));
            c.kill();
            continue;
        }
        if let Some((_, events)) = touched.iter().find(|(s, _)| Arc::ptr_eq(s, &c.subsys)) {
            for id in events.iter().filter_map(|e| e.for_host(&c.hostnqn)) {
                c.namespace_changed(id);
            }
        }
    }

    // Listeners.
    {
        let mut ls = shared.lock_ports();
        let key = |l: &ListenerConfig| l.key();
        let gone: HashSet<_> = plan.removed_listeners.iter().map(key).collect();
        let mut kept = Vec::new();
        for l in ls.drain(..) {
            if gone.contains(&key(&l.cfg)) {
                changes.push(format!("listener {} removed", l.addr));
                let id = l.id;
                l.stop();
                send_all(shared, || WorkerMsg::CloseListener(id));
            } else {
                kept.push(l);
            }
        }
        // Kept listeners take their new ANA states; their controllers hear of a change.
        for l in kept.iter_mut() {
            let Some(cfg) = new.listeners.iter().find(|c| key(c) == key(&l.cfg)) else {
                continue;
            };
            let changed = l.ana.apply(cfg);
            l.cfg = cfg.clone();
            if changed.is_empty() {
                continue;
            }
            for (g, s) in &changed {
                changes.push(format!("listener {} ANA group {g} {s}", l.addr));
            }
            for c in shared.controllers.all() {
                if Arc::ptr_eq(&c.ana, &l.ana) {
                    c.ana_changed();
                }
            }
        }
        for l in ready.listeners {
            changes.push(format!("listener {} added", l.addr));
            kept.push(l);
        }
        // Configuration order (discovery port IDs follow it).
        kept.sort_by_key(|l| {
            new.listeners
                .iter()
                .position(|c| key(c) == key(&l.cfg))
                .unwrap_or(usize::MAX)
        });
        *ls = kept;
    }

    if plan.discovery_changes() {
        shared.discovery_genctr.fetch_add(1, Ordering::AcqRel);
        for c in shared.controllers.all() {
            if c.subsys.is_discovery() {
                c.discovery_changed();
            }
        }
        if plan.referrals_changed {
            changes.push("referrals changed".to_string());
        }
    }

    // Retire removed namespaces last: new I/O no longer finds them; what is in flight ends.
    for ns in retired {
        retire(shared, &ns);
    }
    for c in &changes {
        tracing::info!(change = %c, "reload");
    }
    changes
}

/// Sends a message made by `make` to every worker and waits for every answer.
fn broadcast(
    shared: &Shared,
    timeout: Duration,
    make: impl Fn(Ack) -> WorkerMsg,
) -> Result<(), String> {
    let workers = shared.workers.get().cloned().unwrap_or_default();
    let (tx, rx) = bounded(workers.len().max(1));
    let mut sent = 0;
    for w in &workers {
        if w.send(make(tx.clone())).is_ok() {
            sent += 1;
        }
    }
    for _ in 0..sent {
        match rx.recv_timeout(timeout) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(format!("a worker did not answer in {timeout:?}")),
        }
    }
    Ok(())
}

fn send_all(shared: &Shared, make: impl Fn() -> WorkerMsg) {
    for w in shared.workers.get().into_iter().flatten() {
        let _ = w.send(make());
    }
}
