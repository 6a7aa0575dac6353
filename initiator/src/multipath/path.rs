//! One path of a multipath controller: its controller (replaced when it gives up), counters,
//! and the background reconnect.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock, Weak};
use std::time::Duration;

use rdmablk::nvme::ana::{AnaLog, AnaState};

use super::Paths;
use crate::controller::Controller;
use crate::options::ConnectOptions;
use crate::url::TargetUrl;

pub(crate) struct Path {
    pub url: TargetUrl,
    pub opts: ConnectOptions,
    /// `None` while the path has never connected or its controller gave up.
    ctrl: RwLock<Option<Controller>>,
    reviving: AtomicBool,
    commands: AtomicU64,
    failures: AtomicU64,
    last_failure: Mutex<Option<String>>,
}

/// What [`crate::MultipathController::paths`] reports of one path.
#[derive(Debug, Clone)]
pub struct PathStatus {
    pub url: String,
    /// Connected and not reconnecting.
    pub live: bool,
    /// The controller's ANA log as last read (`None`: no ANA reporting, or not connected).
    pub ana: Option<AnaLog>,
    /// Commands completed successfully through this path.
    pub commands: u64,
    /// Failures (transport, or a path status) seen on this path.
    pub failures: u64,
    pub last_failure: Option<String>,
}

impl PathStatus {
    /// The ANA state of `nsid` through this path (`None`: not reported).
    pub fn ana_state(&self, nsid: u32) -> Option<AnaState> {
        self.ana.as_ref()?.state_of(nsid)
    }
}

impl Path {
    pub fn new(url: TargetUrl, opts: ConnectOptions, ctrl: Option<Controller>) -> Path {
        Path {
            url,
            opts,
            ctrl: RwLock::new(ctrl),
            reviving: AtomicBool::new(false),
            commands: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_failure: Mutex::new(None),
        }
    }

    pub fn controller(&self) -> Option<Controller> {
        self.ctrl.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn install(&self, c: Controller) {
        *self.ctrl.write().unwrap_or_else(|p| p.into_inner()) = Some(c);
    }

    pub fn add_commands(&self, n: usize) {
        self.commands.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub fn note_failure(&self, why: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.to_string());
    }

    /// True if the caller is to start the reconnect (none runs).
    pub fn start_reviving(&self) -> bool {
        !self.reviving.swap(true, Ordering::AcqRel)
    }

    /// "live", "reconnecting", "not connected" and the last failure: for error messages.
    pub fn condition(&self) -> String {
        let state = match self.controller() {
            Some(c) if c.is_live() => "live",
            Some(_) => "reconnecting",
            None => "not connected",
        };
        match &*self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(f) => format!("{state} (last failure: {f})"),
            None => state.to_string(),
        }
    }

    pub fn status(&self) -> PathStatus {
        let c = self.controller();
        PathStatus {
            url: self.url.to_string(),
            live: c.as_ref().is_some_and(Controller::is_live),
            ana: c.and_then(|c| c.info().ana),
            commands: self.commands.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            last_failure: self
                .last_failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }
}

/// Reconnects path `i` in a thread of its own: first through the controller's own recovery
/// (its backoff and attempts), then, if that gives up, with a new controller every
/// `reconnect_max_delay_ms` until one connects or the multipath controller is dropped.
pub(super) fn spawn_reviver(paths: Weak<Paths>, i: usize) {
    let spawned = std::thread::Builder::new()
        .name("rdmablk-mp-revive".into())
        .spawn(move || revive(paths, i));
    if let Err(e) = spawned {
        tracing::error!("cannot start a path reconnect thread: {e}");
    }
}

fn revive(weak: Weak<Paths>, i: usize) {
    loop {
        let Some(paths) = weak.upgrade() else { return };
        if paths.stop.load(Ordering::Relaxed) {
            return;
        }
        let path = paths.path(i);
        let pause = Duration::from_millis(u64::from(path.opts.reconnect_max_delay_ms.max(10)));
        match path.controller() {
            Some(c) if c.is_live() => {
                path.reviving.store(false, Ordering::Release);
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
