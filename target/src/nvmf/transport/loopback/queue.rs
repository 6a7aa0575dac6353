//! The loop transport's state of one queue, and its [`QueueTransport`] implementation:
//! capsules copied from the channel into the queue's receive slots, data pointers mapped as
//! over RDMA (keyed SGLs into the host's memory region, or in-capsule data), host data
//! copied in at once, responses (with any controller-to-host data copied out first) handed
//! to the host in one batch per pass.
//!
//! # Teardown and the parcel's memory
//! Nothing of the host's reaches the parcel: the target copies. [`QueueTransport::disconnect`]
//! closes the channel, after which the target copies nothing more into the host's memory.

use std::time::Duration;

use rdmablk::nvme::transport::loopback::{LoopError, TargetEnd, ToHost};
use rdmablk::nvme::{Cqe, Sgl, SglLimits, Status};

use crate::nvmf::commands::data_phase::{check_sgl, Next, SglFit};
use crate::nvmf::queue::Queue;
use crate::nvmf::request::{DataDir, ReqState};
use crate::nvmf::transport::QueueTransport;
use crate::nvmf::Shared;

/// A queue served over the loop transport.
pub type LoopQueue = Queue<LoopXport>;

/// The loop state of one queue.
pub struct LoopXport {
    pub end: TargetEnd,
    /// Receive slots free for the next capsule.
    pub free_recv: Vec<u32>,
    /// Requests whose host data was fetched (or failed to be): the core hears at the next
    /// poll.
    pub fetched: Vec<u32>,
    /// What leaves for the host at the end of the pass.
    pub out: Vec<ToHost>,
    /// Requests whose response is in `out`: sent once `out` is handed over.
    pub responded: Vec<u32>,
}

impl LoopXport {
    pub fn new(end: TargetEnd, depth: u32) -> LoopXport {
        let n = depth as usize;
        LoopXport {
            end,
            free_recv: (0..depth).rev().collect(),
            fetched: Vec::with_capacity(n),
            out: Vec::with_capacity(2 * n),
            responded: Vec::with_capacity(n),
        }
    }
}

/// The keyed SGL of request `slot` (map_data kept it): address, key.
fn keyed(q: &LoopQueue, slot: u32) -> Option<(u64, u32)> {
    match q.reqs[slot as usize].sgl {
        Some(Sgl::Keyed(k)) => Some((k.addr, k.key)),
        _ => None,
    }
}

impl QueueTransport for LoopXport {
    type Error = LoopError;
    type Outstanding = usize;

    /// Into the host's memory region, as NVMe/RDMA.
    const KEYED_SGLS: bool = true;
    const REVOKE_TIMEOUT: Duration = Duration::from_secs(1);
    const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

    fn release_capsule(q: &mut LoopQueue, recv: u32) -> Result<(), LoopError> {
        q.xport.free_recv.push(recv);
        Ok(())
    }

    fn map_data(
        q: &mut LoopQueue,
        slot: u32,
        dir: DataDir,
        len: u32,
        fit: SglFit,
        shared: &Shared,
    ) -> Result<Next, Status> {
        if dir == DataDir::None {
            return Ok(Next::Execute);
        }
        let limits = SglLimits {
            in_capsule_bytes: q.icd_bytes,
            max_transfer_bytes: shared.fixed.limits.max_io_size,
        };
        // Keyed SGLs into the host's region, as NVMe/RDMA (the data block is NVMe/TCP's).
        let foreign = |s: &Sgl| matches!(s, Sgl::Transport(_));
        let sgl = check_sgl(q, slot, dir, len, fit, &limits, foreign)?;
        let next = match sgl {
            Sgl::Keyed(_) if dir == DataDir::HostToController => Next::Fetch,
            _ => Next::Execute, // in-capsule data is in the data slot now
        };
        let r = &mut q.reqs[slot as usize];
        (r.sgl, r.dir, r.data_len) = (Some(sgl), dir, len);
        Ok(next)
    }

    /// Copies the host's data into the data slot now; the core executes the request at the
    /// next poll (a failed copy completes it with a data transfer error).
    fn fetch(q: &mut LoopQueue, slot: u32, _shared: &Shared) {
        debug_assert_eq!(q.reqs[slot as usize].state, ReqState::AwaitingData);
        let r = q.reqs[slot as usize];
        let region = r.data.region();
        let len = r.data_len as usize;
        assert!(len <= region.len, "data phase longer than its slot");
        // SAFETY: the data slot lies in this queue's parcel and belongs to this request
        // until it is free again.
        let dst = unsafe { std::slice::from_raw_parts_mut(region.as_ptr(), len) };
        let copied = match keyed(q, slot) {
            Some((addr, key)) => q.xport.end.read_host(addr, key, dst),
            None => Err(LoopError::Closed),
        };
        if let Err(e) = copied {
            tracing::debug!(qid = q.qid, cid = r.sqe.cid, error = %e, "host data not fetched");
            q.reqs[slot as usize].fail(Status::DATA_TRANSFER_ERROR.with_dnr());
        }
        q.xport.fetched.push(slot);
    }

    /// Copies controller-to-host data into the host's memory, then queues the response for
    /// the end of the pass. A key or range the host's region does not hold fails the command
    /// (a data transfer error) instead of reaching other memory.
    fn post_response(q: &mut LoopQueue, slot: u32) -> Result<(), LoopError> {
        let r = q.reqs[slot as usize];
        let mut status = r.status;
        if status.is_success() && r.dir == DataDir::ControllerToHost && r.data_len > 0 {
            let region = r.data.region();
            let len = r.data_len as usize;
            assert!(len <= region.len, "data phase longer than its slot");
            // SAFETY: the data slot lies in this queue's parcel; the request's data is in
            // place and nothing writes the slot until the request is free again.
            let src = unsafe { std::slice::from_raw_parts(region.as_ptr(), len) };
            let (addr, key) = keyed(q, slot).ok_or(LoopError::Closed)?;
            match q.xport.end.write_host(addr, key, src) {
                Ok(()) => {}
                Err(LoopError::Closed) => return Err(LoopError::Closed),
                Err(e) => {
                    tracing::debug!(qid = q.qid, cid = r.sqe.cid, error = %e, "data not delivered");
                    status = Status::DATA_TRANSFER_ERROR.with_dnr();
                }
            }
        }
        let mut cqe = Cqe::error(r.sqe.cid, q.qid, q.sqhd(), status);
        cqe.dw0 = r.dw0;
        cqe.dw1 = r.dw1;
        q.xport.out.push(ToHost::Response(cqe));
        q.xport.responded.push(slot);
        Ok(())
    }

    fn disconnect(q: &mut LoopQueue) {
        q.xport.out.clear();
        q.xport.end.close();
    }

    fn drained(_q: &LoopQueue) -> bool {
        true
    }

    fn outstanding(q: &LoopQueue) -> usize {
        q.xport.out.len()
    }

    /// Responses leave at the end of every pass whatever the host does: never stalled.
    fn send_stalled(_q: &mut LoopQueue, _limit_ms: u32) -> bool {
        false
    }
}
