//! Local NVMe namespaces through io_uring passthrough (`kind = "nvme"`): the target's I/O
//! commands go to the drive as NVMe commands (`IORING_OP_URING_CMD` on the namespace's generic
//! character device `/dev/ngXnY`, Linux 5.19+), not through the block layer's bio path.
//!
//! - [`drive`]: what the device says about itself (Identify, the driver's limits in sysfs).
//! - [`queue`]: a worker's ring to it (SQE128/CQE32, polled where the drive has poll queues).
//!
//! The namespace's geometry is the drive's: capacity from Identify Namespace (NSZE), the LBA
//! size of the format in use (a namespace `block_size` may be a multiple of it, never smaller),
//! deallocated blocks read as zeroes only where DLFEAT says so, Write Zeroes and Dataset
//! Management only where ONCS has them (otherwise zeroes are written, and deallocation is
//! advisory). Formats with metadata are refused at start. A failed command returns the drive's
//! own status to the host.

pub mod drive;
mod queue;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rdmablk::nvme::identify::oncs;
use rdmablk::nvme::io::ReadWrite;
use rdmablk::nvme::opcodes::io;
use rdmablk::nvme::status::Status;

use super::{Backend, BackendError, BackendQueue};
use crate::config::{NvmeBackendConfig, NvmeCompletions};
use crate::ring::WorkerIo;

/// An NVMe namespace served by passthrough.
#[derive(Debug)]
pub struct NvmeDrive(Arc<DriveState>);

#[derive(Debug)]
pub(crate) struct DriveState {
    pub(crate) path: PathBuf,
    pub(crate) file: File,
    pub(crate) nsid: u32,
    /// The namespace's block size, and log2 of how many drive blocks make one.
    pub(crate) block_size: u32,
    pub(crate) shift: u32,
    pub(crate) num_blocks: u64,
    pub(crate) read_only: bool,
    pub(crate) polled: bool,
    /// Namespace blocks one Read or Write command carries at most.
    pub(crate) max_blocks: u32,
    pub(crate) write_zeroes: bool,
    pub(crate) deallocate: bool,
    deallocate_zeroes: bool,
    /// The kernel maps passthrough data inside a larger registered buffer (the arena).
    pub(crate) fixed_buffers: bool,
    /// Bytes of each fixed buffer the arena is registered in (the driver's segment limit).
    pub(crate) fixed_chunk: usize,
}

fn bad(path: &Path, what: String) -> BackendError {
    BackendError::BadFile {
        path: path.to_owned(),
        what,
    }
}

/// The error for a refused passthrough command: what to change.
fn permission_hint(path: &Path, e: &std::io::Error) -> BackendError {
    bad(
        path,
        format!(
            "NVMe passthrough refused ({e}): Linux before 6.2 allows it to CAP_SYS_ADMIN only \
             (run the target as root, or with that capability); 6.2 and later to whoever may \
             open the device node for writing (check its mode and group, e.g. a udev rule)"
        ),
    )
}

