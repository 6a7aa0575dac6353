//! Block backends: where a namespace's blocks live.
//!
//! In the spirit of SPDK's bdev modules, a backend is two small traits:
//! - [`Backend`], one per namespace and shared by all workers: its geometry, and
//!   [`Backend::open_queue`] to give a worker its own queue;
//! - [`BackendQueue`], one per (worker, namespace), driven by that worker alone: `submit`
//!   requests tagged by the caller, then `poll` completions in batches. Neither blocks, so a
//!   worker interleaves its backends with its RDMA completion queues.
//!
//! Implementations: [`file`] (files and block devices through the worker's io_uring),
//! [`nvme`] (NVMe namespaces by io_uring passthrough), [`null`],
//! [`ram`], [`error`] (fault and latency injection around another backend) and `rbd` (Ceph RBD
//! images through librbd; cargo feature `rbd`). The namespace
//! wrapper that refuses writes after a failed flush is [`crate::namespace`].
//!
//! Nothing here allocates per request: queues preallocate their completion storage for their
//! depth when they are opened.

pub mod error;
pub mod file;
pub mod null;
pub mod nvme;
pub mod ram;
#[cfg(feature = "rbd")]
pub mod rbd;
mod request;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

pub use request::{Completion, IoBuf, IoError, IoErrorKind, IoOp, IoRequest, OpKind, SubmitError};

use crate::config::BackendConfig;
use crate::ring::WorkerIo;

/// A namespace's storage, shared by the workers.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Logical block size in bytes (512 or 4096).
    fn block_size(&self) -> u32;
    /// Capacity in blocks.
    fn num_blocks(&self) -> u64;
    /// Whether the storage was opened read-only (writes complete with `ReadOnly`).
    fn read_only(&self) -> bool;
    /// Whether blocks read back as zeroes after a successful Deallocate (Identify Namespace
    /// DLFEAT bits 2:0 = 001b). Hosts rely on it (Linux maps discard-with-zeroing onto it),
    /// so a backend says yes only where it is guaranteed.
    fn deallocated_reads_zeroes(&self) -> bool {
        false
    }
    /// Whether a write is durable once it completes, whatever happens to later flushes (RBD
    /// without librbd's cache: the OSDs committed it). Then a failed flush takes no
    /// acknowledged data back, and does not fence the namespace.
    fn completed_writes_are_durable(&self) -> bool {
        false
    }
    /// Looks at the storage's size again (a file or device grown on disk): the new capacity in
    /// blocks if it grew, `None` if unchanged; growth only (a shrink is an error, not applied).
    fn refresh_capacity(&self) -> Result<Option<u64>, String> {
        Ok(None)
    }
    /// Where every gateway of this storage shares the namespace's reservations, if the
    /// storage has such a place (RBD: the image's metadata); `None`: the target keeps them.
    fn reservation_store(
        &self,
    ) -> Result<Option<Arc<dyn crate::namespace::reservation::SharedStore>>, String> {
        Ok(None)
    }
    /// A queue for the calling worker, for at most `depth` outstanding requests. Call it on the
    /// worker's thread, with the worker's `io`.
    fn open_queue(&self, io: &WorkerIo, depth: u32) -> Result<Box<dyn BackendQueue>, BackendError>;
}

/// One worker's queue to a backend.
pub trait BackendQueue {
    /// Queues `req`. File backends start it at the next [`BackendQueue::poll`] (submissions are
    /// batched); memory backends complete it at once. Returns [`SubmitError::Busy`] when
    /// `depth` requests are outstanding, [`SubmitError::Rejected`] for a request that fails
    /// without being started (out of range, misaligned); no completion follows an error.
    fn submit(&mut self, req: IoRequest) -> Result<(), SubmitError>;
    /// Starts queued requests and writes up to `out.len()` completions; returns how many.
    /// Never blocks.
    fn poll(&mut self, out: &mut [Completion]) -> usize;
    /// Requests submitted whose completion `poll` has not returned yet.
    fn in_flight(&self) -> u32;
}

