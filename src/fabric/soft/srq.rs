//! Shared receive queues: one preallocated ring of receive WRs that the receive threads of
//! every QP created with it take from (under the ring's lock), first come first served.

use std::sync::{Arc, Mutex};

use crate::fabric::{FabricError, RecvWr, Result, Sge, SrqCaps, SrqInit};

use super::device::{Pd, MAX_QP_WR, MAX_SGE};
use super::recv_queue::RecvRing;

pub(super) struct SrqInner {
    pub pd_id: u32,
    caps: SrqCaps,
    ring: Mutex<RecvRing>,
    /// The PD outlives its SRQs.
    _pd: Pd,
}

impl SrqInner {
    /// Takes the oldest posted WR for a QP's incoming SEND; None when the queue is empty.
    pub fn take(&self, out: &mut Vec<Sge>) -> Option<u64> {
        self.ring.lock().unwrap().pop(Some(out))
    }
}

/// A shared receive queue. Cheap to clone; QPs created with it hold a clone.
#[derive(Clone)]
pub struct Srq(pub(super) Arc<SrqInner>);

impl Srq {
    pub(super) fn new(pd: &Pd, init: SrqInit) -> Result<Srq> {
        if init.max_wr == 0 || init.max_wr > MAX_QP_WR {
            return Err(FabricError::InvalidArgument {
                what: format!("SRQ max_wr {} (soft0 allows 1..={MAX_QP_WR})", init.max_wr),
            });
        }
        if init.max_sge > MAX_SGE {
            return Err(FabricError::InvalidArgument {
                what: format!("SRQ max_sge {} over soft0's {MAX_SGE}", init.max_sge),
            });
        }
        let caps = SrqCaps {
            max_wr: init.max_wr,
            max_sge: init.max_sge.max(1),
        };
        Ok(Srq(Arc::new(SrqInner {
            pd_id: pd.id(),
            caps,
            ring: Mutex::new(RecvRing::new(caps.max_wr, caps.max_sge)),
            _pd: pd.clone(),
        })))
    }

    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        self.0.ring.lock().unwrap().post(wrs, 0)
    }

    pub fn caps(&self) -> SrqCaps {
        self.0.caps
    }
}
