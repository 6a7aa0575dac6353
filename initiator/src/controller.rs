//! The controller handle: connect, the pool of I/O queues, keep-alive, and recovery.
//!
//! # Threading model
//! A [`Controller`] is `Send + Sync` and cheap to clone (an `Arc`). Its I/O queues sit in a
//! pool. A sync call ([`crate::Namespace::read_at`] ...) **borrows one whole queue** from the
//! pool for its duration, pipelines its commands on it, and gives it back: with N I/O queues,
//! N threads do I/O at once and further threads wait for a queue (no lock is held while I/O
//! runs, and a queue is only ever touched by the thread holding it). An [`crate::IoQueue`]
//! (async API) takes a queue out of the pool until it is dropped.
//!
//! # Keep-alive
//! A background thread sends Keep Alive on the admin queue every KATO/2 (the admin queue is
//! behind a mutex it shares with other admin users). A failed Keep Alive starts recovery.
//!
//! # Recovery
//! A transport failure (error completion, disconnect, command timeout, malformed response) on
//! any queue leads whoever saw it to [`Shared::recover`]: the first caller for a session tears
//! it down and reconnects with exponential backoff (`reconnect_delay_ms` doubling up to
//! `reconnect_max_delay_ms`, `reconnect_attempts` tries); later callers for the same session
//! wait for it. Queues of an old session are dropped when handed back. If every attempt
//! fails, the controller is failed for good: every call returns [`Error::Disconnected`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rdmablk::fabric::{self, ProviderKind};

use crate::buf::{BufPool, IoBuf};
use crate::error::{Error, Result};
use crate::ioqueue::IoQueue;
use crate::namespace::Namespace;
use crate::options::{ConnectOptions, TargetUrl};
use crate::queue::{Fabric, Queue};
use crate::session::{ControllerInfo, Setup};
use crate::stats::{Stats, StatsSnapshot};

struct Pool {
    /// Session generation; bumped by every successful reconnect.
    generation: u64,
    idle: Vec<Queue>,
    info: ControllerInfo,
    failed: Option<String>,
    closed: bool,
}

pub(crate) struct Shared {
    pub url: TargetUrl,
    pub opts: ConnectOptions,
    fabric: Fabric,
    pub bufs: BufPool,
    pub stats: Arc<Stats>,
    pool: Mutex<Pool>,
    queue_ready: Condvar,
    admin: Mutex<Option<Queue>>,
    recovering: Mutex<()>,
    stop: AtomicBool,
}

/// A connected NVMe-oF controller. Clone it freely; the connection closes when the last
/// clone (and every [`Namespace`] and [`IoQueue`] made from it) is dropped.
#[derive(Clone)]
pub struct Controller {
    shared: Arc<Shared>,
    _keep_alive: Arc<KeepAlive>,
}

struct KeepAlive {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
        self.shared.close();
    }
}

impl Controller {
    /// Connects to `url` (`rdma://IP:PORT/SUBNQN` or `soft://HOST:PORT/SUBNQN`, options in
    /// the query) with default options.
    pub fn connect(url: &str) -> Result<Controller> {
        Self::connect_with(url, ConnectOptions::default())
    }

    /// Connects with `opts`; query parameters of `url` override them.
    pub fn connect_with(url: &str, mut opts: ConnectOptions) -> Result<Controller> {
        let url = TargetUrl::parse_with(url, &mut opts)?;
        opts.validate()?;
        let fabric = open_fabric(url.provider, &opts, &url)?;
        let bufs = BufPool::new(&fabric.pd, opts.buffer_pool_bytes)?;
        let stats = Arc::new(Stats::default());
        let session = Setup {
            url: &url,
            opts: &opts,
            fabric: &fabric,
            pool: &bufs,
            stats: &stats,
        }
        .establish()?;
        let shared = Arc::new(Shared {
            url,
            opts,
            fabric,
            bufs,
            stats,
            pool: Mutex::new(Pool {
                generation: 0,
                idle: session.io,
                info: session.info,
                failed: None,
                closed: false,
            }),
            queue_ready: Condvar::new(),
            admin: Mutex::new(Some(session.admin)),
            recovering: Mutex::new(()),
            stop: AtomicBool::new(false),
        });
        let ka = KeepAlive {
            shared: shared.clone(),
            thread: Mutex::new(None),
        };
        if shared.opts.kato_ms > 0 {
            let s = shared.clone();
            let t = std::thread::Builder::new()
                .name("rdmablk-ka".into())
                .spawn(move || s.keep_alive_loop())
                .map_err(|e| Error::Controller {
                    what: format!("cannot start the keep-alive thread: {e}"),
                })?;
            *ka.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        }
        Ok(Controller {
            shared,
            _keep_alive: Arc::new(ka),
        })
    }

