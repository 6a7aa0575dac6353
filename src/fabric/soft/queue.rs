//! A QP's send queue: a preallocated ring of work requests, the in-order retirement of
//! completions, RNR rewind, and the flush of the error state. (The receive side is in
//! `recv_queue.rs`.)
//!
//! A send WR goes Queued -> InFlight (its request is on the wire) -> Done(status); local WRs
//! (bind, local invalidate) go straight from Queued to Done when the transmit thread reaches
//! them. Completions are generated only from the head, so a queue completes in posting order
//! even when a later WR finishes first.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fabric::{Access, Sge, Wc, WcOpcode, WcStatus};

use super::cq::CqInner;
use super::device::DeviceInner;
use super::mr::{self, MrAccess, MrInner, MwInner};
use super::wire::Syndrome;

/// What a send WR does, as queued.
pub(super) enum SqOp {
    Send,
    SendInv(u32),
    Write { remote_addr: u64, rkey: u32 },
    Read { remote_addr: u64, rkey: u32 },
    Bind(BindArgs),
    LocalInv(u32),
}

/// A bind posted on the queue.
pub(super) struct BindArgs {
    pub mw: Arc<MwInner>,
    pub mr: Arc<MrInner>,
    pub key: u32,
    pub addr: u64,
    pub len: u64,
    pub access: Access,
}

