//! The batched asynchronous API: one I/O queue, driven by one thread at a time with
//! submit / poll / wait and the caller's tags. Nothing is allocated per I/O: a request
//! carries a registered buffer handle, and the completion table is sized at open.

use std::cell::RefCell;
use std::ffi::c_int;

use rdmablk::fabric::SendBatch;

use rdmablk_initiator::{Completion, IoQueue, Op, SubmitError};

use crate::buf::rdmablk_buf;
use crate::ctrl::rdmablk_ctrl;
use crate::error::{errno_of, fail, guard, guard_value, invalid, set_last, status_bits};

/// Read from the namespace into the buffer.
pub const RDMABLK_OP_READ: u32 = 0;
/// Write the buffer to the namespace.
pub const RDMABLK_OP_WRITE: u32 = 1;
/// Flush (offset and length are ignored; the buffer still travels with the request).
pub const RDMABLK_OP_FLUSH: u32 = 2;

/// An I/O queue for the asynchronous API (opaque). Not thread-safe: one thread at a time
/// (it may move between threads between calls).
pub struct rdmablk_queue {
    q: IoQueue,
    /// Finished requests not yet handed to the caller (poll/wait deliver these first).
    staged: Vec<Completion>,
}

/// A finished request.
#[repr(C)]
pub struct rdmablk_completion {
    /// The tag given to `rdmablk_queue_submit`.
    pub tag: u64,
    /// The request's buffer, free for reuse again (for a read: holding the data).
    pub buf: *mut rdmablk_buf,
    pub offset: u64,
    pub len: u32,
    /// `RDMABLK_OP_READ`, `_WRITE` or `_FLUSH`.
    pub op: u32,
    /// 0, or a negative errno (-EIO for a media error or a transport failure, whose write
    /// may or may not have reached the media).
    pub result: i32,
    /// The NVMe status when the controller returned an error status, in the form of
    /// `rdmablk_nvme_status`; 0 otherwise.
    pub nvme_status: u16,
}

/// Takes an I/O queue of the controller for namespace `nsid` until
/// [`rdmablk_queue_free`] (waiting while every queue is borrowed).
///
/// # Safety
/// `ctrl` comes from `rdmablk_connect`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_queue_open(
    ctrl: *const rdmablk_ctrl,
    nsid: u32,
    out: *mut *mut rdmablk_queue,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live controller handle (caller's promise).
        let Some(c) = (unsafe { ctrl.as_ref() }) else {
            return invalid("rdmablk_queue_open: ctrl is NULL");
        };
        if out.is_null() {
            return invalid("rdmablk_queue_open: out is NULL");
        }
        match c.ctrl.io_queue(nsid) {
            Ok(q) => {
                let staged = Vec::with_capacity(q.depth());
                // SAFETY: checked non-null; the caller promises it is writable.
                unsafe { *out = Box::into_raw(Box::new(rdmablk_queue { q, staged })) };
                0
            }
            Err(e) => fail(&e),
        }
    })
}

/// Requests the queue holds in flight at most (0 for NULL).
///
/// # Safety
/// `q` is NULL or a live queue.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_queue_depth(q: *const rdmablk_queue) -> u32 {
    guard_value(0, || {
        // SAFETY: NULL or a live queue (caller's promise).
        unsafe { q.as_ref() }.map_or(0, |q| q.q.depth() as u32)
    })
}

/// Requests submitted and not yet returned by poll/wait (0 for NULL).
///
/// # Safety
/// `q` is NULL or a live queue.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_queue_in_flight(q: *const rdmablk_queue) -> u32 {
    guard_value(0, || {
        // SAFETY: NULL or a live queue (caller's promise).
        unsafe { q.as_ref() }.map_or(0, |q| (q.q.in_flight() + q.staged.len()) as u32)
    })
}

thread_local! {
    /// The send batches this thread opened with `rdmablk_batch_begin`, innermost last.
    static BATCHES: RefCell<Vec<SendBatch>> = const { RefCell::new(Vec::new()) };
}

/// Opens a send batch on the calling thread: the requests it submits (on any queue) until the
/// batch ends are transmitted together at `rdmablk_batch_end` (on the soft provider one write
/// per queue instead of one per request; the verbs provider posts each at once either way).
/// Batches nest; the outermost end transmits. A wait (`rdmablk_queue_wait`) inside a batch
/// first transmits what the batch holds. Returns 0.
#[no_mangle]
pub extern "C" fn rdmablk_batch_begin() -> c_int {
    guard(|| {
        BATCHES.with(|b| b.borrow_mut().push(SendBatch::begin()));
        0
    })
}

/// Ends the innermost send batch the calling thread opened (the outermost one transmits what
/// was submitted in it). Returns 0; -EINVAL when the thread has no batch open.
#[no_mangle]
pub extern "C" fn rdmablk_batch_end() -> c_int {
    guard(|| match BATCHES.with(|b| b.borrow_mut().pop()) {
        // Dropped outside the borrow: its end may run provider code.
        Some(batch) => {
            drop(batch);
            0
        }
        None => invalid("rdmablk_batch_end: this thread has no batch open"),
    })
}

