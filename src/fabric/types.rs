//! Plain data types of the fabric API: flags, scatter/gather entries, work requests, work
//! completions, queue-pair capabilities, connection parameters and device attributes.
//!
//! They mirror libibverbs (`ibv_send_wr`, `ibv_wc`, `ibv_qp_cap`, ...) and librdmacm
//! (`rdma_conn_param`) closely enough that the verbs provider converts them field by field.

use std::fmt;
use std::ops::{BitOr, BitOrAssign};

use super::{Mr, Mw};

/// Largest private data a connect request may carry (RDMA CM over IB/RoCE: 92 - 36 bytes).
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Largest private data an accept may carry (RDMA CM: REP private data).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;
/// Largest private data a reject may carry (RDMA CM: REJ private data).
pub const MAX_REJECT_PRIVATE_DATA: usize = 148;

macro_rules! flag_set {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $flag:ident = $bit:expr,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            $($(#[$fm])* pub const $flag: $name = $name($bit);)*
            /// No flag set.
            pub const fn empty() -> Self { $name(0) }
            /// The raw bits (the same values as the libibverbs enum).
            pub const fn bits(self) -> u32 { self.0 }
            /// From raw bits; unknown bits are kept.
            pub const fn from_bits(bits: u32) -> Self { $name(bits) }
            /// Whether every flag of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool { self.0 & other.0 == other.0 }
        }
        impl BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self { $name(self.0 | rhs.0) }
        }
        impl BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) { self.0 |= rhs.0 }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut first = true;
                write!(f, "{}(", stringify!($name))?;
                $(if self.contains($name::$flag) && $bit != 0 {
                    if !first { write!(f, "|")?; }
                    first = false;
                    write!(f, stringify!($flag))?;
                })*
                let _ = first;
                write!(f, ")")
            }
        }
    };
}

flag_set! {
    /// Access rights of a memory region or memory window (values of `ibv_access_flags`).
    Access {
        /// The local HCA may write into it (receives, RDMA READ responses).
        LOCAL_WRITE = 1,
        /// A peer may RDMA WRITE into it.
        REMOTE_WRITE = 2,
        /// A peer may RDMA READ from it.
        REMOTE_READ = 4,
        /// Memory windows may be bound over it (memory regions only).
        MW_BIND = 16,
    }
}

flag_set! {
    /// Flags of a send work request (values of `ibv_send_flags`).
    SendFlags {
        /// Wait for earlier RDMA READs on this QP to complete before starting this WR.
        FENCE = 1,
        /// Generate a completion for this WR (otherwise only on error).
        SIGNALED = 2,
        /// Set the solicited-event bit (wakes an armed solicited-only CQ at the peer).
        SOLICITED = 4,
        /// Copy the payload at post time (the buffers may be reused as soon as the post
        /// returns). Unlike raw verbs, the SGEs must still name registered memory of the QP's
        /// PD, checked at post time (`BadWr` otherwise): that keeps `post_send` safe.
        INLINE = 8,
    }
}

/// One scatter/gather entry: `length` bytes at virtual address `addr` inside the memory region
/// whose local key is `lkey`. The provider checks the range and key when it executes the WR.
///
/// `repr(C)` with the field order of `struct ibv_sge`, so the verbs provider hands a slice of
/// them to `ibv_post_send` as it is (no copy on the hot path).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// What a send work request does.
#[derive(Clone, Copy, Debug)]
pub enum WrOp<'a> {
    /// Consume one receive WR at the peer and deliver the gathered bytes into it.
    Send,
    /// As `Send`, and invalidate `rkey` at the peer (its receive completion reports it).
    SendWithInv { rkey: u32 },
    /// Write the gathered bytes to the peer's memory at `remote_addr` under `rkey`.
    RdmaWrite { remote_addr: u64, rkey: u32 },
    /// Read from the peer's memory at `remote_addr` under `rkey` into the scatter list.
    RdmaRead { remote_addr: u64, rkey: u32 },
    /// Bind the type-2 window `mw` over `[addr, addr + length)` of `mr` with `access`
    /// (REMOTE_READ and/or REMOTE_WRITE). The window gets a new rkey at post time, readable
    /// with [`Mw::rkey`]; it is usable once the bind completes, and only through this QP.
    /// `sgl` must be empty.
    BindMw {
        mw: &'a Mw,
        mr: &'a Mr,
        addr: u64,
        length: u64,
        access: Access,
    },
    /// Invalidate the memory window whose current rkey is `rkey`. `sgl` must be empty.
    LocalInv { rkey: u32 },
}

