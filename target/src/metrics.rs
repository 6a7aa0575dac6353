//! Prometheus metrics: counted by each worker in its own counters (one writer each, relaxed
//! atomics, no lock and no allocation per I/O), merged only when scraped.
//!
//! `[metrics] address = "127.0.0.1:9464"` serves `GET /metrics` (Prometheus text format, via
//! `prometheus-client`). The metric families are listed in `docs/operations.md`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use rdmablk::nvme::{CommandKind, Status};

use crate::arena::pool::{host_key, HostPoolStats};
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
const OP_NAMES: [&str; OPS] = ["read", "write", "flush", "write_zeroes", "discard"];
/// Latency bucket upper bounds, microseconds (then +Inf).
const BUCKETS_US: [u64; 16] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000,
];
const NB: usize = BUCKETS_US.len() + 1;

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
    /// The worker's data pool ([`crate::arena::pool`]), published each pass.
    pub pool: PoolCounters,
}

/// A worker's data pool as the scraper and `rdmablk-ctl status` see it: stored by the worker
/// once a pass (relaxed stores, one writer), read by anyone.
#[derive(Debug, Default)]
pub struct PoolCounters {
    pub bytes: AtomicU64,
    pub bytes_in_use: AtomicU64,
    /// Commands waiting for a buffer now.
    pub waiting: AtomicU64,
    /// Commands that ever waited.
    pub waits: AtomicU64,
    /// Hosts holding or waiting for buffers now.
    pub hosts: AtomicU64,
    /// Those hosts, each with what it holds and how many of its commands wait (locked once
    /// a housekeeping tick by the worker, and by a reader).
    by_host: Mutex<Vec<HostPoolStats>>,
}

impl PoolCounters {
    /// Publishes `pool`'s figures (the worker, once a housekeeping tick).
    pub fn publish(&self, pool: &crate::arena::pool::DataPool) {
        let s = pool.stats();
        let had = self.hosts.load(Ordering::Relaxed);
        self.store(&s);
        if s.hosts > 0 || had > 0 {
            pool.host_stats(&mut self.by_host.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }

    /// Adds each host's bytes in use and commands waiting in this pool to `by_key`.
    pub fn add_by_host(&self, by_key: &mut HashMap<u64, (u64, u64)>) {
        let page = crate::arena::PAGE_BYTES as u64;
        for h in self
            .by_host
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let e = by_key.entry(h.host).or_default();
            e.0 += u64::from(h.pages_in_use) * page;
            e.1 += u64::from(h.waiting);
        }
    }

    pub fn store(&self, s: &crate::arena::pool::PoolStats) {
        let page = crate::arena::PAGE_BYTES as u64;
        self.bytes
            .store(u64::from(s.total_pages) * page, Ordering::Relaxed);
        self.bytes_in_use
            .store(u64::from(s.pages_in_use) * page, Ordering::Relaxed);
        self.waiting.store(u64::from(s.waiting), Ordering::Relaxed);
        self.waits.store(s.waited, Ordering::Relaxed);
        self.hosts.store(u64::from(s.hosts), Ordering::Relaxed);
    }

    /// (bytes, in use, waiting, waits, hosts) summed over `workers`.
    pub fn sum(workers: &[Arc<WorkerCounters>]) -> (u64, u64, u64, u64, u64) {
        workers.iter().fold((0, 0, 0, 0, 0), |a, w| {
            let p = &w.pool;
            (
                a.0 + p.bytes.load(Ordering::Relaxed),
                a.1 + p.bytes_in_use.load(Ordering::Relaxed),
                a.2 + p.waiting.load(Ordering::Relaxed),
                a.3 + p.waits.load(Ordering::Relaxed),
                a.4 + p.hosts.load(Ordering::Relaxed),
            )
        })
    }
}

/// One host's share of the data pools, summed over the workers (metrics, `rdmablk-ctl
/// status`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostPool {
    /// None: a connection whose Fabrics Connect has not named its host yet.
    pub hostnqn: Option<String>,
    pub bytes_in_use: u64,
    /// Its commands waiting for a buffer now.
    pub waiting: u64,
    /// Its commands that had to wait, over its controllers connected now.
    pub waits: u64,
}