    /// What the controller reported at the last (re)connect.
    pub fn info(&self) -> ControllerInfo {
        self.shared.lock_pool().info.clone()
    }

    /// Active namespace IDs.
    pub fn namespace_ids(&self) -> Vec<u32> {
        self.info().namespaces.iter().map(|n| n.nsid).collect()
    }

    /// Asks the controller again which namespaces are active and what they look like (a
    /// target may add, remove or grow namespaces at run time); returns the active NSIDs.
    pub fn rescan_namespaces(&self) -> Result<Vec<u32>> {
        let found = {
            let mut admin = self.shared.admin.lock().unwrap_or_else(|p| p.into_inner());
            let q = admin.as_mut().ok_or_else(|| Error::Disconnected {
                what: "no admin queue".into(),
            })?;
            self.shared.setup().identify_namespaces(q)?
        };
        let ids = found.iter().map(|n| n.nsid).collect();
        self.shared.lock_pool().info.namespaces = found;
        Ok(ids)
    }

    /// A handle to namespace `nsid` (sync block-device API). A namespace not known from the
    /// last scan is looked for once more ([`Controller::rescan_namespaces`]).
    pub fn namespace(&self, nsid: u32) -> Result<Namespace> {
        let mut info = self.info();
        if !info.namespaces.iter().any(|n| n.nsid == nsid) {
            self.rescan_namespaces()?;
            info = self.info();
        }
        let ns = info
            .namespaces
            .iter()
            .find(|n| n.nsid == nsid)
            .copied()
            .ok_or_else(|| Error::NoNamespace {
                nsid,
                active: info.namespaces.iter().map(|n| n.nsid).collect(),
            })?;
        Ok(Namespace::new(
            self.clone(),
            ns,
            info.max_transfer_bytes,
            info.oncs,
        ))
    }

    /// Takes an I/O queue out of the pool for the async API on namespace `nsid`, waiting
    /// for one if all are borrowed.
    pub fn io_queue(&self, nsid: u32) -> Result<IoQueue> {
        let ns = self.namespace(nsid)?;
        IoQueue::new(self.clone(), ns)
    }

    /// A registered buffer of `len` bytes from the controller's pool (zero-copy I/O).
    pub fn alloc(&self, len: usize) -> Result<IoBuf> {
        self.shared.bufs.alloc(len)
    }

    /// The registered buffer pool.
    pub fn buffers(&self) -> &BufPool {
        &self.shared.bufs
    }

