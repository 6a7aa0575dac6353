//! The request flow: what the worker does with a command from the moment its capsule
//! arrives to the moment its response is sent, as transitions of the state machine in
//! [`super::request`]: check it (`commands::prepare`), have the transport fetch its data from
//! the host, run it on the backend ([`io_commands`]), have the transport post its
//! response (with any data), and free the context or hand it the next capsule waiting for
//! one. Transport-neutral: every transport's events come here through the functions below, and
//! everything of the transport is reached through [`QueueTransport`].

use std::collections::VecDeque;
use std::sync::Arc;

use rdmablk::nvme::SQE_LEN;

use super::commands::data_phase::Next;
use super::commands::{self, auth, fabrics, io_commands};
use super::queue::{begin_close, Queue};
use super::request::{Action, ReqState, Request, Tag};
use super::transport::QueueTransport;
use super::worker::ns_queues::NsQueues;
use super::worker::pass_stats::PassStats;
use super::Shared;
use crate::arena::pool::{order_for, DataBuf, DataPool, Waiter};
use crate::metrics::{NsCounters, OpKind};
use crate::namespace::qos::Cost;

/// What request handlers need besides their queue.
pub struct Ctx<'a> {
    pub shared: &'a Shared,
    /// The worker's poll group the queue belongs to (in its requests' backend tags).
    pub group: u8,
    /// This worker's metrics counters, by namespace slot.
    pub counters: &'a [Option<Arc<NsCounters>>],
    pub nsq: &'a mut NsQueues,
    pub backlog: &'a mut VecDeque<u64>,
    /// This worker's data buffers.
    pub pool: &'a mut DataPool,
    /// This pass's clock and the I/O commands finished in it (counted at its end).
    pub stats: &'a mut PassStats,
}

impl Ctx<'_> {
    fn counter(&self, slot: usize) -> Option<&NsCounters> {
        self.counters.get(slot).and_then(|c| c.as_deref())
    }
}

/// A command capsule of `len` bytes arrived in receive slot `recv`.
pub fn on_capsule<X: QueueTransport>(q: &mut Queue<X>, recv: u32, len: u32, ctx: &mut Ctx<'_>) {
    if (len as usize) < SQE_LEN {
        tracing::warn!(peer = %q.peer, qid = q.qid, len,
            "command capsule shorter than an SQE: fatal for the queue");
        begin_close(q, "short command capsule", ctx.shared);
        return;
    }
    match q.free_reqs.pop() {
        Some(slot) => start_request(q, slot, recv, len, ctx),
        // Every context waits for its response SEND's completion (the host already has those
        // responses): the capsule waits in its receive buffer for the next one to free up.
        None => q.pending_capsules.push_back((recv, len)),
    }
}

