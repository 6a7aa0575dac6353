//! One worker's queue to an NVMe namespace: its own io_uring with 128-byte submissions and
//! 32-byte completions (`IORING_SETUP_SQE128 | CQE32`, what `IORING_OP_URING_CMD` on
//! `/dev/ngXnY` needs), polled (`IORING_SETUP_IOPOLL`) where the drive has poll queues.
//!
//! - The arena is registered as fixed buffers and the device as a registered file: a command
//!   whose data lies in the arena goes out with `IORING_URING_CMD_FIXED`, so the kernel maps
//!   no pages per I/O. The arena is registered in pieces of the driver's segment limit
//!   (`max_segments` pages): the kernel counts a fixed command's segments to the end of its
//!   registered buffer and refuses more than the limit (EINVAL, Linux 6.1), so a fixed command
//!   never crosses a piece's end: a part that would goes without the fixed flag (the kernel maps
//!   its pages for it) instead of being cut in two.
//! - A request larger than one command may carry (the drive's MDTS, the driver's limits), or
//!   than 16 bits of blocks, is split into parts; its completion waits for them all and
//!   carries the first failure. Parts are issued as the completion queue has room, so a
//!   request of any size fits a ring of the queue's depth.
//! - A completion's result is the drive's status (`cqe.res`: the 15-bit status field), or a
//!   negated errno from the kernel; the drive's status goes back to the host unchanged.
//! - Interrupt mode registers the worker's eventfd, so an idle worker sleeps until the drive
//!   answers; polled mode leaves the worker polling while commands are in flight. A polled
//!   queue sends its commands without data (Flush, Write Zeroes) through a second,
//!   interrupt-driven ring: Linux 6.1 polls a passthrough command through its bio, and such a
//!   command has none, so polled it never completes (seen in the VM: `blkdiscard -z` hung).
//!
//! Nothing allocates per request: slots, range lists and the completion list are made for the
//! queue's depth when it opens.

use std::cell::Cell;
use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::Arc;

use io_uring::{cqueue, squeue, IoUring};
use rdmablk::nvme::io::{flush_sqe, Dsm, DsmRange, ReadWrite, WriteZeroes};
use rdmablk::nvme::opcodes::io;
use rdmablk::nvme::status::Status;

use super::drive::uring_cmd;
use super::DriveState;
use crate::arena::Arena;
use crate::backend::{
    check_request, BackendError, BackendQueue, Completion, IoError, IoErrorKind, IoOp, IoRequest,
    OpKind, SubmitError,
};
use crate::ring::uring::fixed_chunks;
use crate::ring::WorkerIo;

type Uring = IoUring<squeue::Entry128, cqueue::Entry32>;

/// io_uring registers at most this many fixed buffers (IORING_MAX_REG_BUFFERS): an arena of
/// more chunks than that has its rest served without.
const MAX_FIXED_BUFFERS: usize = 1 << 14;

/// A request in flight: how far its parts have been issued, how many are out, the first error.
#[derive(Clone, Copy)]
struct Pending {
    req: IoRequest,
    /// Namespace blocks issued so far (of `total`).
    issued: u32,
    total: u32,
    outstanding: u32,
    err: Option<IoError>,
}

pub(super) struct NvmeQueue {
    // Dropped first (field order; `Drop` drains it before): the kernel's references to the
    // fixed buffers and the file go before the arena and the file can.
    ring: Uring,
    drive: Arc<DriveState>,
    /// The arena's registered part: `fixed_count` buffers of `fixed_len` bytes from
    /// `fixed_base` (none: 0).
    fixed_base: usize,
    fixed_len: usize,
    fixed_count: usize,
    _arena: Option<Arc<Arena>>,
    depth: u32,
    slots: Vec<Option<Pending>>,
    free: Vec<u32>,
    /// Slots with parts still to issue, oldest first.
    to_issue: VecDeque<u32>,
    /// One Dataset Management range per slot (the command's data).
    ranges: Box<[[u8; 16]]>,
    /// Zeroes for drives without Write Zeroes (`None` when the drive has it).
    zeroes: Option<Box<[u8]>>,
    done: VecDeque<Completion>,
    /// Polled queues only: an interrupt-driven ring for the commands without data (Flush,
    /// Write Zeroes). Linux 6.1 polls a passthrough command through its bio, and one without
    /// data has none: polled, it would never be seen to complete.
    side: Option<Uring>,
    /// Parts in the kernel (`side_parts` of them in `side`), and the most a completion queue
    /// holds.
    parts: u32,
    side_parts: u32,
    part_cap: u32,
    unsubmitted: u32,
    side_unsubmitted: u32,
    in_flight: u32,
    /// Interrupt mode with the worker's eventfd: requests counted as signalling it.
    signalled: Option<Rc<Cell<u32>>>,
}

