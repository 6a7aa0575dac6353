//! Checks of `[arena]` against the limits: data pools that hold two of the largest transfers
//! per worker, and room beside them for an RDMA queue's parcel.

use super::Checker;
use crate::config::{ArenaConfig, ByteSize, Config, MAX_IO_SIZE, MAX_QUEUE_DEPTH, MIN_QUEUE_DEPTH};

pub(super) fn check_arena(cfg: &Config, c: &mut Checker) {
    let rb = cfg.arena.receive_buffers;
    if rb != 0 && !ArenaConfig::RECEIVE_BUFFERS.contains(&rb) {
        c.fail(
            "arena.receive_buffers",
            format!(
                "{rb} is out of range: give {}..={} receive buffers per worker for a shared \
                 receive queue, or 0 for a receive queue per RDMA connection",
                ArenaConfig::RECEIVE_BUFFERS.start(),
                ArenaConfig::RECEIVE_BUFFERS.end()
            ),
        );
    }
    let l = &cfg.limits;
    if !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&l.max_queue_depth)
        || l.max_io_size == 0
        || l.max_io_size > MAX_IO_SIZE
    {
        return; // reported above; the parcel size would be meaningless
    }
    let parcel = cfg.max_parcel_layout().total_bytes as u64;
    let bytes = cfg.arena.bytes.bytes();
    let data = cfg.data_pool_bytes();
    let workers = u64::from(cfg.target.worker_threads.max(1));
    let largest = u64::from(l.max_io_size).next_multiple_of(crate::arena::PAGE_BYTES as u64);
    if data / workers < 2 * largest {
        c.fail(
            "arena.data_bytes",
            format!(
                "{} for the data pools is {} per worker (target.worker_threads {}), less than \
                 two of the largest transfers (limits.max_io_size {}): raise arena.data_bytes \
                 (or arena.bytes, half of which is the default), or lower limits.max_io_size",
                ByteSize(data),
                ByteSize(data / workers),
                workers,
                l.max_io_size,
            ),
        );
    } else if bytes < data + parcel {
        c.fail(
            "arena.bytes",
            format!(
                "{} does not hold the data pools (arena.data_bytes {}) and one RDMA queue's \
                 parcel at limits.max_queue_depth {} ({} = receive slots {} x {} B + response \
                 slots): raise arena.bytes to the data pools plus {} per RDMA queue you \
                 expect, or lower arena.data_bytes",
                cfg.arena.bytes,
                ByteSize(data),
                l.max_queue_depth,
                ByteSize(parcel),
                l.max_queue_depth,
                cfg.max_parcel_layout().capsule_slot_bytes,
                ByteSize(parcel),
            ),
        );
    }
    if isize::try_from(bytes).is_err() {
        c.fail("arena.bytes", "is larger than the address space");
    }
}
