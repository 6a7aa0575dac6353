//! The async API's queue on one controller: one of its I/O queues, taken out of its pool for
//! as long as the [`crate::IoQueue`] lives, with a slot per request.

use std::sync::Arc;

use super::state::ControllerState;
use crate::buf::IoBuf;
use crate::error::{Error, Result};
use crate::ioqueue::{command, outcome, Completion, Lanes, Op, SubmitError};
use crate::namespace::Namespace;
use crate::queue::{Done, Queue, SubmitError as QSubmitError};

#[derive(Clone, Copy)]
struct Meta {
    tag: u64,
    op: Op,
    offset: u64,
    len: u32,
}

/// The queue of a single-path namespace.
///
/// A request its connection's loss failed (a transport error, not an NVMe status) is not
/// reported: it is parked with its buffer and slot, and sent again once the controller has
/// reconnected, as the Linux host requeues I/O until `ctrl_loss_tmo`. Only when recovery
/// gives up (the controller failed for good) do parked requests complete, with that error.
/// A request the target may have executed before the cut is sent again all the same: a
/// block write of the same data to the same place is idempotent.
pub(super) struct OnePath {
    shared: Arc<ControllerState>,
    ns: Namespace,
    q: Option<(Queue, u64)>,
    meta: Vec<Option<Meta>>,
    free: Vec<u32>,
    done: Vec<Done>,
    /// Requests to send again (slot, buffer), once there is a live queue.
    parked: Vec<(u32, IoBuf)>,
}

impl OnePath {
    /// Takes one of `shared`'s I/O queues out of its pool (waiting for one) for the async API
    /// on `ns`.
    pub(super) fn new(shared: Arc<ControllerState>, ns: Namespace) -> Result<OnePath> {
        let (q, generation) = shared.checkout()?;
        let depth = usize::from(q.entries());
        Ok(OnePath {
            shared,
            ns,
            q: Some((q, generation)),
            meta: vec![None; depth],
            free: (0..depth as u32).rev().collect(),
            done: Vec::with_capacity(depth),
            parked: Vec::with_capacity(depth),
        })
    }

    /// Replaces a failed queue once its requests have been reported: reconnects the
    /// controller if nobody has yet, then borrows a queue of the new session.
    fn ensure_queue(&mut self) -> Result<()> {
        match &self.q {
            Some((q, _)) if q.failure().is_none() => return Ok(()),
            Some((q, _)) if q.in_flight() > 0 => return Ok(()),
            _ => {}
        }
        let shared = self.shared.clone();
        if let Some((q, generation)) = self.q.take() {
            let why = q.failure().unwrap_or("queue lost").to_string();
            drop(q);
            shared.recover(generation, &why)?;
        }
        let (q, generation) = shared.checkout()?;
        // The new session may have other limits; the slot table keeps its size (submit
        // still gets QueueFull from the queue itself when it is smaller).
        self.q = Some((q, generation));
        Ok(())
    }

    /// Sends the parked requests again on a live queue, reconnecting the controller first if
    /// it must; if the controller gave up, completes them with its error. Returns how many
    /// completed.
    fn resend(&mut self, out: &mut Vec<Completion>) -> usize {
        if self.parked.is_empty() {
            return 0;
        }
        if let Err(e) = self.ensure_queue() {
            let mut n = 0;
            while let Some((slot, buf)) = self.parked.pop() {
                let what = e.to_string();
                self.complete(slot, buf, Err(Error::Disconnected { what }), out);
                n += 1;
            }
            return n;
        }
        let Some((q, _)) = self.q.as_mut() else {
            return 0;
        };
        if q.failure().is_some() {
            return 0; // its posted requests are still to be reported (then parked)
        }
        while let Some((slot, buf)) = self.parked.pop() {
            let m = self.meta[slot as usize].expect("a parked request has its slot");
            let (sqe, dir) = command(&self.ns, m.op, m.offset, m.len, &buf);
            match q.submit(sqe, dir, Some(buf), u64::from(slot)) {
                Ok(()) => self.shared.stats.add_retry(),
                Err(QSubmitError::Full(b) | QSubmitError::Failed(_, b)) => {
                    self.parked.push((slot, b.expect("buffer returned")));
                    break;
                }
            }
        }
        0
    }