/// Registers the drive's device as the ring's file 0 (what [`uring_cmd`] names).
pub(super) fn register_file(ring: &Uring, drive: &DriveState) -> Result<(), BackendError> {
    ring.submitter()
        .register_files(&[drive.file.as_raw_fd()])
        .map_err(|source| BackendError::Uring {
            op: "register_files",
            source,
        })
}

/// A ring for `entries` submissions: polled, or with cooperative task work like the worker's
/// own ring.
pub(super) fn new_ring(entries: u32, polled: bool) -> std::io::Result<Uring> {
    let mut b = Uring::builder();
    if polled {
        return b.setup_iopoll().build(entries);
    }
    match b.setup_coop_taskrun().setup_taskrun_flag().build(entries) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Uring::builder().build(entries),
        r => r,
    }
}

impl NvmeQueue {
    pub(super) fn open(
        drive: Arc<DriveState>,
        io: &WorkerIo,
        depth: u32,
    ) -> Result<NvmeQueue, BackendError> {
        let depth = depth.max(1);
        let entries = depth.clamp(8, 4096);
        let ring = new_ring(entries, drive.polled).map_err(|source| BackendError::Uring {
            op: "setup (SQE128/CQE32)",
            source,
        })?;
        let part_cap = ring.params().cq_entries();
        // The file outlives the ring: the queue holds the drive, and Drop drains first.
        register_file(&ring, &drive)?;
        let (mut fixed_base, mut fixed_len, mut fixed_count, mut kept) = (0, 0, 0, None);
        if let Some(arena) = io.arena().filter(|_| drive.fixed_buffers) {
            let (base, len) = arena.fixed_region();
            // Buffers of at most the driver's segment limit: the kernel counts a command's
            // segments to the end of its registered buffer, and refuses more than the limit.
            let chunk = drive.fixed_chunk;
            let chunks = fixed_chunks(base as usize, len, chunk);
            let count = chunks.len().min(MAX_FIXED_BUFFERS);
            let iovecs: Vec<libc::iovec> = chunks[..count]
                .iter()
                .map(|&(b, l)| libc::iovec {
                    iov_base: b as *mut libc::c_void,
                    iov_len: l,
                })
                .collect();
            // SAFETY: the iovecs cover the arena's live mapping; the queue keeps an Arc of the
            // arena and drains and drops its ring before that Arc.
            match unsafe { ring.submitter().register_buffers(&iovecs) } {
                Ok(()) => {
                    (fixed_base, fixed_len, fixed_count) = (base as usize, chunk, count);
                    kept = Some(arena);
                }
                Err(e) => tracing::warn!(
                    path = %drive.path.display(),
                    error = %e,
                    "cannot register the arena as fixed buffers for NVMe passthrough; commands \
                     will map pages per I/O (raise RLIMIT_MEMLOCK)"
                ),
            }
        }
        let mut signalled = None;
        if !drive.polled {
            if let Some(w) = io.wake() {
                match ring.submitter().register_eventfd(w.raw_fd()) {
                    Ok(()) => signalled = Some(io.signalled_in_flight()),
                    Err(e) => tracing::debug!(error = %e, "nvme ring eventfd: worker yields"),
                }
            }
        }
        let side = if drive.polled {
            let side = new_ring(entries, false).map_err(|source| BackendError::Uring {
                op: "setup (SQE128/CQE32, commands without data)",
                source,
            })?;
            register_file(&side, &drive)?;
            Some(side)
        } else {
            None
        };
        let zeroes = (!drive.write_zeroes)
            .then(|| vec![0u8; drive.max_blocks as usize * drive.block_size as usize].into());
        Ok(NvmeQueue {
            ring,
            drive,
            fixed_base,
            fixed_len,
            fixed_count,
            _arena: kept,
            depth,
            slots: vec![None; depth as usize],
            free: (0..depth).rev().collect(),
            to_issue: VecDeque::with_capacity(depth as usize),
            ranges: vec![[0u8; 16]; depth as usize].into_boxed_slice(),
            zeroes,
            done: VecDeque::with_capacity(depth as usize),
            side,
            parts: 0,
            side_parts: 0,
            part_cap,
            unsubmitted: 0,
            side_unsubmitted: 0,
            in_flight: 0,
            signalled,
        })
    }

