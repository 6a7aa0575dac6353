//! One job's I/O loop: keeps `--iodepth` I/Os in flight on its own engine, times each one,
//! stamps writes and checks reads when verifying.
//!
//! Everything is allocated in [`Worker::new`]: one buffer per in-flight slot, the slot table,
//! the completion vector and the per-block verify state. The loop itself allocates nothing.
//!
//! A slot's life: `Free -> InFlight -> Free`. A slot is free when it holds its buffer; while
//! in flight the buffer travels inside the engine request. When verifying, an I/O that would
//! overlap one in flight waits (the generator's sequence is kept, only delayed), so every read
//! is checked against the latest acknowledged write of each block.

use std::time::{Duration, Instant};

use crate::perf::args::{Config, RwMode};
use crate::perf::engine::{Completion, Engine, EngineError, IoBuf, IoReq, Op, QueueFull};
use crate::perf::job::{IoSpec, Region, Workload};
use crate::perf::rng::SplitMix64;
use crate::perf::stats::{CpuUsage, JobStats, LiveCounters};
use crate::perf::verify::{self, BlockState, BlockStates, Expected};

/// The most I/O errors and verify failures a job prints; it counts them all.
const MAX_PRINTED_ERRORS: u64 = 10;

/// One in-flight table entry.
#[derive(Debug)]
struct Slot {
    /// `Some` while free.
    buf: Option<IoBuf>,
    op: Op,
    offset: u64,
    len: u32,
    submitted: Instant,
}

impl Slot {
    fn in_flight(&self) -> bool {
        self.buf.is_none()
    }
}

/// What the worker knows for verification.
#[derive(Debug)]
struct Verifier {
    seed: u64,
    /// Verify block bytes (`--bs` low end).
    block: u64,
    region_start: u64,
    /// `Some` when the run writes: the generation of every block's last acknowledged write.
    /// `None` (a read-only run): blocks may hold any generation.
    states: Option<BlockStates>,
}

impl Verifier {
    fn blocks(&self, offset: u64, len: u32) -> impl Iterator<Item = (usize, u64)> {
        let first = ((offset - self.region_start) / self.block) as usize;
        let block = self.block;
        (0..u64::from(len) / block).map(move |k| (first + k as usize, offset + k * block))
    }

    fn expected(&self, idx: usize, offset: u64) -> Option<Expected> {
        let generation = match &self.states {
            None => None,
            Some(s) => match s.get(idx) {
                BlockState::Written(g) => Some(g),
                BlockState::Unwritten | BlockState::Undefined => return None,
            },
        };
        Some(Expected {
            offset,
            seed: self.seed,
            generation,
        })
    }
}

/// What one job did.
#[derive(Debug)]
pub struct JobOutcome {
    /// Its measurements.
    pub stats: JobStats,
    /// The engine failed as a whole (not one I/O): the job stopped early.
    pub engine_error: Option<EngineError>,
}

/// When a job measures and stops, shared by all jobs of a run.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Stats start here (after `--ramp-time`).
    pub measure_from: Instant,
    /// No new I/O after this (time-based runs).
    pub deadline: Option<Instant>,
}

/// One job: its engine, buffers, in-flight table and stats.
pub struct Worker<'a> {
    index: u32,
    engine: Box<dyn Engine>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    completions: Vec<Completion>,
    verifier: Option<Verifier>,
    stats: JobStats,
    live: &'a LiveCounters,
    measuring: Option<(Instant, CpuUsage)>,
    last_completion: Option<Instant>,
    printed_errors: u64,
}

