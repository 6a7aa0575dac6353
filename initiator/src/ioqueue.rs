//! The batched asynchronous API: one I/O queue, owned by one thread, driven by
//! `submit` / `poll` / `wait` with the caller's tags.
//!
//! ```no_run
//! # use rdmablk_initiator::{Controller, Op};
//! let ctrl = Controller::connect("soft://127.0.0.1:4420/nqn.2024-01.io.rdmablk:ram0")?;
//! let mut q = ctrl.io_queue(1)?;
//! let mut done = Vec::with_capacity(q.depth());
//! for tag in 0..32u64 {
//!     let buf = ctrl.alloc(4096)?;
//!     q.submit(Op::Read, tag * 4096, 4096, buf, tag).map_err(|e| e.into_error())?;
//! }
//! while q.in_flight() > 0 {
//!     q.wait(&mut done, 1)?;
//! }
//! for c in done.drain(..) {
//!     c.result?; // c.buf holds the data, c.tag says which
//! }
//! # Ok::<(), rdmablk_initiator::Error>(())
//! ```
//!
//! Each request carries an [`IoBuf`] by value and gets it back in its [`Completion`]
//! (zero copy: the target reaches the buffer directly). A request carries at most
//! [`IoQueue::max_transfer_bytes`]; a full queue is the value [`SubmitError::QueueFull`].
//!
//! Failure: when the queue's connection fails, every request in flight completes with a
//! transport error (not retried here: the caller knows which are safe to re-send) and the
//! next `submit`/`poll` reconnects the controller (with its backoff) and continues on a queue
//! of the new session. Writes that completed with an error may or may not be on the media.
//!
//! A queue of a [`crate::MultipathController`] namespace has the same API but keeps a queue
//! on each path it uses and re-issues a request whose path fails on another path: see
//! `crate::multipath`.

use rdmablk::nvme::io::flush_sqe;
use rdmablk::nvme::opcodes::io as opc;
use rdmablk::nvme::ReadWrite;

use rdmablk::nvme::{Cqe, Sqe};

use crate::buf::IoBuf;
use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::multipath::PathsQueue;
use crate::namespace::{Namespace, Via};
use crate::queue::{Dir, Done, Queue, Seg, SubmitError as QSubmitError};

/// Direction of an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Namespace to buffer.
    Read,
    /// Buffer to namespace.
    Write,
    /// Buffer to namespace with Force Unit Access: it completes only once the data is on
    /// non-volatile media (no Flush needed for it).
    WriteFua,
    /// Flush (offset, length and buffer contents are ignored; the buffer comes back).
    Flush,
}

/// A finished request.
#[derive(Debug)]
pub struct Completion {
    pub tag: u64,
    pub op: Op,
    pub offset: u64,
    pub len: u32,
    /// The request's buffer, back to the caller (for a read: holding the data).
    pub buf: IoBuf,
    pub result: Result<()>,
}

/// Why `submit` did not queue a request; the buffer comes back either way.
#[derive(Debug)]
pub enum SubmitError {
    /// The queue has `depth()` requests in flight: poll, then submit again.
    QueueFull(IoBuf),
    /// The request is invalid, or the controller is gone.
    Failed(Error, IoBuf),
}

impl SubmitError {
    /// The error, dropping the buffer (QueueFull becomes a usage error).
    pub fn into_error(self) -> Error {
        match self {
            SubmitError::QueueFull(_) => Error::Option {
                name: "queue depth",
                reason: "queue full".into(),
            },
            SubmitError::Failed(e, _) => e,
        }
    }

    pub fn into_buf(self) -> IoBuf {
        match self {
            SubmitError::QueueFull(b) | SubmitError::Failed(_, b) => b,
        }
    }
}

#[derive(Clone, Copy)]
struct Meta {
    tag: u64,
    op: Op,
    offset: u64,
    len: u32,
}

/// One I/O queue for the async API. `Send`, not `Sync`: one thread drives it.
pub struct IoQueue {
    ns: Namespace,
    inner: Inner,
}

enum Inner {
    // Boxed: both are large and of different sizes; made once per `IoQueue`.
    Path(Box<OnePath>),
    Paths(Box<PathsQueue>),
}

