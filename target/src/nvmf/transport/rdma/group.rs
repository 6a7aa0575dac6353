//! A worker's RDMA queues: the completion queues their QPs share (one, or more where the
//! device's CQs are small: [`super::cqs`]), polled for work completions that drive the
//! requests (a capsule received, host data read, a response sent), CM events looked at every
//! housekeeping tick, and the CQs' event channels to sleep on.

use std::any::Any;
use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rdmablk::fabric::{CmEvent, Cq, SendBatch, Wc, WcStatus};

use super::admit::PendingConn;
use super::cm_watch::{CmWatch, SWEEP_MS};
use super::cqs::CqShare;
use super::queue::{start_reads, RdmaQueue, RdmaXport};
use super::srq::SrqWorker;
use super::wr_id::{WrId, WrKind};
use super::RdmaDevice;
use crate::arena::pool::DataBuf;
use crate::backend::Completion;
use crate::nvmf::queue::{begin_close, disconnect, Phase};
use crate::nvmf::request::Tag;
use crate::nvmf::request_flow::{execute, on_capsule, on_sent, Ctx};
use crate::nvmf::transport::{PollGroup, Ready};
use crate::nvmf::worker::queues::Queues;
use crate::nvmf::Shared;

/// Work completions taken per poll.
const POLL_BATCH: usize = 32;

/// A worker's RDMA queues.
pub struct RdmaGroup {
    /// The worker's index (its CQs, its CQ reservations).
    worker: usize,
    pub(super) dev: Arc<RdmaDevice>,
    /// The worker's CQs, in the order the listener made them.
    pub(super) cqs: Vec<Cq>,
    /// Reused by a sleep on more than one CQ: their event channels and the caller's fd.
    pollfds: Vec<libc::pollfd>,
    wcs: Vec<Wc>,
    pub(super) queues: Queues<RdmaXport>,
    /// Held from the beginning of a worker pass to its end (the soft provider then writes
    /// each QP's frames of the pass with one `sendmsg`).
    batch: Option<SendBatch>,
    /// The worker's shared receive queue (once its first queue connected through it).
    srq: Option<Arc<SrqWorker>>,
    /// SRQ mode: which queue a receive completion's QP number names. A queue's entry goes
    /// once its QP is destroyed and a poll after that found the CQ empty, so a reused QP
    /// number never gets a late capsule of the old QP.
    pub(super) by_qpn: HashMap<u32, u32>,
    /// QP numbers of dropped queues not forgotten yet: (qp_num, key).
    gone: Vec<(u32, u32)>,
    /// Which queues have CM events (None: epoll failed, every queue is looked at each tick).
    pub(super) cm_watch: Option<CmWatch>,
    /// When housekeeping last looked at every queue's CM channel ([`SWEEP_MS`]).
    last_sweep_ms: u64,
}

impl RdmaGroup {
    pub fn new(worker: usize, dev: Arc<RdmaDevice>) -> RdmaGroup {
        RdmaGroup {
            worker,
            cqs: dev.cqs.list(worker),
            pollfds: Vec::new(),
            dev,
            wcs: vec![Wc::default(); POLL_BATCH],
            queues: Queues::default(),
            batch: None,
            srq: None,
            by_qpn: HashMap::new(),
            gone: Vec::new(),
            cm_watch: CmWatch::new()
                .inspect_err(|e| {
                    tracing::warn!(worker, error = %e,
                        "no epoll set for CM events: every RDMA queue is looked at each tick")
                })
                .ok(),
            last_sweep_ms: 0,
        }
    }

    /// Gives back what a queue held of the worker: its CQ entries, its place among the
    /// target's connections.
    pub(super) fn release(&self, cq: CqShare, shared: &Shared) {
        self.dev.release_cq(self.worker, cq);
        shared.queues_open.fetch_sub(1, Ordering::AcqRel);
    }

    /// Takes the worker's CQs again: the listener made one more.
    pub(super) fn take_new_cqs(&mut self) {
        self.cqs = self.dev.cqs.list(self.worker);
        tracing::debug!(
            worker = self.worker,
            cqs = self.cqs.len(),
            "polling a new completion queue"
        );
    }

