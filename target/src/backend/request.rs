//! What crosses the backend boundary per I/O: requests, buffers, completions, failures.
//! All plain `Copy` data: submitting and completing allocates nothing.

use std::fmt;
use std::ptr::NonNull;

/// A data buffer of one request: raw memory the backend reads from (writes) or fills (reads)
/// between submission and the completion that carries the request's tag.
///
/// Usually a data slot of a connection's arena parcel, which is registered with the worker's
/// io_uring so file I/O uses fixed buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: u32,
}

// SAFETY: an IoBuf is an address and a length; the contract of `from_raw_parts` makes the
// creator responsible for the memory being valid and unshared while a backend uses it, on
// whatever thread that backend runs.
unsafe impl Send for IoBuf {}

impl IoBuf {
    /// A buffer of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// From the submission of a request naming this buffer until its completion has been
    /// returned by `poll` (or the queue and its worker's ring have been dropped):
    /// - `ptr..ptr + len` stays valid for reads and writes (mapped, not freed or reused);
    /// - nothing else reads or writes that memory (the backend or the kernel may be doing so).
    pub unsafe fn from_raw_parts(ptr: NonNull<u8>, len: u32) -> IoBuf {
        IoBuf { ptr, len }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> u32 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An operation on a namespace. LBAs and block counts are in the namespace's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// Read `blocks` blocks at `lba` into `buf` (`buf.len() == blocks * block_size`).
    Read { lba: u64, blocks: u32, buf: IoBuf },
    /// Write `buf` to `blocks` blocks at `lba`. With `fua`, complete only once the data is
    /// durable (RWF_DSYNC, or write + fdatasync).
    Write {
        lba: u64,
        blocks: u32,
        buf: IoBuf,
        fua: bool,
    },
    /// Make every write completed before this was submitted durable.
    Flush,
    /// Zero `blocks` blocks at `lba`; reads return zeroes afterwards.
    WriteZeroes { lba: u64, blocks: u32 },
    /// Deallocate (trim) `blocks` blocks at `lba`: advisory. Reads return zeroes afterwards on
    /// file, ram and null backends; block devices return what the device returns.
    Deallocate { lba: u64, blocks: u32 },
}

/// The kind of an [`IoOp`], as completions report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    Read,
    Write,
    /// A write with FUA: its failure means data the host asked to be durable may not be.
    WriteFua,
    Flush,
    WriteZeroes,
    Deallocate,
}

impl OpKind {
    /// Whether this kind changes the media (refused on read-only and fenced namespaces).
    pub fn modifies(self) -> bool {
        !matches!(self, OpKind::Read | OpKind::Flush)
    }

    /// Whether a failure of this kind leaves durability in doubt (the namespace fences writes).
    pub fn is_durability_point(self) -> bool {
        matches!(self, OpKind::Flush | OpKind::WriteFua)
    }
}

impl IoOp {
    pub fn kind(&self) -> OpKind {
        match self {
            IoOp::Read { .. } => OpKind::Read,
            IoOp::Write { fua: false, .. } => OpKind::Write,
            IoOp::Write { fua: true, .. } => OpKind::WriteFua,
            IoOp::Flush => OpKind::Flush,
            IoOp::WriteZeroes { .. } => OpKind::WriteZeroes,
            IoOp::Deallocate { .. } => OpKind::Deallocate,
        }
    }

    /// `(lba, blocks)` for the ops that address blocks.
    pub fn range(&self) -> Option<(u64, u32)> {
        match *self {
            IoOp::Read { lba, blocks, .. }
            | IoOp::Write { lba, blocks, .. }
            | IoOp::WriteZeroes { lba, blocks }
            | IoOp::Deallocate { lba, blocks } => Some((lba, blocks)),
            IoOp::Flush => None,
        }
    }

    pub fn buf(&self) -> Option<IoBuf> {
        match *self {
            IoOp::Read { buf, .. } | IoOp::Write { buf, .. } => Some(buf),
            _ => None,
        }
    }
}

/// One request: an operation and the caller's tag, returned in its completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRequest {
    pub tag: u64,
    pub op: IoOp,
}

