//! The public queue pair: what it is created with ([`QpInit`]), posting work requests to it
//! and to a shared receive queue ([`Srq`]), and its connection (accept, disconnect, events).

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{CmEvent, ConnParam, Cq, Inner, Pd, Qp, QpCaps, RecvWr, Result, SendWr, Srq, SrqCaps};

/// What a QP is created with.
#[derive(Clone, Copy, Debug)]
pub struct QpInit<'a> {
    pub pd: &'a Pd,
    pub send_cq: &'a Cq,
    pub recv_cq: &'a Cq,
    pub caps: QpCaps,
    /// Take receives from this shared receive queue (of `pd`'s device and PD) instead of a
    /// queue of the QP's own: `caps.max_recv_wr` and `max_recv_sge` are then ignored (the QP
    /// reports 0) and [`Qp::post_recv`] is refused.
    pub srq: Option<&'a Srq>,
}

impl Srq {
    /// Posts receive work requests (same partial-post rule as [`Qp::post_send`]): SGE count
    /// and room are checked at post time ([`BadWr`](super::FabricError::BadWr),
    /// [`QueueFull`](super::FabricError::QueueFull)).
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        dispatch!(&self.0, s => s.post_recv(wrs))
    }

    /// What the device gave (at least what was asked for). Do not count on a device refusing
    /// more work requests than `max_wr`: some accept a few more.
    pub fn caps(&self) -> SrqCaps {
        dispatch!(&self.0, s => s.caps())
    }
}

impl Qp {
    /// QP number (appears in [`Wc::qp_num`](super::Wc::qp_num)).
    pub fn qp_num(&self) -> u32 {
        dispatch!(&self.0, q => q.qp_num())
    }

    /// Capacities the QP actually has.
    pub fn caps(&self) -> QpCaps {
        dispatch!(&self.0, q => q.caps())
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        dispatch!(&self.0, q => q.peer_addr())
    }

    /// RDMA READs this side may have outstanding (negotiated initiator depth).
    pub fn initiator_depth(&self) -> u8 {
        dispatch!(&self.0, q => q.initiator_depth())
    }

    /// RDMA READs the peer may have outstanding against this side.
    pub fn responder_resources(&self) -> u8 {
        dispatch!(&self.0, q => q.responder_resources())
    }

    /// Posts a chain of send work requests, in order.
    ///
    /// On error, the WRs before the failing index were posted and will complete; the rest were
    /// not. Local checks at post time: SGE count, inline size, queue room, an empty SGL for
    /// bind/invalidate. Everything else (keys, ranges, access) is checked when the WR executes
    /// and reported in its completion.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<()> {
        dispatch!(&self.0, q => q.post_send(wrs))
    }

    /// Posts receive work requests, in order (same partial-post rule as [`Qp::post_send`]).
    /// [`FabricError::BadWr`](super::FabricError::BadWr) on a QP created with an SRQ: post to
    /// the SRQ.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        dispatch!(&self.0, q => q.post_recv(wrs))
    }

    /// Passive side: accepts the connection this QP was created for, with `param` (private
    /// data at most [`MAX_ACCEPT_PRIVATE_DATA`](super::MAX_ACCEPT_PRIVATE_DATA) bytes). Post
    /// receives before accepting. The QP can be used at once; [`CmEvent::Established`] follows.
    ///
    /// On the verbs provider a QP with an SRQ answers with an RNR retry count of 7 (the peer
    /// retries a SEND that finds the SRQ empty for ever, as nvmet and SPDK ask); otherwise
    /// the requester's own value is echoed. (Soft: the requester's connect sets its own.) [`ConnParam::min_rnr_timer`] is applied once accepted; a device that
    /// refuses it only logs a warning.
    pub fn accept(&self, param: &ConnParam) -> Result<()> {
        dispatch!(&self.0, q => q.accept(param))
    }

    /// Starts a disconnect. Both sides get [`CmEvent::Disconnected`]; outstanding WRs flush.
    pub fn disconnect(&self) -> Result<()> {
        dispatch!(&self.0, q => q.disconnect())
    }

    /// Next connection event, waiting up to `timeout` (`Some(Duration::ZERO)` polls, `None`
    /// waits forever). `Ok(None)` on timeout.
    pub fn cm_event(&self, timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        dispatch!(&self.0, q => q.cm_event(timeout))
    }

    /// A file descriptor that becomes readable when a connection event is pending.
    pub fn cm_fd(&self) -> RawFd {
        dispatch!(&self.0, q => q.cm_fd())
    }
}
