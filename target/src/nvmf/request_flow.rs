//! The request flow: what the worker does with a command from the moment its capsule
//! arrives to the moment its response is sent, as transitions of the state machine in
//! [`super::request`]: check it (`command::prepare`), have the transport fetch its data from
//! the host, run it on the backend ([`super::io_commands`]), have the transport post its
//! response (with any data), and free the context or hand it the next capsule waiting for
//! one. Transport-neutral: every transport's events come here through the functions below, and
//! everything of the transport is reached through [`QueueTransport`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use rdmablk::nvme::SQE_LEN;

use super::command;
use super::data_phase::Next;
use super::ns_queues::NsQueues;
use super::queue::{begin_close, Queue};
use super::request::{Action, ReqState, Request, Tag};
use super::transport::QueueTransport;
use super::{auth, fabrics, io_commands, Shared};
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
}

impl Ctx<'_> {
    fn counter(&self, slot: usize) -> Option<&NsCounters> {
        self.counters.get(slot).and_then(|c| c.as_deref())
    }
}

/// A command capsule of `len` bytes arrived in receive slot `recv`.
pub fn on_capsule<X: QueueTransport>(conn: &mut Queue<X>, recv: u32, len: u32, ctx: &mut Ctx<'_>) {
    if (len as usize) < SQE_LEN {
        tracing::warn!(peer = %conn.peer, qid = conn.qid, len,
            "command capsule shorter than an SQE: fatal for the queue");
        begin_close(conn, "short command capsule", ctx.shared);
        return;
    }
    match conn.free_reqs.pop() {
        Some(slot) => start_request(conn, slot, recv, len, ctx),
        // Every context waits for its response SEND's completion (the host already has those
        // responses): the capsule waits in its receive buffer for the next one to free up.
        None => conn.pending_capsules.push_back((recv, len)),
    }
}

/// Starts request context `slot` on the capsule in receive slot `recv`, and gives the receive
/// back as soon as the capsule is consumed.
fn start_request<X: QueueTransport>(
    conn: &mut Queue<X>,
    slot: u32,
    recv: u32,
    len: u32,
    ctx: &mut Ctx<'_>,
) {
    debug_assert_eq!(conn.reqs[slot as usize].state, ReqState::Free);
    let Some(sqe) = X::read_capsule(conn, recv, len) else {
        begin_close(conn, "receive slot unreadable", ctx.shared);
        return;
    };
    conn.sq_head = ((u32::from(conn.sq_head) + 1) % conn.depth) as u16;
    let data_slot = X::data_slot(conn, slot, sqe.cid);
    let qid = conn.qid;
    let r = &mut conn.reqs[slot as usize];
    r.reset(sqe, len, recv, data_slot);
    if ctx.shared.cfg.target.io_statistics {
        r.received = Some(Instant::now());
    }
    r.enter(ReqState::New, qid, slot);
    let next = match X::capsule_status(conn, recv).and_then(|()| X::claim_data_slot(conn, slot)) {
        Err(st) => {
            conn.reqs[slot as usize].fail(st);
            Next::Respond
        }
        Ok(()) => command::prepare(conn, slot, ctx.shared),
    };
    // The capsule is consumed (SQE decoded, in-capsule data copied): give its buffer back
    // (repost its receive) before any response can reach the host.
    if conn.is_live() {
        if let Err(e) = X::release_capsule(conn, recv) {
            tracing::warn!(peer = %conn.peer, error = %e, "receive not reposted");
            begin_close(conn, "receive not reposted", ctx.shared);
        }
    }
    proceed(conn, slot, next, ctx);
}

fn proceed<X: QueueTransport>(conn: &mut Queue<X>, slot: u32, next: Next, ctx: &mut Ctx<'_>) {
    let qid = conn.qid;
    match next {
        Next::Respond => respond(conn, slot, ctx),
        Next::Execute => execute(conn, slot, ctx),
        Next::Hold => conn.reqs[slot as usize].enter(ReqState::Held, qid, slot),
        Next::Abandon => {
            tracing::debug!(
                qid,
                cid = conn.reqs[slot as usize].sqe.cid,
                "command dropped at shutdown: the host retries it after reconnecting"
            );
            conn.reqs[slot as usize].enter(ReqState::Responding, qid, slot);
            free(conn, slot);
        }
        Next::Fetch => {
            conn.reqs[slot as usize].enter(ReqState::AwaitingData, qid, slot);
            X::fetch(conn, slot, ctx.shared);
        }
    }
}

