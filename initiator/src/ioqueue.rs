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
use crate::error::{Error, Result};
use crate::namespace::Namespace;
use crate::queue::{Dir, Seg};

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

/// One I/O queue for the async API. `Send`, not `Sync`: one thread drives it.
pub struct IoQueue {
    ns: Namespace,
    lanes: Box<dyn Lanes>,
}

/// The NVMe queues an [`IoQueue`] drives, and what each request's life on them is: one
/// controller's queue (`crate::controller`, which sends a request its connection's loss cut
/// again after the reconnect), or a queue per path of a multipath set (`crate::multipath`,
/// which sends it again on another path). `IoQueue` checks each request first.
pub(crate) trait Lanes: Send {
    /// Requests in flight at most.
    fn depth(&self) -> usize;

    fn in_flight(&self) -> usize;

    /// Queues a checked request (see [`IoQueue::submit`]).
    fn submit(
        &mut self,
        op: Op,
        offset: u64,
        len: u32,
        buf: IoBuf,
        tag: u64,
    ) -> Result<(), SubmitError>;

    /// See [`IoQueue::poll`].
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize>;

    /// See [`IoQueue::wait`].
    fn wait(&mut self, out: &mut Vec<Completion>, min: usize) -> Result<usize>;
}

impl IoQueue {
    /// An async queue on `ns` driving `lanes` (made for `ns`).
    pub(crate) fn new(ns: Namespace, lanes: Box<dyn Lanes>) -> IoQueue {
        IoQueue { ns, lanes }
    }

    /// Requests in flight at most.
    pub fn depth(&self) -> usize {
        self.lanes.depth()
    }

    pub fn in_flight(&self) -> usize {
        self.lanes.in_flight()
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
        self.lanes.submit(op, offset, len, buf, tag)
    }

    /// Moves finished requests into `out` without blocking; returns how many. A poll may
    /// hand back part of what has arrived (over NVMe/TCP at most half of what is in flight,
    /// so that what the caller submits next leaves sooner); the next call takes the rest.
    pub fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        self.lanes.poll(out)
    }

    /// Waits until at least `min` requests (capped at those in flight) have finished and
    /// moves every finished one into `out`; returns how many.
    pub fn wait(&mut self, out: &mut Vec<Completion>, min: usize) -> Result<usize> {
        self.lanes.wait(out, min)
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
