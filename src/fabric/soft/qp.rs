//! Queue pairs: creation, posting, the connection state, and the two provider threads that
//! run each connected QP (`tx.rs` transmits, `rx.rs` receives and responds).
//!
//! ```text
//!   Init ──accept / connect──> Rts ──error completion, NAK, disconnect, TCP close──> Error
//! ```
//! In `Error` every outstanding and later-posted WR completes with WR_FLUSH_ERR.

use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::RawFd;
#[cfg(test)]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::fabric::{
    check_private_data, Access, CmEvent, ConnParam, FabricError, QpCaps, QpInit, RecvWr, Result,
    SendFlags, SendWr, WrOp, MAX_ACCEPT_PRIVATE_DATA,
};

use super::cm::{write_cm, Offer};
use super::cq::CqInner;
use super::device::{DeviceInner, Pd, MAX_INLINE, MAX_QP_WR, MAX_RD_ATOM, MAX_SGE};
use super::event::EventQueue;
use super::mr::{inc_key, resolve_local};
use super::queue::{BindArgs, InlineFill, SendQueue, SqOp, SqParams};
use super::recv_queue::RecvQueue;
use super::wire::{CmBody, Opcode};
use super::{rx, tx};

/// Connection state of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConnState {
    /// Passive side before accept: the peer waits for our answer.
    AwaitingAccept,
    Connected,
    /// The connection is gone (our disconnect, the peer's, or the TCP connection).
    Disconnected,
}

pub(super) struct QpShared {
    pub qpn: u32,
    pub dev: Arc<DeviceInner>,
    pub pd_id: u32,
    pub caps: QpCaps,
    pub peer: SocketAddr,
    pub stream: TcpStream,
    /// The connection's sending side; lock it before `sq`.
    pub wire: Mutex<tx::Wire>,
    pub sq: Mutex<SendQueue>,
    /// Wakes the transmit thread (after setting `SendQueue::tx_kick`).
    pub sq_cv: Condvar,
    pub rq: Mutex<RecvQueue>,
    pub cm: EventQueue<CmEvent>,
    /// Fast-path copy of "the QP is in the error state".
    pub error: AtomicBool,
    /// Frames parsed by a thread waiting on the receive CQ rather than the receive thread
    /// (counted for the tests only: no atomic per frame in release builds).
    #[cfg(test)]
    pub frames_inline: AtomicU64,
    pub state: Mutex<ConnState>,
    pub initiator_depth: AtomicU8,
    pub responder_resources: AtomicU8,
    /// Parents kept alive while the QP lives.
    _pd: Pd,
    /// The send CQ and the receive CQ (whose waiters may drive the receive side).
    pub cqs: [Arc<CqInner>; 2],
}

impl QpShared {
    /// Moves the QP to the error state: both queues flush.
    pub fn fail(&self, sq: &mut SendQueue) {
        sq.flush();
        self.sync_error(sq);
    }

    /// After a send-queue operation that may have failed a WR: propagate the error state to
    /// the receive queue.
    pub fn sync_error(&self, sq: &SendQueue) {
        if sq.error && !self.error.swap(true, Ordering::SeqCst) {
            tracing::debug!(qpn = self.qpn, "soft QP -> error");
            self.rq.lock().unwrap().flush();
            self.sq_cv.notify_all();
        }
    }

    pub fn lock_sq(&self) -> MutexGuard<'_, SendQueue> {
        self.sq.lock().unwrap()
    }

    /// The connection is gone (called once by the receive thread when it stops).
    pub fn connection_lost(&self, why: &str) {
        {
            let mut sq = self.lock_sq();
            self.fail(&mut sq);
            sq.disconnect = false;
        }
        let mut st = self.state.lock().unwrap();
        if *st != ConnState::Disconnected {
            tracing::debug!(qpn = self.qpn, why, "soft QP disconnected");
            *st = ConnState::Disconnected;
        }
        self.cm.push(CmEvent::Disconnected);
        let _ = self.stream.shutdown(Shutdown::Both);
        self.sq_cv.notify_all();
    }
}

