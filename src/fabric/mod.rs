//! The fabric layer: a safe, verbs-shaped RDMA API with two providers chosen at run time.
//!
//! - [`ProviderKind::Verbs`]: libibverbs and librdmacm (`fabric::verbs`), for real RNICs and
//!   for Soft-RoCE (`rdma_rxe`) / siw in the kernel.
//! - [`ProviderKind::Soft`]: a userspace RNIC over TCP (`fabric::soft`) with the same reliable
//!   connected (RC) semantics, for machines without RDMA.
//!
//! The target and the initiator use this module and nothing below it.
//!
//! # Objects and lifetimes
//! ```text
//! Device ──┬── Pd ──┬── Mr (owns its MemBuf)      children hold an Arc of their parent,
//!          │        └── Mw (type 2)               so teardown order is right by construction
//!          ├── Cq  (shared by many QPs; a QP keeps its CQs alive)
//!          ├── Srq (of a Pd; shared by many QPs of that Pd; a QP keeps its SRQ alive)
//!          └── Listener ── ConnRequest ── Qp      (passive side)
//! resolve(addr) ── Resolved ── connect ── Qp      (active side)
//! ```
//!
//! # Ownership of registered memory
//! Work requests name memory by `(addr, length, lkey)` exactly as verbs do. A memory region
//! owns its memory (a [`MemBuf`]) and deregisters it before unmapping it, so a work request that
//! outlives its region fails with a protection error instead of touching freed memory. Memory
//! the caller owns can be registered with the `unsafe` [`Pd::register_raw`], whose `# Safety`
//! section states the rule.
//!
//! # Completion semantics
//! Work requests of one queue complete in the order they were posted. A send WR without
//! [`SendFlags::SIGNALED`] produces a completion only if it fails. After any error completion
//! the QP is in the error state: every outstanding and later-posted WR completes with
//! [`WcStatus::WrFlushErr`]. Posting to a QP in the error state succeeds (the WR then
//! completes with `WrFlushErr`); it is not a post-time error. A `SEND_WITH_INV` completes with
//! opcode [`WcOpcode::Send`], as in verbs.
//!
//! # Shared receive queues
//! A QP created with [`QpInit::srq`] takes its receives from that [`Srq`] instead of a queue of
//! its own ([`Qp::post_recv`] is refused). The completion goes to the receiving QP's receive
//! CQ with that QP's [`Wc::qp_num`] and the SRQ work request's `wr_id`. An SRQ's work requests
//! may be consumed in any order (hardware does), and an empty SRQ makes the sender retry after
//! an RNR NAK, as an empty receive queue does. A QP entering the error state flushes only the
//! SRQ work request it was filling; the others stay posted for the other QPs.
//!
//! A memory region is deregistered when its [`Mr`] is dropped; a failed [`Qp::accept`] (bad
//! private data length) leaves the request acceptable again.

pub mod error;
pub mod membuf;
pub mod soft;
pub mod types;
pub mod verbs;

use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::time::Duration;

pub use error::{FabricError, Result};
pub use membuf::{memlock_limit, MemBuf, MemBufOptions};
pub use types::*;

