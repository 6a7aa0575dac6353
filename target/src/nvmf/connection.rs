//! One queue (RDMA connection): its QP, its window of the arena, its requests, and its
//! teardown.
//!
//! # The remote key of a push connection
//! A host that negotiated push writes gets a key over its queue's data slots, and only over
//! them. With memory windows, the type-2 window is bound over a memory region registered at
//! connect time for exactly that data area (`LOCAL_WRITE | MW_BIND`, no remote access of its
//! own), never over the arena's region: a device that checks a window's accesses against its
//! region's range instead of the window's bounds (Soft-RoCE on Linux 6.1 does) still confines
//! the host to its own data area. Local work requests keep using the arena region's lkey.
//! Without windows the key is a region over that data area with remote write.
//!
//! # Teardown and the window's memory
//! A connection's window may be named by three things that outlive a disconnect: work
//! requests on its QP (receives, RDMA READ/WRITE, SENDs), backend I/O into its data slots
//! (io_uring writes into them), and, on push-write connections, a remote key. The window
//! returns to the arena only after all three are gone:
//! 1. target-initiated teardown of a healthy queue first posts LOCAL_INV of the memory window
//!    and waits for it, so the key is dead before the host is even told;
//! 2. `disconnect` puts the QP in the error state (no remote access can execute any more):
//!    every posted WR completes (flushed); the worker waits for those completions and for
//!    every backend operation of the queue (backend I/O is always waited for; RDMA
//!    completions for at most [`DRAIN_TIMEOUT`]);
//! 3. the connection is dropped, fields in declaration order: the remote key first (the
//!    memory window is deallocated, then its region deregistered; or the fallback region
//!    deregistered), then the QP is destroyed, then the [`Window`] frees its space.
//!
//! The guarantee relied on for the remote key is the deallocation in step 3
//! (`ibv_dealloc_mw` / `ibv_dereg_mr` make the key invalid at once) before the memory is
//! freed; the LOCAL_INV of step 1 is an early revocation, not what correctness rests on,
//! because a host that disconnects first leaves the QP in the error state where LOCAL_INV can
//! only flush. The window goes before the QP on purpose: a bound type-2 window may hold a
//! reference on its QP (rxe does, and `rxe_destroy_qp` then blocks the worker for about 50 s
//! before it gives up with a kernel warning), and a region cannot be deregistered while a
//! window is bound over it (rxe: EINVAL).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::fabric::{ConnParam, Mr, Mw, Qp, RecvWr, SendFlags, SendWr, Sge, WrOp};
use rdmablk::nvme::transport::rdma::PushWindow;
use rdmablk::nvme::{Cqe, Sgl};

use super::controller::Controller;
use super::request::{DataDir, ReqState, Request, WrId, WrKind};
use super::Shared;
use crate::arena::Window;

/// How long a closing queue waits for its flushed work completions before destroying the QP.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a target-initiated teardown waits for the LOCAL_INV of the push window.
pub const INVALIDATE_TIMEOUT: Duration = Duration::from_secs(1);
/// SQHD of every completion on a queue whose Connect disabled SQ flow control.
pub const SQHD_DISABLED: u16 = 0xFFFF;
/// Async Event Requests held at once (Identify Controller AERL + 1).
pub const MAX_HELD_AERS: usize = 4;

/// The remote key of a push-write connection's data area. Field order is drop order.
pub enum RemoteKey {
    /// A type-2 memory window bound through this connection's QP over `mr`, a region that
    /// covers exactly the connection's data area and grants no remote access itself.
    Window { mw: Mw, mr: Mr },
    /// Fallback where the device has no windows: a memory region over the data area only,
    /// with remote write.
    Region(Mr),
}

impl RemoteKey {
    pub fn rkey(&self) -> u32 {
        match self {
            RemoteKey::Window { mw, .. } => mw.rkey(),
            RemoteKey::Region(r) => r.rkey(),
        }
    }
}

/// Where a connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Receives posted; the push window's bind is in flight; not yet accepted.
    Binding,
    /// Accepted and serving commands.
    Live,
    /// Target-initiated teardown: LOCAL_INV of the push window posted.
    Invalidating { since: Instant },
    /// Disconnected; waiting for flushed completions and backend I/O.
    Draining { since: Instant },
}

