//! Worker threads: each owns one completion queue (shared by its connections' QPs), one
//! queue per namespace on its own io_uring, and the connections the listeners gave it.
//!
//! The loop: take new connections; poll the CQ and drive each completion's request; poll
//! the backends and answer finished requests; resume requests the backend had no room for;
//! every few milliseconds look at connection events, keep-alive timers and closing
//! connections. In `busy` poll mode it spins; in `interrupt` mode it arms the CQ and sleeps
//! when nothing is in flight: [`IDLE_WAIT`] at first, longer while nothing comes (up to
//! [`IDLE_WAIT_MAX`]); a completion on the CQ or a message wakes it at once.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rdmablk::fabric::{
    Access, CmEvent, ConnParam, Cq, Mr, Pd, Qp, SendBatch, SendFlags, SendWr, Wc, WcStatus, WrOp,
};
use rdmablk::nvme::{CmAccept, PushAnswer, PushRequest, PushWindow, Sqe, Status, SQE_LEN};

use super::command::{self, Next};
use super::connection::{Connection, Phase, RemoteKey, DRAIN_TIMEOUT, INVALIDATE_TIMEOUT};
use super::ns_queues::{Ack, NsQueues};
use super::request::{Action, ReqState, Request, WrId, WrKind};
use super::{auth, fabrics, io, Shared, TargetError};
use crate::arena::Window;
use crate::backend::{BackendError, Completion};
use crate::config::PollMode;
use crate::io::wake::BackendWake;
use crate::io::WorkerIo;
use crate::metrics::{NsCounters, OpKind};

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
    pub provider: rdmablk::fabric::ProviderKind,
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