    fn finish(&mut self, out: &mut Vec<Completion>) -> usize {
        let mut n = 0;
        let o = &self.shared.opts;
        let requeue = o.requeue && o.reconnect_attempts > 0;
        let mut done = std::mem::take(&mut self.done);
        for d in done.drain(..) {
            let slot = d.tag as u32;
            let buf = d.buf.expect("async requests carry their buffer");
            match d.result {
                // The connection was lost: held for the reconnect.
                Err(_) if requeue => self.parked.push((slot, buf)),
                result => {
                    let m = self.meta[slot as usize].expect("completion for a submitted slot");
                    self.complete(slot, buf, outcome(m.op, result), out);
                    n += 1;
                }
            }
        }
        self.done = done;
        n
    }

    fn complete(&mut self, slot: u32, buf: IoBuf, result: Result<()>, out: &mut Vec<Completion>) {
        let m = self.meta[slot as usize]
            .take()
            .expect("completion for a submitted slot");
        self.free.push(slot);
        out.push(Completion {
            tag: m.tag,
            op: m.op,
            offset: m.offset,
            len: m.len,
            buf,
            result,
        });
    }
}

impl Lanes for OnePath {
    fn depth(&self) -> usize {
        self.meta.len()
    }

    fn in_flight(&self) -> usize {
        self.meta.len() - self.free.len()
    }

    fn submit(
        &mut self,
        op: Op,
        offset: u64,
        len: u32,
        buf: IoBuf,
        tag: u64,
    ) -> Result<(), SubmitError> {
        if let Err(e) = self.ensure_queue() {
            return Err(SubmitError::Failed(e, buf));
        }
        if !self.parked.is_empty() {
            // Requests held across a reconnect go first.
            return Err(SubmitError::QueueFull(buf));
        }
        let Some(slot) = self.free.pop() else {
            return Err(SubmitError::QueueFull(buf));
        };
        let (sqe, dir) = command(&self.ns, op, offset, len, &buf);
        let (q, _) = self.q.as_mut().expect("ensure_queue installed a queue");
        match q.submit(sqe, dir, Some(buf), u64::from(slot)) {
            Ok(()) => {
                self.meta[slot as usize] = Some(Meta {
                    tag,
                    op,
                    offset,
                    len,
                });
                Ok(())
            }
            Err(QSubmitError::Full(b)) => {
                self.free.push(slot);
                Err(SubmitError::QueueFull(b.expect("buffer returned")))
            }
            Err(QSubmitError::Failed(e, b)) => {
                self.free.push(slot);
                Err(SubmitError::Failed(e, b.expect("buffer returned")))
            }
        }
    }

    /// Moves finished requests into `out` without blocking (but for a reconnect that parked
    /// requests wait for); returns how many.
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        if let Some((q, _)) = self.q.as_mut() {
            q.poll(&mut self.done);
        }
        let n = self.finish(out);
        Ok(n + self.resend(out))
    }

    /// Waits until at least `min` requests (capped at those in flight) have finished and
    /// moves every finished one into `out`; returns how many.
    fn wait(&mut self, out: &mut Vec<Completion>, min: usize) -> Result<usize> {
        let want = min.min(self.meta.len() - self.free.len());
        let mut got = self.poll(out)?;
        let timeout = self.shared.opts.io_timeout();
        while got < want {
            if let Some((q, _)) = self.q.as_mut() {
                q.wait(&mut self.done, timeout);
            }
            got += self.finish(out);
            got += self.resend(out);
            let idle = self.q.as_ref().map_or(true, |(q, _)| q.in_flight() == 0);
            if idle && self.parked.is_empty() && got < want {
                break;
            }
        }
        Ok(got)
    }
}

impl Drop for OnePath {
    fn drop(&mut self) {
        let Some((mut q, generation)) = self.q.take() else {
            return;
        };
        // Let requests in flight finish so their buffers are free to reuse, then hand back.
        q.drain(&mut self.done, self.shared.opts.io_timeout());
        self.shared.checkin(q, generation);
    }
}
