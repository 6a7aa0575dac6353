//! Worker threads: each owns one completion queue (shared by its connections' QPs), one
//! queue per namespace on its own io_uring, and the connections the listeners gave it.
//!
//! The loop: take new connections; poll the CQ and drive each completion's request; poll
//! the backends and answer finished requests; resume requests the backend had no room for;
//! every few milliseconds look at connection events, keep-alive timers and closing
//! connections. In `busy` poll mode it spins; in `interrupt` mode it arms the CQ and sleeps
//! when nothing is in flight: [`IDLE_WAIT`] at first, longer while nothing comes (up to
//! [`IDLE_WAIT_MAX`]); a completion on the CQ or a message wakes it at once.
//!
//! What a completion means for its request is in [`super::request_flow`]; a new connection's
//! set-up in `admit.rs`; the timers in `housekeeping.rs`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rdmablk::fabric::{Cq, Qp, SendBatch, Wc, WcStatus};
use rdmablk::nvme::transport::rdma::PushRequest;
use rdmablk::nvme::Status;

use super::ns_queues::{Ack, NsQueues};
use super::queue::{begin_close, disconnect};
use super::request::{ReqState, Tag};
use super::request_flow::{execute, on_capsule, on_sent, respond, Ctx};
use super::transport::rdma::queue::{start_reads, Connection};
use super::transport::rdma::wr_id::{WrId, WrKind};
use super::{io_commands, Shared, TargetError};
use crate::arena::Window;
use crate::backend::{BackendError, Completion};
use crate::config::PollMode;
use crate::metrics::NsCounters;
use crate::ring::wake::BackendWake;
use crate::ring::WorkerIo;

mod admit;
mod housekeeping;

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
/// At shutdown, how long connections get to finish in-flight commands.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
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
    /// A new connection (boxed: the other messages are small).
    Conn(Box<PendingConn>),
    /// A namespace was added: open a queue to it, then answer.
    OpenNamespace(Arc<crate::namespace::Namespace>, Ack),
    /// The namespace in this slot was removed: close the queue once its I/O is done (flush
    /// first), then answer.
    CloseNamespace(usize, Ack),
    /// The listener with this id was removed: close the connections that came through it.
    CloseListener(u64),
}

/// A connection handed from a listener to a worker: QP created on the worker's CQ, window
/// carved, nothing posted yet.
pub struct PendingConn {
    pub qp: Qp,
    pub window: Window,
    pub qid: u16,
    pub depth: u32,
    pub read_depth: u32,
    pub responder_resources: u8,
    /// The host's push-write request (never on the admin queue).
    pub push: Option<PushRequest>,
    /// Whether the host sent the extension at all (then it gets an answer).
    pub push_asked: bool,
    pub peer: SocketAddr,
    pub cqes: u32,
    /// The listener the host came in through ([`super::listener::RunningListener::id`]).
    pub listener: u64,
    pub provider: crate::config::Provider,
}

pub(super) fn spawn(
    index: usize,
    shared: Arc<Shared>,
    cq: Cq,
) -> Result<(WorkerTx, JoinHandle<()>), TargetError> {
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
            let depth = (shared.cfg.limits.max_queue_depth * 2).min(BACKEND_DEPTH_MAX);
            // Room for the namespaces there are, and for some added later (beyond it, I/O
            // waits in the backlog for ring room).
            let ring_entries = depth.saturating_mul(shared.namespaces.len().max(4) as u32);
            let io = WorkerIo::new(ring_entries, Some(Arc::clone(&shared.arena)));
            let mut nsq = NsQueues::default();
            let mut ns_counters = Vec::new();
            for ns in shared.namespaces.all() {
                set_counters(&mut ns_counters, &shared, index, ns.slot());
                if let Err(e) = nsq.open(&ns, &io, depth) {
                    let _ = ready_tx.send(Err(BackendError::Queue {
                        nsid: ns.nsid(),
                        why: e,
                    }));
                    return;
                }
            }
            let _ = ready_tx.send(Ok(()));
            let backend_wake = io.wake_in_use();
            let w = Worker {
                index,
                backend_depth: depth,
                busy_poll: shared.cfg.target.poll_mode == PollMode::Busy,
                shared,
                cq,
                rx,
                conns: Vec::new(),
                gens: Vec::new(),
                nsq,
                ns_counters,
                _io: io,
                backend_wake,
                msg_wake,
                idle_streak: 0,
                backlog: VecDeque::with_capacity(1024),
                wcs: vec![Wc::default(); 32],
                comps: vec![Completion::EMPTY; 64],
                done: Vec::with_capacity(1024),
                last_tick: Instant::now(),
                stop_since: None,
            };
            w.run();
        })
        .map_err(TargetError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok((tx, handle)),
        Ok(Err(source)) => {
            let _ = handle.join();
            Err(TargetError::Worker { index, source })
        }
        Err(_) => {
            let _ = handle.join();
            Err(TargetError::Thread(std::io::Error::other(
                "worker exited at start",
            )))
        }
    }
}

