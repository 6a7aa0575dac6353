//! `rdmablk-perf`: a fio-like throughput and latency tool.
//!
//! A run is `--numjobs` jobs, each a thread with its own [`engine::Engine`] on its own slice
//! of the target (`[offset + i*size, offset + (i+1)*size)`), keeping `--iodepth` I/Os in
//! flight ([`worker`]) in the order the workload generator gives ([`job`]). The main thread
//! prints a progress line each second, then the report ([`report`]).
//!
//! Exit codes: [`EXIT_OK`], [`EXIT_USAGE`], [`EXIT_VERIFY`], [`EXIT_IO`]. `docs/perf.md` is the
//! user's guide.

pub mod args;
pub mod engine;
pub mod job;
pub mod plot;
pub mod report;
pub mod rng;
pub mod stats;
pub mod verify;
pub mod worker;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use self::args::{format_size, Args, Config, Target};
use self::engine::{Engine, OpenOptions};
use self::job::Region;
use self::report::{JobReport, RunReport};
use self::stats::{rates, JobStats, LiveCounters, OpStats};
use self::worker::{Schedule, Worker};

/// Everything went as asked.
pub const EXIT_OK: i32 = 0;
/// Bad flags, or the target could not be opened or is too small.
pub const EXIT_USAGE: i32 = 1;
/// A read did not hold what was written.
pub const EXIT_VERIFY: i32 = 2;
/// I/Os failed (or an engine failed as a whole).
pub const EXIT_IO: i32 = 3;

/// Runs the tool with parsed flags: prints the report (stdout), progress and errors (stderr),
/// and returns the exit code.
pub fn main(args: &Args) -> i32 {
    let mut cfg = match args.validate() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rdmablk-perf: {e}");
            return EXIT_USAGE;
        }
    };
    // A discovery URL names the subsystem it found, in the report too.
    cfg.target = match engine::resolve_discovery(&cfg.target) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rdmablk-perf: {e}");
            return EXIT_USAGE;
        }
    };
    // An unwritable --plot file is a usage error found before the run, not after it.
    if let Some(p) = &cfg.plot {
        if let Err(e) = std::fs::File::create(p) {
            eprintln!("rdmablk-perf: --plot {}: {e}", p.display());
            return EXIT_USAGE;
        }
    }
    let plan = match plan(&cfg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rdmablk-perf: {e:#}");
            return EXIT_USAGE;
        }
    };
    let report = run(&cfg, plan);
    if cfg.json {
        println!("{:#}", report::json(&report));
    } else {
        print!("{}", report::text(&report));
    }
    if let Some(p) = &cfg.plot {
        if let Err(e) = plot::write_svg(p, &report) {
            eprintln!("rdmablk-perf: --plot {}: {e:#}", p.display());
            return report.exit_code.max(EXIT_USAGE);
        }
    }
    report.exit_code
}

/// Engines opened and the working set laid out: what a run starts from.
pub struct Plan {
    engines: Vec<(Box<dyn Engine>, Region)>,
    engine_name: String,
    block_size: u32,
}

