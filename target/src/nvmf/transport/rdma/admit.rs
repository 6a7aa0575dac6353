//! A new connection on a worker: its request contexts and receives, the push window the host
//! asked for (a memory window bound over exactly its data area, or a region where the device
//! has no memory windows), the accept, and the bind right after it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use rdmablk::fabric::{Access, ConnParam, Mr, Pd, Qp, SendFlags, SendWr, WrOp};
use rdmablk::nvme::transport::rdma::{CmAccept, PushAnswer, PushRequest, PushWindow};

use super::cqs::CqShare;
use super::group::RdmaGroup;
use super::queue::{post_recv, RdmaQueue, RdmaXport, RemoteKey};
use super::srq::SrqWorker;
use super::wr_id::{WrId, WrKind};
use crate::arena::Parcel;
use crate::nvmf::queue::{begin_close, Phase, Queue, QueueId, SendWatch};
use crate::nvmf::Shared;

/// The responder's RNR NAK timer of a queue on an SRQ (IB encoding: 12 is 0.64 ms).
pub const SRQ_MIN_RNR_TIMER: u8 = 12;

/// A connection handed from a listener to a worker: QP created on the worker's CQ, parcel
/// carved, nothing posted yet.
pub struct PendingConn {
    pub qp: Qp,
    pub parcel: Parcel,
    pub qid: u16,
    pub depth: u32,
    pub read_depth: u32,
    pub responder_resources: u8,
    /// The host's push-write request (never on the admin queue).
    pub push: Option<PushRequest>,
    /// Whether the host sent the extension at all (then it gets an answer).
    pub push_asked: bool,
    pub peer: SocketAddr,
    /// The CQ entries it holds on the worker.
    pub cq: CqShare,
    /// The worker's shared receive queue the QP was created with, if any.
    pub srq: Option<Arc<SrqWorker>>,
    /// The listener the host came in through ([`crate::nvmf::runtime::port::Port::id`]).
    pub listener: u64,
}