/// A send work request. Chains are posted as slices: `qp.post_send(&[w1, w2, resp])`.
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    pub op: WrOp<'a>,
    pub sgl: &'a [Sge],
    pub flags: SendFlags,
}

/// A receive work request.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sgl: &'a [Sge],
}

/// Completion status, mirroring `ibv_wc_status` (same numeric values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcStatus {
    Success,
    LocLenErr,
    LocQpOpErr,
    LocEecOpErr,
    LocProtErr,
    WrFlushErr,
    MwBindErr,
    BadRespErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
    LocRddViolErr,
    RemInvRdReqErr,
    RemAbortErr,
    InvEecnErr,
    InvEecStateErr,
    FatalErr,
    RespTimeoutErr,
    GeneralErr,
    /// A value this build does not know.
    Other(u32),
}

impl WcStatus {
    const TABLE: [WcStatus; 22] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
    ];

    /// From the `ibv_wc_status` value.
    pub fn from_raw(raw: u32) -> Self {
        Self::TABLE
            .get(raw as usize)
            .copied()
            .unwrap_or(WcStatus::Other(raw))
    }

    /// The `ibv_wc_status` value.
    pub fn to_raw(self) -> u32 {
        match self {
            WcStatus::Other(v) => v,
            s => Self::TABLE.iter().position(|t| *t == s).unwrap_or(0) as u32,
        }
    }

    pub fn is_success(self) -> bool {
        self == WcStatus::Success
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "work request flushed (QP in error state)",
            WcStatus::MwBindErr => "memory window bind error",
            WcStatus::BadRespErr => "bad response",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded (peer posted no receive)",
            WcStatus::LocRddViolErr => "local RDD violation",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "remote aborted",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout",
            WcStatus::GeneralErr => "general error",
            WcStatus::Other(v) => return write!(f, "unknown completion status {v}"),
        };
        f.write_str(s)
    }
}

/// What a completed work request was. Only meaningful when the status is `Success`
/// (libibverbs leaves it undefined for error completions; providers report their best guess).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    BindMw,
    LocalInv,
    Recv,
    Other(u32),
}

/// A work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Bytes received (receive completions); RDMA READ completions may report the length read.
    pub byte_len: u32,
    /// The QP the work request was posted on (lets one CQ serve many QPs). For a receive
    /// taken from a shared receive queue: the QP that received the message (`wr_id` is then
    /// the SRQ work request's).
    pub qp_num: u32,
    /// For a receive completed by a peer's SEND_WITH_INV: the rkey it invalidated.
    pub invalidated_rkey: Option<u32>,
    /// Provider-specific error detail (`ibv_wc.vendor_err`), 0 if none.
    pub vendor_err: u32,
}

impl Default for Wc {
    fn default() -> Self {
        Wc {
            wr_id: 0,
            status: WcStatus::GeneralErr,
            opcode: WcOpcode::Other(0),
            byte_len: 0,
            qp_num: 0,
            invalidated_rkey: None,
            vendor_err: 0,
        }
    }
}

/// Queue-pair capacities, requested at creation (`ibv_qp_cap`); the QP reports what it got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 2,
            max_inline_data: 64,
        }
    }
}

