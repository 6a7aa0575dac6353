//! The counters: each worker's per namespace slot (one writer, relaxed atomics, no lock and
//! no allocation per I/O) and the target-wide ones, and their merge into [`NamespaceIo`] when
//! a scrape or `rdmablk-ctl` reads them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use rdmablk::nvme::Status;

use super::PoolCounters;
use crate::nvmf::TargetHandle;

/// The I/O operations counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read = 0,
    Write = 1,
    Flush = 2,
    WriteZeroes = 3,
    Discard = 4,
}

const OPS: usize = 5;
pub(super) const OP_NAMES: [&str; OPS] = ["read", "write", "flush", "write_zeroes", "discard"];
/// Latency bucket upper bounds, microseconds (then +Inf).
pub(super) const BUCKETS_US: [u64; 16] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000,
];
pub(super) const NB: usize = BUCKETS_US.len() + 1;

/// One worker's counters for one namespace slot. Written by that worker only.
#[derive(Debug, Default)]
pub struct NsCounters {
    /// Commands that reached execution, and those of them that finished (in flight = the
    /// difference).
    started: AtomicU64,
    finished: AtomicU64,
    ops: [AtomicU64; OPS],
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
    latency_sum_ns: [AtomicU64; OPS],
    latency: [[AtomicU64; NB]; OPS],
    /// Failed commands by (op, status field): rare, so a lock is fine.
    errors: Mutex<HashMap<(u8, u16), u64>>,
}

#[cfg(test)]
impl NsCounters {
    /// (bytes read, latency sum of reads in ns): for tests of the counting.
    pub(crate) fn reads_for_tests(&self) -> (u64, u64) {
        (
            self.read_bytes.load(Ordering::Relaxed),
            self.latency_sum_ns[OpKind::Read as usize].load(Ordering::Relaxed),
        )
    }
}

fn add(a: &AtomicU64, n: u64) {
    // One writer per counter: a relaxed add never contends.
    a.fetch_add(n, Ordering::Relaxed);
}

impl NsCounters {
    pub fn started(&self) {
        add(&self.started, 1);
    }

    /// A command finished (successfully or not); `executed`: it was counted by
    /// [`NsCounters::started`].
    pub fn done(&self, op: OpKind, bytes: u32, status: Status, latency: Duration, executed: bool) {
        let i = op as usize;
        if executed {
            add(&self.finished, 1);
        }
        add(&self.ops[i], 1);
        if status.is_success() {
            match op {
                OpKind::Read => add(&self.read_bytes, u64::from(bytes)),
                OpKind::Write => add(&self.written_bytes, u64::from(bytes)),
                _ => {}
            }
        } else {
            let mut e = self.errors.lock().unwrap_or_else(|p| p.into_inner());
            *e.entry((i as u8, status.to_field())).or_default() += 1;
        }
        let us = latency.as_micros() as u64;
        let b = BUCKETS_US.iter().position(|&ub| us <= ub).unwrap_or(NB - 1);
        add(&self.latency[i][b], 1);
        add(&self.latency_sum_ns[i], latency.as_nanos() as u64);
    }
}

/// One worker's counters.
#[derive(Debug)]
pub struct WorkerCounters {
    /// When the worker's counters started.
    started: std::time::Instant,
    /// Time the worker spent waiting for work, ns (busy time is the rest).
    pub idle_ns: AtomicU64,
    /// By namespace slot (published for the scraper; the worker keeps its own copy).
    slots: ArcSwap<Vec<Option<Arc<NsCounters>>>>,
    /// The worker's data pool ([`crate::arena::pool`]), published each housekeeping tick.
    pub pool: PoolCounters,
}

impl Default for WorkerCounters {
    fn default() -> Self {
        WorkerCounters {
            started: std::time::Instant::now(),
            idle_ns: AtomicU64::new(0),
            slots: ArcSwap::default(),
            pool: PoolCounters::default(),
        }
    }
}

impl WorkerCounters {
    /// Time spent working since the worker started, seconds.
    pub fn busy_seconds(&self) -> f64 {
        let total = self.started.elapsed().as_nanos() as u64;
        total.saturating_sub(self.idle_ns.load(Ordering::Relaxed)) as f64 / 1e9
    }

