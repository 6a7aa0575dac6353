//! Memory regions, type-2 memory windows, their keys, and the checks every access goes through.
//!
//! A key is `index << 8 | tag` (like mlx5/rxe): the index names a slot in the device's key
//! table, the tag changes when the slot is reused and, for a window, at every bind
//! (`ibv_inc_rkey`), so a stale key no longer matches.
//!
//! An access (a copy to or from registered memory) holds an [`MrAccess`]: an `Arc` of the region
//! and a count that deregistration waits for, so memory is never freed (or, for
//! `register_raw`, handed back to its owner) while a copy is in progress.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fabric::{Access, FabricError, MemBuf, Result, WcStatus};

use super::device::{DeviceInner, Pd};
use super::queue::BindArgs;

/// Largest key index (24 bits).
pub(super) const KEY_INDEX_MAX: u32 = (1 << 24) - 1;

/// The next key of a window: same index, tag + 1 (what `ibv_inc_rkey` computes).
pub(super) fn inc_key(key: u32) -> u32 {
    (key & !0xff) | ((key as u8).wrapping_add(1) as u32)
}

/// What a key index names.
#[derive(Clone)]
pub(super) enum KeyEntry {
    Mr(Arc<MrInner>),
    Mw(Arc<MwInner>),
}

pub(super) struct MrInner {
    pub key: u32,
    pub pd_id: u32,
    pub addr: u64,
    pub len: u64,
    pub access: Access,
    /// The memory, when the region owns it (dropped with the last `Arc`).
    _buf: Option<MemBuf>,
    valid: AtomicBool,
    active: AtomicU32,
}

// SAFETY: the region's memory is only touched through raw pointers by holders of an MrAccess;
// the owned MemBuf is Send + Sync; everything else is atomics and plain data.
unsafe impl Send for MrInner {}
// SAFETY: as above.
unsafe impl Sync for MrInner {}

impl MrInner {
    fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.addr + self.len)
    }

    /// Stops new accesses and waits for those in progress (deregistration).
    fn invalidate_and_wait(&self) {
        self.valid.store(false, Ordering::SeqCst);
        while self.active.load(Ordering::SeqCst) != 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Permission to copy to or from a live region until dropped.
pub(super) struct MrAccess(Arc<MrInner>);

impl MrAccess {
    /// `None` once the region is deregistered.
    pub fn begin(mr: Arc<MrInner>) -> Option<MrAccess> {
        // Dekker with invalidate_and_wait: announce, then check (both SeqCst).
        mr.active.fetch_add(1, Ordering::SeqCst);
        if !mr.valid.load(Ordering::SeqCst) {
            mr.active.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(MrAccess(mr))
    }

    /// `len` bytes at virtual address `addr` of the region, for reading.
    ///
    /// The caller has range-checked `addr..addr + len` against this region.
    pub fn slice(&self, addr: u64, len: usize) -> &[u8] {
        assert!(self.0.contains(addr, len as u64));
        if len == 0 {
            return &[];
        }
        // SAFETY: the range is inside the region (asserted), whose memory stays mapped while
        // this access lives (deregistration waits for it). Concurrent writers are the
        // application's business exactly as with DMA (the `register_raw` contract).
        unsafe { std::slice::from_raw_parts(addr as *const u8, len) }
    }

    /// As [`MrAccess::slice`], for writing.
    #[allow(clippy::mut_from_ref)]
    pub fn slice_mut(&self, addr: u64, len: usize) -> &mut [u8] {
        assert!(self.0.contains(addr, len as u64));
        if len == 0 {
            return &mut [];
        }
        // SAFETY: as in `slice`; the region has LOCAL_WRITE or REMOTE_WRITE access (checked by
        // the caller) so the application expects the device to write it.
        unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) }
    }
}

