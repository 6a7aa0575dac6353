//! One path of a multipath controller: its controller (replaced when it gives up), counters,
//! and whether its background reconnect (`super::paths`) runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use rdmablk::nvme::ana::{AnaLog, AnaState};

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

    /// A new controller for the path (its old one gave up).
    pub fn install(&self, c: Controller) {
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

    /// The reconnect ended (the path is back).
    pub fn stop_reviving(&self) {
        self.reviving.store(false, Ordering::Release);
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