/// Send WRs this thread posts while the guard lives are transmitted together when it drops,
/// instead of one by one. A worker that answers many requests in one pass of its loop holds
/// one for the pass: the soft provider then writes each QP's frames with one `sendmsg` (a
/// post otherwise writes its frame at once, from the posting thread). The verbs provider
/// rings its doorbell per post either way, so the guard changes nothing there.
///
/// Drop the guard before the thread sleeps or waits for completions of what it posted:
/// until then those WRs have not left. Guards nest; the outermost one transmits.
pub struct SendBatch {
    /// Tied to the thread whose posts it holds back.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl SendBatch {
    pub fn begin() -> SendBatch {
        soft::batch_begin();
        SendBatch {
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for SendBatch {
    fn drop(&mut self) {
        soft::batch_end();
    }
}

/// Dispatches a method call to the provider behind a wrapper enum.
macro_rules! dispatch {
    ($self:expr, $inner:ident => $body:expr) => {
        match $self {
            Inner::Soft($inner) => $body,
            Inner::Verbs($inner) => $body,
        }
    };
}

macro_rules! wrapper {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        pub struct $name(Inner<soft::$name, verbs::$name>);

        impl $name {
            /// The soft provider's object, if this is one.
            #[allow(dead_code)]
            pub(crate) fn as_soft(&self) -> Option<&soft::$name> {
                match &self.0 {
                    Inner::Soft(x) => Some(x),
                    Inner::Verbs(_) => None,
                }
            }

            /// The verbs provider's object, if this is one.
            #[allow(dead_code)]
            pub(crate) fn as_verbs(&self) -> Option<&verbs::$name> {
                match &self.0 {
                    Inner::Verbs(x) => Some(x),
                    Inner::Soft(_) => None,
                }
            }

            /// Which provider this object belongs to.
            pub fn provider(&self) -> ProviderKind {
                match &self.0 {
                    Inner::Soft(_) => ProviderKind::Soft,
                    Inner::Verbs(_) => ProviderKind::Verbs,
                }
            }
        }

        impl From<soft::$name> for $name {
            fn from(x: soft::$name) -> Self {
                $name(Inner::Soft(x))
            }
        }

        impl From<verbs::$name> for $name {
            fn from(x: verbs::$name) -> Self {
                $name(Inner::Verbs(x))
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self.provider())
            }
        }
    };
}

#[derive(Clone)]
enum Inner<S, V> {
    Soft(S),
    Verbs(V),
}

wrapper! {
    /// An RDMA device (`ibv_context`). Cheap to clone.
    #[derive(Clone)]
    Device
}
wrapper! {
    /// A protection domain. Memory regions, windows and QPs of one PD may be used together;
    /// a remote access through a QP of another PD fails with REM_ACCESS_ERR.
    #[derive(Clone)]
    Pd
}
wrapper! {
    /// A registered memory region. Owns its memory (or, from [`Pd::register_raw`], borrows it
    /// under the caller's promise); deregisters on drop.
    Mr
}
wrapper! {
    /// A type-2 memory window: a remote key over a sub-range of a memory region with its own
    /// access rights, bound and invalidated through work requests on one QP.
    Mw
}
wrapper! {
    /// A completion queue. Cheap to clone; QPs keep theirs alive.
    #[derive(Clone)]
    Cq
}
wrapper! {
    /// A reliable-connected queue pair with its connection.
    Qp
}
wrapper! {
    /// A shared receive queue: receive work requests that any QP created with it
    /// ([`QpInit::srq`]) consumes. Cheap to clone; QPs keep theirs alive.
    #[derive(Clone)]
    Srq
}
wrapper! {
    /// A passive connection endpoint listening on an address.
    Listener
}
wrapper! {
    /// An incoming connection request, to accept (via [`ConnRequest::create_qp`] then
    /// [`Qp::accept`]) or [`ConnRequest::reject`]. Dropping it rejects it without data.
    ConnRequest
}
wrapper! {
    /// An address resolved to a local device, ready to [`Resolved::connect`].
    Resolved
}

impl Device {
    /// Names of the devices this provider has.
    pub fn list(kind: ProviderKind) -> Result<Vec<String>> {
        match kind {
            ProviderKind::Soft => soft::Device::list(),
            ProviderKind::Verbs => verbs::Device::list(),
        }
    }

    /// Opens a device by name, or the first one when `name` is `None`.
    pub fn open(kind: ProviderKind, name: Option<&str>) -> Result<Device> {
        Ok(match kind {
            ProviderKind::Soft => soft::Device::open(name)?.into(),
            ProviderKind::Verbs => verbs::Device::open(name)?.into(),
        })
    }

    /// Opens the device that owns local address `addr` (what a listener on `addr` will use).
    pub fn open_for_addr(kind: ProviderKind, addr: IpAddr) -> Result<Device> {
        Ok(match kind {
            ProviderKind::Soft => soft::Device::open_for_addr(addr)?.into(),
            ProviderKind::Verbs => verbs::Device::open_for_addr(addr)?.into(),
        })
    }

    /// Device name (`rxe0`, `mlx5_0`, `soft0`).
    pub fn name(&self) -> String {
        dispatch!(&self.0, d => d.name())
    }

    /// Capabilities and limits.
    pub fn attr(&self) -> Result<DeviceAttr> {
        dispatch!(&self.0, d => d.attr())
    }

