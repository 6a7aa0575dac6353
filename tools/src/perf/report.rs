//! The report: fio-like text, or one JSON document.
//!
//! # JSON schema (`--json`)
//!
//! Printed to stdout alone (progress and warnings go to stderr). Shaped like fio's
//! `--output-format=json` where fio has the same number:
//!
//! ```text
//! {
//!   "rdmablk-perf_version": "0.1.0",
//!   "timestamp": 1700000000,                      // unix seconds at the end of the run
//!   "timestamp_ms": 1700000000123,                // the same in milliseconds (fio's name)
//!   "global options": {
//!     "target": "file:/tmp/x", "engine": "io_uring", "block_size": 512,
//!     "rw": "randread", "rwmixread": 50, "bs": "4KiB", "bs_min": 4096, "bs_max": 4096,
//!     "iodepth": 32, "numjobs": 1, "runtime_ms": 2000 | null, "ramp_time_ms": 0,
//!     "size": 67108864 /* per job */, "offset": 0, "verify": "crc32c" | null,
//!     "verify_only": false, "seed": 123
//!   },
//!   "jobs": [ JOB, ... ],
//!   "total": JOB,                                 // all jobs merged; "jobname": "total"
//!   "exit_code": 0
//! }
//! JOB = {
//!   "jobname": "job0", "job_id": 0, "region_offset": 0, "region_size": 67108864,
//!   "elapsed_ms": 2000, "error": 0 /* failed I/Os */,
//!   "read": OP, "write": OP,
//!   "usr_cpu": 1.5, "sys_cpu": 20.1,              // percent of elapsed time
//!   "ctx": 123, "majf": 0, "minf": 10,
//!   "verify": { "blocks_checked": 0, "failures": 0 },
//!   "max_gap_ns": 250000,                         // longest time without a completion
//!   "paths": [ { "url": "soft://...", "ios": 10, "failures": 0, "live": true } ]
//!                                                 // multipath targets only
//! }
//! OP = {
//!   "io_bytes": 1048576, "io_kbytes": 1024, "bw_bytes": 524288 /* B/s */, "bw": 512 /* KiB/s */,
//!   "iops": 128.0, "runtime": 2000 /* ms */, "total_ios": 256, "errors": 0,
//!   "clat_ns": {
//!     "min": 1000, "max": 90000, "mean": 5000.5, "stddev": 100.2, "N": 256,
//!     "percentile": { "1.000000": 1100, "5.000000": 1200, ..., "99.990000": 88000 }
//!   }
//! }
//! ```
//!
//! Percentile keys are fio's default list with six decimals, values in nanoseconds.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use crate::perf::args::{format_size, Config};
use crate::perf::job::Region;
use crate::perf::stats::{rates, JobStats, OpStats, FIO_PERCENTILES};

/// One job's result for the report.
#[derive(Debug, Clone)]
pub struct JobReport {
    /// Job index.
    pub index: u32,
    /// Its slice of the device.
    pub region: Region,
    /// What it measured.
    pub stats: JobStats,
}

/// Everything the report shows.
#[derive(Debug)]
pub struct RunReport<'a> {
    /// The run's settings.
    pub cfg: &'a Config,
    /// The engine's name.
    pub engine: String,
    /// The engine's logical block size.
    pub block_size: u32,
    /// Per job.
    pub jobs: Vec<JobReport>,
    /// All jobs merged.
    pub total: JobStats,
    /// The process exit code.
    pub exit_code: i32,
    /// Each second of the run, as the progress line measured it (`--plot`).
    pub timeline: Vec<super::plot::Sample>,
    /// With `--embedded`: the CPU time (ns) the target's worker threads used while the jobs
    /// measured, and how many workers there are.
    pub target_cpu: Option<(u64, usize)>,
    /// With `--embedded=loop`: of the CPU time, what the initiators and the target spent
    /// watching for the other side's next batch (ns): waiting, not work.
    pub loop_spin: Option<(u64, u64)>,
}

impl RunReport<'_> {
    /// The embedded target's CPU time per I/O of the run, in µs.
    pub fn target_cpu_us_per_io(&self) -> Option<f64> {
        let ios = self.total.read.ios + self.total.write.ios;
        let (ns, _) = self.target_cpu?;
        (ios > 0).then(|| ns as f64 / 1e3 / ios as f64)
    }
}

