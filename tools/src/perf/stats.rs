//! What a run measures: per op kind the I/O count, bytes and completion latency (an HDR
//! histogram for percentiles, exact min/max/mean/stdev beside it), per job the CPU time, and
//! the live counters behind the progress line.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hdrhistogram::Histogram;

use crate::perf::engine::{Op, PathIo};

/// fio's default percentile list.
pub const FIO_PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// Latencies above this (an hour) are recorded as this.
const MAX_TRACKED_NS: u64 = 3_600_000_000_000;

/// Completion latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct Latency {
    hist: Histogram<u64>,
    min_ns: u64,
    max_ns: u64,
    n: u64,
    /// Welford's running mean and sum of squared deviations: exact and stable.
    mean_ns: f64,
    m2: f64,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            // 3 significant digits: percentiles within 0.1%, as fio's own bins roughly are.
            hist: Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3).expect("valid bounds"),
            min_ns: u64::MAX,
            max_ns: 0,
            n: 0,
            mean_ns: 0.0,
            m2: 0.0,
        }
    }
}

impl Latency {
    /// Records one latency. Does not allocate.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.clamp(1, MAX_TRACKED_NS));
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        self.n += 1;
        let x = ns as f64;
        let delta = x - self.mean_ns;
        self.mean_ns += delta / self.n as f64;
        self.m2 += delta * (x - self.mean_ns);
    }

    /// Adds another set of samples (Chan et al.'s parallel combination of mean and variance).
    pub fn merge(&mut self, other: &Self) {
        if other.n == 0 {
            return;
        }
        self.hist.add(&other.hist).expect("same bounds");
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        let n = self.n + other.n;
        let delta = other.mean_ns - self.mean_ns;
        self.m2 += other.m2 + delta * delta * (self.n as f64 * other.n as f64) / n as f64;
        self.mean_ns += delta * other.n as f64 / n as f64;
        self.n = n;
    }

    /// Samples.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Smallest sample (0 when empty).
    pub fn min_ns(&self) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.min_ns
        }
    }

    /// Largest sample.
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Mean.
    pub fn mean_ns(&self) -> f64 {
        self.mean_ns
    }

    /// Sample standard deviation (n - 1), as fio reports it.
    pub fn stdev_ns(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            (self.m2 / (self.n - 1) as f64).sqrt()
        }
    }

    /// The samples in log-spaced bins, `per_decade` bins per power of ten: `(low_ns, high_ns,
    /// count)` of each non-empty bin, in increasing order (for `--plot`).
    pub fn log_bins(&self, per_decade: u32) -> Vec<(f64, f64, u64)> {
        let per = f64::from(per_decade.max(1));
        let mut bins: Vec<(f64, f64, u64)> = Vec::new();
        for v in self.hist.iter_recorded() {
            let i = ((v.value_iterated_to().max(1) as f64).log10() * per).floor();
            let lo = 10f64.powf(i / per);
            match bins.last_mut() {
                Some(b) if b.0 == lo => b.2 += v.count_at_value(),
                _ => bins.push((lo, 10f64.powf((i + 1.0) / per), v.count_at_value())),
            }
        }
        bins
    }

    /// The value below which `pct` percent of samples fall (0 when empty).
    pub fn percentile_ns(&self, pct: f64) -> u64 {
        if self.n == 0 {
            0
        } else {
            self.hist.value_at_quantile(pct / 100.0)
        }
    }
}

/// One direction's totals.
#[derive(Debug, Clone, Default)]
pub struct OpStats {
    /// Completed I/Os (successful or not).
    pub ios: u64,
    /// Bytes of successful I/Os.
    pub bytes: u64,
    /// Failed I/Os.
    pub errors: u64,
    /// Completion latency of every completed I/O.
    pub lat: Latency,
}

impl OpStats {
    /// Adds another job's totals.
    pub fn merge(&mut self, other: &Self) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.lat.merge(&other.lat);
    }
}

/// CPU time and scheduling counters from getrusage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuUsage {
    /// User time.
    pub user_us: u64,
    /// System time.
    pub sys_us: u64,
    /// Voluntary + involuntary context switches.
    pub ctx: u64,
    /// Major page faults.
    pub majf: u64,
    /// Minor page faults.
    pub minf: u64,
}

