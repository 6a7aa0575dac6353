//! The active side: resolving an address to a route and device, then connecting a QP on it,
//! and the errors a failed step (reject, unreachable, timeout) turns into.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::ev;
use super::event::Event;
use super::id::CmId;
use super::sockaddr::SockAddr;
use crate::fabric::verbs::device::Device;
use crate::fabric::verbs::qp::{Depths, Qp, Side};
use crate::fabric::verbs::sys;
use crate::fabric::{
    check_private_data, ConnParam, FabricError, QpInit, Result, MAX_CONNECT_PRIVATE_DATA,
};

/// IB CM reject reason "consumer defined": the peer's application rejected (with private data).
const REJ_CONSUMER_DEFINED: i32 = 28;
/// IB CM reject reason "invalid service ID": nothing listens on that port.
const REJ_INVALID_SERVICE_ID: i32 = 8;

fn timeout_ms(t: Duration) -> i32 {
    t.as_millis().clamp(1, i32::MAX as u128) as i32
}

/// An address resolved to a route and local device (active side).
pub struct Resolved {
    id: CmId,
    addr: SocketAddr,
    device: Device,
}

/// Waits for `want` on `id`; any other event is an error naming the step.
fn expect_event(
    id: &CmId,
    want: sys::rdma_cm_event_type::Type,
    deadline: Instant,
    op: &'static str,
    addr: SocketAddr,
    total: Duration,
) -> Result<Event> {
    let Some(e) = id.next_event(Some(deadline))? else {
        return Err(FabricError::Timeout {
            op,
            ms: total.as_millis() as u64,
        });
    };
    if e.kind == want {
        return Ok(e);
    }
    Err(event_error(e, op, addr))
}

/// The error for a failed active-side step.
fn event_error(e: Event, op: &'static str, addr: SocketAddr) -> FabricError {
    let status = std::io::Error::from_raw_os_error(e.status.abs());
    match e.kind {
        ev::RDMA_CM_EVENT_REJECTED if e.status == REJ_CONSUMER_DEFINED => FabricError::Rejected {
            addr,
            private_data: e.private_data,
        },
        ev::RDMA_CM_EVENT_REJECTED if e.status == REJ_INVALID_SERVICE_ID => {
            FabricError::Unreachable {
                addr,
                reason: "connection refused: nothing listens on that port (CM reject reason 8)"
                    .into(),
            }
        }
        ev::RDMA_CM_EVENT_REJECTED => FabricError::Unreachable {
            addr,
            reason: format!("the CM rejected the connection (reason {})", e.status),
        },
        ev::RDMA_CM_EVENT_ADDR_ERROR => FabricError::Unreachable {
            addr,
            reason: format!(
                "address resolution failed: {status} (no RDMA interface routes there?)"
            ),
        },
        ev::RDMA_CM_EVENT_ROUTE_ERROR => FabricError::Unreachable {
            addr,
            reason: format!("route resolution failed: {status}"),
        },
        ev::RDMA_CM_EVENT_UNREACHABLE | ev::RDMA_CM_EVENT_CONNECT_ERROR => {
            FabricError::Unreachable {
                addr,
                reason: format!("{}: {status}", e.name()),
            }
        }
        _ => FabricError::UnexpectedEvent {
            op,
            event: format!("{} (status {})", e.name(), e.status),
        },
    }
}

impl Resolved {
    pub fn resolve(addr: SocketAddr, timeout: Duration) -> Result<Resolved> {
        let deadline = Instant::now() + timeout;
        let id = CmId::new("resolve")?;
        let mut dst = SockAddr::from(addr);
        // SAFETY: the id is live; `dst` is a valid sockaddr for the call; no source address.
        let rc = unsafe {
            sys::rdma_resolve_addr(
                id.raw(),
                std::ptr::null_mut(),
                dst.as_mut_ptr(),
                timeout_ms(timeout),
            )
        };
        if rc != 0 {
            return Err(FabricError::Unreachable {
                addr,
                reason: format!("rdma_resolve_addr: {}", std::io::Error::last_os_error()),
            });
        }
        let e = ev::RDMA_CM_EVENT_ADDR_RESOLVED;
        expect_event(&id, e, deadline, "resolve address", addr, timeout)?;
        let left = deadline.saturating_duration_since(Instant::now());
        // SAFETY: the id is live and its address resolved.
        if unsafe { sys::rdma_resolve_route(id.raw(), timeout_ms(left)) } != 0 {
            return Err(FabricError::Unreachable {
                addr,
                reason: format!("rdma_resolve_route: {}", std::io::Error::last_os_error()),
            });
        }
        let e = ev::RDMA_CM_EVENT_ROUTE_RESOLVED;
        expect_event(&id, e, deadline, "resolve route", addr, timeout)?;
        let device = Device::from_ctx(id.verbs())?;
        device.check_port(id.port_num())?;
        Ok(Resolved { id, addr, device })
    }

    pub fn device(&self) -> Device {
        self.device.clone()
    }

    pub fn connect(
        self,
        init: &QpInit<'_>,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<(Qp, Vec<u8>)> {
        check_private_data(
            param.private_data.len(),
            MAX_CONNECT_PRIVATE_DATA,
            "connect",
        )?;
        let wanted = Depths {
            initiator_depth: param.initiator_depth.min(self.device.max_initiator_depth()),
            responder_resources: param
                .responder_resources
                .min(self.device.max_responder_resources()),
        };
        let qp =
            Qp::create(self.id, init, Side::Active { wanted }, self.addr).map_err(|(e, _id)| e)?;
        let conn = sys::rdma_conn_param {
            private_data: param.private_data.as_ptr().cast(),
            private_data_len: param.private_data.len() as u8,
            responder_resources: wanted.responder_resources,
            initiator_depth: wanted.initiator_depth,
            retry_count: param.retry_count.min(7),
            rnr_retry_count: param.rnr_retry_count.min(7),
            ..Default::default()
        };
        qp.connect(&conn)?;
        let deadline = Instant::now() + timeout;
        let e = expect_event(
            qp.cm_id(),
            ev::RDMA_CM_EVENT_ESTABLISHED,
            deadline,
            "connect",
            self.addr,
            timeout,
        )?;
        qp.established(Depths {
            initiator_depth: wanted.initiator_depth.min(e.initiator_depth),
            responder_resources: wanted.responder_resources.min(e.responder_resources),
        });
        Ok((qp, e.private_data))
    }
}
