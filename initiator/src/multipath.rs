//! Multipath: one subsystem through several controllers ("paths": several ports, or several
//! target processes exporting the same subsystem), with Asymmetric Namespace Access.
//!
//! ```no_run
//! use rdmablk_initiator::MultipathController;
//!
//! let mp = MultipathController::connect(&[
//!     "rdma://10.0.0.2:4420/nqn.2024-01.io.example:ram0",
//!     "rdma://10.0.0.3:4420/nqn.2024-01.io.example:ram0",
//! ])?;
//! let ns = mp.namespace(1)?; // the same `Namespace` API as for one controller
//! ns.write_at(0, &[0xA5; 4096])?;
//! for p in mp.paths() {
//!     println!("{} live {} ANA {:?} commands {}", p.url, p.live, p.ana_state(1), p.commands);
//! }
//! # Ok::<(), rdmablk_initiator::Error>(())
//! ```
//!
//! # Same subsystem, same namespaces
//! Every path must report the subsystem NQN of the URLs and the same namespaces: same NSIDs,
//! block size, capacity and global identifiers (NGUID, EUI-64, UUID), and each namespace must
//! have at least one identifier: otherwise two different volumes could not be told apart.
//! A path that disagrees is refused ([`Error::PathMismatch`]) at connect and when it comes
//! back.
//!
//! # Path choice
//! Per command (sync call or async request), among live paths (connected, not reconnecting):
//! ANA optimized first, then non-optimized; inaccessible, persistent-loss and change paths are
//! not used. A controller without ANA reporting (CMIC bit 3) counts as optimized, so without
//! ANA every live path is equal. Among equals: round-robin.
//!
//! The ANA state of a path is the controller's last ANA log, read at connect, on an ANA
//! change notice (the controller's event thread), and when a command completes with a path
//! status (SCT 3): the command goes to another path and the log is read again.
//!
//! # Failover
//! When a path fails under a command (connection lost, keep-alive failure, command timeout)
//! or answers with a path status, the command is issued again on another usable path; while
//! one path lives, the application sees no error (within `io_timeout_ms`, after which the
//! command fails with [`Error::NoPath`]). Writes are re-issued only with
//! `ConnectOptions::retry_writes` (the default). The failed path reconnects in the background
//! (the controller's own reconnect with backoff; when that gives up, a new controller every
//! `reconnect_max_delay_ms`, for as long as the multipath controller lives) and is used again
//! once it is back and its ANA state allows.
//!
//! # Buffers
//! All paths share one protection domain and one registered buffer pool, so an [`IoBuf`]
//! serves every path and a request moves between paths without a copy. Hence every path
//! must resolve to the same local RDMA device (always so on the soft provider).

mod path;
mod paths;
mod queue;

use std::sync::Arc;

pub use path::PathStatus;
use paths::Paths;
use queue::PathsQueue;

use crate::buf::{BufPool, IoBuf};
use crate::discovery::{discover_with, EntryKind};
use crate::error::{Error, Result};
use crate::io_path::{Cmd, IoPath};
use crate::ioqueue::IoQueue;
use crate::namespace::Namespace;
use crate::options::ConnectOptions;
use crate::stats::{Stats, StatsSnapshot};
use crate::url::TargetUrl;
use path::Path;

/// A subsystem reached through several controllers. Cheap to clone; `Send + Sync`. The paths
/// stay connected until the last clone and every [`Namespace`] and [`IoQueue`] made from it
/// are dropped.
#[derive(Clone)]
pub struct MultipathController {
    paths: Arc<Paths>,
}

impl MultipathController {
    /// Connects every URL (`rdma://`, `soft://`, `tcp://` or `loop://`, all with one NQN; the
    /// RDMA ones of one provider) with default options.
    pub fn connect<S: AsRef<str>>(urls: &[S]) -> Result<MultipathController> {
        Self::connect_with(urls, ConnectOptions::default())
    }

