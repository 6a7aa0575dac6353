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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::namespace::reservation::HostId;

use super::request::{Action, ReqState, Request};

/// One preempt-and-abort waiting for the preempted hosts' commands.
#[derive(Debug)]
pub struct Fence {
    /// The namespace's slot.
    ns: usize,
    hosts: Vec<HostId>,
    /// Poll groups (every worker's, every transport's) that must find themselves clear.
    groups: usize,
    clear: Mutex<HashSet<usize>>,
    done: AtomicBool,
}

impl Fence {
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
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
    /// poll groups.
    pub fn raise(&self, ns: usize, hosts: Vec<HostId>, groups: usize) -> Arc<Fence> {
        let f = Arc::new(Fence {
            ns,
            hosts,
            groups: groups.max(1),
            clear: Mutex::new(HashSet::new()),
            done: AtomicBool::new(false),
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