/// One queue. Field order is drop order: remote key, then QP, then window (see the module
/// documentation).
pub struct Connection {
    pub remote_key: Option<RemoteKey>,
    pub qp: Qp,
    pub window: Window,
    /// Key of this connection in its worker (slab index | generation << 16).
    pub key: u32,
    pub qid: u16,
    pub depth: u32,
    pub lkey: u32,
    pub peer: SocketAddr,
    /// The listener the host came in through ([`super::listener::RunningListener::id`]).
    pub listener: u64,
    /// Its fabric provider.
    pub provider: rdmablk::fabric::ProviderKind,
    pub phase: Phase,
    /// Request contexts (response slot and data slot `i` each), taken from `free_reqs` when a
    /// capsule arrives. They are separate from receive buffers: a receive is reposted as soon
    /// as its capsule is decoded, while its request may still wait for its response SEND to
    /// complete.
    pub reqs: Box<[Request]>,
    /// Free request contexts (capacity `depth`).
    pub free_reqs: Vec<u32>,
    /// Capsules that arrived while every request context was waiting for its response SEND's
    /// completion: `(receive slot, bytes)`, served in order as contexts free up.
    pub pending_capsules: VecDeque<(u32, u32)>,
    /// RDMA READs this queue may have in flight (negotiated read depth).
    pub read_depth: u32,
    pub reads_in_flight: u32,
    /// Requests waiting for a read credit, in arrival order (capacity `depth`).
    pub read_wait: VecDeque<u32>,
    /// Submission queue head reported in completions.
    pub sq_head: u16,
    /// The host's Connect set CATTR bit 2 (SQ flow control disabled): SQHD in this queue's
    /// completions is reserved and reads 0xFFFF, as nvmet and SPDK report it.
    pub sqhd_disabled: bool,
    pub ctrl: Option<Arc<Controller>>,
    /// Signalled send WRs posted and not completed.
    pub sends_out: u32,
    /// Send-side completions so far (counted per completion; no clock read on the I/O path).
    pub send_completions: u64,
    /// What housekeeping last saw of `send_completions`, and since when: unchanged for more
    /// than `target.response_timeout_ms` with sends out, the host takes nothing.
    pub send_watch: (u64, Instant),
    /// Receives posted and not completed.
    pub recvs_out: u32,
    /// Backend operations in flight.
    pub backend_ops: u32,
    /// Push-write grant of this connection.
    pub push: Option<PushWindow>,
    /// `push_busy[i]`: data slot `i` belongs to a command in flight (push connections).
    pub push_busy: Box<[bool]>,
    /// Accept parameters, until accepted.
    pub accept: Option<ConnParam>,
    /// In-capsule data bytes accepted on this queue (0 on the admin queue).
    pub icd_bytes: u32,
    /// Held Async Event Requests (request slots), at most [`MAX_HELD_AERS`].
    pub aers: Vec<u32>,
    /// Completion-queue entries reserved on the worker.
    pub cqes: u32,
    /// Why teardown started (for the log line).
    pub close_reason: &'static str,
    /// In-band authentication, when the host must authenticate this queue.
    pub auth: Option<Box<super::auth::QueueAuth>>,
    /// When the listener handed the queue to its worker (the Fabrics Connect deadline runs
    /// from here).
    pub created: Instant,
}