impl<'a> Worker<'a> {
    /// Allocates everything the job needs: buffers for `iodepth` I/Os of up to `bs.max`, and
    /// per-block verify state for `region` when the run writes and verifies.
    pub fn new(
        cfg: &Config,
        index: u32,
        mut engine: Box<dyn Engine>,
        region: Region,
        live: &'a LiveCounters,
    ) -> Result<Self, EngineError> {
        let depth = cfg.iodepth as usize;
        let mut bufs = engine.alloc_buffers(depth, cfg.bs.max as usize)?;
        if cfg.rw.writes() && !cfg.verify {
            // Incompressible data, written once: a plain write run reuses it.
            let mut rng = SplitMix64::new(cfg.seed ^ u64::from(index));
            for b in &mut bufs {
                for w in b.as_mut_slice().chunks_mut(8) {
                    let r = rng.next_u64().to_le_bytes();
                    w.copy_from_slice(&r[..w.len()]);
                }
            }
        }
        let now = Instant::now();
        let slots = bufs
            .into_iter()
            .map(|b| Slot {
                buf: Some(b),
                op: Op::Read,
                offset: 0,
                len: 0,
                submitted: now,
            })
            .collect();
        let verifier = cfg.verify.then(|| Verifier {
            seed: cfg.seed,
            block: cfg.bs.min,
            region_start: region.start,
            states: cfg
                .rw
                .writes()
                .then(|| BlockStates::new(region.len / cfg.bs.min)),
        });
        Ok(Self {
            index,
            engine,
            slots,
            free: (0..depth).rev().collect(),
            completions: Vec::with_capacity(depth),
            verifier,
            stats: JobStats::default(),
            live,
            measuring: None,
            last_completion: None,
            printed_errors: 0,
        })
    }

    /// Runs the workload, then (when it wrote and verifies) reads back and checks every block
    /// it wrote.
    pub fn run(mut self, cfg: &Config, region: Region, sched: Schedule) -> JobOutcome {
        let limit = if cfg.runtime_ms.is_some() {
            None
        } else {
            Some(region.len)
        };
        let mut workload = Workload::new(
            cfg.rw,
            cfg.rwmixread,
            cfg.bs,
            region,
            cfg.seed,
            self.index,
            limit,
        );
        let mut result = self.drive(&mut workload, Some(sched), sched.deadline);
        self.finish_measuring();
        if matches!(cfg.target, crate::perf::args::Target::Embedded(..)) {
            self.stats.embedded_at_end = Some(crate::perf::engine::embedded::Sample::now());
        }
        let wrote = self.verifier.as_ref().is_some_and(|v| v.states.is_some());
        if result.is_ok() && wrote {
            let mut readback = Workload::new(
                RwMode::Read,
                0,
                cfg.bs,
                region,
                cfg.seed,
                self.index,
                Some(region.len),
            );
            result = self.drive(&mut readback, None, None);
        }
        self.stats.paths = self.engine.paths();
        self.live
            .done
            .store(true, std::sync::atomic::Ordering::Relaxed);
        JobOutcome {
            stats: self.stats,
            engine_error: result.err(),
        }
    }

    /// Issues `source` until it ends or `deadline` passes, then drains. With `sched`, I/O that
    /// completes after `sched.measure_from` is measured.
    fn drive(
        &mut self,
        source: &mut dyn Iterator<Item = IoSpec>,
        sched: Option<Schedule>,
        deadline: Option<Instant>,
    ) -> Result<(), EngineError> {
        let mut pending: Option<IoSpec> = None;
        let mut exhausted = false;
        loop {
            let now = Instant::now();
            let stop = exhausted || deadline.is_some_and(|d| now >= d);
            if !stop {
                // A burst of submissions leaves together (one write per queue on the soft
                // provider) before the poll below waits for any of it.
                let _batch = rdmablk::fabric::SendBatch::begin();
                while let Some(&slot) = self.free.last() {
                    let Some(spec) = pending.take().or_else(|| source.next()) else {
                        exhausted = true;
                        break;
                    };
                    if self.verifier.is_some() && self.overlaps_in_flight(spec) {
                        pending = Some(spec);
                        break;
                    }
                    self.free.pop();
                    if let Err(spec) = self.issue(slot, spec) {
                        self.free.push(slot);
                        pending = Some(spec);
                        break;
                    }
                }
            }
            let in_flight = self.slots.len() - self.free.len();
            if in_flight == 0 {
                if stop || exhausted {
                    return Ok(());
                }
                // Nothing in flight yet the engine refused the request: it will never accept.
                return Err(EngineError::Poll(std::io::Error::other(
                    "the engine refused a request with nothing in flight",
                )));
            }
            self.engine.poll(&mut self.completions, 1)?;
            let now = Instant::now();
            if let Some(s) = sched {
                // The window starts at the ramp's end exactly, whenever the job notices.
                if self.measuring.is_none() && now >= s.measure_from {
                    self.measuring = Some((s.measure_from, CpuUsage::thread()));
                }
            }
            let mut done = std::mem::take(&mut self.completions);
            for c in done.drain(..) {
                self.complete(c, now, sched.is_some());
            }
            self.completions = done;
        }
    }

