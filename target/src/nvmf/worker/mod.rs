//! Worker threads: each owns a poll group of every transport (for RDMA: one completion
//! queue shared by its queues' QPs), one queue per namespace on its own io_uring, and the
//! queues the listeners gave it.
//!
//! The loop: take new connections; poll the transports and drive each event's request;
//! poll the backends and answer finished requests; resume requests the backend had no room
//! for; every few milliseconds look at held events, connection events, timers and closing
//! queues. In `busy` poll mode it spins; in `interrupt` mode it arms the transport and
//! sleeps when nothing is in flight: [`IDLE_WAIT`] at first, longer while nothing comes (up
//! to [`IDLE_WAIT_MAX`]); a transport event or a message wakes it at once. In `adaptive`
//! mode (the default) it polls on for `poll_spin_us` after the last pass that found work,
//! then sleeps as in `interrupt` mode: a host's next command at queue depth 1 is found
//! without a wake-up, and an idle worker costs nothing.
//!
//! What an event means for its request is in [`super::request_flow`]; what every transport's
//! queues share (backend completions, timers, shutdown) in [`queues`]; the rest in each
//! transport's poll group ([`super::transport::PollGroup`]).

use std::any::Any;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::request::Tag;
use super::request_flow::Ctx;
use super::transport::PollGroup;
use super::{Shared, TargetError};
use crate::arena::pool::DataPool;
use crate::backend::{BackendError, Completion};
use crate::config::{self, PollMode};
use crate::metrics::NsCounters;
use crate::ring::wake::BackendWake;
use crate::ring::WorkerIo;
use ns_queues::{Ack, NsQueues};
use pass_stats::PassStats;
use queues::SHUTDOWN_GRACE;

pub mod ns_queues;
pub mod pass_stats;
pub mod queues;

/// How long an idle worker in interrupt mode sleeps on its CQ before looking at connection
/// events and timers again, right after work; each wait that finds nothing doubles it, up to
/// [`IDLE_WAIT_MAX`]. Whatever needs the worker at once wakes it: a completion on its CQ (a
/// host's capsule, a flushed QP) or a message ([`WorkerTx`]).
const IDLE_WAIT: Duration = Duration::from_millis(5);
/// The longest idle sleep: the delay, beyond its timer, of a keep-alive expiry or a drain
/// timeout noticed by an idle worker (no host waits on it).
const IDLE_WAIT_MAX: Duration = Duration::from_millis(80);
/// How often connection events, keep-alive and teardown are looked at.
const TICK: Duration = Duration::from_millis(5);
/// A command held by QoS limits that may go sooner than this is waited for by yielding, not
/// sleeping (a sleep's timeout is rounded to milliseconds).
const HELD_SPIN: Duration = Duration::from_micros(50);
/// Backend queue depth per (worker, namespace).
const BACKEND_DEPTH_MAX: u32 = 1024;

/// A worker's inbox: the channel, and the worker's wake-up, signalled after each message so an
/// idle worker takes it at once rather than at its next timer.
#[derive(Clone, Debug)]
pub struct WorkerTx {
    tx: Sender<WorkerMsg>,
    wake: Option<Arc<BackendWake>>,
}

impl WorkerTx {
    pub fn send(&self, msg: WorkerMsg) -> Result<(), crossbeam_channel::SendError<WorkerMsg>> {
        self.tx.send(msg)?;
        if let Some(w) = &self.wake {
            w.signal();
        }
        Ok(())
    }
}

/// What a worker is sent.
pub enum WorkerMsg {
    /// A queue on its way in, for the worker's poll group of `transport`: the transport's
    /// own hand-over type (a TCP socket, an RDMA connection request), which its poll group
    /// makes a queue of.
    Handover {
        transport: config::Transport,
        handover: Box<dyn Any + Send>,
    },
    /// A namespace was added: open a queue to it, then answer.
    OpenNamespace(Arc<crate::namespace::Namespace>, Ack),
    /// The namespace in this slot was removed: close the queue once its I/O is done (flush
    /// first), then answer.
    CloseNamespace(usize, Ack),
    /// The listener with this id was removed: close the connections that came through it.
    CloseListener(u64),
}