impl Connection {
    /// The arena's memory region (registered before any connection exists).
    pub fn mr(&self) -> &Mr {
        self.window
            .arena()
            .mr()
            .expect("the arena is registered before listening")
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

    /// Offset inside the arena's region of data slot `i`, plus `off`.
    pub fn data_offset(&self, slot: u32, off: usize) -> usize {
        self.window.arena_offset() + self.window.layout().data_slot_offset(slot) + off
    }

    /// Offset inside the arena's region of receive slot `i`.
    pub fn recv_offset(&self, slot: u32) -> usize {
        self.window.arena_offset() + self.window.layout().recv_offset(slot)
    }

    fn wr(&self, kind: WrKind, slot: u32) -> u64 {
        WrId::new(self.key, kind, slot).encode()
    }

    /// Posts receive slot `i`.
    pub fn post_recv(&mut self, slot: u32) -> rdmablk::fabric::Result<()> {
        let sge = [self.window.recv_slot(slot).sge(self.lkey)];
        self.qp.post_recv(&[RecvWr {
            wr_id: self.wr(WrKind::Recv, slot),
            sgl: &sge,
        }])?;
        self.recvs_out += 1;
        Ok(())
    }

    /// Posts the RDMA READ of request `slot`'s host data into its data slot.
    pub fn post_read(&mut self, slot: u32) -> rdmablk::fabric::Result<()> {
        let r = &self.reqs[slot as usize];
        let Some(Sgl::Keyed(k)) = r.sgl else {
            unreachable!("a read is only queued for a keyed SGL");
        };
        let sge = [self.data_sge(r.data_slot, r.data_len)];
        self.qp.post_send(&[SendWr {
            wr_id: self.wr(WrKind::Read, slot),
            op: WrOp::RdmaRead {
                remote_addr: k.addr,
                rkey: k.key,
            },
            sgl: &sge,
            flags: SendFlags::SIGNALED,
        }])?;
        self.sends_out += 1;
        self.reads_in_flight += 1;
        Ok(())
    }

    fn data_sge(&self, data_slot: u32, len: u32) -> Sge {
        let region = self.window.data_slot(data_slot);
        // Lengths are checked against max_io_size (<= the slot) before a data phase is set.
        assert!(
            len as usize <= region.len,
            "data phase longer than its slot"
        );
        Sge {
            addr: region.addr,
            length: len,
            lkey: self.lkey,
        }
    }

    /// Writes request `slot`'s completion and posts it: RDMA WRITE of controller-to-host
    /// data (unsignalled) chained before the signalled SEND, or SEND_WITH_INV of the host's
    /// key when its SGL asked for invalidation.
    pub fn post_response(&mut self, slot: u32) -> rdmablk::fabric::Result<()> {
        let r = self.reqs[slot as usize];
        let sq_head = if self.sqhd_disabled {
            SQHD_DISABLED
        } else {
            self.sq_head
        };
        let mut cqe = Cqe::error(r.sqe.cid, self.qid, sq_head, r.status);
        cqe.dw0 = r.dw0;
        cqe.dw1 = r.dw1;
        let resp = self.window.resp_slot(slot);
        let resp_off = resp.addr as usize - self.mr().addr() as usize;
        self.mr().write_at(resp_off, &cqe.to_bytes())?;
        let resp_sge = [resp.sge(self.lkey)];
        let keyed = match r.sgl {
            Some(Sgl::Keyed(k)) if k.len > 0 => Some(k),
            _ => None,
        };
        let send_op = match keyed {
            Some(k) if k.invalidate => WrOp::SendWithInv { rkey: k.key },
            _ => WrOp::Send,
        };
        let send = SendWr {
            wr_id: self.wr(WrKind::Send, slot),
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
                let data_sge = [self.data_sge(r.data_slot, r.data_len)];
                let write = SendWr {
                    wr_id: self.wr(WrKind::Write, slot),
                    op: WrOp::RdmaWrite {
                        remote_addr: k.addr,
                        rkey: k.key,
                    },
                    sgl: &data_sge,
                    flags: SendFlags::empty(),
                };
                self.qp.post_send(&[write, send])?;
            }
            _ => self.qp.post_send(&[send])?,
        }
        self.sends_out += 1;
        Ok(())
    }

    /// Called from housekeeping: whether sends have been out with no send-side completion
    /// for longer than `limit_ms` (0: never). Accurate to the housekeeping tick.
    pub fn send_stalled(&mut self, limit_ms: u32) -> bool {
        if limit_ms == 0 {
            return false;
        }
        if self.sends_out == 0 || self.send_completions != self.send_watch.0 {
            self.send_watch = (self.send_completions, Instant::now());
            return false;
        }
        self.send_watch.1.elapsed().as_millis() > u128::from(limit_ms)
    }

    /// Posts LOCAL_INV of the push memory window; false if there is none to invalidate.
    pub fn post_invalidate(&mut self) -> bool {
        let Some(RemoteKey::Window { mw, .. }) = &self.remote_key else {
            return false;
        };
        let wr = SendWr {
            wr_id: self.wr(WrKind::Invalidate, 0),
            op: WrOp::LocalInv { rkey: mw.rkey() },
            sgl: &[],
            flags: SendFlags::SIGNALED,
        };
        match self.qp.post_send(&[wr]) {
            Ok(()) => {
                self.sends_out += 1;
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "LOCAL_INV not posted");
                false
            }
        }
    }

    /// Whether every work request and backend operation of this queue has finished.
    pub fn drained(&self) -> bool {
        self.sends_out == 0 && self.recvs_out == 0 && self.backend_ops == 0
    }

    /// Requests neither free nor held (for the shutdown drain).
    pub fn busy_requests(&self) -> usize {
        self.reqs
            .iter()
            .filter(|r| !matches!(r.state, ReqState::Free | ReqState::Held))
            .count()
    }
}

/// Starts tearing a connection down (idempotent).
pub(super) fn begin_close(conn: &mut Connection, reason: &'static str, shared: &Shared) {
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

pub(super) fn disconnect(conn: &mut Connection) {
    if let Err(e) = conn.qp.disconnect() {
        tracing::debug!(peer = %conn.peer, error = %e, "disconnect");
    }
    conn.phase = Phase::Draining {
        since: Instant::now(),
    };
}