/// The queue of a single-path namespace.
///
/// A request its connection's loss failed (a transport error, not an NVMe status) is not
/// reported: it is parked with its buffer and slot, and sent again once the controller has
/// reconnected, as the Linux host requeues I/O until `ctrl_loss_tmo`. Only when recovery
/// gives up (the controller failed for good) do parked requests complete, with that error.
/// A request the target may have executed before the cut is sent again all the same: a
/// block write of the same data to the same place is idempotent.
struct OnePath {
    ctrl: Controller,
    q: Option<(Queue, u64)>,
    meta: Vec<Option<Meta>>,
    free: Vec<u32>,
    done: Vec<Done>,
    /// Requests to send again (slot, buffer), once there is a live queue.
    parked: Vec<(u32, IoBuf)>,
}

impl IoQueue {
    pub(crate) fn new(ns: Namespace) -> Result<IoQueue> {
        let inner = match ns.via() {
            Via::Path(ctrl) => {
                let (q, generation) = ctrl.shared().checkout()?;
                let depth = usize::from(q.entries());
                Inner::Path(Box::new(OnePath {
                    ctrl: ctrl.clone(),
                    q: Some((q, generation)),
                    meta: vec![None; depth],
                    free: (0..depth as u32).rev().collect(),
                    done: Vec::with_capacity(depth),
                    parked: Vec::with_capacity(depth),
                }))
            }
            Via::Paths(paths) => {
                Inner::Paths(Box::new(PathsQueue::new(paths.clone(), ns.clone())?))
            }
        };
        Ok(IoQueue { ns, inner })
    }

    /// Requests in flight at most.
    pub fn depth(&self) -> usize {
        match &self.inner {
            Inner::Path(p) => p.meta.len(),
            Inner::Paths(p) => p.depth(),
        }
    }

    pub fn in_flight(&self) -> usize {
        match &self.inner {
            Inner::Path(p) => p.meta.len() - p.free.len(),
            Inner::Paths(p) => p.in_flight(),
        }
    }

    pub fn block_size(&self) -> u32 {
        self.ns.block_size()
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.ns.capacity_bytes()
    }

    pub fn max_transfer_bytes(&self) -> u32 {
        self.ns.max_transfer_bytes()
    }

    /// The namespace this queue does I/O to.
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// Queues `op` of `len` bytes at `offset` from/into `buf[..len]`, identified by `tag`.
    /// The command is posted at once (multipath: or as soon as a path is usable).
    pub fn submit(
        &mut self,
        op: Op,
        offset: u64,
        len: u32,
        buf: IoBuf,
        tag: u64,
    ) -> Result<(), SubmitError> {
        if op != Op::Flush {
            if let Err(e) = check(&self.ns, offset, len, &buf) {
                return Err(SubmitError::Failed(e, buf));
            }
        }
        match &mut self.inner {
            Inner::Path(p) => p.submit(&self.ns, op, offset, len, buf, tag),
            Inner::Paths(p) => p.submit(op, offset, len, buf, tag),
        }
    }

    /// Moves finished requests into `out` without blocking; returns how many.
    pub fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        match &mut self.inner {
            Inner::Path(p) => p.poll(&self.ns, out),
            Inner::Paths(p) => Ok(p.poll(out)),
        }
    }

    /// Waits until at least `min` requests (capped at those in flight) have finished and
    /// moves every finished one into `out`; returns how many.
    pub fn wait(&mut self, out: &mut Vec<Completion>, min: usize) -> Result<usize> {
        match &mut self.inner {
            Inner::Path(p) => p.wait(&self.ns, out, min),
            Inner::Paths(p) => Ok(p.wait(out, min)),
        }
    }
}

/// Checks a read or write request against the namespace and its buffer.
pub(crate) fn check(ns: &Namespace, offset: u64, len: u32, buf: &IoBuf) -> Result<()> {
    if len == 0 {
        return Err(Error::Unaligned {
            what: "length",
            value: 0,
            block_size: ns.block_size(),
        });
    }
    ns.check_range(offset, u64::from(len))?;
    if len > ns.max_transfer_bytes() {
        return Err(Error::TooLarge {
            len: u64::from(len),
            max: u64::from(ns.max_transfer_bytes()),
        });
    }
    if (len as usize) > buf.len() {
        return Err(Error::ShortBuffer {
            buf: buf.len(),
            len: u64::from(len),
        });
    }
    Ok(())
}

