//! One NVMe queue as the core sees it, whatever carries it: its submission-queue state, its
//! request contexts and their free list, its controller, held Async Event Requests and
//! authentication, its parcel of the arena (receive, response and data slots), and the
//! transport's own state for it (`xport`, behind [`super::transport::QueueTransport`]).
//!
//! # Teardown and the parcel's memory
//! A queue's parcel may be named by things that outlive a disconnect: the transport's
//! operations on it (an RDMA queue's work requests and remote key), and backend I/O into its
//! data slots. The parcel returns to the arena only after all of them are gone: the
//! transport's state (`xport`) is declared, and so dropped, before the parcel, and the worker
//! drops a queue only once it is drained ([`super::transport::QueueTransport::drained`] and
//! no backend operation in flight). What each transport must revoke first is in its own
//! module (for RDMA, [`super::transport::rdma::queue`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use super::request::{ReqState, Request};
use super::subsystems::controller::Controller;
use super::transport::QueueTransport;
use super::Shared;
use crate::arena::pool::{host_key, DataBuf};
use crate::arena::{Parcel, Region};

/// SQHD of every completion on a queue whose Connect disabled SQ flow control.
pub const SQHD_DISABLED: u16 = 0xFFFF;
/// Async Event Requests held at once (Identify Controller AERL + 1).
pub const MAX_HELD_AERS: usize = 4;

/// Where a queue is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Set up by its transport (receives posted, an RDMA push window's bind in flight) and
    /// not yet accepted.
    Binding,
    /// Accepted and serving commands.
    Live,
    /// Target-initiated teardown: the transport revokes what the host could still reach
    /// (an RDMA push window's LOCAL_INV) before it disconnects.
    Invalidating { since: Instant },
    /// Disconnected; waiting for the transport's operations and backend I/O to finish.
    Draining { since: Instant },
}

/// One queue. Field order is drop order: the transport's state before the parcel (see the
/// module documentation).
pub struct Queue<X> {
    /// The transport's state of this queue.
    pub xport: X,
    pub parcel: Parcel,
    /// Key of this queue in its worker (slab index | generation << 16).
    pub key: u32,
    pub qid: u16,
    pub depth: u32,
    pub peer: SocketAddr,
    /// The listener the host came in through ([`super::runtime::port::Port::id`]).
    pub listener: u64,
    pub phase: Phase,
    /// Whose share of the worker's data pool this queue's commands count in
    /// ([`crate::arena::pool::host_key`]: the host's network address, then its host NQN once
    /// the Fabrics Connect named it).
    pub host: u64,
    /// Request contexts (response slot and data slot `i` each), taken from `free_reqs` when a
    /// capsule arrives. They are separate from receive buffers: a receive is reposted as soon
    /// as its capsule is decoded, while its request may still wait for its response to be
    /// sent.
    pub reqs: Box<[Request]>,
    /// Free request contexts (capacity `depth`).
    pub free_reqs: Vec<u32>,
    /// Capsules that arrived while every request context was waiting for its response to be
    /// sent: `(receive slot, bytes)`, served in order as contexts free up.
    pub pending_capsules: VecDeque<(u32, u32)>,
    /// Submission queue head reported in completions.
    pub sq_head: u16,
    /// The host's Connect set CATTR bit 2 (SQ flow control disabled): SQHD in this queue's
    /// completions is reserved and reads 0xFFFF, as nvmet and SPDK report it.
    pub sqhd_disabled: bool,
    pub ctrl: Option<Arc<Controller>>,
    /// Backend operations in flight.
    pub backend_ops: u32,
    /// In-capsule data bytes accepted on this queue (0 on the admin queue).
    pub icd_bytes: u32,
    /// Held Async Event Requests (request slots), at most [`MAX_HELD_AERS`].
    pub aers: Vec<u32>,
    /// Reservation Acquires (preempt and abort) held until their fence is done.
    pub fenced: Vec<(u32, Arc<super::runtime::fence::Fence>)>,
    /// Why teardown started (for the log line).
    pub close_reason: &'static str,
    /// In-band authentication, when the host must authenticate this queue.
    pub auth: Option<Box<super::commands::auth::QueueAuth>>,
    /// When the listener handed the queue to its worker (the Fabrics Connect deadline runs
    /// from here).
    pub created: Instant,
}

/// A read or write outside a request's data slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfSlot;

/// Who a new queue is: its place in its worker, its queue ID and depth, and where its host
/// came from.
pub struct QueueId {
    pub key: u32,
    pub qid: u16,
    pub depth: u32,
    pub peer: SocketAddr,
    pub listener: u64,
}

impl<X> Queue<X> {
    /// A queue of `id.depth` request contexts over transport state `xport` and `parcel`,
    /// in `phase`, created at `created` (the Fabrics Connect deadline runs from there); I/O
    /// queues accept `icd_bytes` of in-capsule data.
    pub fn new(
        xport: X,
        parcel: Parcel,
        id: QueueId,
        phase: Phase,
        icd_bytes: u32,
        created: Instant,
    ) -> Queue<X> {
        let depth = id.depth;
        Queue {
            xport,
            parcel,
            key: id.key,
            qid: id.qid,
            depth,
            peer: id.peer,
            listener: id.listener,
            phase,
            host: host_key(id.peer.ip().to_string().as_bytes()),
            reqs: vec![Request::new(); depth as usize].into_boxed_slice(),
            free_reqs: (0..depth).rev().collect(),
            pending_capsules: VecDeque::with_capacity(depth as usize),
            sq_head: 0,
            sqhd_disabled: false,
            ctrl: None,
            backend_ops: 0,
            icd_bytes: if id.qid == 0 { 0 } else { icd_bytes },
            aers: Vec::with_capacity(MAX_HELD_AERS),
            fenced: Vec::new(),
            close_reason: "",
            auth: None,
            created,
        }
    }