    fn overlaps_in_flight(&self, spec: IoSpec) -> bool {
        let end = spec.offset + u64::from(spec.len);
        self.slots
            .iter()
            .any(|s| s.in_flight() && s.offset < end && spec.offset < s.offset + u64::from(s.len))
    }

    /// Submits `spec` from `slot`; gives `spec` back if the engine's queue is full.
    fn issue(&mut self, slot: usize, spec: IoSpec) -> Result<(), IoSpec> {
        let mut buf = self.slots[slot]
            .buf
            .take()
            .expect("free slot holds its buffer");
        if spec.op == Op::Write {
            if let Some(v) = &self.verifier {
                let states = v.states.as_ref().expect("a writing run tracks blocks");
                let data = &mut buf.as_mut_slice()[..spec.len as usize];
                for ((idx, offset), block) in v
                    .blocks(spec.offset, spec.len)
                    .zip(data.chunks_exact_mut(v.block as usize))
                {
                    verify::stamp(block, offset, v.seed, states.next_generation(idx));
                }
            }
        }
        let s = &mut self.slots[slot];
        (s.op, s.offset, s.len, s.submitted) = (spec.op, spec.offset, spec.len, Instant::now());
        let req = IoReq {
            op: spec.op,
            offset: spec.offset,
            len: spec.len,
            buf,
            tag: slot as u64,
        };
        match self.engine.submit(req) {
            Ok(()) => Ok(()),
            Err(QueueFull(req)) => {
                self.slots[slot].buf = Some(req.buf);
                Err(spec)
            }
        }
    }

    fn complete(&mut self, c: Completion, now: Instant, main_phase: bool) {
        let slot = c.tag as usize;
        let submitted = self.slots[slot].submitted;
        debug_assert!(self.slots[slot].in_flight() && self.slots[slot].offset == c.offset);
        let ok = c.result.is_ok();
        if let Err(e) = &c.result {
            self.stats.op_mut(c.op).errors += 1;
            let msg = format_args!(
                "{} at offset {} ({} bytes): {e}",
                c.op.as_str(),
                c.offset,
                c.len
            );
            note_error(&mut self.printed_errors, self.index, "I/O error", &msg);
        }
        if main_phase {
            let lat_ns = now.saturating_duration_since(submitted).as_nanos() as u64;
            self.live
                .add(c.op, if ok { u64::from(c.len) } else { 0 }, lat_ns);
            if self.measuring.is_some() {
                let op = self.stats.op_mut(c.op);
                op.ios += 1;
                op.bytes += if ok { u64::from(c.len) } else { 0 };
                op.lat.record(lat_ns);
                let since = self.last_completion.or(self.measuring.map(|(t0, _)| t0));
                if let Some(prev) = since {
                    let gap = now.saturating_duration_since(prev).as_nanos() as u64;
                    self.stats.max_gap_ns = self.stats.max_gap_ns.max(gap);
                }
                self.last_completion = Some(now);
            }
        }
        self.verify_completion(&c, ok);
        self.slots[slot].buf = Some(c.buf);
        self.free.push(slot);
    }

