//! QoS: limits on a namespace's IOPS and read, write and total bandwidth, enforced across all
//! workers and all hosts together (SPDK's bdev QoS, ceph-nvmeof's `namespace set_qos`).
//!
//! Each limit is a GCRA ("generic cell rate algorithm", the virtual-scheduling form of a
//! token bucket): one atomic "theoretical arrival time" per limit, advanced by each admitted
//! command's cost with a compare-and-swap. No lock, and no refill timer: a worker that admits a
//! command reads the clock and moves the time on. A command is admitted while the limit's time
//! is at most [`BURST`] ahead of now; otherwise it is held by its worker (never failed) until
//! the time [`Qos::admit`] names. A namespace without limits costs one relaxed load per
//! command.
//!
//! Limits change live (reload): the new limits start with a full burst.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;

use crate::config::QosConfig;

/// How far ahead of now a limit's time may run: a burst of 10 ms of the rate is admitted at
/// once (SPDK refills its buckets every millisecond; 10 ms keeps a worker from waking for every
/// command of a high rate).
pub const BURST: Duration = Duration::from_millis(10);

/// One rate: `rate` units (commands or bytes) per second.
#[derive(Debug)]
struct Gcra {
    rate: u64,
    /// The theoretical arrival time, ns since [`Qos::epoch`].
    tat: AtomicU64,
}

impl Gcra {
    fn new(rate: u64) -> Gcra {
        Gcra {
            rate,
            tat: AtomicU64::new(0),
        }
    }

    /// ns that `cost` units take at the rate.
    fn cost_ns(&self, cost: u64) -> u64 {
        (u128::from(cost) * 1_000_000_000 / u128::from(self.rate.max(1))) as u64
    }

    /// Takes `cost` at `now`; `Err(ns)` to wait before it could be taken.
    fn take(&self, cost: u64, now: u64) -> Result<(), u64> {
        let inc = self.cost_ns(cost);
        let burst = BURST.as_nanos() as u64;
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let start = tat.max(now);
            if start - now > burst {
                return Err(start - now - burst);
            }
            match self.tat.compare_exchange_weak(
                tat,
                start + inc,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(t) => tat = t,
            }
        }
    }

    /// Gives back `cost` taken by [`Gcra::take`] (another limit refused the command).
    fn refund(&self, cost: u64) {
        let inc = self.cost_ns(cost);
        let _ = self
            .tat
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(inc))
            });
    }
}

/// The limits in force.
#[derive(Debug)]
struct Limits {
    iops: Option<Gcra>,
    total: Option<Gcra>,
    read: Option<Gcra>,
    write: Option<Gcra>,
}

impl Limits {
    fn of(cfg: &QosConfig) -> Option<Limits> {
        let l = Limits {
            iops: cfg.iops.map(Gcra::new),
            total: cfg.bandwidth.map(|b| Gcra::new(b.bytes())),
            read: cfg.read_bandwidth.map(|b| Gcra::new(b.bytes())),
            write: cfg.write_bandwidth.map(|b| Gcra::new(b.bytes())),
        };
        let any = l.iops.is_some() || l.total.is_some() || l.read.is_some() || l.write.is_some();
        any.then_some(l)
    }
}

/// What one command costs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cost {
    /// Data bytes (0 for commands without data: flush, write zeroes, deallocate).
    pub bytes: u32,
    pub write: bool,
}

/// A namespace's QoS: its limits (changed live) and what they held back.
#[derive(Debug)]
pub struct Qos {
    enabled: AtomicBool,
    limits: ArcSwapOption<Limits>,
    epoch: Instant,
    /// Commands held at least once, and the time they spent held (ns), and those held now.
    held_total: AtomicU64,
    held_ns: AtomicU64,
    held_now: AtomicU64,
}

impl Default for Qos {
    fn default() -> Qos {
        Qos::new(&QosConfig::default())
    }
}

impl Qos {
    pub fn new(cfg: &QosConfig) -> Qos {
        let q = Qos {
            enabled: AtomicBool::new(false),
            limits: ArcSwapOption::empty(),
            epoch: Instant::now(),
            held_total: AtomicU64::new(0),
            held_ns: AtomicU64::new(0),
            held_now: AtomicU64::new(0),
        };
        q.set(cfg);
        q
    }

    /// Replaces the limits (a reload); the new ones start with a full burst.
    pub fn set(&self, cfg: &QosConfig) {
        let l = Limits::of(cfg);
        self.enabled.store(l.is_some(), Ordering::Release);
        self.limits.store(l.map(Arc::new));
    }

    /// Whether any limit is set (one relaxed load: the unlimited path's whole cost).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Admits a command of `cost` at `now`, or says how long to wait before asking again.
    pub fn admit(&self, cost: Cost, now: Instant) -> Result<(), Duration> {
        let Some(l) = &*self.limits.load() else {
            return Ok(());
        };
        let t = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        let dir = if cost.write { &l.write } else { &l.read };
        let bytes = u64::from(cost.bytes);
        let steps: [(&Option<Gcra>, u64); 3] = [(&l.iops, 1), (&l.total, bytes), (dir, bytes)];
        for (i, (g, c)) in steps.iter().enumerate() {
            let Some(g) = g else { continue };
            if let Err(wait) = g.take(*c, t) {
                for (g, c) in &steps[..i] {
                    if let Some(g) = g {
                        g.refund(*c);
                    }
                }
                return Err(Duration::from_nanos(wait));
            }
        }
        Ok(())
    }

