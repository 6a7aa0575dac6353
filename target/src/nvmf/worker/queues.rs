//! One transport's queues on one worker: a slab keyed by `index | generation << 16`, and what
//! the core does for every queue whatever its transport: backend completions, requests
//! resumed from the backlog, held Async Event Requests completed with their controllers'
//! events, the connect, response, authentication and keep-alive timers, the drain of a
//! closing queue, the shutdown. A transport's poll group holds one of these and adds its own
//! events ([`crate::nvmf::transport::PollGroup`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdmablk::nvme::Status;

use crate::arena::pool::{DataBuf, DataPool};
use crate::backend::Completion;
use crate::nvmf::commands::auth;
use crate::nvmf::commands::io_commands;
use crate::nvmf::queue::{begin_close, disconnect, Phase, Queue};
use crate::nvmf::request::{ReqState, Tag};
use crate::nvmf::request_flow::{self, respond, Ctx};
use crate::nvmf::transport::QueueTransport;
use crate::nvmf::Shared;

/// The queues of one transport on one worker.
pub struct Queues<X> {
    slab: Vec<Option<Queue<X>>>,
    gens: Vec<u16>,
}

impl<X> Default for Queues<X> {
    fn default() -> Self {
        Queues {
            slab: Vec::new(),
            gens: Vec::new(),
        }
    }
}

fn slab_index(key: u32) -> usize {
    (key & 0xFFFF) as usize
}

