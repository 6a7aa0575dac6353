//! The local engine: a file or block device through io_uring, the baseline the remote engines
//! are measured against.
//!
//! Opens with `O_DIRECT`; where the file system refuses it (tmpfs answers `EINVAL`) it falls
//! back to buffered I/O and says so once per process. The file is registered with the ring,
//! and so is the buffer region when the kernel allows it (then reads and writes are
//! `READ_FIXED`/`WRITE_FIXED`); otherwise plain `READ`/`WRITE` with the same buffers.
//!
//! The ring is set up the way fio's io_uring engine sets up its own (kernel 6.1 and later):
//! single issuer with deferred task work, so completions are posted when the job's thread asks
//! for them (in its `io_uring_enter`) instead of interrupting it as they finish, and the thread
//! sleeps only when nothing it waits for is done. A ring has one issuer, the job's thread, but
//! the engine is opened (and its file and buffers registered) on the main thread: the ring is
//! created disabled and enabled by the job's first poll, which makes that thread the issuer.
//! Older kernels (EINVAL) get a plain ring.

use std::fs::{File, OpenOptions as FsOpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::uring::UringCore;
use super::{
    BufRegion, Completion, Engine, EngineError, IoBuf, IoError, IoReq, Op, OpenOptions, QueueFull,
};

/// The largest region registered as one fixed buffer (the kernel's per-iovec limit is 1 GiB).
const MAX_FIXED_REGION_BYTES: usize = 1 << 30;

/// Set once the buffered fallback has been reported, so N jobs warn once.
static WARNED_BUFFERED: AtomicBool = AtomicBool::new(false);

/// io_uring on one file descriptor.
pub struct LocalEngine {
    core: UringCore<squeue::Entry, cqueue::Entry>,
    /// Kept open for the ring's registered file table.
    _file: File,
    name: &'static str,
    block_size: u32,
    capacity: u64,
    depth: u32,
}

impl std::fmt::Debug for LocalEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEngine")
            .field("name", &self.name)
            .field("block_size", &self.block_size)
            .field("capacity", &self.capacity)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl LocalEngine {
    /// Opens `path` (creating or growing a regular file to `opts.min_file_len`) and sets up a
    /// ring of `opts.queue_depth` entries.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Self, EngineError> {
        let (file, direct) = open_file(path, opts)?;
        let open_err = |err: io::Error, hint: Option<String>| EngineError::Open {
            path: path.to_path_buf(),
            err,
            hint,
        };
        let meta = file.metadata().map_err(|e| open_err(e, None))?;
        let (mut capacity, block_size) = if meta.file_type().is_block_device() {
            block_device_geometry(&file).map_err(|e| open_err(e, None))?
        } else {
            (meta.len(), 512)
        };
        if let Some(min) = opts.min_file_len {
            if meta.is_file() && capacity < min {
                file.set_len(min).map_err(|e| {
                    open_err(e, Some(format!("growing it to {min} bytes for --size")))
                })?;
                capacity = min;
            }
        }
        if opts.hipri && !direct {
            return Err(open_err(
                io::Error::from_raw_os_error(libc::EINVAL),
                Some("--hipri needs O_DIRECT, which this file system refused".into()),
            ));
        }
        if opts.hipri {
            check_poll_queues(&meta).map_err(|hint| {
                open_err(io::Error::from_raw_os_error(libc::EOPNOTSUPP), Some(hint))
            })?;
        }
        let cq_size = opts.queue_depth.saturating_mul(2);
        let builder = || {
            let mut b = IoUring::builder();
            if opts.hipri {
                b.setup_iopoll();
            }
            b
        };
        let (ring, enabled) = match builder()
            .setup_cqsize(cq_size)
            .setup_coop_taskrun()
            // The kernel flags pending task work, so a poll that does not wait (min 0) still
            // enters with GETEVENTS and runs it (the io-uring crate looks at the flag).
            .setup_taskrun_flag()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_r_disabled()
            .build(opts.queue_depth)
        {
            Ok(ring) => (ring, false),
            // Before 6.1: no deferred task work; the ring the kernel has.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                builder()
                    .setup_cqsize(cq_size)
                    .build(opts.queue_depth)
                    .map_err(|err| EngineError::Ring { op: "setup", err })?,
                true,
            ),
            Err(err) => return Err(EngineError::Ring { op: "setup", err }),
        };
        ring.submitter()
            .register_files(&[file.as_raw_fd()])
            .map_err(|err| EngineError::Ring {
                op: "register_files",
                err,
            })?;
        let depth = opts.queue_depth;
        Ok(Self {
            _file: file,
            name: match (direct, opts.hipri) {
                (true, true) => "io_uring (polled)",
                (true, false) => "io_uring",
                (false, _) => "io_uring (buffered)",
            },
            block_size,
            capacity,
            depth,
            core: UringCore::new(ring, depth, enabled),
        })
    }
}