    /// The fixed buffer holding address `p`, and the bytes from `p` to its end.
    fn fixed_room(&self, p: usize) -> Option<(u16, usize)> {
        let off = p.checked_sub(self.fixed_base)?;
        let i = off / self.fixed_len.max(1);
        (i < self.fixed_count).then(|| (i as u16, (i + 1) * self.fixed_len - off))
    }

    /// The next part of slot `s`'s request, and the namespace blocks it covers.
    fn next_part(&mut self, s: u32) -> (squeue::Entry128, u32) {
        let d = &*self.drive;
        let p = self.slots[s as usize].expect("a slot to issue is in use");
        let left = p.total - p.issued;
        let nsid = d.nsid;
        let dlba = |lba: u64| (lba + u64::from(p.issued)) << d.shift;
        let dblocks = |n: u32| n << d.shift;
        let bytes = |n: u32| n * d.block_size;
        // A Read or Write of `n` namespace blocks from drive LBA `slba`.
        let rw = |opcode: u8, slba: u64, n: u32, fua: bool| {
            ReadWrite {
                nsid,
                slba,
                nlb: (dblocks(n) - 1) as u16,
                fua,
                lr: false,
                dsm: 0,
            }
            .to_sqe(opcode, 0)
        };
        let mut fixed = None;
        let (sqe, addr, len, n) = match p.req.op {
            IoOp::Read { lba, buf, .. } | IoOp::Write { lba, buf, .. } => {
                let n = left.min(d.max_blocks);
                let at = buf.as_ptr() as usize + bytes(p.issued) as usize;
                // In a fixed buffer when the part fits in the rest of one. A part that would
                // cross a piece's end goes whole with its pages mapped for it, rather than as
                // two commands: one drive command costs more than mapping its pages (measured,
                // tools/bench/nvme-local: 128 KiB reads split at piece ends ran 0.82x the block
                // backend).
                if let Some((i, room)) = self.fixed_room(at) {
                    if room >= bytes(n) as usize {
                        fixed = Some(i);
                    }
                }
                let (opcode, fua) = match p.req.op {
                    IoOp::Write { fua, .. } => (io::WRITE, fua),
                    _ => (io::READ, false),
                };
                (rw(opcode, dlba(lba), n, fua), at, bytes(n), n)
            }
            IoOp::WriteZeroes { lba, .. } => match &self.zeroes {
                // The drive has Write Zeroes: no data, 64 Ki drive blocks at most.
                None => {
                    let n = left.min((1 << 16) >> d.shift);
                    let sqe = WriteZeroes {
                        nsid,
                        slba: dlba(lba),
                        nlb: (dblocks(n) - 1) as u16,
                        deallocate: false,
                        fua: false,
                    }
                    .to_sqe(0);
                    (sqe, 0, 0, n)
                }
                Some(z) => {
                    let n = left.min(d.max_blocks);
                    let sqe = rw(io::WRITE, dlba(lba), n, false);
                    (sqe, z.as_ptr() as usize, bytes(n), n)
                }
            },
            IoOp::Deallocate { lba, .. } => {
                let n = left.min(u32::MAX >> d.shift);
                self.ranges[s as usize] = DsmRange {
                    cattr: 0,
                    nlb: dblocks(n),
                    slba: dlba(lba),
                }
                .encode();
                let sqe = Dsm {
                    nsid,
                    nr: 0,
                    idr: false,
                    idw: false,
                    deallocate: true,
                }
                .to_sqe(0);
                let addr = self.ranges[s as usize].as_ptr() as usize;
                (sqe, addr, 16, n)
            }
            IoOp::Flush => (flush_sqe(nsid, 0), 0, 0, left.max(1)),
        };
        (
            uring_cmd(&sqe, addr as u64, len, fixed).user_data(u64::from(s)),
            n,
        )
    }

