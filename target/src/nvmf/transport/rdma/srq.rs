//! A worker's shared receive queue (SRQ): `arena.receive_buffers` command-capsule buffers in
//! one extent of the arena, all posted to one SRQ that every QP of the worker receives
//! through, so a queue holds receive buffers only while its commands are being read.
//!
//! A buffer is posted (in the SRQ), or held by one queue from its receive completion until
//! the capsule is consumed (`release_capsule`) or the queue is torn down; every path gives it
//! back (success, error completion, unknown QP number, teardown). `posted` counts what is in
//! the SRQ: posts minus receive completions, exact on both providers, so no SRQ limit event
//! is needed to see it run low.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use rdmablk::fabric::{FabricError, Pd, RecvWr, Srq, SrqInit};

use super::wr_id::{WrId, WrKind};
use crate::arena::pool::ArenaExtent;
use crate::arena::{Arena, Region};

/// One worker's SRQ and its buffers. Field order is drop order: the SRQ (and with it every
/// posted receive) goes before the buffers return to the arena; queues hold an `Arc` of this
/// and drop their QP first.
pub struct SrqWorker {
    pub srq: Srq,
    extent: ArenaExtent,
    /// Bytes of one buffer (the capsule slot).
    slot_bytes: usize,
    /// Buffers.
    count: u32,
    /// The arena region's local key.
    lkey: u32,
    /// Buffers in the SRQ now.
    posted: AtomicU32,
    /// Receive completions that left fewer than `count / 8` buffers posted.
    low_total: AtomicU64,
    /// Receives for a QP number no queue has any more (the buffer went back at once).
    stale_total: AtomicU64,
}

impl std::fmt::Debug for SrqWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrqWorker")
            .field("count", &self.count)
            .field("posted", &self.posted())
            .finish()
    }
}

impl SrqWorker {
    /// Creates the SRQ on `pd`, carves `count` buffers of `slot_bytes` from `arena` and posts
    /// them all.
    pub fn new(
        pd: &Pd,
        arena: &Arc<Arena>,
        lkey: u32,
        count: u32,
        slot_bytes: usize,
    ) -> Result<SrqWorker, String> {
        let srq = pd
            .create_srq(SrqInit {
                max_wr: count,
                max_sge: 1,
            })
            .map_err(|e| format!("create a shared receive queue of {count}: {e}"))?;
        let bytes = count as usize * slot_bytes;
        let extent = ArenaExtent::carve(arena, bytes)
            .map_err(|e| format!("{count} receive buffers ({bytes} bytes) from the arena: {e}"))?;
        let w = SrqWorker {
            srq,
            extent,
            slot_bytes,
            count,
            lkey,
            posted: AtomicU32::new(0),
            low_total: AtomicU64::new(0),
            stale_total: AtomicU64::new(0),
        };
        for i in 0..count {
            w.repost(i)
                .map_err(|e| format!("post receive buffer {i} of {count}: {e}"))?;
        }
        Ok(w)
    }

    /// Buffer `i`.
    pub fn slot(&self, i: u32) -> Region {
        assert!(i < self.count, "receive buffer {i} of {}", self.count);
        debug_assert!((i as usize + 1) * self.slot_bytes <= self.extent.len());
        Region {
            addr: self.extent.addr() + i as u64 * self.slot_bytes as u64,
            len: self.slot_bytes,
        }
    }

    /// Buffers the SRQ has.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Buffers posted in the SRQ now.
    pub fn posted(&self) -> u32 {
        self.posted.load(Ordering::Relaxed)
    }

    pub fn low_total(&self) -> u64 {
        self.low_total.load(Ordering::Relaxed)
    }

    pub fn stale_total(&self) -> u64 {
        self.stale_total.load(Ordering::Relaxed)
    }

    /// Posts buffer `i` (back) to the SRQ.
    pub fn repost(&self, i: u32) -> Result<(), FabricError> {
        let sge = [self.slot(i).sge(self.lkey)];
        self.srq.post_recv(&[RecvWr {
            wr_id: WrId::new(0, WrKind::SrqRecv, i).encode(),
            sgl: &sge,
        }])?;
        self.posted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// A receive completed (buffer `i` left the SRQ). True when the SRQ runs low.
    pub fn taken(&self) -> bool {
        let left = self
            .posted
            .fetch_sub(1, Ordering::Relaxed)
            .saturating_sub(1);
        let low = left < self.count / 8;
        if low {
            self.low_total.fetch_add(1, Ordering::Relaxed);
        }
        low
    }

    /// A receive for a QP number no queue has: its buffer is reposted.
    pub fn stale(&self) {
        self.stale_total.fetch_add(1, Ordering::Relaxed);
    }
}