// ---- text ----

/// `123`, `30.1k`, `1.23M`: fio's compact counts (SI, three significant digits).
pub fn format_count(v: f64) -> String {
    let units = [("", 1.0), ("k", 1e3), ("M", 1e6), ("G", 1e9)];
    let (suffix, scale) = units
        .iter()
        .rev()
        .find(|(_, s)| v >= *s * 0.9995)
        .copied()
        .unwrap_or(("", 1.0));
    sig3(v / scale, suffix)
}

fn sig3(x: f64, suffix: &str) -> String {
    if x >= 99.95 || suffix.is_empty() && x.fract() == 0.0 {
        format!("{x:.0}{suffix}")
    } else if x >= 9.995 {
        format!("{x:.1}{suffix}")
    } else {
        format!("{x:.2}{suffix}")
    }
}

/// Bytes (or bytes per second) in binary units, three significant digits: `118MiB`.
pub fn format_bytes_bin(v: f64) -> String {
    let units = [
        ("B", 1.0),
        ("KiB", 1024.0),
        ("MiB", 1048576.0),
        ("GiB", 1073741824.0),
    ];
    let (u, s) = units
        .iter()
        .rev()
        .find(|(_, s)| v >= *s)
        .copied()
        .unwrap_or(("B", 1.0));
    sig3(v / s, u)
}

/// Bytes (or bytes per second) in decimal units: `123MB`.
pub fn format_bytes_dec(v: f64) -> String {
    let units = [("B", 1.0), ("kB", 1e3), ("MB", 1e6), ("GB", 1e9)];
    let (u, s) = units
        .iter()
        .rev()
        .find(|(_, s)| v >= *s)
        .copied()
        .unwrap_or(("B", 1.0));
    sig3(v / s, u)
}

fn write_op(out: &mut String, name: &str, op: &OpStats, elapsed_ns: u64) {
    let (iops, bw) = rates(op, elapsed_ns);
    let _ = writeln!(
        out,
        "  {name}: IOPS={}, BW={}/s ({}/s)({}/{}msec)",
        format_count(iops),
        format_bytes_bin(bw),
        format_bytes_dec(bw),
        format_bytes_bin(op.bytes as f64),
        elapsed_ns / 1_000_000
    );
    if op.errors > 0 {
        let _ = writeln!(out, "    errors: {} failed I/Os", op.errors);
    }
    let l = &op.lat;
    let us = |ns: u64| ns as f64 / 1000.0;
    let _ = writeln!(
        out,
        "    clat (usec): min={}, max={}, avg={:.2}, stdev={:.2}",
        sig_us(us(l.min_ns())),
        sig_us(us(l.max_ns())),
        l.mean_ns() / 1000.0,
        l.stdev_ns() / 1000.0
    );
    let _ = writeln!(out, "    clat percentiles (usec):");
    for row in FIO_PERCENTILES.chunks(4) {
        let cells: Vec<String> = row
            .iter()
            .map(|&p| format!("{p:5.2}th=[{:>5}]", sig_us(us(l.percentile_ns(p)))))
            .collect();
        let _ = writeln!(out, "     | {},", cells.join(", "));
    }
    if out.ends_with(",\n") {
        out.truncate(out.len() - 2);
        out.push('\n');
    }
}

/// Microseconds: whole above 10, else two decimals (local I/O is often a few µs).
pub fn sig_us(us: f64) -> String {
    if us >= 10.0 {
        format!("{us:.0}")
    } else {
        format!("{us:.2}")
    }
}

