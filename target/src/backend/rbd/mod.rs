//! Ceph RBD images through librbd's asynchronous C API (`docs/rbd.md`).
//!
//! - One cluster connection and one image handle per namespace, shared by the workers: a second
//!   handle on the same image in one process would be a second exclusive-lock owner, and the
//!   lock would bounce between the two on every write.
//! - Each worker's queue starts operations with `rbd_aio_*` straight on the request's buffer
//!   (the arena data slot: no bounce copy on our side). librbd calls back on one of its own
//!   threads; the callback puts `(slot, result)` on the queue's bounded channel and signals the
//!   worker's wake-up eventfd ([`crate::ring::WorkerIo::wake`]), the same fd the worker's
//!   io_uring signals, so an interrupt-mode worker sleeps until either has news.
//! - librbd runs with `rbd_cache = false`: a write completes once the OSDs have committed it,
//!   so a FUA write is a plain write (with the FUA hint) and a flush (`rbd_aio_flush`) has
//!   nothing to write back; a failed flush therefore takes no acknowledged data back and does
//!   not fence the namespace. `rbd_skip_partial_discard = false`: every discard zeroes what
//!   it covers, so deallocated blocks read as zeroes (DLFEAT). Zero-copy writes are on
//!   (`rbd_disable_zero_copy_writes = false`): librbd holds the completion until it has let go
//!   of the buffer.
//! - Errors keep their meaning ([`classify`]): lost contact with the cluster (timeouts, a
//!   blocklisted client) is a path error, so hosts retry or fail over; a full cluster or pool
//!   quota is Capacity Exceeded.

mod reservations;
mod sys;

use std::cell::Cell;
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::{
    check_request, Backend, BackendError, BackendQueue, Completion, IoError, IoErrorKind, IoOp,
    IoRequest, OpKind, SubmitError,
};
use crate::config::RbdBackendConfig;
use crate::ring::{BackendWake, WorkerIo};
use sys::{AioOp, Cluster, Image, IoCtx};

/// An RBD image serving one namespace.
#[derive(Debug)]
pub struct RbdImage {
    image: Arc<Image>,
    /// What opens the shared reservation store: the cluster, the pool and RADOS namespace.
    cluster: Arc<Cluster>,
    pool: String,
    rados_ns: Option<String>,
    /// `pool[/namespace]/image`, for logs and errors.
    name: String,
    block_size: u32,
    num_blocks: AtomicU64,
    read_only: bool,
}

fn open_error(key: &'static str, what: String) -> BackendError {
    BackendError::Rbd { key, what }
}

/// The librados / librbd settings every RBD namespace runs with (see the module doc).
fn options(cfg: &RbdBackendConfig) -> Vec<(&'static str, String)> {
    let connect = cfg.connect_timeout_s.to_string();
    let mut o = vec![
        ("client_mount_timeout", connect.clone()),
        ("rados_mon_op_timeout", connect),
        ("rados_osd_op_timeout", cfg.op_timeout_s.to_string()),
        ("rbd_cache", "false".into()),
        ("rbd_skip_partial_discard", "false".into()),
        ("rbd_disable_zero_copy_writes", "false".into()),
    ];
    if let Some(k) = &cfg.keyring {
        o.push(("keyring", k.display().to_string()));
    }
    o
}

