//! Preempt and abort: a reservation taken from other hosts completes only once none of their
//! modifying commands that got past the access check before the preempt is still running.
//!
//! The preempt itself makes every later write of the preempted hosts a Reservation Conflict
//! (they are no longer registered), so what is left is the commands already past the check:
//! fetching their data or on the backend. A [`Fence`] names the namespace and the hosts; each
//! poll group of every worker looks at its own queues at its housekeeping tick and marks itself
//! clear once it holds none of those commands (none can come back); when every group is
//! clear, the Reservation Acquire that raised the fence completes. Nothing is counted per
//! command: the cost is paid by the preempt, not by I/O.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::namespace::reservation::{Announce, HostId};

use crate::nvmf::request::{Action, ReqState, Request};

/// One preempt-and-abort waiting for the preempted hosts' commands.
#[derive(Debug)]
pub struct Fence {
    /// The namespace's slot.
    ns: usize,
    hosts: Vec<HostId>,
    /// Poll groups (every worker's, every transport's) that must find themselves clear.
    groups: usize,
    clear: Mutex<HashSet<usize>>,
    /// Every poll group here is clear.
    done: AtomicBool,
    /// The other gateways of a shared namespace: [`REMOTE_WAITING`], [`REMOTE_DONE`] or
    /// [`REMOTE_FAILED`].
    remote: Arc<AtomicU8>,
}

const REMOTE_WAITING: u8 = 0;
const REMOTE_DONE: u8 = 1;
const REMOTE_FAILED: u8 = 2;

impl Fence {
    /// Done here, and acknowledged by the other gateways (if the namespace is shared).
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire) && self.remote.load(Ordering::Acquire) != REMOTE_WAITING
    }

    /// Another gateway did not acknowledge the change (the command fails).
    pub fn failed(&self) -> bool {
        self.remote.load(Ordering::Acquire) == REMOTE_FAILED
    }

    /// Whether this fence waits for request `r` of a controller of host `host`.
    pub fn holds(&self, host: &HostId, r: &Request) -> bool {
        matches!(r.state, ReqState::AwaitingData | ReqState::Executing)
            && self.hosts.contains(host)
            && modifies(r.action) == Some(self.ns)
    }

    /// Poll group `group` holds none of the fenced commands (and never will again).
    pub fn mark_clear(&self, group: usize) {
        let mut c = self.clear.lock().unwrap_or_else(|p| p.into_inner());
        if c.insert(group) && c.len() >= self.groups {
            self.done.store(true, Ordering::Release);
        }
    }

    pub fn is_clear(&self, group: usize) -> bool {
        self.clear
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&group)
    }
}

/// The namespace slot a command modifies, if it does.
fn modifies(a: Action) -> Option<usize> {
    match a {
        Action::ReadWrite {
            ns, write: true, ..
        }
        | Action::WriteZeroes { ns, .. }
        | Action::Deallocate { ns, .. }
        | Action::Flush { ns: Some(ns) } => Some(ns),
        _ => None,
    }
}

/// The fences not yet done; a relaxed load when there are none.
#[derive(Debug, Default)]
pub struct Fences {
    list: Mutex<Vec<Arc<Fence>>>,
    active: AtomicUsize,
}

impl Fences {
    /// Raises a fence for `hosts`' commands on namespace slot `ns`, to be cleared by `groups`
    /// poll groups, and, for a shared namespace, by the other gateways' acknowledgement
    /// (`announce`, waited for on a thread of its own).
    pub fn raise(
        &self,
        ns: usize,
        hosts: Vec<HostId>,
        groups: usize,
        announce: Option<Announce>,
    ) -> Arc<Fence> {
        let remote = Arc::new(AtomicU8::new(match announce {
            Some(_) => REMOTE_WAITING,
            None => REMOTE_DONE,
        }));
        if let Some(announce) = announce {
            let r = Arc::clone(&remote);
            let spawned = std::thread::Builder::new()
                .name("rdmablk-announce".into())
                .spawn(move || {
                    let v = match announce() {
                        Ok(()) => REMOTE_DONE,
                        Err(e) => {
                            tracing::error!(error = %e,
                                "reservation change not acknowledged by every gateway: the command fails (the change stands)");
                            REMOTE_FAILED
                        }
                    };
                    r.store(v, Ordering::Release);
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot wait for the other gateways");
                remote.store(REMOTE_FAILED, Ordering::Release);
            }
        }
        let f = Arc::new(Fence {
            ns,
            groups: groups.max(1),
            clear: Mutex::new(HashSet::new()),
            done: AtomicBool::new(hosts.is_empty()),
            hosts,
            remote,
        });
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.retain(|f| !f.is_done());
        l.push(Arc::clone(&f));
        self.active.store(l.len(), Ordering::Release);
        f
    }

    /// The fences still waiting (empty at once when none is).
    pub fn pending(&self) -> Vec<Arc<Fence>> {
        if self.active.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let mut l = self.list.lock().unwrap_or_else(|p| p.into_inner());
        l.retain(|f| !f.is_done());
        self.active.store(l.len(), Ordering::Release);
        l.clone()
    }
}
