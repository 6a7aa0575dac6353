//! The RDMA transport's state of one queue: its QP, the arena region's key for its parcel,
//! the push window's remote key, read credits, and the work requests it posts (receives,
//! RDMA READ of host data, RDMA WRITE of data chained before the response SEND, the bind and
//! invalidation of the push window's memory window).
//!
//! # The remote key of a push connection
//! A host that negotiated push writes gets a key over its queue's data slots, and only over
//! them. With memory windows, a type-2 memory window is bound over a memory region registered at
//! connect time for exactly that data area (`LOCAL_WRITE | MW_BIND`, no remote access of its
//! own), never over the arena's region: a device that checks a memory window's accesses
//! against its region's range instead of the memory window's bounds (Soft-RoCE on Linux 6.1
//! does) still confines the host to its own data area. Local work requests keep using the
//! arena region's lkey.
//! Without memory windows the key is a region over that data area with remote write.
//!
//! # Teardown and the parcel's memory
//! A connection's parcel may be named by three things that outlive a disconnect: work
//! requests on its QP (receives, RDMA READ/WRITE, SENDs), backend I/O into its data slots
//! (io_uring writes into them), and, on push-write connections, a remote key. The parcel
//! returns to the arena only after all three are gone:
//! 1. target-initiated teardown of a healthy queue first posts LOCAL_INV of the memory window
//!    and waits for it ([`QueueTransport::revoke`]), so the key is dead before the host is
//!    even told;
//! 2. `disconnect` puts the QP in the error state (no remote access can execute any more):
//!    every posted WR completes (flushed); the worker waits for those completions and for
//!    every backend operation of the queue (backend I/O is always waited for; RDMA
//!    completions for at most [`DRAIN_TIMEOUT`]);
//! 3. the queue is dropped, fields in declaration order: its transport state first, and in
//!    it the remote key (the memory window is deallocated, then its region deregistered; or
//!    the fallback region deregistered), then the QP is destroyed; then the
//!    [`crate::arena::Parcel`] frees its space.
//!
//! The guarantee relied on for the remote key is the deallocation in step 3
//! (`ibv_dealloc_mw` / `ibv_dereg_mr` make the key invalid at once) before the memory is
//! freed; the LOCAL_INV of step 1 is an early revocation, not what correctness rests on,
//! because a host that disconnects first leaves the QP in the error state where LOCAL_INV can
//! only flush. The memory window goes before the QP on purpose: a bound type-2 memory window
//! may hold a reference on its QP (rxe does, and `rxe_destroy_qp` then blocks the worker for
//! about 50 s before it gives up with a kernel warning), and a region cannot be deregistered
//! while a memory window is bound over it (rxe: EINVAL).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use rdmablk::fabric::{ConnParam, FabricError, Mr, Mw, Qp, RecvWr, SendFlags, SendWr, Sge, WrOp};
use rdmablk::nvme::transport::rdma::PushWindow;
use rdmablk::nvme::{Cqe, Sgl, Status};

use super::cqs::CqShare;
use super::data::map_data;
use super::srq::SrqWorker;
use super::wr_id::{WrId, WrKind};
use crate::arena::pool::DataBuf;
use crate::arena::Region;
use crate::nvmf::commands::data_phase::{Next, SglFit};
use crate::nvmf::queue::{begin_close, Queue, SendWatch};
use crate::nvmf::request::{DataDir, ReqState};
use crate::nvmf::transport::QueueTransport;
use crate::nvmf::Shared;

/// How long a closing queue waits for its flushed work completions before destroying the QP.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a target-initiated teardown waits for the LOCAL_INV of the push window.
pub const INVALIDATE_TIMEOUT: Duration = Duration::from_secs(1);

/// A queue served over RDMA.
pub type RdmaQueue = Queue<RdmaXport>;

