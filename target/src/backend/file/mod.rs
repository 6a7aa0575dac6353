//! Files and block devices through the worker's io_uring ([`crate::ring::Ring`]).
//!
//! - Reads and writes use O_DIRECT where the filesystem allows it (block devices: always). A
//!   filesystem that refuses O_DIRECT (EINVAL at open, or no direct-I/O alignment in statx, as
//!   tmpfs before Linux 6.6) gets buffered I/O and a warning. O_DIRECT buffers must be aligned
//!   to the file's direct-I/O memory alignment: a misaligned buffer is refused at submit with
//!   `InvalidRequest`, never handed to the kernel.
//! - Buffers inside the registered arena go out as READ_FIXED / WRITE_FIXED.
//! - Flush is `fdatasync` (IORING_OP_FSYNC with DATASYNC); FUA writes carry RWF_DSYNC, so each
//!   is durable on its own when it completes, buffered or not.
//! - Write zeroes is `fallocate(ZERO_RANGE | KEEP_SIZE)`, falling back (once per file, e.g. on
//!   tmpfs) to `PUNCH_HOLE | KEEP_SIZE`, which reads back as zeroes too. Deallocate is
//!   `fallocate(PUNCH_HOLE | KEEP_SIZE)`; where that is unsupported it completes successfully
//!   without effect (deallocation is advisory in NVMe). On block devices the kernel turns these
//!   into WRITE ZEROES and zeroing DISCARD.
//! - `poll = true` (block devices whose queue polls: NVMe with `nvme.poll_queues`): each
//!   queue's reads and writes go on a polled ring of its own (`IORING_SETUP_IOPOLL`), which the
//!   worker polls while they are in flight instead of sleeping for an interrupt; flush, write
//!   zeroes and deallocate stay on the worker's ring (a polled ring takes only reads and
//!   writes). The queue is in `queue.rs`.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

mod queue;

use queue::UringQueue;

use super::{Backend, BackendError, BackendQueue};
use crate::config::{BlockBackendConfig, FileBackendConfig};
use crate::ring::{Ring, WorkerIo};

/// How a write-zeroes was issued (the `aux` of its ring slot).
const AUX_ZERO_RANGE: u32 = 1;
const AUX_PUNCH_HOLE: u32 = 2;

/// A file or block device served through io_uring.
#[derive(Debug)]
pub struct UringFile(Arc<FileState>);

#[derive(Debug)]
struct FileState {
    path: PathBuf,
    file: File,
    block_size: u32,
    /// Grows when the file or device grows and a reload looks ([`Backend::refresh_capacity`]).
    num_blocks: AtomicU64,
    read_only: bool,
    direct: bool,
    /// Alignment O_DIRECT needs of buffer addresses.
    mem_align: usize,
    /// Cleared when the filesystem answers ZERO_RANGE with EOPNOTSUPP.
    zero_range: AtomicBool,
    /// Deallocate (PUNCH_HOLE) leaves zeroes: regular files, and block devices that have
    /// WRITE ZEROES (the kernel punches with a zeroing unmap, never a plain discard).
    deallocate_zeroes: bool,
    /// The power-cut test's negative control ([`ignore_durability_for_tests`]).
    ignore_durability: bool,
    /// Reads and writes on a polled ring of each queue's own (`poll = true`).
    poll: bool,
}

/// The variable that makes a debug build lie about durability; see
/// [`ignore_durability_for_tests`].
pub const IGNORE_DURABILITY_ENV: &str = "RDMABLK_TEST_IGNORE_FUA_AND_FLUSH";