/// The command of a request (its data in `buf[..len]`).
pub(crate) fn command(ns: &Namespace, op: Op, offset: u64, len: u32, buf: &IoBuf) -> (Sqe, Dir) {
    let bs = u64::from(ns.block_size());
    match op {
        Op::Flush => (flush_sqe(ns.nsid(), 0), Dir::None),
        Op::Read | Op::Write | Op::WriteFua => {
            let rw = ReadWrite {
                nsid: ns.nsid(),
                slba: offset / bs,
                nlb: (u64::from(len) / bs - 1) as u16,
                fua: op == Op::WriteFua,
                lr: false,
                dsm: 0,
            };
            let seg = Seg::of(buf, 0, len);
            if op == Op::Read {
                (rw.to_sqe(opc::READ, 0), Dir::ToHost(seg))
            } else {
                (rw.to_sqe(opc::WRITE, 0), Dir::ToCtrl(seg))
            }
        }
    }
}

/// What a request's response means to the caller.
pub(crate) fn outcome(op: Op, result: Result<Cqe>) -> Result<()> {
    match result {
        Ok(cqe) if cqe.status.is_success() => Ok(()),
        Ok(cqe) => Err(Error::Nvme {
            op: match op {
                Op::Read => "read",
                Op::Write => "write",
                Op::WriteFua => "write (FUA)",
                Op::Flush => "flush",
            },
            status: cqe.status,
        }),
        Err(e) => Err(e),
    }
}

impl OnePath {
    fn submit(
        &mut self,
        ns: &Namespace,
        op: Op,
        offset: u64,
        len: u32,
        buf: IoBuf,
        tag: u64,
    ) -> Result<(), SubmitError> {
        if let Err(e) = self.ensure_queue() {
            return Err(SubmitError::Failed(e, buf));
        }
        if !self.parked.is_empty() {
            // Requests held across a reconnect go first.
            return Err(SubmitError::QueueFull(buf));
        }
        let Some(slot) = self.free.pop() else {
            return Err(SubmitError::QueueFull(buf));
        };
        let (sqe, dir) = command(ns, op, offset, len, &buf);
        let (q, _) = self.q.as_mut().expect("ensure_queue installed a queue");
        match q.submit(sqe, dir, Some(buf), u64::from(slot)) {
            Ok(()) => {
                self.meta[slot as usize] = Some(Meta {
                    tag,
                    op,
                    offset,
                    len,
                });
                Ok(())
            }
            Err(QSubmitError::Full(b)) => {
                self.free.push(slot);
                Err(SubmitError::QueueFull(b.expect("buffer returned")))
            }
            Err(QSubmitError::Failed(e, b)) => {
                self.free.push(slot);
                Err(SubmitError::Failed(e, b.expect("buffer returned")))
            }
        }
    }
    /// Replaces a failed queue once its requests have been reported: reconnects the
    /// controller if nobody has yet, then borrows a queue of the new session.
    fn ensure_queue(&mut self) -> Result<()> {
        match &self.q {
            Some((q, _)) if q.failure().is_none() => return Ok(()),
            Some((q, _)) if q.in_flight() > 0 => return Ok(()),
            _ => {}
        }
        let shared = self.ctrl.shared().clone();
        if let Some((q, generation)) = self.q.take() {
            let why = q.failure().unwrap_or("queue lost").to_string();
            drop(q);
            shared.recover(generation, &why)?;
        }
        let (q, generation) = shared.checkout()?;
        // The new session may have other limits; the slot table keeps its size (submit
        // still gets QueueFull from the queue itself when it is smaller).
        self.q = Some((q, generation));
        Ok(())
    }

