//! One worker's io_uring: the engine under the file and block-device backends.
//!
//! Each worker owns one [`Ring`], sized for the sum of its queues' depths, shared by the
//! worker's backend queues (one per namespace). The arena is registered with the ring as
//! fixed buffers once, in chunks of at most 1 GiB (the kernel's per-buffer limit), so reads
//! and writes into parcel data slots use READ_FIXED / WRITE_FIXED and skip per-I/O page
//! pinning.
//!
//! Every in-flight operation has a slot (preallocated, indexed by the SQE's user data) that
//! records which queue it belongs to and the request; reaped completions are routed to their
//! queue's list (preallocated for its depth), where that queue's `poll` picks them up. Nothing
//! allocates per I/O.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

use io_uring::{squeue, IoUring};

use crate::arena::Arena;
use crate::backend::{BackendError, IoRequest};

/// The largest buffer io_uring registers as one fixed buffer.
const FIXED_CHUNK: usize = 1 << 30;

/// A completion routed to a queue: the request, the queue's note about how it was issued, and
/// the raw result (bytes transferred, or a negated errno).
#[derive(Clone, Copy, Debug)]
pub struct RingCompletion {
    pub req: IoRequest,
    pub aux: u32,
    pub res: i32,
}

/// The `(address, length)` fixed buffers that register `[base, base + len)` with io_uring, of
/// `chunk` bytes each (the last one shorter); `chunk` at most 1 GiB, the kernel's limit.
pub fn fixed_chunks(base: usize, len: usize, chunk: usize) -> Vec<(usize, usize)> {
    let chunk = chunk.clamp(1, FIXED_CHUNK);
    (0..len)
        .step_by(chunk)
        .map(|off| (base + off, chunk.min(len - off)))
        .collect()
}

/// Identifies a queue's completion list inside a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteId(u32);

#[derive(Clone, Copy)]
struct Slot {
    route: RouteId,
    req: IoRequest,
    aux: u32,
}

/// The ring has no free slot: poll completions, then retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingFull;

/// A worker's io_uring with completion routing.
pub struct Ring {
    // Dropped first (field order): the kernel's references to the fixed buffers go before the
    // arena they point into can be unmapped.
    uring: IoUring,
    fixed: Vec<(usize, usize)>,
    _arena: Option<Arc<Arena>>,
    slots: Vec<Option<Slot>>,
    free_slots: Vec<u32>,
    routes: Vec<VecDeque<RingCompletion>>,
    unsubmitted: u32,
    /// `IORING_SETUP_IOPOLL`: completions are found by polling in [`Ring::submit`].
    polled: bool,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("slots", &self.slots.len())
            .field("in_flight", &self.in_flight())
            .field("fixed_buffers", &self.fixed.len())
            .finish()
    }
}

impl Ring {
    /// A ring with `entries` submission entries (rounded up to a power of two by the kernel)
    /// and room for `2 * entries` operations in flight. Registers `arena` as fixed buffers;
    /// if that fails (RLIMIT_MEMLOCK on old kernels), logs a warning and uses plain reads and
    /// writes.
    pub fn new(entries: u32, arena: Option<Arc<Arena>>) -> Result<Ring, BackendError> {
        Self::build(entries, arena, false)
    }

    /// A polled ring (`IORING_SETUP_IOPOLL`) for O_DIRECT reads and writes of a block device
    /// whose driver has poll queues: the kernel posts no completion by interrupt; each
    /// [`Ring::submit`] with operations in flight polls the device's queues for them. Such a
    /// ring takes nothing else (fsync and fallocate stay on the worker's ring).
    pub fn new_polled(entries: u32, arena: Option<Arc<Arena>>) -> Result<Ring, BackendError> {
        Self::build(entries, arena, true)
    }