/// Every host that holds or waits for data buffers now, or whose connected controllers'
/// commands ever waited for one; by host NQN.
pub fn pool_by_host(h: &crate::nvmf::Shared) -> Vec<HostPool> {
    let mut by_key: HashMap<u64, (u64, u64)> = HashMap::new();
    for w in &h.counters_by_worker {
        w.pool.add_by_host(&mut by_key);
    }
    let mut by_nqn: std::collections::BTreeMap<String, HostPool> = Default::default();
    for c in h.controllers.all() {
        let waits = c.pool_waits.load(Ordering::Relaxed);
        let now = by_key.remove(&host_key(c.hostnqn.as_bytes()));
        if waits == 0 && now.is_none() && !by_nqn.contains_key(&c.hostnqn) {
            continue;
        }
        let e = by_nqn.entry(c.hostnqn.clone()).or_default();
        e.hostnqn = Some(c.hostnqn.clone());
        e.waits += waits;
        let (bytes, waiting) = now.unwrap_or_default();
        e.bytes_in_use += bytes;
        e.waiting += waiting;
    }
    let mut out: Vec<HostPool> = by_nqn.into_values().collect();
    if !by_key.is_empty() {
        let (bytes, waiting) = by_key.values().fold((0, 0), |a, v| (a.0 + v.0, a.1 + v.1));
        out.push(HostPool {
            hostnqn: None,
            bytes_in_use: bytes,
            waiting,
            waits: 0,
        });
    }
    out
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

/// Encodes the target's metrics at each scrape.
#[derive(Debug)]
struct TargetCollector(TargetHandle);

type Labels = Vec<(&'static str, String)>;
/// One histogram series: labels, sum (s), count, buckets (upper bound s, count in that bucket
/// alone: the encoder makes them cumulative).
type HistogramSeries = (Labels, f64, u64, Vec<(f64, u64)>);

impl Collector for TargetCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.shared();
        let workers = &s.counters_by_worker;
        // Per namespace: every worker's counters of its slot, merged ([`namespace_io`]).
        let mut ops: Vec<(Labels, u64)> = Vec::new();
        let mut bytes: Vec<(Labels, u64, u64)> = Vec::new();
        let mut errors: Vec<(Labels, u64)> = Vec::new();
        let mut lat: Vec<HistogramSeries> = Vec::new();
        let mut in_flight: Vec<(Labels, i64)> = Vec::new();
        let mut qos: Vec<(Labels, u64, f64, i64)> = Vec::new();
        let mut host_qos: Vec<(Labels, u64, f64, i64)> = Vec::new();
        for io in namespace_io(&self.0) {
            let base: Labels = vec![
                ("subsystem", io.subsystem.clone()),
                ("nsid", io.nsid.to_string()),
            ];
            for (i, name) in OP_NAMES.iter().enumerate() {
                let mut l = base.clone();
                l.push(("op", (*name).to_string()));
                ops.push((l.clone(), io.ops[i]));
                // Per-bucket counts, not cumulative ones: prometheus-client's encoder adds
                // them up itself (passing running totals made every `le` bucket, and so every
                // quantile, far too high; the +Inf bucket then exceeded _count).
                let buckets: Vec<(f64, u64)> = (0..NB)
                    .map(|b| {
                        let ub = BUCKETS_US.get(b).map_or(f64::INFINITY, |&u| u as f64 / 1e6);
                        (ub, io.latency[i][b])
                    })
                    .collect();
                let count = io.latency[i].iter().sum();
                lat.push((l, io.latency_sum_ns[i] as f64 / 1e9, count, buckets));
            }
            in_flight.push((base.clone(), io.in_flight as i64));
            qos.push((
                base.clone(),
                io.qos_held,
                io.qos_held_seconds,
                io.qos_queued as i64,
            ));
            for (host, n, secs, now) in &io.host_qos {
                let mut l = base.clone();
                l.push(("host", host.clone()));
                host_qos.push((l, *n, *secs, *now as i64));
            }
            bytes.push((base.clone(), io.read_bytes, io.written_bytes));
            for ((op, field), n) in io.errors {
                let mut l = base.clone();
                l.push(("op", OP_NAMES[usize::from(op)].to_string()));
                let st = Status::from_field(field);
                l.push(("status", st.display_for(CommandKind::Io).to_string()));
                errors.push((l, n));
            }
        }
        counter_family(
            &mut enc,
            "rdmablk_namespace_ops",
            "Commands completed, by operation",
            &ops,
        )?;
        let read: Vec<(Labels, u64)> = bytes.iter().map(|(l, r, _)| (l.clone(), *r)).collect();
        let written: Vec<(Labels, u64)> = bytes.iter().map(|(l, _, w)| (l.clone(), *w)).collect();
        counter_family(
            &mut enc,
            "rdmablk_namespace_read_bytes",
            "Bytes read by hosts",
            &read,
        )?;
        counter_family(
            &mut enc,
            "rdmablk_namespace_written_bytes",
            "Bytes written by hosts",
            &written,
        )?;
        counter_family(
            &mut enc,
            "rdmablk_namespace_errors",
            "Commands failed, by operation and NVMe status",
            &errors,
        )?;
        {
            let mut m = enc.encode_descriptor(
                "rdmablk_namespace_latency_seconds",
                "Command latency, capsule received to response posted",
                None,
                MetricType::Histogram,
            )?;
            for (l, sum, count, buckets) in &lat {
                m.encode_family(l)?
                    .encode_histogram::<Labels>(*sum, *count, buckets, None)?;
            }
        }
        gauge_family(
            &mut enc,
            "rdmablk_namespace_in_flight",
            "Commands executing now",
            &in_flight,
        )?;
        let held: Vec<(Labels, u64)> = qos.iter().map(|(l, n, ..)| (l.clone(), *n)).collect();
        counter_family(
            &mut enc,
            "rdmablk_namespace_qos_throttled_commands",
            "Commands the namespace's QoS limits held before they ran",
            &held,
        )?;
        {
            let mut m = enc.encode_descriptor(
                "rdmablk_namespace_qos_throttled_seconds",
                "Time commands spent held by the namespace's QoS limits, summed",
                None,
                MetricType::Counter,
            )?;
            for (l, _, secs, _) in &qos {
                ConstCounter::new(*secs).encode(m.encode_family(l)?)?;
            }
        }
        let queued: Vec<(Labels, i64)> = qos.iter().map(|(l, .., q)| (l.clone(), *q)).collect();
        gauge_family(
            &mut enc,
            "rdmablk_namespace_qos_queued",
            "Commands held by the namespace's QoS limits now",
            &queued,
        )?;
        let held: Vec<(Labels, u64)> = host_qos.iter().map(|(l, n, ..)| (l.clone(), *n)).collect();
        counter_family(
            &mut enc,
            "rdmablk_namespace_host_qos_throttled_commands",
            "Commands of a host held before they ran (by its namespace's or its own per-host limits), where per-host limits are set",
            &held,
        )?;
        let queued: Vec<(Labels, i64)> =
            host_qos.iter().map(|(l, .., q)| (l.clone(), *q)).collect();
        gauge_family(
            &mut enc,
            "rdmablk_namespace_host_qos_queued",
            "Commands of a host held now, where per-host limits are set",
            &queued,
        )?;

        let mut per_host: HashMap<(String, String), i64> = HashMap::new();
        for c in s.controllers.all() {
            *per_host
                .entry((c.subsys.nqn.clone(), c.hostnqn.clone()))
                .or_default() += 1;
        }
        let ctrls: Vec<(Labels, i64)> = per_host
            .into_iter()
            .map(|((sub, host), n)| (vec![("subsystem", sub), ("host", host)], n))
            .collect();
        gauge_family(
            &mut enc,
            "rdmablk_controllers",
            "Controllers, by subsystem and host",
            &ctrls,
        )?;
        // ANA: per listener and group in use (a namespace's group), 1 for the state it is
        // in and 0 for the others (the enum-as-gauge form Prometheus' own exporters use), so
        // `rdmablk_ana_state{state="optimized"} == 0` finds a path that is not optimized.
        let mut groups: Vec<u32> = s
            .subsystems
            .load()
            .iter()
            .flat_map(|sub| {
                sub.namespaces()
                    .iter()
                    .map(|ns| ns.ana_group())
                    .collect::<Vec<_>>()
            })
            .collect();
        groups.sort_unstable();
        groups.dedup();
        let mut ana: Vec<(Labels, i64)> = Vec::new();
        for l in s.lock_ports().iter() {
            for &g in &groups {
                let now = l.ana.state(g);
                for st in rdmablk::nvme::ana::AnaState::ALL {
                    let labels = vec![
                        ("listener", l.addr.to_string()),
                        ("group", g.to_string()),
                        ("state", st.name().to_string()),
                    ];
                    ana.push((labels, i64::from(st == now)));
                }
            }
        }
        gauge_family(
            &mut enc,
            "rdmablk_ana_state",
            "ANA state of each group in use through each listener (1 for its state, 0 others)",
            &ana,
        )?;
        let conns = s.queues_open.load(Ordering::Relaxed) as i64;
        gauge_family(
            &mut enc,
            "rdmablk_connections",
            "Queues open, on every transport (an RDMA connection or a TCP socket each)",
            &[(vec![], conns)],
        )?;
        let a = s.arena.stats();
        gauge_family(
            &mut enc,
            "rdmablk_arena_bytes",
            "Arena bytes, by state",
            &[
                (vec![("state", "used".to_string())], a.bytes_in_use as i64),
                (
                    vec![("state", "data_pools".to_string())],
                    a.pool_bytes as i64,
                ),
                (
                    vec![("state", "free".to_string())],
                    a.total_bytes.saturating_sub(a.bytes_in_use + a.pool_bytes) as i64,
                ),
            ],
        )?;
        let per_worker = |f: fn(&PoolCounters) -> &AtomicU64| -> Vec<(Labels, i64)> {
            workers
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let v = f(&w.pool).load(Ordering::Relaxed) as i64;
                    (vec![("worker", i.to_string())], v)
                })
                .collect()
        };
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_bytes",
            "Bytes of each worker's data pool (arena.data_bytes split between workers)",
            &per_worker(|p| &p.bytes),
        )?;
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_bytes_in_use",
            "Bytes of each worker's data pool held by commands in flight",
            &per_worker(|p| &p.bytes_in_use),
        )?;
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_waiting",
            "Commands waiting for a data buffer now, by worker",
            &per_worker(|p| &p.waiting),
        )?;
        counter_family(
            &mut enc,
            "rdmablk_data_pool_waits",
            "Commands that had to wait for a data buffer, by worker",
            &per_worker(|p| &p.waits)
                .into_iter()
                .map(|(l, v)| (l, v as u64))
                .collect::<Vec<_>>(),
        )?;
        // By host: who holds the buffers and whose commands wait (hosts with neither now and
        // no wait ever are left out; `hostnqn=""` is a connection not yet named by Connect).
        let by_host = pool_by_host(s);
        let host = |p: &HostPool| vec![("hostnqn", p.hostnqn.clone().unwrap_or_default())];
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_host_bytes_in_use",
            "Bytes of the data pools held by a host's commands in flight",
            &by_host
                .iter()
                .map(|p| (host(p), p.bytes_in_use as i64))
                .collect::<Vec<_>>(),
        )?;
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_host_waiting",
            "A host's commands waiting for a data buffer now",
            &by_host
                .iter()
                .map(|p| (host(p), p.waiting as i64))
                .collect::<Vec<_>>(),
        )?;
        counter_family(
            &mut enc,
            "rdmablk_data_pool_host_waits",
            "A host's commands that had to wait for a data buffer, over its controllers connected now",
            &by_host
                .iter()
                .filter(|p| p.hostnqn.is_some())
                .map(|p| (host(p), p.waits))
                .collect::<Vec<_>>(),
        )?;
        if let Some(h) = crate::heap::stats() {
            gauge_family(
                &mut enc,
                "rdmablk_heap_bytes",
                "Process heap bytes (glibc mallinfo2), by state: in use, or free but kept by the allocator",
                &[
                    (vec![("state", "used".to_string())], h.in_use as i64),
                    (vec![("state", "free".to_string())], h.free as i64),
                ],
            )?;
        }
        let busy: Vec<(Labels, f64)> = workers
            .iter()
            .enumerate()
            .map(|(i, w)| (vec![("worker", i.to_string())], w.busy_seconds()))
            .collect();
        {
            let mut m = enc.encode_descriptor(
                "rdmablk_worker_busy_seconds",
                "Time each worker spent working rather than waiting (rate() is its busy fraction)",
                None,
                MetricType::Counter,
            )?;
            for (l, v) in &busy {
                ConstCounter::new(*v).encode(m.encode_family(l)?)?;
            }
        }
        let t = &s.counters;
        counter_family(
            &mut enc,
            "rdmablk_keep_alive_expirations",
            "Controllers torn down because their host went silent",
            &[(vec![], t.keep_alive_expirations.load(Ordering::Relaxed))],
        )?;
        counter_family(
            &mut enc,
            "rdmablk_reloads",
            "Configuration reloads, by result",
            &[
                (
                    vec![("result", "applied".into())],
                    t.reloads_applied.load(Ordering::Relaxed),
                ),
                (
                    vec![("result", "refused".into())],
                    t.reloads_refused.load(Ordering::Relaxed),
                ),
            ],
        )?;
        counter_family(
            &mut enc,
            "rdmablk_tls_connections",
            "NVMe/TCP TLS connections established, by the record layer that carries them",
            &[
                (
                    vec![("record_layer", "kernel".into())],
                    t.tls_kernel.load(Ordering::Relaxed),
                ),
                (
                    vec![("record_layer", "user".into())],
                    t.tls_user.load(Ordering::Relaxed),
                ),
            ],
        )?;
        Ok(())
    }
}