    /// Moves finished requests into `out` without blocking (but for a reconnect that parked
    /// requests wait for); returns how many.
    pub fn poll(&mut self, ns: &Namespace, out: &mut Vec<Completion>) -> Result<usize> {
        if let Some((q, _)) = self.q.as_mut() {
            q.poll(&mut self.done);
        }
        let n = self.finish(out);
        Ok(n + self.resend(ns, out))
    }

    /// Waits until at least `min` requests (capped at those in flight) have finished and
    /// moves every finished one into `out`; returns how many.
    pub fn wait(&mut self, ns: &Namespace, out: &mut Vec<Completion>, min: usize) -> Result<usize> {
        let want = min.min(self.meta.len() - self.free.len());
        let mut got = self.poll(ns, out)?;
        let timeout = self.ctrl.shared().opts.io_timeout();
        while got < want {
            if let Some((q, _)) = self.q.as_mut() {
                q.wait(&mut self.done, timeout);
            }
            got += self.finish(out);
            got += self.resend(ns, out);
            let idle = self.q.as_ref().map_or(true, |(q, _)| q.in_flight() == 0);
            if idle && self.parked.is_empty() && got < want {
                break;
            }
        }
        Ok(got)
    }

    /// Sends the parked requests again on a live queue, reconnecting the controller first if
    /// it must; if the controller gave up, completes them with its error. Returns how many
    /// completed.
    fn resend(&mut self, ns: &Namespace, out: &mut Vec<Completion>) -> usize {
        if self.parked.is_empty() {
            return 0;
        }
        if let Err(e) = self.ensure_queue() {
            let mut n = 0;
            while let Some((slot, buf)) = self.parked.pop() {
                let what = e.to_string();
                self.complete(slot, buf, Err(Error::Disconnected { what }), out);
                n += 1;
            }
            return n;
        }
        let Some((q, _)) = self.q.as_mut() else {
            return 0;
        };
        if q.failure().is_some() {
            return 0; // its posted requests are still to be reported (then parked)
        }
        while let Some((slot, buf)) = self.parked.pop() {
            let m = self.meta[slot as usize].expect("a parked request has its slot");
            let (sqe, dir) = command(ns, m.op, m.offset, m.len, &buf);
            match q.submit(sqe, dir, Some(buf), u64::from(slot)) {
                Ok(()) => self.ctrl.shared().stats.add_retry(),
                Err(QSubmitError::Full(b) | QSubmitError::Failed(_, b)) => {
                    self.parked.push((slot, b.expect("buffer returned")));
                    break;
                }
            }
        }
        0
    }

    fn finish(&mut self, out: &mut Vec<Completion>) -> usize {
        let mut n = 0;
        let o = &self.ctrl.shared().opts;
        let requeue = o.requeue && o.reconnect_attempts > 0;
        let mut done = std::mem::take(&mut self.done);
        for d in done.drain(..) {
            let slot = d.tag as u32;
            let buf = d.buf.expect("async requests carry their buffer");
            match d.result {
                // The connection was lost: held for the reconnect.
                Err(_) if requeue => self.parked.push((slot, buf)),
                result => {
                    let m = self.meta[slot as usize].expect("completion for a submitted slot");
                    self.complete(slot, buf, outcome(m.op, result), out);
                    n += 1;
                }
            }
        }
        self.done = done;
        n
    }

    fn complete(&mut self, slot: u32, buf: IoBuf, result: Result<()>, out: &mut Vec<Completion>) {
        let m = self.meta[slot as usize]
            .take()
            .expect("completion for a submitted slot");
        self.free.push(slot);
        out.push(Completion {
            tag: m.tag,
            op: m.op,
            offset: m.offset,
            len: m.len,
            buf,
            result,
        });
    }
}

impl Drop for OnePath {
    fn drop(&mut self) {
        let Some((mut q, generation)) = self.q.take() else {
            return;
        };
        // Let requests in flight finish so their buffers are free to reuse, then hand back.
        let timeout = self.ctrl.shared().opts.io_timeout();
        while q.in_flight() > 0 {
            if q.wait(&mut self.done, timeout) == 0 && q.failure().is_some() {
                break;
            }
        }
        self.done.clear();
        self.ctrl.shared().checkin(q, generation);
    }
}