    pub fn is_live(&self) -> bool {
        self.phase == Phase::Live
    }

    pub fn is_closing(&self) -> bool {
        matches!(
            self.phase,
            Phase::Invalidating { .. } | Phase::Draining { .. }
        )
    }

    /// SQHD of the next completion.
    pub fn sqhd(&self) -> u16 {
        if self.sqhd_disabled {
            SQHD_DISABLED
        } else {
            self.sq_head
        }
    }

    /// Copies `dst.len()` bytes at `off` of a request's data buffer `data` into `dst`.
    pub fn read_data(&self, data: DataBuf, off: usize, dst: &mut [u8]) -> Result<(), OutOfSlot> {
        let region = data.region();
        if off
            .checked_add(dst.len())
            .map_or(true, |end| end > region.len)
        {
            return Err(OutOfSlot);
        }
        // SAFETY: the range is inside this queue's data slot (checked), which the arena keeps
        // mapped while the queue lives; the arena's memory is only accessed through raw
        // pointers, and `dst` is ordinary memory it cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(region.as_ptr().add(off), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// Copies `src` to `off` of a request's data buffer `data`. Only for a request whose
    /// buffer no transport or backend operation is using.
    pub fn write_data(&self, data: DataBuf, off: usize, src: &[u8]) -> Result<(), OutOfSlot> {
        let region = data.region();
        if off
            .checked_add(src.len())
            .map_or(true, |end| end > region.len)
        {
            return Err(OutOfSlot);
        }
        // SAFETY: as in `read_data`; no operation reads or writes the slot now (caller).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), region.as_ptr().add(off), src.len()) };
        Ok(())
    }

    /// The command of the capsule in `region` (a receive buffer of this queue, `len` bytes
    /// received there), or None if the buffer cannot hold it.
    pub fn capsule_sqe(&self, region: Region, len: u32) -> Option<rdmablk::nvme::Sqe> {
        use rdmablk::nvme::SQE_LEN;
        if (len as usize) < SQE_LEN || region.len < len as usize {
            return None;
        }
        let mut b = [0u8; SQE_LEN];
        // SAFETY: the receive buffer lies inside this queue's parcel or its worker's SRQ
        // buffers, mapped while the queue lives; its capsule arrived and the buffer is not
        // given back to the transport until the capsule is consumed, so nothing writes it now.
        unsafe { std::ptr::copy_nonoverlapping(region.as_ptr(), b.as_mut_ptr(), SQE_LEN) };
        Some(rdmablk::nvme::Sqe::decode(&b))
    }

    /// Requests neither free nor held (for the shutdown drain).
    pub fn busy_requests(&self) -> usize {
        self.reqs
            .iter()
            .filter(|r| !matches!(r.state, ReqState::Free | ReqState::Held))
            .count()
    }
}

/// Starts tearing a queue down (idempotent).
pub fn begin_close<X: QueueTransport>(q: &mut Queue<X>, reason: &'static str, shared: &Shared) {
    if q.is_closing() {
        return;
    }
    q.close_reason = reason;
    tracing::info!(peer = %q.peer, qid = q.qid,
        cntlid = q.ctrl.as_ref().map(|c| c.cntlid), reason, "queue closing");
    if let Some(ctrl) = &q.ctrl {
        if q.qid == 0 {
            // The controller goes with its admin queue; its I/O queues follow.
            shared.controllers.remove(ctrl.cntlid);
        } else {
            // The queue ID is free again now, not once the queue has drained: a host that
            // drops an I/O queue and connects it again at once (SPDK's host does after an
            // error) must not be refused for the one that is going.
            ctrl.detach_queue(q.qid);
        }
    }
    if q.phase == Phase::Live && X::revoke(q) {
        q.phase = Phase::Invalidating {
            since: Instant::now(),
        };
        return;
    }
    disconnect(q);
}

/// Whether responses have waited to leave with no progress for longer than a limit: what a
/// transport's [`QueueTransport::send_stalled`] keeps (no clock read on the I/O path).
#[derive(Clone, Copy, Debug)]
pub struct SendWatch {
    seen: u64,
    since: Instant,
}

impl Default for SendWatch {
    fn default() -> Self {
        SendWatch {
            seen: 0,
            since: Instant::now(),
        }
    }
}

impl SendWatch {
    /// Called every housekeeping tick with whether anything waits to be sent and a counter
    /// of progress (completions, bytes): true once nothing moved for more than `limit_ms`
    /// (0: never) while something waits. Accurate to the tick.
    pub fn stalled(&mut self, waiting: bool, progress: u64, limit_ms: u32) -> bool {
        if limit_ms == 0 {
            return false;
        }
        if !waiting || progress != self.seen {
            *self = SendWatch {
                seen: progress,
                since: Instant::now(),
            };
            return false;
        }
        self.since.elapsed().as_millis() > u128::from(limit_ms)
    }
}

/// Disconnects the queue's transport; the queue drains from here.
pub fn disconnect<X: QueueTransport>(q: &mut Queue<X>) {
    X::disconnect(q);
    q.phase = Phase::Draining {
        since: Instant::now(),
    };
}
