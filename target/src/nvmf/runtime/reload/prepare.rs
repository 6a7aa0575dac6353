//! Step 1 of a reload, what can fail: every new namespace opened and its queue opened on
//! every worker, every new listener bound. A failure undoes all of it, so a refused reload
//! leaves the running target untouched.

use std::sync::Arc;
use std::time::Duration;

use super::plan::Plan;
use super::workers::{broadcast, retire};
use super::ReloadError;
use crate::config::Config;
use crate::namespace::Namespace;
use crate::nvmf::runtime::port::Port;
use crate::nvmf::worker::WorkerMsg;
use crate::nvmf::{open_namespace, Shared};

/// How long workers get to open a namespace queue.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// What step 1 made ready: namespaces open (by subsystem NQN) and listeners bound.
pub(super) struct Prepared {
    pub(super) namespaces: Vec<(String, Arc<Namespace>)>,
    pub(super) listeners: Vec<Port>,
}

pub(super) fn prepare(
    shared: &Arc<Shared>,
    plan: &Plan,
    new: &Config,
) -> Result<Prepared, ReloadError> {
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
                crate::nvmf::runtime::gateways::attach(shared, nqn, &ns);
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
