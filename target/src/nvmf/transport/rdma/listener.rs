//! Connection requests: check the NVMe/RDMA CM private data, size the queue, carve its
//! parcel from the arena, create the QP on a worker's completion queue and hand it over.
//!
//! Every refusal is an RDMA CM reject with the NVMe/RDMA status the host expects:
//! bad record (INVALID_LEN / INVALID_RECFMT), queue ID past the controller's limit
//! (INVALID_QID), queue too large (INVALID_HSQSIZE / INVALID_HRQSIZE), no arena space, no
//! completion-queue room or too many connections (NO_RESOURCES). Nothing is ever allocated
//! outside the arena for a connection's buffers.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdmablk::fabric::{ConnRequest, Cq, QpCaps, QpInit};
use rdmablk::nvme::transport::rdma::{CmReject, CmRejectStatus, CmRequest};

use super::admit::PendingConn;
use super::cqs::CqShare;
use super::{cqes_per_connection, provider_kind, RdmaDevice, RdmaError, SEND_WRS_PER_REQUEST};
use crate::arena::{ArenaError, ParcelLayout};
use crate::config::{self, ListenerConfig};
use crate::nvmf::worker::{WorkerMsg, WorkerTx};
use crate::nvmf::{Shared, TargetError, ADMIN_QUEUE_DEPTH};

/// How often a listener looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// Binds listener `cfg` on the target's device and starts accepting on it.
pub(super) fn start(
    dev: &Arc<RdmaDevice>,
    shared: &Arc<Shared>,
    cfg: &ListenerConfig,
    index: usize,
    id: u64,
    stop: Arc<AtomicBool>,
) -> Result<(SocketAddr, JoinHandle<()>), TargetError> {
    let addr = SocketAddr::new(cfg.address, cfg.port);
    let listener = dev
        .device
        .listen(addr, 128)
        .map_err(|source| RdmaError::Listen {
            index,
            addr,
            source,
        })?;
    let local = listener.local_addr();
    tracing::info!(provider = %provider_kind(cfg), %local, device = %dev.device.name(),
        "listening");
    let workers = shared.workers.get().cloned().unwrap_or_default();
    let mut l = Acceptor {
        listener: id,
        shared: Arc::clone(shared),
        dev: Arc::clone(dev),
        workers,
        next_worker: 0,
    };
    let flag = stop;
    let thread = std::thread::Builder::new()
        .name(format!("rdmablk-l{id}"))
        .spawn(move || {
            while !l.shared.stopping() && !flag.load(Ordering::Acquire) {
                match listener.get_request(Some(POLL)) {
                    Ok(Some(req)) => l.handle(req),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "listener failed; no new connections");
                        break;
                    }
                }
            }
            tracing::info!(addr = %listener.local_addr(), "listener stopped");
        })
        .map_err(TargetError::Thread)?;
    Ok((local, thread))
}

struct Acceptor {
    /// This listener's id ([`crate::nvmf::runtime::port::Port::id`]).
    listener: u64,
    shared: Arc<Shared>,
    dev: Arc<RdmaDevice>,
    workers: Vec<WorkerTx>,
    next_worker: usize,
}

impl Acceptor {
    fn handle(&mut self, req: ConnRequest) {
        let peer = req.peer_addr();
        match self.admit(req) {
            Ok(()) => {}
            Err((req, status)) => {
                tracing::info!(%peer, %status, "connection rejected");
                if let Err(e) = req.reject(&CmReject { status }.encode()) {
                    tracing::warn!(%peer, error = %e, "reject failed");
                }
            }
        }
    }