    fn build(entries: u32, arena: Option<Arc<Arena>>, polled: bool) -> Result<Ring, BackendError> {
        let entries = entries.clamp(8, 4096);
        // Cooperative task work: a completion does not interrupt the worker (no IPI); it is
        // run at the worker's next system call, and `reap` makes one when the kernel flags
        // pending work. Kernels before 5.19 (EINVAL) get a plain ring.
        let uring = if polled {
            IoUring::builder().setup_iopoll().build(entries)
        } else {
            match IoUring::builder()
                .setup_coop_taskrun()
                .setup_taskrun_flag()
                .build(entries)
            {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::new(entries),
                r => r,
            }
        };
        let uring = uring.map_err(|source| match source.raw_os_error() {
            Some(libc::EPERM | libc::ENOSYS | libc::EACCES) => {
                BackendError::UringUnavailable { source }
            }
            _ => BackendError::Uring {
                op: "setup",
                source,
            },
        })?;
        let capacity = uring.params().cq_entries() as usize;
        let mut ring = Ring {
            uring,
            fixed: Vec::new(),
            _arena: None,
            slots: vec![None; capacity],
            free_slots: (0..capacity as u32).rev().collect(),
            routes: Vec::new(),
            unsubmitted: 0,
            polled,
        };
        if let Some(arena) = arena {
            ring.register_arena(arena);
        }
        Ok(ring)
    }

    fn register_arena(&mut self, arena: Arc<Arena>) {
        let (base, len) = arena.fixed_region();
        let chunks = fixed_chunks(base as usize, len, FIXED_CHUNK);
        let iovecs: Vec<libc::iovec> = chunks
            .iter()
            .map(|&(b, l)| libc::iovec {
                iov_base: b as *mut libc::c_void,
                iov_len: l,
            })
            .collect();
        // SAFETY: the iovecs cover the arena's live mapping; the ring keeps an Arc of the
        // arena and drops its io_uring (which unregisters the buffers) before that Arc.
        match unsafe { self.uring.submitter().register_buffers(&iovecs) } {
            Ok(()) => {
                self.fixed = chunks;
                self._arena = Some(arena);
            }
            Err(e) => tracing::warn!(
                error = %e,
                "cannot register the arena with io_uring as fixed buffers; block I/O will pin \
                 pages per request (raise RLIMIT_MEMLOCK to avoid this)"
            ),
        }
    }

    /// Makes `eventfd` readable whenever an operation completes, so an interrupt-mode worker
    /// can sleep in epoll on its RDMA completion channels and this fd together.
    pub fn register_eventfd(&self, eventfd: std::os::fd::RawFd) -> io::Result<()> {
        self.uring.submitter().register_eventfd(eventfd)
    }

    /// A new completion list for a queue of `depth` requests.
    pub fn add_route(&mut self, depth: u32) -> RouteId {
        self.routes.push(VecDeque::with_capacity(depth as usize));
        RouteId(self.routes.len() as u32 - 1)
    }

    /// The fixed-buffer index covering `[ptr, ptr + len)`, if the arena was registered and the
    /// range lies inside one chunk.
    pub fn fixed_index(&self, ptr: *const u8, len: usize) -> Option<u16> {
        let p = ptr as usize;
        self.fixed
            .iter()
            .position(|&(b, l)| p >= b && p + len <= b + l)
            .map(|i| i as u16)
    }

    /// Entries queued but not yet handed to the kernel.
    pub fn unsubmitted(&self) -> u32 {
        self.unsubmitted
    }

