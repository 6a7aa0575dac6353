//! The error backend: wraps another backend and injects failures and latency.
//!
//! Per operation class (reads; writes, write zeroes and deallocate; flushes) a fault fires on
//! the Nth operation of the class (counted over the namespace, all workers together), on every
//! operation from the Nth (`sticky`), or at a rate drawn from a deterministic generator keyed
//! by `(seed, class, N)`: the same seed and the same sequence of operations give the same
//! faults. A faulted request is not passed to the inner backend (a failed write changes
//! nothing) and completes with an unrecovered read error or a write fault.
//!
//! Added latency holds every completion, real or injected, for `latency_us` before `poll`
//! returns it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    Backend, BackendError, BackendQueue, Completion, IoError, IoErrorKind, IoRequest, OpKind,
    SubmitError,
};
use crate::config::{ErrorBackendConfig, FaultConfig};
use crate::ring::WorkerIo;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Read = 0,
    Write = 1,
    Flush = 2,
}

impl Class {
    fn of(op: OpKind) -> Class {
        match op {
            OpKind::Read => Class::Read,
            OpKind::Flush => Class::Flush,
            OpKind::Write | OpKind::WriteFua | OpKind::WriteZeroes | OpKind::Deallocate => {
                Class::Write
            }
        }
    }

    fn error(self) -> IoError {
        let kind = match self {
            Class::Read => IoErrorKind::MediaRead,
            Class::Write | Class::Flush => IoErrorKind::WriteFault,
        };
        IoError {
            kind,
            errno: libc::EIO,
        }
    }
}

#[derive(Debug)]
struct Faults {
    seed: u64,
    latency: Duration,
    specs: [FaultConfig; 3],
    /// Operations seen per class.
    counts: [AtomicU64; 3],
    /// Faults injected per class.
    injected: [AtomicU64; 3],
}

impl Faults {
    /// Counts one operation of `class` and says whether it fails.
    fn fires(&self, class: Class) -> bool {
        let c = class as usize;
        let spec = &self.specs[c];
        if !spec.is_active() {
            return false;
        }
        let n = self.counts[c].fetch_add(1, Ordering::Relaxed) + 1;
        let by_nth = spec.nth.is_some_and(|k| n == k || (spec.sticky && n > k));
        let by_rate = spec.rate > 0.0 && {
            let x = splitmix64(self.seed ^ ((c as u64) << 56) ^ n);
            let unit = (x >> 11) as f64 / ((1u64 << 53) as f64);
            unit < spec.rate
        };
        let fire = by_nth || by_rate;
        if fire {
            self.injected[c].fetch_add(1, Ordering::Relaxed);
        }
        fire
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fault injection around `inner`.
#[derive(Debug)]
pub struct ErrorBackend {
    inner: Arc<dyn Backend>,
    faults: Arc<Faults>,
}

/// Faults injected so far, per class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InjectedFaults {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
}

impl ErrorBackend {
    /// Wraps `inner` with the faults of `cfg` (its `inner` key is ignored: `inner` is it).
    pub fn new(inner: Arc<dyn Backend>, cfg: &ErrorBackendConfig) -> Self {
        ErrorBackend {
            inner,
            faults: Arc::new(Faults {
                seed: cfg.seed,
                latency: Duration::from_micros(cfg.latency_us),
                specs: [cfg.fail_reads, cfg.fail_writes, cfg.fail_flushes],
                counts: Default::default(),
                injected: Default::default(),
            }),
        }
    }

    /// Faults injected so far.
    pub fn injected(&self) -> InjectedFaults {
        let i = &self.faults.injected;
        InjectedFaults {
            reads: i[0].load(Ordering::Relaxed),
            writes: i[1].load(Ordering::Relaxed),
            flushes: i[2].load(Ordering::Relaxed),
        }
    }
}

impl Backend for ErrorBackend {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }

    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }

    fn refresh_capacity(&self) -> Result<Option<u64>, String> {
        self.inner.refresh_capacity()
    }

    fn reservation_store(
        &self,
    ) -> Result<Option<Arc<dyn crate::namespace::reservation::SharedStore>>, String> {
        self.inner.reservation_store()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn deallocated_reads_zeroes(&self) -> bool {
        self.inner.deallocated_reads_zeroes()
    }

    fn open_queue(&self, io: &WorkerIo, depth: u32) -> Result<Box<dyn BackendQueue>, BackendError> {
        Ok(Box::new(ErrorQueue {
            inner: self.inner.open_queue(io, depth)?,
            faults: Arc::clone(&self.faults),
            held: VecDeque::with_capacity(depth as usize),
            scratch: vec![Completion::EMPTY; depth as usize].into_boxed_slice(),
            depth,
        }))
    }
}

struct ErrorQueue {
    inner: Box<dyn BackendQueue>,
    faults: Arc<Faults>,
    /// Completions (real or injected) waiting for their added latency, in due order.
    held: VecDeque<(Instant, Completion)>,
    scratch: Box<[Completion]>,
    depth: u32,
}

impl BackendQueue for ErrorQueue {
    fn submit(&mut self, req: IoRequest) -> Result<(), SubmitError> {
        if self.in_flight() >= self.depth {
            return Err(SubmitError::Busy);
        }
        let class = Class::of(req.op.kind());
        if self.faults.fires(class) {
            tracing::debug!(tag = req.tag, ?class, "error backend: injecting a fault");
            let due = Instant::now() + self.faults.latency;
            self.held.push_back((
                due,
                Completion {
                    tag: req.tag,
                    op: req.op.kind(),
                    result: Err(class.error()),
                },
            ));
            return Ok(());
        }
        self.inner.submit(req)
    }

    fn poll(&mut self, out: &mut [Completion]) -> usize {
        let room = self
            .scratch
            .len()
            .min(self.depth as usize - self.held.len());
        let got = self.inner.poll(&mut self.scratch[..room]);
        let now = Instant::now();
        for c in &self.scratch[..got] {
            self.held.push_back((now + self.faults.latency, *c));
        }
        let mut n = 0;
        while n < out.len() {
            match self.held.front() {
                Some((due, c)) if *due <= now => {
                    out[n] = *c;
                    n += 1;
                    self.held.pop_front();
                }
                _ => break,
            }
        }
        n
    }

    fn in_flight(&self) -> u32 {
        self.inner.in_flight() + self.held.len() as u32
    }
}