/// The negative control of the power-cut test (`POWERCUT_NEGATIVE_CONTROL=1 tools/powercut`,
/// docs/reliability.md): with `RDMABLK_TEST_IGNORE_FUA_AND_FLUSH=1` in its environment, a
/// *debug* build turns FUA writes into plain writes and Flush into a no-op, so that the test
/// shows it catches a target that acknowledges durability it does not have. Release builds
/// have no such switch (`cfg!(debug_assertions)` is false there and the branch is gone).
fn ignore_durability_for_tests(path: &Path) -> bool {
    let on =
        cfg!(debug_assertions) && std::env::var_os(IGNORE_DURABILITY_ENV).is_some_and(|v| v == "1");
    if on {
        tracing::warn!(
            path = %path.display(),
            "{IGNORE_DURABILITY_ENV}=1: FUA and Flush are IGNORED (test-only negative control; \
             acknowledged writes can be lost)"
        );
    }
    on
}

fn open_error(path: &Path, read_only: bool, source: std::io::Error) -> BackendError {
    BackendError::Open {
        path: path.to_owned(),
        read_only,
        source,
    }
}

/// Whether the block device of `meta` takes WRITE ZEROES
/// (`/sys/dev/block/MAJ:MIN/queue/write_zeroes_max_bytes` > 0).
fn block_device_writes_zeroes(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let path = format!("/sys/dev/block/{major}:{minor}/queue/write_zeroes_max_bytes");
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 0)
}

fn open_with(path: &Path, read_only: bool, direct: bool) -> std::io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(!read_only);
    if direct {
        o.custom_flags(libc::O_DIRECT);
    }
    o.open(path)
}