    /// Operations submitted and not yet reaped.
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    /// Queues `entry` for `req` of queue `route`; it reaches the kernel at the next
    /// [`Ring::submit`]. `aux` comes back in the completion.
    ///
    /// # Safety
    /// Every buffer and file descriptor `entry` names stays valid until its completion has
    /// been reaped (the buffers by the [`crate::backend::IoBuf`] contract; the file by the
    /// queue holding it).
    pub unsafe fn push(
        &mut self,
        route: RouteId,
        req: IoRequest,
        aux: u32,
        entry: squeue::Entry,
    ) -> Result<(), RingFull> {
        let Some(slot) = self.free_slots.pop() else {
            return Err(RingFull);
        };
        let entry = entry.user_data(u64::from(slot));
        // SAFETY: the caller guarantees the entry's resources outlive the operation.
        let mut pushed = unsafe { self.uring.submission().push(&entry) }.is_ok();
        if !pushed {
            // Submission queue full: hand what is there to the kernel and retry once.
            if let Err(e) = self.submit() {
                tracing::error!(error = %e, "io_uring submit failed with a full submission queue");
            }
            // SAFETY: as above.
            pushed = unsafe { self.uring.submission().push(&entry) }.is_ok();
        }
        if !pushed {
            self.free_slots.push(slot);
            return Err(RingFull);
        }
        self.slots[slot as usize] = Some(Slot { route, req, aux });
        self.unsubmitted += 1;
        Ok(())
    }

    /// Hands queued entries to the kernel (and, polled, polls once for completions). Never
    /// waits for completions.
    pub fn submit(&mut self) -> io::Result<()> {
        if self.unsubmitted == 0 && !(self.polled && self.in_flight() > 0) {
            return Ok(());
        }
        match self.uring.submit() {
            Ok(n) => {
                self.unsubmitted = self.unsubmitted.saturating_sub(n as u32);
                Ok(())
            }
            // The completion queue is backed up: reap, and the next poll submits again.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Moves finished operations to their queues' lists.
    pub fn reap(&mut self) {
        if self.uring.submission().taskrun() {
            // Completions wait as task work: one enter runs it (and submits what is queued).
            match self.uring.submit_and_wait(0) {
                Ok(n) => self.unsubmitted = self.unsubmitted.saturating_sub(n as u32),
                Err(e) => tracing::debug!(error = %e, "io_uring enter to run task work"),
            }
        }
        let mut cq = self.uring.completion();
        cq.sync();
        for cqe in &mut cq {
            let idx = cqe.user_data() as usize;
            let Some(slot) = self.slots.get_mut(idx).and_then(Option::take) else {
                debug_assert!(false, "completion for an unused slot {idx}");
                continue;
            };
            self.free_slots.push(idx as u32);
            let list = &mut self.routes[slot.route.0 as usize];
            debug_assert!(list.len() < list.capacity(), "route over its depth");
            list.push_back(RingCompletion {
                req: slot.req,
                aux: slot.aux,
                res: cqe.result(),
            });
        }
    }

    /// The next routed completion of `route`.
    pub fn take(&mut self, route: RouteId) -> Option<RingCompletion> {
        self.routes[route.0 as usize].pop_front()
    }

    /// Submits and waits until every operation in flight has completed (teardown).
    fn drain(&mut self) {
        while self.in_flight() > 0 {
            let pending = self.in_flight();
            if let Err(e) = self.uring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    tracing::error!(error = %e, pending, "io_uring drain failed at teardown");
                    return;
                }
            }
            self.unsubmitted = 0;
            self.reap();
            for r in &mut self.routes {
                r.clear();
            }
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Operations still in flight name buffers the caller may free right after; wait for
        // them rather than leave the kernel writing into memory that is gone.
        self.drain();
    }
}

#[cfg(test)]
mod tests {
    use super::{fixed_chunks, FIXED_CHUNK};

    #[test]
    fn chunks_cover_the_region_exactly() {
        let c = fixed_chunks(0x1000, 10 * 4096 + 512, 4 * 4096);
        assert_eq!(
            c,
            vec![
                (0x1000, 4 * 4096),
                (0x1000 + 4 * 4096, 4 * 4096),
                (0x1000 + 8 * 4096, 2 * 4096 + 512)
            ]
        );
        // Never above the kernel's 1 GiB per buffer.
        let c = fixed_chunks(0, 3 << 30, usize::MAX);
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|&(_, l)| l == FIXED_CHUNK));
    }
}
