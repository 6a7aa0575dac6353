//! The NVMe-oF/RDMA protocol engine: listeners, connections, controllers and workers.
//!
//! ```text
//!  listener thread (per [[listener]])          worker threads (target.worker_threads)
//!  ─────────────────────────────────           ───────────────────────────────────────
//!  get_request ─▶ CM private data checks        own: one CQ, the namespace queues (io_uring)
//!             ─▶ carve a Window (arena)         poll CQ ─▶ requests' state machines
//!             ─▶ create QP on a worker's CQ ──▶ post receives, accept, bind MW (push)
//!                (round robin)                  poll backends ─▶ RDMA WRITE + SEND
//!                                               keep-alive, CM events, teardown
//! ```
//!
//! - [`listener`]: connection requests: queue sizing, window carving, CM rejects.
//! - [`connection`]: one queue pair with its window, requests and teardown.
//! - [`request`]: the request state machine and work-request IDs.
//! - [`command`]: checking a command and its data pointer; [`fabrics`], [`admin`], [`io`]:
//!   the command sets.
//! - [`controller`]: controllers, keep-alive; [`subsystem`]: NQNs, hosts, namespaces.
//! - [`discovery`]: the discovery controller and its log page.
//! - [`worker`]: the poll loop.
//!
//! Memory: everything a connection uses is its window, carved at connect and returned at
//! teardown; per-I/O processing allocates nothing.

pub mod admin;
pub mod ana;
pub mod auth;
pub mod command;
pub mod controller;
pub mod data_phase;
pub mod discovery;
pub mod fabrics;
pub mod io_commands;
pub mod listener;
pub mod ns_queues;
pub mod ns_table;
pub mod queue;
pub mod reload;
pub mod request;
pub mod request_flow;
pub mod subsystem;
pub mod transport;
pub mod worker;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use std::thread::JoinHandle;
use std::time::Instant;

use rdmablk::fabric::{Cq, Device, DeviceAttr, FabricError, Pd, ProviderKind};

use crate::arena::{Arena, ArenaError, ArenaStats};
use crate::backend::BackendError;
use crate::config::{Config, ConfigError, DISCOVERY_NQN};
use crate::metrics::{TargetCounters, WorkerCounters};
use crate::namespace::Namespace;

use controller::ControllerTable;
use listener::RunningListener;
use ns_table::NamespaceTable;
use subsystem::Subsystem;

/// Admin queue entries (NVMe-oF: the admin queue has 32 entries).
pub const ADMIN_QUEUE_DEPTH: u32 = 32;
/// Send work requests one request may have outstanding (RDMA WRITE + response SEND).
pub const SEND_WRS_PER_REQUEST: u32 = 2;
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

/// Why the target could not start (or, [`TargetError::FinalFlush`], could not stop cleanly).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("listener[{index}] ({provider} {addr}): cannot open the RDMA device: {source}")]
    OpenDevice {
        index: usize,
        provider: ProviderKind,
        addr: std::net::IpAddr,
        #[source]
        source: FabricError,
    },
    #[error(
        "listener[{index}] is on device {device} but listener[0] is on {first}: one target \
         serves one RDMA device (run a target per device)"
    )]
    SecondDevice {
        index: usize,
        device: String,
        first: String,
    },
    #[error("device {device}: {op}: {source}")]
    Device {
        device: String,
        op: &'static str,
        #[source]
        source: FabricError,
    },
    #[error(transparent)]
    Arena(#[from] ArenaError),
    #[error("subsystem {nqn} namespace {nsid}: {source}")]
    Namespace {
        nqn: String,
        nsid: u32,
        #[source]
        source: BackendError,
    },
    #[error("worker {index}: {source}")]
    Worker {
        index: usize,
        #[source]
        source: BackendError,
    },
    #[error("listener[{index}]: cannot listen on {addr}: {source}")]
    Listen {
        index: usize,
        addr: SocketAddr,
        #[source]
        source: FabricError,
    },
    #[error("cannot start a thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error(
        "the final flush failed for {}: data hosts wrote before the shutdown may not be \
         durable (check the backing storage and the log above)", failed.join("; ")
    )]
    FinalFlush { failed: Vec<String> },
}

