//! Opening what a target serves, before anything runs: [`open_shared`] builds the state
//! every thread shares (arena, transports, subsystems), [`open_namespace`] opens one
//! namespace with its reservations.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use arc_swap::ArcSwap;

use super::subsystems::controller::ControllerTable;
use super::subsystems::ns_table::NamespaceTable;
use super::subsystems::subsystem::Subsystem;
use super::{runtime, transport, Shared, TargetError};
use crate::arena::Arena;
use crate::config::{Config, DISCOVERY_NQN};
use crate::metrics::TargetCounters;
use crate::namespace::Namespace;

/// What every thread of a target for `cfg` shares, with nothing running yet: the arena, the
/// transports opened, the subsystems and their namespaces.
/// [`Target::start`](super::Target::start) then starts the workers and the listeners; the
/// fuzz target `tcp_queue` drives a poll group itself ([`transport::tcp::fuzz`]).
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