impl Drop for MrAccess {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The range a bound window covers.
pub(super) struct MwBinding {
    pub key: u32,
    pub mr: Arc<MrInner>,
    pub addr: u64,
    pub len: u64,
    pub access: Access,
    /// The QP the window was bound through; it works through that QP only.
    pub qpn: u32,
}

pub(super) struct MwInner {
    pub pd_id: u32,
    /// The key of the latest bind posted (what `Mw::rkey` returns).
    pub posted_key: AtomicU32,
    pub binding: Mutex<Option<MwBinding>>,
}

/// A registered memory region.
pub struct Mr {
    inner: Arc<MrInner>,
    pd: Pd,
}

impl Mr {
    pub fn addr(&self) -> u64 {
        self.inner.addr
    }
    pub fn len(&self) -> usize {
        self.inner.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }
    pub fn lkey(&self) -> u32 {
        self.inner.key
    }
    pub fn rkey(&self) -> u32 {
        self.inner.key
    }
    pub fn access(&self) -> Access {
        self.inner.access
    }
    pub(super) fn inner(&self) -> &Arc<MrInner> {
        &self.inner
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        self.pd
            .dev()
            .remove_key(self.inner.key, (self.inner.key as u8).wrapping_add(1));
        self.inner.invalidate_and_wait();
    }
}

/// A type-2 memory window.
pub struct Mw {
    inner: Arc<MwInner>,
    pd: Pd,
}

impl Mw {
    pub fn rkey(&self) -> u32 {
        self.inner.posted_key.load(Ordering::SeqCst)
    }
    pub(super) fn inner(&self) -> &Arc<MwInner> {
        &self.inner
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        let key = self.rkey();
        self.inner.binding.lock().unwrap().take();
        self.pd.dev().remove_key(key, (key as u8).wrapping_add(1));
    }
}

impl Pd {
    pub fn register(&self, buf: MemBuf, access: Access) -> Result<Mr> {
        let (addr, len) = (buf.as_ptr() as u64, buf.len());
        self.add_mr(addr, len, access, Some(buf))
    }

    /// # Safety
    /// See `fabric::Pd::register_raw`.
    pub unsafe fn register_raw(&self, addr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        if addr.is_null() {
            return Err(FabricError::InvalidArgument {
                what: "register_raw of a null address".into(),
            });
        }
        self.add_mr(addr as u64, len, access, None)
    }

    fn add_mr(&self, addr: u64, len: usize, access: Access, buf: Option<MemBuf>) -> Result<Mr> {
        if (access.contains(Access::REMOTE_WRITE)) && !access.contains(Access::LOCAL_WRITE) {
            // Verbs refuses this combination too (EINVAL).
            return Err(FabricError::InvalidArgument {
                what: "REMOTE_WRITE access requires LOCAL_WRITE".into(),
            });
        }
        if addr.checked_add(len as u64).is_none() {
            return Err(FabricError::InvalidArgument {
                what: format!("memory range {addr:#x}+{len} wraps"),
            });
        }
        let pd_id = self.id();
        let mut buf = buf;
        let entry = self.dev().add_key(|key| {
            KeyEntry::Mr(Arc::new(MrInner {
                key,
                pd_id,
                addr,
                len: len as u64,
                access,
                _buf: buf.take(),
                valid: AtomicBool::new(true),
                active: AtomicU32::new(0),
            }))
        })?;
        let KeyEntry::Mr(inner) = entry else {
            unreachable!("add_key returns what make built")
        };
        Ok(Mr {
            inner,
            pd: self.clone(),
        })
    }