/// What every thread of a running target shares.
#[derive(Debug)]
pub struct Shared {
    /// The configuration the target started with: what only a restart changes (arena,
    /// threads, limits) is read from here; see [`Shared::config`] for the rest.
    pub cfg: Config,
    /// The configuration in force (the last successful reload's).
    pub config: ArcSwap<Config>,
    /// The NVM subsystems (swapped whole when one is added or removed).
    pub subsystems: ArcSwap<Vec<Arc<Subsystem>>>,
    /// Every namespace, by slot (the index of workers' namespace queues).
    pub namespaces: NamespaceTable,
    /// Each worker's message channel (set once the workers run).
    pub workers: OnceLock<Vec<worker::WorkerTx>>,
    pub controllers: ControllerTable,
    pub arena: Arc<Arena>,
    pub pd: Pd,
    pub attr: DeviceAttr,
    /// Whether the device has type-2 memory windows (else push-write connections get a
    /// per-connection memory region).
    pub has_mw: bool,
    pub epoch: Instant,
    /// Set by [`Target::shutdown`]: stop accepting, drain, flush, exit.
    pub stop: AtomicBool,
    /// Queues (connections) alive.
    pub connections: AtomicUsize,
    /// Per worker: completion-queue entries reserved by its connections.
    pub cq_reserved: Vec<AtomicU32>,
    /// Per worker: CQ capacity.
    pub cq_capacity: u32,
    /// Namespaces whose flush at shutdown failed or was refused, with why.
    pub final_flush_failures: Mutex<Vec<String>>,
    /// The discovery subsystem (the well-known NQN, or `target.discovery_nqn`).
    pub discovery: Arc<Subsystem>,
    /// The Discovery Log Page's generation counter: changes whenever the log may have.
    pub discovery_genctr: AtomicU64,
    /// The listeners running, in configuration order.
    pub listeners: Mutex<Vec<RunningListener>>,
    pub next_listener_id: AtomicU64,
    /// The RDMA device every listener is on, and each worker's completion queue (what a
    /// listener added at run time needs).
    pub device: Device,
    pub cqs: Vec<Cq>,
    /// Serializes reloads and control-socket changes.
    pub reload_lock: Mutex<()>,
    /// The file the configuration came from (what a reload re-reads).
    pub config_path: OnceLock<std::path::PathBuf>,
    /// Each worker's I/O counters (metrics), by worker index.
    pub counters_by_worker: Vec<Arc<WorkerCounters>>,
    /// Target-wide counters.
    pub counters: TargetCounters,
}

impl Shared {
    pub fn now_ms(&self) -> u64 {
        controller::now_ms(self.epoch)
    }

    /// The subsystem a Connect names: an NVM subsystem, or the discovery subsystem by the
    /// well-known discovery NQN or the target's unique one.
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        if nqn == DISCOVERY_NQN || nqn == self.discovery.nqn {
            return Some(Arc::clone(&self.discovery));
        }
        self.subsystems
            .load()
            .iter()
            .find(|s| s.nqn == nqn)
            .cloned()
    }

    pub fn lock_listeners(&self) -> std::sync::MutexGuard<'_, Vec<RunningListener>> {
        self.listeners.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Logs arena usage (tests watch it return to idle).
    pub fn log_arena(&self, event: &str) {
        let s = self.arena.stats();
        tracing::info!(
            event,
            arena_bytes_in_use = s.bytes_in_use,
            arena_windows = s.windows,
            arena_bytes = s.total_bytes,
            connections = self.connections.load(Ordering::Relaxed),
            "arena usage"
        );
    }
}

/// A running target.
pub struct Target {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("addrs", &self.local_addrs())
            .finish()
    }
}