/// A reliable-connected queue pair over one TCP connection.
pub struct Qp {
    sh: Arc<QpShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Passive side before accept: what the peer offered.
    pending: Mutex<Option<Offer>>,
}

/// The caps a QP gets; with a shared receive queue the receive caps are not its own (0).
fn caps_checked(c: QpCaps, srq: bool) -> Result<QpCaps> {
    if srq {
        let own = caps_checked(
            QpCaps {
                max_recv_wr: 1,
                max_recv_sge: 0,
                ..c
            },
            false,
        )?;
        return Ok(QpCaps {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..own
        });
    }
    let bad = |what: String| Err(FabricError::InvalidArgument { what });
    if c.max_send_wr == 0 || c.max_send_wr > MAX_QP_WR {
        return bad(format!(
            "max_send_wr {} (soft0 allows 1..={MAX_QP_WR})",
            c.max_send_wr
        ));
    }
    if c.max_recv_wr == 0 || c.max_recv_wr > MAX_QP_WR {
        return bad(format!(
            "max_recv_wr {} (soft0 allows 1..={MAX_QP_WR})",
            c.max_recv_wr
        ));
    }
    if c.max_send_sge > MAX_SGE || c.max_recv_sge > MAX_SGE {
        return bad(format!("SGE limit over soft0's {MAX_SGE}"));
    }
    if c.max_inline_data > MAX_INLINE {
        return bad(format!(
            "max_inline_data {} (soft0 allows {MAX_INLINE})",
            c.max_inline_data
        ));
    }
    Ok(QpCaps {
        max_send_sge: c.max_send_sge.max(1),
        max_recv_sge: c.max_recv_sge.max(1),
        ..c
    })
}

impl Qp {
    /// A QP over an established TCP connection (not yet started).
    pub(super) fn new(
        init: &QpInit<'_>,
        stream: TcpStream,
        state: ConnState,
        pending: Option<Offer>,
    ) -> Result<Qp> {
        let pd = init
            .pd
            .as_soft()
            .ok_or(FabricError::ProviderMismatch { what: "PD" })?;
        let scq = init
            .send_cq
            .as_soft()
            .ok_or(FabricError::ProviderMismatch { what: "CQ" })?;
        let rcq = init
            .recv_cq
            .as_soft()
            .ok_or(FabricError::ProviderMismatch { what: "CQ" })?;
        let srq = match init.srq {
            None => None,
            Some(s) => {
                let s = s
                    .as_soft()
                    .ok_or(FabricError::ProviderMismatch { what: "SRQ" })?;
                if s.0.pd_id != pd.id() {
                    return Err(FabricError::InvalidArgument {
                        what: "the shared receive queue belongs to another protection domain \
                               than the QP"
                            .into(),
                    });
                }
                Some(s.0.clone())
            }
        };
        let caps = caps_checked(init.caps, srq.is_some())?;
        let peer = stream
            .peer_addr()
            .map_err(|e| FabricError::os("getpeername", e))?;
        let dev = pd.dev().clone();
        let qpn = dev.alloc_qpn();
        let sq = SendQueue::new(SqParams {
            qpn,
            pd_id: pd.id(),
            depth: caps.max_send_wr,
            max_sge: caps.max_send_sge,
            max_inline: caps.max_inline_data,
            cq: scq.0.clone(),
            dev: dev.clone(),
        });
        let rq = match srq {
            Some(srq) => RecvQueue::shared(qpn, srq, rcq.0.clone()),
            None => RecvQueue::own(qpn, caps.max_recv_wr, caps.max_recv_sge, rcq.0.clone()),
        };
        let sh = QpShared {
            qpn,
            pd_id: pd.id(),
            dev,
            caps,
            peer,
            stream,
            wire: Mutex::new(tx::Wire::new(caps.max_send_sge as usize)),
            sq: Mutex::new(sq),
            sq_cv: Condvar::new(),
            rq: Mutex::new(rq),
            cm: EventQueue::new()?,
            error: AtomicBool::new(false),
            #[cfg(test)]
            frames_inline: AtomicU64::new(0),
            state: Mutex::new(state),
            initiator_depth: AtomicU8::new(0),
            responder_resources: AtomicU8::new(0),
            _pd: pd.clone(),
            cqs: [scq.0.clone(), rcq.0.clone()],
        };
        Ok(Qp {
            sh: Arc::new(sh),
            threads: Mutex::new(Vec::new()),
            pending: Mutex::new(pending),
        })
    }

