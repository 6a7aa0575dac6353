//! One NVMe-oF queue (admin or I/O) as the initiator sees it, whatever carries it: request
//! tracking by command ID, deadlines, held commands, stray completions, failure. Its
//! transport ([`crate::transport::QueueTransport`]) sends the capsules and reports what
//! arrives.
//!
//! A request's life (`ReqState`): `Free` -> `Posted` (capsule sent, waiting for both the
//! transport's word that it left and the response) -> completed, back to `Free`. A command
//! ID is reused only after its capsule left *and* its response arrived (the same rule as the
//! Linux host). A queue that fails (transport failure, disconnect, malformed response,
//! command timeout) is disconnected first, then every posted request completes with a
//! transport error: once the transport is stopped the target can no longer reach their
//! buffers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::nvme::{Cqe, Sqe};

use crate::buf::IoBuf;
use crate::error::{Error, Result};
use crate::stats::Stats;
pub(crate) use crate::transport::{Dir, Seg};
use crate::transport::{Event, Fabric, QueueParams, QueueTransport};

#[cfg(test)]
mod wait_tests;

/// How often a busy queue looks at connection events and command deadlines.
const HOUSEKEEPING: Duration = Duration::from_millis(10);

/// A finished request.
#[derive(Debug)]
pub(crate) struct Done {
    pub tag: u64,
    /// The response, whatever its status; `Err` if the queue failed first.
    pub result: Result<Cqe>,
    pub buf: Option<IoBuf>,
}