pub(super) fn spawn(
    index: usize,
    shared: Arc<Shared>,
) -> Result<(WorkerTx, JoinHandle<()>, libc::pid_t), TargetError> {
    let (tx, rx) = crossbeam_channel::unbounded::<WorkerMsg>();
    // Without an eventfd (the system refused one) an idle worker keeps to its shortest wait.
    let msg_wake = BackendWake::new().ok().map(Arc::new);
    let tx = WorkerTx {
        tx,
        wake: msg_wake.clone(),
    };
    let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
    let handle = std::thread::Builder::new()
        .name(format!("rdmablk-w{index}"))
        .spawn(move || {
            let pin = shared.fixed.target.worker_cpus.as_ref();
            if let Some(cpu) = pin.and_then(|l| l.for_worker(index)) {
                if let Err(source) = config::pin_current_thread(cpu) {
                    let _ = ready_tx.send(Err(TargetError::Pin { index, cpu, source }));
                    return;
                }
                tracing::debug!(worker = index, cpu, "worker pinned");
            }
            let depth = (shared.fixed.limits.max_queue_depth * 2).min(BACKEND_DEPTH_MAX);
            // Room for the namespaces there are, and for some added later (beyond it, I/O
            // waits in the backlog for ring room).
            let ring_entries = depth.saturating_mul(shared.namespaces.len().max(4) as u32);
            let io = WorkerIo::new(ring_entries, Some(Arc::clone(&shared.arena)));
            let mut nsq = NsQueues::default();
            let mut ns_counters = Vec::new();
            for ns in shared.namespaces.all() {
                set_counters(&mut ns_counters, &shared, index, ns.slot());
                if let Err(e) = nsq.open(&ns, &io, depth) {
                    let source = BackendError::Queue {
                        nsid: ns.nsid(),
                        why: e,
                    };
                    let _ = ready_tx.send(Err(TargetError::Worker { index, source }));
                    return;
                }
            }
            let pool_bytes = shared.fixed.data_pool_bytes_per_worker();
            let pool = match DataPool::new(&shared.arena, pool_bytes) {
                Ok(p) => p,
                Err(e) => {
                    let _ = ready_tx.send(Err(TargetError::DataPool { index, source: e }));
                    return;
                }
            };
            let mut groups: Vec<(config::Transport, Box<dyn PollGroup>)> = Vec::new();
            for t in &shared.transports {
                match t.poll_group(index) {
                    Ok(g) => groups.push((t.kind(), g)),
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
            }
            // SAFETY: gettid has no preconditions.
            let _ = ready_tx.send(Ok(unsafe { libc::gettid() }));
            exit_thread_for_tests(index);
            let backend_wake = io.wake_in_use();
            let others = OthersWait::new(&groups);
            let w = Worker {
                index,
                backend_depth: depth,
                busy_poll: shared.fixed.target.poll_mode == PollMode::Busy,
                spin: match shared.fixed.target.poll_mode {
                    PollMode::Adaptive => {
                        Duration::from_micros(shared.fixed.target.poll_spin_us.into())
                    }
                    PollMode::Busy | PollMode::Interrupt => Duration::ZERO,
                },
                spin_until: None,
                stats: PassStats::default(),
                shared,
                groups,
                others,
                rx,
                nsq,
                ns_counters,
                _io: io,
                backend_wake,
                msg_wake,
                idle_streak: 0,
                backlog: VecDeque::with_capacity(1024),
                pool,
                released: Vec::new(),
                comps: vec![Completion::EMPTY; 64],
                done: Vec::with_capacity(1024),
                last_tick: Instant::now(),
                stop_since: None,
            };
            w.run();
        })
        .map_err(TargetError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok(tid)) => Ok((tx, handle, tid)),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(TargetError::Thread(std::io::Error::other(
                "worker exited at start",
            )))
        }
    }
}

/// The variable that makes a *debug* build's worker thread `N` end by the `exit` system call
/// right after start, without unwinding, as the kernel ends a thread it kills in an oops:
/// how `target/tests/daemon.rs` checks that `rdmablk-target` notices ([`Target::lost_worker`]).
/// Release builds ignore it.
///
/// [`Target::lost_worker`]: crate::nvmf::Target::lost_worker
pub const EXIT_WORKER_ENV: &str = "RDMABLK_TEST_EXIT_WORKER";

