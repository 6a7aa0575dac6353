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

mod queue;
mod state;

pub(crate) use state::ControllerState;

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rdmablk::nvme::ana::AnaState;

use crate::buf::{BufPool, IoBuf};
use crate::error::{Error, Result};
use crate::io_path::{drive, Cmd, IoPath};
use crate::ioqueue::IoQueue;
use crate::namespace::Namespace;
use crate::options::ConnectOptions;
use crate::session::{ControllerInfo, Setup};
use crate::stats::{Stats, StatsSnapshot};
use crate::url::TargetUrl;

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
        self.shared.stop();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
        self.shared.close();
    }
}

impl Controller {
    /// Connects to `url` (`rdma://IP:PORT/SUBNQN`, `soft://HOST:PORT/SUBNQN`,
    /// `tcp://HOST:PORT/SUBNQN` or `loop://IP:PORT/SUBNQN`, options in the query) with default
    /// options.
    pub fn connect(url: &str) -> Result<Controller> {
        Self::connect_with(url, ConnectOptions::default())
    }

    /// Connects with `opts`; query parameters of `url` override them.
    pub fn connect_with(url: &str, mut opts: ConnectOptions) -> Result<Controller> {
        let url = TargetUrl::parse_with(url, &mut opts)?;
        opts.validate()?;
        let bufs = url
            .transport
            .open_pool(url.addr, &opts, opts.buffer_pool_bytes)?;
        Self::connect_on(url, opts, bufs)
    }

    /// Connects `url` with its buffers in `bufs`, a pool its transport reaches (RDMA: one
    /// registered on the PD its queues use): the paths of a multipath controller share one,
    /// so one [`IoBuf`] serves every path.
    pub(crate) fn connect_on(
        url: TargetUrl,
        opts: ConnectOptions,
        bufs: BufPool,
    ) -> Result<Controller> {
        let fabric = url.transport.open(&url.subnqn, &opts, &bufs)?;
        let stats = Arc::new(Stats::default());
        let session = Setup {
            url: &url,
            opts: &opts,
            fabric: &*fabric,
            pool: &bufs,
            stats: &stats,
        }
        .establish()?;
        let shared = Arc::new(ControllerState::new(
            url, opts, fabric, bufs, stats, session,
        ));
        let ka = KeepAlive {
            shared: shared.clone(),
            thread: Mutex::new(None),
        };
        if shared.opts.kato_ms > 0 || shared.info().ana_notices {
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
        self.shared.info()
    }

    /// Active namespace IDs.
    pub fn namespace_ids(&self) -> Vec<u32> {
        self.info().namespaces.iter().map(|n| n.nsid).collect()
    }

    /// Asks the controller again which namespaces are active and what they look like (a
    /// target may add, remove or grow namespaces at run time); returns the active NSIDs.
    pub fn rescan_namespaces(&self) -> Result<Vec<u32>> {
        self.shared.rescan_namespaces()
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
            Arc::new(self.clone()),
            ns,
            info.max_transfer_bytes,
            info.oncs,
        ))
    }

    /// Takes an I/O queue out of the pool for the async API on namespace `nsid`, waiting
    /// for one if all are borrowed.
    pub fn io_queue(&self, nsid: u32) -> Result<IoQueue> {
        let ns = self.namespace(nsid)?;
        let lanes = queue::OnePath::new(self.shared.clone(), ns.clone())?;
        Ok(IoQueue::new(ns, Box::new(lanes)))
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
        self.shared.ana_state(nsid)
    }

    /// Reads the ANA log again (a command completed with an ANA path status, or a caller
    /// wants the current states). A no-op when the controller does not report ANA.
    pub fn refresh_ana(&self) -> Result<()> {
        self.shared.refresh_ana()
    }

    /// How many times the ANA log was read since connect: a change means the states may have
    /// changed (a notice arrived, a reconnect happened, or [`Controller::refresh_ana`]).
    pub fn ana_reads(&self) -> u64 {
        self.shared.ana_reads()
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

/// A namespace of one controller: its calls borrow one of the controller's I/O queues, and a
/// call that a transport failure cut is sent again once the controller reconnected.
impl IoPath for Controller {
    fn alloc(&self, len: usize) -> Result<IoBuf> {
        self.shared.bufs.alloc(len)
    }

    fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    fn opts(&self) -> &ConnectOptions {
        &self.shared.opts
    }

    fn run(&self, _nsid: u32, cmds: &[Cmd], what: &'static str, retry: bool) -> Result<()> {
        let shared = &self.shared;
        let mut retries = 0;
        loop {
            let (mut q, generation) = shared.checkout()?;
            let r = drive(&mut q, cmds, what, shared.opts.io_timeout());
            match r {
                Err(e) if e.needs_reconnect() => {
                    q.fail(e.to_string());
                    drop(q);
                    shared.recover(generation, &e.to_string())?;
                    retries += 1;
                    if !retry || retries > shared.opts.reconnect_attempts.max(1) {
                        return Err(e);
                    }
                    shared.stats.add_retry();
                    tracing::info!(what, retries, "re-sending after reconnect");
                }
                r => {
                    shared.checkin(q, generation);
                    return r;
                }
            }
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

// Here rather than in `crate::namespace`, which names no controller: a namespace reaches its
// controller only through `IoPath`.
impl Namespace {
    /// The controller of a single-path namespace (`None` for a multipath namespace: see
    /// [`crate::MultipathController::paths`]).
    pub fn controller(&self) -> Option<&Controller> {
        self.path().as_any().downcast_ref()
    }
}