/// Why a submission was not queued; the buffer comes back.
#[derive(Debug)]
pub(crate) enum SubmitError {
    Full(Option<IoBuf>),
    Failed(Error, Option<IoBuf>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReqState {
    Free,
    Posted,
}

struct Req {
    state: ReqState,
    tag: u64,
    buf: Option<IoBuf>,
    send_done: bool,
    cqe: Option<Cqe>,
    /// How long the command may take; `None` for a command the controller holds on purpose
    /// (Asynchronous Event Request).
    timeout: Option<Duration>,
    /// When it times out: set by the first housekeeping after it was posted (no clock read
    /// per command; a deadline late by up to [`HOUSEKEEPING`] is no matter).
    deadline: Option<Instant>,
    /// Reads at least [`LARGE_READ`] bytes: see [`Queue::wait`].
    large: bool,
}

/// Reads from this size up arrive as payloads larger than what a thread waiting for the
/// transport parses itself (the soft RDMA provider); [`Queue::wait`] leaves them to the
/// transport's own threads, which copy them while this thread goes on.
const LARGE_READ: u32 = 64 * 1024;

pub(crate) struct Queue {
    qid: u16,
    entries: u16,
    link: Box<dyn QueueTransport>,
    reqs: Vec<Req>,
    free: Vec<u16>,
    posted: usize,
    /// Posted requests that are large reads.
    large_posted: usize,
    cmd_timeout: Duration,
    /// How long [`Queue::wait`] polls after the last progress before it sleeps.
    poll_spin: Duration,
    failed: Option<String>,
    next_housekeeping: Instant,
    /// What the transport reported in a poll (capacity kept).
    events: Vec<Event>,
    /// Completions of other commands (a held Asynchronous Event Request) that arrived while
    /// [`Queue::exec`] waited for its own: see [`Queue::take_stray`].
    stray: Vec<Done>,
    /// The session's abort switch (see `Session::abort`).
    abort: Option<Arc<AtomicBool>>,
}

impl Queue {
    /// Connects queue `p.qid` over `fab` (no NVMe command yet); each command gets
    /// `cmd_timeout` for its response.
    pub fn connect(
        fab: &dyn Fabric,
        p: &QueueParams,
        cmd_timeout: Duration,
        stats: Arc<Stats>,
    ) -> Result<Queue> {
        Ok(Queue::new(
            p.qid,
            p.entries,
            fab.connect(p, stats)?,
            cmd_timeout,
        ))
    }

    /// A queue of `entries` commands over a connected transport.
    pub fn new(
        qid: u16,
        entries: u16,
        link: Box<dyn QueueTransport>,
        cmd_timeout: Duration,
    ) -> Queue {
        let n = usize::from(entries);
        Queue {
            qid,
            entries,
            link,
            reqs: (0..n)
                .map(|_| Req {
                    state: ReqState::Free,
                    tag: 0,
                    buf: None,
                    send_done: false,
                    cqe: None,
                    timeout: None,
                    deadline: None,
                    large: false,
                })
                .collect(),
            free: (0..entries).rev().collect(),
            posted: 0,
            large_posted: 0,
            cmd_timeout,
            poll_spin: Duration::from_micros(u64::from(crate::options::DEFAULT_POLL_SPIN_US)),
            failed: None,
            next_housekeeping: Instant::now(),
            events: Vec::with_capacity(2 * n + 8),
            stray: Vec::new(),
            abort: None,
        }
    }

    pub fn qid(&self) -> u16 {
        self.qid
    }

    pub fn entries(&self) -> u16 {
        self.entries
    }

    /// Commands posted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.posted
    }

    /// The push-write slots (how many, how large), if the target granted them.
    pub fn push_slots(&self) -> Option<(u16, u32)> {
        self.link.push_slots()
    }

    pub fn set_in_capsule_bytes(&mut self, n: u32) {
        self.link.set_in_capsule_bytes(n);
    }

    /// The time each command posted from now on gets for its response (an I/O queue gets
    /// `io_timeout_ms` once its Connect is done; its Connect had `connect_timeout_ms`).
    pub fn set_cmd_timeout(&mut self, timeout: Duration) {
        self.cmd_timeout = timeout;
    }

    /// How long [`Queue::wait`] polls after the last progress before it sleeps (the
    /// `poll_spin_us` option; 0: only its 64 polls).
    pub fn set_poll_spin(&mut self, spin: Duration) {
        self.poll_spin = spin;
    }

    /// Makes the queue fail at its next housekeeping once `abort` is set.
    pub fn set_abort(&mut self, abort: Arc<AtomicBool>) {
        self.abort = Some(abort);
    }

    /// Why the queue failed, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Posts a command. `sqe`'s cid and data pointer are filled in here. `buf` is kept until
    /// completion (it is what `dir` points into, or `None` when the caller keeps the memory
    /// alive across the command itself).
    pub fn submit(
        &mut self,
        sqe: Sqe,
        dir: Dir,
        buf: Option<IoBuf>,
        tag: u64,
    ) -> Result<(), SubmitError> {
        self.post(sqe, dir, buf, tag, Some(self.cmd_timeout))
    }

    /// Posts a command the controller holds until it has something to say (Asynchronous
    /// Event Request): no timeout applies to it.
    pub fn submit_held(&mut self, sqe: Sqe, tag: u64) -> Result<()> {
        match self.post(sqe, Dir::None, None, tag, None) {
            Ok(()) => Ok(()),
            Err(SubmitError::Failed(e, _)) => Err(e),
            Err(SubmitError::Full(_)) => Err(Error::protocol("no free command ID on the queue")),
        }
    }

    fn post(
        &mut self,
        mut sqe: Sqe,
        dir: Dir,
        buf: Option<IoBuf>,
        tag: u64,
        timeout: Option<Duration>,
    ) -> Result<(), SubmitError> {
        if let Some(why) = &self.failed {
            let e = Error::Transport {
                qid: self.qid,
                what: why.clone(),
            };
            return Err(SubmitError::Failed(e, buf));
        }
        let Some(cid) = self.free.pop() else {
            return Err(SubmitError::Full(buf));
        };
        sqe.cid = cid;
        if let Err(e) = self.link.send(sqe, dir) {
            self.free.push(cid);
            self.fail(e.to_string());
            return Err(SubmitError::Failed(e, buf));
        }
        let large = matches!(dir, Dir::ToHost(s) if s.len >= LARGE_READ);
        let r = &mut self.reqs[usize::from(cid)];
        debug_assert_eq!(r.state, ReqState::Free);
        *r = Req {
            state: ReqState::Posted,
            tag,
            buf,
            send_done: false,
            cqe: None,
            timeout,
            deadline: None,
            large,
        };
        self.posted += 1;
        self.large_posted += usize::from(large);
        tracing::trace!(
            qid = self.qid,
            cid,
            opcode = sqe.opcode,
            "request Free -> Posted"
        );
        Ok(())
    }

    /// Moves finished requests into `out` without blocking; returns how many.
    pub fn poll(&mut self, out: &mut Vec<Done>) -> usize {
        self.poll_at(out, Instant::now())
    }

    /// [`Queue::poll`] at `now` (the caller read the clock already).
    fn poll_at(&mut self, out: &mut Vec<Done>, now: Instant) -> usize {
        let before = out.len();
        if self.failed.is_none() {
            self.poll_link(out);
        }
        if self.failed.is_none() && now >= self.next_housekeeping {
            self.housekeeping(now);
        }
        if self.failed.is_some() {
            self.fail_posted(out);
        }
        out.len() - before
    }

    fn poll_link(&mut self, out: &mut Vec<Done>) {
        let mut events = std::mem::take(&mut self.events);
        let polled = self.link.poll(&mut events);
        for ev in events.drain(..) {
            match ev {
                Event::Sent(cid) => self.on_sent(cid, out),
                Event::Response(cqe) => self.on_response(cqe, out),
            }
            if self.failed.is_some() {
                break;
            }
        }
        events.clear();
        self.events = events;
        if let Err(why) = polled {
            self.fail(why);
        }
    }

    fn on_sent(&mut self, cid: u16, out: &mut Vec<Done>) {
        let Some(r) = self.reqs.get_mut(usize::from(cid)) else {
            return self.fail(format!("send completion for cid {cid} past the queue"));
        };
        if r.state != ReqState::Posted || r.send_done {
            return self.fail(format!("send completion for idle cid {cid}"));
        }
        r.send_done = true;
        if r.cqe.is_some() {
            self.complete(cid, out);
        }
    }

    fn on_response(&mut self, cqe: Cqe, out: &mut Vec<Done>) {
        let Some(r) = self.reqs.get_mut(usize::from(cqe.cid)) else {
            return self.fail(format!("response for cid {} past the queue", cqe.cid));
        };
        if r.state != ReqState::Posted || r.cqe.is_some() {
            return self.fail(format!("response for idle cid {}", cqe.cid));
        }
        r.cqe = Some(cqe);
        if r.send_done {
            self.complete(cqe.cid, out);
        }
    }

    fn complete(&mut self, cid: u16, out: &mut Vec<Done>) {
        let r = &mut self.reqs[usize::from(cid)];
        let cqe = r.cqe.take().expect("complete with a response");
        let (tag, buf) = (r.tag, r.buf.take());
        r.state = ReqState::Free;
        r.send_done = false;
        self.free.push(cid);
        self.posted -= 1;
        self.large_posted -= usize::from(std::mem::take(&mut r.large));
        tracing::trace!(qid = self.qid, cid, status = %cqe.status, "request Posted -> Free");
        out.push(Done {
            tag,
            result: Ok(cqe),
            buf,
        });
    }

    fn housekeeping(&mut self, now: Instant) {
        self.next_housekeeping = now + HOUSEKEEPING;
        if self
            .abort
            .as_ref()
            .is_some_and(|a| a.load(Ordering::Acquire))
        {
            return self.fail("the controller failed (keep-alive, or another queue)".into());
        }
        if let Err(why) = self.link.check() {
            return self.fail(why);
        }
        let mut late = None;
        for (cid, r) in self.reqs.iter_mut().enumerate() {
            if r.state != ReqState::Posted {
                continue;
            }
            if let (None, Some(t)) = (r.deadline, r.timeout) {
                r.deadline = Some(now + t);
            }
            if r.deadline.is_some_and(|d| d <= now) {
                late = Some((cid, r.timeout.unwrap_or_default()));
                break;
            }
        }
        if let Some((cid, t)) = late {
            let ms = t.as_millis();
            self.fail(format!("command cid {cid} got no response in {ms} ms"));
        }
    }

    /// Marks the queue failed and stops its transport, so the target can no longer touch any
    /// buffer of a posted request. Posted requests complete with errors at the next poll.
    pub fn fail(&mut self, why: String) {
        if self.failed.is_none() {
            tracing::warn!(qid = self.qid, "queue failed: {why}");
            self.link.disconnect();
            self.failed = Some(why);
        }
    }

    fn fail_posted(&mut self, out: &mut Vec<Done>) {
        let why = self.failed.clone().unwrap_or_default();
        for cid in 0..self.reqs.len() {
            let r = &mut self.reqs[cid];
            if r.state != ReqState::Posted {
                continue;
            }
            r.state = ReqState::Free;
            r.cqe = None;
            r.send_done = false;
            out.push(Done {
                tag: r.tag,
                result: Err(Error::Transport {
                    qid: self.qid,
                    what: why.clone(),
                }),
                buf: r.buf.take(),
            });
            self.posted -= 1;
            self.large_posted -= usize::from(std::mem::take(&mut r.large));
        }
        // Slots and command IDs are not reused on a failed queue.
    }

    /// Waits until at least one request finishes, the queue fails, or `timeout` passes.
    ///
    /// It polls, without sleeping, for at least 64 polls and [`Queue::set_poll_spin`] since
    /// the last progress (the wait's start, or a poll that moved data without finishing
    /// anything: a large transfer under way), then sleeps on the transport. The 64 polls,
    /// each with its clock read, last long enough on an emulated CPU (where a wake-up costs
    /// far more) to catch a response on its way: cheaper spins were tried, and a QD1 reader
    /// over rxe in the TCG VM then slept for most responses (0.6x the IOPS). The time is for
    /// real CPUs, where 64 polls pass in ~30 us: a host that slept after them did 0.75-0.85x
    /// the 128K IOPS, losing the rest to wake-ups (2026-12-07, `docs/benchmarks.md`).
    pub fn wait(&mut self, out: &mut Vec<Done>, timeout: Duration) -> usize {
        let mut now = Instant::now();
        let deadline = now + timeout;
        let mut spin_until = now + self.poll_spin;
        let mut spins = 0;
        loop {
            let n = self.poll(out);
            if n > 0 || self.posted == 0 {
                return n;
            }
            now = Instant::now();
            if now >= deadline {
                return 0;
            }
            if self.link.moved() {
                spins = 0;
                spin_until = now + self.poll_spin;
            }
            spins += 1;
            if spins < 64 || now < spin_until {
                std::hint::spin_loop();
                continue;
            }
            if !self.link.arm() {
                std::thread::yield_now();
                continue;
            }
            let n = self.poll(out);
            if n > 0 {
                return n;
            }
            if self.link.moved() {
                spins = 0;
                spin_until = Instant::now() + self.poll_spin;
                continue;
            }
            let slice = (deadline - now).min(HOUSEKEEPING);
            self.link.wait(slice, self.large_posted > 0);
        }
    }

    /// Waits until nothing is in flight or the queue has failed, then drops what finished:
    /// before a queue is handed back, so its requests' buffers are free to reuse.
    pub fn drain(&mut self, done: &mut Vec<Done>, timeout: Duration) {
        while self.in_flight() > 0 {
            if self.wait(done, timeout) == 0 && self.failure().is_some() {
                break;
            }
        }
        done.clear();
    }

    /// Completions of held commands that [`Queue::exec`] set aside while it waited.
    pub fn take_stray(&mut self, out: &mut Vec<Done>) {
        out.append(&mut self.stray);
    }

    /// Runs one command to completion (admin commands, Connect). The request's own
    /// response status is returned as is; transport failures are `Err`. Other completions
    /// arriving meanwhile (a held event request) are kept for [`Queue::take_stray`].
    pub fn exec(&mut self, sqe: Sqe, dir: Dir, buf: Option<IoBuf>) -> Result<(Cqe, Option<IoBuf>)> {
        self.exec_within(sqe, dir, buf, self.cmd_timeout)
    }

    /// [`Queue::exec`] with its own command timeout (Keep Alive: the keep-alive timeout).
    pub fn exec_within(
        &mut self,
        sqe: Sqe,
        dir: Dir,
        buf: Option<IoBuf>,
        timeout: Duration,
    ) -> Result<(Cqe, Option<IoBuf>)> {
        const TAG: u64 = u64::MAX;
        match self.post(sqe, dir, buf, TAG, Some(timeout)) {
            Ok(()) => {}
            Err(SubmitError::Failed(e, _)) => return Err(e),
            Err(SubmitError::Full(_)) => {
                return Err(Error::protocol("exec on a queue with commands in flight"))
            }
        }
        let mut out = Vec::with_capacity(4);
        loop {
            self.wait(&mut out, self.cmd_timeout);
            if let Some(i) = out.iter().position(|d| d.tag == TAG) {
                let d = out.swap_remove(i);
                self.stray.append(&mut out);
                return d.result.map(|c| (c, d.buf));
            }
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if self.failed.is_none() {
            self.link.disconnect();
        }
    }
}
