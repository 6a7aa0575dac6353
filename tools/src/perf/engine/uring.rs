//! What the io_uring engines ([`super::local`], [`super::passthru`]) share: the ring, created
//! disabled and enabled by the job's thread, the table of requests the kernel holds (indexed
//! by the entry's user data), waiting for completions, and the teardown that reaps whatever
//! is still in flight before the buffers can be freed. The engines differ in the entries they
//! build and in what a completion's `res` means.

use std::io;
use std::sync::Arc;

use io_uring::{cqueue, squeue, IoUring};

use super::{BufRegion, Completion, EngineError, IoBuf, IoError, IoReq, Op, QueueFull};

/// A request the kernel holds.
#[derive(Debug)]
pub(super) struct InFlight {
    tag: u64,
    op: Op,
    offset: u64,
    pub(super) len: u32,
    /// Kept here so the memory outlives the kernel's use of it.
    buf: IoBuf,
}

/// One job's ring and the requests in it.
pub(super) struct UringCore<S: squeue::EntryMarker, C: cqueue::EntryMarker> {
    pub(super) ring: IoUring<S, C>,
    /// The region whose buffers are registered, if any.
    pub(super) fixed: Option<Arc<BufRegion>>,
    slots: Vec<Option<InFlight>>,
    free_slots: Vec<u32>,
    /// False until the disabled ring is enabled by its issuing thread ([`Self::enable`]).
    enabled: bool,
}

impl<S: squeue::EntryMarker, C: cqueue::EntryMarker> UringCore<S, C> {
    /// `depth` requests at most; `enabled`: the ring was not created disabled.
    pub(super) fn new(ring: IoUring<S, C>, depth: u32, enabled: bool) -> Self {
        Self {
            ring,
            fixed: None,
            slots: (0..depth).map(|_| None).collect(),
            free_slots: (0..depth).rev().collect(),
            enabled,
        }
    }

    /// Enables a ring created disabled: the calling thread becomes its only issuer. From
    /// then on every submit, wait and registration must come from that thread (the kernel
    /// answers EEXIST otherwise, and `Drop` would leak the buffers in flight): a job's engine
    /// is enabled, used and dropped on the job's thread (`Worker::run`).
    pub(super) fn enable(&mut self) -> io::Result<()> {
        if !self.enabled {
            self.ring.submitter().register_enable_rings()?;
            self.enabled = true;
        }
        Ok(())
    }

    pub(super) fn in_flight(&self) -> usize {
        self.slots.len() - self.free_slots.len()
    }

    /// Whether `buf` lies in the registered region.
    pub(super) fn is_fixed(&self, buf: &IoBuf) -> bool {
        self.fixed
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, buf.region()))
    }

    /// A free slot for `req`, whose number is the entry's user data; `None`: the queue is full.
    pub(super) fn reserve(&mut self) -> Option<u32> {
        self.free_slots.pop()
    }

    /// Queues `entry` (its user data the slot from [`Self::reserve`]) for `req`. On a full
    /// submission queue the slot is released and the request comes back.
    ///
    /// # Safety
    /// Everything `entry` names besides `req.buf` (files, fixed buffers) stays registered for
    /// the ring's life; `req.buf` is parked here until its completion is reaped.
    pub(super) unsafe fn push(
        &mut self,
        slot: u32,
        entry: &S,
        req: IoReq,
    ) -> Result<(), QueueFull> {
        // The SQ has `depth` entries and at most `depth` requests are queued or in flight, but
        // entries are only reclaimed by a submit, so make room if the SQ is still full.
        if self.ring.submission().is_full() {
            if let Err(e) = self.enable().and_then(|()| self.ring.submit()) {
                tracing::debug!("io_uring submit to make room: {e}");
            }
        }
        // SAFETY: the caller's contract; the buffer is parked in `slots[slot]` below and only
        // handed back when its completion is reaped.
        if unsafe { self.ring.submission().push(entry) }.is_err() {
            self.free_slots.push(slot);
            return Err(QueueFull(req));
        }
        tracing::trace!(tag = req.tag, offset = req.offset, "NEW -> EXECUTING");
        let IoReq {
            op,
            offset,
            len,
            buf,
            tag,
        } = req;
        self.slots[slot as usize] = Some(InFlight {
            tag,
            op,
            offset,
            len,
            buf,
        });
        Ok(())
    }

    /// Submits what is queued and waits until `min_complete` requests (capped at the number
    /// in flight) have finished (a polled ring is polled inside this call: the crate asks for
    /// events on one); then moves every finished request into `out`, its `res` judged by
    /// `result`.
    pub(super) fn poll(
        &mut self,
        out: &mut Vec<Completion>,
        min_complete: usize,
        result: impl Fn(i32, &InFlight) -> Result<(), IoError>,
    ) -> Result<usize, EngineError> {
        let want = min_complete.min(self.in_flight());
        self.enable()
            .map_err(|err| EngineError::Ring { op: "enable", err })?;
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // EBUSY: the CQ is full; reaping below makes room.
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => break,
                Err(e) => return Err(EngineError::Poll(e)),
            }
        }
        let before = out.len();
        // (`let else`, not `while let`: the completion queue's borrow ends at the `;`.)
        loop {
            let Some(cqe) = self.ring.completion().next() else {
                break;
            };
            out.push(self.complete(cqe.user_data(), cqe.into().result(), &result));
        }
        Ok(out.len() - before)
    }

    fn complete(
        &mut self,
        user_data: u64,
        res: i32,
        result: &impl Fn(i32, &InFlight) -> Result<(), IoError>,
    ) -> Completion {
        let slot = user_data as usize;
        let f = self.slots[slot].take().expect("completion for a free slot");
        self.free_slots.push(slot as u32);
        let result = result(res, &f);
        tracing::trace!(
            tag = f.tag,
            offset = f.offset,
            ?result,
            "EXECUTING -> COMPLETED"
        );
        Completion {
            tag: f.tag,
            op: f.op,
            offset: f.offset,
            len: f.len,
            buf: f.buf,
            result,
        }
    }
}

impl<S: squeue::EntryMarker, C: cqueue::EntryMarker> Drop for UringCore<S, C> {
    /// Reaps whatever is still in flight before the ring closes and the buffers can be freed:
    /// the kernel may still be filling them. If that fails, the buffers are leaked, loudly.
    fn drop(&mut self) {
        while self.in_flight() > 0 {
            if let Err(e) = self
                .enable()
                .and_then(|()| self.ring.submit_and_wait(self.in_flight()))
            {
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                eprintln!(
                    "rdmablk-perf: io_uring teardown: {e}: leaking {} in-flight buffers",
                    self.in_flight()
                );
                for slot in self.slots.iter_mut() {
                    std::mem::forget(slot.take());
                }
                std::mem::forget(self.fixed.take());
                return;
            }
            loop {
                let Some(cqe) = self.ring.completion().next() else {
                    break;
                };
                drop(self.complete(cqe.user_data(), 0, &|_, _| Ok(())));
            }
        }
    }
}