fn write_job(out: &mut String, title: &str, s: &JobStats, cfg: &Config) {
    let _ = writeln!(out, "{title}: err={:>2}", s.io_errors());
    let (reads, writes) = cfg.rw.directions(cfg.rwmixread);
    if reads || s.read.ios > 0 || s.read.errors > 0 {
        write_op(out, "read", &s.read, s.elapsed_ns);
    }
    if writes || s.write.ios > 0 || s.write.errors > 0 {
        write_op(out, "write", &s.write, s.elapsed_ns);
    }
    let pct = |us: u64| {
        if s.elapsed_ns == 0 {
            0.0
        } else {
            us as f64 * 1e5 / s.elapsed_ns as f64
        }
    };
    let _ = writeln!(
        out,
        "  cpu          : usr={:.2}%, sys={:.2}%, ctx={}, majf={}, minf={}",
        pct(s.cpu.user_us),
        pct(s.cpu.sys_us),
        s.cpu.ctx,
        s.cpu.majf,
        s.cpu.minf
    );
    if cfg.verify {
        let _ = writeln!(
            out,
            "  verify       : crc32c, blocks checked={}, failures={}",
            s.verify.blocks_checked, s.verify.failures
        );
    }
    if !s.paths.is_empty() {
        let _ = writeln!(
            out,
            "  stall        : max clat={} ms, longest gap without a completion={} ms",
            ms(s.max_latency_ns()),
            ms(s.max_gap_ns)
        );
        for p in &s.paths {
            let _ = writeln!(
                out,
                "  path         : {} ios={} failures={} {}",
                p.url,
                p.ios,
                p.failures,
                if p.live { "live" } else { "down" }
            );
        }
    }
}

/// Milliseconds with two decimals.
fn ms(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e6)
}

fn status_line(
    out: &mut String,
    name: &str,
    jobs: &[JobReport],
    total: &JobStats,
    op: fn(&JobStats) -> &OpStats,
) {
    let (_, bw) = rates(op(total), total.elapsed_ns);
    let per_job: Vec<f64> = jobs
        .iter()
        .map(|j| rates(op(&j.stats), j.stats.elapsed_ns).1)
        .collect();
    let lo = per_job.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = per_job.iter().copied().fold(0.0, f64::max);
    let run_lo = jobs
        .iter()
        .map(|j| j.stats.elapsed_ns / 1_000_000)
        .min()
        .unwrap_or(0);
    let run_hi = jobs
        .iter()
        .map(|j| j.stats.elapsed_ns / 1_000_000)
        .max()
        .unwrap_or(0);
    let bytes = op(total).bytes as f64;
    let _ = writeln!(
        out,
        "{name:>7}: bw={}/s ({}/s), {}/s-{}/s ({}/s-{}/s), io={} ({}), run={run_lo}-{run_hi}msec",
        format_bytes_bin(bw),
        format_bytes_dec(bw),
        format_bytes_bin(lo),
        format_bytes_bin(hi),
        format_bytes_dec(lo),
        format_bytes_dec(hi),
        format_bytes_bin(bytes),
        format_bytes_dec(bytes),
    );
}

/// The fio-like text report.
pub fn text(r: &RunReport<'_>) -> String {
    let cfg = r.cfg;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rdmablk-perf: target={} engine={} rw={} bs={} iodepth={} numjobs={}{}{}{}",
        cfg.target,
        r.engine,
        cfg.rw.as_str(),
        cfg.bs,
        cfg.iodepth,
        cfg.numjobs,
        // No job ran (refused before its region was known): no size to show.
        r.jobs
            .first()
            .map(|j| format!(" size={}/job", format_size(j.region.len)))
            .unwrap_or_default(),
        cfg.runtime_ms
            .map(|ms| format!(" runtime={}s", ms as f64 / 1000.0))
            .unwrap_or_default(),
        if cfg.verify { " verify=crc32c" } else { "" },
    );
    for j in &r.jobs {
        write_job(&mut out, &format!("job{}", j.index), &j.stats, cfg);
    }
    if r.jobs.len() > 1 {
        write_job(&mut out, "All jobs", &r.total, cfg);
    }
    let _ = writeln!(out, "\nRun status (all jobs):");
    if r.total.read.ios > 0 {
        status_line(&mut out, "READ", &r.jobs, &r.total, |s| &s.read);
    }
    if r.total.write.ios > 0 {
        status_line(&mut out, "WRITE", &r.jobs, &r.total, |s| &s.write);
    }
    if let (Some((ns, workers)), Some(per_io)) = (r.target_cpu, r.target_cpu_us_per_io()) {
        let _ = writeln!(
            out,
            "  target cpu: {per_io:.3} us per I/O ({:.3} s on {workers} worker thread(s))",
            ns as f64 / 1e9
        );
    }
    let ios = r.total.read.ios + r.total.write.ios;
    if let (Some((host, target)), true) = (r.loop_spin, ios > 0) {
        let us = |ns: u64| ns as f64 / 1e3 / ios as f64;
        let _ = writeln!(
            out,
            "  loop spin : initiator {:.3} us, target {:.3} us per I/O of that CPU was waiting \
             for the other side",
            us(host),
            us(target)
        );
    }
    out
}

