//! Completion queues with a completion channel: `poll` never blocks; `arm` + `wait` (or epoll
//! on `fd`) sleep until the next completion.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use super::device::Device;
use super::{errno, errno_err, fd, rc_err, sys};
use crate::fabric::{CqReady, FabricError, Result, Wc, WcOpcode, WcStatus};

/// Completions converted per `ibv_poll_cq` call (a stack array: polling does not allocate).
const POLL_BATCH: usize = 32;

/// A completion queue. Cheap to clone; QPs hold theirs.
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

struct CqInner {
    cq: *mut sys::ibv_cq,
    channel: *mut sys::ibv_comp_channel,
    device: Device,
    /// The wc_flags bit that means "the SEND_WITH_INV invalidated an rkey" on this device.
    with_inv_flag: u32,
}

// SAFETY: ibv_poll_cq, ibv_req_notify_cq and the channel calls are thread-safe in libibverbs
// providers; the pointers are destroyed once, in Drop, when no clone is left.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: the last owner: every QP using this CQ holds a clone, so none is left; all
        // channel events were acknowledged in `wait`, so ibv_destroy_cq does not block.
        let rc = unsafe { sys::ibv_destroy_cq(self.cq) };
        if rc != 0 {
            tracing::error!(
                device = %self.device.name(),
                error = %rc_err("ibv_destroy_cq", rc),
                "leaking a completion queue and its channel: ibv_destroy_cq failed"
            );
            return;
        }
        // SAFETY: the channel's only CQ is gone.
        let rc = unsafe { sys::ibv_destroy_comp_channel(self.channel) };
        if rc != 0 {
            tracing::error!(
                error = %rc_err("ibv_destroy_comp_channel", rc),
                "leaking a completion channel: ibv_destroy_comp_channel failed"
            );
        }
    }
}

impl Cq {
    pub(crate) fn new(device: &Device, depth: u32) -> Result<Cq> {
        let max = device.raw_attr().max_cqe.max(1) as u32;
        if depth == 0 || depth > max {
            return Err(FabricError::InvalidArgument {
                what: format!(
                    "completion queue depth {depth} (device {} allows 1..={max})",
                    device.name()
                ),
            });
        }
        // SAFETY: the context is live while `device` is.
        let channel = unsafe { sys::ibv_create_comp_channel(device.ctx()) };
        if channel.is_null() {
            return Err(errno_err("ibv_create_comp_channel"));
        }
        // SAFETY: `channel` was just created and is not shared.
        let chan_fd = unsafe { (*channel).fd };
        let cq = match fd::set_nonblocking(chan_fd, "fcntl(completion channel, O_NONBLOCK)") {
            // SAFETY: context and channel are live; no user context pointer, vector 0.
            Ok(()) => unsafe {
                sys::ibv_create_cq(device.ctx(), depth as i32, std::ptr::null_mut(), channel, 0)
            },
            Err(_) => std::ptr::null_mut(),
        };
        if cq.is_null() {
            let e = errno_err("ibv_create_cq");
            // SAFETY: the channel has no CQ and is destroyed once.
            unsafe { sys::ibv_destroy_comp_channel(channel) };
            return Err(e);
        }
        Ok(Cq {
            inner: Arc::new(CqInner {
                cq,
                channel,
                device: device.clone(),
                with_inv_flag: with_inv_flag(device),
            }),
        })
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_cq {
        self.inner.cq
    }

    pub(crate) fn device(&self) -> &Device {
        &self.inner.device
    }

    pub fn poll(&self, wcs: &mut [Wc]) -> Result<usize> {
        let mut raw = [sys::ibv_wc::default(); POLL_BATCH];
        let mut done = 0;
        while done < wcs.len() {
            let want = (wcs.len() - done).min(POLL_BATCH);
            // SAFETY: the CQ is live; `raw` has room for `want` entries.
            let n =
                unsafe { sys::rdmablk_shim_poll_cq(self.inner.cq, want as i32, raw.as_mut_ptr()) };
            if n < 0 {
                return Err(rc_err("ibv_poll_cq", n));
            }
            let n = n as usize;
            for (dst, src) in wcs[done..done + n].iter_mut().zip(&raw[..n]) {
                *dst = convert_wc(src, self.inner.with_inv_flag);
            }
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    pub fn arm(&self) -> Result<()> {
        // SAFETY: the CQ is live; 0 = every completion, not only solicited ones.
        let rc = unsafe { sys::rdmablk_shim_req_notify_cq(self.inner.cq, 0) };
        if rc != 0 {
            return Err(rc_err("ibv_req_notify_cq", rc));
        }
        Ok(())
    }

    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = fd::deadline(timeout);
        loop {
            if !fd::wait_readable(self.fd(), deadline, "poll(completion channel)")? {
                return Ok(false);
            }
            let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
            let mut ctx: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: the channel is live; out-parameters are valid. The fd is non-blocking,
            // so this returns -1/EAGAIN if another thread took the event first.
            let rc = unsafe { sys::ibv_get_cq_event(self.inner.channel, &mut cq, &mut ctx) };
            if rc != 0 {
                match errno() {
                    libc::EAGAIN | libc::EINTR => continue,
                    _ => return Err(errno_err("ibv_get_cq_event")),
                }
            }
            debug_assert_eq!(cq, self.inner.cq, "a completion channel serves one CQ");
            // SAFETY: `cq` is the CQ the event was for (ours); one event is acknowledged.
            unsafe { sys::ibv_ack_cq_events(cq, 1) };
            return Ok(true);
        }
    }

    pub fn wait_passive(&self, timeout: Option<Duration>) -> Result<bool> {
        self.wait(timeout)
    }

    pub fn wait_with(&self, other: RawFd, timeout: Duration) -> Result<CqReady> {
        let mut fds = [self.fd(), other].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a live array of two pollfds and its length is passed with it.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(CqReady::default());
            }
            return Err(FabricError::os("poll(completion channel)", e));
        }
        Ok(CqReady {
            cq: fds[0].revents != 0,
            other: fds[1].revents != 0,
        })
    }