/// Opens one engine per job and assigns each job its region; every error is a setup error.
pub fn plan(cfg: &Config) -> anyhow::Result<Plan> {
    let opts = OpenOptions {
        numjobs: cfg.numjobs,
        queue_depth: cfg.iodepth,
        write: cfg.rw.writes(),
        direct: cfg.direct,
        hipri: cfg.hipri,
        min_file_len: if cfg.verify_only {
            None
        } else {
            cfg.size.map(|s| cfg.offset + s * u64::from(cfg.numjobs))
        },
    };
    let first = engine::open(&cfg.target, &opts)?;
    let (capacity, block_size) = (first.capacity(), first.block_size());
    let target = cfg.target.to_string();
    if cfg.bs.min % u64::from(block_size) != 0 || cfg.offset % u64::from(block_size) != 0 {
        bail!(
            "{target}: --bs {} and --offset {} must be multiples of its logical block size {}",
            cfg.bs,
            cfg.offset,
            block_size
        );
    }
    if cfg.offset >= capacity {
        bail!(
            "{target}: --offset {} is past its end ({capacity} bytes)",
            cfg.offset
        );
    }
    let size = cfg
        .size
        .unwrap_or((capacity - cfg.offset) / u64::from(cfg.numjobs));
    let size = size - size % cfg.bs.min;
    if size < cfg.bs.min {
        bail!(
            "{target}: {capacity} bytes leave less than one block of {} per job: use a bigger \
             target or fewer --numjobs",
            format_size(cfg.bs.min)
        );
    }
    let needed = cfg.offset + size * u64::from(cfg.numjobs);
    if needed > capacity {
        bail!(
            "{target}: --offset {} + --numjobs {} x --size {} needs {needed} bytes, it has \
             {capacity}",
            cfg.offset,
            cfg.numjobs,
            format_size(size)
        );
    }
    if cfg.verify && cfg.rw.writes() && size / cfg.bs.min > verify::MAX_TRACKED_BLOCKS {
        bail!(
            "--verify keeps 4 bytes per {} block: --size {} per job is too many blocks (at most \
             {}): give a smaller --size or a larger --bs",
            format_size(cfg.bs.min),
            format_size(size),
            verify::MAX_TRACKED_BLOCKS
        );
    }
    let engine_name = first.name().to_string();
    let mut engines = Vec::with_capacity(cfg.numjobs as usize);
    engines.push(first);
    for i in 1..cfg.numjobs {
        engines.push(engine::open(&cfg.target, &opts).with_context(|| format!("job {i}"))?);
    }
    let engines = engines
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            (
                e,
                Region {
                    start: cfg.offset + i as u64 * size,
                    len: size,
                },
            )
        })
        .collect();
    Ok(Plan {
        engines,
        engine_name,
        block_size,
    })
}

/// Runs the jobs of `plan` to the end and gathers the report.
pub fn run<'a>(cfg: &'a Config, plan: Plan) -> RunReport<'a> {
    let live: Vec<LiveCounters> = plan
        .engines
        .iter()
        .map(|_| LiveCounters::default())
        .collect();
    let mut setup_failed = false;
    let mut workers = Vec::new();
    for (i, ((engine, region), live)) in plan.engines.into_iter().zip(&live).enumerate() {
        match Worker::new(cfg, i as u32, engine, region, live) {
            Ok(w) => workers.push((w, region)),
            Err(e) => {
                eprintln!("rdmablk-perf: job {i}: {e}");
                setup_failed = true;
            }
        }
    }
    let start = Instant::now();
    let measure_from = start + Duration::from_millis(cfg.ramp_ms);
    let sched = Schedule {
        measure_from,
        deadline: cfg
            .runtime_ms
            .map(|ms| measure_from + Duration::from_millis(ms)),
    };
    let (tx, rx) = mpsc::channel();
    // Held until the target's CPU is sampled at the end (the last job's engine would stop it).
    let embedded = matches!(cfg.target, Target::Embedded(..))
        .then(engine::embedded::EmbeddedTarget::running)
        .flatten();
    let embedded_running = embedded.is_some();
    let outcomes = std::thread::scope(|scope| {
        // The embedded target's CPU from the start of the measured window to the end.
        let target_cpu_from = embedded_running.then(|| {
            scope.spawn(move || {
                std::thread::sleep(worker::until(measure_from));
                engine::embedded::Sample::now()
            })
        });
        let handles: Vec<_> = workers
            .into_iter()
            .map(|(w, region)| {
                let tx = tx.clone();
                scope.spawn(move || {
                    let out = w.run(cfg, region, sched);
                    let _ = tx.send(());
                    (region, out)
                })
            })
            .collect();
        drop(tx);
        let timeline = progress_loop(cfg, &live, &rx, start, measure_from);
        let outcomes = handles
            .into_iter()
            .map(|h| h.join().expect("job thread panicked"))
            .collect::<Vec<_>>();
        // From the start of the measured window to the end of the last job's (a --verify
        // read-back after it is not counted).
        let sampled = target_cpu_from.and_then(|h| {
            let from = h.join().expect("sampler thread panicked");
            let to = outcomes
                .iter()
                .filter_map(|(_, o)| o.stats.embedded_at_end)
                .max_by_key(|s| s.target_cpu_ns)?;
            Some((
                (
                    to.target_cpu_ns.saturating_sub(from.target_cpu_ns),
                    to.workers,
                ),
                (
                    to.loop_spin_ns.0.saturating_sub(from.loop_spin_ns.0),
                    to.loop_spin_ns.1.saturating_sub(from.loop_spin_ns.1),
                ),
            ))
        });
        (timeline, outcomes, sampled)
    });
    let (timeline, outcomes, sampled) = outcomes;
    let target_cpu = sampled.map(|(cpu, _)| cpu);
    let loop_spin = sampled
        .filter(|_| {
            matches!(
                cfg.target,
                Target::Embedded(args::EmbeddedTransport::Loop, ..)
            )
        })
        .map(|(_, spin)| spin);
    drop(embedded);

    let mut jobs = Vec::new();
    let mut total = JobStats::default();
    let mut engine_failed = setup_failed;
    for (i, (region, out)) in outcomes.into_iter().enumerate() {
        if let Some(e) = out.engine_error {
            eprintln!("rdmablk-perf: job {i}: engine failed: {e}");
            engine_failed = true;
        }
        total.merge(&out.stats);
        jobs.push(JobReport {
            index: i as u32,
            region,
            stats: out.stats,
        });
    }
    let exit_code = if total.verify.failures > 0 {
        eprintln!(
            "rdmablk-perf: verify FAILED: {} of {} checked blocks are wrong",
            total.verify.failures, total.verify.blocks_checked
        );
        EXIT_VERIFY
    } else if engine_failed || total.io_errors() > 0 {
        if total.io_errors() > 0 {
            eprintln!("rdmablk-perf: {} I/Os failed", total.io_errors());
        }
        EXIT_IO
    } else {
        EXIT_OK
    };
    RunReport {
        cfg,
        engine: plan.engine_name,
        block_size: plan.block_size,
        jobs,
        total,
        exit_code,
        timeline,
        target_cpu,
        loop_spin,
    }
}