    fn verify_completion(&mut self, c: &Completion, ok: bool) {
        let Some(v) = self.verifier.as_mut() else {
            return;
        };
        match c.op {
            Op::Write => {
                if let Some(states) = v.states.as_mut() {
                    let first = ((c.offset - v.region_start) / v.block) as usize;
                    for idx in first..first + (u64::from(c.len) / v.block) as usize {
                        if ok {
                            let g = states.next_generation(idx);
                            states.set_written(idx, g);
                        } else {
                            states.set_undefined(idx);
                        }
                    }
                }
            }
            Op::Read if ok => {
                let data = &c.buf.as_slice()[..c.len as usize];
                let mut failures = 0;
                let mut checked = 0;
                for ((idx, offset), block) in v
                    .blocks(c.offset, c.len)
                    .zip(data.chunks_exact(v.block as usize))
                {
                    let Some(expected) = v.expected(idx, offset) else {
                        continue;
                    };
                    checked += 1;
                    if let Err(e) = verify::check(block, expected) {
                        failures += 1;
                        note_error(&mut self.printed_errors, self.index, "verify failure", &e);
                    }
                }
                self.stats.verify.blocks_checked += checked;
                self.stats.verify.failures += failures;
            }
            Op::Read => {}
        }
    }

    fn finish_measuring(&mut self) {
        if let Some((t0, cpu0)) = self.measuring.take() {
            let end = self.last_completion.unwrap_or(t0).max(t0);
            self.stats.elapsed_ns = end.duration_since(t0).as_nanos() as u64;
            self.stats.cpu = CpuUsage::thread().since(&cpu0);
        }
    }
}

/// Prints the first [`MAX_PRINTED_ERRORS`] errors of a job, then says the rest are only
/// counted.
fn note_error(printed: &mut u64, job: u32, what: &str, msg: &dyn std::fmt::Display) {
    if *printed < MAX_PRINTED_ERRORS {
        eprintln!("{what}: job {job}: {msg}");
    } else if *printed == MAX_PRINTED_ERRORS {
        eprintln!("job {job}: further errors are counted but not printed");
    }
    *printed += 1;
}