impl Target {
    /// Starts a target for a validated configuration: opens the device, registers the
    /// arena, opens the namespaces, starts the workers and the listeners.
    pub fn start(cfg: Config) -> Result<Target, TargetError> {
        cfg.validate()?;
        let device = open_device(&cfg)?;
        let dev_err = |op, source| TargetError::Device {
            device: device.name(),
            op,
            source,
        };
        let attr = device.attr().map_err(|e| dev_err("query attributes", e))?;
        cfg.check_device(&attr, SEND_WRS_PER_REQUEST)?;
        let pd = device
            .alloc_pd()
            .map_err(|e| dev_err("allocate a protection domain", e))?;
        let arena = Arc::new(Arena::map(&cfg.arena)?.register(&pd)?);
        let has_mw = match pd.alloc_mw() {
            Ok(_) => true,
            Err(FabricError::Unsupported { .. }) => {
                tracing::warn!(
                    device = %device.name(),
                    "device has no memory windows: push-write connections get a \
                     per-connection memory region instead"
                );
                false
            }
            Err(e) => return Err(dev_err("allocate a memory window", e)),
        };
        let namespaces = NamespaceTable::default();
        let subsystems = open_subsystems(&cfg, &namespaces)?;
        let workers_n = cfg.target.worker_threads.max(1) as usize;
        let cq_capacity = cq_capacity(&cfg, &attr, workers_n);
        let cqs = (0..workers_n)
            .map(|_| device.create_cq(cq_capacity))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| dev_err("create a completion queue", e))?;
        let shared = Arc::new(Shared {
            config: ArcSwap::from_pointee(cfg.clone()),
            subsystems: ArcSwap::from_pointee(subsystems),
            namespaces,
            workers: OnceLock::new(),
            controllers: ControllerTable::default(),
            arena,
            pd,
            attr,
            has_mw,
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            cq_reserved: (0..workers_n).map(|_| AtomicU32::new(0)).collect(),
            cq_capacity,
            final_flush_failures: Mutex::new(Vec::new()),
            discovery: Arc::new(Subsystem::discovery(
                cfg.target.discovery_nqn.as_deref().unwrap_or(DISCOVERY_NQN),
            )),
            discovery_genctr: AtomicU64::new(1),
            listeners: Mutex::new(Vec::new()),
            next_listener_id: AtomicU64::new(1),
            device: device.clone(),
            cqs,
            reload_lock: Mutex::new(()),
            config_path: OnceLock::new(),
            counters_by_worker: (0..workers_n).map(|_| Arc::default()).collect(),
            counters: TargetCounters::default(),
            cfg,
        });
        let mut target = Target {
            shared: Arc::clone(&shared),
            workers: Vec::new(),
        };
        let mut senders = Vec::new();
        for (index, cq) in shared.cqs.iter().enumerate() {
            let (tx, handle) = worker::spawn(index, Arc::clone(&shared), cq.clone())?;
            target.workers.push(handle);
            senders.push(tx);
        }
        let _ = shared.workers.set(senders);
        for (index, l) in shared.cfg.listeners.iter().enumerate() {
            let running = listener::start(&shared, l, index)?;
            shared.lock_listeners().push(running);
        }
        shared.log_arena("started");
        Ok(target)
    }

    /// The addresses listened on (with the real port where the configuration said 0), in
    /// configuration order.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.shared
            .lock_listeners()
            .iter()
            .map(|l| l.addr)
            .collect()
    }

    /// What the control socket, SIGHUP and `rdmablk-ctl` act on.
    pub fn handle(&self) -> TargetHandle {
        TargetHandle(Arc::clone(&self.shared))
    }

    /// Arena accounting (bytes in use return to 0 when every host has gone).
    pub fn arena_stats(&self) -> ArenaStats {
        self.shared.arena.stats()
    }

    /// The remote key of the arena's memory region. The region is registered without remote
    /// access, so the key lets no host touch the arena (isolation tests use it as a guess).
    pub fn arena_rkey(&self) -> Option<u32> {
        self.shared.arena.mr().map(|mr| mr.rkey())
    }

    /// Queues connected right now.
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Acquire)
    }

    /// Controllers alive right now.
    pub fn controllers(&self) -> usize {
        self.shared.controllers.len()
    }

    /// Stops accepting, lets in-flight I/O finish, completes held events, flushes every
    /// namespace, disconnects every host and waits for all threads. A failed final flush is
    /// logged; [`Target::shutdown_checked`] reports it.
    pub fn shutdown(self) {
        let _ = self.shutdown_checked();
    }

    /// [`Target::shutdown`], then an error if any namespace's final flush failed or was
    /// refused (a namespace fenced by an earlier failed flush): what hosts wrote may not be
    /// durable, and a service manager should hear so from the exit status.
    pub fn shutdown_checked(mut self) -> Result<(), TargetError> {
        self.stop_and_join();
        let failed = std::mem::take(
            &mut *self
                .shared
                .final_flush_failures
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if failed.is_empty() {
            Ok(())
        } else {
            Err(TargetError::FinalFlush { failed })
        }
    }

    fn stop_and_join(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let listeners = std::mem::take(&mut *self.shared.lock_listeners());
        for l in listeners {
            l.stop();
        }
        for h in self.workers.drain(..) {
            if h.join().is_err() {
                tracing::error!("a target thread panicked");
            }
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            self.stop_and_join();
        }
    }
}

/// A handle on a running target for operators: reload, status, changes (see [`reload`],
/// `docs/operations.md`). Cheap to clone; valid while the target runs.
#[derive(Clone, Debug)]
pub struct TargetHandle(pub(crate) Arc<Shared>);

