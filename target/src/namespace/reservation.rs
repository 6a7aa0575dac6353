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

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwapOption;
use rdmablk::nvme::reservation::{notice, racqa, rrega, rrela, Registrant, ResvType};

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

/// What the access check reads: who holds which type, and who is registered.
#[derive(Debug)]
struct Snapshot {
    rtype: ResvType,
    holder: HostId,
    registered: Vec<HostId>,
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

    /// Publishes `s` for the access check.
    fn publish(&self, s: &State) {
        match s.holder {
            Some((holder, rtype)) => {
                self.snapshot.store(Some(Arc::new(Snapshot {
                    rtype,
                    holder,
                    registered: s.regs.iter().map(|r| r.host).collect(),
                })));
                self.held.store(true, Ordering::Release);
            }
            None => {
                self.held.store(false, Ordering::Release);
                self.snapshot.store(None);
            }
        }
    }

    /// Whether `host` may run an I/O command that writes (`write`) or reads. No reservation
    /// held: one relaxed load.
    #[inline]
    pub fn allows(&self, host: &HostId, write: bool) -> bool {
        if !self.held.load(Ordering::Relaxed) {
            return true;
        }
        self.allows_held(host, write)
    }

    #[cold]
    fn allows_held(&self, host: &HostId, write: bool) -> bool {
        let Some(s) = &*self.snapshot.load() else {
            return true;
        };
        if &s.holder == host {
            return true;
        }
        if !write && !s.rtype.excludes_reads() {
            return true;
        }
        s.rtype.registrants_write() && s.registered.contains(host)
    }

    /// Reservation Register: `action` RREGA, keys CRKEY and NRKEY, `cptpl` CPTPL (00b: no
    /// change, 10b: do not persist, 11b: persist through power loss).
    pub fn register(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
        cptpl: u8,
    ) -> Result<Notices, ResvError> {
        self.register_announced(host, action, iekey, crkey, nrkey, cptpl)
            .map(|(n, _)| n)
    }

    /// [`Core::register`], with what announces the change to the other gateways.
    pub fn register_announced(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
        cptpl: u8,
    ) -> Result<(Notices, Option<Announce>), ResvError> {
        match cptpl {
            0b00 | 0b10 => {}
            0b11 if self.can_persist() => {}
            _ => return Err(ResvError::InvalidField),
        }
        self.change(|s| {
            let mut notices = Vec::new();
            let me = s.regs.iter().position(|r| &r.host == host);
            match action {
                rrega::REGISTER => match me {
                    None => s.regs.push(Reg {
                        host: *host,
                        key: nrkey,
                    }),
                    Some(i) if s.regs[i].key == nrkey => {}
                    Some(_) => return Err(ResvError::Conflict),
                },
                rrega::UNREGISTER => {
                    let i = me.ok_or(ResvError::Conflict)?;
                    if !iekey && s.regs[i].key != crkey {
                        return Err(ResvError::Conflict);
                    }
                    s.regs.remove(i);
                    if s.holder.is_some_and(|(h, _)| &h == host) {
                        let rtype = s.holder.map(|(_, t)| t).unwrap_or(ResvType::WriteExclusive);
                        // All-registrants: the reservation stays with the first registrant left.
                        s.holder = match s.regs.first() {
                            Some(r) if rtype.all_registrants() => Some((r.host, rtype)),
                            _ => None,
                        };
                        // Registrants Only: the others lose what registration gave them.
                        if s.holder.is_none() && rtype.registrants_write() {
                            notices = released(s, host);
                        }
                    }
                }
                rrega::REPLACE => {
                    let i = me.ok_or(ResvError::Conflict)?;
                    if !iekey && s.regs[i].key != crkey {
                        return Err(ResvError::Conflict);
                    }
                    s.regs[i].key = nrkey;
                }
                _ => return Err(ResvError::InvalidAction),
            }
            s.generation = s.generation.wrapping_add(1);
            match cptpl {
                0b10 => s.ptpl = false,
                0b11 => s.ptpl = true,
                _ => {}
            }
            Ok(notices)
        })
    }

