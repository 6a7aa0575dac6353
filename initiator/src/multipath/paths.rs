//! The paths of a multipath controller, as its namespaces and queues share them: which path
//! a command takes ([`Paths::choose`]: ANA state, then round-robin), a sync call moved whole
//! to another path when its path fails ([`Paths::run`]), and the background reconnect of a
//! failed path.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rdmablk::nvme::ana::AnaState;
use rdmablk::nvme::Sct;

use super::path::Path;
use crate::buf::{BufPool, IoBuf};
use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::io_path::{drive, Cmd};
use crate::options::ConnectOptions;
use crate::session::{ControllerInfo, NamespaceInfo};
use crate::stats::Stats;
use crate::url::TargetUrl;

/// How long a command waits before looking again when no path can take it.
pub(super) const NO_PATH_PAUSE: Duration = Duration::from_millis(5);

/// What the namespaces and queues of a multipath controller share.
pub(super) struct Paths {
    pub list: Vec<Path>,
    pub opts: ConnectOptions,
    pub bufs: BufPool,
    pub stats: Stats,
    pub subnqn: String,
    /// The namespaces every path must report, as the first connected path did.
    pub namespaces: Vec<NamespaceInfo>,
    pub max_transfer_bytes: u32,
    pub oncs: u16,
    /// Round-robin position among equal paths.
    next: AtomicUsize,
    stop: AtomicBool,
}

impl Paths {
    /// Connects every path of `parsed` (at least one must connect now; the others are
    /// reconnected in the background) with buffers in `bufs`.
    pub fn connect(
        parsed: Vec<(TargetUrl, ConnectOptions)>,
        opts: ConnectOptions,
        bufs: BufPool,
    ) -> Result<Arc<Paths>> {
        let subnqn = parsed[0].0.subnqn.clone();
        let mut connected: Vec<Option<Controller>> = Vec::with_capacity(parsed.len());
        let mut errors = Vec::new();
        for (url, o) in &parsed {
            match Controller::connect_on(url.clone(), o.clone(), bufs.clone()) {
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
        Ok(paths)
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
            spawn_reviver(Arc::downgrade(self), i);
        }
    }

    /// Connects path `i` anew (its controller gave up) and checks it is the same subsystem.
    fn connect_path(&self, i: usize) -> Result<Controller> {
        let p = &self.list[i];
        let c = Controller::connect_on(p.url.clone(), p.opts.clone(), self.bufs.clone())?;
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

/// Reconnects path `i` in a thread of its own: first through the controller's own recovery
/// (its backoff and attempts), then, if that gives up, with a new controller every
/// `reconnect_max_delay_ms` until one connects or the multipath controller is dropped.
fn spawn_reviver(paths: Weak<Paths>, i: usize) {
    let spawned = std::thread::Builder::new()
        .name("rdmablk-mp-revive".into())
        .spawn(move || revive_loop(paths, i));
    if let Err(e) = spawned {
        tracing::error!("cannot start a path reconnect thread: {e}");
    }
}

fn revive_loop(weak: Weak<Paths>, i: usize) {
    loop {
        let Some(paths) = weak.upgrade() else { return };
        if paths.stop.load(Ordering::Relaxed) {
            return;
        }
        let path = paths.path(i);
        let pause = Duration::from_millis(u64::from(path.opts.reconnect_max_delay_ms.max(10)));
        match path.controller() {
            Some(c) if c.is_live() => {
                path.stop_reviving();
                // A failure between the check and the store starts no reviver: look again.
                if c.is_live() || !path.start_reviving() {
                    tracing::info!(url = %path.url, "path is back");
                    return;
                }
            }
            Some(c) if !c.shared().is_failed() => {
                let shared = c.shared().clone();
                drop((c, paths));
                let generation = shared.generation();
                // Blocks through the controller's backoff; its result shows in is_live().
                let _ = shared.recover(generation, "multipath: path failed");
            }
            _ => {
                drop(paths);
                std::thread::sleep(pause);
                let Some(paths) = weak.upgrade() else { return };
                match paths.connect_path(i) {
                    Ok(c) => paths.path(i).install(c),
                    Err(e) => {
                        tracing::warn!(url = %paths.path(i).url, "path reconnect: {e}");
                        paths.path(i).note_failure(&e.to_string());
                    }
                }
            }
        }
    }
}
