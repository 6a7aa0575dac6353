//! A worker's queue to a file or block device: requests to io_uring entries on the worker's
//! ring, or (`poll = true`) reads and writes on the queue's own polled ring, and completions
//! back to requests (short transfers as errors, ZERO_RANGE's fallback to PUNCH_HOLE).

use std::cell::RefCell;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use io_uring::{opcode, squeue, types};

use super::{FileState, AUX_PUNCH_HOLE, AUX_ZERO_RANGE};
use crate::backend::{
    check_request, BackendQueue, Completion, IoError, IoErrorKind, IoOp, IoRequest, OpKind,
    SubmitError,
};
use crate::ring::{Ring, RingCompletion, RouteId};

pub(super) struct UringQueue {
    pub(super) file: Arc<FileState>,
    pub(super) ring: Rc<RefCell<Ring>>,
    pub(super) route: RouteId,
    /// `poll = true`: the queue's own polled ring, for reads and writes.
    pub(super) polled: Option<(Rc<RefCell<Ring>>, RouteId)>,
    pub(super) depth: u32,
    pub(super) in_flight: u32,
}

impl UringQueue {
    fn entry(&self, ring: &Ring, op: &IoOp) -> Result<(squeue::Entry, u32), IoError> {
        let f = &*self.file;
        let fd = types::Fd(f.file.as_raw_fd());
        let off = |lba: u64| lba * u64::from(f.block_size);
        let aligned = |p: *mut u8| !f.direct || (p as usize) % f.mem_align == 0;
        Ok(match *op {
            IoOp::Read { lba, buf, .. } => {
                if !aligned(buf.as_ptr()) {
                    return Err(IoError::new(IoErrorKind::InvalidRequest));
                }
                let e = match ring.fixed_index(buf.as_ptr(), buf.len() as usize) {
                    Some(i) => opcode::ReadFixed::new(fd, buf.as_ptr(), buf.len(), i)
                        .offset(off(lba))
                        .build(),
                    None => opcode::Read::new(fd, buf.as_ptr(), buf.len())
                        .offset(off(lba))
                        .build(),
                };
                (e, 0)
            }
            IoOp::Write { lba, buf, fua, .. } => {
                if !aligned(buf.as_ptr()) {
                    return Err(IoError::new(IoErrorKind::InvalidRequest));
                }
                let flags = if fua && !f.ignore_durability {
                    libc::RWF_DSYNC
                } else {
                    0
                };
                let e = match ring.fixed_index(buf.as_ptr(), buf.len() as usize) {
                    Some(i) => opcode::WriteFixed::new(fd, buf.as_ptr(), buf.len(), i)
                        .offset(off(lba))
                        .rw_flags(flags)
                        .build(),
                    None => opcode::Write::new(fd, buf.as_ptr(), buf.len())
                        .offset(off(lba))
                        .rw_flags(flags)
                        .build(),
                };
                (e, 0)
            }
            IoOp::Flush if f.ignore_durability => (opcode::Nop::new().build(), 0),
            IoOp::Flush => (
                opcode::Fsync::new(fd)
                    .flags(types::FsyncFlags::DATASYNC)
                    .build(),
                0,
            ),
            IoOp::WriteZeroes { lba, blocks } => {
                let len = u64::from(blocks) * u64::from(f.block_size);
                let (mode, aux) = if f.zero_range.load(Ordering::Relaxed) {
                    (libc::FALLOC_FL_ZERO_RANGE, AUX_ZERO_RANGE)
                } else {
                    (libc::FALLOC_FL_PUNCH_HOLE, AUX_PUNCH_HOLE)
                };
                let e = opcode::Fallocate::new(fd, len)
                    .offset(off(lba))
                    .mode(mode | libc::FALLOC_FL_KEEP_SIZE)
                    .build();
                (e, aux)
            }
            IoOp::Deallocate { lba, blocks } => {
                let len = u64::from(blocks) * u64::from(f.block_size);
                let e = opcode::Fallocate::new(fd, len)
                    .offset(off(lba))
                    .mode(libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE)
                    .build();
                (e, AUX_PUNCH_HOLE)
            }
        })
    }