    /// Records the negotiated parameters and starts the provider threads.
    pub(super) fn start(
        &self,
        initiator_depth: u8,
        responder_resources: u8,
        rnr_retry: u8,
        peer_max_send_wr: u32,
    ) -> Result<()> {
        self.sh
            .initiator_depth
            .store(initiator_depth, Ordering::SeqCst);
        self.sh
            .responder_resources
            .store(responder_resources, Ordering::SeqCst);
        {
            let mut sq = self.sh.lock_sq();
            sq.initiator_depth = initiator_depth;
            sq.rnr_retry = rnr_retry.min(7);
            sq.responses_max = peer_max_send_wr.clamp(1, MAX_QP_WR) as usize;
            let n = sq.responses_max;
            sq.responses.reserve_exact(n);
        }
        *self.sh.state.lock().unwrap() = ConnState::Connected;
        let clone = |s: &TcpStream| s.try_clone().map_err(|e| FabricError::os("dup socket", e));
        let rx = rx::RxShared::new(self.sh.clone(), clone(&self.sh.stream)?)?;
        // The CQ's waiters are registered before the receive thread: see `rx.rs`.
        let rcq = self.sh.cqs[1].clone();
        let token = rcq.register(&rx)?;
        let b = self.sh.clone();
        let name = |k: &str| format!("soft-{k}-{}", self.sh.qpn);
        let spawn_err = |e| FabricError::os("spawn soft QP thread", e);
        let mut th = self.threads.lock().unwrap();
        let fd = rx.fd();
        let unregister = rcq.clone();
        let spawned = std::thread::Builder::new()
            .name(name("rx"))
            .spawn(move || rx::run(rx, rcq, token));
        match spawned {
            Ok(t) => th.push(t),
            Err(e) => {
                unregister.unregister(token, fd);
                return Err(spawn_err(e));
            }
        }
        th.push(
            std::thread::Builder::new()
                .name(name("tx"))
                .spawn(move || tx::run(b))
                .map_err(spawn_err)?,
        );
        Ok(())
    }

    pub fn qp_num(&self) -> u32 {
        self.sh.qpn
    }
    /// How many frames threads waiting on the receive CQ parsed themselves.
    #[cfg(test)]
    pub(crate) fn frames_parsed_by_waiters(&self) -> u64 {
        self.sh.frames_inline.load(Ordering::Relaxed)
    }
    pub(super) fn stream(&self) -> &TcpStream {
        &self.sh.stream
    }
    pub fn caps(&self) -> QpCaps {
        self.sh.caps
    }
    pub fn peer_addr(&self) -> SocketAddr {
        self.sh.peer
    }
    pub fn initiator_depth(&self) -> u8 {
        self.sh.initiator_depth.load(Ordering::SeqCst)
    }
    pub fn responder_resources(&self) -> u8 {
        self.sh.responder_resources.load(Ordering::SeqCst)
    }

    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        if *self.sh.state.lock().unwrap() == ConnState::AwaitingAccept {
            return Err(FabricError::NotConnected);
        }
        let caps = self.sh.caps;
        let mut sq = self.sh.lock_sq();
        let mut result = Ok(());
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(e) = self.check_send(index, wr, &caps) {
                result = Err(e);
                break;
            }
            if sq.is_full() {
                result = Err(FabricError::QueueFull { index });
                break;
            }
            let op = match self.sq_op(index, wr) {
                Ok(op) => op,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let inline = wr.flags.contains(SendFlags::INLINE)
                && matches!(
                    wr.op,
                    WrOp::Send | WrOp::SendWithInv { .. } | WrOp::RdmaWrite { .. }
                );
            let (dev, pd_id) = (&self.sh.dev, self.sh.pd_id);
            let mut gather = |dst: &mut [u8]| -> u32 { gather_inline(dev, pd_id, wr.sgl, dst) };
            let sgl = if inline { &[][..] } else { wr.sgl };
            sq.push(
                wr.wr_id,
                op,
                sgl,
                inline.then_some(&mut gather as InlineFill<'_>),
                wr.flags.contains(SendFlags::SIGNALED),
                wr.flags.contains(SendFlags::FENCE),
                wr.flags.contains(SendFlags::SOLICITED),
            );
        }
        drop(sq);
        // Run to completion: this thread writes what it posted (now, or when its send batch
        // ends).
        tx::post_done(&self.sh);
        result
    }