impl<X: QueueTransport> Queues<X> {
    /// The key the next queue gets (its slot stays free until [`Queues::put`]).
    pub fn next_key(&mut self) -> u32 {
        let i = match self.slab.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slab.push(None);
                self.gens.push(0);
                self.slab.len() - 1
            }
        };
        i as u32 | u32::from(self.gens[i]) << 16
    }

    /// Stores a queue under the key [`Queues::next_key`] gave it.
    pub fn put(&mut self, q: Queue<X>) {
        let i = slab_index(q.key);
        debug_assert!(self.slab[i].is_none());
        self.slab[i] = Some(q);
    }

    /// The queue with `key`, if it is still there (not a later queue in its slot).
    pub fn get(&mut self, key: u32) -> Option<&mut Queue<X>> {
        let i = slab_index(key);
        if self.gens.get(i).copied() != Some((key >> 16) as u16) {
            return None;
        }
        self.slab.get_mut(i)?.as_mut()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Queue<X>> {
        self.slab.iter().flatten()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Queue<X>> {
        self.slab.iter_mut().flatten()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.iter().all(Option::is_none)
    }

    /// A backend operation of request `tag.slot` finished.
    pub fn on_backend(&mut self, tag: Tag, c: &Completion, ctx: &mut Ctx<'_>) {
        let Some(q) = self.get(tag.queue) else {
            tracing::error!(?tag, "backend completion of a queue that is gone");
            return;
        };
        q.backend_ops -= 1;
        let r = &mut q.reqs[tag.slot as usize];
        r.ops_in_flight -= 1;
        if let Err(e) = c.result {
            tracing::debug!(qid = q.qid, cid = r.sqe.cid, error = %e, "backend operation failed");
            r.fail(io_commands::status_of(e));
        }
        if r.ops_in_flight == 0 && r.ops_next >= r.ops_total {
            respond(q, tag.slot, ctx);
        }
    }

    /// Request `slot` of queue `key` waited for a data buffer: here it is (given back if the
    /// queue is gone).
    pub fn on_buffer(&mut self, key: u32, slot: u32, data: DataBuf, ctx: &mut Ctx<'_>) {
        match self.get(key) {
            Some(q) => request_flow::on_buffer(q, slot, data, ctx),
            None => ctx.pool.give(data),
        }
    }

    /// Submits what request `tag.slot` still has for the backend (it waited for room).
    pub fn resume(&mut self, tag: Tag, ctx: &mut Ctx<'_>) {
        let Some(q) = self.get(tag.queue) else {
            return;
        };
        let slot = tag.slot;
        if q.reqs[slot as usize].state != ReqState::Executing {
            return;
        }
        if q.is_closing() {
            let r = &mut q.reqs[slot as usize];
            r.ops_next = r.ops_total;
            if r.ops_in_flight == 0 {
                respond(q, slot, ctx);
            }
            return;
        }
        io_commands::submit(q, slot, ctx.group, ctx.nsq, ctx.backlog);
        let r = &q.reqs[slot as usize];
        if r.ops_in_flight == 0 && r.ops_next >= r.ops_total {
            respond(q, slot, ctx);
        }
    }

    /// Clears this poll group in every preempt-and-abort fence whose preempted hosts have no
    /// modifying command running here, and completes the Reservation Acquires whose fence is
    /// done.
    fn fences(&mut self, ctx: &mut Ctx<'_>) {
        let pending = ctx.shared.fences.pending();
        let me = self as *const Self as usize;
        for f in &pending {
            if f.is_clear(me) {
                continue;
            }
            let busy = self.slab.iter().flatten().any(|q| {
                q.ctrl
                    .as_ref()
                    .is_some_and(|c| q.reqs.iter().any(|r| f.holds(&c.hostid, r)))
            });
            if !busy {
                f.mark_clear(me);
            }
        }
        for q in self.slab.iter_mut().flatten() {
            if q.fenced.is_empty() {
                continue;
            }
            let mut i = 0;
            while i < q.fenced.len() {
                if q.fenced[i].1.is_done() || !q.is_live() {
                    let (slot, f) = q.fenced.remove(i);
                    if f.failed() {
                        q.reqs[slot as usize].fail(Status::INTERNAL);
                    }
                    respond(q, slot, ctx);
                } else {
                    i += 1;
                }
            }
        }
    }

    /// Completes held Async Event Requests with the events their controllers raised (and
    /// the Reservation Acquires their fences held).
    pub fn deliver_events(&mut self, ctx: &mut Ctx<'_>) {
        self.fences(ctx);
        for q in self.slab.iter_mut().flatten() {
            if q.qid != 0 || !q.is_live() || q.aers.is_empty() {
                continue;
            }
            let Some(ctrl) = q.ctrl.clone() else {
                continue;
            };
            while !q.aers.is_empty() {
                let Some(event) = ctrl.take_event() else {
                    break;
                };
                let slot = q.aers.remove(0);
                q.reqs[slot as usize].dw0 = event;
                tracing::debug!(
                    cntlid = ctrl.cntlid,
                    event = format_args!("{event:#010x}"),
                    "asynchronous event"
                );
                respond(q, slot, ctx);
            }
        }
    }

    /// The timers of every queue, after `events` (the transport's own connection events)
    /// had their say; a queue that finished draining is dropped, after `finished` saw it.
    pub fn housekeeping(
        &mut self,
        shared: &Shared,
        pool: &mut DataPool,
        mut events: impl FnMut(&mut Queue<X>, &Shared),
        mut finished: impl FnMut(&Queue<X>),
    ) {
        let now = shared.now_ms();
        for i in 0..self.slab.len() {
            let Some(q) = self.slab[i].as_mut() else {
                continue;
            };
            events(q, shared);
            match q.phase {
                Phase::Live | Phase::Binding => timers(q, shared, now),
                Phase::Invalidating { since } if since.elapsed() > X::REVOKE_TIMEOUT => {
                    disconnect(q)
                }
                Phase::Invalidating { .. } => {}
                Phase::Draining { since } => {
                    let timed_out = since.elapsed() > X::DRAIN_TIMEOUT && q.backend_ops == 0;
                    let drained = X::drained(q) && q.backend_ops == 0;
                    if timed_out && !drained {
                        tracing::warn!(peer = %q.peer, qid = q.qid,
                            outstanding = %X::outstanding(q),
                            "the transport's operations did not all finish; dropping the queue anyway");
                    }
                    if drained || timed_out {
                        self.finish(i, shared, pool, &mut finished);
                    }
                }
            }
        }
    }

    /// Drops a drained queue: its transport state, then its parcel; the data buffers its
    /// requests still hold (a data phase the host never finished) go back to the pool.
    fn finish(
        &mut self,
        i: usize,
        shared: &Shared,
        pool: &mut DataPool,
        finished: &mut impl FnMut(&Queue<X>),
    ) {
        let Some(mut q) = self.slab[i].take() else {
            return;
        };
        // (A request still waiting for one gets it later, and gives it back: its queue's key
        // names no queue any more.)
        for r in q.reqs.iter_mut() {
            pool.give(std::mem::replace(&mut r.data, DataBuf::NONE));
        }
        self.gens[i] = self.gens[i].wrapping_add(1);
        // (An I/O queue's ID was given back to its controller when it began to close.)
        if let Some(ctrl) = q.ctrl.as_ref().filter(|_| q.qid == 0) {
            shared.controllers.remove(ctrl.cntlid);
        }
        finished(&q);
        let (peer, qid, reason) = (q.peer, q.qid, q.close_reason);
        drop(q);
        shared.queues_open.fetch_sub(1, Ordering::AcqRel);
        tracing::info!(%peer, qid, reason, "queue closed");
        shared.log_arena("queue closed");
    }

    /// Closes the queues that came in through listener `id` (it was removed).
    pub fn close_listener(&mut self, id: u64, shared: &Shared) {
        for q in self.slab.iter_mut().flatten() {
            if q.listener == id && !q.is_closing() {
                begin_close(q, "listener removed", shared);
            }
        }
    }

    /// One step of the shutdown: held events answered (the first time), and every queue
    /// that is idle, or all of them once `grace_over`, closed.
    pub fn shutdown_step(&mut self, first: bool, grace_over: bool, ctx: &mut Ctx<'_>) {
        for q in self.slab.iter_mut().flatten() {
            if first && q.is_live() {
                for slot in std::mem::take(&mut q.aers) {
                    q.reqs[slot as usize].fail(Status::ABORT_SQ_DELETED);
                    respond(q, slot, ctx);
                }
            }
            // The admin queue goes last: closing it tears its controller down, and with it
            // every I/O queue, whatever they are still executing.
            let io_queues_open =
                q.qid == 0 && q.ctrl.as_ref().is_some_and(|c| c.io_queues_connected() > 0);
            let idle = q.busy_requests() == 0 && !io_queues_open;
            if !q.is_closing() && (idle || grace_over) {
                begin_close(q, "target shutting down", ctx.shared);
            }
        }
    }
}

/// The timers of a queue that is being set up or live: the Fabrics Connect deadline, the
/// host taking no responses, a controller torn down, authentication and keep-alive.
fn timers<X: QueueTransport>(q: &mut Queue<X>, shared: &Shared, now: u64) {
    let connect_ms = u128::from(shared.fixed.target.connect_timeout_ms);
    if q.ctrl.is_none() && connect_ms != 0 && q.created.elapsed().as_millis() > connect_ms {
        tracing::warn!(peer = %q.peer, qid = q.qid,
            connect_timeout_ms = connect_ms as u64,
            "no Fabrics Connect in time: dropping the queue");
        begin_close(q, "no Fabrics Connect in time", shared);
    } else if X::send_stalled(q, shared.fixed.target.response_timeout_ms) {
        tracing::warn!(peer = %q.peer, qid = q.qid, outstanding = %X::outstanding(q),
            response_timeout_ms = shared.fixed.target.response_timeout_ms,
            "the host takes no responses (it stopped posting receives, or \
             stopped): tearing the queue down");
        begin_close(q, "the host takes no responses", shared);
    } else if let Some(ctrl) = q.ctrl.clone() {
        if ctrl.is_dead() {
            begin_close(q, "controller torn down", shared);
        } else if let Some(why) = q.auth.as_mut().and_then(|a| a.expired(Instant::now())) {
            tracing::warn!(peer = %q.peer, qid = q.qid, cntlid = ctrl.cntlid,
                "{why}: tearing the queue down");
            begin_close(q, why, shared);
        } else if q.qid == 0
            // Until the admin queue has authenticated the host sends no Keep Alive (Linux
            // starts it once the controller is live); AUTH_TIMEOUT bounds that time instead.
            // With KATO 5 s the large FFDHE groups outlasted it under TCG (docs/auth.md).
            && auth::admitted(&q.auth)
            && ctrl.keep_alive_expired(now)
        {
            tracing::warn!(peer = %q.peer, cntlid = ctrl.cntlid,
                kato_ms = ctrl.kato_ms(), "keep-alive timeout: tearing the controller down");
            shared
                .counters
                .keep_alive_expirations
                .fetch_add(1, Ordering::Relaxed);
            begin_close(q, "keep-alive timeout", shared);
        }
    }
}

/// How long the shutdown lets a queue finish what it executes.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