/// What request handlers need besides their connection.
struct Ctx<'a> {
    shared: &'a Shared,
    /// This worker's metrics counters, by namespace slot.
    counters: &'a [Option<Arc<NsCounters>>],
    nsq: &'a mut NsQueues,
    backlog: &'a mut VecDeque<u64>,
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

    fn add(&mut self, p: PendingConn) {
        let i = match self.conns.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.conns.push(None);
                self.gens.push(0);
                self.conns.len() - 1
            }
        };
        let key = i as u32 | u32::from(self.gens[i]) << 16;
        let shared = Arc::clone(&self.shared);
        let lkey = shared.arena.lkey().expect("the arena is registered");
        let icd_bytes = if p.qid == 0 {
            0
        } else {
            shared.cfg.limits.in_capsule_data_size
        };
        let mut conn = Connection {
            qp: p.qp,
            remote_key: None,
            window: p.window,
            key,
            qid: p.qid,
            depth: p.depth,
            lkey,
            peer: p.peer,
            listener: p.listener,
            provider: p.provider,
            phase: Phase::Binding,
            reqs: vec![Request::new(); p.depth as usize].into_boxed_slice(),
            free_reqs: (0..p.depth).rev().collect(),
            pending_capsules: VecDeque::with_capacity(p.depth as usize),
            read_depth: p.read_depth,
            reads_in_flight: 0,
            read_wait: VecDeque::with_capacity(p.depth as usize),
            sq_head: 0,
            sqhd_disabled: false,
            ctrl: None,
            sends_out: 0,
            send_completions: 0,
            send_watch: (0, Instant::now()),
            recvs_out: 0,
            backend_ops: 0,
            push: None,
            push_busy: Box::new([]),
            accept: None,
            icd_bytes,
            aers: Vec::with_capacity(super::connection::MAX_HELD_AERS),
            cqes: p.cqes,
            close_reason: "",
            created: Instant::now(),
            auth: None,
        };
        for slot in 0..p.depth {
            if let Err(e) = conn.post_recv(slot) {
                tracing::warn!(peer = %p.peer, error = %e, "cannot post receives; dropping");
                drop(conn);
                self.release(p.cqes);
                return;
            }
        }
        let answer = self.setup_push(&mut conn, p.push, p.push_asked);
        let param = ConnParam {
            private_data: CmAccept {
                crqsize: p.depth as u16,
                push: answer,
            }
            .encode()
            .to_vec(),
            responder_resources: p.responder_resources,
            initiator_depth: p.read_depth.min(255) as u8,
            retry_count: 7,
            rnr_retry_count: 7,
        };
        conn.accept = Some(param);
        self.conns[i] = Some(conn);
        self.accept(key);
    }

    /// Sets up the push window if the host asked for one and it can be had (the memory
    /// window's bind is posted right after the accept, by `bind_push_window`).
    fn setup_push(
        &mut self,
        conn: &mut Connection,
        req: Option<PushRequest>,
        asked: bool,
    ) -> PushAnswer {
        let Some(_want) = req else {
            return if asked {
                PushAnswer::Declined
            } else {
                PushAnswer::Absent
            };
        };
        let area = conn.window.data_area();
        let layout = *conn.window.layout();
        let slots = layout.queue_depth.min(u32::from(u16::MAX)) as u16;
        let Some(key) = self.push_key(conn) else {
            return PushAnswer::Declined;
        };
        // A window's key changes at its bind, which can only be posted once the QP is
        // accepted: offer the key the bind will give it (ibv_inc_rkey, both providers).
        let rkey = match &key {
            RemoteKey::Window { mw, .. } => next_rkey(mw.rkey()),
            RemoteKey::Region(mr) => mr.rkey(),
        };
        let Some(grant) = PushWindow::new(area.addr, rkey, slots, layout.data_slot_bytes as u32)
        else {
            return PushAnswer::Declined;
        };
        conn.remote_key = Some(key);
        conn.push = Some(grant);
        conn.push_busy = vec![false; usize::from(slots)].into_boxed_slice();
        PushAnswer::Granted(grant)
    }

    /// The remote key of a push connection's data area: a memory window plus the region it
    /// will be bound over (covering only the data area, no remote access of its own), or where
    /// the device has no windows a region over the data area with remote write. None (the
    /// push is declined) if the device refuses either.
    fn push_key(&self, conn: &Connection) -> Option<RemoteKey> {
        let pd = &self.shared.pd;
        if !self.shared.has_mw {
            let mr = register_data_area(conn, pd, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
            tracing::debug!(peer = %conn.peer, "push window through a per-connection memory region");
            return Some(RemoteKey::Region(mr));
        }
        let mw = match pd.alloc_mw() {
            Ok(mw) => mw,
            Err(e) => {
                tracing::warn!(peer = %conn.peer, error = %e, "no memory window for a push connection");
                return None;
            }
        };
        // The window is bound over this region, not over the arena's: see the `connection`
        // module documentation (devices that bound a window by its region's range).
        let mr = register_data_area(conn, pd, Access::LOCAL_WRITE | Access::MW_BIND)?;
        Some(RemoteKey::Window { mw, mr })
    }

    fn accept(&mut self, key: u32) {
        let Some((conn, ctx)) = self.ctx_and_conn(key) else {
            return;
        };
        let Some(param) = conn.accept.take() else {
            return;
        };
        match conn.qp.accept(&param) {
            Ok(()) => {
                conn.phase = Phase::Live;
                if !bind_push_window(conn) {
                    begin_close(conn, "memory window bind failed", ctx.shared);
                    return;
                }
                tracing::info!(peer = %conn.peer, qid = conn.qid, depth = conn.depth,
                    read_depth = conn.read_depth, push = conn.push.is_some(),
                    window_bytes = conn.window.len(), "queue connected");
                ctx.shared.log_arena("queue connected");
            }
            Err(e) => {
                tracing::warn!(peer = %conn.peer, error = %e, "accept failed");
                begin_close(conn, "accept failed", ctx.shared);
            }
        }
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
            conn.send_completions += 1;
        }
        if !ok && wc.status != WcStatus::WrFlushErr {
            tracing::warn!(peer = %conn.peer, qid = conn.qid, kind = ?id.kind, status = %wc.status,
                vendor_err = wc.vendor_err, "work request failed");
        }
        match id.kind {
            WrKind::Recv => {
                conn.recvs_out -= 1;
                if ok {
                    on_capsule(conn, id.slot, wc.byte_len, &mut ctx);
                } else {
                    begin_close(conn, "receive failed", ctx.shared);
                }
            }
            WrKind::Send => {
                conn.sends_out -= 1;
                if ok {
                    on_sent(conn, id.slot, &mut ctx);
                } else {
                    begin_close(conn, "response send failed", ctx.shared);
                }
            }
            WrKind::Read => {
                conn.sends_out -= 1;
                conn.reads_in_flight -= 1;
                if ok {
                    execute(conn, id.slot, &mut ctx);
                    start_reads(conn, ctx.shared);
                } else {
                    begin_close(conn, "RDMA READ of host data failed", ctx.shared);
                }
            }
            WrKind::Write => begin_close(conn, "RDMA WRITE to the host failed", ctx.shared),
            WrKind::Invalidate => {
                conn.sends_out -= 1;
                disconnect(conn);
            }
            WrKind::Bind | WrKind::Backend => {}
        }
    }

    fn on_bind(&mut self, id: WrId, wc: Wc) {
        let Some((conn, ctx)) = self.ctx_and_conn(id.conn) else {
            return;
        };
        conn.sends_out -= 1;
        conn.send_completions += 1;
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
        let Some(id) = WrId::decode(c.tag) else {
            return;
        };
        let Some((conn, mut ctx)) = self.ctx_and_conn(id.conn) else {
            tracing::error!(?id, "backend completion of a connection that is gone");
            return;
        };
        conn.backend_ops -= 1;
        let r = &mut conn.reqs[id.slot as usize];
        r.ops_in_flight -= 1;
        if let Err(e) = c.result {
            tracing::debug!(qid = conn.qid, cid = r.sqe.cid, error = %e, "backend operation failed");
            r.fail(io::status_of(e));
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
            let Some(id) = WrId::decode(tag) else {
                continue;
            };
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
            io::submit(conn, slot, ctx.nsq, ctx.backlog);
            let r = &conn.reqs[slot as usize];
            if r.ops_in_flight == 0 && r.ops_next >= r.ops_total {
                respond(conn, slot, &mut ctx);
            }
            if self.backlog.len() > before {
                break; // still no room
            }
        }
    }

    // ---------------------------------------------------------------- housekeeping

    /// Completes held Async Event Requests with the events their controllers raised.
    fn deliver_events(&mut self) {
        for i in 0..self.conns.len() {
            let key = match &self.conns[i] {
                Some(c) if c.qid == 0 && c.is_live() && !c.aers.is_empty() => c.key,
                _ => continue,
            };
            let Some((conn, mut ctx)) = self.ctx_and_conn(key) else {
                continue;
            };
            let Some(ctrl) = conn.ctrl.clone() else {
                continue;
            };
            while !conn.aers.is_empty() {
                let Some(event) = ctrl.take_event() else {
                    break;
                };
                let slot = conn.aers.remove(0);
                conn.reqs[slot as usize].dw0 = event;
                tracing::debug!(
                    cntlid = ctrl.cntlid,
                    event = format_args!("{event:#010x}"),
                    "asynchronous event"
                );
                respond(conn, slot, &mut ctx);
            }
        }
    }

    fn housekeeping(&mut self) {
        self.nsq.reap_closed(&mut self.comps);
        self.deliver_events();
        let now = self.shared.now_ms();
        for i in 0..self.conns.len() {
            let Some(conn) = self.conns[i].as_mut() else {
                continue;
            };
            let shared = &*self.shared;
            while let Ok(Some(ev)) = conn.qp.cm_event(Some(Duration::ZERO)) {
                match ev {
                    CmEvent::Established => {
                        tracing::debug!(peer = %conn.peer, qid = conn.qid, "established")
                    }
                    CmEvent::Disconnected => begin_close(conn, "host disconnected", shared),
                    CmEvent::Error(e) => {
                        tracing::warn!(peer = %conn.peer, error = %e, "connection error");
                        begin_close(conn, "connection error", shared);
                    }
                }
            }
            match conn.phase {
                Phase::Live | Phase::Binding => {
                    let connect_ms = u128::from(shared.cfg.target.connect_timeout_ms);
                    if conn.ctrl.is_none()
                        && connect_ms != 0
                        && conn.created.elapsed().as_millis() > connect_ms
                    {
                        tracing::warn!(peer = %conn.peer, qid = conn.qid,
                            connect_timeout_ms = connect_ms as u64,
                            "no Fabrics Connect in time: dropping the queue");
                        begin_close(conn, "no Fabrics Connect in time", shared);
                    } else if conn.send_stalled(shared.cfg.target.response_timeout_ms) {
                        tracing::warn!(peer = %conn.peer, qid = conn.qid, sends = conn.sends_out,
                            response_timeout_ms = shared.cfg.target.response_timeout_ms,
                            "the host takes no responses (it stopped posting receives, or \
                             stopped): tearing the queue down");
                        begin_close(conn, "the host takes no responses", shared);
                    } else if let Some(ctrl) = conn.ctrl.clone() {
                        if ctrl.is_dead() {
                            begin_close(conn, "controller torn down", shared);
                        } else if let Some(why) =
                            conn.auth.as_mut().and_then(|a| a.expired(Instant::now()))
                        {
                            tracing::warn!(peer = %conn.peer, qid = conn.qid, cntlid = ctrl.cntlid,
                                "{why}: tearing the queue down");
                            begin_close(conn, why, shared);
                        } else if conn.qid == 0
                            // Until the admin queue has authenticated the host sends no
                            // Keep Alive (Linux starts it once the controller is live);
                            // AUTH_TIMEOUT bounds that time instead. With KATO 5 s the
                            // large FFDHE groups outlasted it under TCG (docs/auth.md).
                            && auth::admitted(&conn.auth)
                            && ctrl.keep_alive_expired(now)
                        {
                            tracing::warn!(peer = %conn.peer, cntlid = ctrl.cntlid,
                                kato_ms = ctrl.kato_ms(), "keep-alive timeout: tearing the controller down");
                            shared
                                .counters
                                .keep_alive_expirations
                                .fetch_add(1, Ordering::Relaxed);
                            begin_close(conn, "keep-alive timeout", shared);
                        }
                    }
                }
                Phase::Invalidating { since } if since.elapsed() > INVALIDATE_TIMEOUT => {
                    disconnect(conn)
                }
                Phase::Invalidating { .. } => {}
                Phase::Draining { since } => {
                    let timed_out = since.elapsed() > DRAIN_TIMEOUT && conn.backend_ops == 0;
                    if timed_out && !conn.drained() {
                        tracing::warn!(peer = %conn.peer, qid = conn.qid, sends = conn.sends_out,
                            recvs = conn.recvs_out, "flushed completions missing; destroying the QP anyway");
                    }
                    if conn.drained() || timed_out {
                        self.finish(i);
                    }
                }
            }
        }
    }

    /// Drops a drained connection: QP, then its remote key, then its window.
    fn finish(&mut self, i: usize) {
        let Some(conn) = self.conns[i].take() else {
            return;
        };
        self.gens[i] = self.gens[i].wrapping_add(1);
        if let Some(ctrl) = &conn.ctrl {
            if conn.qid == 0 {
                self.shared.controllers.remove(ctrl.cntlid);
            } else {
                ctrl.detach_queue(conn.qid);
            }
        }
        let (peer, qid, reason, cqes) = (conn.peer, conn.qid, conn.close_reason, conn.cqes);
        drop(conn);
        self.release(cqes);
        tracing::info!(%peer, qid, reason, "queue closed");
        self.shared.log_arena("queue closed");
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
            let ready = w.wait_with(self.cq.fd(), wait);
            if ready.backend {
                w.clear();
            }
            if ready.other {
                // Consume the armed CQ's event; the next pass polls the CQ.
                let _ = self.cq.wait(Some(Duration::ZERO));
            } else if !ready.backend {
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
        let ready = w.wait_with(self.cq.fd(), IDLE_WAIT);
        if ready.other {
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

// -------------------------------------------------------------------- request flow

/// Registers a memory region over exactly `conn`'s data area.
fn register_data_area(conn: &Connection, pd: &Pd, access: Access) -> Option<Mr> {
    let area = conn.window.data_area();
    // SAFETY: the region covers this connection's data area, inside its window, which stays
    // mapped while the connection lives; the connection drops the region (field `remote_key`)
    // before its window, once its QP is in the error state and drained, so no work request or
    // peer access through it can outlive the memory. The data area is only touched through
    // raw pointers and the arena's region, never through Rust references.
    let mr = unsafe { pd.register_raw(area.as_ptr(), area.len, access) };
    match mr {
        Ok(mr) => Some(mr),
        Err(e) => {
            tracing::warn!(peer = %conn.peer, error = %e, len = area.len,
                "cannot register a push connection's data area");
            None
        }
    }
}

/// The key a type-2 window gets at its next bind (`ibv_inc_rkey`: same index, tag + 1).
fn next_rkey(rkey: u32) -> u32 {
    (rkey & 0xFFFF_FF00) | (rkey.wrapping_add(1) & 0xFF)
}

/// Posts the bind of the push memory window over the data area, right after the accept.
/// The send queue executes in order, so the bind is done before the response to the
/// queue's Connect: a host pushes only after that response. True if nothing was to be bound.
fn bind_push_window(conn: &mut Connection) -> bool {
    let Some(RemoteKey::Window { mw, mr }) = &conn.remote_key else {
        return true;
    };
    let area = conn.window.data_area();
    let expected = conn.push.map(|p| p.rkey);
    let wr = SendWr {
        wr_id: WrId::new(conn.key, WrKind::Bind, 0).encode(),
        op: WrOp::BindMw {
            mw,
            mr,
            addr: area.addr,
            length: area.len as u64,
            access: Access::REMOTE_WRITE,
        },
        sgl: &[],
        flags: SendFlags::SIGNALED,
    };
    if let Err(e) = conn.qp.post_send(&[wr]) {
        tracing::warn!(peer = %conn.peer, error = %e, "memory window bind not posted");
        return false;
    }
    conn.sends_out += 1;
    if expected != Some(mw.rkey()) {
        tracing::error!(offered = ?expected, bound = mw.rkey(), "push window key mismatch");
        return false;
    }
    true
}

/// A command capsule of `len` bytes arrived in receive slot `recv`.
fn on_capsule(conn: &mut Connection, recv: u32, len: u32, ctx: &mut Ctx<'_>) {
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
fn start_request(conn: &mut Connection, slot: u32, recv: u32, len: u32, ctx: &mut Ctx<'_>) {
    debug_assert_eq!(conn.reqs[slot as usize].state, ReqState::Free);
    let mut b = [0u8; SQE_LEN];
    if conn.mr().read_at(conn.recv_offset(recv), &mut b).is_err() {
        begin_close(conn, "receive slot unreadable", ctx.shared);
        return;
    }
    let sqe = Sqe::decode(&b);
    conn.sq_head = ((u32::from(conn.sq_head) + 1) % conn.depth) as u16;
    let data_slot = match &conn.push {
        Some(_) => u32::from(sqe.cid) % conn.depth,
        None => slot,
    };
    let (qid, push) = (conn.qid, conn.push.is_some());
    let r = &mut conn.reqs[slot as usize];
    r.reset(sqe, len, recv, data_slot);
    if ctx.shared.cfg.target.io_statistics {
        r.received = Some(Instant::now());
    }
    r.enter(ReqState::New, qid, slot);
    let next = if push && conn.push_busy[data_slot as usize] {
        conn.reqs[slot as usize].fail(Status::CID_CONFLICT.with_dnr());
        Next::Respond
    } else {
        if push {
            conn.push_busy[data_slot as usize] = true;
            conn.reqs[slot as usize].holds_push_slot = true;
        }
        command::prepare(conn, slot, ctx.shared)
    };
    // The capsule is consumed (SQE decoded, in-capsule data copied): repost its receive
    // before any response can reach the host.
    if conn.is_live() {
        if let Err(e) = conn.post_recv(recv) {
            tracing::warn!(peer = %conn.peer, error = %e, "receive not reposted");
            begin_close(conn, "receive not reposted", ctx.shared);
        }
    }
    proceed(conn, slot, next, ctx);
}

fn proceed(conn: &mut Connection, slot: u32, next: Next, ctx: &mut Ctx<'_>) {
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
            conn.reqs[slot as usize].enter(ReqState::NeedData, qid, slot);
            conn.read_wait.push_back(slot);
            start_reads(conn, ctx.shared);
        }
    }
}

/// Posts queued RDMA READs while read credits last.
fn start_reads(conn: &mut Connection, shared: &Shared) {
    while conn.is_live() && conn.reads_in_flight < conn.read_depth {
        let Some(slot) = conn.read_wait.pop_front() else {
            break;
        };
        let qid = conn.qid;
        conn.reqs[slot as usize].enter(ReqState::ReadingFromHost, qid, slot);
        if let Err(e) = conn.post_read(slot) {
            tracing::warn!(peer = %conn.peer, error = %e, "RDMA READ not posted");
            begin_close(conn, "RDMA READ not posted", shared);
            return;
        }
    }
}

/// The request's data is in place: run it.
fn execute(conn: &mut Connection, slot: u32, ctx: &mut Ctx<'_>) {
    let r = conn.reqs[slot as usize];
    match r.action {
        Action::Connect => {
            fabrics::execute_connect(conn, slot, ctx.shared);
            respond(conn, slot, ctx);
        }
        Action::Respond => respond(conn, slot, ctx),
        Action::Auth => {
            if r.status.is_success() && conn.is_live() {
                auth::execute(conn, slot);
                // FFDHE takes this thread seconds in a debug build under TCG (ffdhe8192):
                // time the controller spends on its own side is not the host's silence.
                if let Some(ctrl) = &conn.ctrl {
                    ctrl.touch(ctx.shared.now_ms());
                }
            }
            respond(conn, slot, ctx);
        }
        _ if !r.status.is_success() || !conn.is_live() => respond(conn, slot, ctx),
        _ => {
            if !io::plan(conn, slot, ctx.shared) {
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
            io::submit(conn, slot, ctx.nsq, ctx.backlog);
            let r = &conn.reqs[slot as usize];
            if r.ops_in_flight == 0 && r.ops_next >= r.ops_total {
                respond(conn, slot, ctx);
            }
        }
    }
}

/// Completes request `slot`: posts its response (and data), or on a closing connection
/// just frees it.
fn respond(conn: &mut Connection, slot: u32, ctx: &mut Ctx<'_>) {
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
    if let Err(e) = conn.post_response(slot) {
        tracing::warn!(peer = %conn.peer, error = %e, "response not posted");
        begin_close(conn, "response not posted", ctx.shared);
        return;
    }
    // The data phase is over once the response is posted: RC ordering delivers any RDMA
    // WRITE of the data slot before the response, so a host that has seen the response may
    // reuse the command ID, and push into its slot, before the SEND's completion reaches us.
    release_push_slot(conn, slot);
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

/// Fresh metrics counters for namespace `slot` of worker `index` (none with
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

impl Ctx<'_> {
    fn counter(&self, slot: usize) -> Option<&NsCounters> {
        self.counters.get(slot).and_then(|c| c.as_deref())
    }
}

fn free(conn: &mut Connection, slot: u32) {
    let qid = conn.qid;
    conn.reqs[slot as usize].enter(ReqState::Free, qid, slot);
    release_push_slot(conn, slot);
    debug_assert!(
        !conn.free_reqs.contains(&slot),
        "request {slot} freed twice"
    );
    conn.free_reqs.push(slot);
}

/// Gives back request `slot`'s push data slot, if it holds one.
fn release_push_slot(conn: &mut Connection, slot: u32) {
    let r = &mut conn.reqs[slot as usize];
    if r.holds_push_slot {
        r.holds_push_slot = false;
        let ds = r.data_slot as usize;
        if let Some(b) = conn.push_busy.get_mut(ds) {
            *b = false;
        }
    }
}

/// The response SEND completed: the request is free, and serves a waiting capsule if any.
fn on_sent(conn: &mut Connection, slot: u32, ctx: &mut Ctx<'_>) {
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

/// Starts tearing a connection down (idempotent).
fn begin_close(conn: &mut Connection, reason: &'static str, shared: &Shared) {
    if conn.is_closing() {
        return;
    }
    conn.close_reason = reason;
    tracing::info!(peer = %conn.peer, qid = conn.qid,
        cntlid = conn.ctrl.as_ref().map(|c| c.cntlid), reason, "queue closing");
    if let Some(ctrl) = &conn.ctrl {
        if conn.qid == 0 {
            // The controller goes with its admin queue; its I/O queues follow.
            shared.controllers.remove(ctrl.cntlid);
        }
    }
    if conn.phase == Phase::Live && conn.post_invalidate() {
        conn.phase = Phase::Invalidating {
            since: Instant::now(),
        };
        return;
    }
    disconnect(conn);
}

fn disconnect(conn: &mut Connection) {
    if let Err(e) = conn.qp.disconnect() {
        tracing::debug!(peer = %conn.peer, error = %e, "disconnect");
    }
    conn.phase = Phase::Draining {
        since: Instant::now(),
    };
}
