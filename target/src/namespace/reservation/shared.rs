//! Reservations shared by the gateways of one namespace (ANA multipath over one RBD image, or
//! one file served by two targets): a reservation taken through one gateway is enforced by
//! every other before the command completes to the host.
//!
//! The state lives in one document in a store every gateway reaches ([`SharedStore`]: a
//! directory for a shared file, the image's metadata for RBD), with an epoch every change
//! increments:
//!
//! 1. A command reads the document, runs on its state and writes the result back only if the
//!    document is still the one it read (compare and swap); if another gateway wrote first,
//!    it runs again on the newer state. Two hosts acquiring at once through two gateways:
//!    exactly one swap wins, and the other command sees the reservation held.
//! 2. The command then completes only once every other gateway that has the namespace open
//!    acknowledged the new epoch ([`Announce`]). A gateway acknowledges after it made the
//!    state its own (so its access check enforces it) and after the modifying commands of the
//!    hosts that lost their registration are no longer running there (preempt and abort drains
//!    every gateway, [`RemoteHook`]).
//! 3. A gateway joins before it reads: it is counted among those a change waits for from
//!    before its first read, so no change can complete unseen by it.
//!
//! `docs/reservations.md` gives the failure cases.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{persist, Core, HostId, Notices, State};

/// How often a command runs again because another gateway changed the state first, before
/// it fails.
pub(super) const SWAP_TRIES: usize = 64;

/// How many changes the document keeps the notices of (a gateway that falls further behind
/// misses the oldest notices; the state itself is always whole).
const LOG_LEN: usize = 32;

/// How long a change waits for the other gateways to acknowledge it.
pub const ANNOUNCE_TIMEOUT: Duration = Duration::from_secs(15);

/// Waits until every other gateway acknowledged a change (blocking; run off the worker).
pub type Announce = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// Where the gateways of a namespace keep its reservations.
pub trait SharedStore: Send + Sync + std::fmt::Debug {
    /// This gateway's name in the store (unique among the gateways).
    fn me(&self) -> &str;
    /// Where the document is (for messages).
    fn describe(&self) -> String;
    /// The document stored (`None`: none yet).
    fn load(&self) -> std::io::Result<Option<String>>;
    /// Stores `next` (at `epoch`) if the document stored is still `current` (`None`: none);
    /// `Ok(None)` if another gateway changed it first. On success, what waits until every
    /// other gateway acknowledged `epoch`.
    fn swap(
        &self,
        current: Option<&str>,
        next: &str,
        epoch: u64,
    ) -> std::io::Result<Option<Announce>>;
    /// What waits until every other gateway acknowledged `epoch` (already stored).
    fn announce(&self, epoch: u64) -> Option<Announce>;
    /// Whether another gateway has the namespace open.
    fn others_live(&self) -> std::io::Result<bool>;
    /// Waits up to `timeout` for the document to change (true; may be spurious).
    fn wait_change(&self, timeout: Duration) -> bool;
    /// This gateway enforces `epoch`.
    fn ack(&self, epoch: u64);
    /// This gateway closes the namespace: no change waits for it any more.
    fn leave(&self);
}

/// What a gateway does when another gateway changed the state (the target sets it: it knows
/// the controllers and the workers).
pub trait RemoteHook: Send + Sync + std::fmt::Debug {
    /// Delivers `notices` to this gateway's controllers, and returns once none of the
    /// modifying commands of the hosts in `lost` (they lost their registration) is still
    /// running here.
    fn changed(&self, lost: &[HostId], notices: &Notices);
}

/// One change's notices, by the gateway that made it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct LogEntry {
    pub(super) epoch: u64,
    pub(super) writer: String,
    pub(super) notices: Notices,
    /// Hosts the change unregistered (their writes in flight are drained everywhere).
    pub(super) lost: Vec<HostId>,
}

/// The shared document.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Doc {
    pub(super) epoch: u64,
    pub(super) state: State,
    pub(super) log: Vec<LogEntry>,
}

impl Doc {
    /// The next document: `state` at the next epoch, with `notices` by `writer` and the hosts
    /// it unregistered logged.
    pub(super) fn advance(
        &mut self,
        state: State,
        writer: &str,
        notices: &Notices,
        lost: Vec<HostId>,
    ) {
        self.epoch += 1;
        self.state = state;
        self.log.push(LogEntry {
            epoch: self.epoch,
            writer: writer.to_owned(),
            notices: notices.clone(),
            lost,
        });
        if self.log.len() > LOG_LEN {
            let extra = self.log.len() - LOG_LEN;
            self.log.drain(..extra);
        }
    }
}

/// The epoch a new document starts from: above `seen` and above any count of changes a
/// removed document could have reached (the time in ns), so that gateways never mistake a
/// recreated document for an old one.
pub(super) fn fresh_epoch(seen: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    seen.max(now)
}

