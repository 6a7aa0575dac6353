//! Protection domains: memory regions, windows and QPs of one PD work together.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use super::device::Device;
use super::mr::Mr;
use super::mw::Mw;
use super::srq::Srq;
use super::{errno_err, rc_err, sys};
use crate::fabric::{Access, MemBuf, Result, SrqInit};

/// A protection domain. Cheap to clone; holds its device.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

struct PdInner {
    pd: *mut sys::ibv_pd,
    device: Device,
    /// Live regions of this PD by lkey: `(addr, len)`. Inline sends are read by the CPU at
    /// post time, which verbs does not check; this table lets `post_send` refuse an inline SGE
    /// that names no registered memory, so a safe call cannot read arbitrary addresses.
    regions: RwLock<Regions>,
}

/// lkey -> (address, length) of the PD's live memory regions.
pub(crate) type Regions = HashMap<u32, (u64, usize)>;

// SAFETY: the PD pointer is only passed to libibverbs calls, which are thread-safe; it is
// deallocated once, in Drop, when no clone is left.
unsafe impl Send for PdInner {}
// SAFETY: as above; nothing is mutated through `&self`.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: the PD is live and this is its last owner: every MR, MW and QP of it holds a
        // clone of this Arc, so they are all gone.
        let rc = unsafe { sys::ibv_dealloc_pd(self.pd) };
        if rc != 0 {
            tracing::error!(
                device = %self.device.name(),
                error = %rc_err("ibv_dealloc_pd", rc),
                "leaking a protection domain: ibv_dealloc_pd failed (an object of it is still alive?)"
            );
        }
    }
}

impl Pd {
    pub(crate) fn new(device: &Device) -> Result<Pd> {
        // SAFETY: the context is live while `device` is.
        let pd = unsafe { sys::ibv_alloc_pd(device.ctx()) };
        if pd.is_null() {
            return Err(errno_err("ibv_alloc_pd"));
        }
        Ok(Pd {
            inner: Arc::new(PdInner {
                pd,
                device: device.clone(),
                regions: RwLock::new(HashMap::new()),
            }),
        })
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_pd {
        self.inner.pd
    }

    pub(crate) fn device(&self) -> &Device {
        &self.inner.device
    }

    pub(crate) fn track_region(&self, lkey: u32, addr: u64, len: usize) {
        self.regions_mut().insert(lkey, (addr, len));
    }

    /// Forgets a region; waits for inline posts that are reading it (they hold the read lock).
    pub(crate) fn untrack_region(&self, lkey: u32) {
        self.regions_mut().remove(&lkey);
    }

    /// The region table, read-locked: hold it across a post that reads inline SGEs.
    pub(crate) fn regions(&self) -> RwLockReadGuard<'_, Regions> {
        self.inner.regions.read().unwrap_or_else(|e| e.into_inner())
    }

    fn regions_mut(&self) -> std::sync::RwLockWriteGuard<'_, Regions> {
        self.inner
            .regions
            .write()
            .unwrap_or_else(|e| e.into_inner())
    }

    pub fn register(&self, buf: MemBuf, access: Access) -> Result<Mr> {
        Mr::register(self, buf, access)
    }

    /// # Safety
    /// See `fabric::Pd::register_raw`: `addr..addr + len` stays valid, writable memory for as
    /// long as the region and any work request naming it live, and is only accessed in ways
    /// that tolerate concurrent DMA.
    pub unsafe fn register_raw(&self, addr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        // SAFETY: the caller's promise is exactly Mr::register_raw's contract.
        unsafe { Mr::register_raw(self, addr, len, access) }
    }

    pub fn alloc_mw(&self) -> Result<Mw> {
        Mw::alloc(self)
    }

    pub fn create_srq(&self, init: SrqInit) -> Result<Srq> {
        Srq::new(self, init)
    }
}
