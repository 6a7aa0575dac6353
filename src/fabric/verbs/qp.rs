//! The RC queue pair of one connection: its CM id (with its own event channel), posting, and
//! connection events. Holds its PD and CQs, so they outlive it.
//!
//! Teardown (Drop): disconnect if connected (reject if never accepted), destroy the QP, the
//! id, then the channel; then the PD and CQ references go.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::cm::{cm_call, CmId, Event};
use super::cq::Cq;
use super::pd::Pd;
use super::srq::Srq;
use super::wr::{self, PostTarget, RecvTarget};
use super::{fd, rc_err, sys};
use crate::fabric::{
    check_private_data, CmEvent, ConnParam, FabricError, QpCaps, QpInit, RecvWr, Result, SendWr,
    MAX_ACCEPT_PRIVATE_DATA,
};

use sys::rdma_cm_event_type as ev;

/// How long a disconnect waits for an accepted connection's handshake to finish.
const HANDSHAKE_SETTLE: Duration = Duration::from_secs(2);

/// READ depths of a connection, from this side's perspective.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Depths {
    /// READs this side may have outstanding.
    pub initiator_depth: u8,
    /// READs the peer may have outstanding against this side.
    pub responder_resources: u8,
}

/// Which end of the connection the QP is.
pub(crate) enum Side {
    /// Accepting: what the peer's request offered, and the RNR retry count it asked for.
    Passive { offered: Depths, peer_rnr_retry: u8 },
    /// Connecting: what we ask for (already capped by the device).
    Active { wanted: Depths },
}

/// Connection state, for teardown and `accept` checks.
#[repr(u8)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Created, not yet accepted / connected.
    Idle = 0,
    /// accept / connect issued; the connection is (being) established.
    Connected = 1,
    /// Disconnected by either side (or an error event).
    Down = 2,
}

/// A connected (or to-be-accepted) RC queue pair.
pub struct Qp {
    // Field order is drop order: the id (QP, id, channel) goes before the PD and CQs.
    id: CmId,
    pd: Pd,
    send_cq: Cq,
    recv_cq: Cq,
    target: PostTarget,
    qp_num: u32,
    peer: SocketAddr,
    offered: Option<Depths>,
    /// Passive side: the requester's RNR retry count, echoed in the accept.
    peer_rnr_retry: u8,
    /// The shared receive queue the QP takes its receives from. After `id` (the QP is
    /// destroyed before the SRQ).
    srq: Option<Srq>,
    initiator_depth: AtomicU8,
    responder_resources: AtomicU8,
    state: AtomicU8,
    /// Passive side: ESTABLISHED was seen (the peer's RTU arrived).
    established: AtomicBool,
    /// An event `settle_handshake` read that `cm_event` must still report.
    pending: Mutex<Option<Event>>,
}