impl RdmaGroup {
    pub(super) fn add_conn(&mut self, p: PendingConn, shared: &Shared) {
        let key = self.queues.next_key();
        if p.cq.index >= self.cqs.len() {
            // The listener made the worker another CQ for this queue: poll it from now on
            // (before the accept, so before the queue's first completion).
            self.take_new_cqs();
        }
        let lkey = self.dev.lkey;
        let srq_mode = p.srq.is_some();
        let qp_num = p.qp.qp_num();
        // Closing the channel (the QP dropping) takes it out of the set, should this fail.
        let cm_watched = self
            .cm_watch
            .as_ref()
            .is_some_and(|w| w.add(p.qp.cm_fd(), key));
        let xport = RdmaXport {
            remote_key: None,
            qp: p.qp,
            held: Vec::with_capacity(if srq_mode { p.depth as usize } else { 0 }),
            srq: p.srq,
            lkey,
            read_depth: p.read_depth,
            reads_in_flight: 0,
            read_wait: VecDeque::with_capacity(p.depth as usize),
            sends_out: 0,
            send_completions: 0,
            send_watch: SendWatch::default(),
            recvs_out: 0,
            push: None,
            push_busy: Box::new([]),
            accept: None,
            cq: p.cq,
            cm_watched,
            cm_ready: false,
        };
        let id = QueueId {
            key,
            qid: p.qid,
            depth: p.depth,
            peer: p.peer,
            listener: p.listener,
        };
        let icd = shared.fixed.limits.in_capsule_data_size;
        let mut conn = Queue::new(xport, p.parcel, id, Phase::Binding, icd, Instant::now());
        let own_recvs = if srq_mode { 0 } else { p.depth };
        for slot in 0..own_recvs {
            if let Err(e) = post_recv(&mut conn, slot) {
                tracing::warn!(peer = %p.peer, error = %e, "cannot post receives; dropping");
                drop(conn);
                self.release(p.cq, shared);
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
            // A dry SRQ makes the host retry after this long (0.64 ms; the CM's 0 is 655 ms).
            min_rnr_timer: srq_mode.then_some(SRQ_MIN_RNR_TIMER),
        };
        conn.xport.accept = Some(param);
        if srq_mode {
            // Before the accept: the host's first SEND may complete right after it.
            self.by_qpn.insert(qp_num, key);
        }
        self.queues.put(conn);
        self.accept(key, shared);
    }

    /// Sets up the push window if the host asked for one and it can be had (the memory
    /// window's bind is posted right after the accept, by `bind_push_mw`).
    fn setup_push(
        &mut self,
        conn: &mut RdmaQueue,
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
        let area = conn.parcel.data_area();
        let layout = *conn.parcel.layout();
        let slots = layout.queue_depth.min(u32::from(u16::MAX)) as u16;
        let Some(key) = self.push_key(conn) else {
            return PushAnswer::Declined;
        };
        // A memory window's key changes at its bind, which can only be posted once the QP is
        // accepted: offer the key the bind will give it (ibv_inc_rkey, both providers).
        let rkey = match &key {
            RemoteKey::Mw { mw, .. } => next_rkey(mw.rkey()),
            RemoteKey::Mr(mr) => mr.rkey(),
        };
        let Some(grant) = PushWindow::new(area.addr, rkey, slots, layout.data_slot_bytes as u32)
        else {
            return PushAnswer::Declined;
        };
        conn.xport.remote_key = Some(key);
        conn.xport.push = Some(grant);
        conn.xport.push_busy = vec![false; usize::from(slots)].into_boxed_slice();
        PushAnswer::Granted(grant)
    }

    /// The remote key of a push connection's data area: a memory window plus the region it
    /// will be bound over (covering only the data area, no remote access of its own), or where
    /// the device has no memory windows a region over the data area with remote write. None (the
    /// push is declined) if the device refuses either.
    fn push_key(&self, conn: &RdmaQueue) -> Option<RemoteKey> {
        let pd = &self.dev.pd;
        if !self.dev.has_mw {
            let mr = register_data_area(conn, pd, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
            tracing::debug!(peer = %conn.peer, "push window through a per-connection memory region");
            return Some(RemoteKey::Mr(mr));
        }
        let mw = match pd.alloc_mw() {
            Ok(mw) => mw,
            Err(e) => {
                tracing::warn!(peer = %conn.peer, error = %e, "no memory window for a push connection");
                return None;
            }
        };
        // The memory window is bound over this region, not over the arena's: see the
        // `rdma::queue` module documentation (devices that bound a memory window by its
        // region's range).
        let mr = register_data_area(conn, pd, Access::LOCAL_WRITE | Access::MW_BIND)?;
        Some(RemoteKey::Mw { mw, mr })
    }

    fn accept(&mut self, key: u32, shared: &Shared) {
        let Some(conn) = self.queues.get(key) else {
            return;
        };
        let Some(param) = conn.xport.accept.take() else {
            return;
        };
        match conn.xport.qp.accept(&param) {
            Ok(()) => {
                conn.phase = Phase::Live;
                if !bind_push_mw(conn) {
                    begin_close(conn, "memory window bind failed", shared);
                    return;
                }
                tracing::info!(peer = %conn.peer, qid = conn.qid, depth = conn.depth,
                    read_depth = conn.xport.read_depth, push = conn.xport.push.is_some(),
                    window_bytes = conn.parcel.len(), "queue connected");
                shared.log_arena("queue connected");
            }
            Err(e) => {
                tracing::warn!(peer = %conn.peer, error = %e, "accept failed");
                begin_close(conn, "accept failed", shared);
            }
        }
    }
}

/// Registers a memory region over exactly `conn`'s data area.
fn register_data_area(conn: &RdmaQueue, pd: &Pd, access: Access) -> Option<Mr> {
    let area = conn.parcel.data_area();
    // SAFETY: the region covers this connection's data area, inside its parcel, which stays
    // mapped while the connection lives; the connection drops the region (field `remote_key`)
    // before its parcel, once its QP is in the error state and drained, so no work request or
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

/// The key a type-2 memory window gets at its next bind (`ibv_inc_rkey`: same index, tag + 1).
fn next_rkey(rkey: u32) -> u32 {
    (rkey & 0xFFFF_FF00) | (rkey.wrapping_add(1) & 0xFF)
}

/// Posts the bind of the push memory window over the data area, right after the accept.
/// The send queue executes in order, so the bind is done before the response to the
/// queue's Connect: a host pushes only after that response. True if nothing was to be bound.
fn bind_push_mw(conn: &mut RdmaQueue) -> bool {
    let Some(RemoteKey::Mw { mw, mr }) = &conn.xport.remote_key else {
        return true;
    };
    let area = conn.parcel.data_area();
    let expected = conn.xport.push.map(|p| p.rkey);
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
    if let Err(e) = conn.xport.qp.post_send(&[wr]) {
        tracing::warn!(peer = %conn.peer, error = %e, "memory window bind not posted");
        return false;
    }
    conn.xport.sends_out += 1;
    if expected != Some(mw.rkey()) {
        tracing::error!(offered = ?expected, bound = mw.rkey(), "push window key mismatch");
        return false;
    }
    true
}