    /// Checks and sets up one request; on refusal gives it back with the reject status.
    fn admit(&mut self, req: ConnRequest) -> Result<(), (ConnRequest, CmRejectStatus)> {
        let cm = match CmRequest::decode(req.private_data()) {
            Ok(cm) => cm,
            Err(st) => return Err((req, st)),
        };
        let limits = self.shared.fixed.limits;
        if u32::from(cm.qid) >= limits.max_queues_per_controller {
            return Err((req, CmRejectStatus::InvalidQid));
        }
        let max_entries = if cm.qid == 0 {
            ADMIN_QUEUE_DEPTH
        } else {
            limits.max_queue_depth
        };
        if let Err(st) = cm.check_queue_sizes(max_entries.min(u32::from(u16::MAX)) as u16) {
            return Err((req, st));
        }
        let depth = cm.sq_entries();
        if self.shared.stopping() {
            return Err((req, CmRejectStatus::NoResources));
        }
        let live = self.shared.queues_open.fetch_add(1, Ordering::AcqRel);
        if live >= limits.max_connections as usize {
            self.shared.queues_open.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                limit = limits.max_connections,
                "limits.max_connections reached"
            );
            return Err((req, CmRejectStatus::NoResources));
        }
        match self.setup(req, cm, depth) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.shared.queues_open.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    fn setup(
        &mut self,
        req: ConnRequest,
        cm: CmRequest,
        depth: u32,
    ) -> Result<(), (ConnRequest, CmRejectStatus)> {
        // Receive and response slots; data slots only for a push queue (its host places data
        // by command ID), every other queue's data takes buffers from its worker's pool.
        // CQ entries: with shared receive queues a queue's receives complete on its worker's
        // CQ out of the SRQ's share, counted once per worker (`cq_sizes`), so a queue
        // reserves its sends only; a worker that could not make its SRQ adds the receives.
        let mut cqes = cqes_per_connection(depth);
        if self.dev.receive_buffers > 0 {
            cqes -= depth;
        }
        let Some((worker, mut share, mut cq)) = self.reserve_worker(cqes) else {
            tracing::warn!(qid = cm.qid, cqes, "no worker has completion-queue room");
            return Err((req, CmRejectStatus::NoResources));
        };
        let limits = &self.shared.fixed.limits;
        // With the worker's shared receive queue the parcel holds responses only.
        let srq = self.dev.srq(worker, &self.shared.arena);
        if srq.is_none() && self.dev.receive_buffers > 0 {
            // No SRQ after all: the queue's receives complete on its CQ too.
            self.dev.release_cq(worker, share);
            match self.dev.reserve_cq(worker, cqes + depth) {
                Some((s, c)) => (share, cq) = (s, c),
                None => {
                    self.shared.queues_open.fetch_sub(1, Ordering::AcqRel);
                    tracing::warn!(
                        qid = cm.qid,
                        "no completion-queue room for the queue's receives"
                    );
                    return Err((req, CmRejectStatus::NoResources));
                }
            }
        }
        let plain = match srq {
            Some(_) => ParcelLayout::responses_only(depth, limits.in_capsule_data_size),
            None => ParcelLayout::without_data(depth, limits.in_capsule_data_size),
        };
        let mut push = cm.push.filter(|_| cm.qid != 0);
        // A push queue's data slots are its own (the push budget, `limits.push_window_bytes`,
        // split over its depth): when push is off or the arena has no room for them, the
        // queue is served without push (the host falls back to the ordinary path: the accept
        // declines push), not refused.
        let wanted = push.and_then(|_| limits.parcel_layout(depth));
        let layout = wanted.filter(|l| srq.is_none() || self.push_leaves_room(l, &plain));
        let pushed = layout.and_then(|l| self.shared.arena.carve(l).ok());
        if push.is_some() && pushed.is_none() {
            if wanted.is_some() && layout.is_none() {
                tracing::debug!(
                    qid = cm.qid,
                    "push declined: the arena keeps its room for the queues still to come"
                );
            } else if layout.is_some() {
                tracing::info!(
                    qid = cm.qid,
                    depth,
                    "no arena room for a push queue's data slots: push declined, the queue is \
                     served without"
                );
            } else {
                tracing::debug!(qid = cm.qid, "limits.push_window_bytes = 0: push declined");
            }
            push = None;
        }
        let carved = match pushed {
            Some(p) => Ok(p),
            None => self.shared.arena.carve(plain),
        };
        let parcel = match carved {
            Ok(w) => w,
            Err(e) => {
                match e {
                    ArenaError::Full { .. } | ArenaError::BadSize { .. } => {
                        tracing::warn!(error = %e, qid = cm.qid, "no arena space for a queue")
                    }
                    e => tracing::error!(error = %e, "carving a window failed"),
                }
                self.dev.release_cq(worker, share);
                return Err((req, CmRejectStatus::NoResources));
            }
        };
        let attr = &self.dev.attr;
        let read_depth = depth
            .min(attr.max_qp_init_rd_atom.max(1))
            .min(u32::from(req.responder_resources()).max(1));
        let responder = u32::from(req.initiator_depth()).min(attr.max_qp_rd_atom) as u8;
        let caps = QpCaps {
            max_send_wr: SEND_WRS_PER_REQUEST * depth + 2,
            // Ignored with an SRQ.
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInit {
            pd: &self.dev.pd,
            send_cq: &cq,
            recv_cq: &cq,
            caps,
            srq: srq.as_ref().map(|s| &s.srq),
        };
        let peer = req.peer_addr();
        let qp = match req.create_qp(&init) {
            Ok(qp) => qp,
            Err(e) => {
                // The request is consumed: dropping it rejected the connection.
                tracing::warn!(%peer, error = %e, "cannot create a queue pair");
                self.release_worker(worker, share);
                return Ok(());
            }
        };
        let pending = PendingConn {
            qp,
            parcel,
            qid: cm.qid,
            depth,
            read_depth: read_depth.max(1),
            responder_resources: responder,
            push,
            push_asked: cm.push.is_some(),
            peer,
            cq: share,
            srq,
            listener: self.listener,
        };
        let msg = WorkerMsg::Handover {
            transport: config::Transport::of(&super::Rdma),
            handover: Box::new(pending),
        };
        if let Err(e) = self.workers[worker].send(msg) {
            // The worker is gone (shutting down): dropping the QP refuses the host.
            tracing::warn!(%peer, "worker {worker} is gone; connection dropped");
            drop(e);
            self.release_worker(worker, share);
        }
        Ok(())
    }

    /// Whether carving a push parcel (`push`) leaves the arena room for what the queues still
    /// to come need: a parcel like `plain` (a page, with the SRQ) for each connection
    /// `limits.max_connections` still allows, and the SRQ buffers of workers that have none
    /// yet. A push window is a speed-up: it must not take the room another host's queue needs
    /// to connect at all. (Without SRQs a plain parcel holds receive slots, hundreds of KiB:
    /// the arena is sized for a few dozen queues then, and push is not held back.)
    fn push_leaves_room(&self, push: &ParcelLayout, plain: &ParcelLayout) -> bool {
        let s = self.shared.arena.stats();
        let free = s.total_bytes.saturating_sub(s.bytes_in_use + s.pool_bytes);
        let open = self.shared.queues_open.load(Ordering::Acquire);
        let to_come = (self.shared.fixed.limits.max_connections as usize).saturating_sub(open);
        let srqs_to_make = (0..self.workers.len())
            .filter(|&w| self.dev.srq_made(w).is_none())
            .count();
        let srq_bytes = self.dev.receive_buffers as usize * self.dev.capsule_slot_bytes;
        let reserve = to_come * plain.total_bytes + srqs_to_make * srq_bytes;
        push.total_bytes + reserve <= free
    }

    /// Picks the next worker (round robin) with room for `cqes` completion entries in one of
    /// its CQs (or room to make another); the share reserved and that CQ.
    fn reserve_worker(&mut self, cqes: u32) -> Option<(usize, CqShare, Cq)> {
        let n = self.workers.len();
        for i in 0..n {
            let w = (self.next_worker + i) % n;
            if let Some((share, cq)) = self.dev.reserve_cq(w, cqes) {
                self.next_worker = (w + 1) % n;
                return Some((w, share, cq));
            }
        }
        None
    }

    fn release_worker(&self, w: usize, share: CqShare) {
        self.dev.release_cq(w, share);
        self.shared.queues_open.fetch_sub(1, Ordering::AcqRel);
    }
}