fn exit_thread_for_tests(index: usize) {
    if cfg!(debug_assertions)
        && std::env::var(EXIT_WORKER_ENV)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            == Some(index)
    {
        tracing::warn!(
            index,
            "{EXIT_WORKER_ENV}: this worker thread exits without unwinding"
        );
        // SAFETY: SYS_exit ends only the calling thread and never returns; nothing of this
        // thread is used after it (the test wants exactly the leak a killed thread leaves).
        unsafe { libc::syscall(libc::SYS_exit, 0) };
    }
}

struct Worker {
    index: usize,
    /// Depth of each backend queue this worker opens.
    backend_depth: u32,
    busy_poll: bool,
    /// Adaptive mode: how long the worker keeps polling after the last pass that found work
    /// (zero in the other modes).
    spin: Duration,
    /// The end of the present spell of polling: set by the first pass that finds nothing
    /// (from the pass's own clock reading), cleared by a pass that finds work.
    spin_until: Option<Instant>,
    shared: Arc<Shared>,
    /// One poll group per transport served, in [`Shared::transports`] order (its index is
    /// the group of its requests' backend tags).
    groups: Vec<(config::Transport, Box<dyn PollGroup>)>,
    /// With more than one group: what the first sleeps on besides its own events.
    others: Option<OthersWait>,
    rx: Receiver<WorkerMsg>,
    /// One queue per namespace slot. Dropped before `_io`.
    nsq: NsQueues,
    /// Metrics counters by namespace slot (published in `shared.counters_by_worker`).
    ns_counters: Vec<Option<Arc<NsCounters>>>,
    _io: WorkerIo,
    /// Signalled by `_io`'s ring and by RBD queues on each completion (interrupt mode, once a
    /// backend that signals it exists).
    backend_wake: Option<Arc<BackendWake>>,
    /// Signalled with every message ([`WorkerTx`]).
    msg_wake: Option<Arc<BackendWake>>,
    /// Idle waits in a row that found nothing: the next one sleeps longer.
    idle_streak: u32,
    /// Requests (as backend tags) waiting for backend room.
    backlog: VecDeque<u64>,
    /// This worker's data buffers ([`crate::arena::pool`]).
    pool: DataPool,
    /// The pass's clock and the I/O commands finished in it ([`pass_stats`]).
    stats: PassStats,
    /// Held commands the QoS limits just admitted (capacity kept).
    released: Vec<u64>,
    comps: Vec<Completion>,
    /// Backend completions collected by a poll, handled after it (capacity kept).
    done: Vec<Completion>,
    last_tick: Instant,
    stop_since: Option<Instant>,
}

