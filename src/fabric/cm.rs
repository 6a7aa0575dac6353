//! Connection setup through the public API: the passive side ([`Listener`], [`ConnRequest`])
//! and the active side ([`resolve`], [`Resolved`], [`Connected`]), and the private-data
//! limits both check.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{
    soft, verbs, ConnParam, ConnRequest, Device, FabricError, Inner, Listener, ProviderKind, Qp,
    QpInit, Resolved, Result,
};

/// Resolves `addr` to a route and local device (RDMA CM: resolve_addr + resolve_route), the
/// first step of an active connection. Create the PD, CQs and buffers on
/// [`Resolved::device`], then [`Resolved::connect`].
pub fn resolve(kind: ProviderKind, addr: SocketAddr, timeout: Duration) -> Result<Resolved> {
    Ok(match kind {
        ProviderKind::Soft => soft::Resolved::resolve(addr, timeout)?.into(),
        ProviderKind::Verbs => verbs::Resolved::resolve(addr, timeout)?.into(),
    })
}

/// An established active connection.
#[derive(Debug)]
pub struct Connected {
    pub qp: Qp,
    /// The peer's accept private data.
    pub private_data: Vec<u8>,
}

impl Listener {
    /// The bound address (with the real port when listening on port 0).
    pub fn local_addr(&self) -> SocketAddr {
        dispatch!(&self.0, l => l.local_addr())
    }

    /// Next connection request, waiting up to `timeout` (`None`: forever). `Ok(None)` on
    /// timeout.
    pub fn get_request(&self, timeout: Option<Duration>) -> Result<Option<ConnRequest>> {
        dispatch!(&self.0, l => l.get_request(timeout).map(|r| r.map(ConnRequest::from)))
    }

    /// A file descriptor that becomes readable when a request is pending.
    pub fn fd(&self) -> RawFd {
        dispatch!(&self.0, l => l.fd())
    }
}

impl ConnRequest {
    /// The connect private data (what NVMe-oF calls the CM request: qid, queue sizes).
    pub fn private_data(&self) -> &[u8] {
        dispatch!(&self.0, r => r.private_data())
    }

    pub fn peer_addr(&self) -> SocketAddr {
        dispatch!(&self.0, r => r.peer_addr())
    }

    /// RDMA READs the peer wants to have outstanding against us.
    pub fn initiator_depth(&self) -> u8 {
        dispatch!(&self.0, r => r.initiator_depth())
    }

    /// RDMA READs the peer will serve for us.
    pub fn responder_resources(&self) -> u8 {
        dispatch!(&self.0, r => r.responder_resources())
    }

    /// The device the request arrived on (create the PD and CQs there).
    pub fn device(&self) -> Device {
        dispatch!(&self.0, r => r.device().into())
    }

    /// Creates the QP for this connection. Post receives, then [`Qp::accept`]. Dropping the
    /// QP without accepting rejects the connection.
    pub fn create_qp(self, init: &QpInit<'_>) -> Result<Qp> {
        dispatch!(self.0, r => r.create_qp(init).map(Qp::from))
    }

    /// Rejects with `private_data` (at most [`MAX_REJECT_PRIVATE_DATA`](super::MAX_REJECT_PRIVATE_DATA) bytes).
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        dispatch!(self.0, r => r.reject(private_data))
    }
}

impl Resolved {
    /// The local device the route goes through.
    pub fn device(&self) -> Device {
        dispatch!(&self.0, r => r.device().into())
    }

    /// Creates the QP and connects, waiting up to `timeout` for the peer's answer.
    /// A reject comes back as [`FabricError::Rejected`] with the peer's private data.
    pub fn connect(
        self,
        init: &QpInit<'_>,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<Connected> {
        dispatch!(self.0, r => r
            .connect(init, param, timeout)
            .map(|(qp, private_data)| Connected { qp: qp.into(), private_data }))
    }
}

/// Checks a private-data length against the CM limit for `what`.
pub(crate) fn check_private_data(len: usize, max: usize, what: &str) -> Result<()> {
    if len > max {
        return Err(FabricError::InvalidArgument {
            what: format!("{what} private data is {len} bytes, the limit is {max}"),
        });
    }
    Ok(())
}