    /// Counters (data paths used, reconnects, retries, keep-alives).
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot()
    }

    /// The URL this controller is connected to.
    pub fn url(&self) -> &TargetUrl {
        &self.shared.url
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

pub(crate) fn open_fabric(
    kind: ProviderKind,
    opts: &ConnectOptions,
    url: &TargetUrl,
) -> Result<Fabric> {
    let resolved = fabric::resolve(kind, url.addr, opts.connect_timeout())
        .map_err(Error::fabric(0, "resolve address"))?;
    let device = resolved.device();
    let pd = device
        .alloc_pd()
        .map_err(Error::fabric(0, "allocate protection domain"))?;
    Ok(Fabric { kind, pd })
}

impl Shared {
    fn lock_pool(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn setup(&self) -> Setup<'_> {
        Setup {
            url: &self.url,
            opts: &self.opts,
            fabric: &self.fabric,
            pool: &self.bufs,
            stats: &self.stats,
        }
    }

    /// Borrows an idle I/O queue (waiting for one), with its session generation.
    pub fn checkout(&self) -> Result<(Queue, u64)> {
        let mut p = self.lock_pool();
        loop {
            if let Some(why) = &p.failed {
                return Err(Error::Disconnected { what: why.clone() });
            }
            if p.closed {
                return Err(Error::Disconnected {
                    what: "the controller was closed".into(),
                });
            }
            if let Some(q) = p.idle.pop() {
                return Ok((q, p.generation));
            }
            p = self.queue_ready.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Hands a queue back. Queues of an older session, failed ones, and ones with commands
    /// still in flight are dropped (disconnecting them) instead.
    pub fn checkin(&self, q: Queue, generation: u64) {
        let mut p = self.lock_pool();
        if generation == p.generation && q.failure().is_none() && q.in_flight() == 0 && !p.closed {
            p.idle.push(q);
            drop(p);
            self.queue_ready.notify_one();
        }
    }

    pub fn generation(&self) -> u64 {
        self.lock_pool().generation
    }

    /// Replaces session `seen` after `why` broke it, unless someone already did. Returns when
    /// a newer session is installed, or with [`Error::Disconnected`] if reconnecting failed.
    pub fn recover(&self, seen: u64, why: &str) -> Result<()> {
        let _one = self.recovering.lock().unwrap_or_else(|p| p.into_inner());
        {
            let mut p = self.lock_pool();
            if let Some(f) = &p.failed {
                return Err(Error::Disconnected { what: f.clone() });
            }
            if p.generation != seen {
                return Ok(());
            }
            p.idle.clear();
        }
        *self.admin.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tracing::warn!(url = %self.url, "controller failed ({why}); reconnecting");
        let o = &self.opts;
        let mut delay = Duration::from_millis(u64::from(o.reconnect_delay_ms));
        let max_delay = Duration::from_millis(u64::from(o.reconnect_max_delay_ms.max(1)));
        let mut last = why.to_string();
        for attempt in 1..=o.reconnect_attempts {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(delay);
            delay = (delay * 2).min(max_delay);
            match self.setup().establish() {
                Ok(s) => {
                    *self.admin.lock().unwrap_or_else(|p| p.into_inner()) = Some(s.admin);
                    let mut p = self.lock_pool();
                    p.generation += 1;
                    p.idle = s.io;
                    p.info = s.info;
                    drop(p);
                    self.stats.add_reconnect();
                    self.queue_ready.notify_all();
                    tracing::info!(url = %self.url, attempt, "controller reconnected");
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(url = %self.url, attempt, "reconnect failed: {e}");
                    last = e.to_string();
                }
            }
        }
        let what = format!(
            "{why}; {} reconnect attempt(s) failed, last: {last}",
            o.reconnect_attempts
        );
        self.lock_pool().failed = Some(what.clone());
        self.queue_ready.notify_all();
        Err(Error::Disconnected { what })
    }

    fn keep_alive_loop(self: Arc<Self>) {
        let period = Duration::from_millis(u64::from(self.opts.kato_ms / 2).max(10));
        let tick = Duration::from_millis(20).min(period);
        let mut waited = Duration::ZERO;
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(tick);
            waited += tick;
            if waited < period {
                continue;
            }
            waited = Duration::ZERO;
            let generation = self.generation();
            let result = {
                let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
                match admin.as_mut() {
                    Some(q) => self.setup().keep_alive(q),
                    None => continue,
                }
            };
            match result {
                Ok(()) => {}
                Err(e) if e.needs_reconnect() => {
                    if self.lock_pool().failed.is_some() {
                        return;
                    }
                    let _ = self.recover(generation, &format!("keep-alive: {e}"));
                }
                Err(e) => tracing::warn!("keep-alive: {e}"),
            }
        }
    }

    /// Shutdown notification and disconnect of every queue (on the last drop).
    fn close(&self) {
        let mut p = self.lock_pool();
        p.closed = true;
        p.idle.clear();
        drop(p);
        self.queue_ready.notify_all();
        if let Some(mut admin) = self.admin.lock().unwrap_or_else(|p| p.into_inner()).take() {
            if admin.failure().is_none() {
                self.setup().shutdown(&mut admin);
            }
        }
    }
}