/// Starts request context `slot` on the capsule in receive slot `recv`: takes the command's
/// data buffer (or queues it for one, its capsule left where it is), then prepares it.
fn start_request<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    recv: u32,
    len: u32,
    ctx: &mut Ctx<'_>,
) {
    debug_assert_eq!(q.reqs[slot as usize].state, ReqState::Free);
    let Some(sqe) = X::read_capsule(q, recv, len) else {
        begin_close(q, "receive slot unreadable", ctx.shared);
        return;
    };
    q.sq_head = ((u32::from(q.sq_head) + 1) % q.depth) as u16;
    let push_slot = X::push_slot(q, sqe.cid);
    let qid = q.qid;
    let r = &mut q.reqs[slot as usize];
    r.reset(sqe, len, recv, push_slot.unwrap_or(0));
    if ctx.shared.fixed.target.io_statistics {
        r.received = Some(ctx.stats.now());
    }
    r.enter(ReqState::New, qid, slot);
    // A push queue's command uses its own slot (its data is pushed there, or moves by RDMA
    // READ/WRITE through it) unless its SGL names more than a slot holds (the push budget
    // makes slots smaller than `max_io_size`): that one takes a pool buffer like any other.
    let sgl = rdmablk::nvme::Sgl::decode(&sqe.dptr);
    let slot_bytes = q.parcel.layout().data_slot_bytes as u64;
    let in_slot = push_slot.filter(|_| sgl.map_or(true, |s| u64::from(s.len()) <= slot_bytes));
    if let Some(ps) = in_slot {
        q.reqs[slot as usize].data = DataBuf::outside(q.parcel.data_slot(ps));
    } else if let Some(order) = sgl.ok().and_then(|s| buffer_order(s.len(), ctx.shared)) {
        let w = Waiter {
            group: ctx.group,
            queue: q.key,
            slot,
            order,
        };
        match ctx.pool.take(q.host, w) {
            Some(b) => q.reqs[slot as usize].data = b,
            None => {
                // The command waits until the worker hands it a buffer (`on_buffer`). Its
                // capsule stays unconsumed, unless nothing more is to be read from it (its
                // data is not in it) and the transport takes it back now.
                q.reqs[slot as usize].awaits_buffer = true;
                if let Some(c) = &q.ctrl {
                    c.note_pool_wait();
                }
                let in_capsule = matches!(sgl, Ok(rdmablk::nvme::Sgl::InCapsule(_)));
                if X::RELEASE_BEFORE_POOL_WAIT && !in_capsule {
                    give_back_capsule(q, slot, recv, ctx.shared);
                }
                return;
            }
        }
    }
    prepare_request(q, slot, recv, ctx);
}

/// The buffer a command's data needs: as long as its SGL says (`len`), when that is within
/// `limits.max_io_size` (a longer one is refused by the data phase, before any data moves, and
/// needs none; so does one whose SGL does not decode, which never gets here).
fn buffer_order(len: u32, shared: &Shared) -> Option<u8> {
    if len > shared.fixed.limits.max_io_size {
        return None;
    }
    order_for(len)
}

/// Request `slot`, which waited, has its data buffer `data`: prepare it now. A request that no
/// longer waits for one, or whose queue is closing, gives it back (prepared, it would post an
/// R2T or RDMA READ that never leaves, and its queue would not drain).
pub fn on_buffer<X: QueueTransport>(q: &mut Queue<X>, slot: u32, data: DataBuf, ctx: &mut Ctx<'_>) {
    let closing = q.is_closing();
    let r = &mut q.reqs[slot as usize];
    if r.state != ReqState::New || !r.awaits_buffer || closing {
        ctx.pool.give(data);
        return;
    }
    r.awaits_buffer = false;
    r.data = data;
    let recv = r.recv_slot;
    prepare_request(q, slot, recv, ctx);
}

/// Checks and maps request `slot`'s command (its data buffer in hand), and gives the capsule's
/// receive back as soon as the capsule is consumed.
fn prepare_request<X: QueueTransport>(q: &mut Queue<X>, slot: u32, recv: u32, ctx: &mut Ctx<'_>) {
    let next = match X::capsule_status(q, recv).and_then(|()| X::claim_data_slot(q, slot)) {
        Err(st) => {
            q.reqs[slot as usize].fail(st);
            Next::Respond
        }
        Ok(()) => {
            let now_ms = ctx.stats.now_ms(ctx.shared.epoch);
            commands::prepare(q, slot, ctx.shared, now_ms)
        }
    };
    // The capsule is consumed (SQE decoded, in-capsule data copied): give its buffer back
    // (repost its receive) before any response can reach the host.
    give_back_capsule(q, slot, recv, ctx.shared);
    proceed(q, slot, next, ctx);
}

/// Gives request `slot`'s capsule buffer (receive `recv`) back to the transport, once.
fn give_back_capsule<X: QueueTransport>(q: &mut Queue<X>, slot: u32, recv: u32, shared: &Shared) {
    if q.reqs[slot as usize].capsule_released || !q.is_live() {
        return;
    }
    q.reqs[slot as usize].capsule_released = true;
    if let Err(e) = X::release_capsule(q, recv) {
        tracing::warn!(peer = %q.peer, error = %e, "receive not reposted");
        begin_close(q, "receive not reposted", shared);
    }
}