    /// Issues parts while the completion queue has room for their answers.
    fn issue(&mut self) {
        while let Some(&s) = self.to_issue.front() {
            if self.parts >= self.part_cap {
                return;
            }
            if !self.slots[s as usize].is_some_and(|p| p.issued < p.total) {
                self.to_issue.pop_front();
                continue;
            }
            let dataless = self.slots[s as usize].is_some_and(|p| match p.req.op {
                IoOp::Flush => true,
                IoOp::WriteZeroes { .. } => self.zeroes.is_none(),
                _ => false,
            });
            let (entry, n) = self.next_part(s);
            let path = &self.drive.path;
            let (ring, unsubmitted) = match &mut self.side {
                Some(side) if dataless => (side, &mut self.side_unsubmitted),
                _ => (&mut self.ring, &mut self.unsubmitted),
            };
            // SAFETY: the data named lies in the request's buffer (valid until completion by
            // the IoBuf contract), in this queue's range list or zero buffer (kept until the
            // rings are drained), and the file is registered and held by the queue.
            if unsafe { ring.submission().push(&entry) }.is_err() {
                enter(ring, unsubmitted, path);
                // SAFETY: as above.
                if unsafe { ring.submission().push(&entry) }.is_err() {
                    return;
                }
            }
            *unsubmitted += 1;
            self.parts += 1;
            if dataless && self.side.is_some() {
                self.side_parts += 1;
            }
            let p = self.slots[s as usize].as_mut().expect("in use");
            p.issued += n;
            p.outstanding += 1;
            if p.issued >= p.total {
                self.to_issue.pop_front();
            }
        }
    }

    fn reap(&mut self) {
        let mut got = [(0u32, 0i32); 32];
        loop {
            let main = take(&mut self.ring, &mut got);
            let side = match &mut self.side {
                Some(side) => take(side, &mut got[main..]),
                None => 0,
            };
            let n = main + side;
            if n == 0 {
                break;
            }
            self.parts -= n as u32;
            self.side_parts -= side as u32;
            for &(s, res) in &got[..n] {
                let Some(p) = self.slots.get_mut(s as usize).and_then(Option::as_mut) else {
                    debug_assert!(false, "completion for an unused slot {s}");
                    continue;
                };
                p.outstanding -= 1;
                if res != 0 && p.err.is_none() {
                    p.err = Some(error_of(p.req.op.kind(), res));
                    // No more parts: the request has failed.
                    p.total = p.issued;
                }
                let p = *p;
                if p.outstanding == 0 && p.issued >= p.total {
                    self.slots[s as usize] = None;
                    self.free.push(s);
                    if let Some(e) = p.err {
                        // A failure cut the request short: it may still wait to be issued.
                        self.to_issue.retain(|&t| t != s);
                        tracing::debug!(tag = p.req.tag, error = %e, "nvme passthrough failed");
                    }
                    self.done.push_back(Completion {
                        tag: p.req.tag,
                        op: p.req.op.kind(),
                        result: p.err.map_or(Ok(()), Err),
                    });
                }
            }
        }
    }
}

/// One system call: hands `ring`'s queued parts to the kernel and, polled, looks for
/// completions (or runs completions waiting as task work).
fn enter(ring: &mut Uring, unsubmitted: &mut u32, path: &std::path::Path) {
    match ring.submit_and_wait(0) {
        Ok(n) => *unsubmitted = unsubmitted.saturating_sub(n as u32),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)
            ) => {}
        Err(e) => tracing::error!(path = %path.display(), error = %e,
            "io_uring enter failed (nvme passthrough)"),
    }
}

/// Takes up to `out.len()` completions of `ring`: (slot, result) each.
fn take(ring: &mut Uring, out: &mut [(u32, i32)]) -> usize {
    let mut cq = ring.completion();
    cq.sync();
    let mut n = 0;
    for cqe in cq.take(out.len()) {
        out[n] = (cqe.user_data() as u32, cqe.result());
        n += 1;
    }
    n
}