    /// Fresh counters for `slot` (a namespace was opened there), published and returned.
    pub fn reset_slot(&self, slot: usize) -> Arc<NsCounters> {
        let fresh = Arc::new(NsCounters::default());
        let mut v = (**self.slots.load()).clone();
        if v.len() <= slot {
            v.resize(slot + 1, None);
        }
        v[slot] = Some(Arc::clone(&fresh));
        self.slots.store(Arc::new(v));
        fresh
    }

    fn slot(&self, slot: usize) -> Option<Arc<NsCounters>> {
        self.slots.load().get(slot).cloned().flatten()
    }
}

/// Target-wide counters that are not per I/O.
#[derive(Debug, Default)]
pub struct TargetCounters {
    pub keep_alive_expirations: AtomicU64,
    pub reloads_applied: AtomicU64,
    pub reloads_refused: AtomicU64,
    /// NVMe/TCP TLS connections established, by the record layer their records went to:
    /// the kernel's (kTLS), OpenSSL's in user space.
    pub tls_kernel: AtomicU64,
    pub tls_user: AtomicU64,
}

/// One namespace's I/O counters, every worker's merged: what a scrape and `rdmablk-ctl top`
/// read. Counters only grow (a reload that reopens the namespace starts them again).
#[derive(Clone, Debug, Default)]
pub struct NamespaceIo {
    pub subsystem: String,
    pub nsid: u32,
    /// Commands completed, by [`OpKind`].
    pub ops: [u64; OPS],
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Commands that failed, by (operation, NVMe status field).
    pub errors: HashMap<(u8, u16), u64>,
    /// Commands executing now.
    pub in_flight: u64,
    /// QoS: commands held at least once, the seconds they spent held, and those held now.
    pub qos_held: u64,
    pub qos_held_seconds: f64,
    pub qos_queued: u64,
    /// Per-host limits (`host_qos`): (host NQN, commands held, seconds held, held now) of
    /// each host that sent commands since they were set.
    pub host_qos: Vec<(String, u64, f64, u64)>,
    /// Latency sum, ns, by operation.
    pub latency_sum_ns: [u64; OPS],
    /// Latency histogram by operation: count per bucket of [`LATENCY_BUCKETS_US`] (then one
    /// for anything slower), not cumulative.
    pub latency: [[u64; NB]; OPS],
}

/// Upper bounds of the latency buckets, microseconds; a last bucket takes the rest.
pub const LATENCY_BUCKETS_US: [u64; 16] = BUCKETS_US;
/// The operations' names, by [`OpKind`] index.
pub const OP_NAMES_BY_KIND: [&str; OPS] = OP_NAMES;

/// Every namespace's I/O counters now.
pub fn namespace_io(target: &TargetHandle) -> Vec<NamespaceIo> {
    let s = target.shared();
    let mut out = Vec::new();
    for sub in s.subsystems.load().iter() {
        for ns in sub.namespaces().iter() {
            let mut io = NamespaceIo {
                subsystem: sub.nqn.clone(),
                nsid: ns.nsid(),
                ..NamespaceIo::default()
            };
            let (mut started, mut finished) = (0u64, 0u64);
            for c in s
                .counters_by_worker
                .iter()
                .filter_map(|w| w.slot(ns.slot()))
            {
                let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
                started += get(&c.started);
                finished += get(&c.finished);
                io.read_bytes += get(&c.read_bytes);
                io.written_bytes += get(&c.written_bytes);
                for i in 0..OPS {
                    io.ops[i] += get(&c.ops[i]);
                    io.latency_sum_ns[i] += get(&c.latency_sum_ns[i]);
                    for b in 0..NB {
                        io.latency[i][b] += get(&c.latency[i][b]);
                    }
                }
                let e = c.errors.lock().unwrap_or_else(|p| p.into_inner());
                for (k, v) in e.iter() {
                    *io.errors.entry(*k).or_default() += v;
                }
            }
            io.in_flight = started.saturating_sub(finished);
            (io.qos_held, io.qos_held_seconds, io.qos_queued) = ns.qos().stats();
            io.host_qos = ns.host_qos().stats();
            out.push(io);
        }
    }
    out
}
