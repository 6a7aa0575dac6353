//! The async API over several paths: an I/O queue ("lane") per path this queue has used, a
//! slot per request, and re-issue on another path when a path fails under a request or
//! answers with a path status.
//!
//! A request's life: `submit` takes a slot and posts it on the chosen path's lane (or, when
//! no path can take it now, parks it for re-send). On completion it goes back to the caller,
//! unless the lane failed under it (transport error: the queue stopped its QP first, so the
//! target can no longer touch the buffer) or the path answered with a path status: then it is
//! parked, and the next `poll` posts it on another path, until its deadline (`io_timeout_ms`
//! from submit) passes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use rdmablk::nvme::Sct;

use super::paths::{Paths, NO_PATH_PAUSE};
use crate::buf::IoBuf;
use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::ioqueue::{command, outcome, Completion, Lanes, Op, SubmitError};
use crate::namespace::Namespace;
use crate::queue::{Done, Queue, SubmitError as QSubmitError};

/// Fruitless polls of several lanes before the waiting thread naps.
const SPINS_BEFORE_NAP: u32 = 1000;

struct Lane {
    ctrl: Controller,
    q: Queue,
    generation: u64,
    /// The path was told of this lane's failure.
    reported: bool,
}

struct Req {
    tag: u64,
    op: Op,
    offset: u64,
    len: u32,
    /// Paths not to try again for this request (a bit each) until all were tried.
    avoid: u64,
    deadline: Instant,
    last: Option<Error>,
}

pub(crate) struct PathsQueue {
    paths: Arc<Paths>,
    ns: Namespace,
    lanes: Vec<Option<Lane>>,
    reqs: Vec<Option<Req>>,
    free: Vec<u32>,
    done: Vec<Done>,
    /// Requests waiting for a path, with their buffers.
    parked: VecDeque<(u32, IoBuf)>,
}

impl PathsQueue {
    pub fn new(paths: Arc<Paths>, ns: Namespace) -> Result<PathsQueue> {
        let depth = (0..paths.len())
            .filter_map(|i| paths.path(i).controller())
            .map(|c| c.info().queue_size)
            .min()
            .unwrap_or(paths.opts().queue_size)
            .max(1);
        let depth = usize::from(depth);
        Ok(PathsQueue {
            lanes: (0..paths.len()).map(|_| None).collect(),
            paths,
            ns,
            reqs: (0..depth).map(|_| None).collect(),
            free: (0..depth as u32).rev().collect(),
            done: Vec::with_capacity(depth),
            parked: VecDeque::with_capacity(depth),
        })
    }

    /// Posts request `slot` on a chosen path, or parks it.
    fn dispatch(&mut self, slot: u32, buf: IoBuf) {
        let nsid = self.ns.nsid();
        let req = self.reqs[slot as usize].as_mut().expect("a live slot");
        let Some((i, ctrl)) = self.paths.choose(nsid, req.avoid) else {
            req.avoid = 0;
            self.parked.push_back((slot, buf));
            return;
        };
        if !self.lane_ready(i, &ctrl) {
            let req = self.reqs[slot as usize].as_mut().expect("a live slot");
            req.avoid |= 1 << i;
            self.parked.push_back((slot, buf));
            return;
        }
        let req = self.reqs[slot as usize].as_mut().expect("a live slot");
        let (sqe, dir) = command(&self.ns, req.op, req.offset, req.len, &buf);
        let lane = self.lanes[i].as_mut().expect("lane_ready installed it");
        match lane.q.submit(sqe, dir, Some(buf), u64::from(slot)) {
            Ok(()) => {}
            Err(QSubmitError::Full(b)) => {
                self.parked
                    .push_back((slot, b.expect("the buffer comes back")));
            }
            Err(QSubmitError::Failed(e, b)) => {
                req.avoid |= 1 << i;
                req.last = Some(e);
                self.parked
                    .push_back((slot, b.expect("the buffer comes back")));
                self.report_lane(i);
            }
        }
    }