/// A completion's result as the request's error: the drive's status, or the kernel's errno.
pub(super) fn error_of(op: OpKind, res: i32) -> IoError {
    if res < 0 {
        return IoError::from_errno(op, -res);
    }
    let st = Status::from_field(res as u16);
    IoError::new(IoErrorKind::Device {
        sct: st.sct.bits(),
        sc: st.sc,
        dnr: st.dnr,
    })
}

impl BackendQueue for NvmeQueue {
    fn submit(&mut self, req: IoRequest) -> Result<(), SubmitError> {
        if self.in_flight >= self.depth {
            return Err(SubmitError::Busy);
        }
        let d = &*self.drive;
        check_request(&req.op, d.block_size, d.num_blocks)?;
        if d.read_only && req.op.kind().modifies() {
            return Err(IoError::new(IoErrorKind::ReadOnly).into());
        }
        let total = req.op.range().map_or(1, |(_, blocks)| blocks);
        let advisory = matches!(req.op, IoOp::Deallocate { .. }) && !d.deallocate;
        let Some(s) = self.free.pop() else {
            return Err(SubmitError::Busy);
        };
        self.in_flight += 1;
        if let Some(c) = &self.signalled {
            c.set(c.get() + 1);
        }
        if advisory {
            // No Dataset Management on the drive: deallocation is advisory, done.
            self.free.push(s);
            self.done.push_back(Completion {
                tag: req.tag,
                op: OpKind::Deallocate,
                result: Ok(()),
            });
            return Ok(());
        }
        self.slots[s as usize] = Some(Pending {
            req,
            issued: 0,
            total,
            outstanding: 0,
            err: None,
        });
        self.to_issue.push_back(s);
        Ok(())
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        self.issue();
        let path = &self.drive.path;
        let polled_parts = self.drive.polled && self.parts > self.side_parts;
        if self.unsubmitted > 0 || polled_parts || self.ring.submission().taskrun() {
            enter(&mut self.ring, &mut self.unsubmitted, path);
        }
        if let Some(side) = &mut self.side {
            if self.side_unsubmitted > 0 || side.submission().taskrun() {
                enter(side, &mut self.side_unsubmitted, path);
            }
        }
        self.reap();
        // Room freed: issue what waited, now rather than at the next pass.
        if !self.to_issue.is_empty() {
            self.issue();
        }
        let mut n = 0;
        while n < out.len() {
            let Some(c) = self.done.pop_front() else {
                break;
            };
            out[n] = c;
            n += 1;
        }
        self.in_flight -= n as u32;
        if let Some(c) = &self.signalled {
            c.set(c.get() - n as u32);
        }
        n
    }

    fn in_flight(&self) -> u32 {
        self.in_flight
    }
}

impl Drop for NvmeQueue {
    fn drop(&mut self) {
        // Parts in flight name buffers the caller may free right after: wait for them.
        while self.parts > 0 {
            let parts = self.parts;
            let ring = match &mut self.side {
                Some(side) if self.parts == self.side_parts => side,
                _ => &mut self.ring,
            };
            if let Err(e) = ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    tracing::error!(error = %e, parts, "nvme ring drain failed at teardown");
                    break;
                }
            }
            self.reap();
        }
        if let Some(c) = &self.signalled {
            c.set(c.get().saturating_sub(self.in_flight));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_drives_status_goes_back_as_it_is() {
        // LBA Out of Range with Do Not Retry, as the kernel reports it (the 15-bit field).
        let e = error_of(OpKind::Write, 0x4080);
        assert_eq!(
            e.kind,
            IoErrorKind::Device {
                sct: 0,
                sc: 0x80,
                dnr: true
            }
        );
        assert_eq!(e.kind.nvme_status(), (0, 0x80));
        // Media: Unrecovered Read Error, retry allowed.
        let e = error_of(OpKind::Read, 0x281);
        assert_eq!(
            e.kind,
            IoErrorKind::Device {
                sct: 2,
                sc: 0x81,
                dnr: false
            }
        );
        // A kernel error is an errno, classified as for files.
        let e = error_of(OpKind::Read, -libc::EIO);
        assert_eq!((e.kind, e.errno), (IoErrorKind::MediaRead, libc::EIO));
        let e = error_of(OpKind::Write, -libc::EINTR);
        assert_eq!(e.kind, IoErrorKind::Internal);
    }
}
