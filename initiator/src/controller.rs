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
//! # Keep-alive and events
//! A background thread sends Keep Alive on the admin queue every KATO/2 (the admin queue is
//! behind a mutex it shares with other admin users). A failed Keep Alive starts recovery.
//! The same thread takes the completions of the Asynchronous Event Request held on the admin
//! queue (ANA change notices): it reads the ANA log again and posts a new request.
//!
//! # Recovery
//! A transport failure (error completion, disconnect, command timeout, malformed response) on
//! any queue leads whoever saw it to [`ControllerState::recover`]: the first caller for a session tears
//! it down and reconnects with exponential backoff (`reconnect_delay_ms` doubling up to
//! `reconnect_max_delay_ms`) until it succeeds, `ctrl_loss_tmo_ms` has passed since the loss
//! or `reconnect_attempts` tries were made; later callers for the same session wait for it.
//! Queues of an old session are dropped when handed back. If recovery gives up, the
//! controller is failed for good: every call returns [`Error::Disconnected`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rdmablk::fabric;
use rdmablk::nvme::admin::{async_event_request_sqe, AsyncEvent};
use rdmablk::nvme::ana::AnaState;
use rdmablk::nvme::log_page::lid;

use crate::buf::{BufPool, IoBuf};
use crate::error::{Error, Result};
use crate::ioqueue::IoQueue;
use crate::namespace::{Namespace, Via};
use crate::options::{ConnectOptions, TargetUrl, Transport};
use crate::queue::Queue;
use crate::session::{ana_log_bytes, ControllerInfo, Setup, AER_TAG};
use crate::stats::{Stats, StatsSnapshot};
use crate::transport::Fabric;

struct Pool {
    /// Session generation; bumped by every successful reconnect.
    generation: u64,
    idle: Vec<Queue>,
    info: ControllerInfo,
    failed: Option<String>,
    closed: bool,
    /// A generation known broken (its recovery under way or about to start).
    broken: Option<u64>,
    /// The current session's abort switch: set, its queues fail at their next check.
    abort: Arc<AtomicBool>,
}

pub(crate) struct ControllerState {
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
    /// ANA logs read since connect (each bump: the states may have changed).
    ana_reads: AtomicU64,
}

/// A connected NVMe-oF controller. Clone it freely; the connection closes when the last
/// clone (and every [`Namespace`] and [`IoQueue`] made from it) is dropped.
#[derive(Clone)]
pub struct Controller {
    shared: Arc<ControllerState>,
    _keep_alive: Arc<KeepAlive>,
}

struct KeepAlive {
    shared: Arc<ControllerState>,
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
        let (fabric, bufs) = open_fabric_and_pool(&opts, &url, opts.buffer_pool_bytes)?;
        Self::connect_on(url, opts, fabric, bufs)
    }

    /// Connects `url` over an open fabric (PD) with its registered buffer pool: the paths of
    /// a multipath controller share both, so one [`IoBuf`] serves every path.
    pub(crate) fn connect_on(
        url: TargetUrl,
        opts: ConnectOptions,
        fabric: Fabric,
        bufs: BufPool,
    ) -> Result<Controller> {
        let stats = Arc::new(Stats::default());
        let session = Setup {
            url: &url,
            opts: &opts,
            fabric: &fabric,
            pool: &bufs,
            stats: &stats,
        }
        .establish()?;
        let shared = Arc::new(ControllerState {
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
                broken: None,
                abort: session.abort,
            }),
            queue_ready: Condvar::new(),
            admin: Mutex::new(Some(session.admin)),
            recovering: Mutex::new(()),
            stop: AtomicBool::new(false),
            ana_reads: AtomicU64::new(0),
        });
        let ka = KeepAlive {
            shared: shared.clone(),
            thread: Mutex::new(None),
        };
        if shared.opts.kato_ms > 0 || shared.lock_pool().info.ana_notices {
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
            Via::Path(self.clone()),
            ns,
            info.max_transfer_bytes,
            info.oncs,
        ))
    }

    /// Takes an I/O queue out of the pool for the async API on namespace `nsid`, waiting
    /// for one if all are borrowed.
    pub fn io_queue(&self, nsid: u32) -> Result<IoQueue> {
        let ns = self.namespace(nsid)?;
        IoQueue::new(ns)
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

    /// The ANA state of namespace `nsid` through this controller, from the last ANA log read;
    /// `None` when the controller does not report ANA (or does not list `nsid`).
    pub fn ana_state(&self, nsid: u32) -> Option<AnaState> {
        self.shared.lock_pool().info.ana.as_ref()?.state_of(nsid)
    }

    /// Reads the ANA log again (a command completed with an ANA path status, or a caller
    /// wants the current states). A no-op when the controller does not report ANA.
    pub fn refresh_ana(&self) -> Result<()> {
        self.shared.refresh_ana()
    }

    /// How many times the ANA log was read since connect: a change means the states may have
    /// changed (a notice arrived, a reconnect happened, or [`Controller::refresh_ana`]).
    pub fn ana_reads(&self) -> u64 {
        self.shared.ana_reads.load(Ordering::Acquire)
    }

    /// Whether the controller is connected and not known broken: neither reconnecting nor
    /// failed for good nor closed.
    pub fn is_live(&self) -> bool {
        self.shared.is_live()
    }

    /// The URL this controller is connected to.
    pub fn url(&self) -> &TargetUrl {
        &self.shared.url
    }

    pub(crate) fn shared(&self) -> &Arc<ControllerState> {
        &self.shared
    }
}