// ---- JSON ----

fn op_json(op: &OpStats, elapsed_ns: u64) -> Value {
    let (iops, bw) = rates(op, elapsed_ns);
    let l = &op.lat;
    let percentile: Map<String, Value> = FIO_PERCENTILES
        .iter()
        .map(|&p| (format!("{p:.6}"), json!(l.percentile_ns(p))))
        .collect();
    json!({
        "io_bytes": op.bytes,
        "io_kbytes": op.bytes / 1024,
        "bw_bytes": bw.round() as u64,
        "bw": (bw / 1024.0).round() as u64,
        "iops": iops,
        "runtime": elapsed_ns / 1_000_000,
        "total_ios": op.ios,
        "errors": op.errors,
        "clat_ns": {
            "min": l.min_ns(),
            "max": l.max_ns(),
            "mean": l.mean_ns(),
            "stddev": l.stdev_ns(),
            "N": l.count(),
            "percentile": percentile,
        },
    })
}

fn job_json(name: &str, id: Option<u32>, region: Option<Region>, s: &JobStats) -> Value {
    let pct = |us: u64| {
        if s.elapsed_ns == 0 {
            0.0
        } else {
            us as f64 * 1e5 / s.elapsed_ns as f64
        }
    };
    let mut v = json!({
        "jobname": name,
        "elapsed_ms": s.elapsed_ns / 1_000_000,
        "error": s.io_errors(),
        "read": op_json(&s.read, s.elapsed_ns),
        "write": op_json(&s.write, s.elapsed_ns),
        "usr_cpu": pct(s.cpu.user_us),
        "sys_cpu": pct(s.cpu.sys_us),
        "ctx": s.cpu.ctx,
        "majf": s.cpu.majf,
        "minf": s.cpu.minf,
        "verify": {
            "blocks_checked": s.verify.blocks_checked,
            "failures": s.verify.failures,
        },
        "max_gap_ns": s.max_gap_ns,
    });
    if !s.paths.is_empty() {
        v["paths"] = s
            .paths
            .iter()
            .map(|p| json!({"url": p.url, "ios": p.ios, "failures": p.failures, "live": p.live}))
            .collect();
    }
    if let (Some(id), Some(region)) = (id, region) {
        v["job_id"] = json!(id);
        v["region_offset"] = json!(region.start);
        v["region_size"] = json!(region.len);
    }
    v
}