fn open_file(path: &Path, opts: &OpenOptions) -> Result<(File, bool), EngineError> {
    let open = |direct: bool| {
        let mut o = FsOpenOptions::new();
        o.read(true)
            .write(opts.write || opts.min_file_len.is_some());
        // A missing path under /dev (but /dev/shm, a tmpfs for files) is a device that is not
        // there (its driver not loaded, a typo): never a file to create on devtmpfs.
        if opts.min_file_len.is_some() && !device_path(path) {
            o.create(true);
        }
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(path)
    };
    let hint = |e: &io::Error| match e.kind() {
        io::ErrorKind::NotFound if device_path(path) => Some(
            "no such device (is its driver loaded?); rdmablk-perf creates files, never \
             device nodes"
                .to_string(),
        ),
        io::ErrorKind::NotFound => Some("give --size to create it".to_string()),
        io::ErrorKind::PermissionDenied => {
            Some("run as a user that can open it read-write, or use a read workload".to_string())
        }
        _ => None,
    };
    if !opts.direct {
        return open(false)
            .map(|f| (f, false))
            .map_err(|e| EngineError::Open {
                path: path.to_path_buf(),
                hint: hint(&e),
                err: e,
            });
    }
    match open(true) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let f = open(false).map_err(|e| EngineError::Open {
                path: path.to_path_buf(),
                hint: hint(&e),
                err: e,
            })?;
            if !WARNED_BUFFERED.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "warning: {}: O_DIRECT refused (tmpfs?): using buffered I/O, which measures \
                     the page cache",
                    path.display()
                );
            }
            Ok((f, false))
        }
        Err(e) => Err(EngineError::Open {
            path: path.to_path_buf(),
            hint: hint(&e),
            err: e,
        }),
    }
}

/// Whether `path` names a device node's place: under /dev, but not /dev/shm.
fn device_path(path: &Path) -> bool {
    path.starts_with("/dev") && !path.starts_with("/dev/shm")
}

/// For `--hipri` on a block device: whether its queue polls (`queue/io_poll`), or what to do.
/// Regular files are left to the kernel (it fails each I/O where their device cannot poll).
fn check_poll_queues(meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if !meta.file_type().is_block_device() {
        return Ok(());
    }
    // The target's own check (`poll = true` of a block namespace); unknown: let the kernel say.
    match rdmablk_target::backend::file::queue_polls(meta.rdev()) {
        Some(false) => Err(
            "--hipri polls, and this device's queue does not (queue/io_poll is 0; \
             for NVMe boot with nvme.poll_queues=N or `modprobe nvme poll_queues=N`), or drop \
             --hipri"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// (bytes, logical block size) of a block device.
fn block_device_geometry(file: &File) -> io::Result<(u64, u32)> {
    const BLKSSZGET: libc::c_ulong = 0x1268;
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut bytes: u64 = 0;
    let mut lbs: libc::c_int = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points at a live u64.
    if unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64 as _, &mut bytes as *mut u64) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: BLKSSZGET writes one int through the pointer, which points at a live c_int.
    if unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            BLKSSZGET as _,
            &mut lbs as *mut libc::c_int,
        )
    } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok((bytes, lbs.max(512) as u32))
}

impl Engine for LocalEngine {
    fn name(&self) -> &str {
        self.name
    }

    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn queue_depth(&self) -> u32 {
        self.depth
    }

    fn alloc_buffers(&mut self, count: usize, len: usize) -> Result<Vec<IoBuf>, EngineError> {
        let (region, bufs) = BufRegion::carve(count, len)?;
        if self.core.fixed.is_none() && region.len() <= MAX_FIXED_REGION_BYTES {
            let iov = libc::iovec {
                iov_base: region.as_ptr().cast(),
                iov_len: region.len(),
            };
            // SAFETY: the iovec names live memory that `self.fixed` keeps alive for as long as
            // the ring (which unregisters on drop) exists.
            match unsafe { self.core.ring.submitter().register_buffers(&[iov]) } {
                Ok(()) => self.core.fixed = Some(Arc::clone(&region)),
                Err(e) => tracing::debug!("register_buffers: {e}: using plain READ/WRITE"),
            }
        }
        Ok(bufs)
    }

    fn submit(&mut self, mut req: IoReq) -> Result<(), QueueFull> {
        debug_assert!(req.len as usize <= req.buf.len());
        let Some(slot) = self.core.reserve() else {
            return Err(QueueFull(req));
        };
        let fd = types::Fixed(0);
        let ptr = req.buf.as_mut_ptr();
        let sqe = match (req.op, self.core.is_fixed(&req.buf)) {
            (Op::Read, true) => opcode::ReadFixed::new(fd, ptr, req.len, 0)
                .offset(req.offset)
                .build(),
            (Op::Read, false) => opcode::Read::new(fd, ptr, req.len)
                .offset(req.offset)
                .build(),
            (Op::Write, true) => opcode::WriteFixed::new(fd, ptr, req.len, 0)
                .offset(req.offset)
                .build(),
            (Op::Write, false) => opcode::Write::new(fd, ptr, req.len)
                .offset(req.offset)
                .build(),
        }
        .user_data(u64::from(slot));
        // SAFETY: the SQE names the request's buffer (parked by `push` until its CQE is
        // reaped), fixed buffer 0 (the region `core.fixed` keeps) and the fixed file 0, both
        // registered for the ring's life.
        unsafe { self.core.push(slot, &sqe, req) }
    }