    pub fn alloc_mw(&self) -> Result<Mw> {
        let pd_id = self.id();
        let entry = self.dev().add_key(|key| {
            KeyEntry::Mw(Arc::new(MwInner {
                pd_id,
                posted_key: AtomicU32::new(key),
                binding: Mutex::new(None),
            }))
        })?;
        let KeyEntry::Mw(inner) = entry else {
            unreachable!("add_key returns what make built")
        };
        Ok(Mw {
            inner,
            pd: self.clone(),
        })
    }
}

/// The responder's checks of a remote access: rkey, range, access, PD and, for a window, that
/// it is bound through `qpn`. Returns the access and the address to copy at.
pub(super) fn resolve_remote(
    dev: &DeviceInner,
    rkey: u32,
    addr: u64,
    len: u64,
    need: Access,
    pd_id: u32,
    qpn: u32,
) -> Option<MrAccess> {
    let mr = match dev.lookup(rkey)? {
        KeyEntry::Mr(mr) => {
            let ok = mr.key == rkey
                && mr.pd_id == pd_id
                && mr.access.contains(need)
                && mr.contains(addr, len);
            ok.then_some(mr)?
        }
        KeyEntry::Mw(mw) => {
            let b = mw.binding.lock().unwrap();
            let b = b.as_ref()?;
            let end = addr.checked_add(len)?;
            let ok = b.key == rkey
                && mw.pd_id == pd_id
                && b.qpn == qpn
                && b.access.contains(need)
                && addr >= b.addr
                && end <= b.addr + b.len;
            ok.then(|| b.mr.clone())?
        }
    };
    MrAccess::begin(mr)
}

/// Checks a local SGE: the lkey names a live region of `pd_id` holding the range, with
/// LOCAL_WRITE when the device writes it.
pub(super) fn resolve_local(
    dev: &DeviceInner,
    lkey: u32,
    addr: u64,
    len: u32,
    write: bool,
    pd_id: u32,
) -> Result<MrAccess, WcStatus> {
    let Some(KeyEntry::Mr(mr)) = dev.lookup(lkey) else {
        return Err(WcStatus::LocProtErr);
    };
    if mr.key != lkey || mr.pd_id != pd_id || (write && !mr.access.contains(Access::LOCAL_WRITE)) {
        return Err(WcStatus::LocProtErr);
    }
    if !mr.contains(addr, len as u64) {
        return Err(WcStatus::LocProtErr);
    }
    MrAccess::begin(mr).ok_or(WcStatus::LocProtErr)
}

/// Executes a bind posted on QP `qpn` of PD `pd_id`.
pub(super) fn bind(b: &BindArgs, pd_id: u32, qpn: u32) -> WcStatus {
    let (mw, mr) = (&b.mw, &b.mr);
    let ok = mr.access.contains(Access::MW_BIND)
        && mr.pd_id == pd_id
        && mw.pd_id == pd_id
        && mr.contains(b.addr, b.len)
        && mr.valid.load(Ordering::SeqCst)
        && (!b.access.contains(Access::REMOTE_WRITE) || mr.access.contains(Access::LOCAL_WRITE));
    if !ok {
        return WcStatus::MwBindErr;
    }
    *mw.binding.lock().unwrap() = Some(MwBinding {
        key: b.key,
        mr: mr.clone(),
        addr: b.addr,
        len: b.len,
        access: b.access,
        qpn,
    });
    WcStatus::Success
}

/// Invalidates the window whose current key is `rkey`, if it is in `pd_id` and (when `qpn`
/// is given: remote invalidation) was bound through that QP.
pub(super) fn invalidate(dev: &DeviceInner, rkey: u32, pd_id: u32, qpn: Option<u32>) -> bool {
    let Some(KeyEntry::Mw(mw)) = dev.lookup(rkey) else {
        return false;
    };
    let mut b = mw.binding.lock().unwrap();
    let ok = mw.pd_id == pd_id
        && b.as_ref()
            .is_some_and(|b| b.key == rkey && qpn.map_or(true, |q| q == b.qpn));
    if ok {
        *b = None;
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::soft::Device;

    #[test]
    fn inc_key_changes_only_the_tag() {
        assert_eq!(inc_key(0x0000_1200), 0x0000_1201);
        assert_eq!(inc_key(0x0000_12ff), 0x0000_1200);
        assert_eq!(inc_key(0xabcd_ef7f) >> 8, 0xabcd_ef7f >> 8);
    }

    #[test]
    fn keys_are_unique_and_stale_keys_fail() {
        let pd = Device::open(None).unwrap().alloc_pd().unwrap();
        let a = pd
            .register(MemBuf::zeroed(4096).unwrap(), Access::LOCAL_WRITE)
            .unwrap();
        let b = pd
            .register(MemBuf::zeroed(4096).unwrap(), Access::LOCAL_WRITE)
            .unwrap();
        assert_ne!(a.lkey(), b.lkey());
        let (key, addr) = (a.lkey(), a.addr());
        let dev = pd.dev().clone();
        assert!(resolve_local(&dev, key, addr, 16, true, pd.id()).is_ok());
        assert!(resolve_local(&dev, key, addr + 4090, 16, true, pd.id()).is_err());
        assert!(resolve_local(&dev, key, addr, 16, true, pd.id() + 1000).is_err());
        drop(a);
        assert_eq!(
            resolve_local(&dev, key, addr, 16, false, pd.id()).err(),
            Some(WcStatus::LocProtErr)
        );
        // The index is reused with a new tag: the old key still fails.
        let c = pd
            .register(MemBuf::zeroed(4096).unwrap(), Access::LOCAL_WRITE)
            .unwrap();
        assert_ne!(c.lkey(), key);
    }

    #[test]
    fn deregistration_waits_for_accesses_in_progress() {
        let pd = Device::open(None).unwrap().alloc_pd().unwrap();
        let mr = pd
            .register(MemBuf::zeroed(4096).unwrap(), Access::LOCAL_WRITE)
            .unwrap();
        let acc = MrAccess::begin(mr.inner().clone()).unwrap();
        let t = std::thread::spawn(move || drop(mr));
        std::thread::sleep(Duration::from_millis(20));
        assert!(!t.is_finished());
        acc.slice_mut(acc.0.addr, 8).fill(1);
        drop(acc);
        t.join().unwrap();
    }
}
