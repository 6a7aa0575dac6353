//! What every thread of a running target shares ([`Shared`]): the configuration, the
//! subsystems and namespaces, the arena, the transports, the ports and the counters.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use arc_swap::ArcSwap;

use super::runtime::port::Port;
use super::subsystems::controller::ControllerTable;
use super::subsystems::ns_table::NamespaceTable;
use super::subsystems::subsystem::Subsystem;
use super::transport::Transport;
use super::{runtime, subsystems, transport, worker};
use crate::arena::Arena;
use crate::config::{Config, DISCOVERY_NQN};
use crate::metrics::{TargetCounters, WorkerCounters};

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
    /// Set by [`Target::shutdown`](super::Target::shutdown): stop accepting, drain, flush, exit.
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

    /// Every transport's data placed straight into command buffers, by worker.
    pub fn data_placed(&self) -> Vec<transport::DataPlaced> {
        self.transports
            .iter()
            .flat_map(|t| t.data_placed())
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