/// The remote key of a push-write connection's data area. Field order is drop order.
pub enum RemoteKey {
    /// A type-2 memory window bound through this connection's QP over `mr`, a region that
    /// covers exactly the connection's data area and grants no remote access itself.
    Mw { mw: Mw, mr: Mr },
    /// Fallback where the device has no memory windows: a memory region over the data area only,
    /// with remote write.
    Mr(Mr),
}

impl RemoteKey {
    pub fn rkey(&self) -> u32 {
        match self {
            RemoteKey::Mw { mw, .. } => mw.rkey(),
            RemoteKey::Mr(r) => r.rkey(),
        }
    }
}

/// The RDMA state of one queue. Field order is drop order: remote key, then QP (see the
/// module documentation), then the worker's SRQ reference; the queue drops its parcel after
/// this.
pub struct RdmaXport {
    pub remote_key: Option<RemoteKey>,
    pub qp: Qp,
    /// The worker's shared receive queue, when the queue receives through it (else through
    /// receive slots of its parcel).
    pub srq: Option<Arc<SrqWorker>>,
    /// SRQ mode: buffers this queue received and has not given back (at most `depth`: a
    /// host that sends more commands than its queue size is closed).
    pub held: Vec<u32>,
    /// The arena region's local key.
    pub lkey: u32,
    /// RDMA READs this queue may have in flight (negotiated read depth).
    pub read_depth: u32,
    pub reads_in_flight: u32,
    /// Requests waiting for a read credit, in arrival order (capacity `depth`).
    pub read_wait: VecDeque<u32>,
    /// Signalled send WRs posted and not completed.
    pub sends_out: u32,
    /// Send-side completions so far (counted per completion; no clock read on the I/O path).
    pub send_completions: u64,
    /// `send_completions` unchanged for more than `target.response_timeout_ms` with sends
    /// out: the host takes nothing.
    pub send_watch: SendWatch,
    /// Receives posted and not completed.
    pub recvs_out: u32,
    /// Push-write grant of this connection.
    pub push: Option<PushWindow>,
    /// `push_busy[i]`: data slot `i` belongs to a command in flight (push connections).
    pub push_busy: Box<[bool]>,
    /// Accept parameters, until accepted.
    pub accept: Option<ConnParam>,
    /// Completion-queue entries reserved on the worker.
    pub cq: CqShare,
    /// Its CM channel is in the worker's [`super::cm_watch::CmWatch`] (else housekeeping
    /// looks at it every tick).
    pub cm_watched: bool,
    /// The watch found CM events on its channel: housekeeping reads them.
    pub cm_ready: bool,
}

fn wr(q: &RdmaQueue, kind: WrKind, slot: u32) -> u64 {
    WrId::new(q.key, kind, slot).encode()
}

/// A queue being dropped gives back the SRQ buffers it still holds: it is disconnected and
/// drained (no command of it reads a capsule any more), and its QP, in the error state, takes
/// no receive, so they go straight to the worker's other queues.
impl Drop for RdmaXport {
    fn drop(&mut self) {
        let Some(srq) = &self.srq else {
            return;
        };
        for b in self.held.drain(..) {
            if let Err(e) = srq.repost(b) {
                tracing::error!(buffer = b, error = %e, "cannot repost a receive buffer to the SRQ");
            }
        }
    }
}

/// Posts receive slot `slot` (a queue without SRQ).
pub fn post_recv(q: &mut RdmaQueue, slot: u32) -> Result<(), FabricError> {
    let sge = [q.parcel.recv_slot(slot).sge(q.xport.lkey)];
    q.xport.qp.post_recv(&[RecvWr {
        wr_id: wr(q, WrKind::Recv, slot),
        sgl: &sge,
    }])?;
    q.xport.recvs_out += 1;
    Ok(())
}