/// How long until `t`, zero if past.
pub fn until(t: Instant) -> Duration {
    t.saturating_duration_since(Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::args::Args;
    use crate::perf::engine::{BufRegion, IoError};
    use crate::perf::rng::Xoshiro256;
    use clap::Parser;

    /// A RAM disk that completes requests in random order and can lose one write or corrupt
    /// one read, to check the worker's verify bookkeeping.
    struct MemEngine {
        data: Vec<u8>,
        queue: Vec<IoReq>,
        depth: u32,
        rng: Xoshiro256,
        writes_seen: u64,
        lose_write_no: Option<u64>,
        corrupt_reads_of: Option<u64>,
    }

    impl MemEngine {
        fn new(bytes: usize, depth: u32) -> Self {
            Self {
                data: vec![0; bytes],
                queue: Vec::new(),
                depth,
                rng: Xoshiro256::new(3),
                writes_seen: 0,
                lose_write_no: None,
                corrupt_reads_of: None,
            }
        }

        fn execute(&mut self, mut req: IoReq) -> Completion {
            let (o, n) = (req.offset as usize, req.len as usize);
            match req.op {
                Op::Write => {
                    self.writes_seen += 1;
                    if self.lose_write_no != Some(self.writes_seen) {
                        self.data[o..o + n].copy_from_slice(&req.buf.as_slice()[..n]);
                    }
                }
                Op::Read => {
                    req.buf.as_mut_slice()[..n].copy_from_slice(&self.data[o..o + n]);
                    if let Some(bad) = self.corrupt_reads_of {
                        if (req.offset..req.offset + u64::from(req.len)).contains(&bad) {
                            req.buf.as_mut_slice()[(bad - req.offset) as usize + 100] ^= 1;
                        }
                    }
                }
            }
            let IoReq {
                op,
                offset,
                len,
                buf,
                tag,
            } = req;
            Completion {
                tag,
                op,
                offset,
                len,
                buf,
                result: Ok::<(), IoError>(()),
            }
        }
    }

    impl Engine for MemEngine {
        fn name(&self) -> &str {
            "mem"
        }
        fn block_size(&self) -> u32 {
            512
        }
        fn capacity(&self) -> u64 {
            self.data.len() as u64
        }
        fn queue_depth(&self) -> u32 {
            self.depth
        }
        fn alloc_buffers(&mut self, n: usize, len: usize) -> Result<Vec<IoBuf>, EngineError> {
            Ok(BufRegion::carve(n, len)?.1)
        }
        fn submit(&mut self, req: IoReq) -> Result<(), QueueFull> {
            if self.queue.len() == self.depth as usize {
                return Err(QueueFull(req));
            }
            self.queue.push(req);
            Ok(())
        }
        fn poll(&mut self, out: &mut Vec<Completion>, min: usize) -> Result<usize, EngineError> {
            let n = min.max(self.rng.below(self.queue.len() as u64 + 1) as usize);
            for _ in 0..n.min(self.queue.len()) {
                let i = self.rng.below(self.queue.len() as u64) as usize;
                let req = self.queue.swap_remove(i);
                out.push(self.execute(req));
            }
            Ok(n)
        }
    }

    const REGION: Region = Region {
        start: 0,
        len: 256 << 10,
    };

    fn run(argv: &[&str], engine: MemEngine) -> JobStats {
        let argv = ["p", "file:/unused", "--size", "256k", "--iodepth", "16"]
            .iter()
            .chain(argv);
        let cfg = Args::try_parse_from(argv).unwrap().validate().unwrap();
        let live = LiveCounters::default();
        let w = Worker::new(&cfg, 0, Box::new(engine), REGION, &live).unwrap();
        let now = Instant::now();
        let out = w.run(
            &cfg,
            REGION,
            Schedule {
                measure_from: now,
                deadline: None,
            },
        );
        assert!(out.engine_error.is_none());
        out.stats
    }

    const RANDRW: &[&str] = &["--rw", "randrw", "--bs", "4k-16k", "--verify", "crc32c"];

    #[test]
    fn randrw_verify_out_of_order_completions_all_check_out() {
        let s = run(RANDRW, MemEngine::new(256 << 10, 16));
        assert!(s.read.ios > 0 && s.write.ios > 0, "{s:?}");
        assert_eq!(
            s.read.bytes + s.write.bytes,
            REGION.len,
            "one pass of --size bytes"
        );
        assert!(s.verify.blocks_checked > 0);
        assert_eq!(s.verify.failures, 0);
    }

    #[test]
    fn a_lost_write_is_caught() {
        // The run is deterministic (seeded workload, seeded completion order), so the first run
        // tells how many writes there are; the second loses the last one, which no later write
        // can repair: the read-back must find the block's previous generation (or no header).
        let writes = run(RANDRW, MemEngine::new(256 << 10, 16)).write.ios;
        let mut e = MemEngine::new(256 << 10, 16);
        e.lose_write_no = Some(writes);
        let s = run(RANDRW, e);
        assert_eq!(s.write.ios, writes);
        assert!(s.verify.failures >= 1, "{:?}", s.verify);
    }

    #[test]
    fn a_corrupted_read_is_caught_once_per_block() {
        let mut e = MemEngine::new(256 << 10, 16);
        e.corrupt_reads_of = Some(64 << 10);
        let s = run(&["--rw", "write", "--bs", "4k", "--verify", "crc32c"], e);
        assert_eq!(s.write.bytes, REGION.len);
        // Only the read-back pass reads: it checks all 64 blocks, one of them bad.
        assert_eq!(
            s.verify,
            crate::perf::stats::VerifyStats {
                blocks_checked: 64,
                failures: 1
            }
        );
    }

    #[test]
    fn without_verify_ios_may_overlap_and_nothing_is_checked() {
        let s = run(
            &["--rw", "randrw", "--bs", "4k"],
            MemEngine::new(256 << 10, 16),
        );
        assert_eq!(s.read.ios + s.write.ios, 64);
        assert_eq!(s.verify.blocks_checked, 0);
    }
}
