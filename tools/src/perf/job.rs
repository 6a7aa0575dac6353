//! The workload generator: for one job, the sequence of (op, offset, length) it issues.
//!
//! The sequence depends only on the flags, the seed and the job's index, never on timing, so a
//! run can be replayed and two runs with the same `--seed` touch the same blocks in the same
//! order. Every offset and length is a multiple of the low end of `--bs` (the *verify block*),
//! and every I/O stays inside the job's region.

use crate::perf::args::{BsRange, RwMode};
use crate::perf::engine::Op;
use crate::perf::rng::{SplitMix64, Xoshiro256};

/// One I/O the job should issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoSpec {
    /// Read or write.
    pub op: Op,
    /// Byte offset on the device.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
}

/// A job's slice of the device: `[start, start + len)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// First byte.
    pub start: u64,
    /// Bytes; a multiple of the verify block.
    pub len: u64,
}

impl Region {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// Generates one job's I/O sequence.
#[derive(Debug, Clone)]
pub struct Workload {
    rng: Xoshiro256,
    rw: RwMode,
    rwmixread: u8,
    bs: BsRange,
    region: Region,
    next_seq: u64,
    /// Bytes left to issue; `None` when time based.
    remaining_bytes: Option<u64>,
}

impl Workload {
    /// The generator for job `job_index`. `limit_bytes`: stop after issuing that many bytes
    /// (`None`: endless, the caller stops on time).
    ///
    /// Panics if the region is empty or not a multiple of `bs.min` (the caller validated both).
    pub fn new(
        rw: RwMode,
        rwmixread: u8,
        bs: BsRange,
        region: Region,
        seed: u64,
        job_index: u32,
        limit_bytes: Option<u64>,
    ) -> Self {
        assert!(
            region.len >= bs.min && region.len % bs.min == 0,
            "{region:?} vs {bs:?}"
        );
        assert!(bs.min > 0 && bs.max % bs.min == 0 && bs.max <= u64::from(u32::MAX));
        let job_seed = SplitMix64::new(seed ^ u64::from(job_index).rotate_left(32)).next_u64();
        Self {
            rng: Xoshiro256::new(job_seed),
            rw,
            rwmixread,
            bs,
            region,
            next_seq: region.start,
            remaining_bytes: limit_bytes,
        }
    }

    /// The job's region.
    pub fn region(&self) -> Region {
        self.region
    }

    fn pick_len(&mut self) -> u64 {
        let len = if self.bs.min == self.bs.max {
            self.bs.min
        } else {
            self.bs.min * (1 + self.rng.below(self.bs.max / self.bs.min))
        };
        len.min(self.region.len)
    }

    fn pick_op(&mut self) -> Op {
        match self.rw {
            RwMode::Read | RwMode::Randread => Op::Read,
            RwMode::Write | RwMode::Randwrite => Op::Write,
            RwMode::Randrw => {
                if self.rng.below(100) < u64::from(self.rwmixread) {
                    Op::Read
                } else {
                    Op::Write
                }
            }
        }
    }
}

impl Iterator for Workload {
    type Item = IoSpec;

    /// The next I/O, or `None` once `limit_bytes` have been issued.
    fn next(&mut self) -> Option<IoSpec> {
        if self.remaining_bytes == Some(0) {
            return None;
        }
        let op = self.pick_op();
        let mut len = self.pick_len();
        let offset = if self.rw.random() {
            let slots = (self.region.len - len) / self.bs.min + 1;
            self.region.start + self.rng.below(slots) * self.bs.min
        } else {
            if self.next_seq >= self.region.end() {
                self.next_seq = self.region.start;
            }
            len = len.min(self.region.end() - self.next_seq);
            let o = self.next_seq;
            self.next_seq += len;
            o
        };
        if let Some(rem) = self.remaining_bytes.as_mut() {
            len = len.min(*rem);
            *rem -= len;
        }
        debug_assert!(offset >= self.region.start && offset + len <= self.region.end());
        debug_assert!(offset % self.bs.min == 0 && len % self.bs.min == 0 && len > 0);
        Some(IoSpec {
            op,
            offset,
            len: len as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K4: u64 = 4096;

    fn wl(rw: RwMode, bs: BsRange, seed: u64, job: u32, limit: Option<u64>) -> Workload {
        Workload::new(
            rw,
            30,
            bs,
            Region {
                start: 1 << 20,
                len: 64 * K4,
            },
            seed,
            job,
            limit,
        )
    }

    #[test]
    fn same_seed_same_sequence() {
        let bs = BsRange {
            min: K4,
            max: 16 * K4,
        };
        let a: Vec<_> = wl(RwMode::Randrw, bs, 42, 0, None).take(1000).collect();
        let b: Vec<_> = wl(RwMode::Randrw, bs, 42, 0, None).take(1000).collect();
        assert_eq!(a, b);
        let c: Vec<_> = wl(RwMode::Randrw, bs, 43, 0, None).take(1000).collect();
        assert_ne!(a, c, "another seed gives another sequence");
        let d: Vec<_> = wl(RwMode::Randrw, bs, 42, 1, None).take(1000).collect();
        assert_ne!(a, d, "another job gives another sequence");
    }

    #[test]
    fn random_ios_stay_in_region_and_aligned_and_mix_reads() {
        let bs = BsRange {
            min: K4,
            max: 32 * K4,
        };
        let w = wl(RwMode::Randrw, bs, 1, 0, None);
        let r = w.region();
        let mut reads = 0;
        let mut lens = std::collections::BTreeSet::new();
        for io in w.take(10_000) {
            assert!(
                io.offset >= r.start && io.offset + u64::from(io.len) <= r.end(),
                "{io:?}"
            );
            assert_eq!(io.offset % K4, 0);
            assert_eq!(u64::from(io.len) % K4, 0);
            assert!(u64::from(io.len) <= 32 * K4);
            reads += usize::from(io.op == Op::Read);
            lens.insert(io.len);
        }
        assert!((2_000..4_000).contains(&reads), "30% reads, got {reads}");
        assert!(lens.len() > 16, "sizes spread over the range: {lens:?}");
    }

    #[test]
    fn sequential_covers_the_region_once_then_stops() {
        let bs = BsRange {
            min: K4,
            max: 8 * K4,
        };
        let w = wl(RwMode::Write, bs, 9, 0, Some(64 * K4));
        let r = w.region();
        let ios: Vec<_> = w.collect();
        let mut next = r.start;
        for io in &ios {
            assert_eq!((io.op, io.offset), (Op::Write, next));
            next += u64::from(io.len);
        }
        assert_eq!(next, r.end(), "exactly one pass");
    }

    #[test]
    fn sequential_time_based_wraps() {
        let bs = BsRange { min: K4, max: K4 };
        let w = wl(RwMode::Read, bs, 9, 0, None);
        let start = w.region().start;
        let ios: Vec<_> = w.take(65).collect();
        assert_eq!(ios[63].offset, start + 63 * K4);
        assert_eq!(ios[64].offset, start, "wraps to the start");
    }

    #[test]
    fn limit_counts_bytes_for_random_workloads() {
        let bs = BsRange {
            min: K4,
            max: 4 * K4,
        };
        let total: u64 = wl(RwMode::Randread, bs, 5, 0, Some(100 * K4))
            .map(|io| u64::from(io.len))
            .sum();
        assert_eq!(total, 100 * K4);
    }
}