    fn check_send(&self, index: usize, wr: &SendWr<'_>, caps: &QpCaps) -> Result<()> {
        let bad = |reason: String| Err(FabricError::BadWr { index, reason });
        let local = matches!(wr.op, WrOp::BindMw { .. } | WrOp::LocalInv { .. });
        if local && !wr.sgl.is_empty() {
            return bad("bind / local invalidate take no SGEs".into());
        }
        if wr.flags.contains(SendFlags::INLINE) && !local {
            let total: u64 = wr.sgl.iter().map(|s| s.length as u64).sum();
            if total > caps.max_inline_data as u64 {
                return bad(format!(
                    "{total} inline bytes over max_inline_data {}",
                    caps.max_inline_data
                ));
            }
            if matches!(wr.op, WrOp::RdmaRead { .. }) {
                return bad("RDMA READ cannot be inline".into());
            }
            // Inline payloads are read at post time, so they too must name registered memory:
            // that is what keeps a safe post_send from reading arbitrary addresses.
            for sge in wr.sgl {
                if resolve_local(
                    &self.sh.dev,
                    sge.lkey,
                    sge.addr,
                    sge.length,
                    false,
                    self.sh.pd_id,
                )
                .is_err()
                {
                    return bad(format!(
                        "inline SGE {:#x}+{} (lkey {:#x}) is not inside a registered memory \
                         region of this QP's protection domain",
                        sge.addr, sge.length, sge.lkey
                    ));
                }
            }
        } else if wr.sgl.len() > caps.max_send_sge as usize {
            return bad(format!(
                "{} SGEs over max_send_sge {}",
                wr.sgl.len(),
                caps.max_send_sge
            ));
        }
        if matches!(wr.op, WrOp::RdmaRead { .. }) && self.initiator_depth() == 0 {
            return bad("RDMA READ on a QP whose negotiated initiator depth is 0".into());
        }
        Ok(())
    }

