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

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::ArcSwap;
use std::thread::JoinHandle;
use std::time::Instant;

use crate::arena::{Arena, ArenaError, ArenaStats};
use crate::backend::BackendError;
use crate::config::{Config, ConfigError, DISCOVERY_NQN};
use crate::metrics::{TargetCounters, WorkerCounters};
use crate::namespace::Namespace;

use runtime::port::Port;
use subsystems::controller::ControllerTable;
use subsystems::ns_table::NamespaceTable;
use subsystems::subsystem::Subsystem;
use transport::Transport;

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

/// Why the target could not start (or, [`TargetError::FinalFlush`], could not stop cleanly).
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A transport could not start (its device, its listener).
    #[error(transparent)]
    Transport(Box<dyn std::error::Error + Send + Sync>),
    #[error(
        "listener[{index}]: transport {transport} is not served by this target (it serves the \
         transports its listeners had at start: restart it to add another)"
    )]
    NoTransport {
        index: usize,
        transport: &'static str,
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
    #[error(
        "subsystem {nqn} namespace {nsid}: its persisted reservations: {why} \
         (target.state_dir)"
    )]
    Reservations { nqn: String, nsid: u32, why: String },
    #[error("worker {index}: {source}")]
    Worker {
        index: usize,
        #[source]
        source: BackendError,
    },
    #[error("worker {index}: no room in the arena for its data pool (arena.data_bytes): {source}")]
    DataPool {
        index: usize,
        #[source]
        source: crate::arena::ArenaError,
    },
    #[error("worker {index}: cannot run on CPU {cpu} (target.worker_cpus): {source}")]
    Pin {
        index: usize,
        cpu: usize,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start a thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error(
        "the final flush failed for {}: data hosts wrote before the shutdown may not be \
         durable (check the backing storage and the log above)", failed.join("; ")
    )]
    FinalFlush { failed: Vec<String> },
}

impl TargetError {
    /// True when a listener's port was taken (EADDRINUSE): a caller that picked the port
    /// itself (a test, `rdmablk-perf --embedded`) may pick another and start again. The
    /// transports wrap their bind errors in their own ways, some as text, so the whole chain
    /// is looked at.
    pub fn is_addr_in_use(&self) -> bool {
        let mut e: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(x) = e {
            if let Some(io) = x.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::AddrInUse {
                    return true;
                }
            }
            e = x.source();
        }
        let text = format!("{self} {self:?}");
        text.contains("AddrInUse") || text.contains("Address already in use")
    }
}

/// What every thread of a running target shares.
#[derive(Debug)]
pub struct Shared {
    /// The configuration the target started with: what only a restart changes (arena,
    /// threads, limits) is read from here, fixed for the target's life; see
    /// [`Shared::live`] for the rest.
    pub fixed: Config,
    /// The configuration in force (the last successful reload's).
    pub live: ArcSwap<Config>,
    /// The NVM subsystems (swapped whole when one is added or removed).
    pub subsystems: ArcSwap<Vec<Arc<Subsystem>>>,
    /// Every namespace, by slot (the index of workers' namespace queues).
    pub namespaces: NamespaceTable,
    /// Each worker's message channel (set once the workers run).
    pub workers: OnceLock<Vec<worker::WorkerTx>>,
    pub controllers: ControllerTable,
    pub arena: Arc<Arena>,
    /// The transports served, each with a poll group on every worker (in this order).
    pub transports: Vec<Arc<dyn Transport>>,
    /// When the target started: keep-alive's clock ([`Shared::now_ms`]) counts from it.
    pub epoch: Instant,
    /// Set by [`Target::shutdown`]: stop accepting, drain, flush, exit.
    pub stop: AtomicBool,
    /// Queues alive (each an RDMA connection, a TCP socket or a loop channel), counted against
    /// `limits.max_connections`.
    pub queues_open: AtomicUsize,
    /// Connections over `limits.max_connections` being answered rather than closed (NVMe/TCP:
    /// their Connect completes with Controller Busy), at most
    /// [`transport::handoff::MAX_REFUSING`].
    pub refusing: AtomicUsize,
    /// Namespaces whose flush at shutdown failed or was refused, with why.
    pub final_flush_failures: Mutex<Vec<String>>,
    /// The discovery subsystem (the well-known NQN, or `target.discovery_nqn`).
    pub discovery: Arc<Subsystem>,
    /// The Discovery Log Page's generation counter: changes whenever the log may have.
    pub discovery_genctr: AtomicU64,
    /// The port table: the listeners running, in configuration order.
    pub ports: Mutex<Vec<Port>>,
    pub next_listener_id: AtomicU64,
    /// Serializes reloads and control-socket changes.
    pub reload_lock: Mutex<()>,
    /// The file the configuration came from (what a reload re-reads).
    pub config_path: OnceLock<std::path::PathBuf>,
    /// Each worker's I/O counters (metrics), by worker index.
    pub counters_by_worker: Vec<Arc<WorkerCounters>>,
    /// Target-wide counters.
    pub counters: TargetCounters,
    /// Preempt-and-abort fences waiting for the preempted hosts' commands.
    pub fences: runtime::fence::Fences,
}

