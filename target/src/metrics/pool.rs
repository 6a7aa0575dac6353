//! The workers' data pools as readers see them: each worker's figures ([`PoolCounters`],
//! published once a housekeeping tick) and each host's share summed over the workers ([`pool_by_host`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::WorkerCounters;
use crate::arena::pool::{host_key, HostPoolStats};

/// A worker's data pool as the scraper and `rdmablk-ctl status` see it: stored by the worker
/// once a housekeeping tick (relaxed stores, one writer), read by anyone.
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

    fn store(&self, s: &crate::arena::pool::PoolStats) {
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
    /// None: queues whose Fabrics Connect has not named their host yet, or whose controller
    /// is gone while they drain.
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
        let waits = c.pool_waits();
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