    /// Polls each CQ once (up to [`POLL_BATCH`] completions each); true if any had one.
    fn poll_cq(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut any = false;
        let mut all_empty = true;
        for c in 0..self.cqs.len() {
            let n = match self.cqs[c].poll(&mut self.wcs) {
                Ok(n) => n,
                Err(e) => {
                    tracing::error!(worker = self.worker, cq = c, error = %e, "CQ poll failed");
                    all_empty = false;
                    continue;
                }
            };
            for i in 0..n {
                let wc = self.wcs[i];
                self.on_wc(wc, ctx);
            }
            any |= n > 0;
            all_empty &= n < self.wcs.len();
        }
        if all_empty {
            // Every CQ was empty: every completion of a queue dropped before this poll is in.
            self.forget_gone();
        }
        any
    }

    /// Sleeps on several CQs (and `other`): poll(2) over their event channels; the events of
    /// those that fired are taken, the next pass polls them all.
    fn wait_many(&mut self, other: Option<RawFd>, timeout: Duration) -> Option<Ready> {
        let pollfd = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        self.pollfds.clear();
        self.pollfds
            .extend(self.cqs.iter().map(|cq| pollfd(cq.fd())));
        self.pollfds.extend(other.map(pollfd));
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `pollfds` is a live array of pollfds and its length is passed with it.
        let n = unsafe {
            libc::poll(
                self.pollfds.as_mut_ptr(),
                self.pollfds.len() as libc::nfds_t,
                ms,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                tracing::error!(worker = self.worker, error = %e, "poll(completion channels)");
                return None;
            }
            return Some(Ready {
                events: false,
                other: false,
            });
        }
        let mut events = false;
        for (cq, fd) in self.cqs.iter().zip(&self.pollfds) {
            if fd.revents != 0 {
                let _ = cq.wait(Some(Duration::ZERO));
                events = true;
            }
        }
        let other = other.is_some() && self.pollfds.last().is_some_and(|fd| fd.revents != 0);
        Some(Ready { events, other })
    }

    fn on_wc(&mut self, wc: Wc, ctx: &mut Ctx<'_>) {
        let Some(id) = WrId::decode(wc.wr_id) else {
            tracing::warn!(wr_id = wc.wr_id, "completion of an unknown work request");
            return;
        };
        if id.kind == WrKind::SrqRecv {
            self.on_srq_recv(id.slot, wc, ctx);
            return;
        }
        let Some(q) = self.queues.get(id.queue) else {
            tracing::trace!(?id, "completion of a closed connection");
            return;
        };
        if id.kind == WrKind::Bind {
            on_bind(q, wc, ctx.shared);
            return;
        }
        let ok = wc.status.is_success();
        if id.kind != WrKind::Recv {
            q.xport.send_completions += 1;
        }
        if !ok && wc.status != WcStatus::WrFlushErr {
            tracing::warn!(peer = %q.peer, qid = q.qid, kind = ?id.kind, status = %wc.status,
                vendor_err = wc.vendor_err, "work request failed");
        }
        match id.kind {
            WrKind::Recv => {
                q.xport.recvs_out -= 1;
                if ok {
                    on_capsule(q, id.slot, wc.byte_len, ctx);
                } else {
                    begin_close(q, "receive failed", ctx.shared);
                }
            }
            WrKind::Send => {
                q.xport.sends_out -= 1;
                if ok {
                    on_sent(q, id.slot, ctx);
                } else {
                    begin_close(q, "response send failed", ctx.shared);
                }
            }
            WrKind::Read => {
                q.xport.sends_out -= 1;
                q.xport.reads_in_flight -= 1;
                if ok {
                    execute(q, id.slot, ctx);
                    start_reads(q, ctx.shared);
                } else {
                    begin_close(q, "RDMA READ of host data failed", ctx.shared);
                }
            }
            WrKind::Write => begin_close(q, "RDMA WRITE to the host failed", ctx.shared),
            WrKind::Invalidate => {
                q.xport.sends_out -= 1;
                disconnect(q);
            }
            WrKind::Bind | WrKind::SrqRecv => {}
        }
    }

