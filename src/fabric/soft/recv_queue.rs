//! A QP's receive side: where an incoming SEND finds its receive work request, either a ring of
//! the QP's own or a shared receive queue (`srq.rs`), and the flush of the error state.
//!
//! The WR being filled is taken off its ring when the SEND starts ([`RecvQueue::begin_head`])
//! and completed when it ends ([`RecvQueue::finish_head`]); the error state waits for it, so
//! an own ring still completes in posting order.

use std::sync::Arc;

use crate::fabric::{FabricError, RecvWr, Result, Sge, Wc, WcOpcode, WcStatus};

use super::cq::CqInner;
use super::srq::SrqInner;

#[derive(Clone, Copy)]
struct RqSlot {
    wr_id: u64,
    num_sge: usize,
}

/// A preallocated ring of receive WRs and their SGEs.
pub(super) struct RecvRing {
    depth: u32,
    max_sge: u32,
    slots: Vec<RqSlot>,
    sges: Vec<Sge>,
    head: u64,
    tail: u64,
}

impl RecvRing {
    pub fn new(depth: u32, max_sge: u32) -> RecvRing {
        RecvRing {
            depth,
            max_sge,
            slots: vec![
                RqSlot {
                    wr_id: 0,
                    num_sge: 0,
                };
                depth as usize
            ],
            sges: vec![Sge::default(); depth as usize * max_sge as usize],
            head: 0,
            tail: 0,
        }
    }

    fn len(&self) -> u64 {
        self.tail - self.head
    }

    /// Posts `wrs` while there is room for `len() + reserved` below the depth (the same
    /// partial-post rule as every post: the WRs before the failing index are posted).
    pub fn post(&mut self, wrs: &[RecvWr<'_>], reserved: u64) -> Result<()> {
        for (index, wr) in wrs.iter().enumerate() {
            if wr.sgl.len() > self.max_sge as usize {
                return Err(FabricError::BadWr {
                    index,
                    reason: format!("{} SGEs over max_recv_sge {}", wr.sgl.len(), self.max_sge),
                });
            }
            if self.len() + reserved >= self.depth as u64 {
                return Err(FabricError::QueueFull { index });
            }
            let i = (self.tail % self.depth as u64) as usize;
            self.slots[i] = RqSlot {
                wr_id: wr.wr_id,
                num_sge: wr.sgl.len(),
            };
            let base = i * self.max_sge as usize;
            self.sges[base..base + wr.sgl.len()].copy_from_slice(wr.sgl);
            self.tail += 1;
        }
        Ok(())
    }

    /// Takes the oldest WR, copying its SGEs into `out` (when given).
    pub fn pop(&mut self, out: Option<&mut Vec<Sge>>) -> Option<u64> {
        if self.head == self.tail {
            return None;
        }
        let i = (self.head % self.depth as u64) as usize;
        if let Some(out) = out {
            let base = i * self.max_sge as usize;
            out.clear();
            out.extend_from_slice(&self.sges[base..base + self.slots[i].num_sge]);
        }
        self.head += 1;
        Some(self.slots[i].wr_id)
    }
}

/// Where a QP's receive WRs come from.
enum Source {
    /// Its own receive queue.
    Own(RecvRing),
    /// A shared receive queue (the QP was created with one).
    Shared(Arc<SrqInner>),
}

pub(super) struct RecvQueue {
    qpn: u32,
    cq: Arc<CqInner>,
    source: Source,
    /// The WR the receive thread is filling (taken off its ring; completions wait for it).
    busy: Option<u64>,
    error: bool,
}

impl RecvQueue {
    /// A receive queue of the QP's own.
    pub fn own(qpn: u32, depth: u32, max_sge: u32, cq: Arc<CqInner>) -> RecvQueue {
        RecvQueue::new(qpn, cq, Source::Own(RecvRing::new(depth, max_sge)))
    }

    /// Receives taken from `srq`.
    pub fn shared(qpn: u32, srq: Arc<SrqInner>, cq: Arc<CqInner>) -> RecvQueue {
        RecvQueue::new(qpn, cq, Source::Shared(srq))
    }

    fn new(qpn: u32, cq: Arc<CqInner>, source: Source) -> RecvQueue {
        RecvQueue {
            qpn,
            cq,
            source,
            busy: None,
            error: false,
        }
    }

    /// `Qp::post_recv`: onto the own ring (the WR being filled still takes its room).
    pub fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        let Source::Own(ring) = &mut self.source else {
            return Err(FabricError::BadWr {
                index: 0,
                reason: "this QP takes its receives from a shared receive queue: post them \
                         there"
                    .into(),
            });
        };
        let r = ring.post(wrs, self.busy.is_some() as u64);
        if self.error && self.busy.is_none() {
            self.flush();
        }
        r
    }

    /// Takes the next WR for an incoming SEND, copying its SGEs out. None: no receive posted
    /// (RNR), the QP is in the error state, or a SEND is already being received.
    pub fn begin_head(&mut self, out: &mut Vec<Sge>) -> Option<()> {
        if self.error || self.busy.is_some() {
            return None;
        }
        let wr_id = match &mut self.source {
            Source::Own(ring) => ring.pop(Some(out)),
            Source::Shared(srq) => srq.take(out),
        }?;
        self.busy = Some(wr_id);
        Some(())
    }

    /// Completes the WR taken by [`RecvQueue::begin_head`].
    pub fn finish_head(&mut self, status: WcStatus, byte_len: u32, inv: Option<u32>) {
        let wr_id = self.busy.take().expect("finish_head without begin_head");
        self.push_wc(wr_id, status, byte_len, inv);
        if status != WcStatus::Success || self.error {
            self.flush();
        }
    }

    fn push_wc(&self, wr_id: u64, status: WcStatus, byte_len: u32, inv: Option<u32>) {
        self.cq
            .push(recv_wc(self.qpn, wr_id, status, byte_len, inv));
    }

    /// Error state: flush every posted receive of an own ring (after the one being filled, if
    /// any). A shared queue's WRs stay posted for its other QPs: only the one being filled is
    /// flushed (by `finish_head`), as rxe does.
    pub fn flush(&mut self) {
        self.error = true;
        if self.busy.is_some() {
            return; // finish_head flushes the rest in order
        }
        if let Source::Own(ring) = &mut self.source {
            while let Some(wr_id) = ring.pop(None) {
                let wc = recv_wc(self.qpn, wr_id, WcStatus::WrFlushErr, 0, None);
                self.cq.push(wc);
            }
        }
    }
}

fn recv_wc(qp_num: u32, wr_id: u64, status: WcStatus, byte_len: u32, inv: Option<u32>) -> Wc {
    Wc {
        wr_id,
        status,
        opcode: WcOpcode::Recv,
        byte_len,
        qp_num,
        invalidated_rkey: inv,
        vendor_err: 0,
    }
}
