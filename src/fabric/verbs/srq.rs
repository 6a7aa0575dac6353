//! Shared receive queues (`ibv_create_srq`): receive WRs that every QP created with the SRQ
//! consumes. Holds its PD, so the PD outlives it; QPs hold the SRQ, so it outlives them.

use std::sync::Arc;

use super::pd::Pd;
use super::wr::{self, RecvTarget};
use super::{errno, errno_err, rc_err, sys};
use crate::fabric::{FabricError, RecvWr, Result, SrqCaps, SrqInit};

/// A shared receive queue. Cheap to clone.
#[derive(Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

struct SrqInner {
    srq: *mut sys::ibv_srq,
    caps: SrqCaps,
    pd: Pd,
}

// SAFETY: the SRQ pointer is only passed to libibverbs calls, which are thread-safe (posting
// takes the provider's lock); it is destroyed once, in Drop, when no clone (and so no QP using
// it) is left.
unsafe impl Send for SrqInner {}
// SAFETY: as above; nothing is mutated through `&self`.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: the SRQ is live and this is its last owner: every QP created with it holds a
        // clone, so they are all destroyed.
        let rc = unsafe { sys::ibv_destroy_srq(self.srq) };
        if rc != 0 {
            tracing::error!(
                device = %self.pd.device().name(),
                error = %rc_err("ibv_destroy_srq", rc),
                "leaking a shared receive queue: ibv_destroy_srq failed"
            );
        }
    }
}

impl Srq {
    pub(crate) fn new(pd: &Pd, init: SrqInit) -> Result<Srq> {
        let max_srq = pd.device().raw_attr().max_srq;
        if max_srq <= 0 {
            return Err(FabricError::Unsupported {
                what: "a shared receive queue",
            });
        }
        let mut attr = sys::ibv_srq_init_attr {
            attr: sys::ibv_srq_attr {
                max_wr: init.max_wr,
                max_sge: init.max_sge,
                srq_limit: 0,
            },
            ..Default::default()
        };
        // SAFETY: the PD is live while `pd` is; `attr` is a valid in/out parameter.
        let srq = unsafe { sys::ibv_create_srq(pd.raw(), &mut attr) };
        if srq.is_null() {
            let e = errno();
            if e == libc::EINVAL {
                let a = pd.device().raw_attr();
                return Err(FabricError::InvalidArgument {
                    what: format!(
                        "SRQ of {} WRs x {} SGEs: device {} allows {} x {} (see `ibv_devinfo -v`)",
                        init.max_wr,
                        init.max_sge,
                        pd.device().name(),
                        a.max_srq_wr,
                        a.max_srq_sge
                    ),
                });
            }
            return Err(errno_err("ibv_create_srq"));
        }
        Ok(Srq {
            inner: Arc::new(SrqInner {
                srq,
                // ibv_create_srq writes back what the device gave.
                caps: SrqCaps {
                    max_wr: attr.attr.max_wr,
                    max_sge: attr.attr.max_sge,
                },
                pd: pd.clone(),
            }),
        })
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_srq {
        self.inner.srq
    }

    pub(crate) fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<()> {
        wr::post_recv(
            RecvTarget::Srq(self.inner.srq),
            self.inner.caps.max_sge,
            wrs,
        )
    }

    pub fn caps(&self) -> SrqCaps {
        self.inner.caps
    }
}