    fn poll(
        &mut self,
        out: &mut Vec<Completion>,
        min_complete: usize,
    ) -> Result<usize, EngineError> {
        self.core.poll(out, min_complete, |res, f| {
            if res < 0 {
                Err(IoError::Os(-res))
            } else if res as u32 != f.len {
                Err(IoError::Short {
                    done: res as u32,
                    len: f.len,
                })
            } else {
                Ok(())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(path: &Path, len: u64) -> LocalEngine {
        let opts = OpenOptions {
            numjobs: 1,
            queue_depth: 4,
            write: true,
            direct: true,
            hipri: false,
            min_file_len: Some(len),
        };
        LocalEngine::open(path, &opts).unwrap()
    }

    #[test]
    fn write_then_read_round_trips_and_reports_short_reads() {
        let path = std::env::temp_dir().join(format!("rdmablk-local-{}", std::process::id()));
        let mut e = engine(&path, 64 << 10);
        assert_eq!(e.capacity(), 64 << 10);
        let mut bufs = e.alloc_buffers(2, 8192).unwrap();
        let mut out = Vec::with_capacity(4);
        let (mut rb, mut wb) = (bufs.pop().unwrap(), bufs.pop().unwrap());
        wb.as_mut_slice().fill(0xab);
        e.submit(IoReq {
            op: Op::Write,
            offset: 4096,
            len: 8192,
            buf: wb,
            tag: 7,
        })
        .unwrap();
        assert_eq!(e.poll(&mut out, 1).unwrap(), 1);
        let c = out.pop().unwrap();
        assert_eq!((c.tag, c.op, c.result.clone()), (7, Op::Write, Ok(())));
        rb.as_mut_slice().fill(0);
        e.submit(IoReq {
            op: Op::Read,
            offset: 4096,
            len: 8192,
            buf: rb,
            tag: 8,
        })
        .unwrap();
        e.poll(&mut out, 1).unwrap();
        let c = out.pop().unwrap();
        assert_eq!(c.result, Ok(()));
        assert!(c.buf.as_slice().iter().all(|&b| b == 0xab));
        let end = (64 << 10) - 4096;
        e.submit(IoReq {
            op: Op::Read,
            offset: end,
            len: 8192,
            buf: c.buf,
            tag: 9,
        })
        .unwrap();
        e.poll(&mut out, 1).unwrap();
        assert_eq!(
            out.pop().unwrap().result,
            Err(IoError::Short {
                done: 4096,
                len: 8192
            })
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn queue_full_gives_the_request_back() {
        let path = std::env::temp_dir().join(format!("rdmablk-local-qf-{}", std::process::id()));
        let mut e = engine(&path, 64 << 10);
        let mut bufs = e.alloc_buffers(5, 4096).unwrap();
        for tag in 0..4 {
            let buf = bufs.pop().unwrap();
            e.submit(IoReq {
                op: Op::Read,
                offset: 0,
                len: 4096,
                buf,
                tag,
            })
            .unwrap();
        }
        let buf = bufs.pop().unwrap();
        let QueueFull(back) = e
            .submit(IoReq {
                op: Op::Read,
                offset: 0,
                len: 4096,
                buf,
                tag: 4,
            })
            .unwrap_err();
        assert_eq!(back.tag, 4);
        let mut out = Vec::new();
        while out.len() < 4 {
            e.poll(&mut out, 4).unwrap();
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_missing_device_is_never_created_under_dev() {
        let path = Path::new("/dev/rdmablk-perf-no-such-device");
        let opts = OpenOptions {
            numjobs: 1,
            queue_depth: 1,
            write: true,
            direct: true,
            hipri: false,
            min_file_len: Some(1 << 20),
        };
        let e = LocalEngine::open(path, &opts).unwrap_err();
        assert!(e.to_string().contains("no such device"), "{e}");
        assert!(!path.exists(), "a file was created under /dev");
    }

    #[test]
    fn missing_file_without_size_names_the_fix() {
        let opts = OpenOptions {
            numjobs: 1,
            queue_depth: 1,
            write: false,
            direct: true,
            hipri: false,
            min_file_len: None,
        };
        let e = LocalEngine::open(Path::new("/nonexistent/rdmablk"), &opts).unwrap_err();
        assert!(e.to_string().contains("give --size to create it"), "{e}");
    }
}
