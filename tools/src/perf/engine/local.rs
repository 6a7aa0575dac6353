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

use io_uring::{opcode, types, IoUring};

use super::{
    BufRegion, Completion, Engine, EngineError, IoBuf, IoError, IoReq, Op, OpenOptions, QueueFull,
};

/// The largest region registered as one fixed buffer (the kernel's per-iovec limit is 1 GiB).
const MAX_FIXED_REGION_BYTES: usize = 1 << 30;

/// Set once the buffered fallback has been reported, so N jobs warn once.
static WARNED_BUFFERED: AtomicBool = AtomicBool::new(false);

/// A request the kernel holds.
#[derive(Debug)]
struct InFlight {
    tag: u64,
    op: Op,
    offset: u64,
    len: u32,
    /// Kept here so the memory outlives the kernel's use of it.
    buf: IoBuf,
}

/// io_uring on one file descriptor.
pub struct LocalEngine {
    ring: IoUring,
    /// Kept open for the ring's registered file table.
    _file: File,
    name: &'static str,
    block_size: u32,
    capacity: u64,
    depth: u32,
    /// The region registered as fixed buffer 0, if any.
    fixed: Option<Arc<BufRegion>>,
    /// In-flight requests, indexed by the SQE's user_data.
    slots: Vec<Option<InFlight>>,
    free_slots: Vec<u32>,
    /// False until the disabled ring is enabled by its issuing thread ([`Self::enable`]).
    enabled: bool,
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
        let cq_size = opts.queue_depth.saturating_mul(2);
        let (ring, enabled) = match IoUring::builder()
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
                IoUring::builder()
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
            ring,
            _file: file,
            name: if direct {
                "io_uring"
            } else {
                "io_uring (buffered)"
            },
            block_size,
            capacity,
            depth,
            fixed: None,
            slots: (0..depth).map(|_| None).collect(),
            free_slots: (0..depth).rev().collect(),
            enabled,
        })
    }

    /// Enables a ring created disabled: the calling thread becomes its only issuer. From
    /// then on every submit, wait and registration must come from that thread (the kernel
    /// answers EEXIST otherwise, and `Drop` would leak the buffers in flight): a job's engine
    /// is enabled, used and dropped on the job's thread (`Worker::run`).
    fn enable(&mut self) -> io::Result<()> {
        if !self.enabled {
            self.ring.submitter().register_enable_rings()?;
            self.enabled = true;
        }
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.depth as usize - self.free_slots.len()
    }

    fn complete(&mut self, user_data: u64, res: i32) -> Completion {
        let slot = user_data as usize;
        let f = self.slots[slot].take().expect("completion for a free slot");
        self.free_slots.push(slot as u32);
        let result = if res < 0 {
            Err(IoError::Os(-res))
        } else if res as u32 != f.len {
            Err(IoError::Short {
                done: res as u32,
                len: f.len,
            })
        } else {
            Ok(())
        };
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

impl Drop for LocalEngine {
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
                drop(self.complete(cqe.user_data(), cqe.result()));
            }
        }
    }
}

fn open_file(path: &Path, opts: &OpenOptions) -> Result<(File, bool), EngineError> {
    let open = |direct: bool| {
        let mut o = FsOpenOptions::new();
        o.read(true)
            .write(opts.write || opts.min_file_len.is_some());
        if opts.min_file_len.is_some() {
            o.create(true);
        }
        if direct {
            o.custom_flags(libc::O_DIRECT);
        }
        o.open(path)
    };
    let hint = |e: &io::Error| match e.kind() {
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
        if self.fixed.is_none() && region.len() <= MAX_FIXED_REGION_BYTES {
            let iov = libc::iovec {
                iov_base: region.as_ptr().cast(),
                iov_len: region.len(),
            };
            // SAFETY: the iovec names live memory that `self.fixed` keeps alive for as long as
            // the ring (which unregisters on drop) exists.
            match unsafe { self.ring.submitter().register_buffers(&[iov]) } {
                Ok(()) => self.fixed = Some(Arc::clone(&region)),
                Err(e) => tracing::debug!("register_buffers: {e}: using plain READ/WRITE"),
            }
        }
        Ok(bufs)
    }

    fn submit(&mut self, mut req: IoReq) -> Result<(), QueueFull> {
        debug_assert!(req.len as usize <= req.buf.len());
        let Some(slot) = self.free_slots.pop() else {
            return Err(QueueFull(req));
        };
        let fd = types::Fixed(0);
        let ptr = req.buf.as_mut_ptr();
        let fixed = self
            .fixed
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, req.buf.region()));
        let sqe = match (req.op, fixed) {
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
        // The SQ has `depth` entries and at most `depth` requests are queued or in flight, but
        // entries are only reclaimed by a submit, so make room if the SQ is still full.
        if self.ring.submission().is_full() {
            if let Err(e) = self.enable().and_then(|()| self.ring.submit()) {
                tracing::debug!("io_uring submit to make room: {e}");
            }
        }
        // SAFETY: the buffer named by the SQE stays alive and untouched until its CQE is
        // reaped: the IoBuf (holding an Arc of its region) is parked in `slots[slot]` below and
        // only handed back by `complete`. The fixed file 0 is registered for the ring's life.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        if pushed.is_err() {
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

    fn poll(
        &mut self,
        out: &mut Vec<Completion>,
        min_complete: usize,
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
        loop {
            let Some(cqe) = self.ring.completion().next() else {
                break;
            };
            out.push(self.complete(cqe.user_data(), cqe.result()));
        }
        Ok(out.len() - before)
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
    fn missing_file_without_size_names_the_fix() {
        let opts = OpenOptions {
            numjobs: 1,
            queue_depth: 1,
            write: false,
            direct: true,
            min_file_len: None,
        };
        let e = LocalEngine::open(Path::new("/nonexistent/rdmablk"), &opts).unwrap_err();
        assert!(e.to_string().contains("give --size to create it"), "{e}");
    }
}