    pub fn alloc_pd(&self) -> Result<Pd> {
        dispatch!(&self.0, d => d.alloc_pd().map(Pd::from))
    }

    /// A completion queue with room for at least `depth` completions.
    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        dispatch!(&self.0, d => d.create_cq(depth).map(Cq::from))
    }

    /// Listens on `addr` (port 0 picks a free port: see [`Listener::local_addr`]).
    pub fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        dispatch!(&self.0, d => d.listen(addr, backlog).map(Listener::from))
    }
}

/// Resolves `addr` to a route and local device (RDMA CM: resolve_addr + resolve_route), the
/// first step of an active connection. Create the PD, CQs and buffers on
/// [`Resolved::device`], then [`Resolved::connect`].
pub fn resolve(kind: ProviderKind, addr: SocketAddr, timeout: Duration) -> Result<Resolved> {
    Ok(match kind {
        ProviderKind::Soft => soft::Resolved::resolve(addr, timeout)?.into(),
        ProviderKind::Verbs => verbs::Resolved::resolve(addr, timeout)?.into(),
    })
}

impl Pd {
    /// Registers `buf` with `access`; the region owns the buffer from now on.
    pub fn register(&self, buf: MemBuf, access: Access) -> Result<Mr> {
        dispatch!(&self.0, p => p.register(buf, access).map(Mr::from))
    }

    /// Registers `len` bytes at `addr` that the caller owns.
    ///
    /// # Safety
    /// - `addr..addr + len` is valid, writable memory for as long as the returned [`Mr`] lives,
    ///   and for as long as any work request naming it may still execute (until its completion,
    ///   or the QP's flush, has been polled).
    /// - While the region lives, the caller accesses that memory only in ways that tolerate
    ///   concurrent DMA by the device (no references held across a transfer into it).
    pub unsafe fn register_raw(&self, addr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        // SAFETY: the caller upholds the contract above, which the provider needs verbatim.
        dispatch!(&self.0, p => unsafe { p.register_raw(addr, len, access) }.map(Mr::from))
    }

    /// Creates a shared receive queue of this PD (`ibv_create_srq`, no limit event). Fails
    /// with [`FabricError::Unsupported`] on a device without SRQs (`DeviceAttr::max_srq` 0).
    pub fn create_srq(&self, init: SrqInit) -> Result<Srq> {
        dispatch!(&self.0, p => p.create_srq(init).map(Srq::from))
    }

    /// Allocates a type-2 memory window; [`FabricError::Unsupported`] if the device has none
    /// (callers fall back to a per-connection memory region).
    pub fn alloc_mw(&self) -> Result<Mw> {
        dispatch!(&self.0, p => p.alloc_mw().map(Mw::from))
    }
}

impl Mr {
    /// Virtual address of the first byte (what SGEs and remote addresses name).
    pub fn addr(&self) -> u64 {
        dispatch!(&self.0, m => m.addr())
    }

    pub fn len(&self) -> usize {
        dispatch!(&self.0, m => m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn lkey(&self) -> u32 {
        dispatch!(&self.0, m => m.lkey())
    }

    /// Remote key (meaningful only with REMOTE_READ or REMOTE_WRITE access).
    pub fn rkey(&self) -> u32 {
        dispatch!(&self.0, m => m.rkey())
    }

    pub fn access(&self) -> Access {
        dispatch!(&self.0, m => m.access())
    }

    /// Pointer to the first byte, for I/O engines that fill the region (io_uring).
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr() as *mut u8
    }

    /// An SGE over `len` bytes at `offset`. Panics if the range is outside the region (a
    /// caller bug: offsets are computed by the caller, never taken from a peer).
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        let end = offset.checked_add(len as usize);
        assert!(
            end.is_some_and(|e| e <= self.len()),
            "sge {offset}+{len} outside memory region of {} bytes",
            self.len()
        );
        Sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey: self.lkey(),
        }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(FabricError::InvalidArgument {
                what: format!(
                    "range {offset}+{len} outside memory region of {} bytes",
                    self.len()
                ),
            }),
        }
    }

    /// Copies `dst.len()` bytes from the region at `offset` into `dst`.
    ///
    /// Call it only when no work request is writing that range (after its completion).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        // SAFETY: the range is inside the live region (checked); `dst` cannot overlap it as it
        // is an exclusive borrow of ordinary memory the region does not hand out.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// Call it only when no work request is reading or writing that range.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        // SAFETY: the range is inside the live region (checked); the region's memory is only
        // ever accessed through raw pointers, so no Rust reference aliases it.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(offset), src.len())
        };
        Ok(())
    }
}