    /// Whether path `i` has a lane of `ctrl`'s current session to post on (opening one if
    /// needed). A lane of an older session is replaced once its requests are back.
    fn lane_ready(&mut self, i: usize, ctrl: &Controller) -> bool {
        if let Some(l) = &self.lanes[i] {
            let current = Arc::ptr_eq(l.ctrl.shared(), ctrl.shared())
                && l.generation == ctrl.shared().generation()
                && l.q.failure().is_none();
            if current {
                return true;
            }
            if l.q.in_flight() > 0 {
                return false;
            }
            self.close_lane(i);
        }
        match ctrl.shared().checkout_live() {
            Ok((q, generation)) => {
                self.lanes[i] = Some(Lane {
                    ctrl: ctrl.clone(),
                    q,
                    generation,
                    reported: false,
                });
                true
            }
            Err(_) => false,
        }
    }

    fn close_lane(&mut self, i: usize) {
        if let Some(l) = self.lanes[i].take() {
            l.ctrl.shared().checkin(l.q, l.generation);
        }
    }

    /// Tells the path (once) that its lane failed: it reconnects in the background.
    fn report_lane(&mut self, i: usize) {
        let Some(l) = self.lanes[i].as_mut() else {
            return;
        };
        if !l.reported {
            l.reported = true;
            let why = l.q.failure().unwrap_or("queue failed").to_string();
            self.paths.path_failed(i, &l.ctrl, l.generation, &why);
        }
    }

    /// Polls every lane once, handles what finished, re-sends parked requests; returns how
    /// many requests went to `out`.
    fn poll_once(&mut self, out: &mut Vec<Completion>) -> usize {
        let before = out.len();
        for i in 0..self.lanes.len() {
            if let Some(l) = self.lanes[i].as_mut() {
                l.q.poll(&mut self.done);
                self.handle(i, out);
            }
        }
        self.resend(out);
        out.len() - before
    }

    /// Handles the completions in `self.done`, all from lane `i`.
    fn handle(&mut self, i: usize, out: &mut Vec<Completion>) {
        let mut done = std::mem::take(&mut self.done);
        for d in done.drain(..) {
            let slot = d.tag as u32;
            let buf = d.buf.expect("async requests carry their buffer");
            let req = self.reqs[slot as usize].as_mut().expect("a live slot");
            match d.result {
                Ok(cqe) if cqe.status.sct == Sct::Path && !cqe.status.is_success() => {
                    let e = Error::Nvme {
                        op: "I/O",
                        status: cqe.status,
                    };
                    req.avoid |= 1 << i;
                    let ctrl = self.lanes[i].as_ref().map(|l| l.ctrl.clone());
                    if let Some(c) = ctrl {
                        self.paths.path_status(i, &c, &e.to_string());
                    }
                    self.repark(slot, buf, e);
                }
                Err(e) if e.needs_reconnect() => {
                    self.report_lane(i);
                    let req = self.reqs[slot as usize].as_mut().expect("a live slot");
                    req.avoid |= 1 << i;
                    if matches!(req.op, Op::Write | Op::WriteFua) && !self.paths.opts().retry_writes
                    {
                        self.finish(slot, buf, Err(e), out);
                    } else {
                        self.repark(slot, buf, e);
                    }
                }
                r => {
                    if matches!(&r, Ok(c) if c.status.is_success()) {
                        self.paths.path(i).add_commands(1);
                    }
                    let result = outcome(req.op, r);
                    self.finish(slot, buf, result, out);
                }
            }
        }
        self.done = done;
        let failed = self.lanes[i]
            .as_ref()
            .is_some_and(|l| l.q.failure().is_some() && l.q.in_flight() == 0);
        if failed {
            self.report_lane(i);
            self.close_lane(i);
        }
    }

    fn repark(&mut self, slot: u32, buf: IoBuf, why: Error) {
        self.paths.stats().add_retry();
        if let Some(r) = self.reqs[slot as usize].as_mut() {
            r.last = Some(why);
        }
        self.parked.push_back((slot, buf));
    }