    /// Submits what `ring` holds (polling it, if polled) and moves this queue's finished
    /// requests into `out`.
    fn poll_ring(&mut self, ring: &RefCell<Ring>, route: RouteId, out: &mut [Completion]) -> usize {
        let mut ring = ring.borrow_mut();
        if let Err(e) = ring.submit() {
            tracing::error!(error = %e, "io_uring submit failed");
        }
        ring.reap();
        let mut n = 0;
        while n < out.len() {
            let Some(c) = ring.take(route) else {
                break;
            };
            if let Some(done) = self.finish(&mut ring, c) {
                out[n] = done;
                n += 1;
                self.in_flight -= 1;
            }
        }
        n
    }

    /// Turns a ring completion into the request's completion, or reissues it (write zeroes on
    /// a filesystem without ZERO_RANGE) and returns `None`.
    fn finish(&self, ring: &mut Ring, c: RingCompletion) -> Option<Completion> {
        let op = c.req.op.kind();
        let done = |result| {
            Some(Completion {
                tag: c.req.tag,
                op,
                result,
            })
        };
        if c.res < 0 {
            let errno = -c.res;
            if errno == libc::EOPNOTSUPP {
                match (op, c.aux) {
                    (OpKind::WriteZeroes, AUX_ZERO_RANGE) => {
                        self.file.zero_range.store(false, Ordering::Relaxed);
                        tracing::info!(
                            path = %self.file.path.display(),
                            "ZERO_RANGE unsupported: write zeroes will punch holes"
                        );
                        let Ok((entry, aux)) = self.entry(ring, &c.req.op) else {
                            return done(Err(IoError::new(IoErrorKind::Internal)));
                        };
                        // SAFETY: fallocate names no buffer; the file is kept open by the
                        // queue (and by the kernel while the operation runs).
                        return match unsafe { ring.push(self.route, c.req, aux, entry) } {
                            Ok(()) => None,
                            Err(_) => done(Err(IoError::new(IoErrorKind::Internal))),
                        };
                    }
                    (OpKind::Deallocate, _) => return done(Ok(())),
                    _ => {}
                }
            }
            tracing::debug!(tag = c.req.tag, ?op, errno, "backend I/O failed");
            return done(Err(IoError::from_errno(op, errno)));
        }
        if let Some(buf) = c.req.op.buf() {
            if c.res as u32 != buf.len() {
                tracing::warn!(
                    tag = c.req.tag,
                    ?op,
                    got = c.res,
                    want = buf.len(),
                    "short I/O"
                );
                let kind = if op == OpKind::Read {
                    IoErrorKind::MediaRead
                } else {
                    IoErrorKind::WriteFault
                };
                return done(Err(IoError::new(kind)));
            }
        }
        done(Ok(()))
    }
}

impl BackendQueue for UringQueue {
    fn submit(&mut self, req: IoRequest) -> Result<(), SubmitError> {
        if self.in_flight >= self.depth {
            return Err(SubmitError::Busy);
        }
        let f = &*self.file;
        check_request(&req.op, f.block_size, f.num_blocks.load(Ordering::Acquire))?;
        if f.read_only && req.op.kind().modifies() {
            return Err(IoError::new(IoErrorKind::ReadOnly).into());
        }
        let (ring, route) = match &self.polled {
            Some((polled, route)) if matches!(req.op, IoOp::Read { .. } | IoOp::Write { .. }) => {
                (polled, *route)
            }
            _ => (&self.ring, self.route),
        };
        let mut ring = ring.borrow_mut();
        let (entry, aux) = self.entry(&ring, &req.op)?;
        // SAFETY: buffers are valid until completion by the IoBuf contract the caller signed;
        // the file is kept open by this queue's Arc and by the kernel's own reference.
        unsafe { ring.push(route, req, aux, entry) }.map_err(|_| SubmitError::Busy)?;
        self.in_flight += 1;
        Ok(())
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        let mut n = 0;
        if let Some((polled, route)) = &self.polled {
            let (polled, route) = (Rc::clone(polled), *route);
            n += self.poll_ring(&polled, route, out);
        }
        let ring = Rc::clone(&self.ring);
        n + self.poll_ring(&ring, self.route, &mut out[n..])
    }

    fn in_flight(&self) -> u32 {
        self.in_flight
    }
}