/// Posts the RDMA READ of request `slot`'s host data into its data slot.
fn post_read(q: &mut RdmaQueue, slot: u32) -> Result<(), FabricError> {
    let r = &q.reqs[slot as usize];
    let Some(Sgl::Keyed(k)) = r.sgl else {
        unreachable!("a read is only queued for a keyed SGL");
    };
    let sge = [data_sge(q, r.data, r.data_len)];
    q.xport.qp.post_send(&[SendWr {
        wr_id: wr(q, WrKind::Read, slot),
        op: WrOp::RdmaRead {
            remote_addr: k.addr,
            rkey: k.key,
        },
        sgl: &sge,
        flags: SendFlags::SIGNALED,
    }])?;
    q.xport.sends_out += 1;
    q.xport.reads_in_flight += 1;
    Ok(())
}

fn data_sge(q: &RdmaQueue, data: DataBuf, len: u32) -> Sge {
    let region = data.region();
    // Lengths are checked against max_io_size (<= the slot) before a data phase is set.
    assert!(
        len as usize <= region.len,
        "data phase longer than its slot"
    );
    Sge {
        addr: region.addr,
        length: len,
        lkey: q.xport.lkey,
    }
}

/// Posts queued RDMA READs while read credits last.
pub fn start_reads(q: &mut RdmaQueue, shared: &Shared) {
    while q.is_live() && q.xport.reads_in_flight < q.xport.read_depth {
        let Some(slot) = q.xport.read_wait.pop_front() else {
            break;
        };
        if let Err(e) = post_read(q, slot) {
            tracing::warn!(peer = %q.peer, error = %e, "RDMA READ not posted");
            begin_close(q, "RDMA READ not posted", shared);
            return;
        }
    }
}

/// Work requests of a queue not completed yet (for log lines).
#[derive(Clone, Copy, Debug)]
pub struct WrsOut {
    pub sends: u32,
    pub recvs: u32,
}

impl std::fmt::Display for WrsOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} sends, {} receives", self.sends, self.recvs)
    }
}

impl QueueTransport for RdmaXport {
    type Error = FabricError;
    type Outstanding = WrsOut;

    const KEYED_SGLS: bool = true;
    const RELEASE_BEFORE_POOL_WAIT: bool = true;
    const REVOKE_TIMEOUT: Duration = INVALIDATE_TIMEOUT;
    const DRAIN_TIMEOUT: Duration = DRAIN_TIMEOUT;

    fn release_capsule(q: &mut RdmaQueue, recv: u32) -> Result<(), FabricError> {
        let Some(srq) = &q.xport.srq else {
            return post_recv(q, recv);
        };
        if let Some(i) = q.xport.held.iter().position(|&b| b == recv) {
            q.xport.held.swap_remove(i);
        }
        srq.repost(recv)
    }

    fn capsule_region(q: &RdmaQueue, recv: u32) -> Region {
        match &q.xport.srq {
            Some(srq) => srq.slot(recv),
            None => q.parcel.recv_slot(recv),
        }
    }

    fn push_slot(q: &RdmaQueue, cid: u16) -> Option<u32> {
        q.xport.push.map(|_| u32::from(cid) % q.depth)
    }

    fn claim_data_slot(q: &mut RdmaQueue, slot: u32) -> Result<(), Status> {
        if q.xport.push.is_none() {
            return Ok(());
        }
        let ds = q.reqs[slot as usize].push_slot as usize;
        if q.xport.push_busy[ds] {
            return Err(Status::CID_CONFLICT.with_dnr());
        }
        q.xport.push_busy[ds] = true;
        q.reqs[slot as usize].holds_data_slot = true;
        Ok(())
    }

    fn release_data_slot(q: &mut RdmaQueue, slot: u32) {
        let r = &mut q.reqs[slot as usize];
        if r.holds_data_slot {
            r.holds_data_slot = false;
            let ds = r.push_slot as usize;
            if let Some(b) = q.xport.push_busy.get_mut(ds) {
                *b = false;
            }
        }
    }

    fn map_data(
        q: &mut RdmaQueue,
        slot: u32,
        dir: DataDir,
        len: u32,
        fit: SglFit,
        shared: &Shared,
    ) -> Result<Next, Status> {
        map_data(q, slot, dir, len, fit, shared)
    }

