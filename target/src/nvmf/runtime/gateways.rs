//! What a gateway does when another gateway of a shared namespace changed its reservations
//! (`crate::namespace::reservation::shared`): the notices go to this gateway's controllers of
//! the hosts concerned, and the hosts that lost their registration have their modifying
//! commands drained here (a fence every poll group clears, as for a local preempt and abort)
//! before the change is acknowledged.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::namespace::reservation::{HostId, Notices, RemoteHook};
use crate::namespace::Namespace;

use crate::nvmf::Shared;

#[derive(Debug)]
struct GatewayHook {
    shared: Weak<Shared>,
    nqn: String,
    nsid: u32,
    slot: usize,
}

impl RemoteHook for GatewayHook {
    fn changed(&self, lost: &[HostId], notices: &Notices) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if !notices.is_empty() {
            for c in shared.controllers.all() {
                if c.subsys.nqn != self.nqn {
                    continue;
                }
                for (_, kind) in notices.iter().filter(|(h, _)| *h == c.hostid) {
                    c.reservation_notice(*kind, self.nsid);
                }
            }
        }
        if lost.is_empty() {
            return;
        }
        let groups = shared.workers.get().map_or(1, Vec::len) * shared.transports.len();
        let fence = shared.fences.raise(self.slot, lost.to_vec(), groups, None);
        // Not acknowledged before these writes are done, however long that takes: the other
        // gateway's command fails after its wait (the change stands) rather than complete
        // while a fenced host's write still runs here.
        let since = std::time::Instant::now();
        let mut told = false;
        while !fence.is_done() && !shared.stopping() {
            if !told && since.elapsed() > crate::namespace::reservation::shared::ANNOUNCE_TIMEOUT {
                tracing::error!(subsystem = %self.nqn, nsid = self.nsid,
                    "writes of hosts another gateway unregistered are still running here; \
                     not acknowledging the change until they end");
                told = true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Lets namespace `ns` of subsystem `nqn`, if its reservations are shared, follow the other
/// gateways' changes with this target's controllers and workers.
pub(crate) fn attach(shared: &Arc<Shared>, nqn: &str, ns: &Arc<Namespace>) {
    if !ns.reservations().is_shared() {
        return;
    }
    ns.reservations().set_hook(Arc::new(GatewayHook {
        shared: Arc::downgrade(shared),
        nqn: nqn.to_owned(),
        nsid: ns.nsid(),
        slot: ns.slot(),
    }));
}
