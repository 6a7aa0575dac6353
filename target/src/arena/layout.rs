//! Where everything lies inside a parcel: the slot sizes and alignments, and [`ParcelLayout`]
//! (receive slots, response slots, data slots) for a queue's depth and limits.

/// Bytes of an NVMe submission queue entry (the command part of a capsule).
pub const SQE_BYTES: usize = 64;
/// Bytes of an NVMe completion queue entry (a response capsule).
pub const CQE_BYTES: usize = 16;
/// Alignment of a receive (command capsule) slot.
pub const CAPSULE_SLOT_ALIGN: usize = 64;
/// Alignment and allocation granularity of parcels and of data slots (O_DIRECT needs at
/// least the logical block size; 4 KiB covers 512 B and 4 KiB devices).
pub const PAGE_BYTES: usize = 4096;

/// Where everything lies inside a connection's parcel, all offsets relative to its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParcelLayout {
    /// Requests (receive slots, response slots, data slots) the parcel holds.
    pub queue_depth: u32,
    /// One receive buffer: a command capsule (64-byte SQE + in-capsule data), 64 B-rounded.
    pub capsule_slot_bytes: usize,
    /// In-capsule data bytes a capsule may carry (`limits.in_capsule_data_size`).
    pub in_capsule_data_bytes: usize,
    /// Offset of the response slots (16-byte CQEs sent with the arena's lkey).
    pub resp_offset: usize,
    /// Offset of the data area (page-aligned).
    pub data_offset: usize,
    /// One data slot, page-rounded (a push queue's: `Limits::push_slot_bytes`; 0: the parcel
    /// has no data slots).
    pub data_slot_bytes: usize,
    /// Data slots: `queue_depth` for an RDMA push queue (its host places data by command
    /// ID), 0 for every other queue (its commands take buffers from the worker's data pool,
    /// [`pool`](super::pool)).
    pub data_slots: u32,
    /// Whole parcel, a multiple of [`PAGE_BYTES`].
    pub total_bytes: usize,
}

impl ParcelLayout {
    /// The layout of a queue of `queue_depth` requests with no data slots: receive and
    /// response slots only.
    pub const fn without_data(queue_depth: u32, in_capsule_data_size: u32) -> Self {
        let mut l = ParcelLayout::new(queue_depth, in_capsule_data_size, 0);
        l.data_slots = 0;
        l.total_bytes = l.data_offset;
        l
    }

    /// The layout of an RDMA queue that receives through its worker's shared receive queue:
    /// response slots only (one page at depth 128 and below), no receive slots.
    pub const fn responses_only(queue_depth: u32, in_capsule_data_size: u32) -> Self {
        let mut l = ParcelLayout::without_data(queue_depth, in_capsule_data_size);
        l.capsule_slot_bytes = 0;
        l.resp_offset = 0;
        l.data_offset = round_up(queue_depth as usize * CQE_BYTES, PAGE_BYTES);
        l.total_bytes = l.data_offset;
        l
    }

    /// The layout for `queue_depth` requests with the given limits and a data slot of
    /// `data_slot_bytes` (rounded up to a page) per request (an RDMA push queue's).
    pub const fn new(queue_depth: u32, in_capsule_data_size: u32, data_slot_bytes: u32) -> Self {
        let depth = queue_depth as usize;
        let capsule_slot_bytes = round_up(
            SQE_BYTES + in_capsule_data_size as usize,
            CAPSULE_SLOT_ALIGN,
        );
        let resp_offset = depth * capsule_slot_bytes;
        let data_offset = round_up(resp_offset + depth * CQE_BYTES, PAGE_BYTES);
        let data_slot_bytes = round_up(data_slot_bytes as usize, PAGE_BYTES);
        let total_bytes = round_up(data_offset + depth * data_slot_bytes, PAGE_BYTES);
        ParcelLayout {
            queue_depth,
            capsule_slot_bytes,
            in_capsule_data_bytes: in_capsule_data_size as usize,
            resp_offset,
            data_offset,
            data_slot_bytes,
            data_slots: queue_depth,
            total_bytes,
        }
    }

    /// Offset of receive slot `i`.
    pub fn recv_offset(&self, i: u32) -> usize {
        assert!(
            self.capsule_slot_bytes > 0,
            "receive slot {i} of a parcel without receive slots"
        );
        assert!(
            i < self.queue_depth,
            "receive slot {i} of {}",
            self.queue_depth
        );
        i as usize * self.capsule_slot_bytes
    }

    /// Offset of response slot `i`.
    pub fn resp_slot_offset(&self, i: u32) -> usize {
        assert!(
            i < self.queue_depth,
            "response slot {i} of {}",
            self.queue_depth
        );
        self.resp_offset + i as usize * CQE_BYTES
    }

    /// Offset of data slot `i`.
    pub fn data_slot_offset(&self, i: u32) -> usize {
        assert!(i < self.data_slots, "data slot {i} of {}", self.data_slots);
        self.data_offset + i as usize * self.data_slot_bytes
    }

    /// Bytes of the data area (all data slots).
    pub fn data_bytes(&self) -> usize {
        self.data_slots as usize * self.data_slot_bytes
    }
}

pub(super) const fn round_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}