/// Prints `[Ns] read ... write ...` on stderr each second until every job has reported done,
/// and returns what each second saw (for `--plot`).
fn progress_loop(
    cfg: &Config,
    live: &[LiveCounters],
    done: &mpsc::Receiver<()>,
    start: Instant,
    measure_from: Instant,
) -> Vec<plot::Sample> {
    let (reads, writes) = cfg.rw.directions(cfg.rwmixread);
    let mut finished = 0;
    let mut tick = 1u64;
    let mut prev = [0u64; 6];
    let mut timeline = Vec::new();
    while finished < live.len() {
        let next = start + Duration::from_secs(tick);
        match done.recv_timeout(worker::until(next)) {
            Ok(()) => finished += 1,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = live.iter().fold([0u64; 6], |mut acc, l| {
                    for (a, v) in acc.iter_mut().zip(l.snapshot()) {
                        *a += v;
                    }
                    acc
                });
                if !cfg.quiet {
                    let mut line = format!("[{tick}s]");
                    let sec = 1_000_000_000;
                    let fmt = |ios: u64, bytes: u64| {
                        let op = OpStats {
                            ios,
                            bytes,
                            ..Default::default()
                        };
                        let (iops, bw) = rates(&op, sec);
                        format!(
                            "{} IOPS {}/s",
                            report::format_count(iops),
                            report::format_bytes_bin(bw)
                        )
                    };
                    if reads {
                        line += &format!(" read {}", fmt(now[0] - prev[0], now[1] - prev[1]));
                    }
                    if writes {
                        line += &format!(" write {}", fmt(now[2] - prev[2], now[3] - prev[3]));
                    }
                    if Instant::now() < measure_from {
                        line += " (ramp)";
                    }
                    eprintln!("{line}");
                }
                let d = |i: usize| now[i] - prev[i];
                let mean_us = |ios: u64, lat: u64| (ios > 0).then(|| lat as f64 / ios as f64 / 1e3);
                timeline.push(plot::Sample {
                    t_s: tick,
                    read_iops: d(0) as f64,
                    write_iops: d(2) as f64,
                    read_lat_us: mean_us(d(0), d(4)),
                    write_lat_us: mean_us(d(2), d(5)),
                });
                prev = now;
                tick += 1;
            }
        }
    }
    timeline
}
