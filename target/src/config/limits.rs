//! `[limits]`: the per-connection and per-controller limits advertised to hosts (queue depth,
//! transfer size, in-capsule data, queues, connections, the push budget) and their bounds.

use serde::Deserialize;

use crate::arena::ParcelLayout;

/// Upper bound of `limits.max_queue_depth`.
pub const MAX_QUEUE_DEPTH: u32 = 1024;
/// Lower bound of `limits.max_queue_depth`: the NVMe-oF minimum admin queue size (hosts open
/// the admin queue with 32 entries, and it is carved from the arena like any queue).
pub const MIN_QUEUE_DEPTH: u32 = 32;
/// Upper bound of `limits.max_io_size`: the largest power of two a keyed SGL's 24-bit length
/// can carry.
pub const MAX_IO_SIZE: u32 = 8 << 20;
/// Upper bound of `limits.in_capsule_data_size` (the Linux target's limit as well).
pub const MAX_IN_CAPSULE_DATA_SIZE: u32 = 16 << 10;

/// `[limits]`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest queue (entries) a host may open; also the admin queue's bound. 32..=1024.
    pub max_queue_depth: u32,
    /// Largest data transfer of one command, bytes (MDTS is derived from it). A multiple of
    /// 4096 and of every namespace's block size, at most 8 MiB.
    pub max_io_size: u32,
    /// Bytes of write data a command capsule may carry; 0 disables in-capsule data. A multiple
    /// of 16, at most `max_io_size` and 16 KiB.
    pub in_capsule_data_size: u32,
    /// Queues per controller, the admin queue included (so at least 2).
    pub max_queues_per_controller: u32,
    /// Connections (queues of all controllers) the target accepts at once. The target raises
    /// its soft open-file limit to fit them at start (up to the hard limit).
    pub max_connections: u32,
    /// The push budget: bytes of data slots an RDMA push queue (the rdmablk push-write
    /// extension) gets from the arena. Each of its `depth` slots is this divided by the
    /// depth, rounded down to a page (at least a page, at most `max_io_size`); a write longer
    /// than a slot takes the ordinary path (the target's RDMA READ). 0 declines push writes.
    /// At most 1 GiB.
    pub push_window_bytes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_queue_depth: 128,
            max_io_size: 128 << 10,
            in_capsule_data_size: 4 << 10,
            max_queues_per_controller: 128,
            max_connections: 4096,
            push_window_bytes: DEFAULT_PUSH_WINDOW_BYTES,
        }
    }
}

/// `limits.push_window_bytes`' default: 16 KiB slots at depth 128, 64 KiB at depth 32.
pub const DEFAULT_PUSH_WINDOW_BYTES: u32 = 2 << 20;
/// `limits.push_window_bytes`' bound.
pub const MAX_PUSH_WINDOW_BYTES: u32 = 1 << 30;

impl Limits {
    /// The parcel an RDMA push queue of `queue_depth` entries takes from the arena: receive,
    /// response and data slots of [`Limits::push_slot_bytes`]; None when push writes are
    /// off (`push_window_bytes = 0`).
    pub fn parcel_layout(&self, queue_depth: u32) -> Option<ParcelLayout> {
        let slot = self.push_slot_bytes(queue_depth)?;
        Some(ParcelLayout::new(
            queue_depth,
            self.in_capsule_data_size,
            slot,
        ))
    }

    /// One push slot of a queue of `queue_depth` entries: the push budget divided by the
    /// depth, rounded down to a page, at least a page and at most `max_io_size` (rounded up
    /// to a page, as the parcel's slots are).
    pub fn push_slot_bytes(&self, queue_depth: u32) -> Option<u32> {
        const PAGE: u32 = crate::arena::PAGE_BYTES as u32;
        if self.push_window_bytes == 0 {
            return None;
        }
        let even = self.push_window_bytes / queue_depth.max(1) / PAGE * PAGE;
        Some(even.clamp(PAGE, self.max_io_size.next_multiple_of(PAGE)))
    }

    /// The parcel any other RDMA queue of `queue_depth` entries takes from the arena: receive
    /// and response slots (its data takes buffers from its worker's pool).
    pub fn queue_parcel_layout(&self, queue_depth: u32) -> ParcelLayout {
        ParcelLayout::without_data(queue_depth, self.in_capsule_data_size)
    }
}
