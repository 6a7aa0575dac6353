//! RDMA CM: ids on their own event channels, the listener, incoming connect requests and
//! active connects.
//!
//! Every id owns one event channel, so each connection's events (ESTABLISHED, DISCONNECTED)
//! reach only its own QP: an accepted id is moved off the listener's channel with
//! `rdma_migrate_id` as soon as its request is read. Events are copied and acknowledged at
//! once (`rdma_destroy_id` waits for unacknowledged events).
//!
//! Depths in CM events are already in the receiver's perspective (the IB CM swaps the REQ/REP
//! fields): `initiator_depth` is how many READs *we* may issue (the peer's responder
//! resources), `responder_resources` how many the peer wants to issue against us.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::device::Device;
use super::qp::{Depths, Qp, Side};
use super::{errno, errno_err, fd, rc_err, sys};
use crate::fabric::{
    check_private_data, ConnParam, FabricError, QpInit, Result, MAX_CONNECT_PRIVATE_DATA,
    MAX_REJECT_PRIVATE_DATA,
};

use sys::rdma_cm_event_type as ev;

/// IB CM reject reason "consumer defined": the peer's application rejected (with private data).
const REJ_CONSUMER_DEFINED: i32 = 28;
/// IB CM reject reason "invalid service ID": nothing listens on that port.
const REJ_INVALID_SERVICE_ID: i32 = 8;

/// An event channel (one per id); destroyed after its id.
struct EventChannel(*mut sys::rdma_event_channel);

impl EventChannel {
    fn new() -> Result<EventChannel> {
        // SAFETY: no preconditions; the result is checked.
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(match errno() {
                libc::ENODEV | libc::ENOENT | libc::ENOSYS => FabricError::NoDevice {
                    what: "for the RDMA connection manager (/dev/infiniband/rdma_cm is missing: \
                           modprobe rdma_ucm, or this kernel has no RDMA)"
                        .into(),
                },
                _ => errno_err("rdma_create_event_channel"),
            });
        }
        let ch = EventChannel(ch);
        fd::set_nonblocking(ch.fd(), "fcntl(CM event channel, O_NONBLOCK)")?;
        Ok(ch)
    }

    fn fd(&self) -> RawFd {
        // SAFETY: the channel is live while `self` is; fd is immutable.
        unsafe { (*self.0).fd }
    }

    /// The next event, copied and acknowledged; `None` when `deadline` passes.
    fn next(&self, deadline: Option<Instant>) -> Result<Option<Event>> {
        loop {
            if !fd::wait_readable(self.fd(), deadline, "poll(CM event channel)")? {
                return Ok(None);
            }
            let mut e: *mut sys::rdma_cm_event = std::ptr::null_mut();
            // SAFETY: the channel is live; `e` is a valid out-parameter. Non-blocking fd.
            if unsafe { sys::rdma_get_cm_event(self.0, &mut e) } != 0 {
                match errno() {
                    libc::EAGAIN | libc::EINTR => continue,
                    _ => return Err(errno_err("rdma_get_cm_event")),
                }
            }
            // librdmacm turns a failed QP transition on a CONNECT_RESPONSE into CONNECT_ERROR
            // with status -1 and the real cause left in errno: keep it.
            let cause = errno();
            // SAFETY: `e` is a live event until acknowledged below; its private data pointer
            // and length describe a buffer owned by the event.
            let mut event = unsafe { Event::copy(&*e) };
            if event.kind == ev::RDMA_CM_EVENT_CONNECT_ERROR && event.status == -1 && cause > 0 {
                event.status = -cause;
            }
            // SAFETY: acknowledged exactly once, after the copy.
            unsafe { sys::rdma_ack_cm_event(e) };
            tracing::trace!(event = %event.name(), status = event.status, "rdma cm event");
            return Ok(Some(event));
        }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // SAFETY: destroyed once; the owning id was destroyed first (CmId's field order).
        unsafe { sys::rdma_destroy_event_channel(self.0) };
    }
}

/// A copied CM event.
pub(crate) struct Event {
    pub kind: sys::rdma_cm_event_type::Type,
    pub status: i32,
    pub id: *mut sys::rdma_cm_id,
    pub private_data: Vec<u8>,
    /// READs we may issue (receiver's perspective).
    pub initiator_depth: u8,
    /// READs the peer may issue against us.
    pub responder_resources: u8,
    /// A connect request's RNR retry count (what the requester asked for).
    pub rnr_retry_count: u8,
}

