//! A worker's loop channels: each pass takes the capsules every channel announced (the first
//! one of a new channel must be the Fabrics Connect that makes it a queue), runs the requests
//! whose host data was copied in, and at the pass's end hands every queue's responses over
//! in one batch. An idle worker sleeps on one eventfd that its hosts write only when it
//! armed it.

use std::any::Any;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::nvme::opcodes::{self, fctype};
use rdmablk::nvme::transport::loopback::{LoopError, TargetEnd, ToHost, Wake, CAPSULE_DATA};
use rdmablk::nvme::{Connect, Sqe, SQE_LEN};

use super::queue::{LoopConnection, LoopQueue};
use super::LoopPending;
use crate::arena::WindowLayout;
use crate::backend::Completion;
use crate::nvmf::queue::{begin_close, Phase, Queue, QueueId};
use crate::nvmf::request::{ReqState, Tag};
use crate::nvmf::request_flow::{execute, on_capsule, on_sent, respond, Ctx};
use crate::nvmf::transport::{PollGroup, Ready};
use crate::nvmf::worker::queues::Queues;
use crate::nvmf::{Shared, ADMIN_QUEUE_DEPTH};

/// A channel before its Connect.
struct Pending {
    end: TargetEnd,
    peer: SocketAddr,
    listener: u64,
    created: Instant,
}

/// A worker's loop channels.
pub struct LoopGroup {
    wake: Arc<Wake>,
    pending: Vec<Pending>,
    queues: Queues<LoopQueue>,
    taken: Vec<(u32, u32)>,
}

impl LoopGroup {
    pub fn new() -> Result<LoopGroup, LoopError> {
        Ok(LoopGroup {
            wake: Wake::new()?,
            pending: Vec::new(),
            queues: Queues::default(),
            taken: Vec::new(),
        })
    }

    /// New channels: the first capsule makes one a queue; a closed one is dropped.
    fn poll_pending(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.pending.len() {
            let p = &self.pending[i];
            if p.end.is_closed() {
                self.drop_pending(i, ctx.shared, "closed by the host");
                continue;
            }
            if !p.end.pending() {
                i += 1;
                continue;
            }
            any = true;
            let p = self.pending.swap_remove(i);
            self.connect_queue(p, ctx);
        }
        any
    }

    fn drop_pending(&mut self, i: usize, shared: &Shared, why: &str) {
        let p = self.pending.swap_remove(i);
        tracing::info!(peer = %p.peer, why, "loop queue closed before its Connect");
        shared.connections.fetch_sub(1, Ordering::AcqRel);
    }

    /// Makes channel `p` the queue its first capsule (a Fabrics Connect) names, then lets
    /// the core run its capsules.
    fn connect_queue(&mut self, p: Pending, ctx: &mut Ctx<'_>) {
        let shared = ctx.shared;
        let mut taken = std::mem::take(&mut self.taken);
        taken.clear();
        p.end.take(&mut taken);
        let connect = taken
            .first()
            .and_then(|&(slot, len)| p.end.capsule(slot, len))
            .filter(|c| c.len() >= SQE_LEN)
            .map(|c| Sqe::decode(c[..SQE_LEN].try_into().expect("64 bytes")))
            .filter(|sqe| sqe.opcode == opcodes::FABRICS && sqe.fctype() == fctype::CONNECT)
            .and_then(|sqe| Connect::from_sqe(&sqe).ok());
        let Some(c) = connect else {
            tracing::warn!(peer = %p.peer, "loop queue closed: its first command is not a valid Fabrics Connect");
            shared.connections.fetch_sub(1, Ordering::AcqRel);
            self.taken = taken;
            return;
        };
        let limits = &shared.cfg.limits;
        let max = if c.qid == 0 {
            ADMIN_QUEUE_DEPTH
        } else {
            limits.max_queue_depth
        };
        let depth = c.queue_entries().clamp(1, max);
        let layout = WindowLayout::new(
            depth,
            limits.in_capsule_data_size.max(CAPSULE_DATA as u32),
            limits.max_io_size,
        );
        let window = match shared.arena.carve(layout) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, qid = c.qid, "no arena space for a loop queue");
                shared.connections.fetch_sub(1, Ordering::AcqRel);
                self.taken = taken;
                return;
            }
        };
        let key = self.queues.next_key();
        let id = QueueId {
            key,
            qid: c.qid,
            depth,
            peer: p.peer,
            listener: p.listener,
            provider: None,
        };
        let icd = limits.in_capsule_data_size;
        let q = Queue::new(
            LoopQueue::new(p.end, depth),
            window,
            id,
            Phase::Live,
            icd,
            p.created,
        );
        tracing::info!(peer = %q.peer, qid = q.qid, depth, window_bytes = q.window.len(),
            "queue connected (loop)");
        shared.log_arena("queue connected");
        self.queues.put(q);
        if let Some(q) = self.queues.get(key) {
            on_taken(q, &taken, ctx);
        }
        self.taken = taken;
    }
}