fn proceed<X: QueueTransport>(q: &mut Queue<X>, slot: u32, next: Next, ctx: &mut Ctx<'_>) {
    let qid = q.qid;
    match next {
        Next::Respond => respond(q, slot, ctx),
        Next::Execute => execute(q, slot, ctx),
        Next::Hold => q.reqs[slot as usize].enter(ReqState::Held, qid, slot),
        Next::Abandon => {
            tracing::debug!(
                qid,
                cid = q.reqs[slot as usize].sqe.cid,
                "command dropped at shutdown: the host retries it after reconnecting"
            );
            q.reqs[slot as usize].enter(ReqState::Responding, qid, slot);
            free(q, slot, ctx.pool);
        }
        Next::Fetch => {
            q.reqs[slot as usize].enter(ReqState::AwaitingData, qid, slot);
            X::fetch(q, slot, ctx.shared);
        }
    }
}

/// The request's data is in place: run it. A request that failed on the way (its data
/// arrived damaged) completes with its status instead, and nothing of it runs.
pub fn execute<X: QueueTransport>(q: &mut Queue<X>, slot: u32, ctx: &mut Ctx<'_>) {
    let r = q.reqs[slot as usize];
    if !r.status.is_success() {
        respond(q, slot, ctx);
        return;
    }
    match r.action {
        Action::Connect => {
            fabrics::execute_connect(q, slot, ctx.shared);
            respond(q, slot, ctx);
        }
        Action::Respond => respond(q, slot, ctx),
        Action::Reservation { .. } => {
            if q.is_live() {
                if let Some(fence) = io_commands::reservation(q, slot, ctx.shared) {
                    // Preempt and abort: held until the preempted hosts' commands are done.
                    let qid = q.qid;
                    q.reqs[slot as usize].enter(ReqState::Held, qid, slot);
                    q.fenced.push((slot, fence));
                    return;
                }
            }
            respond(q, slot, ctx);
        }
        Action::Auth => {
            if q.is_live() {
                auth::execute(q, slot);
                // FFDHE takes this thread seconds in a debug build under TCG (ffdhe8192):
                // time the controller spends on its own side is not the host's silence.
                if let Some(ctrl) = &q.ctrl {
                    ctrl.touch(ctx.shared.now_ms());
                }
            }
            respond(q, slot, ctx);
        }
        _ if !q.is_live() => respond(q, slot, ctx),
        _ => {
            if !io_commands::plan(q, slot, ctx.shared) {
                respond(q, slot, ctx);
                return;
            }
            let qid = q.qid;
            if let Some(c) = io_metric(&q.reqs[slot as usize]).and_then(|(ns, _)| ctx.counter(ns)) {
                c.started();
                q.reqs[slot as usize].counted = true;
            }
            q.reqs[slot as usize].enter(ReqState::Executing, qid, slot);
            // Over its namespace's QoS limits: held (Executing, no backend operation yet)
            // until the worker resumes it.
            if let Some((ns, cost)) = qos_cost(&q.reqs[slot as usize]) {
                let tag = Tag::new(ctx.group, q.key, slot).encode();
                let host = q.ctrl.as_ref().map_or("", |c| c.hostnqn.as_str());
                if !ctx.nsq.admit(ns, tag, cost, host) {
                    return;
                }
            }
            io_commands::submit(q, slot, ctx.group, ctx.nsq, ctx.backlog);
            let r = &q.reqs[slot as usize];
            if r.ops_in_flight == 0 && r.ops_next >= r.ops_total {
                respond(q, slot, ctx);
            }
        }
    }
}