/// `(memory alignment, file offset alignment)` for O_DIRECT, if the kernel reports them
/// (statx STATX_DIOALIGN, Linux 6.1+). `(0, 0)` means direct I/O is not supported.
fn dio_align(file: &File) -> Option<(u32, u32)> {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, a NUL-terminated empty path with AT_EMPTY_PATH, and a writable statx.
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    (rc == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0)
        .then_some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// Decides whether a file opened with O_DIRECT can serve `block_size`-byte blocks, from its
/// statx direct-I/O alignments: the buffer alignment to use, or why not (buffered fallback).
/// Without statx information (kernels before 6.1) O_DIRECT is assumed to need 512 bytes.
fn direct_io_alignment(dio: Option<(u32, u32)>, block_size: u32) -> Result<usize, String> {
    match dio {
        None => Ok(512),
        Some((0, _)) | Some((_, 0)) => {
            Err("the filesystem does not support O_DIRECT for this file".into())
        }
        Some((_, off)) if block_size % off != 0 => Err(format!(
            "O_DIRECT needs {off}-byte offset alignment, more than block_size {block_size}"
        )),
        Some((mem, _)) => Ok(mem as usize),
    }
}

impl UringFile {
    /// Opens (or creates, with `create_size`) a regular file.
    pub fn open_file(
        cfg: &FileBackendConfig,
        block_size: u32,
        read_only: bool,
    ) -> Result<UringFile, BackendError> {
        let path = cfg.path.as_path();
        if let (Some(size), false) = (cfg.create_size, path.exists()) {
            if !read_only {
                let f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .map_err(|e| open_error(path, read_only, e))?;
                f.set_len(size.bytes())
                    .map_err(|e| open_error(path, read_only, e))?;
                tracing::info!(path = %path.display(), size = %size, "created backing file");
            }
        }
        let (file, direct, mem_align) =
            Self::open_maybe_direct(path, cfg.direct, block_size, read_only)?;
        let meta = file
            .metadata()
            .map_err(|e| open_error(path, read_only, e))?;
        if !meta.is_file() {
            return Err(BackendError::BadFile {
                path: path.to_owned(),
                what: "is not a regular file (use kind = \"block\" for block devices)".into(),
            });
        }
        Self::finish(
            path,
            file,
            meta.len(),
            block_size,
            read_only,
            direct,
            mem_align,
        )
    }

    fn open_maybe_direct(
        path: &Path,
        want_direct: bool,
        block_size: u32,
        read_only: bool,
    ) -> Result<(File, bool, usize), BackendError> {
        if want_direct {
            match open_with(path, read_only, true) {
                Ok(f) => match direct_io_alignment(dio_align(&f), block_size) {
                    Ok(mem_align) => return Ok((f, true, mem_align)),
                    Err(why) => tracing::warn!(path = %path.display(), "{why}: using buffered I/O"),
                },
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => tracing::warn!(
                    path = %path.display(),
                    "the filesystem refuses O_DIRECT (EINVAL): using buffered I/O"
                ),
                Err(e) => return Err(open_error(path, read_only, e)),
            }
        }
        let f = open_with(path, read_only, false).map_err(|e| open_error(path, read_only, e))?;
        Ok((f, false, 1))
    }

    /// Opens a block device with O_DIRECT.
    pub fn open_block(
        cfg: &BlockBackendConfig,
        block_size: u32,
        read_only: bool,
    ) -> Result<UringFile, BackendError> {
        let path = cfg.path.as_path();
        let file = open_with(path, read_only, true).map_err(|e| open_error(path, read_only, e))?;
        let meta = file
            .metadata()
            .map_err(|e| open_error(path, read_only, e))?;
        if !meta.file_type().is_block_device() {
            return Err(BackendError::BadFile {
                path: path.to_owned(),
                what: "is not a block device (use kind = \"file\" for regular files)".into(),
            });
        }
        let mut lbs: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one int through the pointer, which is valid.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut lbs) } != 0 {
            return Err(open_error(path, read_only, std::io::Error::last_os_error()));
        }
        let lbs = lbs.max(512) as u32;
        if block_size < lbs {
            return Err(BackendError::BlockSize {
                path: path.to_owned(),
                block_size,
                device_block_size: lbs,
            });
        }
        let mem_align = match dio_align(&file) {
            Some((mem, _)) if mem > 0 => mem as usize,
            _ => lbs as usize,
        };
        use std::io::Seek;
        let len = (&file)
            .seek(std::io::SeekFrom::End(0))
            .map_err(|e| open_error(path, read_only, e))?;
        let zeroes = block_device_writes_zeroes(&meta);
        if !zeroes {
            tracing::info!(path = %path.display(), "the device has no WRITE ZEROES: deallocate \
                is advisory and deallocated blocks are not reported to read as zeroes");
        }
        if cfg.poll {
            check_poll_queues(path, &meta)?;
        }
        let mut f = Self::finish(path, file, len, block_size, read_only, true, mem_align)?;
        if let Some(state) = Arc::get_mut(&mut f.0) {
            state.deallocate_zeroes = zeroes;
            state.poll = cfg.poll;
        }
        if cfg.poll {
            tracing::info!(path = %path.display(), "reads and writes polled (poll = true)");
        }
        Ok(f)
    }

    fn finish(
        path: &Path,
        file: File,
        len: u64,
        block_size: u32,
        read_only: bool,
        direct: bool,
        mem_align: usize,
    ) -> Result<UringFile, BackendError> {
        let num_blocks = len / u64::from(block_size);
        if num_blocks == 0 {
            return Err(BackendError::BadFile {
                path: path.to_owned(),
                what: format!(
                    "is {len} bytes, smaller than one {block_size}-byte block \
                     (give it a size, or set create_size for a new file)"
                ),
            });
        }
        if len % u64::from(block_size) != 0 {
            tracing::warn!(
                path = %path.display(),
                "size {len} is not a multiple of the block size {block_size}; the tail is unused"
            );
        }
        tracing::info!(path = %path.display(), direct, num_blocks, block_size, "opened backend");
        Ok(UringFile(Arc::new(FileState {
            path: path.to_owned(),
            file,
            block_size,
            num_blocks: AtomicU64::new(num_blocks),
            read_only,
            direct,
            mem_align,
            zero_range: AtomicBool::new(true),
            deallocate_zeroes: true,
            ignore_durability: ignore_durability_for_tests(path),
            poll: false,
        })))
    }

    /// Whether I/O goes through O_DIRECT (false after a buffered fallback).
    pub fn is_direct(&self) -> bool {
        self.0.direct
    }

    /// Buffer address alignment O_DIRECT needs (1 when buffered).
    pub fn mem_align(&self) -> usize {
        self.0.mem_align
    }

    pub fn path(&self) -> &Path {
        &self.0.path
    }
}

