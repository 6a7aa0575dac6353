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
mod queue;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::nvme::ana::AnaState;
use rdmablk::nvme::Sct;

pub use path::PathStatus;
pub(crate) use queue::PathsQueue;

use crate::buf::{BufPool, IoBuf};
use crate::controller::{open_fabric_and_pool, Controller};
use crate::discovery::{discover_with, EntryKind};
use crate::error::{Error, Result};
use crate::ioqueue::IoQueue;
use crate::namespace::{drive, Cmd, Namespace, Via};
use crate::options::{ConnectOptions, TargetUrl, Transport};
use crate::session::{ControllerInfo, NamespaceInfo};
use crate::stats::{Stats, StatsSnapshot};
use crate::transport::Fabric;
use path::Path;

/// How long a command waits before looking again when no path can take it.
const NO_PATH_PAUSE: Duration = Duration::from_millis(5);

/// A subsystem reached through several controllers. Cheap to clone; `Send + Sync`. The paths
/// stay connected until the last clone and every [`Namespace`] and [`IoQueue`] made from it
/// are dropped.
#[derive(Clone)]
pub struct MultipathController {
    paths: Arc<Paths>,
}

/// What the namespaces and queues of a multipath controller share.
pub(crate) struct Paths {
    list: Vec<Path>,
    opts: ConnectOptions,
    fabric: Fabric,
    bufs: BufPool,
    stats: Stats,
    subnqn: String,
    /// The namespaces every path must report, as the first connected path did.
    namespaces: Vec<NamespaceInfo>,
    max_transfer_bytes: u32,
    oncs: u16,
    /// Round-robin position among equal paths.
    next: AtomicUsize,
    stop: AtomicBool,
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
            .find(|u| matches!(u.transport, Transport::Rdma(_)));
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
            if let (Transport::Rdma(k), Some(r)) = (u.transport, rdma) {
                if Transport::Rdma(k) != r.transport {
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
        let (fabric, bufs) =
            open_fabric_and_pool(&opts, rdma.unwrap_or(first), opts.buffer_pool_bytes)?;
        Paths::connect(parsed, opts, fabric, bufs)
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
            Via::Paths(p.clone()),
            info,
            p.max_transfer_bytes,
            p.oncs,
        ))
    }

    /// An async queue on namespace `nsid`: it keeps one I/O queue per path it uses.
    pub fn io_queue(&self, nsid: u32) -> Result<IoQueue> {
        IoQueue::new(self.namespace(nsid)?)
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

impl Paths {
    fn connect(
        parsed: Vec<(TargetUrl, ConnectOptions)>,
        opts: ConnectOptions,
        fabric: Fabric,
        bufs: BufPool,
    ) -> Result<MultipathController> {
        let subnqn = parsed[0].0.subnqn.clone();
        let mut connected: Vec<Option<Controller>> = Vec::with_capacity(parsed.len());
        let mut errors = Vec::new();
        for (url, o) in &parsed {
            let f = path_fabric(&fabric, url, o, &bufs);
            match Controller::connect_on(url.clone(), o.clone(), f, bufs.clone()) {
                Ok(c) => connected.push(Some(c)),
                Err(e) => {
                    tracing::warn!(%url, "path does not connect (retrying in the background): {e}");
                    errors.push(format!("{url}: {e}"));
                    connected.push(None);
                }
            }
        }
        let Some(reference) = connected.iter().flatten().next().map(Controller::info) else {
            return Err(Error::NoPath {
                what: errors.join("; "),
            });
        };
        let several = parsed.len() > 1;
        for (c, (url, _)) in connected.iter().zip(&parsed) {
            if let Some(c) = c {
                check_same(url, &subnqn, &reference.namespaces, &c.info(), several)?;
            }
        }
        let live = || connected.iter().flatten().map(Controller::info);
        let max_transfer_bytes = live().map(|i| i.max_transfer_bytes).min().unwrap_or(4096);
        let oncs = live().fold(u16::MAX, |acc, i| acc & i.oncs);
        let list = parsed
            .into_iter()
            .zip(connected)
            .map(|((url, o), c)| Path::new(url, o, c))
            .collect();
        let paths = Arc::new(Paths {
            list,
            opts,
            fabric,
            bufs,
            stats: Stats::default(),
            subnqn,
            namespaces: reference.namespaces,
            max_transfer_bytes,
            oncs,
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        for i in 0..paths.list.len() {
            if paths.list[i].controller().is_none() {
                paths.revive(i);
            }
        }
        Ok(MultipathController { paths })
    }

    pub fn alloc(&self, len: usize) -> Result<IoBuf> {
        self.bufs.alloc(len)
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    pub fn opts(&self) -> &ConnectOptions {
        &self.opts
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn path(&self, i: usize) -> &Path {
        &self.list[i]
    }

    /// The path to use for `nsid`, skipping paths in `avoid` (a bit per path): the best ANA
    /// rank among live paths, round-robin among equals.
    pub fn choose(&self, nsid: u32, avoid: u64) -> Option<(usize, Controller)> {
        let mut best: Vec<(usize, Controller)> = Vec::with_capacity(self.list.len());
        let mut best_rank = u8::MAX;
        for (i, p) in self.list.iter().enumerate() {
            if avoid & (1 << i) != 0 {
                continue;
            }
            let Some(c) = p.controller() else { continue };
            if !c.is_live() {
                continue;
            }
            let rank = match c.ana_state(nsid) {
                None | Some(AnaState::Optimized) => 0,
                Some(AnaState::NonOptimized) => 1,
                Some(_) => continue,
            };
            if rank < best_rank {
                best.clear();
                best_rank = rank;
            }
            if rank == best_rank {
                best.push((i, c));
            }
        }
        if best.is_empty() {
            return None;
        }
        let at = self.next.fetch_add(1, Ordering::Relaxed) % best.len();
        Some(best.swap_remove(at))
    }

    /// Path `i` failed under session `generation` of `ctrl`: stop using it and reconnect it
    /// in the background.
    pub fn path_failed(self: &Arc<Self>, i: usize, ctrl: &Controller, generation: u64, why: &str) {
        ctrl.shared().mark_broken(generation);
        self.list[i].note_failure(why);
        self.revive(i);
    }

    /// A command on path `i` completed with a path status: read its ANA log again.
    pub fn path_status(self: &Arc<Self>, i: usize, ctrl: &Controller, why: &str) {
        self.list[i].note_failure(why);
        if let Err(e) = ctrl.refresh_ana() {
            tracing::warn!(url = %self.list[i].url, "reading the ANA log: {e}");
        }
    }

    /// Starts the background reconnect of path `i` unless one runs.
    fn revive(self: &Arc<Self>, i: usize) {
        if self.list[i].start_reviving() {
            path::spawn_reviver(Arc::downgrade(self), i);
        }
    }

    /// Connects path `i` anew (its controller gave up) and checks it is the same subsystem.
    fn connect_path(&self, i: usize) -> Result<Controller> {
        let p = &self.list[i];
        let c = Controller::connect_on(
            p.url.clone(),
            p.opts.clone(),
            path_fabric(&self.fabric, &p.url, &p.opts, &self.bufs),
            self.bufs.clone(),
        )?;
        check_same(
            &p.url,
            &self.subnqn,
            &self.namespaces,
            &c.info(),
            self.list.len() > 1,
        )?;
        Ok(c)
    }

    /// Runs one sync call's commands on a chosen path, moving them whole to another path when
    /// the path fails under them or answers with a path status.
    pub fn run(
        self: &Arc<Self>,
        nsid: u32,
        cmds: &[Cmd],
        what: &'static str,
        retry: bool,
    ) -> Result<()> {
        let deadline = Instant::now() + self.opts.io_timeout();
        let mut avoid = 0u64;
        let mut last: Option<Error> = None;
        loop {
            let Some((i, ctrl)) = self.choose(nsid, avoid) else {
                if Instant::now() >= deadline {
                    return Err(self.no_path(last));
                }
                avoid = 0;
                std::thread::sleep(NO_PATH_PAUSE);
                continue;
            };
            let shared = ctrl.shared();
            let (mut q, generation) = match shared.checkout_live() {
                Ok(x) => x,
                Err(e) => {
                    avoid |= 1 << i;
                    last = Some(e);
                    continue;
                }
            };
            match drive(&mut q, cmds, what, self.opts.io_timeout()) {
                Err(e) if e.needs_reconnect() => {
                    q.fail(e.to_string());
                    drop(q);
                    self.path_failed(i, &ctrl, generation, &e.to_string());
                    if !retry {
                        return Err(e);
                    }
                    self.stats.add_retry();
                    tracing::info!(what, url = %self.list[i].url, "re-issuing on another path");
                    avoid |= 1 << i;
                    last = Some(e);
                }
                Err(e @ Error::Nvme { status, .. }) if status.sct == Sct::Path => {
                    shared.checkin(q, generation);
                    self.path_status(i, &ctrl, &e.to_string());
                    self.stats.add_retry();
                    avoid |= 1 << i;
                    last = Some(e);
                }
                r => {
                    shared.checkin(q, generation);
                    if r.is_ok() {
                        self.list[i].add_commands(cmds.len());
                    }
                    return r;
                }
            }
        }
    }

    fn no_path(&self, last: Option<Error>) -> Error {
        let mut what: Vec<String> = self
            .list
            .iter()
            .map(|p| format!("{}: {}", p.url, p.condition()))
            .collect();
        if let Some(e) = last {
            what.push(format!("last error: {e}"));
        }
        Error::NoPath {
            what: what.join("; "),
        }
    }
}

impl Drop for Paths {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Checks that a path's controller reports subsystem `subnqn` and the namespaces `want`
/// (same NSIDs, sizes and identifiers; with `several` paths, each must have an identifier).
fn check_same(
    url: &TargetUrl,
    subnqn: &str,
    want: &[NamespaceInfo],
    got: &ControllerInfo,
    several: bool,
) -> Result<()> {
    let refuse = |what: String| Error::PathMismatch {
        url: url.to_string(),
        what,
    };
    if !got.subnqn.is_empty() && got.subnqn != subnqn {
        return Err(refuse(format!(
            "the controller reports subsystem {} (expected {subnqn})",
            got.subnqn
        )));
    }
    let ids = |v: &[NamespaceInfo]| v.iter().map(|n| n.nsid).collect::<Vec<_>>();
    if ids(want) != ids(&got.namespaces) {
        return Err(refuse(format!(
            "namespaces {:?}, another path has {:?} (every path must export the same)",
            ids(&got.namespaces),
            ids(want)
        )));
    }
    for (w, g) in want.iter().zip(&got.namespaces) {
        if several && g.ids.is_empty() {
            return Err(refuse(format!(
                "namespace {} reports no NGUID, EUI-64 or UUID, so paths cannot be proven to \
                 lead to the same volume (give it a uuid in the target's config)",
                g.nsid
            )));
        }
        if w.ids != g.ids || w.block_size != g.block_size || w.blocks != g.blocks {
            return Err(refuse(format!(
                "namespace {} is {} blocks of {} bytes with {}; another path has {} blocks \
                 of {} bytes with {} (not the same volume)",
                g.nsid, g.blocks, g.block_size, g.ids, w.blocks, w.block_size, w.ids
            )));
        }
    }
    Ok(())
}

/// The fabric path `url` connects over: the set's RDMA fabric (one provider, the pool
/// registered on its PD) for an RDMA path; NVMe/TCP with the path's own digests; loop with
/// the pool.
fn path_fabric(base: &Fabric, url: &TargetUrl, o: &ConnectOptions, bufs: &BufPool) -> Fabric {
    match url.transport {
        Transport::Rdma(_) => base.clone(),
        Transport::Tcp => Fabric::Tcp {
            hdr_digest: o.hdr_digest,
            data_digest: o.data_digest,
            tls: crate::transport::tcp_tls::TlsOffer::of(o, &url.subnqn),
        },
        Transport::Loop => Fabric::Loop {
            pool: Some(bufs.clone()),
        },
    }
}