impl Event {
    /// # Safety
    /// `e` is a live, unacknowledged event.
    unsafe fn copy(e: &sys::rdma_cm_event) -> Event {
        // SAFETY: connection events carry `param.conn`; for others the fields are zeroed or
        // unused, and the private data pointer is NULL.
        let conn = unsafe { e.param.conn };
        let private_data = if conn.private_data.is_null() || conn.private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: librdmacm guarantees `private_data_len` bytes at `private_data` until the
            // event is acknowledged (the caller's promise).
            unsafe {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    conn.private_data_len.into(),
                )
            }
            .to_vec()
        };
        let conn_event = matches!(
            e.event,
            ev::RDMA_CM_EVENT_CONNECT_REQUEST
                | ev::RDMA_CM_EVENT_ESTABLISHED
                | ev::RDMA_CM_EVENT_CONNECT_RESPONSE
        );
        Event {
            kind: e.event,
            status: e.status,
            id: e.id,
            private_data,
            initiator_depth: if conn_event { conn.initiator_depth } else { 0 },
            responder_resources: if conn_event {
                conn.responder_resources
            } else {
                0
            },
            rnr_retry_count: if conn_event { conn.rnr_retry_count } else { 7 },
        }
    }

    pub fn name(&self) -> String {
        event_name(self.kind)
    }
}

pub(crate) fn event_name(kind: sys::rdma_cm_event_type::Type) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    let s = unsafe { std::ffi::CStr::from_ptr(sys::rdma_event_str(kind)) };
    s.to_string_lossy().into_owned()
}

/// A CM id with its own event channel; destroys its QP (if any), then the id, then the channel.
pub(crate) struct CmId {
    id: *mut sys::rdma_cm_id,
    has_qp: bool,
    // Dropped after `id` is destroyed in Drop.
    channel: EventChannel,
}

// SAFETY: librdmacm calls on one id are thread-safe (they are commands on the channel fd and
// take the id's mutex); the id is destroyed once, in Drop.
unsafe impl Send for CmId {}
// SAFETY: as above; `&self` methods issue CM commands or read fields librdmacm set earlier.
unsafe impl Sync for CmId {}

impl CmId {
    /// A new TCP-port-space (RC) id on a fresh channel.
    pub fn new(_op: &'static str) -> Result<CmId> {
        let channel = EventChannel::new()?;
        let mut id: *mut sys::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: the channel is live; `id` is a valid out-parameter.
        let rc = unsafe {
            sys::rdma_create_id(
                channel.0,
                &mut id,
                std::ptr::null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(errno_err("rdma_create_id"));
        }
        Ok(CmId {
            id,
            has_qp: false,
            channel,
        })
    }

    /// Takes over `id` (an accepted child of a listener) and moves it to its own channel.
    ///
    /// # Safety
    /// `id` is a live id nobody else owns.
    unsafe fn adopt(id: *mut sys::rdma_cm_id) -> Result<CmId> {
        let channel = match EventChannel::new() {
            Ok(c) => c,
            Err(e) => {
                // SAFETY: we own `id`; rejected and destroyed once.
                unsafe {
                    sys::rdma_reject(id, std::ptr::null(), 0);
                    sys::rdma_destroy_id(id);
                }
                return Err(e);
            }
        };
        // SAFETY: both are live; the id's events so far were acknowledged.
        if unsafe { sys::rdma_migrate_id(id, channel.0) } != 0 {
            let e = errno_err("rdma_migrate_id");
            // SAFETY: we own `id`; rejected and destroyed once.
            unsafe {
                sys::rdma_reject(id, std::ptr::null(), 0);
                sys::rdma_destroy_id(id);
            }
            return Err(e);
        }
        Ok(CmId {
            id,
            has_qp: false,
            channel,
        })
    }

    pub fn raw(&self) -> *mut sys::rdma_cm_id {
        self.id
    }

    pub fn fd(&self) -> RawFd {
        self.channel.fd()
    }

    pub fn next_event(&self, deadline: Option<Instant>) -> Result<Option<Event>> {
        self.channel.next(deadline)
    }

    /// The device context librdmacm attached (NULL until bound to a device's address).
    pub fn verbs(&self) -> *mut sys::ibv_context {
        // SAFETY: the id is live; `verbs` is set by librdmacm during bind/resolve/request,
        // which happened-before this call on this thread or through the event channel.
        unsafe { (*self.id).verbs }
    }

    pub fn port_num(&self) -> u8 {
        // SAFETY: as for `verbs`.
        unsafe { (*self.id).port_num }
    }

    pub fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut sa = SockAddr::from(addr);
        // SAFETY: the id is live; `sa` is a valid sockaddr of its family for the call.
        if unsafe { sys::rdma_bind_addr(self.id, sa.as_mut_ptr()) } != 0 {
            return Err(errno_err("rdma_bind_addr"));
        }
        Ok(())
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; route.addr is filled by librdmacm's address queries.
        let storage = unsafe { (*self.id).route.addr.__bindgen_anon_1.src_storage };
        sockaddr_to_std(&storage)
    }

    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as for local_addr.
        let storage = unsafe { (*self.id).route.addr.__bindgen_anon_2.dst_storage };
        sockaddr_to_std(&storage)
    }

    /// Creates the RC QP on this id (`rdma_create_qp`): the caps are written back with what
    /// the device granted. With a non-null `srq` the QP takes its receives from it (no receive
    /// queue of its own: zero receive caps).
    pub fn create_qp(
        &mut self,
        pd: *mut sys::ibv_pd,
        send_cq: *mut sys::ibv_cq,
        recv_cq: *mut sys::ibv_cq,
        srq: *mut sys::ibv_srq,
        cap: &mut sys::ibv_qp_cap,
    ) -> Result<()> {
        if !srq.is_null() {
            cap.max_recv_wr = 0;
            cap.max_recv_sge = 0;
        }
        let mut attr = sys::ibv_qp_init_attr {
            send_cq,
            recv_cq,
            srq,
            cap: *cap,
            qp_type: sys::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 0,
            ..Default::default()
        };
        // SAFETY: id, PD, CQs and SRQ (if any) are live and of the id's device (checked by the
        // caller).
        if unsafe { sys::rdma_create_qp(self.id, pd, &mut attr) } != 0 {
            return Err(errno_err("rdma_create_qp"));
        }
        self.has_qp = true;
        *cap = attr.cap;
        Ok(())
    }

    pub fn qp(&self) -> *mut sys::ibv_qp {
        // SAFETY: the id is live; `qp` was set by rdma_create_qp.
        unsafe { (*self.id).qp }
    }

    /// `rdma_reject` with `data`.
    pub fn reject(&self, data: &[u8]) -> Result<()> {
        // SAFETY: the id is live; `data` is valid for the call (length checked by callers).
        let rc = unsafe { sys::rdma_reject(self.id, data.as_ptr().cast(), data.len() as u8) };
        if rc != 0 {
            return Err(errno_err("rdma_reject"));
        }
        Ok(())
    }

    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: the id is live.
        if unsafe { sys::rdma_disconnect(self.id) } != 0 {
            return Err(errno_err("rdma_disconnect"));
        }
        Ok(())
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if self.has_qp {
            // SAFETY: the QP was created on this id and is destroyed once; the Qp that used
            // it is being dropped (it owns this CmId).
            unsafe { sys::rdma_destroy_qp(self.id) };
        }
        // SAFETY: the id is live and destroyed once; all its events were acknowledged.
        let rc = unsafe { sys::rdma_destroy_id(self.id) };
        if rc != 0 {
            tracing::error!(
                error = %errno_err("rdma_destroy_id"),
                "leaking an RDMA CM id: rdma_destroy_id failed"
            );
        }
    }
}