impl SqOp {
    fn wc_opcode(&self) -> WcOpcode {
        match self {
            SqOp::Send | SqOp::SendInv(_) => WcOpcode::Send,
            SqOp::Write { .. } => WcOpcode::RdmaWrite,
            SqOp::Read { .. } => WcOpcode::RdmaRead,
            SqOp::Bind(_) => WcOpcode::BindMw,
            SqOp::LocalInv(_) => WcOpcode::LocalInv,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlotState {
    Queued,
    InFlight,
    Done(WcStatus),
}

pub(super) struct SqSlot {
    wr_id: u64,
    op: SqOp,
    signaled: bool,
    fence: bool,
    pub solicited: bool,
    num_sge: usize,
    /// Inline payload length (copied at post time), or None.
    inline_len: Option<u32>,
    psn: u32,
    state: SlotState,
    rnr_tries: u8,
    byte_len: u32,
}

/// A request the transmit thread puts on the wire; its SGEs were copied out beside it.
#[derive(Clone, Copy, Debug)]
pub(super) struct TxReq {
    pub idx: u64,
    pub psn: u32,
    pub kind: TxKind,
    pub solicited: bool,
    pub inline: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TxKind {
    Send,
    SendInv(u32),
    Write { remote_addr: u64, rkey: u32 },
    Read { remote_addr: u64, rkey: u32 },
}

/// A response the responder side queued for the transmit thread.
pub(super) struct Resp {
    pub psn: u32,
    pub kind: RespKind,
}

pub(super) enum RespKind {
    Ack,
    Nak(Syndrome),
    /// `acc` is None for a zero-length READ (no memory is touched).
    ReadResp {
        acc: Option<MrAccess>,
        addr: u64,
        len: u32,
    },
}

/// What the transmit thread should do next with the send queue.
pub(super) enum Next {
    Tx(TxReq),
    /// Nothing can go until this instant (RNR delay) or until a response arrives (`None`).
    Blocked(Option<Instant>),
    Idle,
}

/// Copies an inline payload into the slot's buffer; returns its length.
pub(super) type InlineFill<'a> = &'a mut dyn FnMut(&mut [u8]) -> u32;

/// Static parameters of a send queue.
pub(super) struct SqParams {
    pub qpn: u32,
    pub pd_id: u32,
    pub depth: u32,
    pub max_sge: u32,
    pub max_inline: u32,
    pub cq: Arc<CqInner>,
    pub dev: Arc<DeviceInner>,
}

pub(super) struct SendQueue {
    p: SqParams,
    slots: Vec<SqSlot>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    head: u64,
    next: u64,
    tail: u64,
    next_psn: u32,
    reads_in_flight: u32,
    rnr_until: Option<Instant>,
    /// Negotiated at connection time.
    pub initiator_depth: u8,
    pub rnr_retry: u8,
    pub error: bool,
    /// Responder side: responses waiting for the transmit thread (bounded by the peer's
    /// send queue depth: each answers one of its outstanding WRs).
    pub responses: VecDeque<Resp>,
    pub responses_max: usize,
    /// Send DISCONNECT and stop transmitting.
    pub disconnect: bool,
    /// The QP is being dropped: the transmit thread exits.
    pub stop: bool,
    /// A pump left work for the transmit thread (a full socket, an RNR timer).
    pub tx_kick: bool,
}

/// Delay before a request refused with RNR NAK is sent again (the RNR timer).
pub(super) const RNR_DELAY: Duration = Duration::from_millis(1);

impl SendQueue {
    pub fn new(p: SqParams) -> SendQueue {
        let depth = p.depth as usize;
        let slots = (0..depth)
            .map(|_| SqSlot {
                wr_id: 0,
                op: SqOp::Send,
                signaled: false,
                fence: false,
                solicited: false,
                num_sge: 0,
                inline_len: None,
                psn: 0,
                state: SlotState::Done(WcStatus::Success),
                rnr_tries: 0,
                byte_len: 0,
            })
            .collect();
        SendQueue {
            sges: vec![Sge::default(); depth * p.max_sge as usize],
            inline: vec![0; depth * p.max_inline as usize],
            slots,
            p,
            head: 0,
            next: 0,
            tail: 0,
            next_psn: 0,
            reads_in_flight: 0,
            rnr_until: None,
            initiator_depth: 0,
            rnr_retry: 7,
            error: false,
            responses: VecDeque::new(),
            responses_max: 0,
            disconnect: false,
            stop: false,
            tx_kick: false,
        }
    }

    pub fn is_full(&self) -> bool {
        self.tail - self.head >= self.p.depth as u64
    }

    /// Posted WRs not yet transmitted (or executed, for local ones).
    pub fn has_unsent(&self) -> bool {
        self.next < self.tail && !self.error
    }

    fn slot(&self, idx: u64) -> &SqSlot {
        &self.slots[(idx % self.p.depth as u64) as usize]
    }

    fn slot_mut(&mut self, idx: u64) -> &mut SqSlot {
        let d = self.p.depth as u64;
        &mut self.slots[(idx % d) as usize]
    }

    fn sge_range(&self, idx: u64) -> std::ops::Range<usize> {
        let base = (idx % self.p.depth as u64) as usize * self.p.max_sge as usize;
        base..base + self.slot(idx).num_sge
    }

    /// Queues a WR (the caller checked room and limits). `inline` is the payload copied at
    /// post time, if the WR is inline.
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        wr_id: u64,
        op: SqOp,
        sgl: &[Sge],
        inline: Option<InlineFill<'_>>,
        signaled: bool,
        fence: bool,
        solicited: bool,
    ) {
        debug_assert!(!self.is_full());
        let idx = self.tail;
        self.tail += 1;
        let error = self.error;
        let max_inline = self.p.max_inline as usize;
        let ibase = (idx % self.p.depth as u64) as usize * max_inline;
        let inline_len = inline.map(|fill| fill(&mut self.inline[ibase..ibase + max_inline]));
        let sbase = (idx % self.p.depth as u64) as usize * self.p.max_sge as usize;
        self.sges[sbase..sbase + sgl.len()].copy_from_slice(sgl);
        let s = self.slot_mut(idx);
        *s = SqSlot {
            wr_id,
            op,
            signaled,
            fence,
            solicited,
            num_sge: sgl.len(),
            inline_len,
            psn: 0,
            state: if error {
                SlotState::Done(WcStatus::WrFlushErr)
            } else {
                SlotState::Queued
            },
            rnr_tries: 0,
            byte_len: 0,
        };
        if error {
            self.retire();
        }
    }

    /// Generates the completions of finished WRs at the head, in order.
    pub fn retire(&mut self) {
        while self.head < self.tail {
            let (qpn, head) = (self.p.qpn, self.head);
            let s = self.slot_mut(head);
            let SlotState::Done(status) = s.state else {
                break;
            };
            if s.signaled || status != WcStatus::Success {
                let wc = Wc {
                    wr_id: s.wr_id,
                    status,
                    opcode: s.op.wc_opcode(),
                    byte_len: s.byte_len,
                    qp_num: qpn,
                    invalidated_rkey: None,
                    vendor_err: 0,
                };
                self.p.cq.push(wc);
            }
            // Release what the slot holds (a bind's Arcs) now, not at reuse.
            self.slot_mut(head).op = SqOp::Send;
            self.head += 1;
        }
        self.next = self.next.max(self.head);
    }

    /// Error state: every WR not yet done is flushed.
    pub fn flush(&mut self) {
        self.error = true;
        for idx in self.head..self.tail {
            let s = self.slot_mut(idx);
            if !matches!(s.state, SlotState::Done(_)) {
                s.state = SlotState::Done(WcStatus::WrFlushErr);
            }
        }
        self.reads_in_flight = 0;
        // Queued responses still go: they answer the peer's requests, not ours.
        self.retire();
    }

    /// The next request to transmit, executing local WRs on the way.
    pub fn next_work(&mut self, sges: &mut Vec<Sge>) -> Next {
        while self.next < self.tail && !self.error {
            let idx = self.next;
            let s = self.slot(idx);
            if matches!(s.state, SlotState::Done(_)) {
                self.next += 1;
                continue;
            }
            if s.fence && self.reads_in_flight > 0 {
                return Next::Blocked(None);
            }
            let kind = match s.op {
                SqOp::Bind(_) | SqOp::LocalInv(_) => {
                    self.execute_local(idx);
                    continue;
                }
                SqOp::Send => TxKind::Send,
                SqOp::SendInv(rkey) => TxKind::SendInv(rkey),
                SqOp::Write { remote_addr, rkey } => TxKind::Write { remote_addr, rkey },
                SqOp::Read { remote_addr, rkey } => {
                    if self.reads_in_flight >= self.initiator_depth as u32 {
                        return Next::Blocked(None);
                    }
                    TxKind::Read { remote_addr, rkey }
                }
            };
            if let Some(t) = self.rnr_until {
                if Instant::now() < t {
                    return Next::Blocked(Some(t));
                }
                self.rnr_until = None;
            }
            if matches!(kind, TxKind::Read { .. }) {
                self.reads_in_flight += 1;
            }
            let psn = self.next_psn;
            self.next_psn = psn.wrapping_add(1);
            self.next += 1;
            let range = self.sge_range(idx);
            sges.clear();
            sges.extend_from_slice(&self.sges[range]);
            tracing::trace!(
                qpn = self.p.qpn,
                idx,
                psn,
                ?kind,
                "send WR Queued -> InFlight"
            );
            let s = self.slot_mut(idx);
            s.psn = psn;
            s.state = SlotState::InFlight;
            return Next::Tx(TxReq {
                idx,
                psn,
                kind,
                solicited: s.solicited,
                inline: s.inline_len.is_some(),
            });
        }
        Next::Idle
    }

    /// The inline payload of WR `idx`.
    pub fn inline_data(&self, idx: u64) -> &[u8] {
        let max_inline = self.p.max_inline as usize;
        let base = (idx % self.p.depth as u64) as usize * max_inline;
        let len = self.slot(idx).inline_len.unwrap_or(0) as usize;
        &self.inline[base..base + len]
    }

    fn execute_local(&mut self, idx: u64) {
        let (pd_id, qpn) = (self.p.pd_id, self.p.qpn);
        let status = match &self.slot(idx).op {
            SqOp::Bind(b) => mr::bind(b, pd_id, qpn),
            SqOp::LocalInv(rkey) => {
                if mr::invalidate(&self.p.dev, *rkey, pd_id, None) {
                    WcStatus::Success
                } else {
                    WcStatus::LocProtErr
                }
            }
            _ => unreachable!("execute_local on a wire WR"),
        };
        self.next += 1;
        self.complete(idx, status, 0);
    }

    /// The oldest WR waiting for a response, which must be the one `psn` answers.
    pub fn in_flight(&self, psn: u32) -> Option<(u64, TxKindOf)> {
        let idx = (self.head..self.next).find(|&i| self.slot(i).state == SlotState::InFlight)?;
        let s = self.slot(idx);
        if s.psn != psn {
            return None;
        }
        let kind = match s.op {
            SqOp::Read { .. } => TxKindOf::Read,
            _ => TxKindOf::AckedOp,
        };
        Some((idx, kind))
    }

    /// The local SGEs of WR `idx` (an RDMA READ's destination).
    pub fn sges_of(&self, idx: u64, out: &mut Vec<Sge>) {
        out.clear();
        out.extend_from_slice(&self.sges[self.sge_range(idx)]);
    }

    /// Finishes WR `idx` if it is still outstanding (a flush may have beaten us to it).
    /// An error status moves the queue to the error state. Returns whether it did.
    pub fn complete(&mut self, idx: u64, status: WcStatus, byte_len: u32) -> bool {
        if idx < self.head || idx >= self.tail {
            return false;
        }
        let was_read = matches!(self.slot(idx).op, SqOp::Read { .. });
        let s = self.slot_mut(idx);
        if matches!(s.state, SlotState::Done(_)) {
            return false;
        }
        let in_flight = s.state == SlotState::InFlight;
        tracing::trace!(idx, from = ?s.state, ?status, "send WR -> Done");
        s.state = SlotState::Done(status);
        s.byte_len = byte_len;
        if was_read && in_flight {
            self.reads_in_flight -= 1;
        }
        if status == WcStatus::Success {
            self.retire();
        } else {
            self.flush();
        }
        true
    }

    /// RNR NAK for WR `idx`: go back to it after the RNR delay, or fail it when its retries
    /// are used up (7 retries forever). Returns false when it failed.
    pub fn rnr_rewind(&mut self, idx: u64) -> bool {
        let limit = self.rnr_retry;
        let s = self.slot_mut(idx);
        s.rnr_tries = s.rnr_tries.saturating_add(1);
        if limit != 7 && s.rnr_tries > limit {
            self.complete(idx, WcStatus::RnrRetryExcErr, 0);
            return false;
        }
        let tries = s.rnr_tries;
        tracing::trace!(qpn = self.p.qpn, idx, tries, "RNR: InFlight -> Queued");
        self.next_psn = self.slot(idx).psn;
        for i in idx..self.next {
            let is_read = matches!(self.slot(i).op, SqOp::Read { .. });
            let s = self.slot_mut(i);
            if s.state == SlotState::InFlight {
                s.state = SlotState::Queued;
                if is_read {
                    self.reads_in_flight -= 1;
                }
            }
        }
        self.next = idx;
        self.rnr_until = Some(Instant::now() + RNR_DELAY);
        true
    }
}

/// What kind of response an in-flight WR expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TxKindOf {
    Read,
    AckedOp,
}
