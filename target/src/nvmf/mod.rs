//! The NVMe-oF target: the transport-neutral core (queues, requests, command sets,
//! controllers, subsystems, ports, workers) and, behind [`transport`], the transports that
//! carry it.
//!
//! ```text
//!  listener thread (per [[listener]], its      worker threads (target.worker_threads)
//!  transport's)                                ───────────────────────────────────────
//!  ───────────────────────────────────         own: a poll group per transport, the
//!  accept ─▶ transport checks                       namespace queues (io_uring)
//!         ─▶ carve a Parcel (arena)            poll groups ─▶ requests' state machines
//!         ─▶ hand to a worker (round robin) ──▶ poll backends ─▶ responses with data
//!                                              timers, connection events, teardown
//! ```
//!
//! - [`queue`]: one NVMe queue with its parcel, requests and teardown.
//! - [`request`]: the request state machine; [`request_flow`]: its transitions.
//! - [`commands`]: the dispatcher; [`commands::data_phase`]: a command's data;
//!   [`commands::fabrics`], [`commands::admin`], [`commands::io_commands`],
//!   [`commands::auth`]: the command sets; [`commands::discovery`]: the discovery controller
//!   and its log page.
//! - [`subsystems`]: [`subsystems::subsystem`]: NQNs, hosts, namespaces;
//!   [`subsystems::controller`]: controllers, keep-alive; [`subsystems::ana`],
//!   [`subsystems::ns_table`].
//! - [`runtime`]: [`runtime::port`]: the port table (the listeners that run, their addresses
//!   and ANA states); [`runtime::reload`], [`runtime::fence`], gateways.
//! - [`worker`]: the poll loop, and [`worker::ns_queues`]: its backend queues.
//! - [`transport`]: the seam, and [`transport::rdma`].
//! - [`Target`]: a running target (`target.rs`); [`Shared`]: what its threads share
//!   (`shared.rs`, opened by `open.rs`); [`TargetHandle`]: the operators' handle;
//!   [`TargetError`].
//!
//! Memory: everything a queue uses is its parcel, carved at connect and returned at
//! teardown; per-I/O processing allocates nothing.

pub mod commands;
pub mod epoll;
pub mod queue;
pub mod request;
pub mod request_flow;
pub mod runtime;
pub mod subsystems;
pub mod transport;
pub mod worker;

mod error;
mod handle;
mod open;
mod shared;
mod target;

pub use error::TargetError;
pub use handle::TargetHandle;
pub(crate) use open::{open_namespace, open_shared};
pub use shared::Shared;
pub use target::Target;

/// Admin queue entries (NVMe-oF: the admin queue has 32 entries).
pub const ADMIN_QUEUE_DEPTH: u32 = 32;
/// Firmware revision reported in Identify Controller.
pub const FIRMWARE_REVISION: &str = concat!("rb", env!("CARGO_PKG_VERSION"));

/// MDTS of Identify Controller (I/O and discovery controllers alike): log2 of the largest
/// transfer in 4 KiB pages (CAP.MPSMIN = 4 KiB).
pub fn mdts(max_io_size: u32) -> u8 {
    let pages = (max_io_size / 4096).max(1);
    (31 - pages.leading_zeros()) as u8
}
/// Model number reported in Identify Controller.
pub const MODEL: &str = "rdmablk";