    /// Posts each parked request again, or fails it once its deadline passed.
    fn resend(&mut self, out: &mut Vec<Completion>) {
        let now = Instant::now();
        for _ in 0..self.parked.len() {
            let Some((slot, buf)) = self.parked.pop_front() else {
                break;
            };
            let req = self.reqs[slot as usize].as_mut().expect("a live slot");
            if now >= req.deadline {
                let e = req.last.take().map_or_else(
                    || Error::NoPath {
                        what: "no path took the request before io_timeout_ms".into(),
                    },
                    |e| Error::NoPath {
                        what: format!("no path took the request before io_timeout_ms: {e}"),
                    },
                );
                self.finish(slot, buf, Err(e), out);
            } else {
                self.dispatch(slot, buf);
            }
        }
    }

    fn finish(&mut self, slot: u32, buf: IoBuf, result: Result<()>, out: &mut Vec<Completion>) {
        let r = self.reqs[slot as usize].take().expect("a live slot");
        self.free.push(slot);
        out.push(Completion {
            tag: r.tag,
            op: r.op,
            offset: r.offset,
            len: r.len,
            buf,
            result,
        });
    }
}

impl Lanes for PathsQueue {
    fn depth(&self) -> usize {
        self.reqs.len()
    }

    fn in_flight(&self) -> usize {
        self.reqs.len() - self.free.len()
    }

    fn submit(
        &mut self,
        op: Op,
        offset: u64,
        len: u32,
        buf: IoBuf,
        tag: u64,
    ) -> Result<(), SubmitError> {
        let Some(slot) = self.free.pop() else {
            return Err(SubmitError::QueueFull(buf));
        };
        self.reqs[slot as usize] = Some(Req {
            tag,
            op,
            offset,
            len,
            avoid: 0,
            deadline: Instant::now() + self.paths.opts().io_timeout(),
            last: None,
        });
        self.dispatch(slot, buf);
        Ok(())
    }

    /// Polls every lane once, handles what finished, re-sends parked requests.
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        Ok(self.poll_once(out))
    }

    /// Waits until at least `min` requests (capped at those in flight) have finished.
    fn wait(&mut self, out: &mut Vec<Completion>, min: usize) -> Result<usize> {
        let before = out.len();
        let want = min.min(self.in_flight());
        self.poll_once(out);
        let timeout = self.paths.opts().io_timeout();
        let mut spins = 0;
        while out.len() - before < want {
            let busy: Vec<usize> = (0..self.lanes.len())
                .filter(|&i| self.lanes[i].as_ref().is_some_and(|l| l.q.in_flight() > 0))
                .collect();
            match busy[..] {
                [] if self.parked.is_empty() => break,
                [] => std::thread::sleep(NO_PATH_PAUSE),
                [i] => {
                    let l = self.lanes[i].as_mut().expect("a busy lane");
                    // Short slices while requests are parked: they must be re-sent meanwhile.
                    let slice = if self.parked.is_empty() {
                        timeout
                    } else {
                        NO_PATH_PAUSE
                    };
                    l.q.wait(&mut self.done, slice);
                    self.handle(i, out);
                }
                _ => {
                    // Several lanes busy: no one CQ to sleep on; spin, then nap briefly.
                    spins += 1;
                    if spins > SPINS_BEFORE_NAP {
                        std::thread::sleep(std::time::Duration::from_micros(20));
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
            if self.poll_once(out) > 0 {
                spins = 0;
            }
        }
        Ok(out.len() - before)
    }
}

impl Drop for PathsQueue {
    fn drop(&mut self) {
        // Let requests in flight finish so their buffers are free to reuse, then hand back.
        let timeout = self.paths.opts().io_timeout();
        for i in 0..self.lanes.len() {
            if let Some(l) = self.lanes[i].as_mut() {
                l.q.drain(&mut self.done, timeout);
            }
            self.close_lane(i);
        }
    }
}
