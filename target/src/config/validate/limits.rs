//! Checks of `[limits]`: each limit within the bounds the wire and the target allow.

use super::Checker;
use crate::config::{
    Config, MAX_IN_CAPSULE_DATA_SIZE, MAX_IO_SIZE, MAX_QUEUE_DEPTH, MIN_QUEUE_DEPTH,
};

pub(super) fn check_limits(cfg: &Config, c: &mut Checker) {
    let l = &cfg.limits;
    if !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&l.max_queue_depth) {
        c.fail(
            "limits.max_queue_depth",
            format!(
                "{} is out of range (set {MIN_QUEUE_DEPTH}..={MAX_QUEUE_DEPTH}: hosts open a \
                 {MIN_QUEUE_DEPTH}-entry admin queue; 128 is the usual value)",
                l.max_queue_depth
            ),
        );
    }
    if l.max_io_size < 4096 || l.max_io_size % 4096 != 0 || l.max_io_size > MAX_IO_SIZE {
        c.fail(
            "limits.max_io_size",
            format!(
                "{} is not a multiple of 4096 between 4096 and {MAX_IO_SIZE} (use 131072, 128 KiB)",
                l.max_io_size
            ),
        );
    }
    let icd = l.in_capsule_data_size;
    if icd % 16 != 0 {
        c.fail(
            "limits.in_capsule_data_size",
            format!("{icd} is not a multiple of 16 (capsule sizes count 16-byte units; use 4096)"),
        );
    }
    if icd > l.max_io_size || icd > MAX_IN_CAPSULE_DATA_SIZE {
        c.fail(
            "limits.in_capsule_data_size",
            format!(
                "{icd} is larger than limits.max_io_size ({}) or {MAX_IN_CAPSULE_DATA_SIZE} \
                 (lower it; 4096 is usual, 0 disables in-capsule data)",
                l.max_io_size
            ),
        );
    }
    if l.max_queues_per_controller < 2 || l.max_queues_per_controller > 65535 {
        c.fail(
            "limits.max_queues_per_controller",
            format!(
                "{} is out of range (set 2..=65535: it counts the admin queue plus I/O queues)",
                l.max_queues_per_controller
            ),
        );
    }
    if l.max_connections == 0 {
        c.fail(
            "limits.max_connections",
            "0 would refuse every host (set at least 2: one admin and one I/O queue)",
        );
    }
    if l.push_window_bytes > crate::config::MAX_PUSH_WINDOW_BYTES {
        c.fail(
            "limits.push_window_bytes",
            format!(
                "{} is more than 1 GiB per push queue (set 0..=1073741824; 0 declines push \
                 writes)",
                l.push_window_bytes
            ),
        );
    }
}