    /// Reservation Acquire: `action` RACQA, type `rtype`, keys CRKEY and PRKEY. The hosts a
    /// preempt unregistered (other than the sender) come back: their commands in flight are
    /// the caller's to wait for (preempt and abort).
    pub fn acquire(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
        prkey: u64,
    ) -> Result<Notices, ResvError> {
        self.acquire_announced(host, action, iekey, rtype, crkey, prkey)
            .map(|(n, _)| n)
    }

    /// [`Core::acquire`], with what announces the change to the other gateways.
    pub fn acquire_announced(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
        prkey: u64,
    ) -> Result<(Notices, Option<Announce>), ResvError> {
        if iekey {
            return Err(ResvError::InvalidField);
        }
        let rtype = ResvType::from_u8(rtype).ok_or(ResvError::InvalidField)?;
        self.change(|s| {
            s.check_key(host, crkey)?;
            let preempted = match action {
                racqa::ACQUIRE => {
                    match s.holder {
                        None => s.holder = Some((*host, rtype)),
                        Some((h, t)) if &h == host && t == rtype => {}
                        Some(_) => return Err(ResvError::Conflict),
                    }
                    // Acquire leaves the generation as it is.
                    Vec::new()
                }
                racqa::PREEMPT | racqa::PREEMPT_AND_ABORT => {
                    let before = s.holder.map(|(_, t)| t);
                    let gone = preempt(s, host, rtype, prkey)?;
                    s.generation = s.generation.wrapping_add(1);
                    let mut n: Notices = gone
                        .into_iter()
                        .map(|h| (h, notice::REGISTRATION_PREEMPTED))
                        .collect();
                    // The type changed: the registrants left hear the reservation was released.
                    if before.is_some_and(|t| Some(t) != s.holder.map(|(_, t)| t)) {
                        n.extend(released(s, host));
                    }
                    n
                }
                _ => return Err(ResvError::InvalidAction),
            };
            Ok(preempted)
        })
    }

    /// Reservation Release: `action` RRELA, type `rtype`, key CRKEY. A clear returns the hosts
    /// it unregistered (other than the sender).
    pub fn release(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
    ) -> Result<Notices, ResvError> {
        self.release_announced(host, action, iekey, rtype, crkey)
            .map(|(n, _)| n)
    }

    /// [`Core::release`], with what announces the change to the other gateways.
    pub fn release_announced(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
    ) -> Result<(Notices, Option<Announce>), ResvError> {
        if iekey {
            return Err(ResvError::InvalidField);
        }
        self.change(|s| {
            s.check_key(host, crkey)?;
            let mut others = Vec::new();
            match action {
                rrela::RELEASE => match s.holder {
                    Some((h, t)) if &h == host => {
                        if t as u8 != rtype {
                            return Err(ResvError::Conflict);
                        }
                        s.holder = None;
                        if t.registrants_write() {
                            others = released(s, host);
                        }
                    }
                    // Not the holder (or nothing held): nothing to release, success.
                    _ => {}
                },
                rrela::CLEAR => {
                    others = s
                        .regs
                        .iter()
                        .map(|r| r.host)
                        .filter(|h| h != host)
                        .map(|h| (h, notice::RESERVATION_PREEMPTED))
                        .collect();
                    s.regs.clear();
                    s.holder = None;
                    s.generation = s.generation.wrapping_add(1);
                }
                _ => return Err(ResvError::InvalidAction),
            }
            Ok(others)
        })
    }

    /// The report: generation, the type held (0: none), PTPLS and every registrant.
    pub fn report(&self) -> (u32, u8, bool, Vec<Registrant>) {
        self.refresh();
        let s = self.lock();
        let (holder, rtype) = match s.holder {
            Some((h, t)) => (Some(h), t as u8),
            None => (None, 0),
        };
        let all = s.holder.is_some_and(|(_, t)| t.all_registrants());
        let regs = s
            .regs
            .iter()
            .map(|r| Registrant {
                cntlid: 0xFFFF,
                holds: all || holder == Some(r.host),
                rkey: r.key,
                hostid: r.host,
            })
            .collect();
        (s.generation, rtype, s.ptpl, regs)
    }
}

