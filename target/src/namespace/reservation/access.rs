//! The access check every I/O command passes: an immutable snapshot of who holds which type
//! and who is registered, published whole after each change, and with no reservation held
//! only a relaxed load.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rdmablk::nvme::reservation::ResvType;

use super::{Core, HostId, State};

/// What the access check reads: who holds which type, and who is registered.
#[derive(Debug)]
pub(super) struct Snapshot {
    rtype: ResvType,
    holder: HostId,
    registered: Vec<HostId>,
}

impl Core {
    /// Publishes `s` for the access check.
    pub(super) fn publish(&self, s: &State) {
        match s.holder {
            Some((holder, rtype)) => {
                self.snapshot.store(Some(Arc::new(Snapshot {
                    rtype,
                    holder,
                    registered: s.regs.iter().map(|r| r.host).collect(),
                })));
                self.held.store(true, Ordering::Release);
            }
            None => {
                self.held.store(false, Ordering::Release);
                self.snapshot.store(None);
            }
        }
    }

    /// Whether `host` may run an I/O command that writes (`write`) or reads. No reservation
    /// held: one relaxed load.
    #[inline]
    pub fn allows(&self, host: &HostId, write: bool) -> bool {
        if !self.held.load(Ordering::Relaxed) {
            return true;
        }
        self.allows_held(host, write)
    }

    #[cold]
    fn allows_held(&self, host: &HostId, write: bool) -> bool {
        let Some(s) = &*self.snapshot.load() else {
            return true;
        };
        if &s.holder == host {
            return true;
        }
        if !write && !s.rtype.excludes_reads() {
            return true;
        }
        s.rtype.registrants_write() && s.registered.contains(host)
    }
}
