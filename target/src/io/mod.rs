//! Per-worker I/O context: what a worker hands to backends when it opens its queues.

pub mod uring;
pub mod wake;

use std::cell::{RefCell, RefMut};
use std::rc::Rc;
use std::sync::Arc;

use crate::arena::Arena;
use crate::backend::BackendError;

pub use uring::{Ring, RingCompletion, RingFull, RouteId};

/// A worker's I/O context. Lives on the worker's thread (not `Send`): its io_uring is created
/// on first use by a file or block backend, so a target serving only ram/null namespaces never
/// needs io_uring.
#[derive(Debug)]
pub struct WorkerIo {
    ring_entries: u32,
    arena: Option<Arc<Arena>>,
    ring: RefCell<Option<Rc<RefCell<Ring>>>>,
}

impl WorkerIo {
    /// A context whose ring will have `ring_entries` submission entries (the sum of the queue
    /// depths the worker serves; clamped to 8..=4096) and `arena` registered as fixed buffers.
    pub fn new(ring_entries: u32, arena: Option<Arc<Arena>>) -> Self {
        WorkerIo {
            ring_entries,
            arena,
            ring: RefCell::new(None),
        }
    }

    /// The worker's ring, created on first call.
    pub fn ring(&self) -> Result<Rc<RefCell<Ring>>, BackendError> {
        let mut slot: RefMut<'_, _> = self.ring.borrow_mut();
        if let Some(r) = slot.as_ref() {
            return Ok(Rc::clone(r));
        }
        let ring = Rc::new(RefCell::new(Ring::new(
            self.ring_entries,
            self.arena.clone(),
        )?));
        *slot = Some(Rc::clone(&ring));
        Ok(ring)
    }

    /// Whether the ring exists (some file or block backend opened a queue).
    pub fn has_ring(&self) -> bool {
        self.ring.borrow().is_some()
    }

    /// Whether every backend request in flight, `in_flight` of them, sits in the ring with
    /// nothing left unsubmitted: then a completion will signal the ring's eventfd.
    pub fn all_in_ring(&self, in_flight: usize) -> bool {
        self.ring.borrow().as_ref().is_some_and(|r| {
            r.try_borrow()
                .is_ok_and(|r| r.in_flight() == in_flight && r.unsubmitted() == 0)
        })
    }
}
