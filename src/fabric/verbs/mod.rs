//! The verbs provider: libibverbs and librdmacm, for real RNICs and for Soft-RoCE (`rdma_rxe`).
//!
//! Every raw `ibv_*` / `rdma_*` call of rdmablk lives in this module tree. The types here are
//! what the public wrappers in `fabric` dispatch to; their documentation is there.
//!
//! # Modules
//! - [`device`]: device list, open (by name or by local address), attributes.
//! - [`pd`], [`mr`], [`mw`]: protection domain, memory regions (own their `MemBuf`), type-2
//!   memory windows.
//! - [`cq`]: completion queue with its completion channel.
//! - [`qp`]: the connected RC queue pair, posting, and its connection events.
//! - [`srq`]: shared receive queues.
//! - [`wr`]: converting `SendWr` / `RecvWr` slices into `ibv_send_wr` chains on the stack.
//! - [`cm`]: RDMA CM ids and event channels, listener, connect requests, active connect.
//! - [`fd`]: waiting on the channels' file descriptors.
//!
//! # Contexts come from librdmacm
//! Devices are opened through `rdma_get_devices`, not `ibv_open_device`: a QP made by
//! `rdma_create_qp` must use a PD of the *same* `ibv_context` as the CM id, and librdmacm has
//! its own context per device. Taking contexts from librdmacm means a PD from
//! [`Device::open`] works with the ids of a listener or an active connection on that device.
//! A [`Device`] holds librdmacm's reference (`rdma_get_devices` / `rdma_free_devices`).
//!
//! # Thread safety
//! libibverbs and librdmacm objects may be used from several threads at once: posting, polling
//! and the CM calls take the provider's own locks (rdma-core documents verbs as thread-safe).
//! The Rust types here are therefore `Send + Sync`; each `unsafe impl` names what it relies on.
//!
//! # Differences from the soft provider (inherent to RDMA CM over IB/RoCE)
//! - Private data arrives zero-padded to the CM maximum: a connect request carries 56 bytes,
//!   an accept 196, a reject 148, whatever length the peer sent (the CM messages carry no length).
//! - A connect to an address with no listener is reported as [`FabricError::Unreachable`] (the
//!   CM rejects it with reason 8, "invalid service ID"), not as a reject with private data.

pub mod cm;
pub mod cq;
pub mod device;
pub mod fd;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
pub mod srq;
pub mod sys;
pub mod wr;

#[cfg(test)]
mod tests;

pub use cm::{ConnRequest, Listener, Resolved};
pub use cq::Cq;
pub use device::Device;
pub use mr::Mr;
pub use mw::Mw;
pub use pd::Pd;
pub use qp::Qp;
pub use srq::Srq;

use std::io;

use crate::fabric::FabricError;

/// The error for a verbs call that returned NULL or -1 and set errno.
pub(crate) fn errno_err(op: &'static str) -> FabricError {
    FabricError::last_os(op)
}

/// The error for a verbs call that returned an errno value (positive or negative).
pub(crate) fn rc_err(op: &'static str, rc: i32) -> FabricError {
    FabricError::os(op, io::Error::from_raw_os_error(rc.abs()))
}

/// The current errno value.
pub(crate) fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