/// Opens the fabric `url` names and a buffer pool of `pool_bytes` usable over it.
pub(crate) fn open_fabric_and_pool(
    opts: &ConnectOptions,
    url: &TargetUrl,
    pool_bytes: usize,
) -> Result<(Fabric, BufPool)> {
    let fabric = open_fabric(opts, url)?;
    let bufs = BufPool::new(fabric.pd(), pool_bytes)?;
    Ok((fabric.with_pool(&bufs), bufs))
}

use crate::transport::tcp_tls::TlsOffer;

fn open_fabric(opts: &ConnectOptions, url: &TargetUrl) -> Result<Fabric> {
    let kind = match url.transport {
        Transport::Rdma(kind) => kind,
        Transport::Tcp => {
            return Ok(Fabric::Tcp {
                hdr_digest: opts.hdr_digest,
                data_digest: opts.data_digest,
                tls: TlsOffer::of(opts, &url.subnqn),
            })
        }
        Transport::Loop => return Ok(Fabric::Loop { pool: None }),
    };
    let resolved = fabric::resolve(kind, url.addr, opts.connect_timeout())
        .map_err(Error::fabric(0, "resolve address"))?;
    let device = resolved.device();
    let pd = device
        .alloc_pd()
        .map_err(Error::fabric(0, "allocate protection domain"))?;
    Ok(Fabric::Rdma { kind, pd })
}

