//! Memory regions. A region owns its `MemBuf` and deregisters before the buffer is unmapped,
//! so no work request can reach memory that is gone.

use super::pd::Pd;
use super::{errno, sys};
use crate::fabric::{memlock_limit, Access, FabricError, MemBuf, Result};

/// A registered memory region; holds its PD.
pub struct Mr {
    mr: *mut sys::ibv_mr,
    addr: *mut u8,
    len: usize,
    access: Access,
    /// The memory, when the region owns it (`register`); `None` for `register_raw`.
    buf: Option<MemBuf>,
    pd: Pd,
}

// SAFETY: the MR pointer is only read (keys) or passed to ibv_dereg_mr once, in Drop; the
// memory is reached only through raw pointers under the fabric API's rules.
unsafe impl Send for Mr {}
// SAFETY: as above; `&self` methods only read immutable fields.
unsafe impl Sync for Mr {}

impl Mr {
    pub(crate) fn register(pd: &Pd, buf: MemBuf, access: Access) -> Result<Mr> {
        let (addr, len) = (buf.as_ptr(), buf.len());
        // SAFETY: the MemBuf is a live mapping of `len` bytes and the region takes ownership
        // of it, unmapping it only after deregistration (Drop).
        let mut mr = unsafe { Self::register_raw(pd, addr, len, access) }?;
        mr.buf = Some(buf);
        Ok(mr)
    }

    /// # Safety
    /// `addr..addr + len` is valid, writable memory for as long as the region and any work
    /// request naming it live (see `fabric::Pd::register_raw`).
    pub(crate) unsafe fn register_raw(
        pd: &Pd,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Mr> {
        if len == 0 {
            return Err(FabricError::InvalidArgument {
                what: "memory region of 0 bytes".into(),
            });
        }
        // The fabric Access bits are the ibv_access_flags values (types.rs says so).
        let flags = access.bits() as libc::c_int;
        // SAFETY: the PD is live (held by `pd`); the caller guarantees the memory range.
        let mr = unsafe { sys::ibv_reg_mr(pd.raw(), addr.cast(), len, flags) };
        if mr.is_null() {
            let e = errno();
            let limit = memlock_limit();
            // Pinning beyond RLIMIT_MEMLOCK without CAP_IPC_LOCK fails with ENOMEM (EPERM on
            // some kernels); say which limit and how to raise it.
            if matches!(e, libc::ENOMEM | libc::EPERM) && limit != u64::MAX {
                return Err(FabricError::Memlock { len, limit });
            }
            return Err(FabricError::os(
                "ibv_reg_mr",
                std::io::Error::from_raw_os_error(e),
            ));
        }
        let region = Mr {
            mr,
            addr,
            len,
            access,
            buf: None,
            pd: pd.clone(),
        };
        pd.track_region(region.lkey(), addr as u64, len);
        Ok(region)
    }

    pub(crate) fn raw(&self) -> *mut sys::ibv_mr {
        self.mr
    }

    pub(crate) fn pd(&self) -> &Pd {
        &self.pd
    }

    pub fn addr(&self) -> u64 {
        self.addr as u64
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is live while `self` is; lkey is written once by ibv_reg_mr.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: as for lkey.
        unsafe { (*self.mr).rkey }
    }

    pub fn access(&self) -> Access {
        self.access
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // First, so no inline post can start reading the region from here on.
        self.pd.untrack_region(self.lkey());
        // SAFETY: the MR is live and deregistered once, here; windows bound over it hold their
        // own kernel reference, so the device reports an error instead of faulting if any
        // remain.
        let rc = unsafe { sys::ibv_dereg_mr(self.mr) };
        if rc != 0 {
            tracing::error!(
                len = self.len,
                error = %super::rc_err("ibv_dereg_mr", rc),
                "ibv_dereg_mr failed: leaking the region's memory so the device cannot write \
                 into reused pages (a memory window still bound over it?)"
            );
            if let Some(buf) = self.buf.take() {
                std::mem::forget(buf);
            }
        }
    }
}