/// Reads the document: its text (for the swap) and what it says (empty when none yet).
pub(super) fn load(store: &dyn SharedStore) -> Result<(Option<String>, Doc), String> {
    match store.load().map_err(|e| e.to_string())? {
        Some(text) => {
            let doc = persist::decode_doc(&text)
                .map_err(|e| format!("{}: {e} (fix or remove it)", store.describe()))?;
            Ok((Some(text), doc))
        }
        None => Ok((None, Doc::default())),
    }
}

/// Joins the gateways of `core`'s namespace (the store joined when it was opened): adopts the
/// stored state, or clears it when Persist Through Power Loss is off and no other gateway has
/// the namespace open (the namespace lost power).
pub(super) fn join(core: &Core, store: &Arc<dyn SharedStore>) -> Result<Doc, String> {
    for _ in 0..SWAP_TRIES {
        let (text, mut doc) = load(store.as_ref())?;
        if text.is_none() {
            doc.epoch = fresh_epoch(0);
        }
        let stale = !doc.state.ptpl && doc.state != State::default();
        if stale && !store.others_live().map_err(|e| e.to_string())? {
            let before = doc.clone();
            doc.advance(State::default(), store.me(), &Vec::new(), Vec::new());
            match store.swap(text.as_deref(), &persist::encode_doc(&doc), doc.epoch) {
                Ok(Some(_)) => {
                    tracing::info!(store = %store.describe(), epoch = before.epoch,
                        "reservations without Persist Through Power Loss cleared: no other gateway had the namespace open");
                }
                Ok(None) => continue,
                Err(e) => return Err(format!("{}: {e}", store.describe())),
            }
        }
        let mut s = core.lock();
        core.adopt(&mut s, &doc);
        drop(s);
        store.ack(doc.epoch);
        return Ok(doc);
    }
    Err(format!(
        "{}: other gateways kept changing the reservations while this one joined",
        store.describe()
    ))
}

/// Leaves the gateways and stops the watcher thread when dropped (the thread notices within
/// its wait, 100 ms).
#[derive(Debug)]
pub struct Watching(Arc<AtomicBool>, Arc<dyn SharedStore>);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
        self.1.leave();
    }
}

/// Starts the thread that follows the other gateways' changes, from `seen`.
pub(super) fn watch(
    core: &Arc<Core>,
    store: Arc<dyn SharedStore>,
    seen: Doc,
) -> Result<Watching, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let weak = Arc::downgrade(core);
    let flag = Arc::clone(&stop);
    let kept = Arc::clone(&store);
    std::thread::Builder::new()
        .name("rdmablk-resv".into())
        .spawn(move || follow(&weak, store.as_ref(), &flag, seen))
        .map_err(|e| format!("cannot start the reservation watcher thread: {e}"))?;
    Ok(Watching(stop, kept))
}

fn follow(core: &Weak<Core>, store: &dyn SharedStore, stop: &AtomicBool, mut seen: Doc) {
    // A change heard but not yet read (the store did not answer): read again, not only at
    // the next change.
    let mut unread = false;
    while !stop.load(Ordering::Acquire) {
        if !unread && !store.wait_change(Duration::from_millis(100)) {
            continue;
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
        let Some(core) = core.upgrade() else { return };
        let doc = match load(store) {
            Ok((_, d)) => d,
            Err(e) => {
                if !unread {
                    tracing::error!(error = %e, "shared reservation state unreadable; retrying");
                }
                unread = true;
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        unread = false;
        if doc == seen {
            store.ack(seen.epoch);
            continue;
        }
        // An older epoch is a document removed and made again (or a damaged clock): the
        // store is still the truth.
        let backwards = doc.epoch <= seen.epoch;
        if backwards {
            tracing::warn!(
                seen = seen.epoch,
                now = doc.epoch,
                "the shared reservation document went back in epochs: adopting it"
            );
        }
        {
            let mut s = core.lock();
            core.adopt_doc(&mut s, &doc, backwards);
        }
        // Hosts unregistered by any change since: each change's own list (a host that
        // registered again in between is still drained), and the difference when changes
        // were missed.
        let mut lost: Vec<HostId> = seen
            .state
            .regs
            .iter()
            .map(|r| r.host)
            .filter(|h| !doc.state.regs.iter().any(|r| &r.host == h))
            .collect();
        for e in doc.log.iter().filter(|e| e.epoch > seen.epoch) {
            for h in &e.lost {
                if !lost.contains(h) {
                    lost.push(*h);
                }
            }
        }
        let notices: Notices = doc
            .log
            .iter()
            .filter(|e| e.epoch > seen.epoch && e.writer != store.me())
            .flat_map(|e| e.notices.iter().copied())
            .collect();
        if let Some(hook) = core.hook() {
            hook.changed(&lost, &notices);
        }
        tracing::debug!(
            epoch = doc.epoch,
            lost = lost.len(),
            "reservations changed by another gateway"
        );
        store.ack(doc.epoch);
        seen = doc;
    }
}