impl RbdImage {
    /// Connects to the cluster and opens the image. Every failure names the configuration key
    /// to look at; a cluster that does not answer fails after `connect_timeout_s`.
    pub fn open(
        cfg: &RbdBackendConfig,
        block_size: u32,
        read_only: bool,
    ) -> Result<RbdImage, BackendError> {
        let name = match &cfg.namespace {
            Some(ns) => format!("{}/{ns}/{}", cfg.pool, cfg.image),
            None => format!("{}/{}", cfg.pool, cfg.image),
        };
        let conf = cfg.ceph_conf.display();
        let cluster =
            Cluster::connect(&cfg.user, &cfg.ceph_conf, &options(cfg)).map_err(|e| {
                match (e.call, e.errno) {
                    ("rados_conf_read_file", _) => open_error(
                        "ceph_conf",
                        format!(
                            "cannot read {conf}: {e} (point ceph_conf at the cluster's ceph.conf)"
                        ),
                    ),
                    (_, libc::ETIMEDOUT) => open_error(
                        "ceph_conf",
                        format!(
                            "no Ceph monitor named in {conf} answered within {} s (check \
                             mon_host there and that the cluster runs; connect_timeout_s sets \
                             the wait)",
                            cfg.connect_timeout_s
                        ),
                    ),
                    (_, libc::EACCES | libc::EPERM | libc::ENOENT) => open_error(
                        if cfg.keyring.is_some() {
                            "keyring"
                        } else {
                            "user"
                        },
                        format!(
                            "the cluster refused client.{}: {e} (check user, and that its key is \
                             in the keyring: set keyring, or keyring = in {conf})",
                            cfg.user
                        ),
                    ),
                    _ => open_error("ceph_conf", format!("cannot connect to the cluster: {e}")),
                }
            })?;
        let io = IoCtx::open(&cluster, &cfg.pool, cfg.namespace.as_deref()).map_err(|e| {
            let what = if e.errno == libc::ENOENT {
                format!("no pool {:?} in the cluster (ceph osd pool ls)", cfg.pool)
            } else {
                format!("pool {:?}: {e}", cfg.pool)
            };
            open_error("pool", what)
        })?;
        let image = Image::open(&Arc::new(io), &cfg.image).map_err(|e| match e.errno {
            libc::ENOENT => open_error(
                "image",
                format!(
                    "no image {name} (rbd ls {}; or rbd create {name} --size ...)",
                    cfg.pool
                ),
            ),
            libc::EACCES | libc::EPERM => open_error(
                "user",
                format!(
                    "client.{} may not open {name}: {e} (check its caps)",
                    cfg.user
                ),
            ),
            _ => open_error("image", format!("{name}: {e}")),
        })?;
        let size = image
            .size()
            .map_err(|e| open_error("image", format!("{name}: {e}")))?;
        let num_blocks = size / u64::from(block_size);
        if num_blocks == 0 {
            return Err(open_error(
                "image",
                format!("{name} is {size} bytes, smaller than one {block_size}-byte block"),
            ));
        }
        if size % u64::from(block_size) != 0 {
            tracing::warn!(image = %name, "size {size} is not a multiple of the block size \
                {block_size}; the tail is unused");
        }
        tracing::info!(image = %name, num_blocks, block_size, "opened RBD image");
        Ok(RbdImage {
            image: Arc::new(image),
            cluster,
            pool: cfg.pool.clone(),
            rados_ns: cfg.namespace.clone(),
            name,
            block_size,
            num_blocks: AtomicU64::new(num_blocks),
            read_only,
        })
    }
}

impl Backend for RbdImage {
    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.num_blocks.load(Ordering::Acquire)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn deallocated_reads_zeroes(&self) -> bool {
        true
    }

    fn completed_writes_are_durable(&self) -> bool {
        true
    }

    fn refresh_capacity(&self) -> Result<Option<u64>, String> {
        let size = self
            .image
            .size()
            .map_err(|e| format!("{}: {e}", self.name))?;
        let blocks = size / u64::from(self.block_size);
        let old = self.num_blocks.load(Ordering::Acquire);
        if blocks < old {
            return Err(format!(
                "RBD image {} shrank from {old} to {blocks} blocks: not applied (hosts may \
                 hold data there; remove and add the namespace to shrink it)",
                self.name
            ));
        }
        if blocks == old {
            return Ok(None);
        }
        self.num_blocks.store(blocks, Ordering::Release);
        tracing::info!(image = %self.name, old, blocks, "namespace grew");
        Ok(Some(blocks))
    }

    fn reservation_store(
        &self,
    ) -> Result<Option<Arc<dyn crate::namespace::reservation::SharedStore>>, String> {
        let store = reservations::RbdStore::open(
            &self.cluster,
            &self.pool,
            self.rados_ns.as_deref(),
            &self.image,
            &self.name,
        )
        .map_err(|e| format!("image {}: the shared reservation store: {e}", self.name))?;
        Ok(Some(Arc::new(store)))
    }

    fn open_queue(&self, io: &WorkerIo, depth: u32) -> Result<Box<dyn BackendQueue>, BackendError> {
        let (tx, rx) = crossbeam_channel::bounded(depth as usize);
        let sink = Arc::new(Sink {
            tx,
            wake: io.wake(),
        });
        let slots = (0..depth)
            .map(|index| SlotCtx {
                index,
                sink: Arc::as_ptr(&sink),
            })
            .collect();
        Ok(Box::new(RbdQueue {
            image: Arc::clone(&self.image),
            block_size: self.block_size,
            read_only: self.read_only,
            slots,
            reqs: vec![None; depth as usize],
            free: (0..depth).rev().collect(),
            rx,
            _sink: sink,
            signalled: io.signalled_in_flight(),
        }))
    }
}