/// Copies the capsules `taken` (slot, length) from the channel into free receive slots,
/// hands the channel's slots back, and lets the core run them.
fn on_taken(q: &mut LoopConnection, taken: &[(u32, u32)], ctx: &mut Ctx<'_>) {
    for &(slot, len) in taken {
        if q.is_closing() {
            return;
        }
        let Some(capsule) = q.xport.end.capsule(slot, len) else {
            tracing::warn!(peer = %q.peer, qid = q.qid, slot, len, "loop capsule outside its slot: closing the queue");
            return begin_close(q, "bad capsule", ctx.shared);
        };
        let Some(recv) = q.xport.free_recv.pop() else {
            tracing::warn!(peer = %q.peer, qid = q.qid, "a command beyond the queue's size: closing the queue");
            return begin_close(q, "queue overrun", ctx.shared);
        };
        let region = q.window.recv_slot(recv);
        assert!(
            capsule.len() <= region.len,
            "receive slots hold the largest capsule"
        );
        // SAFETY: the receive slot lies in this queue's window and is free (just taken from
        // the free list); the source is the channel's capsule slot; they cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(capsule.as_ptr(), region.as_ptr(), capsule.len()) };
        q.xport.out.push(ToHost::Taken(slot));
        on_capsule(q, recv, len, ctx);
    }
}

/// What queue `q`'s channel brought: executions whose data was copied in, new capsules, a
/// close by the host.
fn poll_queue(q: &mut LoopConnection, taken: &mut Vec<(u32, u32)>, ctx: &mut Ctx<'_>) -> bool {
    let mut any = false;
    while let Some(slot) = q.xport.fetched.pop() {
        any = true;
        if q.reqs[slot as usize].state != ReqState::AwaitingData {
            continue;
        }
        if q.reqs[slot as usize].status.is_success() {
            execute(q, slot, ctx);
        } else {
            respond(q, slot, ctx);
        }
    }
    if q.is_closing() {
        return any;
    }
    if q.xport.end.is_closed() {
        tracing::info!(peer = %q.peer, qid = q.qid, "loop queue closed by the host");
        begin_close(q, "host disconnected", ctx.shared);
        return true;
    }
    taken.clear();
    if q.xport.end.take(taken) {
        on_taken(q, taken, ctx);
        any = true;
    }
    any
}

impl PollGroup for LoopGroup {
    fn add(&mut self, conn: Box<dyn Any + Send>, ctx: &mut Ctx<'_>) {
        let Ok(p) = conn.downcast::<LoopPending>() else {
            tracing::error!("the loop poll group was handed another transport's connection");
            return;
        };
        let LoopPending {
            end,
            peer,
            listener,
        } = *p;
        end.set_wake(&self.wake);
        self.pending.push(Pending {
            end,
            peer,
            listener,
            created: Instant::now(),
        });
        self.poll_pending(ctx);
    }

    fn refuse(&mut self, _conn: Box<dyn Any + Send>, shared: &Shared) {
        shared.connections.fetch_sub(1, Ordering::AcqRel);
    }

    fn begin_pass(&mut self) {}

    /// Hands every queue's responses over (one batch each), then tells the core they left.
    fn end_pass(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut started = false;
        for q in self.queues.iter_mut() {
            if q.xport.responded.is_empty() && q.xport.out.is_empty() {
                continue;
            }
            let x = &mut q.xport;
            x.end.send(&mut x.out);
            started |= !q.pending_capsules.is_empty();
            let mut done = std::mem::take(&mut q.xport.responded);
            for slot in done.drain(..) {
                on_sent(q, slot, ctx);
            }
            q.xport.responded = done;
        }
        started
    }

    fn poll(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut any = !self.pending.is_empty() && self.poll_pending(ctx);
        let mut taken = std::mem::take(&mut self.taken);
        for q in self.queues.iter_mut() {
            any |= poll_queue(q, &mut taken, ctx);
        }
        self.taken = taken;
        any
    }

    fn on_backend(&mut self, tag: Tag, c: &Completion, ctx: &mut Ctx<'_>) {
        self.queues.on_backend(tag, c, ctx);
    }

    fn resume(&mut self, tag: Tag, ctx: &mut Ctx<'_>) {
        self.queues.resume(tag, ctx);
    }

    fn housekeeping(&mut self, ctx: &mut Ctx<'_>) {
        self.queues.deliver_events(ctx);
        self.queues.housekeeping(
            ctx.shared,
            |q, shared| {
                if q.xport.end.is_closed() && !q.is_closing() {
                    begin_close(q, "host disconnected", shared);
                }
            },
            |_| {},
        );
        let connect_ms = u128::from(ctx.shared.cfg.target.connect_timeout_ms);
        let mut i = 0;
        while i < self.pending.len() {
            if connect_ms != 0 && self.pending[i].created.elapsed().as_millis() > connect_ms {
                self.drop_pending(i, ctx.shared, "no Fabrics Connect in time");
            } else {
                i += 1;
            }
        }
    }

    fn close_listener(&mut self, id: u64, shared: &Shared) {
        self.queues.close_listener(id, shared);
        let mut i = 0;
        while i < self.pending.len() {
            if self.pending[i].listener == id {
                self.drop_pending(i, shared, "listener removed");
            } else {
                i += 1;
            }
        }
    }

    fn shutdown_step(&mut self, first: bool, grace_over: bool, ctx: &mut Ctx<'_>) -> bool {
        self.queues.shutdown_step(first, grace_over, ctx);
        while !self.pending.is_empty() {
            self.drop_pending(0, ctx.shared, "target shutting down");
        }
        self.queues.is_empty()
    }

    /// Arms the eventfd, then looks once more (a host that sent before the arm did not
    /// kick it).
    fn arm(&mut self, ctx: &mut Ctx<'_>) -> Option<bool> {
        self.wake.arm();
        let any = self.poll(ctx) | self.end_pass(ctx);
        if any {
            self.wake.disarm();
        }
        Some(any)
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.wake.fd())
    }

    fn wait(&mut self, other: Option<RawFd>, timeout: Duration) -> Option<Ready> {
        let other_ready = self.wake.wait(other, timeout);
        Some(Ready {
            events: true,
            other: other_ready,
        })
    }
}