/// The end of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub tag: u64,
    pub op: OpKind,
    pub result: Result<(), IoError>,
}

impl Completion {
    /// An empty slot for completion arrays (`[Completion::EMPTY; 32]`).
    pub const EMPTY: Completion = Completion {
        tag: 0,
        op: OpKind::Read,
        result: Ok(()),
    };
}

/// Why a request failed, in terms the protocol engine maps to an NVMe status
/// ([`IoErrorKind::nvme_status`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoErrorKind {
    /// The LBA range is outside the namespace.
    OutOfRange,
    /// The namespace is read-only.
    ReadOnly,
    /// A flush (or FUA write) failed earlier: writes and flushes are refused until the
    /// namespace is reopened, so no later success can suggest the lost data is durable.
    WritesFenced,
    /// The data could not be read.
    MediaRead,
    /// The data could not be written (or made durable).
    WriteFault,
    /// A malformed request (buffer length does not match the blocks, misaligned buffer for
    /// O_DIRECT): a bug of the caller.
    InvalidRequest,
    /// The storage cannot take more data (a full Ceph cluster, a pool quota).
    CapacityExceeded,
    /// The backend lost its path to the storage (a Ceph cluster that does not answer, or
    /// that fenced this client out): the host should retry, or use another path.
    PathLost,
    /// Anything else.
    Internal,
    /// The drive's own NVMe status (a passed-through command): status code type, status code
    /// and Do Not Retry, returned to the host as they are.
    Device { sct: u8, sc: u8, dnr: bool },
}

impl IoErrorKind {
    /// The suggested NVMe status: (status code type, status code).
    pub fn nvme_status(self) -> (u8, u8) {
        match self {
            IoErrorKind::OutOfRange => (0x0, 0x80),   // LBA Out of Range
            IoErrorKind::ReadOnly => (0x0, 0x20),     // Namespace is Write Protected
            IoErrorKind::WritesFenced => (0x2, 0x80), // Write Fault
            IoErrorKind::MediaRead => (0x2, 0x81),    // Unrecovered Read Error
            IoErrorKind::WriteFault => (0x2, 0x80),   // Write Fault
            IoErrorKind::InvalidRequest => (0x0, 0x02), // Invalid Field in Command
            IoErrorKind::CapacityExceeded => (0x0, 0x81), // Capacity Exceeded
            IoErrorKind::PathLost => (0x3, 0x00),     // Internal Path Error (path related)
            IoErrorKind::Internal => (0x0, 0x06),     // Internal Error
            IoErrorKind::Device { sct, sc, .. } => (sct, sc),
        }
    }
}

/// A failed request: the kind, and the OS error number when there was one (0 otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoError {
    pub kind: IoErrorKind,
    pub errno: i32,
}

impl IoError {
    pub const fn new(kind: IoErrorKind) -> IoError {
        IoError { kind, errno: 0 }
    }

    /// Classifies a failed system call of an `op` (errno positive).
    pub fn from_errno(op: OpKind, errno: i32) -> IoError {
        let kind = match (op, errno) {
            (_, libc::EINVAL) | (_, libc::EFAULT) => IoErrorKind::InvalidRequest,
            (OpKind::Read, libc::EIO | libc::ENODATA | libc::EBADMSG) => IoErrorKind::MediaRead,
            (OpKind::Read, _) => IoErrorKind::Internal,
            (_, libc::EIO | libc::ENOSPC | libc::EDQUOT | libc::EROFS) => IoErrorKind::WriteFault,
            _ => IoErrorKind::Internal,
        };
        IoError { kind, errno }
    }
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.kind)?;
        if self.errno != 0 {
            write!(f, " ({})", std::io::Error::from_raw_os_error(self.errno))?;
        }
        Ok(())
    }
}

/// Why [`super::BackendQueue::submit`] did not queue a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// `depth` requests are outstanding (or the worker's ring is full): poll, then retry.
    Busy,
    /// The request failed at once; no completion will follow for it.
    Rejected(IoError),
}

impl From<IoError> for SubmitError {
    fn from(e: IoError) -> Self {
        SubmitError::Rejected(e)
    }
}
