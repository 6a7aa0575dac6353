//! Steps 2 and 3 of a reload, which cannot fail: the new subsystem and host lists are swapped
//! in, controllers that lost their subsystem or their host's access are torn down, the others
//! hear which namespaces changed (Namespace Attribute Changed, ANA, Discovery Log Change),
//! listeners are swapped, and removed namespaces are retired last.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::plan::Plan;
use super::prepare::Prepared;
use super::workers::{retire, send_all};
use super::Changes;
use crate::config::{Config, ListenerConfig};
use crate::namespace::visibility::Visibility;
use crate::namespace::Namespace;
use crate::nvmf::subsystems::subsystem::{HostList, Subsystem};
use crate::nvmf::worker::WorkerMsg;
use crate::nvmf::Shared;

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

/// Steps 2 and 3: swaps in the new subsystems, hosts and listeners, tells controllers what
/// changed and retires what was removed. What it changed, one line each.
pub(super) fn publish(shared: &Arc<Shared>, plan: &Plan, new: &Config, ready: Prepared) -> Changes {
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