impl CpuUsage {
    /// The calling thread's usage so far.
    pub fn thread() -> Self {
        Self::get(libc::RUSAGE_THREAD)
    }

    /// The whole process's usage so far.
    pub fn process() -> Self {
        Self::get(libc::RUSAGE_SELF)
    }

    fn get(who: libc::c_int) -> Self {
        // SAFETY: rusage is plain old data for which all-zero bytes are a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a live, writable rusage; getrusage writes only into it.
        if unsafe { libc::getrusage(who, &mut ru) } != 0 {
            return Self::default();
        }
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        Self {
            user_us: us(ru.ru_utime),
            sys_us: us(ru.ru_stime),
            ctx: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
            majf: ru.ru_majflt as u64,
            minf: ru.ru_minflt as u64,
        }
    }

    /// Usage between `earlier` and `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            sys_us: self.sys_us.saturating_sub(earlier.sys_us),
            ctx: self.ctx.saturating_sub(earlier.ctx),
            majf: self.majf.saturating_sub(earlier.majf),
            minf: self.minf.saturating_sub(earlier.minf),
        }
    }

    /// Sums two usages.
    pub fn add(&self, o: &Self) -> Self {
        Self {
            user_us: self.user_us + o.user_us,
            sys_us: self.sys_us + o.sys_us,
            ctx: self.ctx + o.ctx,
            majf: self.majf + o.majf,
            minf: self.minf + o.minf,
        }
    }
}

/// Verification counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifyStats {
    /// Verify blocks checked (during the run and the read-back pass).
    pub blocks_checked: u64,
    /// Verify blocks that failed a check.
    pub failures: u64,
}

/// Everything one job (or the sum of all jobs) measured.
#[derive(Debug, Clone, Default)]
pub struct JobStats {
    /// Reads.
    pub read: OpStats,
    /// Writes.
    pub write: OpStats,
    /// Measured wall time.
    pub elapsed_ns: u64,
    /// CPU used during the measured time.
    pub cpu: CpuUsage,
    /// Verification.
    pub verify: VerifyStats,
    /// Longest time between two completions while measuring (a stall: failover, a slow
    /// target), in nanoseconds.
    pub max_gap_ns: u64,
    /// Per path of a multipath engine (summed over jobs by URL).
    pub paths: Vec<PathIo>,
    /// With `--embedded`: what the target had used when this job stopped measuring.
    pub embedded_at_end: Option<crate::perf::engine::embedded::Sample>,
}

impl JobStats {
    /// The stats of one direction.
    pub fn op_mut(&mut self, op: Op) -> &mut OpStats {
        match op {
            Op::Read => &mut self.read,
            Op::Write => &mut self.write,
        }
    }

    /// Adds another job: counters add up, latencies merge, elapsed is the longest.
    pub fn merge(&mut self, other: &Self) {
        self.read.merge(&other.read);
        self.write.merge(&other.write);
        self.elapsed_ns = self.elapsed_ns.max(other.elapsed_ns);
        self.cpu = self.cpu.add(&other.cpu);
        self.verify.blocks_checked += other.verify.blocks_checked;
        self.verify.failures += other.verify.failures;
        self.max_gap_ns = self.max_gap_ns.max(other.max_gap_ns);
        for p in &other.paths {
            match self.paths.iter_mut().find(|q| q.url == p.url) {
                Some(q) => {
                    q.ios += p.ios;
                    q.failures += p.failures;
                    q.live &= p.live;
                }
                None => self.paths.push(p.clone()),
            }
        }
    }

    /// The longest completion latency of either direction, in nanoseconds.
    pub fn max_latency_ns(&self) -> u64 {
        self.read.lat.max_ns().max(self.write.lat.max_ns())
    }

    /// Failed I/Os in both directions.
    pub fn io_errors(&self) -> u64 {
        self.read.errors + self.write.errors
    }
}

/// Per second rates of one direction.
pub fn rates(op: &OpStats, elapsed_ns: u64) -> (f64, f64) {
    if elapsed_ns == 0 {
        return (0.0, 0.0);
    }
    let secs = elapsed_ns as f64 / 1e9;
    (op.ios as f64 / secs, op.bytes as f64 / secs)
}