fn counter_family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (l, v) in series {
        ConstCounter::new(*v).encode(m.encode_family(l)?)?;
    }
    Ok(())
}

fn gauge_family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, i64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (l, v) in series {
        ConstGauge::new(*v).encode(m.encode_family(l)?)?;
    }
    Ok(())
}

/// The text a scrape returns.
pub fn render(target: &TargetHandle) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(TargetCollector(target.clone())));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::error!(error = %e, "encoding metrics");
    }
    out
}

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "metrics.address {addr}: cannot listen: {why} (pick a free address:port, or remove [metrics])"
)]
pub struct MetricsError {
    pub addr: SocketAddr,
    pub why: String,
}

/// The HTTP endpoint; dropping it stops it.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl MetricsServer {
    /// Serves `GET /metrics` for `target` on `addr`.
    pub fn start(target: TargetHandle, addr: SocketAddr) -> Result<MetricsServer, MetricsError> {
        let server = tiny_http::Server::http(addr).map_err(|e| MetricsError {
            addr,
            why: e.to_string(),
        })?;
        let bound = server.server_addr().to_ip().unwrap_or(addr);
        let server = Arc::new(server);
        let s = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("rdmablk-metrics".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    let resp = if req.method() == &tiny_http::Method::Get
                        && (req.url() == "/metrics" || req.url().starts_with("/metrics?"))
                    {
                        let header = tiny_http::Header::from_bytes(
                            &b"Content-Type"[..],
                            &b"text/plain; version=0.0.4; charset=utf-8"[..],
                        )
                        .expect("static header");
                        tiny_http::Response::from_string(render(&target)).with_header(header)
                    } else {
                        tiny_http::Response::from_string("rdmablk: GET /metrics\n")
                            .with_status_code(404)
                    };
                    let _ = req.respond(resp);
                }
            })
            .map_err(|e| MetricsError {
                addr,
                why: e.to_string(),
            })?;
        tracing::info!(addr = %bound, "metrics on http://{bound}/metrics");
        Ok(MetricsServer {
            server,
            thread: Some(thread),
            addr: bound,
        })
    }

    /// The address it listens on (the real port where the configuration said 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
