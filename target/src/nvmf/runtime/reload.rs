//! Live reconfiguration: a new configuration is validated, then applied all or nothing.
//!
//! What may change while hosts are connected: subsystems (added, removed), their namespaces
//! (added, removed, replaced when a namespace's settings change; a namespace's `hosts` and
//! `qos` change in place) and host lists, listeners, referrals. Everything else (arena, threads, limits, keep-alive settings) changes only with
//! a restart, and a reload that changes it is refused naming the keys.
//!
//! Order (what can fail comes first, so a refusal leaves the running target untouched):
//! 1. open every new namespace (a slot in the namespace table each) and have every worker
//!    open its queue to it; bind every new listener. Any failure undoes these and refuses.
//! 2. publish: the new subsystem and host lists are swapped in; controllers of removed
//!    subsystems, and of hosts no longer allowed, are torn down; controllers whose namespaces
//!    changed (for their host: a namespace it saw or sees) get a Namespace Attribute Changed
//!    event; discovery controllers a Discovery Log
//!    Change event.
//! 3. retire: workers close their queues to removed namespaces once the I/O already in
//!    flight there is done, flush them, and the namespaces are closed; removed listeners stop
//!    and their connections close.
//!
//! # Modules
//! - `plan`: what differs, and the keys only a restart may change.
//! - `prepare`: step 1 (open, bind; undone on failure).
//! - `publish`: steps 2 and 3 (swap in, tell controllers, retire).
//! - `workers`: messages to every worker, and retiring a namespace.

mod plan;
mod prepare;
mod publish;
mod workers;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::config::{Config, ConfigError};
use crate::nvmf::TargetHandle;
use plan::{restart_only_changes, Plan};
use prepare::prepare;
use publish::publish;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(
        "{} only change with a restart: put the running values back in the file, or restart \
         the target (nothing was changed)", keys.join(", ")
    )]
    RestartNeeded { keys: Vec<String> },
    #[error("{0} (nothing was changed)")]
    Apply(String),
    #[error("no configuration file to reload (the target was started from a string)")]
    NoFile,
    #[error("the target is shutting down")]
    Stopping,
}

/// What a reload changed, one line per change (empty: the file says what runs).
pub type Changes = Vec<String>;

impl TargetHandle {
    /// Re-reads the configuration file the target was started with and applies it.
    pub fn reload(&self) -> Result<Changes, ReloadError> {
        let path = self.0.config_path.get().ok_or(ReloadError::NoFile)?;
        match Config::from_file(path) {
            Ok(cfg) => self.apply(cfg),
            Err(e) => {
                self.0
                    .counters
                    .reloads_refused
                    .fetch_add(1, Ordering::Relaxed);
                Err(e.into())
            }
        }
    }

    /// Applies `new` (see the module documentation).
    pub fn apply(&self, new: Config) -> Result<Changes, ReloadError> {
        let r = self.apply_inner(new);
        let c = &self.0.counters;
        match &r {
            Ok(_) => c.reloads_applied.fetch_add(1, Ordering::Relaxed),
            Err(_) => c.reloads_refused.fetch_add(1, Ordering::Relaxed),
        };
        r
    }

    fn apply_inner(&self, new: Config) -> Result<Changes, ReloadError> {
        let shared = &self.0;
        let _serial = shared.reload_lock.lock().unwrap_or_else(|p| p.into_inner());
        if shared.stopping() {
            return Err(ReloadError::Stopping);
        }
        new.validate()?;
        let old = shared.live.load_full();
        let keys = restart_only_changes(&old, &new);
        if !keys.is_empty() {
            return Err(ReloadError::RestartNeeded { keys });
        }
        let plan = Plan::of(&old, &new);
        let prepared = prepare(shared, &plan, &new)?;
        let changes = publish(shared, &plan, &new, prepared);
        shared.live.store(Arc::new(new));
        Ok(changes)
    }
}
