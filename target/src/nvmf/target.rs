//! A running target ([`Target`]): started from a configuration, watched for lost workers,
//! shut down with its final flush.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::runtime::port::Port;
use super::{open_shared, runtime, transport, worker, Shared, TargetError, TargetHandle};
use crate::arena::ArenaStats;
use crate::config::Config;

/// A running target.
pub struct Target {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// The workers' thread IDs (what [`Target::lost_worker`] looks for in /proc).
    worker_tids: Vec<libc::pid_t>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("addrs", &self.local_addrs())
            .finish()
    }
}

impl Target {
    /// Starts a target from the configuration text `text(port)` on a port `pick` chooses, and
    /// on another when that one was taken between the pick and the listener's bind (8 tries
    /// in all): for a caller that owns no port of its own (`rdmablk-perf --embedded`, tests).
    pub fn start_on_picked_port(
        text: impl Fn(u16) -> String,
        mut pick: impl FnMut() -> u16,
    ) -> Result<Target, TargetError> {
        let mut tries = 1;
        loop {
            match Config::from_str(&text(pick())).map_err(TargetError::from) {
                Ok(cfg) => match Target::start(cfg) {
                    Err(e) if e.is_addr_in_use() && tries < 8 => tries += 1,
                    r => return r,
                },
                Err(e) => return Err(e),
            }
        }
    }

    /// Starts a target for a validated configuration: opens the transports (for RDMA: the
    /// device, with the arena registered on it), opens the namespaces, starts the workers and
    /// the listeners.
    pub fn start(cfg: Config) -> Result<Target, TargetError> {
        let shared = open_shared(cfg)?;
        let workers_n = shared.counters_by_worker.len();
        let mut target = Target {
            shared: Arc::clone(&shared),
            workers: Vec::new(),
            worker_tids: Vec::new(),
        };
        let mut senders = Vec::new();
        for index in 0..workers_n {
            let (tx, handle, tid) = worker::spawn(index, Arc::clone(&shared))?;
            target.workers.push(handle);
            target.worker_tids.push(tid);
            senders.push(tx);
        }
        let _ = shared.workers.set(senders);
        for s in shared.subsystems.load().iter() {
            for ns in s.namespaces().iter() {
                runtime::gateways::attach(&shared, &s.nqn, ns);
            }
        }
        for (index, l) in shared.fixed.listeners.iter().enumerate() {
            let running = Port::start(&shared, l, index)?;
            shared.lock_ports().push(running);
        }
        shared.log_arena("started");
        Ok(target)
    }

    /// The addresses listened on (with the real port where the configuration said 0), in
    /// configuration order.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.shared.lock_ports().iter().map(|l| l.addr).collect()
    }

    /// A worker thread that is gone while the target runs, and how: it returned or panicked,
    /// or the kernel killed it without unwinding (a kernel BUG in a system call it made, e.g.
    /// Linux 6.1's hardened-usercopy BUG in TCP receive, `docs/tcp.md`; its oops is in dmesg).
    /// Either way its connections and namespace queues are dead and nothing would notice:
    /// `rdmablk-target` checks every second and exits non-zero, for the service manager to
    /// restart it.
    pub fn lost_worker(&self) -> Option<(usize, &'static str)> {
        self.workers
            .iter()
            .zip(&self.worker_tids)
            .enumerate()
            .find_map(|(i, (h, tid))| {
                if h.is_finished() {
                    return Some((
                        i,
                        "ended while the target runs (see the log above: a panic?)",
                    ));
                }
                // A thread ended without unwinding never marks its handle finished; it is
                // gone from the process's task list.
                let task = format!("/proc/self/task/{tid}");
                (!std::path::Path::new(&task).exists()).then_some((
                    i,
                    "was killed by the kernel without unwinding (a kernel BUG: see dmesg)",
                ))
            })
    }

    /// What the control socket, SIGHUP and `rdmablk-ctl` act on.
    pub fn handle(&self) -> TargetHandle {
        TargetHandle(Arc::clone(&self.shared))
    }

    /// Arena accounting (bytes in use return to 0 when every host has gone).
    pub fn arena_stats(&self) -> ArenaStats {
        self.shared.arena.stats()
    }

    /// Commands waiting for a data-pool buffer now, on every worker (as of the workers' last
    /// housekeeping tick).
    pub fn data_pool_waiting(&self) -> u64 {
        self.shared
            .counters_by_worker
            .iter()
            .map(|w| w.pool.waiting.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Every worker's shared receive buffers (NVMe/RDMA SRQs made so far).
    pub fn receive_buffers(&self) -> Vec<transport::ReceiveBuffers> {
        self.shared.receive_buffers()
    }

    /// Every worker's completion queues (NVMe/RDMA).
    pub fn completion_queues(&self) -> Vec<transport::CompletionQueues> {
        self.shared.completion_queues()
    }

    /// The remote key of the arena's memory region (RDMA). The region is registered without
    /// remote access, so the key lets no host touch the arena (isolation tests use it as a
    /// guess).
    pub fn arena_rkey(&self) -> Option<u32> {
        self.shared.arena.mr().map(|mr| mr.rkey())
    }

    /// Queues connected right now.
    pub fn queues_open(&self) -> usize {
        self.shared.queues_open.load(Ordering::Acquire)
    }

    /// Controllers alive right now.
    pub fn controllers(&self) -> usize {
        self.shared.controllers.len()
    }

    /// Stops accepting, lets in-flight I/O finish, completes held events, flushes every
    /// namespace, disconnects every host and waits for all threads. A failed final flush is
    /// logged; [`Target::shutdown_checked`] reports it.
    pub fn shutdown(self) {
        let _ = self.shutdown_checked();
    }

    /// [`Target::shutdown`], then an error if any namespace's final flush failed or was
    /// refused (a namespace fenced by an earlier failed flush): what hosts wrote may not be
    /// durable, and a service manager should hear so from the exit status.
    pub fn shutdown_checked(mut self) -> Result<(), TargetError> {
        self.stop_and_join();
        let failed = std::mem::take(
            &mut *self
                .shared
                .final_flush_failures
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if failed.is_empty() {
            Ok(())
        } else {
            Err(TargetError::FinalFlush { failed })
        }
    }

    fn stop_and_join(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        let listeners = std::mem::take(&mut *self.shared.lock_ports());
        for l in listeners {
            l.stop();
        }
        for h in self.workers.drain(..) {
            if h.join().is_err() {
                tracing::error!("a target thread panicked");
            }
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if !self.workers.is_empty() {
            self.stop_and_join();
        }
    }
}
