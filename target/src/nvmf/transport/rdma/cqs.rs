//! Each worker's completion queues, and the entries its queues reserve in them.
//!
//! A worker starts with one CQ. A connecting queue reserves the entries it may need (its
//! sends; its receives too when it has no shared receive queue) in a CQ of its worker with
//! room; when none has room the listener makes another CQ for that worker, up to what
//! `limits.max_connections` needs and the device's `max_cq` allows. The worker polls and
//! waits on all of its CQs ([`super::group`]). So a device whose CQs are small (rxe:
//! 32,767 entries, about 100 idle controllers' worth) still takes every connection the
//! limits admit, and a device with large CQs keeps the one CQ per worker it always had.
//!
//! A CQ made this way stays until the target stops (the worker holds it; a later queue
//! reuses its room): CQs are counted, not freed, so a worker never polls a CQ being
//! destroyed.

use std::sync::Mutex;

use rdmablk::fabric::{Cq, Device, FabricError};

/// The CQ entries one queue holds: in which of its worker's CQs, and how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqShare {
    /// Index of the CQ among its worker's ([`WorkerCqs::list`]).
    pub index: usize,
    pub cqes: u32,
}

/// Every worker's CQs.
#[derive(Debug)]
pub struct WorkerCqs {
    /// Entries of each CQ.
    capacity: u32,
    /// Entries of each CQ that queues may reserve: the rest is kept for the receives of the
    /// worker's shared receive queue, which may all complete on any one of its CQs.
    reservable: u32,
    /// CQs a worker may have at most.
    max_per_worker: usize,
    workers: Vec<Mutex<Cqs>>,
}

/// One worker's CQs and the entries reserved in each.
#[derive(Debug, Default)]
struct Cqs {
    cqs: Vec<Cq>,
    reserved: Vec<u32>,
}

impl WorkerCqs {
    /// Makes the first CQ of each of `workers` workers, `capacity` entries each, of which
    /// `headroom` are never reserved (the SRQ's receives).
    pub fn new(
        device: &Device,
        workers: usize,
        capacity: u32,
        headroom: u32,
        max_per_worker: usize,
    ) -> Result<WorkerCqs, FabricError> {
        let workers = (0..workers)
            .map(|_| {
                let cq = device.create_cq(capacity)?;
                Ok(Mutex::new(Cqs {
                    cqs: vec![cq],
                    reserved: vec![0],
                }))
            })
            .collect::<Result<Vec<_>, FabricError>>()?;
        Ok(WorkerCqs {
            capacity,
            reservable: capacity.saturating_sub(headroom),
            max_per_worker: max_per_worker.max(1),
            workers,
        })
    }

    /// Entries of each CQ.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Workers (each has its CQs).
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Reserves `cqes` entries in a CQ of worker `w`: the first with room, else a new one
    /// made on `device` while the worker has fewer than its maximum. None: no room and no
    /// CQ may (or could) be made.
    pub fn reserve(&self, device: &Device, w: usize, cqes: u32) -> Option<(CqShare, Cq)> {
        let mut c = self.lock(w);
        let room = c
            .reserved
            .iter()
            .position(|&used| used + cqes <= self.reservable);
        let index = match room {
            Some(i) => i,
            None if cqes <= self.reservable && c.cqs.len() < self.max_per_worker => {
                match device.create_cq(self.capacity) {
                    Ok(cq) => {
                        c.cqs.push(cq);
                        c.reserved.push(0);
                        tracing::info!(
                            worker = w,
                            cqs = c.cqs.len(),
                            entries = self.capacity,
                            "the worker's completion queues are full: one more made"
                        );
                        c.cqs.len() - 1
                    }
                    Err(e) => {
                        tracing::warn!(worker = w, cqs = c.cqs.len(), error = %e,
                            "cannot make another completion queue");
                        return None;
                    }
                }
            }
            None => return None,
        };
        c.reserved[index] += cqes;
        Some((CqShare { index, cqes }, c.cqs[index].clone()))
    }

    /// Gives back what `share` reserved of worker `w`'s CQs.
    pub fn release(&self, w: usize, share: CqShare) {
        let mut c = self.lock(w);
        if let Some(used) = c.reserved.get_mut(share.index) {
            *used = used.saturating_sub(share.cqes);
        }
    }

    /// Worker `w`'s CQs, in index order.
    pub fn list(&self, w: usize) -> Vec<Cq> {
        self.lock(w).cqs.clone()
    }

    /// Entries reserved in each of worker `w`'s CQs.
    pub fn reserved(&self, w: usize) -> Vec<u32> {
        self.lock(w).reserved.clone()
    }

    fn lock(&self, w: usize) -> std::sync::MutexGuard<'_, Cqs> {
        // The critical sections only count and push: a panic cannot leave them half done.
        self.workers[w]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
