//! A worker's NVMe/TCP placement ([`PlacedCounters`]): how much H2CData its queues read from
//! the socket straight into the commands' data slots (`target.tcp_place_from`) rather than
//! copying it through the receive buffer. Counted per I/O by the worker's poll group (one
//! writer, relaxed atomics), read by the scraper through [`super::super::Transport::data_placed`].

use std::sync::atomic::{AtomicU64, Ordering};

use super::super::DataPlaced;

/// What a worker's NVMe/TCP queues placed. Written by that worker only.
#[derive(Debug, Default)]
pub struct PlacedCounters {
    /// H2CData bytes read from the socket straight into a data slot (not the part of a
    /// placed PDU's data that had already come into the receive buffer, which is copied).
    pub bytes: AtomicU64,
    /// H2CData PDUs whose data was placed (counted once all of it is in).
    pub pdus: AtomicU64,
}

impl PlacedCounters {
    /// `n` bytes were read straight into a data slot.
    pub fn read_into(&self, n: usize) {
        // One writer: a relaxed add never contends.
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A placed H2CData PDU's data is all in its slot.
    pub fn pdu_done(&self) {
        self.pdus.fetch_add(1, Ordering::Relaxed);
    }

    /// What worker `worker` placed so far.
    pub fn snapshot(&self, worker: usize) -> DataPlaced {
        DataPlaced {
            worker,
            bytes: self.bytes.load(Ordering::Relaxed),
            pdus: self.pdus.load(Ordering::Relaxed),
        }
    }
}