impl Backend for UringFile {
    fn block_size(&self) -> u32 {
        self.0.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.0.num_blocks.load(Ordering::Acquire)
    }

    fn refresh_capacity(&self) -> Result<Option<u64>, String> {
        use std::io::Seek;
        let f = &self.0;
        let len = (&f.file)
            .seek(std::io::SeekFrom::End(0))
            .map_err(|e| format!("{}: size: {e}", f.path.display()))?;
        let blocks = len / u64::from(f.block_size);
        let old = f.num_blocks.load(Ordering::Acquire);
        if blocks < old {
            return Err(format!(
                "{} shrank from {old} to {blocks} blocks: not applied (hosts may hold data \
                 there; remove and add the namespace to shrink it)",
                f.path.display()
            ));
        }
        if blocks == old {
            return Ok(None);
        }
        f.num_blocks.store(blocks, Ordering::Release);
        tracing::info!(path = %f.path.display(), old, blocks, "namespace grew");
        Ok(Some(blocks))
    }

    fn read_only(&self) -> bool {
        self.0.read_only
    }

    fn deallocated_reads_zeroes(&self) -> bool {
        self.0.deallocate_zeroes
    }

    fn open_queue(&self, io: &WorkerIo, depth: u32) -> Result<Box<dyn BackendQueue>, BackendError> {
        let ring = io.ring()?;
        let route = ring.borrow_mut().add_route(depth);
        let polled = if self.0.poll {
            let mut p = Ring::new_polled(depth, io.arena())?;
            let route = p.add_route(depth);
            Some((Rc::new(RefCell::new(p)), route))
        } else {
            None
        };
        Ok(Box::new(UringQueue {
            file: Arc::clone(&self.0),
            ring,
            route,
            polled,
            depth,
            in_flight: 0,
        }))
    }
}

/// `poll = true` on a device whose queue does not poll: the error naming the fix.
fn check_poll_queues(path: &Path, meta: &std::fs::Metadata) -> Result<(), BackendError> {
    use std::os::unix::fs::MetadataExt;
    if queue_polls(meta.rdev()) == Some(true) {
        return Ok(());
    }
    Err(BackendError::BadFile {
        path: path.to_owned(),
        what: "poll = true, but the device's queue does not poll (queue/io_poll is not 1): \
               for NVMe boot with nvme.poll_queues=N (or `modprobe nvme poll_queues=N`), or \
               remove poll = true to use interrupts"
            .into(),
    })
}

/// Whether the request queue of block device `rdev` (a partition: its disk's) takes polled
/// I/O (sysfs `queue/io_poll`); None if sysfs does not say.
pub fn queue_polls(rdev: u64) -> Option<bool> {
    let dev = format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev));
    ["queue/io_poll", "../queue/io_poll"]
        .iter()
        .find_map(|q| std::fs::read_to_string(format!("{dev}/{q}")).ok())
        .map(|v| v.trim() == "1")
}

#[cfg(test)]
mod tests {
    use super::direct_io_alignment;

    #[test]
    fn buffered_fallback_when_direct_io_is_unsupported_or_too_coarse() {
        // tmpfs before Linux 6.6 and FUSE report no direct-I/O alignment.
        assert!(direct_io_alignment(Some((0, 0)), 4096).is_err());
        // A 4Kn device under a 512-byte namespace.
        assert!(direct_io_alignment(Some((512, 4096)), 512).is_err());
        assert_eq!(direct_io_alignment(Some((4, 512)), 512), Ok(4));
        assert_eq!(direct_io_alignment(Some((512, 512)), 4096), Ok(512));
        assert_eq!(direct_io_alignment(None, 4096), Ok(512));
    }
}