/// What a shared receive queue is created with (`ibv_srq_init_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqInit {
    /// Receive work requests the queue holds.
    pub max_wr: u32,
    /// SGEs per receive work request.
    pub max_sge: u32,
}

/// What a shared receive queue got from the device (at least what was asked for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqCaps {
    pub max_wr: u32,
    pub max_sge: u32,
}

/// Connection parameters (`rdma_conn_param`) for connect and accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnParam {
    /// At most [`MAX_CONNECT_PRIVATE_DATA`] on connect, [`MAX_ACCEPT_PRIVATE_DATA`] on accept.
    pub private_data: Vec<u8>,
    /// RDMA READs the peer may have outstanding against us.
    pub responder_resources: u8,
    /// RDMA READs we may have outstanding against the peer.
    pub initiator_depth: u8,
    /// Transport retries before RETRY_EXC_ERR (0..=7).
    pub retry_count: u8,
    /// RNR retries before RNR_RETRY_EXC_ERR (0..=7; 7 means retry forever). RDMA CM carries
    /// this value in the connection exchange and its effect on which side's SENDs differs
    /// between CM versions, so set the same value on connect and on accept (NVMe-oF uses 7).
    pub rnr_retry_count: u8,
    /// Accept only: the responder's RNR NAK timer (IB encoding, 0..=31: 0 is 655.36 ms, 1 is
    /// 0.01 ms, 12 is 0.64 ms, 31 is 491.52 ms), set on the QP right after the accept. `None`
    /// keeps what the connection manager programmed (0 on Linux: 655 ms per RNR retry of the
    /// peer). The soft provider retries after a fixed 1 ms and ignores it.
    pub min_rnr_timer: Option<u8>,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 7,
            min_rnr_timer: None,
        }
    }
}

/// Attributes of a device (`ibv_device_attr` plus port state), as far as rdmablk uses them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    pub name: String,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_cqe: u32,
    /// Completion queues the device can create.
    pub max_cq: u32,
    pub max_mr: u32,
    pub max_mr_size: u64,
    /// Memory windows the device can allocate; 0 when it has none.
    pub max_mw: u32,
    /// RDMA READs a QP can serve as responder.
    pub max_qp_rd_atom: u32,
    /// RDMA READs a QP can have outstanding as requester.
    pub max_qp_init_rd_atom: u32,
    /// Type-2 memory windows are supported (bind through a QP, invalidate by LOCAL_INV or
    /// a peer's SEND_WITH_INV).
    pub mw_type2: bool,
    /// IBV_DEVICE_MEM_MGT_EXTENSIONS: fast registration, local/remote invalidation.
    pub mem_mgt_extensions: bool,
    /// The port used is ACTIVE.
    pub port_active: bool,
    /// Shared receive queues the device can create; 0 when it has none.
    pub max_srq: u32,
    /// Work requests one shared receive queue can hold.
    pub max_srq_wr: u32,
    /// SGEs per work request of a shared receive queue.
    pub max_srq_sge: u32,
}

/// A connection-management event of a connected or accepted QP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// The connection is up (passive side: the peer's RTU arrived after our accept).
    Established,
    /// The peer disconnected, or our own disconnect completed. The QP is in the error state
    /// and flushes its outstanding work requests.
    Disconnected,
    /// The connection failed; the text says why.
    Error(String),
}

/// Which provider a device belongs to. Chosen at run time (config, URL scheme).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// libibverbs / librdmacm: a real RNIC, or Soft-RoCE / siw in the kernel.
    Verbs,
    /// rdmablk's userspace RC emulation over TCP (`fabric::soft`).
    Soft,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Verbs => "verbs",
            ProviderKind::Soft => "soft",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ProviderKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "verbs" | "rdma" => Ok(ProviderKind::Verbs),
            "soft" => Ok(ProviderKind::Soft),
            other => Err(format!(
                "unknown fabric provider {other:?} (expected \"verbs\" or \"soft\")"
            )),
        }
    }
}
