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

use crate::perf::args::{BsRange, Config, RwMode};
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
        let wrote = self.verifier.as_ref().is_some_and(|v| v.states.is_some());
        if result.is_ok() && wrote {
            let bs = BsRange {
                min: cfg.bs.min,
                max: cfg.bs.max,
            };
            let mut readback = Workload::new(
                RwMode::Read,
                0,
                bs,
                region,
                cfg.seed,
                self.index,
                Some(region.len),
            );
            result = self.drive(&mut readback, None, None);
        }
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
            if let Some(s) = sched {
                if self.measuring.is_none() && now >= s.measure_from {
                    self.measuring = Some((now, CpuUsage::thread()));
                }
            }
            let stop = exhausted || deadline.is_some_and(|d| now >= d);
            if !stop {
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
            self.live.add(c.op, if ok { u64::from(c.len) } else { 0 });
            if self.measuring.is_some() {
                let op = self.stats.op_mut(c.op);
                op.ios += 1;
                op.bytes += if ok { u64::from(c.len) } else { 0 };
                op.lat
                    .record(now.saturating_duration_since(submitted).as_nanos() as u64);
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
