//! The I/O engine: the one interface between a job's loop and the storage it drives.
//!
//! An engine is one queue to one device: the local io_uring engine ([`local`]) for files and
//! block devices, and (later) the NVMe-oF initiator engine for `rdma://` and `soft://` targets.
//! Each job thread owns its own engine instance, so an engine is `Send` but never shared.
//!
//! # Buffers and ownership
//!
//! Data buffers come from the engine ([`Engine::alloc_buffers`]) so it can register them once
//! (io_uring fixed buffers, an RDMA memory region) before the first I/O. A buffer is an
//! [`IoBuf`]: a unique handle to a slice of an aligned [`BufRegion`]. It is handed to
//! [`Engine::submit`] inside the [`IoReq`], *by value*, and comes back in the matching
//! [`Completion`] (or in [`QueueFull`] if the request was refused). While it is in flight the
//! caller has no handle to it, so the rule "memory outlives every I/O that names it, and nobody
//! touches it meanwhile" is kept by the type system; the engine keeps the handle (and with it
//! an `Arc` of the region) until the I/O has completed.
//!
//! # Completion semantics
//!
//! `submit` queues a request; the engine must issue it no later than the next `poll`.
//! `poll` gathers finished requests, in any order, each exactly once. The hot path allocates
//! nothing: `out` is reused by the caller, with capacity reserved for the queue depth.

pub mod embedded;
pub mod local;
pub mod nvmf;
pub mod passthru;
mod uring;

use std::alloc::{self, Layout};
use std::fmt;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::perf::args::Target;

/// Direction of one I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Device to buffer.
    Read,
    /// Buffer to device.
    Write,
}

impl Op {
    /// `"read"` or `"write"`, as in fio's report.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// One request to an engine.
#[derive(Debug)]
pub struct IoReq {
    /// Read or write.
    pub op: Op,
    /// Byte offset on the device; a multiple of [`Engine::block_size`].
    pub offset: u64,
    /// Bytes, a multiple of [`Engine::block_size`], at most `buf.len()`. The I/O uses
    /// `buf[..len]`.
    pub len: u32,
    /// The data buffer, owned by the engine until the completion gives it back.
    pub buf: IoBuf,
    /// The caller's cookie, returned in the completion.
    pub tag: u64,
}

/// A finished request.
#[derive(Debug)]
pub struct Completion {
    /// The request's `tag`.
    pub tag: u64,
    /// The request's `op`.
    pub op: Op,
    /// The request's `offset`.
    pub offset: u64,
    /// The request's `len`.
    pub len: u32,
    /// The buffer, back to the caller.
    pub buf: IoBuf,
    /// Whether all `len` bytes were transferred.
    pub result: Result<(), IoError>,
}

/// Why one I/O failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IoError {
    /// The OS returned an errno (io_uring `res < 0`).
    #[error("{}", std::io::Error::from_raw_os_error(*.0))]
    Os(i32),
    /// Fewer bytes than asked (e.g. end of file).
    #[error("short transfer: {done} of {len} bytes")]
    Short {
        /// Bytes transferred.
        done: u32,
        /// Bytes asked.
        len: u32,
    },
    /// The NVMe controller completed the command with an error status.
    #[error("NVMe status: type {sct:#x} code {sc:#04x}")]
    Nvme {
        /// Status code type.
        sct: u8,
        /// Status code.
        sc: u8,
    },
    /// The transport (queue pair, connection) failed under the request.
    #[error("transport error: {0}")]
    Transport(String),
}

/// [`Engine::submit`] refused the request because the queue is full; the request (and its
/// buffer) come back. Poll for completions, then submit it again.
#[derive(Debug)]
pub struct QueueFull(pub IoReq);