impl Shared {
    /// Milliseconds since the start: what keep-alive stamps commands with and checks its
    /// timers against.
    pub fn now_ms(&self) -> u64 {
        subsystems::controller::now_ms(self.epoch)
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

    pub fn lock_ports(&self) -> std::sync::MutexGuard<'_, Vec<Port>> {
        self.ports.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The transport that serves listeners of `kind`, if this target serves it.
    pub fn transport(&self, kind: crate::config::Transport) -> Option<&Arc<dyn Transport>> {
        self.transports.iter().find(|t| t.kind() == kind)
    }

    /// Every transport's shared receive buffers, by worker.
    pub fn receive_buffers(&self) -> Vec<transport::ReceiveBuffers> {
        self.transports
            .iter()
            .flat_map(|t| t.receive_buffers())
            .collect()
    }

    /// Every transport's completion queues, by worker.
    pub fn completion_queues(&self) -> Vec<transport::CompletionQueues> {
        self.transports
            .iter()
            .flat_map(|t| t.completion_queues())
            .collect()
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
            arena_windows = s.parcels,
            arena_bytes = s.total_bytes,
            connections = self.queues_open.load(Ordering::Relaxed),
            "arena usage"
        );
    }
}

/// A running target.
pub struct Target {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// The workers' thread IDs (what [`Target::lost_worker`] looks for in /proc).
    worker_tids: Vec<libc::pid_t>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("addrs", &self.local_addrs())
            .finish()
    }
}