impl Mw {
    /// The window's current remote key (changes at every bind).
    pub fn rkey(&self) -> u32 {
        dispatch!(&self.0, w => w.rkey())
    }
}

impl Cq {
    /// Polls up to `wcs.len()` completions; returns how many were written. Never blocks.
    pub fn poll(&self, wcs: &mut [Wc]) -> Result<usize> {
        dispatch!(&self.0, c => c.poll(wcs))
    }

    /// Arms the CQ: the next completion makes [`Cq::fd`] readable and ends a [`Cq::wait`].
    ///
    /// The race-free blocking pattern: poll until empty; `arm`; poll once more (a completion
    /// may have arrived before the arm); if still empty, `wait`.
    pub fn arm(&self) -> Result<()> {
        dispatch!(&self.0, c => c.arm())
    }

    /// Waits for the event of an armed CQ and acknowledges it. Returns false on timeout.
    /// `None` waits forever.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        dispatch!(&self.0, c => c.wait(timeout))
    }

    /// [`Cq::wait`], except that on the soft provider this thread does not parse arriving
    /// frames itself: the QPs' receive threads do, in parallel with it. For a waiter whose
    /// completions bring large payloads (reads of 64 KiB and more), which a receive thread
    /// copies while the application goes on.
    pub fn wait_passive(&self, timeout: Option<Duration>) -> Result<bool> {
        dispatch!(&self.0, c => c.wait_passive(timeout))
    }

    /// Waits until the armed CQ has its event or `other` (an eventfd of the caller's: a ring's,
    /// a message queue's) is readable, or `timeout` passes. The CQ's event is not taken: call
    /// [`Cq::wait`] with a zero timeout. `other` must stay open as long as the CQ lives, and
    /// one thread at a time waits on a CQ with other descriptors (the soft provider keeps
    /// `other` in the CQ's epoll set).
    ///
    /// Prefer this to polling [`Cq::fd`] together with `other`: on the soft provider the
    /// waiting thread parses arriving frames itself, instead of being woken by a provider
    /// thread that parsed them.
    pub fn wait_with(&self, other: RawFd, timeout: Duration) -> Result<CqReady> {
        dispatch!(&self.0, c => c.wait_with(other, timeout))
    }

    /// A file descriptor that becomes readable when an armed CQ gets a completion (for epoll);
    /// call [`Cq::wait`] with a zero timeout to consume the event.
    pub fn fd(&self) -> RawFd {
        dispatch!(&self.0, c => c.fd())
    }
}

/// What [`Cq::wait_with`] found ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqReady {
    /// The CQ's event (on the soft provider also: a completion was added while this thread
    /// waited, possibly by frames it parsed itself).
    pub cq: bool,
    /// The caller's other descriptor.
    pub other: bool,
}

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
    /// and room are checked at post time ([`FabricError::BadWr`], [`FabricError::QueueFull`]).
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        dispatch!(&self.0, s => s.post_recv(wrs))
    }

    /// What the device gave (at least what was asked for). Do not count on a device refusing
    /// more work requests than `max_wr`: some accept a few more.
    pub fn caps(&self) -> SrqCaps {
        dispatch!(&self.0, s => s.caps())
    }
}

/// An established active connection.
#[derive(Debug)]
pub struct Connected {
    pub qp: Qp,
    /// The peer's accept private data.
    pub private_data: Vec<u8>,
}

impl Qp {
    /// QP number (appears in [`Wc::qp_num`]).
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
    /// [`FabricError::BadWr`] on a QP created with an SRQ: post to the SRQ.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        dispatch!(&self.0, q => q.post_recv(wrs))
    }

    /// Passive side: accepts the connection this QP was created for, with `param` (private
    /// data at most [`MAX_ACCEPT_PRIVATE_DATA`] bytes). Post receives before accepting. The
    /// QP can be used at once; [`CmEvent::Established`] follows.
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

    /// Rejects with `private_data` (at most [`MAX_REJECT_PRIVATE_DATA`] bytes).
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