struct Worker {
    index: usize,
    /// Depth of each backend queue this worker opens.
    backend_depth: u32,
    busy_poll: bool,
    shared: Arc<Shared>,
    cq: Cq,
    rx: Receiver<WorkerMsg>,
    /// Connection slab; a connection's key is `index | generation << 16`.
    conns: Vec<Option<Connection>>,
    gens: Vec<u16>,
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
    wcs: Vec<Wc>,
    comps: Vec<Completion>,
    /// Backend completions collected by a poll, handled after it (capacity kept).
    done: Vec<Completion>,
    last_tick: Instant,
    stop_since: Option<Instant>,
}

fn slab_index(key: u32) -> usize {
    (key & 0xFFFF) as usize
}

impl Worker {
    fn run(mut self) {
        tracing::debug!(worker = self.index, "worker started");
        let counters = Arc::clone(&self.shared.counters_by_worker[self.index]);
        loop {
            // Everything this pass posts leaves together at its end (one write per connection
            // on the soft provider), before the worker can sleep.
            let batch = SendBatch::begin();
            let mut busy = self.take_new();
            busy |= self.poll_cq();
            busy |= self.poll_backends();
            if !self.backlog.is_empty() {
                self.resume_backlog();
            }
            drop(batch);
            if self.last_tick.elapsed() >= TICK {
                self.last_tick = Instant::now();
                self.housekeeping();
            }
            if self.shared.stopping() && self.shutdown_step() {
                break;
            }
            if busy {
                self.idle_streak = 0;
            } else {
                // Only the waiting is timed (busy = lifetime - idle): no clock read per pass
                // while work keeps coming.
                let t = Instant::now();
                self.idle();
                counters
                    .idle_ns
                    .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }
        self.final_flush();
        tracing::debug!(worker = self.index, "worker stopped");
    }

    fn ctx_and_conn(&mut self, key: u32) -> Option<(&mut Connection, Ctx<'_>)> {
        let i = slab_index(key);
        if self.gens.get(i).copied() != Some((key >> 16) as u16) {
            return None;
        }
        let conn = self.conns.get_mut(i)?.as_mut()?;
        Some((
            conn,
            Ctx {
                shared: &self.shared,
                counters: &self.ns_counters,
                nsq: &mut self.nsq,
                backlog: &mut self.backlog,
            },
        ))
    }

    // ---------------------------------------------------------------- new connections

    fn take_new(&mut self) -> bool {
        let mut any = false;
        while let Ok(msg) = self.rx.try_recv() {
            any = true;
            match msg {
                WorkerMsg::Conn(p) if self.shared.stopping() => self.release(p.cqes),
                WorkerMsg::Conn(p) => self.add(*p),
                WorkerMsg::OpenNamespace(ns, ack) => {
                    set_counters(&mut self.ns_counters, &self.shared, self.index, ns.slot());
                    let _ = ack.send(self.nsq.open(&ns, &self._io, self.backend_depth));
                }
                WorkerMsg::CloseNamespace(slot, ack) => self.nsq.close(slot, ack),
                WorkerMsg::CloseListener(id) => {
                    let shared = Arc::clone(&self.shared);
                    for conn in self.conns.iter_mut().flatten() {
                        if conn.listener == id && !conn.is_closing() {
                            begin_close(conn, "listener removed", &shared);
                        }
                    }
                }
            }
        }
        any
    }

    fn release(&self, cqes: u32) {
        self.shared.cq_reserved[self.index].fetch_sub(cqes, Ordering::AcqRel);
        self.shared.connections.fetch_sub(1, Ordering::AcqRel);
    }

    // ---------------------------------------------------------------- completions

    fn poll_cq(&mut self) -> bool {
        let n = match self.cq.poll(&mut self.wcs) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(worker = self.index, error = %e, "CQ poll failed");
                return false;
            }
        };
        for i in 0..n {
            let wc = self.wcs[i];
            self.on_wc(wc);
        }
        n > 0
    }

    fn on_wc(&mut self, wc: Wc) {
        let Some(id) = WrId::decode(wc.wr_id) else {
            tracing::warn!(wr_id = wc.wr_id, "completion of an unknown work request");
            return;
        };
        if id.kind == WrKind::Bind {
            self.on_bind(id, wc);
            return;
        }
        let Some((conn, mut ctx)) = self.ctx_and_conn(id.conn) else {
            tracing::trace!(?id, "completion of a closed connection");
            return;
        };
        let ok = wc.status.is_success();
        if id.kind != WrKind::Recv {
            conn.xport.send_completions += 1;
        }
        if !ok && wc.status != WcStatus::WrFlushErr {
            tracing::warn!(peer = %conn.peer, qid = conn.qid, kind = ?id.kind, status = %wc.status,
                vendor_err = wc.vendor_err, "work request failed");
        }
        match id.kind {
            WrKind::Recv => {
                conn.xport.recvs_out -= 1;
                if ok {
                    on_capsule(conn, id.slot, wc.byte_len, &mut ctx);
                } else {
                    begin_close(conn, "receive failed", ctx.shared);
                }
            }
            WrKind::Send => {
                conn.xport.sends_out -= 1;
                if ok {
                    on_sent(conn, id.slot, &mut ctx);
                } else {
                    begin_close(conn, "response send failed", ctx.shared);
                }
            }
            WrKind::Read => {
                conn.xport.sends_out -= 1;
                conn.xport.reads_in_flight -= 1;
                if ok {
                    execute(conn, id.slot, &mut ctx);
                    start_reads(conn, ctx.shared);
                } else {
                    begin_close(conn, "RDMA READ of host data failed", ctx.shared);
                }
            }
            WrKind::Write => begin_close(conn, "RDMA WRITE to the host failed", ctx.shared),
            WrKind::Invalidate => {
                conn.xport.sends_out -= 1;
                disconnect(conn);
            }
            WrKind::Bind => {}
        }
    }

    fn on_bind(&mut self, id: WrId, wc: Wc) {
        let Some((conn, ctx)) = self.ctx_and_conn(id.conn) else {
            return;
        };
        conn.xport.sends_out -= 1;
        conn.xport.send_completions += 1;
        if !wc.status.is_success() {
            tracing::warn!(peer = %conn.peer, status = %wc.status, "memory window bind failed");
            begin_close(conn, "memory window bind failed", ctx.shared);
        }
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
        let id = Tag::decode(c.tag);
        let Some((conn, mut ctx)) = self.ctx_and_conn(id.conn) else {
            tracing::error!(?id, "backend completion of a connection that is gone");
            return;
        };
        conn.backend_ops -= 1;
        let r = &mut conn.reqs[id.slot as usize];
        r.ops_in_flight -= 1;
        if let Err(e) = c.result {
            tracing::debug!(qid = conn.qid, cid = r.sqe.cid, error = %e, "backend operation failed");
            r.fail(io_commands::status_of(e));
        }
        if r.ops_in_flight == 0 && r.ops_next >= r.ops_total {
            respond(conn, id.slot, &mut ctx);
        }
    }

    fn resume_backlog(&mut self) {
        for _ in 0..self.backlog.len() {
            let Some(tag) = self.backlog.pop_front() else {
                break;
            };
            let id = Tag::decode(tag);
            let before = self.backlog.len();
            let Some((conn, mut ctx)) = self.ctx_and_conn(id.conn) else {
                continue;
            };
            let slot = id.slot;
            if conn.reqs[slot as usize].state != ReqState::Executing {
                continue;
            }
            if conn.is_closing() {
                let r = &mut conn.reqs[slot as usize];
                r.ops_next = r.ops_total;
                if r.ops_in_flight == 0 {
                    respond(conn, slot, &mut ctx);
                }
                continue;
            }
            io_commands::submit(conn, slot, ctx.nsq, ctx.backlog);
            let r = &conn.reqs[slot as usize];
            if r.ops_in_flight == 0 && r.ops_next >= r.ops_total {
                respond(conn, slot, &mut ctx);
            }
            if self.backlog.len() > before {
                break; // still no room
            }
        }
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
        if self.cq.arm().is_err() {
            std::thread::sleep(Duration::from_micros(200));
            return;
        }
        if self.poll_cq() {
            return;
        }
        if !use_wake {
            let Some(w) = &self.msg_wake else {
                let _ = self.cq.wait(Some(IDLE_WAIT));
                return;
            };
            // The fd is cleared only when the wait found it readable (no syscall per idle
            // entry): a message sent since this pass's take_new left it readable, so the
            // wait returns at once, and the next pass takes the message.
            let wait = IDLE_WAIT
                .saturating_mul(1 << self.idle_streak.min(5))
                .min(IDLE_WAIT_MAX);
            let Ok(ready) = self.cq.wait_with(w.raw_fd(), wait) else {
                std::thread::sleep(Duration::from_micros(200));
                return;
            };
            if ready.other {
                w.clear();
            }
            if ready.cq {
                // Consume the armed CQ's event; the next pass polls the CQ.
                let _ = self.cq.wait(Some(Duration::ZERO));
            } else if !ready.other {
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
        let Ok(ready) = self.cq.wait_with(w.raw_fd(), IDLE_WAIT) else {
            std::thread::sleep(Duration::from_micros(200));
            return;
        };
        if ready.cq {
            // Consume the armed CQ's event; the next pass polls the CQ.
            let _ = self.cq.wait(Some(Duration::ZERO));
        }
    }

    // ---------------------------------------------------------------- shutdown

    /// One step of the shutdown; true when every connection is gone.
    fn shutdown_step(&mut self) -> bool {
        let first = self.stop_since.is_none();
        let since = *self.stop_since.get_or_insert_with(Instant::now);
        let grace_over = since.elapsed() > SHUTDOWN_GRACE;
        for i in 0..self.conns.len() {
            let key = match &self.conns[i] {
                Some(c) => c.key,
                None => continue,
            };
            let Some((conn, mut ctx)) = self.ctx_and_conn(key) else {
                continue;
            };
            if first && conn.is_live() {
                for slot in std::mem::take(&mut conn.aers) {
                    conn.reqs[slot as usize].fail(Status::ABORT_SQ_DELETED);
                    respond(conn, slot, &mut ctx);
                }
            }
            // The admin queue goes last: closing it tears its controller down, and with it
            // every I/O queue, whatever they are still executing.
            let io_queues_open = conn.qid == 0
                && conn
                    .ctrl
                    .as_ref()
                    .is_some_and(|c| c.io_queues_connected() > 0);
            let idle = conn.busy_requests() == 0 && !io_queues_open;
            if !conn.is_closing() && (idle || grace_over) {
                begin_close(conn, "target shutting down", ctx.shared);
            }
        }
        self.conns.iter().all(Option::is_none) && since.elapsed() > Duration::from_millis(100)
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

/// `target.io_statistics = false`: then nothing is counted).
fn set_counters(v: &mut Vec<Option<Arc<NsCounters>>>, shared: &Shared, index: usize, slot: usize) {
    if !shared.cfg.target.io_statistics {
        return;
    }
    if v.len() <= slot {
        v.resize(slot + 1, None);
    }
    v[slot] = Some(shared.counters_by_worker[index].reset_slot(slot));
}