    fn sq_op(&self, index: usize, wr: &SendWr<'_>) -> Result<SqOp> {
        Ok(match wr.op {
            WrOp::Send => SqOp::Send,
            WrOp::SendWithInv { rkey } => SqOp::SendInv(rkey),
            WrOp::RdmaWrite { remote_addr, rkey } => SqOp::Write { remote_addr, rkey },
            WrOp::RdmaRead { remote_addr, rkey } => SqOp::Read { remote_addr, rkey },
            WrOp::LocalInv { rkey } => SqOp::LocalInv(rkey),
            WrOp::BindMw {
                mw,
                mr,
                addr,
                length,
                access,
            } => {
                let mw = mw
                    .as_soft()
                    .ok_or(FabricError::ProviderMismatch { what: "MW" })?;
                let mr = mr
                    .as_soft()
                    .ok_or(FabricError::ProviderMismatch { what: "MR" })?;
                let remote = Access::REMOTE_READ | Access::REMOTE_WRITE;
                if access.bits() & !remote.bits() != 0 {
                    return Err(FabricError::BadWr {
                        index,
                        reason: format!("window access {access:?}: only REMOTE_READ/WRITE"),
                    });
                }
                // The new key is computed at post time, like ibv_inc_rkey + ibv_post_send.
                let key = inc_key(mw.rkey());
                mw.inner().posted_key.store(key, Ordering::SeqCst);
                SqOp::Bind(BindArgs {
                    mw: mw.inner().clone(),
                    mr: mr.inner().clone(),
                    key,
                    addr,
                    len: length,
                    access,
                })
            }
        })
    }

    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.sh.rq.lock().unwrap().post(wrs)
    }

    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        check_private_data(param.private_data.len(), MAX_ACCEPT_PRIVATE_DATA, "accept")?;
        let offer = self
            .pending
            .lock()
            .unwrap()
            .take()
            .ok_or(FabricError::NotConnected)?;
        // RDMA CM: each direction gets the smaller of what the reader wants and what the
        // other side serves.
        let cap = MAX_RD_ATOM.min(u8::MAX as u32) as u8;
        let init = param
            .initiator_depth
            .min(offer.responder_resources)
            .min(cap);
        let resp = param
            .responder_resources
            .min(offer.initiator_depth)
            .min(cap);
        let body = CmBody {
            initiator_depth: init,
            responder_resources: resp,
            qpn: self.sh.qpn,
            max_send_wr: self.sh.caps.max_send_wr,
            private_data: &param.private_data,
        };
        write_cm(&self.sh.stream, Opcode::Accept, &body).inspect_err(|_| {
            *self.sh.state.lock().unwrap() = ConnState::Disconnected;
        })?;
        self.start(init, resp, param.rnr_retry_count, offer.max_send_wr)
    }

    pub fn disconnect(&self) -> Result<()> {
        let st = *self.sh.state.lock().unwrap();
        match st {
            ConnState::AwaitingAccept => Err(FabricError::NotConnected),
            ConnState::Disconnected => Ok(()),
            ConnState::Connected => {
                let mut sq = self.sh.lock_sq();
                self.sh.fail(&mut sq);
                sq.disconnect = true;
                drop(sq);
                tx::pump(&self.sh);
                Ok(())
            }
        }
    }

    pub fn cm_event(&self, timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        self.sh.cm.pop(timeout)
    }

    pub fn cm_fd(&self) -> RawFd {
        self.sh.cm.fd()
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if self.pending.lock().unwrap().take().is_some() {
            // Never accepted: reject, as RDMA CM does when the id is destroyed.
            let body = CmBody {
                initiator_depth: 0,
                responder_resources: 0,
                qpn: self.sh.qpn,
                max_send_wr: 0,
                private_data: &[],
            };
            let _ = write_cm(&self.sh.stream, Opcode::Reject, &body);
        }
        let _ = self.disconnect();
        {
            let mut sq = self.sh.lock_sq();
            sq.stop = true;
        }
        self.sh.sq_cv.notify_all();
        let mut threads = std::mem::take(&mut *self.threads.lock().unwrap());
        // The transmit thread goes first so our DISCONNECT leaves before the socket closes.
        if let Some(t) = threads.pop() {
            let _ = t.join();
        }
        let _ = self.sh.stream.shutdown(Shutdown::Both);
        for t in threads {
            let _ = t.join();
        }
    }
}

/// Copies the payload of `sgl` into `dst`; returns the length. The SGEs were checked against the
/// key table at post time; one deregistered since (a caller race) contributes zeroes.
fn gather_inline(dev: &DeviceInner, pd_id: u32, sgl: &[crate::fabric::Sge], dst: &mut [u8]) -> u32 {
    let mut off = 0usize;
    for s in sgl {
        let len = s.length as usize;
        let out = &mut dst[off..off + len];
        match resolve_local(dev, s.lkey, s.addr, s.length, false, pd_id) {
            Ok(access) => out.copy_from_slice(access.slice(s.addr, len)),
            Err(_) => out.fill(0),
        }
        off += len;
    }
    off as u32
}