    /// Gives back what [`Qos::admit`] took for `cost` (another limit refused the command).
    pub fn refund(&self, cost: Cost) {
        let Some(l) = &*self.limits.load() else {
            return;
        };
        let bytes = u64::from(cost.bytes);
        let dir = if cost.write { &l.write } else { &l.read };
        for (g, c) in [(&l.iops, 1), (&l.total, bytes), (dir, bytes)] {
            if let Some(g) = g {
                g.refund(c);
            }
        }
    }

    /// A command was held (it waits in a worker's queue).
    pub fn held(&self) {
        self.held_total.fetch_add(1, Ordering::Relaxed);
        self.held_now.fetch_add(1, Ordering::Relaxed);
    }

    /// A held command was let go after `waited`.
    pub fn released(&self, waited: Duration) {
        self.held_ns
            .fetch_add(waited.as_nanos() as u64, Ordering::Relaxed);
        self.held_now.fetch_sub(1, Ordering::Relaxed);
    }

    /// (commands held at least once, seconds they spent held, commands held now).
    pub fn stats(&self) -> (u64, f64, u64) {
        (
            self.held_total.load(Ordering::Relaxed),
            self.held_ns.load(Ordering::Relaxed) as f64 / 1e9,
            self.held_now.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ByteSize;

    fn admitted_in(q: &Qos, cost: Cost, secs: f64) -> u64 {
        // A simulated clock: each refusal moves it to when the limit would admit.
        let start = Instant::now();
        let mut now = start;
        let mut n = 0;
        while now.duration_since(start).as_secs_f64() < secs {
            match q.admit(cost, now) {
                Ok(()) => n += 1,
                Err(wait) => now += wait.max(Duration::from_micros(1)),
            }
        }
        n
    }

    #[test]
    fn iops_and_bandwidth_hold_to_their_rates() {
        let q = Qos::new(&QosConfig {
            iops: Some(5000),
            ..QosConfig::default()
        });
        let r = Cost {
            bytes: 4096,
            write: false,
        };
        let n = admitted_in(&q, r, 2.0);
        // 2 s at 5000/s, plus one burst (10 ms: 50).
        assert!((10_000..=10_051).contains(&n), "{n}");

        let q = Qos::new(&QosConfig {
            write_bandwidth: Some(ByteSize(100 << 20)),
            ..QosConfig::default()
        });
        let w = Cost {
            bytes: 128 << 10,
            write: true,
        };
        let n = admitted_in(&q, w, 1.0);
        assert!(
            (800..=810).contains(&n),
            "{n} x 128 KiB in 1 s at 100 MiB/s"
        );
        // Reads are not limited by a write limit.
        assert!(q.admit(r, Instant::now()).is_ok());
        assert!(q.admit(r, Instant::now()).is_ok());
    }

    #[test]
    fn a_refusal_takes_nothing_and_no_limit_costs_nothing() {
        let q = Qos::new(&QosConfig {
            iops: Some(1_000_000),
            bandwidth: Some(ByteSize(1 << 20)),
            ..QosConfig::default()
        });
        let big = Cost {
            bytes: 1 << 20,
            write: false,
        };
        let now = Instant::now();
        assert!(q.admit(big, now).is_ok());
        // The bandwidth refuses the next: the IOPS limit got its token back.
        let wait = q.admit(big, now).unwrap_err();
        assert!(wait > Duration::from_millis(900), "{wait:?}");
        let l = q.limits.load_full().unwrap();
        let iops_tat = l.iops.as_ref().unwrap().tat.load(Ordering::Relaxed);
        assert_eq!(
            iops_tat,
            l.iops.as_ref().unwrap().cost_ns(1) + (now - q.epoch).as_nanos() as u64
        );
        q.set(&QosConfig::default());
        assert!(!q.enabled());
        assert!(q.admit(big, now).is_ok());
    }
}

/// A namespace's per-host limits (`host_qos`): each host (by host NQN) gets its own buckets
/// with the same limits, so one host over them waits while the others go on.
#[derive(Debug, Default)]
pub struct HostQos {
    enabled: AtomicBool,
    inner: std::sync::Mutex<(QosConfig, std::collections::HashMap<String, Arc<Qos>>)>,
}

impl HostQos {
    /// Whether per-host limits are set (one relaxed load).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The buckets of host `hostnqn` (made on its first command; a queue keeps the `Arc`, so
    /// this lock is taken once per queue and namespace, not per command).
    pub fn of(&self, hostnqn: &str) -> Arc<Qos> {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let cfg = g.0;
        Arc::clone(
            g.1.entry(hostnqn.to_owned())
                .or_insert_with(|| Arc::new(Qos::new(&cfg))),
        )
    }

    /// Each host's (host NQN, commands held at least once, seconds held, held now), by NQN.
    pub fn stats(&self) -> Vec<(String, u64, f64, u64)> {
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> =
            g.1.iter()
                .map(|(h, q)| {
                    let (n, secs, now) = q.stats();
                    (h.clone(), n, secs, now)
                })
                .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// New per-host limits (a reload), for every host's buckets.
    pub fn set(&self, cfg: &QosConfig) {
        let mut g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        g.0 = *cfg;
        for q in g.1.values() {
            q.set(cfg);
        }
        self.enabled
            .store(Limits::of(cfg).is_some(), Ordering::Release);
    }
}