impl Worker {
    fn run(mut self) {
        tracing::debug!(worker = self.index, "worker started");
        let counters = Arc::clone(&self.shared.counters_by_worker[self.index]);
        loop {
            // Everything this pass posts leaves together at its end (one write per connection
            // on the soft provider), before the worker can sleep.
            for (_, g) in &mut self.groups {
                g.begin_pass();
            }
            let mut busy = self.take_new();
            busy |= self.poll_groups();
            busy |= self.poll_backends();
            if !self.backlog.is_empty() {
                self.resume_backlog();
            }
            if self.pool.has_ready() {
                busy |= self.hand_out_buffers();
            }
            busy |= self.release_held();
            for g in 0..self.groups.len() {
                busy |= self.with_group(g, |group, ctx| group.end_pass(ctx));
            }
            // One clock reading a pass (the one that counted the pass's finished commands,
            // if it made one): the tick's, and the start of an idle spell's.
            let mut now = self
                .stats
                .end_pass(&self.ns_counters)
                .unwrap_or_else(Instant::now);
            if now.saturating_duration_since(self.last_tick) >= TICK {
                self.last_tick = now;
                self.housekeeping();
                counters.pool.publish(&self.pool);
                now = Instant::now();
            }
            if self.shared.stopping() && self.shutdown_step() {
                break;
            }
            if busy {
                self.idle_streak = 0;
                self.spin_until = None;
            } else {
                // Only the waiting is timed (busy = lifetime - idle).
                let t = now;
                if self.spinning(t) {
                    std::hint::spin_loop();
                } else {
                    self.idle();
                }
                counters
                    .idle_ns
                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }
        self.final_flush();
        tracing::debug!(worker = self.index, "worker stopped");
    }

    /// Runs `f` on poll group `g` with the worker's context for its requests.
    fn with_group<R>(
        &mut self,
        g: usize,
        f: impl FnOnce(&mut dyn PollGroup, &mut Ctx<'_>) -> R,
    ) -> R {
        let mut ctx = Ctx {
            shared: &self.shared,
            group: g as u8,
            counters: &self.ns_counters,
            nsq: &mut self.nsq,
            backlog: &mut self.backlog,
            pool: &mut self.pool,
            stats: &mut self.stats,
        };
        f(self.groups[g].1.as_mut(), &mut ctx)
    }

    // ---------------------------------------------------------------- new connections

    fn take_new(&mut self) -> bool {
        let mut any = false;
        while let Ok(msg) = self.rx.try_recv() {
            any = true;
            match msg {
                WorkerMsg::Handover {
                    transport,
                    handover,
                } => {
                    let Some(g) = self.groups.iter().position(|(k, _)| *k == transport) else {
                        tracing::error!(
                            transport = transport.as_str(),
                            "no poll group for a queue's hand-over"
                        );
                        continue;
                    };
                    if self.shared.stopping() {
                        let shared = Arc::clone(&self.shared);
                        self.groups[g].1.refuse(handover, &shared);
                    } else {
                        self.with_group(g, |group, ctx| group.add(handover, ctx));
                    }
                }
                WorkerMsg::OpenNamespace(ns, ack) => {
                    set_counters(&mut self.ns_counters, &self.shared, self.index, ns.slot());
                    let _ = ack.send(self.nsq.open(&ns, &self._io, self.backend_depth));
                }
                WorkerMsg::CloseNamespace(slot, ack) => self.nsq.close(slot, ack),
                WorkerMsg::CloseListener(id) => {
                    let shared = Arc::clone(&self.shared);
                    for (_, group) in &mut self.groups {
                        group.close_listener(id, &shared);
                    }
                }
            }
        }
        any
    }

    // ---------------------------------------------------------------- events

    fn poll_groups(&mut self) -> bool {
        let mut any = false;
        for g in 0..self.groups.len() {
            any |= self.with_group(g, |group, ctx| group.poll(ctx));
        }
        any
    }

    fn poll_backends(&mut self) -> bool {
        let mut nsq = std::mem::take(&mut self.nsq);
        let mut comps = std::mem::take(&mut self.comps);
        let mut done = std::mem::take(&mut self.done);
        let any = nsq.poll(&mut comps, |c| done.push(c));
        self.nsq = nsq;
        self.comps = comps;
        for c in done.drain(..) {
            self.on_backend(c);
        }
        self.done = done;
        any
    }

    fn on_backend(&mut self, c: Completion) {
        let tag = Tag::decode(c.tag);
        let g = usize::from(tag.group);
        if g >= self.groups.len() {
            tracing::error!(?tag, "backend completion of an unknown poll group");
            return;
        }
        self.with_group(g, |group, ctx| group.on_backend(tag, &c, ctx));
    }

    /// Gives the data buffers freed this pass to the commands waiting for one (hosts in
    /// turn). True if any got one.
    fn hand_out_buffers(&mut self) -> bool {
        let mut any = false;
        while let Some((w, data)) = self.pool.next_ready() {
            any = true;
            let g = usize::from(w.group);
            if g >= self.groups.len() {
                self.pool.give(data);
                continue;
            }
            self.with_group(g, |group, ctx| group.on_buffer(w.queue, w.slot, data, ctx));
        }
        any
    }

    fn resume_backlog(&mut self) {
        for _ in 0..self.backlog.len() {
            let Some(tag) = self.backlog.pop_front() else {
                break;
            };
            let tag = Tag::decode(tag);
            let g = usize::from(tag.group);
            if g >= self.groups.len() {
                continue;
            }
            let before = self.backlog.len();
            self.with_group(g, |group, ctx| group.resume(tag, ctx));
            if self.backlog.len() > before {
                break; // still no room
            }
        }
    }

    /// Resumes the commands QoS limits held and now admit; true if any.
    fn release_held(&mut self) -> bool {
        let mut tags = std::mem::take(&mut self.released);
        self.nsq.release_held(&mut tags);
        let any = !tags.is_empty();
        for tag in tags.drain(..) {
            let tag = Tag::decode(tag);
            let g = usize::from(tag.group);
            if g < self.groups.len() {
                self.with_group(g, |group, ctx| group.resume(tag, ctx));
            }
        }
        self.released = tags;
        any
    }

    fn housekeeping(&mut self) {
        self.nsq.reap_closed(&mut self.comps);
        for g in 0..self.groups.len() {
            self.with_group(g, |group, ctx| group.housekeeping(ctx));
        }
    }

    /// Adaptive mode, a pass that found nothing at `now`: whether the spell of polling since
    /// the last work goes on (the next pass polls again) or is over (the worker may sleep).
    fn spinning(&mut self, now: Instant) -> bool {
        if self.spin.is_zero() {
            return false;
        }
        now < *self.spin_until.get_or_insert(now + self.spin)
    }

    /// Nothing happened in the last pass. Busy mode spins. Interrupt mode sleeps on the CQ's
    /// channel; with block I/O in flight it sleeps on the channel and the ring's eventfd
    /// together, so neither QD1 spins a core until the kernel answers nor does a busy queue pay
    /// a sleep while work keeps arriving (the loop only gets here after a pass found nothing).
    /// Backends that complete without the ring (or a ring without an eventfd) get yields.
    fn idle(&mut self) {
        if self.busy_poll {
            std::hint::spin_loop();
            return;
        }
        // Commands held by QoS limits: sleep no longer than until the first may go.
        let held = self.nsq.held_wait();
        if held.is_some_and(|d| d < HELD_SPIN) {
            std::thread::yield_now();
            return;
        }
        // (Rounded up to whole milliseconds, as the waits count them: rounded down, a wait
        // under a millisecond would return at once and spin.)
        let held_ms = held.map(|h| Duration::from_millis(h.as_micros().div_ceil(1000) as u64));
        let cap = |d: Duration| held_ms.map_or(d, |h| d.min(h));
        let in_flight = self.nsq.in_flight() as usize;
        if self.backend_wake.is_none() {
            // A namespace added by a reload may have brought the first backend that signals.
            self.backend_wake = self._io.wake_in_use();
        }
        let use_wake = match &self.backend_wake {
            _ if in_flight == 0 && self.backlog.is_empty() => false,
            Some(w) if self.backlog.is_empty() && self._io.all_signalled(in_flight) => {
                w.clear();
                true
            }
            _ => {
                std::thread::yield_now();
                return;
            }
        };
        if self.groups.len() > 1 {
            if self.others.is_none() {
                // No set to wait on the other groups with: nap briefly instead.
                std::thread::sleep(Duration::from_micros(50));
                return;
            }
            for g in 1..self.groups.len() {
                match self.with_group(g, |group, ctx| group.arm(ctx)) {
                    None => {
                        std::thread::sleep(Duration::from_micros(200));
                        return;
                    }
                    Some(true) => return,
                    Some(false) => {}
                }
            }
        }
        match self.with_group(0, |group, ctx| group.arm(ctx)) {
            None => {
                std::thread::sleep(Duration::from_micros(200));
                return;
            }
            Some(true) => return,
            Some(false) => {}
        }
        if !use_wake {
            let Some(fd) = self.msg_wake.as_ref().map(|w| w.raw_fd()) else {
                let other = self.other_fd(None);
                let _ = self.groups[0].1.wait(other, cap(IDLE_WAIT));
                return;
            };
            // The fd is cleared only when the wait found it readable (no syscall per idle
            // entry): a message sent since this pass's take_new left it readable, so the
            // wait returns at once, and the next pass takes the message.
            let wait = cap(IDLE_WAIT
                .saturating_mul(1 << self.idle_streak.min(5))
                .min(IDLE_WAIT_MAX));
            let other = self.other_fd(Some(fd));
            let Some(ready) = self.groups[0].1.wait(other, wait) else {
                std::thread::sleep(Duration::from_micros(200));
                return;
            };
            if ready.other {
                if let Some(w) = &self.msg_wake {
                    w.clear();
                }
            }
            if !ready.events && !ready.other {
                self.idle_streak = self.idle_streak.saturating_add(1);
            }
            return;
        }
        if self.poll_backends() {
            return;
        }
        let Some(w) = &self.backend_wake else {
            return;
        };
        let fd = w.raw_fd();
        let other = self.other_fd(Some(fd));
        if self.groups[0].1.wait(other, cap(IDLE_WAIT)).is_none() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The descriptor the first group waits on besides its own events: the worker's `fd`,
    /// or with several groups the set holding it and the other groups' descriptors.
    fn other_fd(&mut self, fd: Option<RawFd>) -> Option<RawFd> {
        match &mut self.others {
            Some(o) => Some(o.with(fd)),
            None => fd,
        }
    }

    // ---------------------------------------------------------------- shutdown

    /// One step of the shutdown; true when every queue is gone.
    fn shutdown_step(&mut self) -> bool {
        let first = self.stop_since.is_none();
        let since = *self.stop_since.get_or_insert_with(Instant::now);
        let grace_over = since.elapsed() > SHUTDOWN_GRACE;
        let mut empty = true;
        for g in 0..self.groups.len() {
            empty &= self.with_group(g, |group, ctx| group.shutdown_step(first, grace_over, ctx));
        }
        empty && since.elapsed() > Duration::from_millis(100)
    }

    /// Flushes every namespace through this worker's queues before exiting; a namespace
    /// whose flush fails, is refused or does not finish is recorded for the exit status.
    fn final_flush(&mut self) {
        for (nsid, failure) in self.nsq.flush_all(&mut self.comps) {
            tracing::error!(nsid, worker = self.index, error = %failure, "final flush failed");
            self.shared
                .final_flush_failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(format!("namespace {nsid} ({failure})"));
        }
    }
}

/// An epoll set over the wake descriptors of a worker's groups after the first, and the
/// worker's own descriptor of the moment (its message or backend eventfd): with several
/// transports, the first group sleeps on its own events plus this set.
struct OthersWait {
    epoll: OwnedFd,
    /// The worker's descriptor now in the set.
    extra: Option<RawFd>,
}

impl OthersWait {
    /// The set for `groups`, if there is more than one and every group after the first has
    /// a wake descriptor.
    fn new(groups: &[(config::Transport, Box<dyn PollGroup>)]) -> Option<OthersWait> {
        if groups.len() < 2 {
            return None;
        }
        // SAFETY: plain system call; the descriptor is owned from here on.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            tracing::warn!("no epoll set for several transports: idle workers nap instead");
            return None;
        }
        let set = OthersWait {
            // SAFETY: `fd` is a new descriptor nothing else owns.
            epoll: unsafe { OwnedFd::from_raw_fd(fd) },
            extra: None,
        };
        for (_, g) in &groups[1..] {
            if !set.ctl(libc::EPOLL_CTL_ADD, g.wake_fd()?) {
                return None;
            }
        }
        Some(set)
    }

    fn ctl(&self, op: i32, fd: RawFd) -> bool {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: both descriptors are open; `ev` is a valid event.
        unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut ev) == 0 }
    }

    /// Puts `fd` in the set in place of the worker's previous descriptor; the set's own.
    fn with(&mut self, fd: Option<RawFd>) -> RawFd {
        if fd != self.extra {
            if let Some(old) = self.extra.take() {
                self.ctl(libc::EPOLL_CTL_DEL, old);
            }
            if let Some(new) = fd {
                if self.ctl(libc::EPOLL_CTL_ADD, new) {
                    self.extra = Some(new);
                }
            }
        }
        self.epoll.as_raw_fd()
    }
}

/// `target.io_statistics = false`: then nothing is counted).
fn set_counters(v: &mut Vec<Option<Arc<NsCounters>>>, shared: &Shared, index: usize, slot: usize) {
    if !shared.fixed.target.io_statistics {
        return;
    }
    if v.len() <= slot {
        v.resize(slot + 1, None);
    }
    v[slot] = Some(shared.counters_by_worker[index].reset_slot(slot));
}
