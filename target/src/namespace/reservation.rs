//! A namespace's reservations (NVMe Base 2.0, 8.19): registrants by host identifier, the
//! holder, the generation, and the access check every I/O command passes.
//!
//! The semantics are Linux nvmet's (`drivers/nvme/target/pr.c`, Linux 6.13 and later), the
//! reference peer: a registration and the reservation belong to the 128-bit host identifier
//! (every controller of a host shares them), the generation counts successful Register
//! commands, preempts and clears, and a holder preempting itself changes the type whatever
//! PRKEY says (blktests nvme/054 relies on it). Where nvmet and the specification differ,
//! `docs/conformance.md` ("Reservations") says which this follows.
//!
//! Commands change the state under a mutex (they are rare); the I/O path reads an immutable
//! snapshot swapped whole ([`ArcSwapOption`]), and with no reservation held only a relaxed load.
//!
//! Persist Through Power Loss: with a state file (`[target] state_dir`), a host may ask for it
//! (Register CPTPL 11b, Set Features 0x83); from then on each change is written to the file
//! and synced (temporary file, fsync, rename, fsync of the directory) before the command
//! completes, and a namespace opened later starts from it. A change that cannot be written is
//! not made.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwapOption;
use rdmablk::nvme::reservation::ResvType;

/// A host identifier (Connect's HOSTID).
pub type HostId = [u8; 16];