/// "Reservation released" for every registrant but `host`.
fn released(s: &State, host: &HostId) -> Notices {
    s.regs
        .iter()
        .filter(|r| &r.host != host)
        .map(|r| (r.host, notice::RESERVATION_RELEASED))
        .collect()
}

/// Preempt (and abort): nvmet's cases in its order. The hosts unregistered, but the sender.
fn preempt(
    s: &mut State,
    host: &HostId,
    rtype: ResvType,
    prkey: u64,
) -> Result<Preempted, ResvError> {
    // Unregisters every registrant with key `prkey` (the sender too, when its key matches);
    // a conflict if none has it.
    fn drop_key(
        s: &mut State,
        host: &HostId,
        prkey: u64,
        keep: Option<&HostId>,
    ) -> Result<Preempted, ResvError> {
        let before = s.regs.len();
        let mut gone = Vec::new();
        s.regs.retain(|r| {
            let drop = r.key == prkey && Some(&r.host) != keep;
            if drop && &r.host != host {
                gone.push(r.host);
            }
            !drop
        });
        if s.regs.len() == before {
            return Err(ResvError::Conflict);
        }
        Ok(gone)
    }
    match s.holder {
        None => drop_key(s, host, prkey, None),
        Some((_, t)) if t.all_registrants() => {
            if prkey == 0 {
                s.holder = Some((*host, rtype));
                let gone = s
                    .regs
                    .iter()
                    .map(|r| r.host)
                    .filter(|h| h != host)
                    .collect();
                s.regs.retain(|r| &r.host == host);
                Ok(gone)
            } else {
                drop_key(s, host, prkey, None)
            }
        }
        Some((h, _)) if &h == host => {
            // The holder preempting itself changes the type; PRKEY does not matter.
            s.holder = Some((*host, rtype));
            Ok(Vec::new())
        }
        Some((h, _)) => {
            let holder_key = s.regs.iter().find(|r| r.host == h).map(|r| r.key);
            if holder_key == Some(prkey) {
                s.holder = Some((*host, rtype));
                drop_key(s, host, prkey, Some(host))
            } else if prkey != 0 {
                drop_key(s, host, prkey, None)
            } else {
                Err(ResvError::InvalidField)
            }
        }
    }
}

/// The state file of namespace `nsid` of subsystem `nqn` under `state_dir`:
/// `reservations/<nqn>-<nsid>.json` (characters a file name cannot hold become `_`).
pub fn state_file(state_dir: &Path, nqn: &str, nsid: u32) -> PathBuf {
    let name: String = nqn
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-:".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    state_dir
        .join("reservations")
        .join(format!("{name}-{nsid}.json"))
}

/// The fuzz target `reservation_state` (fuzz/fuzz_targets/): decodes `text` as a state file
/// and as a shared document, as a restart and another gateway hand them in. Panics where a
/// decoded one breaks what the rest of the code relies on: it re-encodes to a text that
/// decodes to the same, a document's log stays within its bound, a host is registered once
/// and the holder is a registrant.
#[doc(hidden)]
pub fn fuzz_persisted(text: &str) {
    let check = |s: &State| {
        assert_eq!(persist::decode(&persist::encode(s)).as_ref(), Ok(s));
        for (i, r) in s.regs.iter().enumerate() {
            assert!(s.regs[..i].iter().all(|o| o.host != r.host), "a host twice");
        }
        if let Some((h, _)) = s.holder {
            assert!(
                s.regs.iter().any(|r| r.host == h),
                "a holder not registered"
            );
        }
    };
    if let Ok(s) = persist::decode(text) {
        check(&s);
    }
    if let Ok(d) = persist::decode_doc(text) {
        assert!(
            d.log.len() <= 1024,
            "a document of {} log entries",
            d.log.len()
        );
        check(&d.state);
        assert_eq!(
            persist::decode_doc(&persist::encode_doc(&d)).as_ref(),
            Ok(&d)
        );
    }
}

mod persist;
pub mod shared;
pub mod shared_dir;

pub use shared::{Announce, RemoteHook, SharedStore};
use shared::{Doc, LogEntry};

#[cfg(test)]
mod tests;