// SAFETY: posting and CM calls on one QP/id are thread-safe in libibverbs/librdmacm; the raw
// QP pointer in `target` lives as long as `id`; mutable state is atomic or behind a Mutex
// (the pending event only carries pointers that are never dereferenced again).
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Qp {
    /// Creates the QP on `id`. On failure the id comes back so the caller can reject.
    pub(crate) fn create(
        mut id: CmId,
        init: &QpInit<'_>,
        side: Side,
        peer: SocketAddr,
    ) -> std::result::Result<Qp, (FabricError, CmId)> {
        let parts = (|| {
            let pd = init.pd.as_verbs().ok_or(FabricError::ProviderMismatch {
                what: "protection domain",
            })?;
            let scq = init
                .send_cq
                .as_verbs()
                .ok_or(FabricError::ProviderMismatch {
                    what: "send completion queue",
                })?;
            let rcq = init
                .recv_cq
                .as_verbs()
                .ok_or(FabricError::ProviderMismatch {
                    what: "receive completion queue",
                })?;
            let ctx = id.verbs();
            for (what, dev) in [
                ("protection domain (of another device)", pd.device()),
                ("send completion queue (of another device)", scq.device()),
                ("receive completion queue (of another device)", rcq.device()),
            ] {
                if !dev.same_ctx(ctx) {
                    return Err(FabricError::ProviderMismatch { what });
                }
            }
            let srq = match init.srq {
                None => None,
                Some(s) => {
                    let s = s.as_verbs().ok_or(FabricError::ProviderMismatch {
                        what: "shared receive queue",
                    })?;
                    if !s.pd().device().same_ctx(ctx) {
                        return Err(FabricError::ProviderMismatch {
                            what: "shared receive queue (of another device)",
                        });
                    }
                    if s.pd().raw() != pd.raw() {
                        return Err(FabricError::InvalidArgument {
                            what: "the shared receive queue belongs to another protection \
                                   domain than the QP"
                                .into(),
                        });
                    }
                    Some(s.clone())
                }
            };
            Ok((pd.clone(), scq.clone(), rcq.clone(), srq))
        })();
        let (pd, send_cq, recv_cq, srq) = match parts {
            Ok(p) => p,
            Err(e) => return Err((e, id)),
        };
        let c = init.caps;
        let mut cap = sys::ibv_qp_cap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        };
        let srq_raw = srq.as_ref().map_or(std::ptr::null_mut(), Srq::raw);
        if let Err(e) = id.create_qp(pd.raw(), send_cq.raw(), recv_cq.raw(), srq_raw, &mut cap) {
            let e = match e {
                FabricError::Os { source, .. } if source.raw_os_error() == Some(libc::EINVAL) => {
                    FabricError::InvalidArgument {
                        what: format!(
                            "QP capacities {c:?} exceed what device {} allows (see `ibv_devinfo -v`)",
                            pd.device().name()
                        ),
                    }
                }
                e => e,
            };
            return Err((e, id));
        }
        let qp = id.qp();
        let pd_raw = pd.raw();
        // SAFETY: rdma_create_qp succeeded, so `qp` is live while `id` is.
        let qp_num = unsafe { (*qp).qp_num };
        let caps = QpCaps {
            max_send_wr: cap.max_send_wr,
            max_recv_wr: cap.max_recv_wr,
            max_send_sge: cap.max_send_sge,
            max_recv_sge: cap.max_recv_sge,
            max_inline_data: cap.max_inline_data,
        };
        let (offered, peer_rnr_retry, depths) = match side {
            Side::Passive {
                offered,
                peer_rnr_retry,
            } => (
                Some(offered),
                peer_rnr_retry,
                Depths {
                    initiator_depth: 0,
                    responder_resources: 0,
                },
            ),
            Side::Active { wanted } => (None, 7, wanted),
        };
        Ok(Qp {
            id,
            pd: pd.clone(),
            send_cq,
            recv_cq,
            target: PostTarget {
                qp,
                pd_obj: pd,
                pd: pd_raw,
                caps,
            },
            qp_num,
            peer,
            offered,
            peer_rnr_retry,
            srq,
            initiator_depth: AtomicU8::new(depths.initiator_depth),
            responder_resources: AtomicU8::new(depths.responder_resources),
            state: AtomicU8::new(State::Idle as u8),
            established: AtomicBool::new(false),
            pending: Mutex::new(None),
        })
    }

    pub(crate) fn cm_id(&self) -> &CmId {
        &self.id
    }

    fn state(&self) -> State {
        match self.state.load(Ordering::Acquire) {
            0 => State::Idle,
            1 => State::Connected,
            _ => State::Down,
        }
    }

    fn set_state(&self, s: State) {
        self.state.store(s as u8, Ordering::Release);
    }

    /// Active side: `rdma_connect`.
    pub(crate) fn connect(&self, conn: &sys::rdma_conn_param) -> Result<()> {
        let mut conn = *conn;
        // SAFETY: the id is live with its QP; `conn` and its private data outlive the call.
        cm_call("rdma_connect", unsafe {
            sys::rdma_connect(self.id.raw(), &mut conn)
        })?;
        self.set_state(State::Connected);
        Ok(())
    }

    /// Active side: the connection is up with these negotiated depths.
    pub(crate) fn established(&self, d: Depths) {
        self.initiator_depth
            .store(d.initiator_depth, Ordering::Relaxed);
        self.responder_resources
            .store(d.responder_resources, Ordering::Relaxed);
    }

    pub fn qp_num(&self) -> u32 {
        self.qp_num
    }

    pub fn caps(&self) -> QpCaps {
        self.target.caps
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    pub fn initiator_depth(&self) -> u8 {
        self.initiator_depth.load(Ordering::Relaxed)
    }

    pub fn responder_resources(&self) -> u8 {
        self.responder_resources.load(Ordering::Relaxed)
    }

    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        wr::post_send(&self.target, wrs)
    }

    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if self.srq.is_some() {
            return Err(FabricError::BadWr {
                index: 0,
                reason: "this QP takes its receives from a shared receive queue: post them \
                         there"
                    .into(),
            });
        }
        let max_sge = self.target.caps.max_recv_sge;
        wr::post_recv(RecvTarget::Qp(self.target.qp), max_sge, wrs)
    }

    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        let Some(offered) = self.offered else {
            return Err(FabricError::InvalidArgument {
                what: "accept on an actively connected QP".into(),
            });
        };
        if self.state() != State::Idle {
            return Err(FabricError::InvalidArgument {
                what: "accept called twice (or after a disconnect)".into(),
            });
        }
        check_private_data(param.private_data.len(), MAX_ACCEPT_PRIVATE_DATA, "accept")?;
        let dev = self.pd.device();
        // Our READs: no more than asked, the device allows, and the peer offered to serve.
        let initiator_depth = param
            .initiator_depth
            .min(dev.max_initiator_depth())
            .min(offered.initiator_depth);
        // The peer's READs: no more than we serve, the device allows, and the peer wants.
        let responder_resources = param
            .responder_resources
            .min(dev.max_responder_resources())
            .min(offered.responder_resources);
        let mut conn = sys::rdma_conn_param {
            private_data: param.private_data.as_ptr().cast(),
            private_data_len: param.private_data.len() as u8,
            responder_resources,
            initiator_depth,
            retry_count: param.retry_count.min(7),
            // The accept's (REP's) RNR retry count governs the *requester's* QP, and the
            // request's governs ours (IB CM). Echoing the requester's value makes a connect's
            // `rnr_retry_count` mean what it says for its own sends; NVMe hosts ask for 7,
            // which is what nvmet answers too. With an SRQ an empty queue is backpressure, not
            // an error: the peer retries for ever (nvmet and SPDK send 7 there too).
            rnr_retry_count: if self.srq.is_some() {
                7
            } else {
                self.peer_rnr_retry.min(7)
            },
            ..Default::default()
        };
        // SAFETY: the id is live with its QP; `conn` and its private data outlive the call.
        cm_call("rdma_accept", unsafe {
            sys::rdma_accept(self.id.raw(), &mut conn)
        })?;
        self.established(Depths {
            initiator_depth,
            responder_resources,
        });
        self.set_state(State::Connected);
        if let Some(timer) = param.min_rnr_timer {
            if let Err(e) = self.set_min_rnr_timer(timer) {
                tracing::warn!(
                    peer = %self.peer,
                    qp_num = self.qp_num,
                    timer,
                    error = %e,
                    "cannot set the QP's RNR NAK timer: a peer's SEND that finds no receive \
                     waits what the connection manager programmed (655 ms on Linux)"
                );
            }
        }
        Ok(())
    }

    /// `ibv_modify_qp(IBV_QP_MIN_RNR_TIMER)` on the accepted QP (RTS to RTS, allowed for RC).
    fn set_min_rnr_timer(&self, timer: u8) -> Result<()> {
        if timer > 31 {
            return Err(FabricError::InvalidArgument {
                what: format!("min_rnr_timer {timer} (the IB encoding is 0..=31)"),
            });
        }
        let mut attr = sys::ibv_qp_attr {
            min_rnr_timer: timer,
            ..Default::default()
        };
        let mask = sys::ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER as libc::c_int;
        // SAFETY: the QP is live while `id` is; `attr` is valid for the call and only the
        // field named by `mask` is read.
        let rc = unsafe { sys::ibv_modify_qp(self.target.qp, &mut attr, mask) };
        if rc != 0 {
            return Err(rc_err("ibv_modify_qp(IBV_QP_MIN_RNR_TIMER)", rc));
        }
        Ok(())
    }

    pub fn disconnect(&self) -> Result<()> {
        match self.state() {
            State::Idle => Err(FabricError::NotConnected),
            State::Down => Ok(()),
            State::Connected => {
                self.settle_handshake();
                self.set_state(State::Down);
                self.id.disconnect()
            }
        }
    }

    /// Passive side, accepted but ESTABLISHED not yet seen: waits (bounded) for the peer's
    /// RTU before a disconnect. A DREQ that overtakes the handshake makes the peer's connect
    /// fail with CONNECT_ERROR (its CM can no longer move its QP to RTR/RTS) instead of
    /// connecting and then seeing DISCONNECTED, which is what the fabric contract promises.
    fn settle_handshake(&self) {
        if self.offered.is_none() || self.established.load(Ordering::Acquire) {
            return;
        }
        let deadline = fd::deadline(Some(HANDSHAKE_SETTLE));
        while let Ok(Some(e)) = self.id.next_event(deadline) {
            if e.kind == ev::RDMA_CM_EVENT_ESTABLISHED {
                self.established.store(true, Ordering::Release);
                return;
            }
            if e.kind != ev::RDMA_CM_EVENT_TIMEWAIT_EXIT {
                // Anything else (DISCONNECTED, errors) ends the handshake too; keep it for
                // `cm_event`.
                *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                return;
            }
        }
    }

    pub fn cm_event(&self, timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        let deadline = fd::deadline(timeout);
        loop {
            let pending = self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            let e = match pending {
                Some(e) => e,
                None => match self.id.next_event(deadline)? {
                    Some(e) => e,
                    None => return Ok(None),
                },
            };
            let mapped = match e.kind {
                ev::RDMA_CM_EVENT_ESTABLISHED => {
                    self.established.store(true, Ordering::Release);
                    CmEvent::Established
                }
                ev::RDMA_CM_EVENT_DISCONNECTED => {
                    // Peer-initiated: answer its DREQ now (rdma_disconnect sends the DREP), so
                    // the peer's DISCONNECTED comes at once instead of after its DREQ timeout.
                    let was = self.state();
                    self.set_state(State::Down);
                    if was == State::Connected {
                        if let Err(e) = self.id.disconnect() {
                            tracing::debug!(error = %e, "answering a peer's disconnect");
                        }
                    }
                    CmEvent::Disconnected
                }
                // The id's time-wait is over: bookkeeping, not news for the user.
                ev::RDMA_CM_EVENT_TIMEWAIT_EXIT => continue,
                ev::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                    self.set_state(State::Down);
                    CmEvent::Error(format!(
                        "RDMA device {} was removed",
                        self.pd.device().name()
                    ))
                }
                ev::RDMA_CM_EVENT_ADDR_CHANGE => CmEvent::Error(
                    "the local address of the connection changed (interface down or moved)".into(),
                ),
                _ => {
                    self.set_state(State::Down);
                    CmEvent::Error(format!("{} (status {})", e.name(), e.status))
                }
            };
            return Ok(Some(mapped));
        }
    }

    pub fn cm_fd(&self) -> RawFd {
        self.id.fd()
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        let r = match self.state() {
            // Passive and never accepted: tell the peer no.
            State::Idle if self.offered.is_some() => self.id.reject(&[]),
            State::Connected => {
                self.settle_handshake();
                self.id.disconnect()
            }
            _ => Ok(()),
        };
        if let Err(e) = r {
            tracing::warn!(peer = %self.peer, qp_num = self.qp_num, error = %e, "QP teardown");
        }
        // Then `id` drops: rdma_destroy_qp, rdma_destroy_id, the channel; then PD and CQs.
        let _ = (&self.send_cq, &self.recv_cq);
    }
}
