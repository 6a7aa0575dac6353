//! rdmablk target daemon library.
//!
//! - [`config`]: the TOML configuration, validated at load.
//! - [`arena`]: the pinned, registered buffer arena and its per-connection parcels.
//! - [`backend`]: block backends (io_uring files and devices, null, ram, fault injection) and
//!   the namespace wrapper that fences writes after a failed flush.
//! - [`io`]: the per-worker io_uring engine the file and block backends submit through.
//! - [`nvmf`]: the NVMe-oF protocol engine ([`Target`]) and its transports (RDMA, NVMe/TCP,
//!   loop); [`nvmf::runtime::reload`]: live reconfiguration.
//! - [`control`]: the control socket (`rdmablk-ctl`); [`metrics`]: Prometheus; [`systemd`]:
//!   readiness notification; [`heap`]: the allocator's view of the heap (leaks vs. RSS).

pub mod arena;
pub mod backend;
pub mod cli_docs;
pub mod config;
pub mod control;
pub mod heap;
pub mod metrics;
pub mod namespace;
pub mod nvmf;
pub mod ring;
pub mod systemd;

pub use nvmf::{Target, TargetError};
