//! Why the target could not start, or could not stop cleanly ([`TargetError`]).

use crate::arena::ArenaError;
use crate::backend::BackendError;
use crate::config::ConfigError;

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
