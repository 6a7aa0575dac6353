//! `[arena]`: the pinned buffer the workers' data pools and the RDMA queues' parcels are carved
//! from, and how it is sized when the file gives no `bytes` (from the limits).

use serde::Deserialize;

use super::{ByteSize, Config, Limits, MAX_IO_SIZE, MAX_QUEUE_DEPTH, MIN_QUEUE_DEPTH};
use crate::arena::{ParcelLayout, PAGE_BYTES};

/// `[arena]`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ArenaConfig {
    /// Total bytes, pinned at start: the workers' data pools (`data_bytes`) and the RDMA
    /// queues' parcels (receive and response slots). Absent (or 0): sized from the limits
    /// when the file is read ([`ArenaConfig::bytes_for`]).
    #[serde(default)]
    pub bytes: ByteSize,
    /// Bytes of the arena the workers' data pools take, split evenly between the workers:
    /// what bounds the data in flight (a command takes a buffer of its length when it
    /// arrives and gives it back when its response has left; one that finds none waits).
    /// Absent (or 0): [`ArenaConfig::DEFAULT_DATA_BYTES`] (or more, for large `max_io_size`)
    /// when `bytes` is absent too, half of `bytes` otherwise.
    #[serde(default)]
    pub data_bytes: ByteSize,
    /// Back the arena with 2 MiB huge pages (reserve them first in /proc/sys/vm/nr_hugepages).
    #[serde(default)]
    pub hugepages: bool,
    /// `mlock` the arena at start (registration pins it anyway; locking makes a too-low
    /// RLIMIT_MEMLOCK fail at start with the limit named, not at the first connection).
    #[serde(default = "super::yes")]
    pub lock: bool,
    /// RDMA: command-capsule receive buffers per worker, in one shared receive queue (SRQ)
    /// that every queue of the worker receives through, so an idle queue holds no receive
    /// buffers of its own. 0: a receive queue per connection, `queue depth` buffers each in
    /// its parcel. Taken from the arena beside the data pools (buffers x the capsule slot,
    /// `64 + limits.in_capsule_data_size` rounded up to 64 B). Devices without SRQs get
    /// per-connection receives whatever this says.
    #[serde(default = "ArenaConfig::default_receive_buffers")]
    pub receive_buffers: u32,
    /// `bytes` was not given and [`ArenaConfig::bytes_for`] chose it (said in the log).
    #[serde(skip)]
    pub sized_from_limits: bool,
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig {
            bytes: ByteSize(0),
            data_bytes: ByteSize(0),
            hugepages: false,
            lock: true,
            receive_buffers: ArenaConfig::DEFAULT_RECEIVE_BUFFERS,
            sized_from_limits: false,
        }
    }
}

impl ArenaConfig {
    /// RDMA queues at `limits.max_queue_depth` whose parcels (receive and response slots) a
    /// default arena holds beside its data pools (fewer if `limits.max_connections` is lower).
    /// NVMe/TCP queues take no arena space of their own.
    pub const DEFAULT_CONNECTIONS: u32 = 64;
    /// The data pools of a default arena: data in flight, whatever the number of queues.
    pub const DEFAULT_DATA_BYTES: u64 = 128 << 20;
    /// `receive_buffers` when absent (nvmet-rdma's default SRQ size; SPDK's is 4096).
    pub const DEFAULT_RECEIVE_BUFFERS: u32 = 1024;
    /// The range of a non-zero `receive_buffers` (a work-request ID names a buffer in 16 bits).
    pub const RECEIVE_BUFFERS: std::ops::RangeInclusive<u32> = 16..=65_536;
    /// Buffers of `max_io_size` a worker's pool holds at least, by default.
    const MIN_LARGEST_PER_WORKER: u64 = 8;

    fn default_receive_buffers() -> u32 {
        Self::DEFAULT_RECEIVE_BUFFERS
    }

    /// The data pools' bytes an absent `data_bytes` means beside an absent `bytes`:
    /// [`Self::DEFAULT_DATA_BYTES`], or [`Self::MIN_LARGEST_PER_WORKER`] of the largest
    /// transfers per worker if that is more.
    pub fn default_data_bytes(limits: &Limits, workers: u32) -> u64 {
        let largest = u64::from(limits.max_io_size).next_multiple_of(PAGE_BYTES as u64);
        Self::DEFAULT_DATA_BYTES
            .max(largest * Self::MIN_LARGEST_PER_WORKER * u64::from(workers.max(1)))
    }

    /// The arena an absent `bytes` means: the data pools (`data_bytes`, or their default)
    /// and [`Self::DEFAULT_CONNECTIONS`] RDMA parcels at the largest queue depth, rounded up
    /// to 2 MiB (a huge page). `None` if the limits are out of range (validation names them).
    pub fn bytes_for(&self, limits: &Limits, workers: u32) -> Option<u64> {
        if !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&limits.max_queue_depth)
            || limits.max_io_size == 0
            || limits.max_io_size > MAX_IO_SIZE
        {
            return None;
        }
        let parcel = limits
            .queue_parcel_layout(limits.max_queue_depth)
            .total_bytes as u64;
        let n = u64::from(limits.max_connections.clamp(1, Self::DEFAULT_CONNECTIONS));
        let data = match self.data_bytes.bytes() {
            0 => Self::default_data_bytes(limits, workers),
            d => d,
        };
        Some((data + parcel * n).next_multiple_of(2 << 20))
    }
}

impl Config {
    /// The parcel of an RDMA queue (no push) at the largest queue depth hosts may ask for.
    pub fn max_parcel_layout(&self) -> ParcelLayout {
        self.limits.queue_parcel_layout(self.limits.max_queue_depth)
    }

    /// Bytes of the arena the workers' data pools take together (`arena.data_bytes`, or
    /// what its absence means).
    pub fn data_pool_bytes(&self) -> u64 {
        match self.arena.data_bytes.bytes() {
            0 if self.arena.sized_from_limits => {
                ArenaConfig::default_data_bytes(&self.limits, self.target.worker_threads)
            }
            0 => self.arena.bytes.bytes() / 2,
            d => d,
        }
    }

    /// Bytes of one worker's data pool (whole pages).
    pub fn data_pool_bytes_per_worker(&self) -> usize {
        let per = self.data_pool_bytes() / u64::from(self.target.worker_threads.max(1));
        (per as usize) / PAGE_BYTES * PAGE_BYTES
    }
}