impl ControllerState {
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
        self.checkout_when(false)
    }

    /// Like [`ControllerState::checkout`], but refuses at once, instead of waiting, when the session
    /// is known broken (a multipath caller then goes to another path).
    pub fn checkout_live(&self) -> Result<(Queue, u64)> {
        self.checkout_when(true)
    }

    fn checkout_when(&self, refuse_broken: bool) -> Result<(Queue, u64)> {
        let mut p = self.lock_pool();
        loop {
            if refuse_broken && p.broken == Some(p.generation) {
                return Err(Error::Disconnected {
                    what: format!("{}: reconnecting", self.url),
                });
            }
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

    /// Reconnecting gave up: the controller is failed for good.
    pub fn is_failed(&self) -> bool {
        self.lock_pool().failed.is_some()
    }

    pub fn is_live(&self) -> bool {
        let p = self.lock_pool();
        p.failed.is_none() && !p.closed && p.broken != Some(p.generation)
    }

    /// Session `generation` failed: stop handing out its queues (waiters of
    /// [`ControllerState::checkout_live`] leave) until [`ControllerState::recover`] installs a new one.
    pub fn mark_broken(&self, generation: u64) {
        let mut p = self.lock_pool();
        if p.generation == generation {
            p.broken = Some(generation);
            p.abort.store(true, Ordering::Release);
            p.idle.clear();
            drop(p);
            self.queue_ready.notify_all();
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
            p.broken = Some(seen);
            p.abort.store(true, Ordering::Release);
        }
        self.queue_ready.notify_all();
        *self.admin.lock().unwrap_or_else(|p| p.into_inner()) = None;
        tracing::warn!(url = %self.url, "controller failed ({why}); reconnecting");
        let o = &self.opts;
        let mut delay = Duration::from_millis(u64::from(o.reconnect_delay_ms));
        let max_delay = Duration::from_millis(u64::from(o.reconnect_max_delay_ms.max(1)));
        let mut last = why.to_string();
        let lost = std::time::Instant::now();
        let loss_tmo = Duration::from_millis(u64::from(o.ctrl_loss_tmo_ms));
        let mut tried = 0u32;
        for attempt in 1..=o.reconnect_attempts {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            // The last attempt comes when the loss timeout runs out, not a delay before.
            let left = loss_tmo.saturating_sub(lost.elapsed());
            if o.ctrl_loss_tmo_ms > 0 && left.is_zero() {
                break;
            }
            tried = attempt;
            std::thread::sleep(if o.ctrl_loss_tmo_ms > 0 {
                delay.min(left)
            } else {
                delay
            });
            delay = (delay * 2).min(max_delay);
            match self.setup().establish() {
                Ok(s) => {
                    *self.admin.lock().unwrap_or_else(|p| p.into_inner()) = Some(s.admin);
                    let mut p = self.lock_pool();
                    p.generation += 1;
                    p.idle = s.io;
                    p.info = s.info;
                    p.abort = s.abort;
                    drop(p);
                    self.ana_reads.fetch_add(1, Ordering::AcqRel);
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
            "{why}; {tried} reconnect attempt(s) in {:.1} s failed (reconnect_attempts {}, \
             ctrl_loss_tmo_ms {}), last: {last}",
            lost.elapsed().as_secs_f64(),
            o.reconnect_attempts,
            o.ctrl_loss_tmo_ms
        );
        self.lock_pool().failed = Some(what.clone());
        self.queue_ready.notify_all();
        Err(Error::Disconnected { what })
    }

    fn keep_alive_loop(self: Arc<Self>) {
        let kato_ms = self.opts.kato_ms;
        let period = Duration::from_millis(u64::from(kato_ms / 2).max(10));
        let tick = Duration::from_millis(20).min(period);
        let mut waited = Duration::ZERO;
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(tick);
            waited += tick;
            let generation = self.generation();
            if let Some(why) = self.take_events() {
                // A dead admin queue starts recovery at once, as the Linux host's error
                // recovery does, not at the next keep-alive: `ctrl_loss_tmo_ms` counts from
                // the loss, and I/O parked meanwhile is sent again sooner.
                if self.lock_pool().failed.is_some() {
                    return;
                }
                let _ = self.recover(generation, &format!("admin queue: {why}"));
                waited = Duration::ZERO;
                continue;
            }
            if kato_ms == 0 || waited < period {
                continue;
            }
            waited = Duration::ZERO;
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

    /// Handles completed Asynchronous Event Requests: an ANA change re-reads the ANA log;
    /// each completed request is replaced by a new one. Returns why the admin queue failed, if
    /// it did (its transport was lost): the caller recovers.
    fn take_events(&self) -> Option<String> {
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let q = admin.as_mut()?;
        let mut done = Vec::new();
        q.take_stray(&mut done);
        if q.failure().is_none() {
            q.poll(&mut done);
        }
        for d in done.into_iter().filter(|d| d.tag == AER_TAG) {
            let Ok(cqe) = d.result else { continue };
            if !cqe.status.is_success() {
                tracing::warn!(status = %cqe.status, "Asynchronous Event Request failed");
                continue;
            }
            let ev = AsyncEvent::from_dw0(cqe.dw0);
            tracing::info!(url = %self.url, ?ev, "asynchronous event");
            if ev.log_page == lid::ANA {
                if let Err(e) = self.read_ana(q) {
                    tracing::warn!(url = %self.url, "ANA log after a change notice: {e}");
                }
            }
            if let Err(e) = q.submit_held(async_event_request_sqe(0), AER_TAG) {
                tracing::warn!(url = %self.url, "re-arming the Asynchronous Event Request: {e}");
            }
        }
        q.failure().map(str::to_string)
    }

    fn refresh_ana(&self) -> Result<()> {
        if self.lock_pool().info.ana.is_none() {
            return Ok(());
        }
        let mut admin = self.admin.lock().unwrap_or_else(|p| p.into_inner());
        let q = admin.as_mut().ok_or_else(|| Error::Disconnected {
            what: format!("{}: no admin queue", self.url),
        })?;
        self.read_ana(q)
    }

    /// Reads the ANA log on `admin` (the caller holds the admin lock) into the info.
    fn read_ana(&self, admin: &mut Queue) -> Result<()> {
        let len = {
            let p = self.lock_pool();
            let groups = p.info.ana.as_ref().map_or(1, |a| a.groups.len() as u32);
            ana_log_bytes(
                groups.max(32),
                p.info.namespaces.len(),
                p.info.max_transfer_bytes,
            )
        };
        let log = self.setup().read_ana_log(admin, len)?;
        tracing::debug!(url = %self.url, ?log, "ANA log");
        self.lock_pool().info.ana = Some(log);
        self.ana_reads.fetch_add(1, Ordering::AcqRel);
        Ok(())
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
