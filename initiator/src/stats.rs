//! Counters a controller keeps (all queues together), readable at any time with
//! [`crate::Controller::stats`]. Tests and `rdmablk-perf` use them to prove which data path
//! ran (e.g. that push writes were used).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub(crate) struct Stats {
    pushed_writes: AtomicU64,
    pushed_bytes: AtomicU64,
    in_capsule_writes: AtomicU64,
    keyed_writes: AtomicU64,
    bounce_bytes: AtomicU64,
    reconnects: AtomicU64,
    retried_ios: AtomicU64,
    keep_alives: AtomicU64,
    placed_bytes: AtomicU64,
}

/// A snapshot of the controller's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Write commands whose data was pushed into a target window slot (rdmablk extension).
    pub pushed_writes: u64,
    pub pushed_bytes: u64,
    /// Write commands whose data rode in the command capsule.
    pub in_capsule_writes: u64,
    /// Write commands whose data the target pulled with RDMA READ (keyed SGL).
    pub keyed_writes: u64,
    /// Bytes copied through bounce buffers (slice I/O instead of `IoBuf` I/O).
    pub bounce_bytes: u64,
    /// Successful reconnects of the controller.
    pub reconnects: u64,
    /// I/Os sent again after a reconnect (sync API retries, async requests held across it).
    pub retried_ios: u64,
    /// Keep Alive commands completed.
    pub keep_alives: u64,
    /// NVMe/TCP: bytes of read data received straight into the command's buffer (large
    /// C2HData PDUs that had not all arrived when their header was parsed), not copied from
    /// the queue's receive buffer.
    pub placed_bytes: u64,
}

impl Stats {
    pub fn add_pushed(&self, bytes: u32) {
        self.pushed_writes.fetch_add(1, Relaxed);
        self.pushed_bytes.fetch_add(u64::from(bytes), Relaxed);
    }
    pub fn add_in_capsule(&self, _bytes: u32) {
        self.in_capsule_writes.fetch_add(1, Relaxed);
    }
    pub fn add_keyed_write(&self, _bytes: u32) {
        self.keyed_writes.fetch_add(1, Relaxed);
    }
    pub fn add_bounce(&self, bytes: usize) {
        self.bounce_bytes.fetch_add(bytes as u64, Relaxed);
    }
    pub fn add_reconnect(&self) {
        self.reconnects.fetch_add(1, Relaxed);
    }
    pub fn add_retry(&self) {
        self.retried_ios.fetch_add(1, Relaxed);
    }
    pub fn add_keep_alive(&self) {
        self.keep_alives.fetch_add(1, Relaxed);
    }
    pub fn add_placed(&self, bytes: usize) {
        self.placed_bytes.fetch_add(bytes as u64, Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            pushed_writes: self.pushed_writes.load(Relaxed),
            pushed_bytes: self.pushed_bytes.load(Relaxed),
            in_capsule_writes: self.in_capsule_writes.load(Relaxed),
            keyed_writes: self.keyed_writes.load(Relaxed),
            bounce_bytes: self.bounce_bytes.load(Relaxed),
            reconnects: self.reconnects.load(Relaxed),
            retried_ios: self.retried_ios.load(Relaxed),
            keep_alives: self.keep_alives.load(Relaxed),
            placed_bytes: self.placed_bytes.load(Relaxed),
        }
    }
}