/// Why a reservation command failed (the caller maps these to NVMe statuses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResvError {
    /// Reservation Conflict.
    Conflict,
    /// Invalid Field in Command.
    InvalidField,
    /// An action value that is not defined: Invalid Opcode, as nvmet answers.
    InvalidAction,
    /// Persist Through Power Loss is on and the state file could not be written (the change
    /// was not made): Internal Error.
    Persist,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Reg {
    host: HostId,
    key: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct State {
    /// In registration order (a replace keeps the place).
    regs: Vec<Reg>,
    /// The holder (for types 5 and 6, the registrant that acquired: every registrant holds).
    holder: Option<(HostId, ResvType)>,
    generation: u32,
    /// Persist Through Power Loss (only with a state file).
    ptpl: bool,
}

impl State {
    /// Acquire and Release need the sender registered with CRKEY (IEKEY is not honoured).
    fn check_key(&self, host: &HostId, crkey: u64) -> Result<(), ResvError> {
        match self.regs.iter().find(|r| &r.host == host) {
            Some(r) if r.key == crkey => Ok(()),
            _ => Err(ResvError::Conflict),
        }
    }
}

/// What a command tells other hosts (Reservation Notification log): each host and the
/// notice type (`rdmablk::nvme::reservation::notice`).
pub type Notices = Vec<(HostId, u8)>;

/// Hosts whose registration a preempt or clear removed (other than the sender).
type Preempted = Vec<HostId>;

/// A namespace's reservations: the state ([`Core`]) and, when gateways share it, the thread
/// that follows the other gateways' changes ([`shared`]).
#[derive(Debug, Default)]
pub struct Reservations {
    core: Arc<Core>,
    /// Stops the watcher thread when the namespace closes.
    _watching: Option<shared::Watching>,
}

impl std::ops::Deref for Reservations {
    type Target = Core;
    fn deref(&self) -> &Core {
        &self.core
    }
}

#[derive(Debug, Default)]
pub struct Core {
    state: Mutex<State>,
    held: AtomicBool,
    snapshot: ArcSwapOption<Snapshot>,
    /// Where the state persists (`None`: Persist Through Power Loss is not offered).
    file: Option<PathBuf>,
    /// The store shared with other gateways (`shared_reservations`, RBD image metadata).
    store: Option<Arc<dyn SharedStore>>,
    /// The epoch of the shared document the state is.
    epoch: AtomicU64,
    /// What runs here when another gateway changed the state (set once the target runs).
    hook: Mutex<Option<Arc<dyn RemoteHook>>>,
}

impl Reservations {
    /// Reservations persisted in `file` (if given): a persisted state there is restored.
    pub fn open(file: Option<PathBuf>) -> Result<Reservations, String> {
        let mut c = Core {
            file,
            ..Core::default()
        };
        if let Some(f) = &c.file {
            match std::fs::read_to_string(f) {
                Ok(text) => {
                    let s = persist::decode(&text)
                        .map_err(|e| format!("{}: {e} (fix or remove the file)", f.display()))?;
                    c.publish(&s);
                    c.state = Mutex::new(s);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{}: {e}", f.display())),
            }
        }
        Ok(Reservations {
            core: Arc::new(c),
            _watching: None,
        })
    }

    /// Reservations shared with the other gateways of the namespace through `store`: the
    /// state stored there is adopted (or, when Persist Through Power Loss is off and no other
    /// gateway has the namespace open, cleared: the namespace lost power), and a thread
    /// follows the other gateways' changes from now on.
    pub fn open_shared(store: Arc<dyn SharedStore>) -> Result<Reservations, String> {
        let core = Arc::new(Core {
            store: Some(Arc::clone(&store)),
            ..Core::default()
        });
        let doc = shared::join(&core, &store)?;
        let watching = shared::watch(&core, store, doc)?;
        Ok(Reservations {
            core,
            _watching: Some(watching),
        })
    }
}

impl Core {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets what runs here when another gateway changes the state.
    pub fn set_hook(&self, hook: Arc<dyn RemoteHook>) {
        *self.hook.lock().unwrap_or_else(|p| p.into_inner()) = Some(hook);
    }

    fn hook(&self) -> Option<Arc<dyn RemoteHook>> {
        self.hook.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether gateways share the state.
    pub fn is_shared(&self) -> bool {
        self.store.is_some()
    }

    /// Whether Persist Through Power Loss can be offered (RESCAP bit 0).
    pub fn can_persist(&self) -> bool {
        self.file.is_some() || self.store.is_some()
    }

    /// Persist Through Power Loss is on (Get Features 0x83, the report's PTPLS).
    pub fn ptpl(&self) -> bool {
        self.lock().ptpl
    }

    /// Set Features 0x83: turns Persist Through Power Loss on or off.
    /// Shared: the other gateways need not enforce it (it decides only what a gateway
    /// opening the namespace alone does), so it does not wait for them.
    pub fn set_ptpl(&self, on: bool) -> Result<(), ResvError> {
        if on && !self.can_persist() {
            return Err(ResvError::InvalidField);
        }
        let (_, announce) = self.change(|s| {
            s.ptpl = on;
            Ok(Vec::new())
        })?;
        if let Some(a) = announce {
            // Nobody needs to wait for it: the other gateways hear of it in the background.
            let _ = std::thread::Builder::new()
                .name("rdmablk-announce".into())
                .spawn(move || {
                    if let Err(e) = a() {
                        tracing::warn!(error = %e, "a PTPL change not acknowledged by every gateway");
                    }
                });
        }
        Ok(())
    }

    /// Runs command `f` on the state: on a copy, made the state once written (to the state
    /// file when persisting, to the shared store when shared). Shared: `f` runs on the state
    /// last stored by any gateway, and again if another gateway stored a change first; the
    /// announcement returned waits for every other gateway to enforce the change.
    fn change(
        &self,
        f: impl Fn(&mut State) -> Result<Notices, ResvError>,
    ) -> Result<(Notices, Option<Announce>), ResvError> {
        let mut guard = self.lock();
        let Some(store) = &self.store else {
            let mut next = guard.clone();
            let n = f(&mut next)?;
            self.commit(&mut guard, next)?;
            return Ok((n, None));
        };
        for _ in 0..shared::SWAP_TRIES {
            let (text, mut doc) = shared::load(store.as_ref()).map_err(|e| {
                tracing::error!(store = %store.describe(), error = %e,
                    "shared reservation state unreadable: the command fails, nothing changed");
                ResvError::Persist
            })?;
            if text.is_none() {
                // A new (or removed) document: its epochs start above any seen before.
                doc.epoch = shared::fresh_epoch(self.epoch.load(Ordering::Acquire));
            }
            self.adopt(&mut guard, &doc);
            let mut next = doc.state.clone();
            let n = f(&mut next)?;
            if next == doc.state {
                // Nothing to change; still, the answer holds only once every other gateway
                // enforces this state (a retry after a change that is still being announced).
                return Ok((n, store.announce(doc.epoch)));
            }
            let lost: Vec<HostId> = doc
                .state
                .regs
                .iter()
                .map(|r| r.host)
                .filter(|h| !next.regs.iter().any(|r| &r.host == h))
                .collect();
            doc.advance(next, store.me(), &n, lost);
            match store.swap(text.as_deref(), &persist::encode_doc(&doc), doc.epoch) {
                Ok(Some(announce)) => {
                    self.adopt(&mut guard, &doc);
                    return Ok((n, Some(announce)));
                }
                Ok(None) => continue,
                Err(e) => {
                    tracing::error!(store = %store.describe(), error = %e,
                        "shared reservation state not written: the command fails, nothing changed");
                    return Err(ResvError::Persist);
                }
            }
        }
        tracing::error!(store = %store.describe(),
            "shared reservation state: other gateways kept changing it; the command fails");
        Err(ResvError::Persist)
    }

    /// Makes the shared document `doc` the state, if it is newer than what is (or `force`).
    fn adopt_doc(&self, s: &mut State, doc: &Doc, force: bool) {
        let now = self.epoch.load(Ordering::Acquire);
        if force || doc.epoch > now || now == 0 {
            *s = doc.state.clone();
            self.epoch.store(doc.epoch, Ordering::Release);
            self.publish(s);
        }
    }

    fn adopt(&self, s: &mut State, doc: &Doc) {
        self.adopt_doc(s, doc, false);
    }

    /// Shared: the state as the store has it now (a Report's answer); kept as it is if the
    /// store cannot be read.
    fn refresh(&self) {
        let Some(store) = &self.store else { return };
        match shared::load(store.as_ref()) {
            Ok((_, doc)) => {
                let mut s = self.lock();
                self.adopt(&mut s, &doc);
            }
            Err(e) => tracing::warn!(store = %store.describe(), error = %e,
                "shared reservation state unreadable: reporting this gateway's"),
        }
    }

    /// Makes `next` the state: written first when it persists (or the file removed when it
    /// stops persisting), then published.
    fn commit(&self, s: &mut State, next: State) -> Result<(), ResvError> {
        if let Some(f) = &self.file {
            let written = if next.ptpl {
                persist::write(f, &next)
            } else if s.ptpl {
                persist::remove(f)
            } else {
                Ok(())
            };
            if let Err(e) = written {
                tracing::error!(file = %f.display(), error = %e,
                    "reservation state not persisted: the command fails, nothing changed");
                return Err(ResvError::Persist);
            }
        }
        *s = next;
        self.publish(s);
        Ok(())
    }
}

mod access;
mod commands;
mod persist;
pub mod shared;
pub mod shared_dir;

use access::Snapshot;
#[doc(hidden)]
pub use persist::fuzz_persisted;
pub use persist::state_file;
pub use shared::{Announce, RemoteHook, SharedStore};
use shared::{Doc, LogEntry};

#[cfg(test)]
mod tests;