/// An error opening a backend (at start, or when a worker opens its queue).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// A worker could not open its queue to a namespace.
    #[error("namespace {nsid}: cannot open a worker's queue: {why}")]
    Queue { nsid: u32, why: String },
    #[error("cannot open {}: {source} (check the path and its permissions{})", path.display(),
        if *read_only { "" } else { ", or set read_only = true if it is write-protected" })]
    Open {
        path: PathBuf,
        read_only: bool,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {what}", path.display())]
    BadFile { path: PathBuf, what: String },
    #[error("{}: block_size {block_size} is smaller than the device's logical block size \
             {device_block_size} (set block_size = {device_block_size})", path.display())]
    BlockSize {
        path: PathBuf,
        block_size: u32,
        device_block_size: u32,
    },
    #[error(
        "io_uring is not available: {source} (it may be disabled by the \
             kernel.io_uring_disabled sysctl or a container's seccomp profile; enable it, or use \
             ram/null backends only)"
    )]
    UringUnavailable {
        #[source]
        source: std::io::Error,
    },
    #[error("io_uring {op}: {source}")]
    Uring {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// An RBD image could not be opened; `key` is the backend key to look at.
    #[error("backend.{key}: {what}")]
    Rbd { key: &'static str, what: String },
    #[error("cannot allocate {bytes} bytes of memory for a ram backend: {source}")]
    Memory {
        bytes: u64,
        #[source]
        source: rdmablk::fabric::FabricError,
    },
}

/// Opens the backend `cfg` describes, with `block_size`-byte blocks.
pub fn open(
    cfg: &BackendConfig,
    block_size: u32,
    read_only: bool,
) -> Result<Arc<dyn Backend>, BackendError> {
    Ok(match cfg {
        BackendConfig::File(f) => Arc::new(file::UringFile::open_file(f, block_size, read_only)?),
        BackendConfig::Block(b) => Arc::new(file::UringFile::open_block(b, block_size, read_only)?),
        BackendConfig::Nvme(n) => Arc::new(nvme::NvmeDrive::open(n, block_size, read_only)?),
        BackendConfig::Null(s) => Arc::new(null::NullBackend::new(s.size.bytes(), block_size)),
        BackendConfig::Ram(s) => Arc::new(ram::RamBackend::new(s.size.bytes(), block_size)?),
        BackendConfig::Error(e) => {
            let inner = open(&e.inner, block_size, read_only)?;
            Arc::new(error::ErrorBackend::new(inner, e))
        }
        #[cfg(feature = "rbd")]
        BackendConfig::Rbd(r) => Arc::new(rbd::RbdImage::open(r, block_size, read_only)?),
        #[cfg(not(feature = "rbd"))]
        BackendConfig::Rbd(_) => {
            return Err(BackendError::Rbd {
                key: "kind",
                what: "this rdmablk-target was built without RBD support".into(),
            })
        }
    })
}

/// Checks a request against a backend's geometry: the range lies inside, the buffer holds
/// exactly the blocks.
pub fn check_request(op: &IoOp, block_size: u32, num_blocks: u64) -> Result<(), IoError> {
    if let Some((lba, blocks)) = op.range() {
        let in_range = lba
            .checked_add(u64::from(blocks))
            .is_some_and(|end| end <= num_blocks);
        if !in_range || blocks == 0 {
            return Err(IoError::new(IoErrorKind::OutOfRange));
        }
    }
    if let (Some(buf), Some((_, blocks))) = (op.buf(), op.range()) {
        if u64::from(buf.len()) != u64::from(blocks) * u64::from(block_size) {
            return Err(IoError::new(IoErrorKind::InvalidRequest));
        }
    }
    Ok(())
}

/// Completions a memory backend produced at submit time, waiting for `poll`. Holds at most
/// `depth` and never reallocates.
#[derive(Debug)]
pub(crate) struct DoneQueue {
    done: VecDeque<Completion>,
    depth: u32,
}

impl DoneQueue {
    pub(crate) fn new(depth: u32) -> Self {
        DoneQueue {
            done: VecDeque::with_capacity(depth as usize),
            depth,
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.done.len() >= self.depth as usize
    }

    pub(crate) fn push(&mut self, c: Completion) {
        debug_assert!(!self.is_full(), "more completions than the queue depth");
        self.done.push_back(c);
    }

    pub(crate) fn drain_into(&mut self, out: &mut [Completion]) -> usize {
        let n = out.len().min(self.done.len());
        for (slot, c) in out.iter_mut().zip(self.done.drain(..n)) {
            *slot = c;
        }
        n
    }

    pub(crate) fn len(&self) -> u32 {
        self.done.len() as u32
    }
}

#[cfg(test)]
pub(crate) mod tests;
