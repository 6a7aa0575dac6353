//! Type-2 memory windows: allocated on a PD, bound and invalidated by work requests on a QP.
//!
//! The window's current rkey lives in `ibv_mw.rkey`: a bind posts `ibv_inc_rkey(current)` as
//! the new key and, once posted, stores it there. Providers read that field as the key the
//! window has *now* when they build the bind (rxe checks it against the kernel's copy), so it
//! must track every bind. Invalidation keeps the key (rxe frees the window, the key stays).

use std::sync::atomic::{AtomicU32, Ordering};

use super::pd::Pd;
use super::{errno, sys};
use crate::fabric::{FabricError, Result};

/// A type-2 memory window; holds its PD.
pub struct Mw {
    mw: *mut sys::ibv_mw,
    pd: Pd,
}

// SAFETY: the MW pointer is passed to libibverbs (thread-safe) and its rkey field is only
// accessed atomically (see `rkey_cell`); deallocated once, in Drop.
unsafe impl Send for Mw {}
// SAFETY: as above.
unsafe impl Sync for Mw {}

impl Mw {
    pub(crate) fn alloc(pd: &Pd) -> Result<Mw> {
        if !pd.device().has_mw_type2() {
            return Err(FabricError::Unsupported {
                what: "type-2 memory windows",
            });
        }
        // SAFETY: the PD is live (held by `pd`).
        let mw = unsafe { sys::rdmablk_shim_alloc_mw(pd.raw(), sys::ibv_mw_type::IBV_MW_TYPE_2) };
        if mw.is_null() {
            return match errno() {
                libc::EOPNOTSUPP | libc::ENOSYS => Err(FabricError::Unsupported {
                    what: "type-2 memory windows",
                }),
                _ => Err(super::errno_err("ibv_alloc_mw")),
            };
        }
        Ok(Mw { mw, pd: pd.clone() })
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_mw {
        self.mw
    }

    pub(crate) fn pd(&self) -> &Pd {
        &self.pd
    }

    fn rkey_cell(&self) -> &AtomicU32 {
        // SAFETY: `rkey` is an aligned u32 inside the live ibv_mw; the provider writes it only
        // in ibv_alloc_mw (before we see the pointer) and reads it during our own bind posts,
        // so every concurrent access from Rust goes through this atomic.
        unsafe { AtomicU32::from_ptr(std::ptr::addr_of_mut!((*self.mw).rkey)) }
    }

    pub fn rkey(&self) -> u32 {
        self.rkey_cell().load(Ordering::Acquire)
    }

    /// The rkey the next bind will give the window.
    pub(crate) fn next_rkey(&self) -> u32 {
        // SAFETY: ibv_inc_rkey is pure arithmetic on its argument.
        unsafe { sys::rdmablk_shim_inc_rkey(self.rkey()) }
    }

    /// Records that a bind to `rkey` was posted.
    pub(crate) fn set_rkey(&self, rkey: u32) {
        self.rkey_cell().store(rkey, Ordering::Release);
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        // SAFETY: the MW is live and deallocated once, here.
        let rc = unsafe { sys::rdmablk_shim_dealloc_mw(self.mw) };
        if rc != 0 {
            tracing::error!(
                error = %super::rc_err("ibv_dealloc_mw", rc),
                "leaking a memory window: ibv_dealloc_mw failed"
            );
        }
    }
}
