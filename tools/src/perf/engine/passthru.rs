//! The passthrough engine: an NVMe namespace's generic character device (`/dev/ngXnY`) through
//! io_uring NVMe passthrough (`IORING_OP_URING_CMD`, `NVME_URING_CMD_IO`), each Read and Write
//! an NVMe command of its own. It is the command path of the target's `nvme` backend
//! (`rdmablk_target::backend::nvme`: the same Identify, the same driver limits, the same
//! passthrough entry), measured alone against fio's `io_uring_cmd` engine on the same drive
//! (`tools/bench/nvme-local`).
//!
//! Set up as fio's engine is with `fixedbufs`, `registerfiles` and (with `--hipri`) `hipri`:
//! an `SQE128 | CQE32` ring, the device a registered file, every I/O buffer a fixed buffer of
//! its own (not one region: Linux 6.1 counts a fixed command's segments to the end of its
//! registered buffer and refuses more than the driver's `max_segments`), and `--hipri` an
//! `IORING_SETUP_IOPOLL` ring, which the job's thread polls (the driver needs poll queues:
//! `nvme.poll_queues`). Without `--hipri` the ring defers task work to the job's thread, as
//! the local engine's does.

use std::fs::{File, OpenOptions as FsOpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use io_uring::{cqueue, squeue, IoUring};
use rdmablk::nvme::io::ReadWrite;
use rdmablk::nvme::opcodes::io as nvme_io;
use rdmablk::nvme::status::Status;
use rdmablk_target::backend::nvme::drive;

use super::uring::UringCore;
use super::{
    BufRegion, Completion, Engine, EngineError, IoBuf, IoError, IoReq, Op, OpenOptions, QueueFull,
};

/// The kernel registers at most this many fixed buffers in one ring (`IORING_MAX_REG_BUFFERS`).
const MAX_FIXED_BUFFERS: usize = 1 << 14;

type Uring = IoUring<squeue::Entry128, cqueue::Entry32>;

/// io_uring passthrough to one NVMe namespace.
pub struct PassthruEngine {
    core: UringCore<squeue::Entry128, cqueue::Entry32>,
    /// Kept open for the ring's registered file table.
    _file: File,
    path: PathBuf,
    name: &'static str,
    nsid: u32,
    /// The drive's LBA size, and its log2.
    block_size: u32,
    shift: u32,
    capacity: u64,
    /// The most bytes one command may carry (MDTS, the driver's limits, 64 Ki blocks).
    max_transfer: u32,
    depth: u32,
}

impl std::fmt::Debug for PassthruEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PassthruEngine")
            .field("path", &self.path)
            .field("nsid", &self.nsid)
            .field("block_size", &self.block_size)
            .field("capacity", &self.capacity)
            .field("depth", &self.depth)
            .finish_non_exhaustive()
    }
}

impl PassthruEngine {
    /// Opens the namespace at `path` (a `/dev/ngXnY`) and sets up its ring.
    pub fn open(path: &Path, opts: &OpenOptions) -> Result<Self, EngineError> {
        let fail = |err: io::Error, hint: Option<String>| EngineError::Open {
            path: path.to_path_buf(),
            err,
            hint,
        };
        let invalid = |what: String| fail(io::Error::new(io::ErrorKind::InvalidInput, what), None);
        let file = FsOpenOptions::new()
            .read(true)
            .write(opts.write)
            .open(path)
            .map_err(|e| fail(e, None))?;
        let nsid = drive::namespace_id(&file).map_err(|e| {
            fail(
                e,
                Some("not an NVMe namespace: give its generic device, /dev/ngXnY".into()),
            )
        })?;
        let admin = |what: &str, e: drive::AdminError| match e {
            drive::AdminError::Os(e)
                if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) =>
            {
                fail(
                    e,
                    Some(
                        "NVMe passthrough needs CAP_SYS_ADMIN before Linux 6.2, and write access \
                     to the device node after"
                            .into(),
                    ),
                )
            }
            e => invalid(format!("{what}: {e}")),
        };
        let ctrl =
            drive::identify_controller(&file).map_err(|e| admin("Identify Controller", e))?;
        let id = drive::identify_namespace(&file, nsid)
            .map_err(|e| admin(&format!("Identify Namespace {nsid}"), e))?;
        let block_size = id
            .block_bytes()
            .map_err(|e| invalid(format!("Identify Namespace {nsid}: {e}")))?;
        let ms = id.lbaf[id.format_index()].ms;
        if ms != 0 {
            return Err(invalid(format!(
                "its format carries {ms} bytes of metadata per block, which rdmablk-perf does \
                 not pass"
            )));
        }
        let limits = drive::driver_limits(
            Path::new("/sys"),
            drive::block_device_name(path).as_deref(),
            drive::mdts_bytes(ctrl.mdts),
        );
        if opts.hipri && !limits.poll_queues {
            return Err(fail(
                io::Error::from_raw_os_error(libc::EOPNOTSUPP),
                Some(
                    "--hipri polls, and the NVMe driver has no poll queues: boot with \
                     nvme.poll_queues=N (or `modprobe nvme poll_queues=N`), or drop --hipri"
                        .into(),
                ),
            ));
        }
        let max_transfer = limits.max_transfer.min(block_size.saturating_mul(1 << 16));
        let entries = opts.queue_depth.max(1);
        let (ring, enabled) = new_ring(entries, opts.hipri).map_err(|err| EngineError::Ring {
            op: "setup (SQE128/CQE32)",
            err,
        })?;
        ring.submitter()
            .register_files(&[file.as_raw_fd()])
            .map_err(|err| EngineError::Ring {
                op: "register_files",
                err,
            })?;
        let depth = opts.queue_depth;
        Ok(Self {
            core: UringCore::new(ring, depth, enabled),
            _file: file,
            path: path.to_path_buf(),
            name: if opts.hipri {
                "nvme passthrough (polled)"
            } else {
                "nvme passthrough"
            },
            nsid,
            block_size,
            shift: block_size.trailing_zeros(),
            capacity: id.nsze.saturating_mul(u64::from(block_size)),
            max_transfer,
            depth,
        })
    }
}