/// The request's data is in place: run it. A request that failed on the way (its data
/// arrived damaged) completes with its status instead, and nothing of it runs.
pub fn execute<X: QueueTransport>(conn: &mut Queue<X>, slot: u32, ctx: &mut Ctx<'_>) {
    let r = conn.reqs[slot as usize];
    if !r.status.is_success() {
        respond(conn, slot, ctx);
        return;
    }
    match r.action {
        Action::Connect => {
            fabrics::execute_connect(conn, slot, ctx.shared);
            respond(conn, slot, ctx);
        }
        Action::Respond => respond(conn, slot, ctx),
        Action::Reservation { .. } => {
            if conn.is_live() {
                if let Some(fence) = io_commands::reservation(conn, slot, ctx.shared) {
                    // Preempt and abort: held until the preempted hosts' commands are done.
                    let qid = conn.qid;
                    conn.reqs[slot as usize].enter(ReqState::Held, qid, slot);
                    conn.fenced.push((slot, fence));
                    return;
                }
            }
            respond(conn, slot, ctx);
        }
        Action::Auth => {
            if conn.is_live() {
                auth::execute(conn, slot);
                // FFDHE takes this thread seconds in a debug build under TCG (ffdhe8192):
                // time the controller spends on its own side is not the host's silence.
                if let Some(ctrl) = &conn.ctrl {
                    ctrl.touch(ctx.shared.now_ms());
                }
            }
            respond(conn, slot, ctx);
        }
        _ if !conn.is_live() => respond(conn, slot, ctx),
        _ => {
            if !io_commands::plan(conn, slot, ctx.shared) {
                respond(conn, slot, ctx);
                return;
            }
            let qid = conn.qid;
            if let Some(c) =
                io_metric(&conn.reqs[slot as usize]).and_then(|(ns, _)| ctx.counter(ns))
            {
                c.started();
                conn.reqs[slot as usize].counted = true;
            }
            conn.reqs[slot as usize].enter(ReqState::Executing, qid, slot);
            // Over its namespace's QoS limits: held (Executing, no backend operation yet)
            // until the worker resumes it.
            if let Some((ns, cost)) = qos_cost(&conn.reqs[slot as usize]) {
                let tag = Tag::new(ctx.group, conn.key, slot).encode();
                let host = conn.ctrl.as_ref().map_or("", |c| c.hostnqn.as_str());
                if !ctx.nsq.admit(ns, tag, cost, host) {
                    return;
                }
            }
            io_commands::submit(conn, slot, ctx.group, ctx.nsq, ctx.backlog);
            let r = &conn.reqs[slot as usize];
            if r.ops_in_flight == 0 && r.ops_next >= r.ops_total {
                respond(conn, slot, ctx);
            }
        }
    }
}

/// Completes request `slot`: posts its response (and data), or on a closing queue just frees
/// it.
pub fn respond<X: QueueTransport>(conn: &mut Queue<X>, slot: u32, ctx: &mut Ctx<'_>) {
    let qid = conn.qid;
    conn.reqs[slot as usize].enter(ReqState::Responding, qid, slot);
    if qid != 0 {
        record(&conn.reqs[slot as usize], ctx);
    }
    if !conn.is_live() {
        free(conn, slot);
        return;
    }
    let r = &conn.reqs[slot as usize];
    if !r.status.is_success() {
        tracing::debug!(qid, cid = r.sqe.cid, opcode = r.sqe.opcode, status = %r.status, "command failed");
    }
    if let Err(e) = X::post_response(conn, slot) {
        tracing::warn!(peer = %conn.peer, error = %e, "response not posted");
        begin_close(conn, "response not posted", ctx.shared);
        return;
    }
    // The data phase is over once the response is posted: the transport delivers any data
    // before the response (RDMA: RC ordering of the WRITE before the SEND), so a host that has
    // seen the response may reuse the command ID, and push into its slot, before we learn the
    // response was sent.
    X::release_data_slot(conn, slot);
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
fn record(r: &Request, ctx: &Ctx<'_>) {
    let Some((ns, op)) = io_metric(r) else {
        return;
    };
    if let (Some(c), Some(t)) = (ctx.counter(ns), r.received) {
        c.done(op, r.data_len, r.status, t.elapsed(), r.counted);
    }
}

fn free<X: QueueTransport>(conn: &mut Queue<X>, slot: u32) {
    let qid = conn.qid;
    conn.reqs[slot as usize].enter(ReqState::Free, qid, slot);
    X::release_data_slot(conn, slot);
    debug_assert!(
        !conn.free_reqs.contains(&slot),
        "request {slot} freed twice"
    );
    conn.free_reqs.push(slot);
}

/// The response was sent: the request is free, and serves a waiting capsule if any.
pub fn on_sent<X: QueueTransport>(conn: &mut Queue<X>, slot: u32, ctx: &mut Ctx<'_>) {
    let close = conn.reqs[slot as usize].close_after;
    free(conn, slot);
    if let Some(why) = close {
        begin_close(conn, why, ctx.shared);
        return;
    }
    if conn.is_live() {
        if let Some((recv, len)) = conn.pending_capsules.pop_front() {
            let slot = conn.free_reqs.pop().expect("a request was just freed");
            start_request(conn, slot, recv, len, ctx);
        }
    }
}