/// Counters a job bumps as I/Os complete and the progress line samples. Counts all I/O,
/// ramp included.
#[derive(Debug, Default)]
pub struct LiveCounters {
    /// Completed reads.
    pub read_ios: AtomicU64,
    /// Bytes read.
    pub read_bytes: AtomicU64,
    /// Completed writes.
    pub write_ios: AtomicU64,
    /// Bytes written.
    pub write_bytes: AtomicU64,
    /// Sum of the completion latencies of the reads and of the writes, ns (the per-second
    /// mean latency of `--plot`).
    pub read_lat_ns: AtomicU64,
    pub write_lat_ns: AtomicU64,
    /// Set when the job has finished.
    pub done: AtomicBool,
}

impl LiveCounters {
    /// Counts one completion of `bytes` that took `lat_ns`. Each counter is this job's own
    /// (no other thread writes it): uncontended relaxed adds.
    #[inline]
    pub fn add(&self, op: Op, bytes: u64, lat_ns: u64) {
        let (ios, b, l) = match op {
            Op::Read => (&self.read_ios, &self.read_bytes, &self.read_lat_ns),
            Op::Write => (&self.write_ios, &self.write_bytes, &self.write_lat_ns),
        };
        ios.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(bytes, Ordering::Relaxed);
        l.fetch_add(lat_ns, Ordering::Relaxed);
    }

    /// (read ios, read bytes, write ios, write bytes, read latency sum, write latency sum).
    pub fn snapshot(&self) -> [u64; 6] {
        [
            self.read_ios.load(Ordering::Relaxed),
            self.read_bytes.load(Ordering::Relaxed),
            self.write_ios.load(Ordering::Relaxed),
            self.write_bytes.load(Ordering::Relaxed),
            self.read_lat_ns.load(Ordering::Relaxed),
            self.write_lat_ns.load(Ordering::Relaxed),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_moments_and_percentiles() {
        let mut l = Latency::default();
        for v in 1..=100u64 {
            l.record(v * 1000);
        }
        assert_eq!((l.count(), l.min_ns(), l.max_ns()), (100, 1000, 100_000));
        assert!((l.mean_ns() - 50_500.0).abs() < 1e-6);
        // Sample stdev of 1000..=100000 step 1000: 1000 * sqrt(100*101/12).
        assert!(
            (l.stdev_ns() - 29_011.491_975_882).abs() < 1e-3,
            "{}",
            l.stdev_ns()
        );
        // Within the histogram's 3 significant digits.
        let near = |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 * 1e-3;
        assert!(
            near(l.percentile_ns(50.0), 50_000),
            "{}",
            l.percentile_ns(50.0)
        );
        assert!(near(l.percentile_ns(99.0), 99_000));
        assert!(near(l.percentile_ns(1.0), 1_000));
        assert!(near(l.percentile_ns(99.99), 100_000));
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let (mut a, mut b, mut all) = (Latency::default(), Latency::default(), Latency::default());
        for v in [5u64, 7, 9, 1000, 3] {
            a.record(v);
            all.record(v);
        }
        for v in [2u64, 200_000, 40] {
            b.record(v);
            all.record(v);
        }
        a.merge(&b);
        assert_eq!(
            (a.count(), a.min_ns(), a.max_ns()),
            (all.count(), 2, 200_000)
        );
        assert!((a.mean_ns() - all.mean_ns()).abs() < 1e-6);
        assert!((a.stdev_ns() - all.stdev_ns()).abs() < 1e-6);
        assert_eq!(a.percentile_ns(50.0), all.percentile_ns(50.0));
        a.merge(&Latency::default());
        assert_eq!(a.count(), 8);
    }

    #[test]
    fn empty_is_all_zero() {
        let l = Latency::default();
        assert_eq!((l.min_ns(), l.max_ns(), l.percentile_ns(99.0)), (0, 0, 0));
        assert_eq!(l.stdev_ns(), 0.0);
        assert_eq!(rates(&OpStats::default(), 0), (0.0, 0.0));
    }

    #[test]
    fn rates_per_second() {
        let op = OpStats {
            ios: 1000,
            bytes: 4096 * 1000,
            ..Default::default()
        };
        assert_eq!(rates(&op, 500_000_000), (2000.0, 8_192_000.0));
    }
}