impl TargetHandle {
    /// Records the file the configuration came from, for [`TargetHandle::reload`].
    pub fn set_config_path(&self, path: std::path::PathBuf) {
        let _ = self.0.config_path.set(path);
    }

    /// The control socket the configuration names (`[control] socket`; empty: none).
    pub fn control_socket(&self) -> std::path::PathBuf {
        self.0.cfg.control.socket.clone()
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.0
    }

    /// The metrics endpoint the configuration names (`[metrics] address`), if any.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.0.cfg.metrics.as_ref().map(|m| m.address)
    }

    /// The file the configuration came from.
    pub fn config_path(&self) -> Option<std::path::PathBuf> {
        self.0.config_path.get().cloned()
    }

    /// Stops accepting connections on the listener bound to `addr` ("ADDR:PORT"); its
    /// connections stay. Until `listener remove` or a restart.
    pub fn drain(&self, addr: &str) -> Result<(), String> {
        let want: SocketAddr = addr
            .parse()
            .map_err(|e| format!("{addr:?} is not ADDR:PORT: {e}"))?;
        let ls = self.0.lock_listeners();
        let l = ls
            .iter()
            .find(|l| l.addr == want)
            .ok_or_else(|| format!("no listener on {addr}"))?;
        l.drain();
        tracing::info!(addr, "listener drained: no new connections");
        Ok(())
    }
}

impl crate::config::ListenerConfig {
    /// The fabric provider of this listener.
    pub fn provider_kind(&self) -> ProviderKind {
        self.provider.into()
    }
}

fn open_device(cfg: &Config) -> Result<Device, TargetError> {
    let mut first: Option<Device> = None;
    for (index, l) in cfg.listeners.iter().enumerate() {
        let provider = l.provider_kind();
        let d = Device::open_for_addr(provider, l.address).map_err(|source| {
            TargetError::OpenDevice {
                index,
                provider,
                addr: l.address,
                source,
            }
        })?;
        match &first {
            None => first = Some(d),
            Some(f) if f.provider() == d.provider() && f.name() == d.name() => {}
            Some(f) => {
                return Err(TargetError::SecondDevice {
                    index,
                    device: format!("{}:{}", d.provider(), d.name()),
                    first: format!("{}:{}", f.provider(), f.name()),
                })
            }
        }
    }
    // Validation guarantees at least one listener.
    first.ok_or_else(|| {
        TargetError::Config(ConfigError::Invalid {
            path: None,
            problems: vec![crate::config::Problem {
                key: "listener".into(),
                message: "no listener is configured".into(),
            }],
        })
    })
}

fn open_subsystems(
    cfg: &Config,
    table: &NamespaceTable,
) -> Result<Vec<Arc<Subsystem>>, TargetError> {
    let mut subsystems = Vec::new();
    for s in &cfg.subsystems {
        let mut namespaces = Vec::new();
        for n in &s.namespaces {
            namespaces.push(open_namespace(&s.nqn, n, table)?);
        }
        subsystems.push(Arc::new(Subsystem::new(s, namespaces)));
    }
    Ok(subsystems)
}

/// Opens namespace `n` of subsystem `nqn` and gives it a slot in `table`.
pub(crate) fn open_namespace(
    nqn: &str,
    n: &crate::config::NamespaceConfig,
    table: &NamespaceTable,
) -> Result<Arc<Namespace>, TargetError> {
    let ns = Namespace::open(n).map_err(|source| TargetError::Namespace {
        nqn: nqn.to_owned(),
        nsid: n.nsid,
        source,
    })?;
    tracing::info!(subsystem = %nqn, nsid = n.nsid, kind = n.backend.kind(),
        blocks = ns.num_blocks(), block_size = ns.block_size(), "namespace open");
    Ok(table.insert(ns))
}

/// CQ entries one connection of `depth` may need: its receives, and per request at most a
/// signalled READ or a WRITE + SEND pair, plus the bind and invalidate of its window.
pub fn cqes_per_connection(depth: u32) -> u32 {
    depth + SEND_WRS_PER_REQUEST * depth + 2
}

fn cq_capacity(cfg: &Config, attr: &DeviceAttr, workers: usize) -> u32 {
    let per_worker = cfg.limits.max_connections.div_ceil(workers as u32).max(1);
    let want = u64::from(per_worker) * u64::from(cqes_per_connection(cfg.limits.max_queue_depth));
    let max = if attr.max_cqe == 0 {
        u32::MAX
    } else {
        attr.max_cqe
    };
    want.min(u64::from(max)).min(1 << 20) as u32
}