/// Where librbd's callbacks put completions: the queue's channel and the worker's wake-up.
struct Sink {
    tx: Sender<(u32, i64)>,
    wake: Option<Arc<BackendWake>>,
}

/// The callback argument of one queue slot. Its address is stable (a boxed slice the queue
/// keeps until no callback can run any more).
struct SlotCtx {
    index: u32,
    sink: *const Sink,
}

/// librbd's completion callback (runs on a librbd thread).
///
/// # Safety
/// `arg` is a [`SlotCtx`] of a queue that has this operation in flight: the queue keeps its
/// slots and its `Arc<Sink>` until it has received this completion.
unsafe extern "C" fn on_complete(c: sys::rbd_completion_t, arg: *mut c_void) {
    // SAFETY: by this function's contract `arg` is a live SlotCtx.
    let ctx = unsafe { &*(arg as *const SlotCtx) };
    let index = ctx.index;
    // SAFETY: `ctx.sink` came from Arc::as_ptr of the queue's Arc<Sink>, alive (contract).
    // Take a reference of our own first: once the send below lands, the queue may take the
    // completion and be dropped before this callback signals the eventfd.
    let sink = unsafe {
        Arc::increment_strong_count(ctx.sink);
        Arc::from_raw(ctx.sink)
    };
    // SAFETY: `c` is this callback's completion, released exactly here.
    let rc = unsafe { sys::finish(c) };
    // The channel holds `depth` entries and at most `depth` operations are in flight.
    if sink.tx.try_send((index, rc)).is_err() {
        tracing::error!(
            index,
            "RBD completion lost: the queue's channel is full or closed"
        );
    }
    if let Some(w) = &sink.wake {
        w.signal_armed();
    }
}

/// One worker's queue to an image.
struct RbdQueue {
    image: Arc<Image>,
    block_size: u32,
    read_only: bool,
    /// Callback arguments, one per slot; never reallocated.
    slots: Box<[SlotCtx]>,
    /// The request in flight in each slot.
    reqs: Vec<Option<IoRequest>>,
    free: Vec<u32>,
    rx: Receiver<(u32, i64)>,
    /// What the slots' callback arguments point to: kept until the last callback.
    _sink: Arc<Sink>,
    /// The worker's count of operations that signal its wake-up ([`WorkerIo`]).
    signalled: Rc<Cell<u32>>,
}

impl RbdQueue {
    fn aio_op(&self, op: &IoOp) -> AioOp {
        let bytes = |blocks: u32| u64::from(blocks) * u64::from(self.block_size);
        let off = |lba: u64| lba * u64::from(self.block_size);
        match *op {
            IoOp::Read { lba, buf, .. } => AioOp::Read {
                off: off(lba),
                buf: buf.as_ptr(),
                len: buf.len() as usize,
            },
            IoOp::Write { lba, buf, fua, .. } => AioOp::Write {
                off: off(lba),
                buf: buf.as_ptr(),
                len: buf.len() as usize,
                flags: if fua { sys::OP_FLAG_FUA } else { 0 },
            },
            IoOp::Flush => AioOp::Flush,
            IoOp::WriteZeroes { lba, blocks } => AioOp::WriteZeroes {
                off: off(lba),
                len: bytes(blocks),
            },
            IoOp::Deallocate { lba, blocks } => AioOp::Discard {
                off: off(lba),
                len: bytes(blocks),
            },
        }
    }

    fn in_flight_count(&self) -> u32 {
        (self.reqs.len() - self.free.len()) as u32
    }
}

impl BackendQueue for RbdQueue {
    fn submit(&mut self, req: IoRequest) -> Result<(), SubmitError> {
        let Some(&slot) = self.free.last() else {
            return Err(SubmitError::Busy);
        };
        // The namespace wrapper checked the range against the live capacity; check the
        // buffer's length here too, since librbd trusts it.
        check_request(&req.op, self.block_size, u64::MAX)?;
        if self.read_only && req.op.kind().modifies() {
            return Err(IoError::new(IoErrorKind::ReadOnly).into());
        }
        let op = self.aio_op(&req.op);
        let arg = &self.slots[slot as usize] as *const SlotCtx as *mut c_void;
        // SAFETY: the buffer is valid until its completion is polled or this queue is dropped
        // (the IoBuf contract), and Drop waits for every callback; `arg` is a slot context
        // kept, with its Sink, until then; `on_complete` releases the completion.
        match unsafe { self.image.aio(op, on_complete, arg) } {
            Ok(()) => {
                self.free.pop();
                self.reqs[slot as usize] = Some(req);
                self.signalled.set(self.signalled.get() + 1);
                Ok(())
            }
            Err(e) => {
                tracing::debug!(error = %e, "RBD operation refused at submit");
                Err(SubmitError::Rejected(classify(req.op.kind(), e.errno)))
            }
        }
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        while n < out.len() {
            let Ok((slot, rc)) = self.rx.try_recv() else {
                break;
            };
            let Some(req) = self.reqs.get_mut(slot as usize).and_then(Option::take) else {
                debug_assert!(false, "RBD completion for a free slot {slot}");
                continue;
            };
            self.free.push(slot);
            self.signalled.set(self.signalled.get() - 1);
            out[n] = Completion {
                tag: req.tag,
                op: req.op.kind(),
                result: result(&req, rc),
            };
            n += 1;
        }
        n
    }