/// Queues `op` of `len` bytes at byte `offset` from/into `buf[0..len)`, identified by `tag`,
/// and posts it at once (inside a send batch: transmitted when the batch ends). Returns 0; -EAGAIN when the queue is full (poll, then retry; no
/// message is recorded for this one); -EBUSY when `buf` is already in flight; -EINVAL for a
/// bad request (alignment, range, `len` over `max_transfer_bytes`, over the buffer).
///
/// # Safety
/// `q` is a live queue and `buf` a live buffer, both used by this thread only. The buffer's
/// memory is not touched until its completion comes back.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_queue_submit(
    q: *mut rdmablk_queue,
    op: u32,
    offset: u64,
    len: u32,
    buf: *mut rdmablk_buf,
    tag: u64,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or live handles used by this thread only (caller's promise).
        let (Some(q), Some(b)) = (unsafe { q.as_mut() }, unsafe { buf.as_mut() }) else {
            return invalid("rdmablk_queue_submit: q and buf must not be NULL");
        };
        let op = match op {
            RDMABLK_OP_READ => Op::Read,
            RDMABLK_OP_WRITE => Op::Write,
            RDMABLK_OP_FLUSH => Op::Flush,
            _ => return invalid("rdmablk_queue_submit: op is not an RDMABLK_OP_* constant"),
        };
        let Some(io) = b.io.take() else {
            set_last("rdmablk_queue_submit: the buffer is already in flight", 0);
            return -libc::EBUSY;
        };
        b.tag = tag;
        // The handle's address is the request's identity: a buffer is in flight once at most.
        match q.q.submit(op, offset, len, io, buf as u64) {
            Ok(()) => 0,
            Err(SubmitError::QueueFull(io)) => {
                b.io = Some(io);
                -libc::EAGAIN
            }
            Err(SubmitError::Failed(e, io)) => {
                b.io = Some(io);
                fail(&e)
            }
        }
    })
}

impl rdmablk_queue {
    /// Moves up to `out.len()` staged completions into `out`, giving each buffer back to its
    /// handle; returns how many.
    fn deliver(&mut self, out: &mut [rdmablk_completion]) -> usize {
        let n = self.staged.len().min(out.len());
        for (slot, c) in out.iter_mut().zip(self.staged.drain(..n)) {
            let handle = c.tag as *mut rdmablk_buf;
            // SAFETY: the tag is the address of the live handle submitted with this request
            // (rdmablk_buf_free refuses to free a handle whose buffer is in flight).
            let b = unsafe { &mut *handle };
            let (result, nvme_status) = match &c.result {
                Ok(()) => (0, 0),
                Err(e) => {
                    let _ = fail(e);
                    (-errno_of(e), e.status().as_ref().map_or(0, status_bits))
                }
            };
            *slot = rdmablk_completion {
                tag: b.tag,
                buf: handle,
                offset: c.offset,
                len: c.len,
                op: match c.op {
                    Op::Read => RDMABLK_OP_READ,
                    Op::Write | Op::WriteFua => RDMABLK_OP_WRITE,
                    Op::Flush => RDMABLK_OP_FLUSH,
                },
                result,
                nvme_status,
            };
            b.io = Some(c.buf);
        }
        n
    }

    /// Delivers staged completions, then, if `out` has room and nothing was staged, waits
    /// for at least `min` more (0: does not block).
    fn collect(&mut self, out: &mut [rdmablk_completion], min: usize) -> c_int {
        let mut got = self.deliver(out);
        while got < out.len() {
            let want = min.saturating_sub(got);
            let r = if want == 0 {
                self.q.poll(&mut self.staged)
            } else {
                self.q.wait(&mut self.staged, want)
            };
            if let Err(e) = r {
                return if got > 0 { got as c_int } else { fail(&e) };
            }
            if self.staged.is_empty() {
                break;
            }
            got += self.deliver(&mut out[got..]);
            if got >= min {
                break;
            }
        }
        got as c_int
    }
}

/// Fills `out[0..max)` with finished requests without blocking; returns how many (or a
/// negative errno). A failed request's message is also recorded for `rdmablk_errmsg`.
///
/// # Safety
/// `q` is a live queue used by this thread only; `out` has room for `max` completions.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_queue_poll(
    q: *mut rdmablk_queue,
    out: *mut rdmablk_completion,
    max: u32,
) -> c_int {
    // SAFETY: forwarded under the same contract.
    unsafe { rdmablk_queue_wait(q, out, max, 0) }
}

/// Like [`rdmablk_queue_poll`], but first waits until at least `min` requests (capped at
/// those in flight) have finished, or the I/O timeout passes.
///
/// # Safety
/// As [`rdmablk_queue_poll`].
#[no_mangle]
pub unsafe extern "C" fn rdmablk_queue_wait(
    q: *mut rdmablk_queue,
    out: *mut rdmablk_completion,
    max: u32,
    min: u32,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live queue used by this thread only (caller's promise).
        let Some(q) = (unsafe { q.as_mut() }) else {
            return invalid("rdmablk_queue_wait: q is NULL");
        };
        if out.is_null() || max == 0 {
            return invalid("rdmablk_queue_wait: out is NULL or max is 0");
        }
        // SAFETY: the caller promises room for `max` completions; `rdmablk_completion` is
        // plain data, and `deliver` writes each slot before it is read.
        let out = unsafe { std::slice::from_raw_parts_mut(out, max as usize) };
        q.collect(out, min.min(max) as usize)
    })
}

/// Closes the queue (NULL is fine): waits for requests in flight, gives every buffer back to
/// its handle (their completions are dropped), and returns the queue to the controller.
///
/// # Safety
/// `q` is NULL or a live queue, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_queue_free(q: *mut rdmablk_queue) {
    if q.is_null() {
        return;
    }
    guard_value((), || {
        // SAFETY: made by Box::into_raw in rdmablk_queue_open, freed once (caller's promise).
        let mut q = unsafe { Box::from_raw(q) };
        loop {
            let pending = q.q.in_flight();
            if pending > 0 && q.q.wait(&mut q.staged, pending).is_err() {
                break;
            }
            for c in q.staged.drain(..) {
                // SAFETY: as in `deliver`: the tag is the live handle of this request.
                unsafe { (*(c.tag as *mut rdmablk_buf)).io = Some(c.buf) };
            }
            if pending == 0 || q.q.in_flight() == pending {
                break;
            }
        }
    })
}