    pub fn fd(&self) -> RawFd {
        // SAFETY: the channel is live while `self` is; fd is immutable after creation.
        unsafe { (*self.inner.channel).fd }
    }
}

/// Kernel `IB_WC_WITH_INVALIDATE` (include/rdma/ib_verbs.h): bit 2, where libibverbs has
/// IBV_WC_IP_CSUM_OK. Userspace's IBV_WC_WITH_INV is bit 3.
const KERNEL_WC_WITH_INVALIDATE: u32 = 1 << 2;

/// rxe's user CQ ring holds completions the kernel wrote with its own `ib_wc_flags`, and the
/// rxe provider copies them to `ibv_wc` unchanged: a receive that a SEND_WITH_INV invalidated
/// reports bit 2, not IBV_WC_WITH_INV (seen on Linux 6.1 + rdma-core 44). Everywhere else the
/// libibverbs value holds.
fn with_inv_flag(device: &Device) -> u32 {
    if device.is_rxe() {
        KERNEL_WC_WITH_INVALIDATE | sys::ibv_wc_flags::IBV_WC_WITH_INV
    } else {
        sys::ibv_wc_flags::IBV_WC_WITH_INV
    }
}

/// `ibv_wc` -> `Wc`.
fn convert_wc(w: &sys::ibv_wc, with_inv_flag: u32) -> Wc {
    use sys::ibv_wc_opcode as op;
    let opcode = match w.opcode {
        op::IBV_WC_SEND => WcOpcode::Send,
        op::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        op::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        op::IBV_WC_BIND_MW => WcOpcode::BindMw,
        op::IBV_WC_LOCAL_INV => WcOpcode::LocalInv,
        op::IBV_WC_RECV => WcOpcode::Recv,
        other => WcOpcode::Other(other),
    };
    let with_inv = w.opcode == op::IBV_WC_RECV && w.wc_flags & with_inv_flag != 0;
    tracing::trace!(wr_id = w.wr_id, wc_flags = w.wc_flags, "completion");
    Wc {
        wr_id: w.wr_id,
        status: WcStatus::from_raw(w.status),
        opcode,
        byte_len: w.byte_len,
        qp_num: w.qp_num,
        // SAFETY: both union members are plain u32s, so the read is always defined; with
        // IBV_WC_WITH_INV set it is the invalidated rkey.
        invalidated_rkey: with_inv.then_some(unsafe { w.__bindgen_anon_1.invalidated_rkey }),
        vendor_err: w.vendor_err,
    }
}