/// A passthrough completion's `res`: 0 success, below 0 the kernel's errno, above 0 the
/// drive's status field.
fn result_of(res: i32) -> Result<(), IoError> {
    match res {
        0 => Ok(()),
        r if r < 0 => Err(IoError::Os(-r)),
        r => {
            let st = Status::from_field(r as u16);
            Err(IoError::Nvme {
                sct: st.sct.bits(),
                sc: st.sc,
            })
        }
    }
}

/// The ring, and whether it is enabled already: single issuer with deferred task work
/// (created disabled, enabled by the job's thread), polled with `hipri`; where the kernel
/// refuses those flags (before 6.1), a plain ring.
fn new_ring(entries: u32, hipri: bool) -> io::Result<(Uring, bool)> {
    let mut b = Uring::builder();
    if hipri {
        b.setup_iopoll();
    }
    b.setup_coop_taskrun()
        .setup_taskrun_flag()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_r_disabled();
    match b.build(entries) {
        Ok(ring) => Ok((ring, false)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let mut b = Uring::builder();
            if hipri {
                b.setup_iopoll();
            }
            Ok((b.build(entries)?, true))
        }
        Err(e) => Err(e),
    }
}

impl Engine for PassthruEngine {
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
        if len > self.max_transfer as usize {
            return Err(EngineError::Open {
                path: self.path.clone(),
                err: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("--bs {len} is larger than one NVMe command may carry here"),
                ),
                hint: Some(format!(
                    "at most {} bytes (the drive's MDTS and the driver's max_hw_sectors_kb \
                     and max_segments): rdmablk-perf does not split a passthrough I/O",
                    self.max_transfer
                )),
            });
        }
        let (region, bufs) = BufRegion::carve(count, len)?;
        if self.core.fixed.is_none() && count <= MAX_FIXED_BUFFERS {
            let stride = len.next_multiple_of(super::BUF_ALIGN);
            let iovs: Vec<libc::iovec> = (0..count)
                .map(|i| libc::iovec {
                    // SAFETY: i * stride < region.len() (carve laid the buffers out so).
                    iov_base: unsafe { region.as_ptr().add(i * stride) }.cast(),
                    iov_len: len,
                })
                .collect();
            // SAFETY: the iovecs name live memory that `self.fixed` keeps alive for as long as
            // the ring (which unregisters on drop) exists.
            match unsafe { self.core.ring.submitter().register_buffers(&iovs) } {
                Ok(()) => self.core.fixed = Some(std::sync::Arc::clone(&region)),
                Err(e) => tracing::debug!("register_buffers: {e}: commands map their pages"),
            }
        }
        Ok(bufs)
    }

    fn submit(&mut self, mut req: IoReq) -> Result<(), QueueFull> {
        debug_assert!(req.len as usize <= req.buf.len());
        debug_assert!(req.len > 0 && req.len <= self.max_transfer);
        let Some(slot) = self.core.reserve() else {
            return Err(QueueFull(req));
        };
        let opcode = match req.op {
            Op::Read => nvme_io::READ,
            Op::Write => nvme_io::WRITE,
        };
        let sqe = ReadWrite {
            nsid: self.nsid,
            slba: req.offset >> self.shift,
            nlb: ((req.len >> self.shift) - 1) as u16,
            fua: false,
            lr: false,
            dsm: 0,
        }
        .to_sqe(opcode, 0);
        let fixed = self.core.is_fixed(&req.buf);
        let entry = drive::uring_cmd(
            &sqe,
            req.buf.as_mut_ptr() as u64,
            req.len,
            fixed.then(|| req.buf.index() as u16),
        )
        .user_data(u64::from(slot));
        // SAFETY: the entry names the request's buffer (parked by `push` until its CQE is
        // reaped), its own fixed buffer (the region `core.fixed` keeps) and the fixed file 0,
        // both registered for the ring's life.
        unsafe { self.core.push(slot, &entry, req) }
    }

    fn poll(
        &mut self,
        out: &mut Vec<Completion>,
        min_complete: usize,
    ) -> Result<usize, EngineError> {
        self.core.poll(out, min_complete, |res, _| result_of(res))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_carry_the_drives_status_or_the_errno() {
        assert_eq!(result_of(0), Ok(()));
        assert_eq!(result_of(-libc::EIO), Err(IoError::Os(libc::EIO)));
        // LBA Out of Range (SCT 0, SC 0x80) with DNR, as the driver puts it in `res`.
        assert_eq!(result_of(0x4080), Err(IoError::Nvme { sct: 0, sc: 0x80 }));
        // A media error (SCT 2, SC 0x81).
        assert_eq!(result_of(0x0281), Err(IoError::Nvme { sct: 2, sc: 0x81 }));
    }

    #[test]
    fn a_path_that_is_not_a_namespace_names_the_device_to_give() {
        let opts = OpenOptions {
            numjobs: 1,
            queue_depth: 1,
            write: false,
            direct: true,
            hipri: false,
            min_file_len: None,
        };
        let e = PassthruEngine::open(Path::new("/dev/null"), &opts).unwrap_err();
        assert!(e.to_string().contains("/dev/ngXnY"), "{e}");
    }
}
