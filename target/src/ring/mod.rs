//! Per-worker I/O context: what a worker hands to backends when it opens its queues.

pub mod uring;
pub mod wake;

use std::cell::{Cell, RefCell, RefMut};
use std::rc::Rc;
use std::sync::Arc;

use crate::arena::Arena;
use crate::backend::BackendError;

pub use uring::{Ring, RingCompletion, RingFull, RouteId};
pub use wake::BackendWake;

/// A worker's I/O context. Lives on the worker's thread (not `Send`): its io_uring is created
/// on first use by a file or block backend, so a target serving only ram/null namespaces never
/// needs io_uring.
#[derive(Debug)]
pub struct WorkerIo {
    ring_entries: u32,
    arena: Option<Arc<Arena>>,
    ring: RefCell<Option<Rc<RefCell<Ring>>>>,
    /// The worker's backend wake-up, created on first use by a backend (the ring registers
    /// it; RBD queues signal it from librbd's threads). `None` until then.
    wake: RefCell<Option<Arc<BackendWake>>>,
    /// Whether the ring signals `wake` on every completion.
    ring_signals: Cell<bool>,
    /// Backend operations in flight outside the ring whose completion signals `wake`.
    signalled: Rc<Cell<u32>>,
}

impl WorkerIo {
    /// A context whose ring will have `ring_entries` submission entries (the sum of the queue
    /// depths the worker serves; clamped to 8..=4096) and `arena` registered as fixed buffers.
    pub fn new(ring_entries: u32, arena: Option<Arc<Arena>>) -> Self {
        WorkerIo {
            ring_entries,
            arena,
            ring: RefCell::new(None),
            wake: RefCell::new(None),
            ring_signals: Cell::new(false),
            signalled: Rc::new(Cell::new(0)),
        }
    }

    /// The arena the worker's rings register as fixed buffers, if there is one.
    pub fn arena(&self) -> Option<Arc<Arena>> {
        self.arena.clone()
    }

    /// The worker's wake-up eventfd, created on first call; `None` if the system refuses an
    /// eventfd (the worker then yields while backend I/O is in flight).
    pub fn wake(&self) -> Option<Arc<BackendWake>> {
        let mut slot = self.wake.borrow_mut();
        if slot.is_none() {
            match BackendWake::new() {
                Ok(w) => *slot = Some(Arc::new(w)),
                Err(e) => tracing::debug!(error = %e, "eventfd: worker yields instead"),
            }
        }
        slot.clone()
    }

    /// The wake-up eventfd if some backend uses it.
    pub fn wake_in_use(&self) -> Option<Arc<BackendWake>> {
        self.wake.borrow().clone()
    }

    /// The count of operations in flight outside the ring that signal [`WorkerIo::wake`]
    /// when they complete: a backend adds each such operation at submit and takes it away
    /// when `poll` returns its completion.
    pub fn signalled_in_flight(&self) -> Rc<Cell<u32>> {
        Rc::clone(&self.signalled)
    }

    /// The worker's ring, created on first call.
    pub fn ring(&self) -> Result<Rc<RefCell<Ring>>, BackendError> {
        let mut slot: RefMut<'_, _> = self.ring.borrow_mut();
        if let Some(r) = slot.as_ref() {
            return Ok(Rc::clone(r));
        }
        let ring = Ring::new(self.ring_entries, self.arena.clone())?;
        if let Some(w) = self.wake() {
            match ring.register_eventfd(w.raw_fd()) {
                Ok(()) => self.ring_signals.set(true),
                Err(e) => tracing::debug!(error = %e, "io_uring eventfd: worker yields instead"),
            }
        }
        let ring = Rc::new(RefCell::new(ring));
        *slot = Some(Rc::clone(&ring));
        Ok(ring)
    }

    /// Whether the ring exists (some file or block backend opened a queue).
    pub fn has_ring(&self) -> bool {
        self.ring.borrow().is_some()
    }

    /// Whether the completion of every backend request in flight, `in_flight` of them, will
    /// signal the wake-up eventfd: each sits in a ring that signals it with nothing left
    /// unsubmitted, or with a backend that signals it (RBD).
    pub fn all_signalled(&self, in_flight: usize) -> bool {
        let in_ring = match self.ring.borrow().as_ref() {
            None => 0,
            Some(r) => match r.try_borrow() {
                Ok(r) if r.unsubmitted() == 0 && self.ring_signals.get() => r.in_flight(),
                Ok(r) if r.in_flight() == 0 => 0,
                _ => return false,
            },
        };
        self.wake.borrow().is_some() && in_ring + self.signalled.get() as usize == in_flight
    }
}
