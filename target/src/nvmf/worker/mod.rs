//! Worker threads: each owns a poll group of every transport (for RDMA: one completion
//! queue shared by its queues' QPs), one queue per namespace on its own io_uring, and the
//! queues the listeners gave it.
//!
//! The loop: take new connections; poll the transports and drive each event's request; poll the
//! backends and answer finished requests; resume requests the backend had no room for; every few
//! milliseconds look at held events, connection events, timers and closing queues. In `busy` poll
//! mode it spins; in `interrupt` mode it arms the transport and sleeps when nothing is in flight:
//! [`IDLE_WAIT`](idle::IDLE_WAIT) at first, longer while nothing comes (up to
//! [`IDLE_WAIT_MAX`](idle::IDLE_WAIT_MAX)); a transport event or a message wakes it at once. In
//! `adaptive` mode (the default) it polls on for `poll_spin_us` after the last pass that found
//! work, then sleeps as in `interrupt` mode: a host's next command at queue depth 1 is found
//! without a wake-up, and an idle worker costs nothing.
//!
//! What an event means for its request is in [`super::request_flow`]; what every transport's
//! queues share (backend completions, timers, shutdown) in [`queues`]; the rest in each
//! transport's poll group ([`super::transport::PollGroup`]).
//!
//! A worker's start (its thread, backend queues, data pool, poll groups) is `start.rs`; how it
//! waits when a pass found nothing, `idle.rs`.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::request::Tag;
use super::request_flow::Ctx;
use super::transport::PollGroup;
use super::Shared;
use crate::arena::pool::DataPool;
use crate::backend::Completion;
use crate::config;
use crate::metrics::NsCounters;
use crate::ring::wake::BackendWake;
use crate::ring::WorkerIo;
use idle::OthersWait;
use ns_queues::{Ack, NsQueues};
use pass_stats::PassStats;
use queues::SHUTDOWN_GRACE;

mod idle;
pub mod ns_queues;
pub mod pass_stats;
pub mod queues;
mod start;

pub(super) use start::spawn;
pub use start::EXIT_WORKER_ENV;

/// How often connection events, keep-alive and teardown are looked at.
const TICK: Duration = Duration::from_millis(5);

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

/// Gives namespace slot `slot` of worker `index` fresh counters (none with
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