/// A sockaddr_in / sockaddr_in6 for librdmacm calls.
struct SockAddr(libc::sockaddr_storage);

impl From<SocketAddr> for SockAddr {
    fn from(addr: SocketAddr) -> Self {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*a.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                unsafe { std::ptr::write(std::ptr::addr_of_mut!(ss).cast(), sin) };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                unsafe { std::ptr::write(std::ptr::addr_of_mut!(ss).cast(), sin6) };
            }
        }
        SockAddr(ss)
    }
}

impl SockAddr {
    fn as_mut_ptr(&mut self) -> *mut sys::sockaddr {
        std::ptr::addr_of_mut!(self.0).cast()
    }
}

/// A bindgen sockaddr_storage -> SocketAddr (None for other families or unset).
fn sockaddr_to_std(ss: &sys::sockaddr_storage) -> Option<SocketAddr> {
    let p: *const sys::sockaddr_storage = ss;
    // SAFETY: sockaddr_storage starts with the family field, like every sockaddr.
    let family = unsafe { (*p.cast::<libc::sockaddr>()).sa_family } as i32;
    match family {
        libc::AF_INET => {
            // SAFETY: the family says it holds a sockaddr_in, and the storage is big enough.
            let sin = unsafe { &*p.cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(sin.sin_port)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: as above for sockaddr_in6.
            let sin6 = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(
                SocketAddrV6::new(
                    ip,
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )
                .into(),
            )
        }
        _ => None,
    }
}

fn timeout_ms(t: Duration) -> i32 {
    t.as_millis().clamp(1, i32::MAX as u128) as i32
}

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

/// `rdma_connect` / `rdma_accept` result check.
pub(crate) fn cm_call(op: &'static str, rc: i32) -> Result<()> {
    if rc != 0 {
        let e = errno();
        return Err(rc_err(op, if e != 0 { e } else { rc }));
    }
    Ok(())
}