impl NvmeDrive {
    pub fn open(
        cfg: &NvmeBackendConfig,
        block_size: u32,
        read_only: bool,
    ) -> Result<NvmeDrive, BackendError> {
        let path = cfg.path.as_path();
        let file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .open(path)
            .map_err(|source| BackendError::Open {
                path: path.to_owned(),
                read_only,
                source,
            })?;
        let meta = file.metadata().map_err(|source| BackendError::Open {
            path: path.to_owned(),
            read_only,
            source,
        })?;
        if !meta.file_type().is_char_device() {
            return Err(bad(
                path,
                "is not a character device: kind = \"nvme\" takes the namespace's generic \
                 device /dev/ngXnY (kind = \"block\" takes /dev/nvmeXnY)"
                    .into(),
            ));
        }
        let nsid = drive::namespace_id(&file).map_err(|e| {
            bad(
                path,
                format!("not an NVMe namespace device (NVME_IOCTL_ID: {e})"),
            )
        })?;
        let ctrl = drive::identify_controller(&file).map_err(|e| match e {
            drive::AdminError::Os(e)
                if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) =>
            {
                permission_hint(path, &e)
            }
            e => bad(path, format!("Identify Controller: {e}")),
        })?;
        let id = drive::identify_namespace(&file, nsid)
            .map_err(|e| bad(path, format!("Identify Namespace {nsid}: {e}")))?;
        let lbs = id
            .block_bytes()
            .map_err(|e| bad(path, format!("Identify Namespace {nsid}: {e}")))?;
        let ms = id.lbaf[id.format_index()].ms;
        if ms != 0 {
            return Err(bad(
                path,
                format!(
                    "the namespace's format carries {ms} bytes of metadata per block, which \
                     rdmablk does not serve: format it without (`nvme format {} --lbaf=N`, \
                     N a format with ms 0 in `nvme id-ns -H`)",
                    path.display()
                ),
            ));
        }
        if block_size < lbs || block_size % lbs != 0 {
            return Err(BackendError::BlockSize {
                path: path.to_owned(),
                block_size,
                device_block_size: lbs,
            });
        }
        let shift = (block_size / lbs).trailing_zeros();
        let num_blocks = id.nsze >> shift;
        if num_blocks == 0 {
            return Err(bad(
                path,
                format!("namespace {nsid} has no blocks (NSZE 0)"),
            ));
        }
        let block = drive::block_device_name(path);
        let limits = drive::driver_limits(
            Path::new("/sys"),
            block.as_deref(),
            drive::mdts_bytes(ctrl.mdts),
        );
        let polled =
            match (cfg.completions, limits.poll_queues) {
                (NvmeCompletions::Interrupt, _) => false,
                (NvmeCompletions::Auto | NvmeCompletions::Poll, true) => true,
                (NvmeCompletions::Poll, false) => return Err(bad(
                    path,
                    "completions = \"poll\" but the driver has no poll queues for it (boot with \
                     nvme.poll_queues=N, or `modprobe nvme poll_queues=N`; or set completions \
                     = \"auto\" to use interrupts)"
                        .into(),
                )),
                (NvmeCompletions::Auto, false) => {
                    tracing::info!(path = %path.display(), "the NVMe driver has no poll queues \
                    (nvme.poll_queues=0): completions by interrupt");
                    false
                }
            };
        // One command carries at most 64 Ki drive blocks and the driver's limit.
        let max_blocks = (limits.max_transfer / block_size).clamp(1, (1 << 16) >> shift);
        let mut state = DriveState {
            path: path.to_owned(),
            file,
            nsid,
            block_size,
            shift,
            num_blocks,
            read_only,
            polled,
            max_blocks,
            write_zeroes: ctrl.oncs & oncs::WRITE_ZEROES != 0,
            deallocate: ctrl.oncs & oncs::DSM != 0,
            // DLFEAT bits 2:0 = 001b: deallocated blocks read as zeroes.
            deallocate_zeroes: ctrl.oncs & oncs::DSM != 0 && id.dlfeat & 0x7 == 1,
            fixed_buffers: false,
            fixed_chunk: limits.segment_bytes as usize,
        };
        state.fixed_buffers = probe_uring(&state, lbs, state.fixed_chunk)?;
        if !state.fixed_buffers {
            tracing::info!(path = %path.display(), "this kernel's NVMe passthrough refused \
                data in part of a registered buffer: commands map their pages each time");
        }
        tracing::info!(
            path = %path.display(), nsid, drive_block_size = lbs, block_size, num_blocks,
            polled, fixed_buffers = state.fixed_buffers, max_transfer = max_blocks * block_size, oncs = ctrl.oncs, vwc = ctrl.vwc,
            dlfeat = id.dlfeat, "nvme passthrough namespace"
        );
        Ok(NvmeDrive(Arc::new(state)))
    }
}