    fn fetch(q: &mut RdmaQueue, slot: u32, shared: &Shared) {
        debug_assert_eq!(q.reqs[slot as usize].state, ReqState::AwaitingData);
        q.xport.read_wait.push_back(slot);
        start_reads(q, shared);
    }

    /// Writes request `slot`'s completion and posts it: RDMA WRITE of controller-to-host
    /// data (unsignalled) chained before the signalled SEND, or SEND_WITH_INV of the host's
    /// key when its SGL asked for invalidation.
    fn post_response(q: &mut RdmaQueue, slot: u32) -> Result<(), FabricError> {
        let r = q.reqs[slot as usize];
        let mut cqe = Cqe::error(r.sqe.cid, q.qid, q.sqhd(), r.status);
        cqe.dw0 = r.dw0;
        cqe.dw1 = r.dw1;
        let resp = q.parcel.resp_slot(slot);
        let bytes = cqe.to_bytes();
        assert!(bytes.len() <= resp.len, "CQE larger than its slot");
        // SAFETY: the response slot lies inside this queue's parcel, mapped while the queue
        // lives; it belongs to this request, whose previous response SEND completed before the
        // request was freed, so no work request reads it now.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), resp.as_ptr(), bytes.len()) };
        let resp_sge = [resp.sge(q.xport.lkey)];
        let keyed = match r.sgl {
            Some(Sgl::Keyed(k)) if k.len > 0 => Some(k),
            _ => None,
        };
        let send_op = match keyed {
            Some(k) if k.invalidate => WrOp::SendWithInv { rkey: k.key },
            _ => WrOp::Send,
        };
        let send = SendWr {
            wr_id: wr(q, WrKind::Send, slot),
            op: send_op,
            sgl: &resp_sge,
            flags: SendFlags::SIGNALED,
        };
        match keyed {
            Some(k)
                if r.status.is_success()
                    && r.dir == DataDir::ControllerToHost
                    && r.data_len > 0 =>
            {
                let data_sge = [data_sge(q, r.data, r.data_len)];
                let write = SendWr {
                    wr_id: wr(q, WrKind::Write, slot),
                    op: WrOp::RdmaWrite {
                        remote_addr: k.addr,
                        rkey: k.key,
                    },
                    sgl: &data_sge,
                    flags: SendFlags::empty(),
                };
                q.xport.qp.post_send(&[write, send])?;
            }
            _ => q.xport.qp.post_send(&[send])?,
        }
        q.xport.sends_out += 1;
        Ok(())
    }

    /// Posts LOCAL_INV of the push memory window; false if there is none to invalidate.
    fn revoke(q: &mut RdmaQueue) -> bool {
        let Some(RemoteKey::Mw { mw, .. }) = &q.xport.remote_key else {
            return false;
        };
        let wr = SendWr {
            wr_id: wr(q, WrKind::Invalidate, 0),
            op: WrOp::LocalInv { rkey: mw.rkey() },
            sgl: &[],
            flags: SendFlags::SIGNALED,
        };
        match q.xport.qp.post_send(&[wr]) {
            Ok(()) => {
                q.xport.sends_out += 1;
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "LOCAL_INV not posted");
                false
            }
        }
    }

    fn disconnect(q: &mut RdmaQueue) {
        if let Err(e) = q.xport.qp.disconnect() {
            tracing::debug!(peer = %q.peer, error = %e, "disconnect");
        }
    }

    fn drained(q: &RdmaQueue) -> bool {
        q.xport.sends_out == 0 && q.xport.recvs_out == 0
    }

    fn outstanding(q: &RdmaQueue) -> WrsOut {
        WrsOut {
            sends: q.xport.sends_out,
            recvs: q.xport.recvs_out,
        }
    }

    /// Whether sends have been out with no send-side completion for longer than `limit_ms`.
    fn send_stalled(q: &mut RdmaQueue, limit_ms: u32) -> bool {
        let x = &mut q.xport;
        x.send_watch
            .stalled(x.sends_out > 0, x.send_completions, limit_ms)
    }
}