    fn in_flight(&self) -> u32 {
        self.in_flight_count()
    }
}

impl Drop for RbdQueue {
    /// Waits for every operation in flight: librbd may still write into their buffers, and
    /// its callbacks use this queue's slots. With `op_timeout_s` set, each ends by then.
    fn drop(&mut self) {
        let mut waited_s = 0;
        while self.in_flight_count() > 0 {
            match self.rx.recv_timeout(Duration::from_secs(10)) {
                Ok((slot, _)) => {
                    if let Some(r) = self.reqs.get_mut(slot as usize) {
                        if r.take().is_some() {
                            self.free.push(slot);
                            self.signalled.set(self.signalled.get() - 1);
                        }
                    }
                }
                Err(_) => {
                    waited_s += 10;
                    tracing::warn!(
                        in_flight = self.in_flight_count(),
                        waited_s,
                        "closing an RBD queue: still waiting for librbd to complete operations"
                    );
                }
            }
        }
    }
}

/// A completed operation's outcome: librbd returns the bytes read for reads, 0 for the others
/// (writes too), or a negated errno.
fn result(req: &IoRequest, rc: i64) -> Result<(), IoError> {
    let kind = req.op.kind();
    if rc < 0 {
        let errno = i32::try_from(-rc).unwrap_or(libc::EIO);
        tracing::debug!(tag = req.tag, op = ?kind, errno, "RBD I/O failed");
        return Err(classify(kind, errno));
    }
    match req.op.buf() {
        Some(buf) if kind == OpKind::Read && rc != i64::from(buf.len()) => {
            tracing::warn!(tag = req.tag, got = rc, want = buf.len(), "short RBD read");
            Err(IoError::new(IoErrorKind::MediaRead))
        }
        _ => Ok(()),
    }
}

/// What a Ceph errno means for the host (`docs/rbd.md`, "Errors").
pub fn classify(op: OpKind, errno: i32) -> IoError {
    /// librados' EBLOCKLISTED: this client was fenced out of the cluster.
    const EBLOCKLISTED: i32 = libc::ESHUTDOWN;
    let kind = match errno {
        libc::ETIMEDOUT
        | EBLOCKLISTED
        | libc::ENOTCONN
        | libc::ECONNREFUSED
        | libc::ECONNRESET
        | libc::EHOSTUNREACH
        | libc::ENETUNREACH => IoErrorKind::PathLost,
        libc::ENOSPC | libc::EDQUOT => IoErrorKind::CapacityExceeded,
        libc::EROFS => IoErrorKind::ReadOnly,
        _ => return IoError::from_errno(op, errno),
    };
    IoError { kind, errno }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceph_errors_keep_their_meaning() {
        let k = |op, errno| classify(op, errno).kind;
        assert_eq!(k(OpKind::Write, libc::ETIMEDOUT), IoErrorKind::PathLost);
        assert_eq!(k(OpKind::Read, libc::ESHUTDOWN), IoErrorKind::PathLost);
        assert_eq!(
            k(OpKind::Write, libc::ENOSPC),
            IoErrorKind::CapacityExceeded
        );
        assert_eq!(
            k(OpKind::Write, libc::EDQUOT),
            IoErrorKind::CapacityExceeded
        );
        assert_eq!(k(OpKind::Write, libc::EROFS), IoErrorKind::ReadOnly);
        assert_eq!(k(OpKind::Read, libc::EIO), IoErrorKind::MediaRead);
        assert_eq!(k(OpKind::Write, libc::EIO), IoErrorKind::WriteFault);
        assert_eq!(k(OpKind::Flush, libc::EIO), IoErrorKind::WriteFault);
        assert_eq!(
            IoErrorKind::PathLost.nvme_status(),
            (0x3, 0x00),
            "a path error, so multipath hosts move on"
        );
    }
}