/// Why an engine could not be opened, could not allocate, or failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Opening the file or device failed.
    #[error("{}: {err}{}", path.display(), hint_suffix(hint))]
    Open {
        /// The path.
        path: PathBuf,
        /// The OS error.
        err: std::io::Error,
        /// What to do about it, if we know.
        hint: Option<String>,
    },
    /// Setting up the io_uring instance failed.
    #[error(
        "io_uring {op}: {err} (io_uring may be disabled: check \
             /proc/sys/kernel/io_uring_disabled and the container's seccomp profile)"
    )]
    Ring {
        /// The failing step.
        op: &'static str,
        /// The OS error.
        err: std::io::Error,
    },
    /// Connecting to a remote target (or starting the embedded one) failed.
    #[error("{target}: {err}")]
    Connect {
        /// The target, as given.
        target: String,
        /// Why.
        err: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Allocating I/O buffers failed.
    #[error("cannot allocate {count} I/O buffers of {len} bytes")]
    Alloc {
        /// Buffers asked.
        count: usize,
        /// Bytes each.
        len: usize,
    },
    /// Waiting for completions failed.
    #[error("polling for completions: {0}")]
    Poll(std::io::Error),
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
}

/// One queue to one block device. See the module doc for ownership and completion rules.
pub trait Engine: Send {
    /// What to call it in reports: `"io_uring"`, `"io_uring (buffered)"`, `"nvmf-rdma"`.
    fn name(&self) -> &str;

    /// Logical block size in bytes: offsets and lengths of every [`IoReq`] are multiples.
    fn block_size(&self) -> u32;

    /// Device (namespace, file) size in bytes.
    fn capacity(&self) -> u64;

    /// The most requests in flight at once; `submit` returns [`QueueFull`] beyond it.
    fn queue_depth(&self) -> u32;

    /// `count` buffers of at least `len` bytes each, suitably aligned and registered for this
    /// engine. Called at set-up, before the first `submit`; never on the hot path.
    fn alloc_buffers(&mut self, count: usize, len: usize) -> Result<Vec<IoBuf>, EngineError>;

    /// Queues one request. It is issued no later than the next [`Engine::poll`]. On
    /// [`QueueFull`] nothing was queued and the request comes back.
    fn submit(&mut self, req: IoReq) -> Result<(), QueueFull>;

    /// Issues queued requests and moves finished ones into `out` (appending), waiting until at
    /// least `min_complete` have finished (capped at the number in flight; 0: do not wait).
    /// Returns how many were appended. An `Err` means the engine as a whole failed; a failed
    /// I/O is a [`Completion`] with an [`IoError`].
    fn poll(
        &mut self,
        out: &mut Vec<Completion>,
        min_complete: usize,
    ) -> Result<usize, EngineError>;

    /// Per path, what a multipath engine sent where (empty for single-path engines).
    fn paths(&self) -> Vec<PathIo> {
        Vec::new()
    }
}

/// One path of a multipath engine, at the end of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathIo {
    /// The path's URL.
    pub url: String,
    /// Commands completed successfully through it.
    pub ios: u64,
    /// Failures seen on it (connection lost, ANA path status).
    pub failures: u64,
    /// Connected at the end.
    pub live: bool,
}

/// What an engine needs to know to open a target.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Jobs that will open an engine on the same target (sizes an embedded target).
    pub numjobs: u32,
    /// Requests in flight at most.
    pub queue_depth: u32,
    /// Whether the job writes (open read-write).
    pub write: bool,
    /// Open with `O_DIRECT` (falling back to buffered where refused); `false`: buffered.
    pub direct: bool,
    /// Poll for completions instead of waiting for interrupts (fio's `hipri`): an
    /// `IORING_SETUP_IOPOLL` ring. Local engines only.
    pub hipri: bool,
    /// Grow a regular file to at least this many bytes (creating it if missing); `None`: the
    /// file must exist.
    pub min_file_len: Option<u64>,
}