    /// A receive through the worker's SRQ: buffer `buf` goes to the queue whose QP received
    /// it, or straight back to the SRQ (no such queue any more, an error, a host over its
    /// queue size).
    fn on_srq_recv(&mut self, buf: u32, wc: Wc, ctx: &mut Ctx<'_>) {
        if self.srq.is_none() {
            self.srq = self.dev.srq_made(self.worker);
        }
        let Some(srq) = self.srq.as_deref() else {
            tracing::error!(
                worker = self.worker,
                "an SRQ receive on a worker without an SRQ"
            );
            return;
        };
        if srq.taken() {
            tracing::debug!(
                worker = self.worker,
                posted = srq.posted(),
                count = srq.count(),
                "shared receive queue low: hosts' SENDs may wait (RNR); raise \
                 arena.receive_buffers"
            );
        }
        let repost = |why: &str| {
            if let Err(e) = srq.repost(buf) {
                tracing::error!(buffer = buf, error = %e, why, "cannot repost a receive buffer");
            }
        };
        let queue = self
            .by_qpn
            .get(&wc.qp_num)
            .and_then(|&key| self.queues.get(key));
        let Some(q) = queue else {
            srq.stale();
            tracing::trace!(qp_num = wc.qp_num, "receive for a closed connection");
            repost("stale");
            return;
        };
        if !wc.status.is_success() {
            repost("error");
            if wc.status != WcStatus::WrFlushErr {
                tracing::warn!(peer = %q.peer, qid = q.qid, status = %wc.status,
                    vendor_err = wc.vendor_err, "receive failed");
            }
            begin_close(q, "receive failed", ctx.shared);
            return;
        }
        if q.xport.held.len() >= q.depth as usize {
            repost("over queue size");
            tracing::warn!(peer = %q.peer, qid = q.qid, depth = q.depth,
                "the host sent more commands than its queue size; closing the queue");
            begin_close(q, "host sent more commands than its queue size", ctx.shared);
            return;
        }
        q.xport.held.push(buf);
        on_capsule(q, buf, wc.byte_len, ctx);
    }

    /// Called when a poll found the CQ empty: the queues in `gone` were dropped (their QPs
    /// destroyed) before it, so no completion of theirs can come any more; forget their QP
    /// numbers (unless one was reused already). Waiting for an empty poll, rather than
    /// polling until one, keeps housekeeping bounded on a CQ that never runs dry.
    fn forget_gone(&mut self) {
        for (qpn, key) in self.gone.drain(..) {
            if self.by_qpn.get(&qpn) == Some(&key) {
                self.by_qpn.remove(&qpn);
            }
        }
    }
}

fn on_bind(q: &mut RdmaQueue, wc: Wc, shared: &Shared) {
    q.xport.sends_out -= 1;
    q.xport.send_completions += 1;
    if !wc.status.is_success() {
        tracing::warn!(peer = %q.peer, status = %wc.status, "memory window bind failed");
        begin_close(q, "memory window bind failed", shared);
    }
}

/// The CM events of `q`'s QP: the host disconnected, or the connection failed.
fn cm_events(q: &mut RdmaQueue, shared: &Shared) {
    while let Ok(Some(ev)) = q.xport.qp.cm_event(Some(Duration::ZERO)) {
        match ev {
            CmEvent::Established => {
                tracing::debug!(peer = %q.peer, qid = q.qid, "established")
            }
            CmEvent::Disconnected => begin_close(q, "host disconnected", shared),
            CmEvent::Error(e) => {
                tracing::warn!(peer = %q.peer, error = %e, "connection error");
                begin_close(q, "connection error", shared);
            }
        }
    }
}

impl PollGroup for RdmaGroup {
    fn add(&mut self, handover: Box<dyn Any + Send>, ctx: &mut Ctx<'_>) {
        match handover.downcast::<PendingConn>() {
            Ok(p) => self.add_conn(*p, ctx.shared),
            Err(_) => tracing::error!("the RDMA poll group was handed another transport's queue"),
        }
    }