/// Reads the drive's first block through io_uring (`NVME_URING_CMD_IO`, on a ring like the
/// workers', polled or not): the kernel has passthrough over io_uring and lets this process
/// use it, or the error says what to change. Then reads it again into the middle of a fixed
/// buffer of `chunk` bytes, as the queues register the arena: whether this kernel maps such
/// commands. Returns whether the queues may use fixed buffers.
fn probe_uring(d: &DriveState, lbs: u32, chunk: usize) -> Result<bool, BackendError> {
    let ring_error = |source: std::io::Error| match source.raw_os_error() {
        Some(libc::EPERM | libc::ENOSYS | libc::EACCES) => {
            BackendError::UringUnavailable { source }
        }
        _ => BackendError::Uring {
            op: "setup (SQE128/CQE32)",
            source,
        },
    };
    // `chunk` bytes from a page boundary, as an arena piece; the read takes one block in the
    // middle. Declared before the ring: the memory outlives every command the ring ran.
    let mut buf = vec![0u8; chunk.max(3 * 4096) + 4096];
    let start = buf.as_ptr().align_offset(4096);
    let piece = &mut buf[start..start + chunk.max(3 * 4096)];
    let (mem, size) = (piece.as_mut_ptr(), piece.len());
    let mut ring = queue::new_ring(8, d.polled).map_err(ring_error)?;
    queue::register_file(&ring, d)?;
    let os = |r: i32| std::io::Error::from_raw_os_error(-r);
    match probe_read(&mut ring, d, mem, lbs, false)? {
        Some(0) => {}
        Some(r) if -r == libc::EACCES || -r == libc::EPERM => {
            return Err(permission_hint(&d.path, &os(r)))
        }
        Some(r) if -r == libc::EINVAL || -r == libc::EOPNOTSUPP || -r == libc::ENOTTY => {
            return Err(bad(
                &d.path,
                format!(
                    "this kernel has no NVMe passthrough over io_uring{} ({}): it needs Linux \
                     5.19 or later (6.1 for polling); use kind = \"block\"",
                    if d.polled { " with polling" } else { "" },
                    os(r)
                ),
            ))
        }
        Some(r) if r < 0 => return Err(bad(&d.path, format!("passthrough probe: {}", os(r)))),
        Some(r) => {
            return Err(bad(
                &d.path,
                format!(
                    "passthrough probe (a read of block 0): the drive answered {}",
                    Status::from_field(r as u16)
                ),
            ))
        }
        None => return Err(bad(&d.path, "passthrough probe: no completion".into())),
    }
    let iov = libc::iovec {
        iov_base: mem.cast(),
        iov_len: size,
    };
    // SAFETY: `buf` outlives the ring (declared first, dropped last).
    if unsafe { ring.submitter().register_buffers(&[iov]) }.is_err() {
        return Ok(false);
    }
    let middle = mem.wrapping_add(size / 2 / 4096 * 4096);
    Ok(probe_read(&mut ring, d, middle, lbs, true)? == Some(0))
}

/// Reads block 0 into `mem` through `ring` (fixed buffer 0 if `fixed`); the completion's
/// result, `None` if none came.
fn probe_read(
    ring: &mut io_uring::IoUring<io_uring::squeue::Entry128, io_uring::cqueue::Entry32>,
    d: &DriveState,
    mem: *mut u8,
    lbs: u32,
    fixed: bool,
) -> Result<Option<i32>, BackendError> {
    let sqe = ReadWrite {
        nsid: d.nsid,
        slba: 0,
        nlb: 0,
        fua: false,
        lr: false,
        dsm: 0,
    }
    .to_sqe(io::READ, 0);
    let entry = drive::uring_cmd(&sqe, mem as u64, lbs, fixed.then_some(0));
    // SAFETY: `mem` and the file outlive the wait below, which reaps the completion.
    unsafe { ring.submission().push(&entry) }
        .map_err(|_| bad(&d.path, "probe: ring full".into()))?;
    for _ in 0..100_000 {
        ring.submit_and_wait(if d.polled { 0 } else { 1 })
            .map_err(|source| BackendError::Uring {
                op: "probe",
                source,
            })?;
        if let Some(c) = ring.completion().next() {
            return Ok(Some(c.result()));
        }
    }
    Ok(None)
}

impl Backend for NvmeDrive {
    fn block_size(&self) -> u32 {
        self.0.block_size
    }

    fn num_blocks(&self) -> u64 {
        self.0.num_blocks
    }

    fn read_only(&self) -> bool {
        self.0.read_only
    }

    fn deallocated_reads_zeroes(&self) -> bool {
        self.0.deallocate_zeroes
    }

    fn open_queue(&self, io: &WorkerIo, depth: u32) -> Result<Box<dyn BackendQueue>, BackendError> {
        Ok(Box::new(queue::NvmeQueue::open(
            Arc::clone(&self.0),
            io,
            depth,
        )?))
    }
}