/// `target` with a discovery URL replaced by the subsystem its discovery log lists (once, for
/// every job and the report); any other target as it is.
pub fn resolve_discovery(target: &Target) -> Result<Target, EngineError> {
    let url = match target {
        Target::Rdma { .. } | Target::Soft { .. } | Target::Tcp { .. } => target.to_string(),
        _ => return Ok(target.clone()),
    };
    let found = nvmf::resolve(&url)?;
    if found == url {
        return Ok(target.clone());
    }
    crate::perf::args::parse_target(&found).map_err(|e| EngineError::Connect {
        target: url,
        err: format!("the discovery log's entry {found}: {e}").into(),
    })
}

/// Opens the engine for `target`: one per job.
pub fn open(target: &Target, opts: &OpenOptions) -> Result<Box<dyn Engine>, EngineError> {
    match target {
        // An NVMe namespace's generic character device: commands passed through.
        Target::File(path) if is_char_device(path) => {
            Ok(Box::new(passthru::PassthruEngine::open(path, opts)?))
        }
        Target::File(path) => Ok(Box::new(local::LocalEngine::open(path, opts)?)),
        Target::Rdma { addr, nqn } => Ok(Box::new(nvmf::NvmfEngine::connect(
            &nvmf::resolve(&format!("rdma://{addr}/{nqn}"))?,
            opts,
            None,
        )?)),
        Target::Soft { addr, nqn } => Ok(Box::new(nvmf::NvmfEngine::connect(
            &nvmf::resolve(&format!("soft://{addr}/{nqn}"))?,
            opts,
            None,
        )?)),
        Target::Tcp { addr, nqn } => Ok(Box::new(nvmf::NvmfEngine::connect(
            &nvmf::resolve(&format!("tcp://{addr}/{nqn}"))?,
            opts,
            None,
        )?)),
        Target::Multipath { urls } => Ok(Box::new(nvmf::NvmfEngine::connect_paths(urls, opts)?)),
        Target::Embedded(transport, ns, poll) => {
            let target = embedded::EmbeddedTarget::get(*transport, *ns, *poll, opts)?;
            let url = target.url().to_string();
            Ok(Box::new(nvmf::NvmfEngine::connect(
                &url,
                opts,
                Some(target),
            )?))
        }
    }
}