    fn refuse(&mut self, handover: Box<dyn Any + Send>, shared: &Shared) {
        if let Ok(p) = handover.downcast::<PendingConn>() {
            self.release(p.cq, shared);
        }
    }

    fn begin_pass(&mut self) {
        self.batch = Some(SendBatch::begin());
    }

    fn end_pass(&mut self, _ctx: &mut Ctx<'_>) -> bool {
        self.batch = None;
        false
    }

    fn poll(&mut self, ctx: &mut Ctx<'_>) -> bool {
        self.poll_cq(ctx)
    }

    fn on_backend(&mut self, tag: Tag, c: &Completion, ctx: &mut Ctx<'_>) {
        self.queues.on_backend(tag, c, ctx);
    }

    fn resume(&mut self, tag: Tag, ctx: &mut Ctx<'_>) {
        self.queues.resume(tag, ctx);
    }

    fn on_buffer(&mut self, key: u32, slot: u32, data: DataBuf, ctx: &mut Ctx<'_>) {
        self.queues.on_buffer(key, slot, data, ctx);
    }

    fn housekeeping(&mut self, ctx: &mut Ctx<'_>) {
        self.queues.deliver_events(ctx);
        if let Some(w) = self.cm_watch.as_mut() {
            for key in w.ready() {
                if let Some(q) = self.queues.get(key) {
                    q.xport.cm_ready = true;
                }
            }
        }
        let now = ctx.shared.now_ms();
        let sweep = now.saturating_sub(self.last_sweep_ms) >= SWEEP_MS;
        if sweep {
            self.last_sweep_ms = now;
        }
        let (dev, worker, gone, watch) = (&self.dev, self.worker, &mut self.gone, &self.cm_watch);
        // A live queue's channel is read when the watch says it has events (or at a sweep);
        // a queue binding or closing is looked at every tick, as before (they are few).
        let events = |q: &mut RdmaQueue, shared: &Shared| {
            let look =
                sweep || q.xport.cm_ready || !q.xport.cm_watched || !matches!(q.phase, Phase::Live);
            if look {
                q.xport.cm_ready = false;
                cm_events(q, shared);
            }
        };
        self.queues.housekeeping(ctx.shared, ctx.pool, events, |q| {
            dev.release_cq(worker, q.xport.cq);
            if q.xport.srq.is_some() {
                gone.push((q.xport.qp.qp_num(), q.key));
            }
            if let Some(w) = watch.as_ref().filter(|_| q.xport.cm_watched) {
                w.remove(q.xport.qp.cm_fd());
            }
        });
    }

    fn close_listener(&mut self, id: u64, shared: &Shared) {
        self.queues.close_listener(id, shared);
    }

    fn shutdown_step(&mut self, first: bool, grace_over: bool, ctx: &mut Ctx<'_>) -> bool {
        self.queues.shutdown_step(first, grace_over, ctx);
        self.queues.is_empty()
    }

    fn arm(&mut self, ctx: &mut Ctx<'_>) -> Option<bool> {
        for cq in &self.cqs {
            if cq.arm().is_err() {
                return None;
            }
        }
        Some(self.poll_cq(ctx))
    }

    fn wait(&mut self, other: Option<RawFd>, timeout: Duration) -> Option<Ready> {
        if self.cqs.len() > 1 {
            return self.wait_many(other, timeout);
        }
        let cq = &self.cqs[0];
        let Some(fd) = other else {
            let events = cq.wait(Some(timeout)).ok()?;
            return Some(Ready {
                events,
                other: false,
            });
        };
        let ready = cq.wait_with(fd, timeout).ok()?;
        if ready.cq {
            // Consume the armed CQ's event; the next pass polls the CQ.
            let _ = cq.wait(Some(Duration::ZERO));
        }
        Some(Ready {
            events: ready.cq,
            other: ready.other,
        })
    }
}
