//! One queue between a host and a target ([`Channel`]): the capsule slots, the two mailboxes
//! that carry batches each way, and the state both ends share.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::{Region, ToHost, Wake, CAPSULE_BYTES};

/// A batch one side hands the other, with a count to look at without the lock.
pub(super) struct Mailbox<T> {
    items: Mutex<Vec<T>>,
    count: AtomicU32,
}

impl<T> Mailbox<T> {
    pub(super) fn new(cap: usize) -> Mailbox<T> {
        Mailbox {
            items: Mutex::new(Vec::with_capacity(cap)),
            count: AtomicU32::new(0),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Vec<T>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `batch` (emptied) under one lock.
    pub(super) fn post(&self, batch: &mut Vec<T>) {
        let n = batch.len() as u32;
        let mut items = self.lock();
        items.append(batch);
        self.count.fetch_add(n, Ordering::SeqCst);
    }

    /// Moves everything posted into `out`; false if there was nothing (no lock taken).
    pub(super) fn take(&self, out: &mut Vec<T>) -> bool {
        if self.count.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let mut items = self.lock();
        self.count.fetch_sub(items.len() as u32, Ordering::SeqCst);
        out.append(&mut items);
        true
    }

    pub(super) fn pending(&self) -> bool {
        self.count.load(Ordering::SeqCst) != 0
    }
}

/// One queue between a host and a target.
pub struct Channel {
    /// The queue the host opens (as NVMe/RDMA's CM request says it).
    pub(super) qid: u16,
    pub(super) entries: u32,
    pub(super) key: u32,
    pub(super) region: Region,
    /// Capsule slots: written by the host while the slot is its own, read by the target
    /// after the slot was announced (the mailbox's lock orders the two).
    pub(super) capsules: Box<[UnsafeCell<[u8; CAPSULE_BYTES]>]>,
    pub(super) to_target: Mailbox<(u32, u32)>,
    pub(super) to_host: Mailbox<ToHost>,
    pub(super) closed: AtomicBool,
    /// The target's copies of host memory under way.
    pub(super) copying: AtomicU32,
    pub(super) host_wake: Arc<Wake>,
    pub(super) target_wake: OnceLock<Arc<Wake>>,
}

// SAFETY: capsule slots are handed between the two sides through the mailboxes (a slot is
// written only by the host before it is announced and read only by the target after); the
// rest is atomics, locks and the region (Send + Sync).
unsafe impl Sync for Channel {}
