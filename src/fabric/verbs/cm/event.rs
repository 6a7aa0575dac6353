//! CM event channels and the events read from them.
//!
//! Every CM id owns one channel, so each connection's events (ESTABLISHED, DISCONNECTED) reach
//! only its own QP. Events are copied and acknowledged at once (`rdma_destroy_id` waits for
//! unacknowledged events).

use std::os::fd::RawFd;
use std::time::Instant;

use super::ev;
use crate::fabric::verbs::{errno, errno_err, fd, sys};
use crate::fabric::{FabricError, Result};

/// An event channel (one per id); destroyed after its id.
pub(super) struct EventChannel(pub(super) *mut sys::rdma_event_channel);

impl EventChannel {
    pub(super) fn new() -> Result<EventChannel> {
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

    pub(super) fn fd(&self) -> RawFd {
        // SAFETY: the channel is live while `self` is; fd is immutable.
        unsafe { (*self.0).fd }
    }

    /// The next event, copied and acknowledged; `None` when `deadline` passes.
    pub(super) fn next(&self, deadline: Option<Instant>) -> Result<Option<Event>> {
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