fn is_char_device(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

/// Buffers are aligned to this (a page: what O_DIRECT and memory registration want).
pub const BUF_ALIGN: usize = 4096;

/// One aligned, zeroed allocation that [`IoBuf`]s are carved from. Engines register it whole
/// (one io_uring fixed buffer, one RDMA memory region). Freed when the last `IoBuf` and the
/// engine's own `Arc` are gone.
pub struct BufRegion {
    ptr: NonNull<u8>,
    len: usize,
    owner: RegionOwner,
}

/// Who frees a region's memory.
enum RegionOwner {
    /// Our own allocation (`carve`).
    Heap(Layout),
    /// Memory that belongs to an engine (e.g. the initiator's registered pool), kept alive by
    /// this value until the region is dropped.
    External(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>),
}

// SAFETY: BufRegion is plain heap memory; access to its bytes goes through IoBufs, each a
// unique, disjoint slice, so sharing the region handle between threads races on nothing.
unsafe impl Send for BufRegion {}
// SAFETY: as above: &BufRegion only exposes the address and length, never the bytes.
unsafe impl Sync for BufRegion {}

impl BufRegion {
    /// Allocates `count` buffers of `len` bytes (each rounded up to [`BUF_ALIGN`]) in one
    /// region and returns the region and the buffers, indexed `0..count`.
    pub fn carve(count: usize, len: usize) -> Result<(Arc<Self>, Vec<IoBuf>), EngineError> {
        let fail = || EngineError::Alloc { count, len };
        let stride = len.checked_next_multiple_of(BUF_ALIGN).ok_or_else(fail)?;
        let total = stride
            .checked_mul(count)
            .filter(|&t| t > 0)
            .ok_or_else(fail)?;
        let layout = Layout::from_size_align(total, BUF_ALIGN).map_err(|_| fail())?;
        // SAFETY: layout has a non-zero size (checked above).
        let ptr = NonNull::new(unsafe { alloc::alloc_zeroed(layout) }).ok_or_else(fail)?;
        let region = Arc::new(Self {
            ptr,
            len: total,
            owner: RegionOwner::Heap(layout),
        });
        let bufs = (0..count)
            .map(|i| IoBuf {
                region: Arc::clone(&region),
                offset: i * stride,
                len,
                index: i as u32,
            })
            .collect();
        Ok((region, bufs))
    }

    /// A region over `len` bytes at `ptr` that an engine owns; `owner` keeps them alive.
    ///
    /// # Safety
    /// `ptr..ptr + len` is valid for reads and writes for as long as `owner` lives, and is
    /// touched by nobody else except through [`IoBuf`]s made with [`BufRegion::buf`].
    pub unsafe fn external(
        ptr: NonNull<u8>,
        len: usize,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Arc<Self> {
        Arc::new(Self {
            ptr,
            len,
            owner: RegionOwner::External(owner),
        })
    }

    /// A handle to `len` bytes at `offset` of this region, numbered `index`.
    ///
    /// # Safety
    /// The range lies inside the region and no other live handle overlaps it.
    pub unsafe fn buf(self: &Arc<Self>, offset: usize, len: usize, index: u32) -> IoBuf {
        debug_assert!(offset + len <= self.len);
        IoBuf {
            region: Arc::clone(self),
            offset,
            len,
            index,
        }
    }

    /// First byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a region holds at least one buffer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for BufRegion {
    fn drop(&mut self) {
        if let RegionOwner::Heap(layout) = self.owner {
            // SAFETY: ptr came from alloc_zeroed with this layout, and this is the last
            // reference.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

impl fmt::Debug for BufRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BufRegion({:p}, {} bytes)", self.ptr, self.len())
    }
}

/// A unique handle to one buffer in a [`BufRegion`]. Not `Clone`: whoever holds it is the only
/// one who may touch its bytes.
pub struct IoBuf {
    region: Arc<BufRegion>,
    offset: usize,
    len: usize,
    index: u32,
}

impl IoBuf {
    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true for buffers from [`BufRegion::carve`] with `len > 0`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Position in the allocation it came from (0-based).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The region it was carved from.
    pub fn region(&self) -> &Arc<BufRegion> {
        &self.region
    }

    /// Address of the first byte, for handing to the kernel or a NIC.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        // SAFETY: offset + len <= region length by construction in carve.
        unsafe { self.region.as_ptr().add(self.offset) }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: [offset, offset+len) lies in the live region, belongs to this handle alone,
        // and no I/O uses it while the caller holds the handle (it travels inside the request).
        unsafe { std::slice::from_raw_parts(self.region.as_ptr().add(self.offset), self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in as_slice, and &mut self makes this the only live view.
        unsafe { std::slice::from_raw_parts_mut(self.as_mut_ptr(), self.len) }
    }
}

impl fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IoBuf(#{}, {} bytes)", self.index, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carved_buffers_are_aligned_disjoint_and_zeroed() {
        let (region, mut bufs) = BufRegion::carve(3, 5000).unwrap();
        assert_eq!(region.len(), 3 * 8192);
        for (i, b) in bufs.iter_mut().enumerate() {
            assert_eq!(b.index() as usize, i);
            assert_eq!(b.len(), 5000);
            assert_eq!(b.as_mut_ptr() as usize % BUF_ALIGN, 0);
            assert!(b.as_slice().iter().all(|&x| x == 0));
            b.as_mut_slice().fill(i as u8 + 1);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.as_slice().iter().all(|&x| x == i as u8 + 1),
                "buffers overlap"
            );
        }
        drop(region);
        assert_eq!(bufs[2].as_slice()[0], 3, "buffers keep the region alive");
    }
}
