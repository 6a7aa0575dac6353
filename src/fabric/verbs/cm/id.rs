//! The CM id: one RC id on its own event channel, from creation (or adoption of an accepted
//! child) through bind, QP creation, reject and disconnect to destruction.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::time::Instant;

use super::event::{Event, EventChannel};
use super::sockaddr::{sockaddr_to_std, SockAddr};
use crate::fabric::verbs::{errno_err, sys};
use crate::fabric::Result;

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
    pub(super) unsafe fn adopt(id: *mut sys::rdma_cm_id) -> Result<CmId> {
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