    /// Connects every URL with `opts` (query parameters of a URL override them for that
    /// path). Paths that do not connect now are retried in the background; at least one must.
    pub fn connect_with<S: AsRef<str>>(
        urls: &[S],
        opts: ConnectOptions,
    ) -> Result<MultipathController> {
        let mut parsed = Vec::with_capacity(urls.len());
        for u in urls {
            let mut o = opts.clone();
            let url = TargetUrl::parse_with(u.as_ref(), &mut o)?;
            o.validate()?;
            parsed.push((url, o));
        }
        let Some((first, _)) = parsed.first() else {
            return Err(Error::Option {
                name: "paths",
                reason: "a multipath controller needs at least one URL".into(),
            });
        };
        if parsed.len() > 64 {
            return Err(Error::Option {
                name: "paths",
                reason: format!("{} paths (at most 64)", parsed.len()),
            });
        }
        // Paths may mix transports (an RDMA path and an NVMe/TCP one); the buffer pool is
        // registered on the RDMA provider's PD when a path uses RDMA, which NVMe/TCP and loop
        // paths read as plain memory. One RDMA provider per set: a pool registers on one PD.
        let rdma = parsed
            .iter()
            .map(|(u, _)| u)
            .find(|u| u.provider().is_some());
        for (u, _) in &parsed {
            if u.subnqn != first.subnqn {
                return Err(Error::PathMismatch {
                    url: u.to_string(),
                    what: format!(
                        "names another subsystem than {first} (every path must lead to one \
                         subsystem)"
                    ),
                });
            }
            if let (Some(k), Some(r)) = (u.provider(), rdma) {
                if Some(k) != r.provider() {
                    return Err(Error::PathMismatch {
                        url: u.to_string(),
                        what: format!(
                            "uses another RDMA provider than {r} (the paths' buffer pool is \
                             registered with one provider: use rdma:// or soft:// for all)"
                        ),
                    });
                }
            }
        }
        let home = rdma.unwrap_or(first);
        let bufs = home
            .transport
            .open_pool(home.addr, &opts, opts.buffer_pool_bytes)?;
        let paths = Paths::connect(parsed, opts, bufs)?;
        Ok(MultipathController { paths })
    }

    /// Asks the discovery controller at `discovery_url` (as [`crate::discover`]) for every
    /// entry of subsystem `subnqn` and connects them all as paths.
    pub fn connect_discovered(
        discovery_url: &str,
        subnqn: &str,
        opts: ConnectOptions,
    ) -> Result<MultipathController> {
        let urls: Vec<String> = discover_with(discovery_url, opts.clone())?
            .into_iter()
            .filter(|e| e.kind == EntryKind::Subsystem && e.subnqn == subnqn)
            .filter_map(|e| e.url())
            .collect();
        if urls.is_empty() {
            return Err(Error::NoPath {
                what: format!("the discovery controller at {discovery_url} lists no {subnqn}"),
            });
        }
        Self::connect_with(&urls, opts)
    }

    /// Namespace `nsid`, with the sync block-device API; its calls choose a path each.
    pub fn namespace(&self, nsid: u32) -> Result<Namespace> {
        let p = &self.paths;
        let info = p
            .namespaces
            .iter()
            .find(|n| n.nsid == nsid)
            .copied()
            .ok_or_else(|| Error::NoNamespace {
                nsid,
                active: self.namespace_ids(),
            })?;
        Ok(Namespace::new(
            Arc::new(self.clone()),
            info,
            p.max_transfer_bytes,
            p.oncs,
        ))
    }

    /// An async queue on namespace `nsid`: it keeps one I/O queue per path it uses.
    pub fn io_queue(&self, nsid: u32) -> Result<IoQueue> {
        let ns = self.namespace(nsid)?;
        let lanes = PathsQueue::new(self.paths.clone(), ns.clone())?;
        Ok(IoQueue::new(ns, Box::new(lanes)))
    }

    /// Active namespace IDs (every path reports the same).
    pub fn namespace_ids(&self) -> Vec<u32> {
        self.paths.namespaces.iter().map(|n| n.nsid).collect()
    }

    /// The subsystem NQN.
    pub fn subnqn(&self) -> &str {
        &self.paths.subnqn
    }

    /// A registered buffer of `len` bytes, usable on every path.
    pub fn alloc(&self, len: usize) -> Result<IoBuf> {
        self.paths.alloc(len)
    }

    /// The registered buffer pool all paths share.
    pub fn buffers(&self) -> &BufPool {
        &self.paths.bufs
    }

    /// Each path: URL, whether it is live, its ANA log, commands completed, failures.
    pub fn paths(&self) -> Vec<PathStatus> {
        self.paths.list.iter().map(Path::status).collect()
    }

    /// Multipath counters: bounce bytes, and in `retried_ios` the calls and requests issued
    /// again on another path. Each path's controller counts its own (see [`Self::paths`]).
    pub fn stats(&self) -> StatsSnapshot {
        self.paths.stats.snapshot()
    }
}

/// A namespace of a multipath set: each call goes to the path [`Paths::choose`] picks, and
/// moves whole to another path when its path fails under it.
impl IoPath for MultipathController {
    fn alloc(&self, len: usize) -> Result<IoBuf> {
        self.paths.alloc(len)
    }

    fn stats(&self) -> &Stats {
        self.paths.stats()
    }

    fn opts(&self) -> &ConnectOptions {
        self.paths.opts()
    }

    fn run(&self, nsid: u32, cmds: &[Cmd], what: &'static str, retry: bool) -> Result<()> {
        self.paths.run(nsid, cmds, what, retry)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