/// Completes request `slot`: posts its response (and data), or on a closing queue just frees
/// it.
pub fn respond<X: QueueTransport>(q: &mut Queue<X>, slot: u32, ctx: &mut Ctx<'_>) {
    let qid = q.qid;
    q.reqs[slot as usize].enter(ReqState::Responding, qid, slot);
    if qid != 0 {
        record(&q.reqs[slot as usize], ctx);
    }
    if !q.is_live() {
        free(q, slot, ctx.pool);
        return;
    }
    let r = &q.reqs[slot as usize];
    if !r.status.is_success() {
        tracing::debug!(qid, cid = r.sqe.cid, opcode = r.sqe.opcode, status = %r.status, "command failed");
    }
    if let Err(e) = X::post_response(q, slot) {
        tracing::warn!(peer = %q.peer, error = %e, "response not posted");
        begin_close(q, "response not posted", ctx.shared);
        return;
    }
    // The data phase is over once the response is posted: the transport delivers any data
    // before the response (RDMA: RC ordering of the WRITE before the SEND), so a host that has
    // seen the response may reuse the command ID, and push into its slot, before we learn the
    // response was sent.
    X::release_data_slot(q, slot);
}

/// The namespace slot of an I/O request and what it costs against the namespace's QoS limits.
fn qos_cost(r: &Request) -> Option<(usize, Cost)> {
    let (ns, write) = match r.action {
        Action::ReadWrite { ns, write, .. } => (ns, write),
        Action::Flush { ns: Some(ns) } | Action::WriteZeroes { ns, .. } => (ns, true),
        Action::Deallocate { ns, .. } => (ns, true),
        _ => return None,
    };
    let bytes = match r.action {
        Action::ReadWrite { .. } => r.data_len,
        _ => 0,
    };
    Some((ns, Cost { bytes, write }))
}

/// The namespace slot and operation of an I/O request, for its metrics.
fn io_metric(r: &Request) -> Option<(usize, OpKind)> {
    Some(match r.action {
        Action::ReadWrite { ns, write, .. } => {
            (ns, if write { OpKind::Write } else { OpKind::Read })
        }
        Action::Flush { ns: Some(ns) } => (ns, OpKind::Flush),
        Action::WriteZeroes { ns, .. } => (ns, OpKind::WriteZeroes),
        Action::Deallocate { ns, .. } => (ns, OpKind::Discard),
        _ => return None,
    })
}

/// Counts a finished I/O command in its namespace's metrics.
fn record(r: &Request, ctx: &mut Ctx<'_>) {
    let Some((ns, op)) = io_metric(r) else {
        return;
    };
    if let Some(t) = r.received {
        ctx.stats.finish(ns, op, r.data_len, r.status, t, r.counted);
    }
}

/// Frees request `slot`: its data buffer goes back to the pool (its response, and any data,
/// has left), its context to the queue's free list.
fn free<X: QueueTransport>(q: &mut Queue<X>, slot: u32, pool: &mut DataPool) {
    let qid = q.qid;
    q.reqs[slot as usize].enter(ReqState::Free, qid, slot);
    X::release_data_slot(q, slot);
    pool.give(std::mem::replace(
        &mut q.reqs[slot as usize].data,
        DataBuf::NONE,
    ));
    debug_assert!(!q.free_reqs.contains(&slot), "request {slot} freed twice");
    q.free_reqs.push(slot);
}

/// The response was sent: the request is free, and serves a waiting capsule if any.
pub fn on_sent<X: QueueTransport>(q: &mut Queue<X>, slot: u32, ctx: &mut Ctx<'_>) {
    let close = q.reqs[slot as usize].close_after;
    free(q, slot, ctx.pool);
    if let Some(why) = close {
        begin_close(q, why, ctx.shared);
        return;
    }
    if q.is_live() {
        if let Some((recv, len)) = q.pending_capsules.pop_front() {
            let slot = q.free_reqs.pop().expect("a request was just freed");
            start_request(q, slot, recv, len, ctx);
        }
    }
}
