//! A worker's loop channels: a channel is a queue from the moment the worker takes it (as
//! an RDMA connection is at its accept: the channel says which queue and how deep, the core
//! expects the Fabrics Connect first). Each pass takes the capsules every channel announced,
//! runs the requests whose host data was copied in, and at the pass's end hands every
//! queue's responses over in one batch. An idle worker sleeps on one eventfd that its hosts
//! write only when it armed it.

use std::any::Any;
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::nvme::transport::loopback::{LoopError, Side, ToHost, Wake, CAPSULE_DATA};

use super::queue::{LoopQueue, LoopXport};
use super::LoopPending;
use crate::arena::pool::DataBuf;
use crate::arena::{Parcel, ParcelLayout};
use crate::backend::Completion;
use crate::nvmf::queue::{begin_close, Phase, Queue, QueueId};
use crate::nvmf::request::{ReqState, Tag};
use crate::nvmf::request_flow::{execute, on_capsule, on_sent, respond, Ctx};
use crate::nvmf::transport::{PollGroup, Ready};
use crate::nvmf::worker::queues::Queues;
use crate::nvmf::{Shared, ADMIN_QUEUE_DEPTH};

/// A worker's loop channels.
pub struct LoopGroup {
    wake: Arc<Wake>,
    queues: Queues<LoopXport>,
    taken: Vec<(u32, u32)>,
}

impl LoopGroup {
    pub fn new() -> Result<LoopGroup, LoopError> {
        Ok(LoopGroup {
            wake: Wake::new(Side::Target)?,
            queues: Queues::default(),
            taken: Vec::new(),
        })
    }

    /// Makes channel `p` a queue: as deep as the host asked, within the limits (a Connect
    /// asking for more is answered by the core).
    fn add_queue(&mut self, p: LoopPending, ctx: &mut Ctx<'_>) {
        let shared = ctx.shared;
        let qid = p.end.qid();
        let limits = &shared.fixed.limits;
        let max = if qid == 0 {
            ADMIN_QUEUE_DEPTH
        } else {
            limits.max_queue_depth
        };
        let depth = p.end.entries().clamp(1, max);
        // Capsules only: data takes buffers from the worker's pool, and the parcel is
        // ordinary memory (no device reaches it).
        let parcel = Parcel::heap(ParcelLayout::without_data(
            depth,
            limits.in_capsule_data_size.max(CAPSULE_DATA as u32),
        ));
        p.end.set_wake(&self.wake);
        let key = self.queues.next_key();
        let id = QueueId {
            key,
            qid,
            depth,
            peer: p.peer,
            listener: p.listener,
        };
        let icd = limits.in_capsule_data_size;
        let xport = LoopXport::new(p.end, depth);
        let q = Queue::new(xport, parcel, id, Phase::Live, icd, Instant::now());
        tracing::info!(peer = %q.peer, qid, depth, window_bytes = q.parcel.len(),
            "queue connected (loop)");
        shared.log_arena("queue connected");
        self.queues.put(q);
        let mut taken = std::mem::take(&mut self.taken);
        if let Some(q) = self.queues.get(key) {
            poll_queue(q, &mut taken, ctx);
        }
        self.taken = taken;
    }
}

/// Copies the capsules `taken` (slot, length) from the channel into free receive slots,
/// hands the channel's slots back, and lets the core run them.
fn on_taken(q: &mut LoopQueue, taken: &[(u32, u32)], ctx: &mut Ctx<'_>) {
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
        let region = q.parcel.recv_slot(recv);
        assert!(
            capsule.len() <= region.len,
            "receive slots hold the largest capsule"
        );
        // SAFETY: the receive slot lies in this queue's parcel and is free (just taken from
        // the free list); the source is the channel's capsule slot; they cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(capsule.as_ptr(), region.as_ptr(), capsule.len()) };
        q.xport.out.push(ToHost::Taken(slot));
        on_capsule(q, recv, len, ctx);
    }
}

/// What queue `q`'s channel brought: executions whose data was copied in, new capsules, a
/// close by the host.
fn poll_queue(q: &mut LoopQueue, taken: &mut Vec<(u32, u32)>, ctx: &mut Ctx<'_>) -> bool {
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
    fn add(&mut self, handover: Box<dyn Any + Send>, ctx: &mut Ctx<'_>) {
        let Ok(p) = handover.downcast::<LoopPending>() else {
            tracing::error!("the loop poll group was handed another transport's connection");
            return;
        };
        self.add_queue(*p, ctx);
    }

    fn refuse(&mut self, _conn: Box<dyn Any + Send>, shared: &Shared) {
        shared.queues_open.fetch_sub(1, Ordering::AcqRel);
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
        let mut any = false;
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

    fn on_buffer(&mut self, key: u32, slot: u32, data: DataBuf, ctx: &mut Ctx<'_>) {
        self.queues.on_buffer(key, slot, data, ctx);
    }

    fn housekeeping(&mut self, ctx: &mut Ctx<'_>) {
        self.queues.deliver_events(ctx);
        self.queues.housekeeping(
            ctx.shared,
            ctx.pool,
            |q, shared| {
                if q.xport.end.is_closed() && !q.is_closing() {
                    begin_close(q, "host disconnected", shared);
                }
            },
            |_| {},
        );
    }

    fn close_listener(&mut self, id: u64, shared: &Shared) {
        self.queues.close_listener(id, shared);
    }

    fn shutdown_step(&mut self, first: bool, grace_over: bool, ctx: &mut Ctx<'_>) -> bool {
        self.queues.shutdown_step(first, grace_over, ctx);
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

    /// Watches the channels for a while before it sleeps ([`Wake::spin_then_wait`]): a host
    /// in this process usually sends its next batch within microseconds. No events when the
    /// timeout passed with no host kicking, so an idle worker lengthens its sleep.
    fn wait(&mut self, other: Option<RawFd>, timeout: Duration) -> Option<Ready> {
        let queues = &self.queues;
        let woke = self.wake.spin_then_wait(other, timeout, || {
            queues
                .iter()
                .any(|q| q.xport.end.pending() || (q.xport.end.is_closed() && !q.is_closing()))
        });
        Some(Ready {
            events: woke.kicked,
            other: woke.other,
        })
    }
}
