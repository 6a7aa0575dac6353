//! rdmablk-initiator: use a remote NVMe namespace over NVMe-oF (RDMA or NVMe/TCP; loop for
//! tests) as if it were a local block device.
//!
//! ```no_run
//! use rdmablk_initiator::Controller;
//!
//! let ctrl = Controller::connect("rdma://10.0.0.2:4420/nqn.2024-01.io.example:ram0")?;
//! let ns = ctrl.namespace(1)?;
//! let data = vec![0xA5u8; 8192];
//! ns.write_at(0, &data)?;
//! let mut back = vec![0u8; 8192];
//! ns.read_at(0, &mut back)?;
//! assert_eq!(data, back);
//! ns.flush()?;
//! # Ok::<(), rdmablk_initiator::Error>(())
//! ```
//!
//! - [`Controller`]: connect by URL (`rdma://` verbs, `soft://` rdmablk's soft provider),
//!   keep-alive, reconnect; the threading model is in its module doc.
//! - [`Namespace`]: the synchronous block-device API (checks, MDTS splitting, retries).
//! - [`IoQueue`]: the batched asynchronous API (caller tags, `QueueFull` as a value).
//! - [`IoBuf`]: registered buffers for zero-copy I/O.
//! - [`discover`]: what a target's discovery controller lists (`nvme discover`).
//! - [`MultipathController`]: one subsystem through several controllers, chosen by ANA
//!   state, with failover; its [`Namespace`]s and [`IoQueue`]s have the same API.
//!
//! See `docs/initiator.md` for the design: data paths (keyed SGL, in-capsule, push writes),
//! buffers, failure handling.

mod auth;
mod buf;
mod controller;
mod discovery;
mod error;
mod io_path;
mod ioqueue;
mod multipath;
mod namespace;
mod options;
mod queue;
mod session;
mod stats;
mod transport;
mod url;

pub use buf::{BufPool, IoBuf, PAGE_BYTES};
pub use controller::Controller;
pub use discovery::{discover, discover_with, DiscoveryEntry, EntryKind};
pub use error::{Error, ErrorKind, Result};
pub use ioqueue::{Completion, IoQueue, Op, SubmitError};
pub use multipath::{MultipathController, PathStatus};
pub use namespace::reservation::{
    AcquireAction, Persist, RegisterAction, Registrant, ReservationReport, ResvType,
};
pub use namespace::Namespace;
pub use options::{default_host_identity, ConnectOptions};
pub use session::{ControllerInfo, NamespaceIds, NamespaceInfo};
pub use stats::StatsSnapshot;
pub use transport::tcp_tls::TlsKey;
pub use transport::Transport;
pub use url::{TargetUrl, DEFAULT_PORT};
