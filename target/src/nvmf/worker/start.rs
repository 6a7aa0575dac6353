//! A worker's start: its thread (pinned where `target.worker_cpus` says), its backend queue
//! per namespace, its data pool and a poll group of every transport, each failure reported
//! to [`Target::start`](crate::nvmf::Target::start) before the loop runs.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::idle::OthersWait;
use super::ns_queues::NsQueues;
use super::pass_stats::PassStats;
use super::{set_counters, Worker, WorkerMsg, WorkerTx};
use crate::arena::pool::DataPool;
use crate::backend::{BackendError, Completion};
use crate::config::{self, PollMode};
use crate::nvmf::transport::PollGroup;
use crate::nvmf::{Shared, TargetError};
use crate::ring::wake::BackendWake;
use crate::ring::WorkerIo;

/// Backend queue depth per (worker, namespace).
const BACKEND_DEPTH_MAX: u32 = 1024;

pub(in crate::nvmf) fn spawn(
    index: usize,
    shared: Arc<Shared>,
) -> Result<(WorkerTx, JoinHandle<()>, libc::pid_t), TargetError> {
    let (tx, rx) = crossbeam_channel::unbounded::<WorkerMsg>();
    // Without an eventfd (the system refused one) an idle worker keeps to its shortest wait.
    let msg_wake = BackendWake::new().ok().map(Arc::new);
    let tx = WorkerTx {
        tx,
        wake: msg_wake.clone(),
    };
    let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
    let handle = std::thread::Builder::new()
        .name(format!("rdmablk-w{index}"))
        .spawn(move || {
            let pin = shared.fixed.target.worker_cpus.as_ref();
            if let Some(cpu) = pin.and_then(|l| l.for_worker(index)) {
                if let Err(source) = config::pin_current_thread(cpu) {
                    let _ = ready_tx.send(Err(TargetError::Pin { index, cpu, source }));
                    return;
                }
                tracing::debug!(worker = index, cpu, "worker pinned");
            }
            let depth = (shared.fixed.limits.max_queue_depth * 2).min(BACKEND_DEPTH_MAX);
            // Room for the namespaces there are, and for some added later (beyond it, I/O
            // waits in the backlog for ring room).
            let ring_entries = depth.saturating_mul(shared.namespaces.len().max(4) as u32);
            let io = WorkerIo::new(ring_entries, Some(Arc::clone(&shared.arena)));
            let mut nsq = NsQueues::default();
            let mut ns_counters = Vec::new();
            for ns in shared.namespaces.all() {
                set_counters(&mut ns_counters, &shared, index, ns.slot());
                if let Err(e) = nsq.open(&ns, &io, depth) {
                    let source = BackendError::Queue {
                        nsid: ns.nsid(),
                        why: e,
                    };
                    let _ = ready_tx.send(Err(TargetError::Worker { index, source }));
                    return;
                }
            }
            let pool_bytes = shared.fixed.data_pool_bytes_per_worker();
            let pool = match DataPool::new(&shared.arena, pool_bytes) {
                Ok(p) => p,
                Err(e) => {
                    let _ = ready_tx.send(Err(TargetError::DataPool { index, source: e }));
                    return;
                }
            };
            let mut groups: Vec<(config::Transport, Box<dyn PollGroup>)> = Vec::new();
            for t in &shared.transports {
                match t.poll_group(index) {
                    Ok(g) => groups.push((t.kind(), g)),
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
            }
            // SAFETY: gettid has no preconditions.
            let _ = ready_tx.send(Ok(unsafe { libc::gettid() }));
            exit_thread_for_tests(index);
            let backend_wake = io.wake_in_use();
            let others = OthersWait::new(&groups);
            let w = Worker {
                index,
                backend_depth: depth,
                busy_poll: shared.fixed.target.poll_mode == PollMode::Busy,
                spin: match shared.fixed.target.poll_mode {
                    PollMode::Adaptive => {
                        Duration::from_micros(shared.fixed.target.poll_spin_us.into())
                    }
                    PollMode::Busy | PollMode::Interrupt => Duration::ZERO,
                },
                spin_until: None,
                stats: PassStats::default(),
                shared,
                groups,
                others,
                rx,
                nsq,
                ns_counters,
                _io: io,
                backend_wake,
                msg_wake,
                idle_streak: 0,
                backlog: VecDeque::with_capacity(1024),
                pool,
                released: Vec::new(),
                comps: vec![Completion::EMPTY; 64],
                done: Vec::with_capacity(1024),
                last_tick: Instant::now(),
                stop_since: None,
            };
            w.run();
        })
        .map_err(TargetError::Thread)?;
    match ready_rx.recv() {
        Ok(Ok(tid)) => Ok((tx, handle, tid)),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(TargetError::Thread(std::io::Error::other(
                "worker exited at start",
            )))
        }
    }
}

/// The variable that makes a *debug* build's worker thread `N` end by the `exit` system call
/// right after start, without unwinding, as the kernel ends a thread it kills in an oops:
/// how `target/tests/daemon.rs` checks that `rdmablk-target` notices ([`Target::lost_worker`]).
/// Release builds ignore it.
///
/// [`Target::lost_worker`]: crate::nvmf::Target::lost_worker
pub const EXIT_WORKER_ENV: &str = "RDMABLK_TEST_EXIT_WORKER";

fn exit_thread_for_tests(index: usize) {
    if cfg!(debug_assertions)
        && std::env::var(EXIT_WORKER_ENV)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            == Some(index)
    {
        tracing::warn!(
            index,
            "{EXIT_WORKER_ENV}: this worker thread exits without unwinding"
        );
        // SAFETY: SYS_exit ends only the calling thread and never returns; nothing of this
        // thread is used after it (the test wants exactly the leak a killed thread leaves).
        unsafe { libc::syscall(libc::SYS_exit, 0) };
    }
}