impl Target {
    /// Starts a target from the configuration text `text(port)` on a port `pick` chooses, and
    /// on another when that one was taken between the pick and the listener's bind (8 tries
    /// in all): for a caller that owns no port of its own (`rdmablk-perf --embedded`, tests).
    pub fn start_on_picked_port(
        text: impl Fn(u16) -> String,
        mut pick: impl FnMut() -> u16,
    ) -> Result<Target, TargetError> {
        let mut tries = 1;
        loop {
            match Config::from_str(&text(pick())).map_err(TargetError::from) {
                Ok(cfg) => match Target::start(cfg) {
                    Err(e) if e.is_addr_in_use() && tries < 8 => tries += 1,
                    r => return r,
                },
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts a target for a validated configuration: opens the transports (for RDMA: the
    /// device, with the arena registered on it), opens the namespaces, starts the workers and
    /// the listeners.
    pub fn start(cfg: Config) -> Result<Target, TargetError> {
        let shared = open_shared(cfg)?;
        let workers_n = shared.counters_by_worker.len();
        let mut target = Target {
            shared: Arc::clone(&shared),
            workers: Vec::new(),
            worker_tids: Vec::new(),
        };
        let mut senders = Vec::new();
        for index in 0..workers_n {
            let (tx, handle, tid) = worker::spawn(index, Arc::clone(&shared))?;
            target.workers.push(handle);
            target.worker_tids.push(tid);
            senders.push(tx);
        }
        let _ = shared.workers.set(senders);
        for s in shared.subsystems.load().iter() {
            for ns in s.namespaces().iter() {
                runtime::gateways::attach(&shared, &s.nqn, ns);
            }
        }
        for (index, l) in shared.fixed.listeners.iter().enumerate() {
            let running = Port::start(&shared, l, index)?;
            shared.lock_ports().push(running);
        }
        shared.log_arena("started");
        Ok(target)
    }

    /// The addresses listened on (with the real port where the configuration said 0), in
    /// configuration order.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.shared.lock_ports().iter().map(|l| l.addr).collect()
    }

    /// A worker thread that is gone while the target runs, and how: it returned or panicked,
    /// or the kernel killed it without unwinding (a kernel BUG in a system call it made, e.g.
    /// Linux 6.1's hardened-usercopy BUG in TCP receive, `docs/tcp.md`; its oops is in dmesg).
    /// Either way its connections and namespace queues are dead and nothing would notice:
    /// `rdmablk-target` checks every second and exits non-zero, for the service manager to
    /// restart it.
    pub fn lost_worker(&self) -> Option<(usize, &'static str)> {
        self.workers
            .iter()
            .zip(&self.worker_tids)
            .enumerate()
            .find_map(|(i, (h, tid))| {
                if h.is_finished() {
                    return Some((
                        i,
                        "ended while the target runs (see the log above: a panic?)",
                    ));
                }
                // A thread ended without unwinding never marks its handle finished; it is
                // gone from the process's task list.
                let task = format!("/proc/self/task/{tid}");
                (!std::path::Path::new(&task).exists()).then_some((
                    i,
                    "was killed by the kernel without unwinding (a kernel BUG: see dmesg)",
                ))
            })
    }

    /// What the control socket, SIGHUP and `rdmablk-ctl` act on.
    pub fn handle(&self) -> TargetHandle {
        TargetHandle(Arc::clone(&self.shared))
    }

    /// Arena accounting (bytes in use return to 0 when every host has gone).
    pub fn arena_stats(&self) -> ArenaStats {
        self.shared.arena.stats()
    }

    /// Commands waiting for a data-pool buffer now, on every worker (as of the workers' last
    /// housekeeping tick).
    pub fn data_pool_waiting(&self) -> u64 {
        self.shared
            .counters_by_worker
            .iter()
            .map(|w| w.pool.waiting.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Every worker's shared receive buffers (NVMe/RDMA SRQs made so far).
    pub fn receive_buffers(&self) -> Vec<transport::ReceiveBuffers> {
        self.shared.receive_buffers()
    }

    /// Every worker's completion queues (NVMe/RDMA).
    pub fn completion_queues(&self) -> Vec<transport::CompletionQueues> {
        self.shared.completion_queues()
    }

    /// The remote key of the arena's memory region (RDMA). The region is registered without
    /// remote access, so the key lets no host touch the arena (isolation tests use it as a
    /// guess).
    pub fn arena_rkey(&self) -> Option<u32> {
        self.shared.arena.mr().map(|mr| mr.rkey())
    }

    /// Queues connected right now.
    pub fn queues_open(&self) -> usize {
        self.shared.queues_open.load(Ordering::Acquire)
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
        let listeners = std::mem::take(&mut *self.shared.lock_ports());
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
        self.0.fixed.control.socket.clone()
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.0
    }

    /// The metrics endpoint the configuration names (`[metrics] address`), if any.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.0.fixed.metrics.as_ref().map(|m| m.address)
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
        let ls = self.0.lock_ports();
        let l = ls
            .iter()
            .find(|l| l.addr == want)
            .ok_or_else(|| format!("no listener on {addr}"))?;
        l.drain();
        tracing::info!(addr, "listener drained: no new connections");
        Ok(())
    }
}

/// What every thread of a target for `cfg` shares, with nothing running yet: the arena, the
/// transports opened, the subsystems and their namespaces. [`Target::start`] then starts the
/// workers and the listeners; the fuzz target `tcp_queue` drives a poll group itself
/// ([`transport::tcp::fuzz`]).
pub(crate) fn open_shared(cfg: Config) -> Result<Arc<Shared>, TargetError> {
    cfg.validate()?;
    runtime::open_files::raise_to(
        u64::from(cfg.limits.max_connections) + runtime::open_files::BESIDE_QUEUES,
    );
    let arena = Arena::map(&cfg.arena)?;
    let (transports, arena) = transport::open_served(&cfg, arena)?;
    let arena = Arc::new(arena);
    let namespaces = NamespaceTable::default();
    let subsystems = open_subsystems(&cfg, &namespaces)?;
    let workers_n = cfg.target.worker_threads.max(1) as usize;
    Ok(Arc::new(Shared {
        live: ArcSwap::from_pointee(cfg.clone()),
        subsystems: ArcSwap::from_pointee(subsystems),
        namespaces,
        workers: OnceLock::new(),
        controllers: ControllerTable::default(),
        arena,
        transports,
        epoch: Instant::now(),
        stop: AtomicBool::new(false),
        queues_open: AtomicUsize::new(0),
        refusing: AtomicUsize::new(0),
        final_flush_failures: Mutex::new(Vec::new()),
        discovery: Arc::new(Subsystem::discovery(
            cfg.target.discovery_nqn.as_deref().unwrap_or(DISCOVERY_NQN),
        )),
        discovery_genctr: AtomicU64::new(1),
        ports: Mutex::new(Vec::new()),
        next_listener_id: AtomicU64::new(1),
        reload_lock: Mutex::new(()),
        config_path: OnceLock::new(),
        counters_by_worker: (0..workers_n).map(|_| Arc::default()).collect(),
        counters: TargetCounters::default(),
        fences: runtime::fence::Fences::default(),
        fixed: cfg,
    }))
}

fn open_subsystems(
    cfg: &Config,
    table: &NamespaceTable,
) -> Result<Vec<Arc<Subsystem>>, TargetError> {
    let mut subsystems = Vec::new();
    for s in &cfg.subsystems {
        let mut namespaces = Vec::new();
        for n in &s.namespaces {
            namespaces.push(open_namespace(
                &s.nqn,
                n,
                table,
                cfg.target.state_dir.as_deref(),
            )?);
        }
        subsystems.push(Arc::new(Subsystem::new(s, namespaces)));
    }
    Ok(subsystems)
}

/// Opens namespace `n` of subsystem `nqn` and gives it a slot in `table`; with a state
/// directory, its reservations persist there (and come back from there).
pub(crate) fn open_namespace(
    nqn: &str,
    n: &crate::config::NamespaceConfig,
    table: &NamespaceTable,
    state_dir: Option<&std::path::Path>,
) -> Result<Arc<Namespace>, TargetError> {
    let mut ns = Namespace::open(n).map_err(|source| TargetError::Namespace {
        nqn: nqn.to_owned(),
        nsid: n.nsid,
        source,
    })?;
    use crate::namespace::reservation::{shared_dir::DirStore, Reservations};
    // Shared with other gateways (a directory they name, or the storage's own place such as
    // an RBD image's metadata): the state lives there, not in state_dir.
    let store = match &n.shared_reservations {
        Some(dir) => DirStore::open(dir)
            .map(|s| Some(Arc::new(s) as Arc<dyn crate::namespace::reservation::SharedStore>))
            .map_err(|e| format!("shared_reservations {}: {e}", dir.display())),
        None => ns.backend().reservation_store(),
    };
    let resv = match store {
        Ok(Some(store)) => Reservations::open_shared(store),
        Ok(None) => Reservations::open(
            state_dir.map(|d| crate::namespace::reservation::state_file(d, nqn, n.nsid)),
        ),
        Err(e) => Err(e),
    }
    .map_err(|why| TargetError::Reservations {
        nqn: nqn.to_owned(),
        nsid: n.nsid,
        why,
    })?;
    ns.set_reservations(resv);
    tracing::info!(subsystem = %nqn, nsid = n.nsid, kind = n.backend.kind(),
        blocks = ns.num_blocks(), block_size = ns.block_size(), "namespace open");
    Ok(table.insert(ns))
}