/// The JSON report (schema in the module doc).
pub fn json(r: &RunReport<'_>) -> Value {
    let cfg = r.cfg;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    json!({
        "rdmablk-perf_version": env!("CARGO_PKG_VERSION"),
        "timestamp": now.as_secs(),
        "timestamp_ms": u64::try_from(now.as_millis()).unwrap_or(u64::MAX),
        "global options": {
            "target": cfg.target.to_string(),
            "engine": r.engine,
            "block_size": r.block_size,
            "rw": cfg.rw.as_str(),
            "rwmixread": cfg.rwmixread,
            "bs": cfg.bs.to_string(),
            "bs_min": cfg.bs.min,
            "bs_max": cfg.bs.max,
            "iodepth": cfg.iodepth,
            "numjobs": cfg.numjobs,
            "runtime_ms": cfg.runtime_ms,
            "ramp_time_ms": cfg.ramp_ms,
            "size": r.jobs.first().map(|j| j.region.len),
            "offset": cfg.offset,
            "verify": cfg.verify.then_some("crc32c"),
            "verify_only": cfg.verify_only,
            "seed": cfg.seed,
        },
        "jobs": r.jobs.iter()
            .map(|j| job_json(&format!("job{}", j.index), Some(j.index), Some(j.region), &j.stats))
            .collect::<Vec<_>>(),
        "total": job_json("total", None, None, &r.total),
        "target_cpu_ns": r.target_cpu.map(|(ns, _)| ns),
        "target_cpu_us_per_io": r.target_cpu_us_per_io(),
        "loop_spin_ns": r.loop_spin.map(|(host, target)| json!({"initiator": host, "target": target})),
        // Each second as the progress line measured it (ramp time included: `t_s` counts
        // from the start).
        "timeline": r.timeline.iter()
            .map(|s| json!({"t_s": s.t_s, "read_iops": s.read_iops, "write_iops": s.write_iops}))
            .collect::<Vec<_>>(),
        "exit_code": r.exit_code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::args::Args;
    use clap::Parser;

    fn sample() -> (Config, JobStats) {
        let cfg =
            Args::try_parse_from(["p", "file:/tmp/x", "--rw", "randrw", "--verify", "crc32c"])
                .unwrap()
                .validate()
                .unwrap();
        let mut s = JobStats {
            elapsed_ns: 2_000_000_000,
            ..Default::default()
        };
        for i in 1..=1000u64 {
            s.read.lat.record(i * 1000);
            s.read.ios += 1;
            s.read.bytes += 4096;
        }
        s.write.ios = 10;
        s.write.bytes = 40960;
        s.write.lat.record(50_000);
        (cfg, s)
    }

    #[test]
    fn json_has_fio_keys_iops_and_percentiles() {
        let (cfg, s) = sample();
        let region = Region {
            start: 0,
            len: 1 << 20,
        };
        let r = RunReport {
            cfg: &cfg,
            engine: "io_uring".into(),
            block_size: 512,
            jobs: vec![JobReport {
                index: 0,
                region,
                stats: s.clone(),
            }],
            total: s,
            exit_code: 0,
            timeline: Vec::new(),
            target_cpu: None,
            loop_spin: None,
        };
        let v: Value = serde_json::from_str(&json(&r).to_string()).unwrap();
        let read = &v["jobs"][0]["read"];
        assert_eq!(read["iops"].as_f64(), Some(500.0));
        assert_eq!(read["total_ios"], 1000);
        assert_eq!(read["bw_bytes"], 2_048_000);
        assert_eq!(read["bw"], 2000);
        let pct = read["clat_ns"]["percentile"].as_object().unwrap();
        assert_eq!(pct.len(), 17);
        assert!(pct.contains_key("1.000000") && pct.contains_key("99.990000"));
        let p99 = pct["99.000000"].as_u64().unwrap();
        assert!((989_000..=991_000).contains(&p99), "{p99}");
        assert_eq!(read["clat_ns"]["min"], 1000);
        assert_eq!(v["jobs"][0]["write"]["total_ios"], 10);
        assert_eq!(v["total"]["read"]["total_ios"], 1000);
        assert_eq!(v["global options"]["rw"], "randrw");
        assert_eq!(v["global options"]["verify"], "crc32c");
        assert_eq!(v["jobs"][0]["verify"]["failures"], 0);
        assert_eq!(v["exit_code"], 0);
    }

    #[test]
    fn text_looks_like_fio() {
        let (cfg, s) = sample();
        let region = Region {
            start: 0,
            len: 1 << 20,
        };
        let r = RunReport {
            cfg: &cfg,
            engine: "io_uring".into(),
            block_size: 512,
            jobs: vec![JobReport {
                index: 0,
                region,
                stats: s.clone(),
            }],
            total: s,
            exit_code: 0,
            timeline: Vec::new(),
            target_cpu: None,
            loop_spin: None,
        };
        let t = text(&r);
        assert!(
            t.contains("  read: IOPS=500, BW=1.95MiB/s (2.05MB/s)(3.91MiB/2000msec)"),
            "{t}"
        );
        assert!(
            t.contains("clat (usec): min=1.00, max=1000, avg=500.50"),
            "{t}"
        );
        assert!(
            t.contains("|  1.00th=[   10],  5.00th=[   50], 10.00th=[  100]"),
            "{t}"
        );
        assert!(t.contains("99.99th=[ 1000]\n"), "{t}");
        assert!(
            t.contains("   READ: bw=1.95MiB/s (2.05MB/s), 1.95MiB/s-1.95MiB/s"),
            "{t}"
        );
        assert!(
            t.contains("verify       : crc32c, blocks checked=0, failures=0"),
            "{t}"
        );
    }

    #[test]
    fn compact_numbers() {
        assert_eq!(format_count(245.0), "245");
        assert_eq!(format_count(30_120.0), "30.1k");
        assert_eq!(format_count(123_456.0), "123k");
        assert_eq!(format_count(1_234_567.0), "1.23M");
        assert_eq!(format_bytes_bin(118.0 * 1048576.0), "118MiB");
        assert_eq!(format_bytes_dec(123_456_789.0), "123MB");
        assert_eq!(format_bytes_bin(512.0), "512B");
    }
}
