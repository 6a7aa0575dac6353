//! The passive side: a listener on an address and the connect requests it hands out, each
//! moved onto its own channel (`rdma_migrate_id`) as soon as it is read.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use super::ev;
use super::event::Event;
use super::id::CmId;
use crate::fabric::verbs::device::Device;
use crate::fabric::verbs::qp::{Depths, Qp, Side};
use crate::fabric::verbs::{errno_err, fd, sys};
use crate::fabric::{check_private_data, FabricError, QpInit, Result, MAX_REJECT_PRIVATE_DATA};

/// A passive endpoint listening on an address, with its own event channel.
pub struct Listener {
    id: CmId,
    local: SocketAddr,
}

impl Listener {
    pub(crate) fn new(device: Option<&Device>, addr: SocketAddr, backlog: u32) -> Result<Self> {
        let id = CmId::new("listen")?;
        id.bind(addr).map_err(|e| match e {
            FabricError::Os { ref source, .. }
                if source.raw_os_error() == Some(libc::EADDRNOTAVAIL) =>
            {
                FabricError::NoDevice {
                    what: format!("owns address {addr} (is it configured on an RDMA interface?)"),
                }
            }
            e => e,
        })?;
        let ctx = id.verbs();
        if let Some(dev) = device {
            // A wildcard address binds to no device yet; a specific one must be this device's.
            if !ctx.is_null() && !dev.same_ctx(ctx) {
                return Err(FabricError::InvalidArgument {
                    what: format!("address {addr} is not on device {}", dev.name()),
                });
            }
        }
        if !ctx.is_null() {
            Device::from_ctx(ctx)?.check_port(id.port_num())?;
        }
        let backlog = backlog.clamp(1, i32::MAX as u32) as i32;
        // SAFETY: the id is live and bound.
        if unsafe { sys::rdma_listen(id.raw(), backlog) } != 0 {
            return Err(errno_err("rdma_listen"));
        }
        let local = id.local_addr().unwrap_or(addr);
        Ok(Listener { id, local })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn fd(&self) -> RawFd {
        self.id.fd()
    }

    pub fn get_request(&self, timeout: Option<Duration>) -> Result<Option<ConnRequest>> {
        let deadline = fd::deadline(timeout);
        loop {
            let Some(e) = self.id.next_event(deadline)? else {
                return Ok(None);
            };
            match e.kind {
                ev::RDMA_CM_EVENT_CONNECT_REQUEST => return ConnRequest::new(e).map(Some),
                ev::RDMA_CM_EVENT_DEVICE_REMOVAL => {
                    return Err(FabricError::UnexpectedEvent {
                        op: "get_request",
                        event: format!("{} (the listener's device is gone)", e.name()),
                    })
                }
                _ => tracing::warn!(event = %e.name(), "listener: ignoring CM event"),
            }
        }
    }
}

/// An incoming connect request, on its own channel. Dropping it rejects it.
pub struct ConnRequest {
    id: Option<CmId>,
    private_data: Vec<u8>,
    peer: SocketAddr,
    /// READs we may issue (the peer's responder resources).
    our_initiator_depth: u8,
    /// READs the peer wants to issue against us (its initiator depth).
    peer_initiator_depth: u8,
    /// The RNR retry count the requester asked for (see `Qp::accept`).
    peer_rnr_retry: u8,
    device: Device,
}

impl ConnRequest {
    fn new(e: Event) -> Result<ConnRequest> {
        // SAFETY: a CONNECT_REQUEST's id is a new id that the application owns.
        let id = unsafe { CmId::adopt(e.id) }?;
        let device = Device::from_ctx(id.verbs())?;
        let peer = id.peer_addr().ok_or_else(|| FabricError::UnexpectedEvent {
            op: "get_request",
            event: "connect request without a peer address".into(),
        })?;
        Ok(ConnRequest {
            id: Some(id),
            private_data: e.private_data,
            peer,
            our_initiator_depth: e.initiator_depth,
            peer_initiator_depth: e.responder_resources,
            peer_rnr_retry: e.rnr_retry_count,
            device,
        })
    }

    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    pub fn initiator_depth(&self) -> u8 {
        self.peer_initiator_depth
    }

    pub fn responder_resources(&self) -> u8 {
        self.our_initiator_depth
    }

    pub fn device(&self) -> Device {
        self.device.clone()
    }

    pub fn create_qp(mut self, init: &QpInit<'_>) -> Result<Qp> {
        let id = self
            .id
            .take()
            .expect("a ConnRequest holds its id until consumed");
        let offered = Depths {
            initiator_depth: self.our_initiator_depth,
            responder_resources: self.peer_initiator_depth,
        };
        let side = Side::Passive {
            offered,
            peer_rnr_retry: self.peer_rnr_retry,
        };
        match Qp::create(id, init, side, self.peer) {
            Ok(qp) => Ok(qp),
            Err((e, id)) => {
                // Reject so the peer does not wait for its timeout; `id` is destroyed here.
                if let Err(re) = id.reject(&[]) {
                    tracing::warn!(error = %re, "reject after a failed create_qp");
                }
                Err(e)
            }
        }
    }

    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        check_private_data(private_data.len(), MAX_REJECT_PRIVATE_DATA, "reject")?;
        let id = self
            .id
            .take()
            .expect("a ConnRequest holds its id until consumed");
        id.reject(private_data)
    }
}

impl Drop for ConnRequest {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            if let Err(e) = id.reject(&[]) {
                tracing::warn!(peer = %self.peer, error = %e, "rejecting a dropped connect request");
            }
        }
    }
}
