//! Registered memory through the public API: the protection domain ([`Pd`]) that registers
//! regions and allocates windows and SRQs, memory regions ([`Mr`]: keys, SGEs, copies in and
//! out) and type-2 memory windows ([`Mw`]).

use super::{Access, FabricError, Inner, MemBuf, Mr, Mw, Pd, Result, Sge, Srq, SrqInit};

impl Pd {
    /// Registers `buf` with `access`; the region owns the buffer from now on.
    pub fn register(&self, buf: MemBuf, access: Access) -> Result<Mr> {
        dispatch!(&self.0, p => p.register(buf, access).map(Mr::from))
    }

    /// Registers `len` bytes at `addr` that the caller owns.
    ///
    /// # Safety
    /// - `addr..addr + len` is valid, writable memory for as long as the returned [`Mr`] lives,
    ///   and for as long as any work request naming it may still execute (until its completion,
    ///   or the QP's flush, has been polled).
    /// - While the region lives, the caller accesses that memory only in ways that tolerate
    ///   concurrent DMA by the device (no references held across a transfer into it).
    pub unsafe fn register_raw(&self, addr: *mut u8, len: usize, access: Access) -> Result<Mr> {
        // SAFETY: the caller upholds the contract above, which the provider needs verbatim.
        dispatch!(&self.0, p => unsafe { p.register_raw(addr, len, access) }.map(Mr::from))
    }

    /// Creates a shared receive queue of this PD (`ibv_create_srq`, no limit event). Fails
    /// with [`FabricError::Unsupported`] on a device without SRQs (`DeviceAttr::max_srq` 0).
    pub fn create_srq(&self, init: SrqInit) -> Result<Srq> {
        dispatch!(&self.0, p => p.create_srq(init).map(Srq::from))
    }

    /// Allocates a type-2 memory window; [`FabricError::Unsupported`] if the device has none
    /// (callers fall back to a per-connection memory region).
    pub fn alloc_mw(&self) -> Result<Mw> {
        dispatch!(&self.0, p => p.alloc_mw().map(Mw::from))
    }
}

impl Mr {
    /// Virtual address of the first byte (what SGEs and remote addresses name).
    pub fn addr(&self) -> u64 {
        dispatch!(&self.0, m => m.addr())
    }

    pub fn len(&self) -> usize {
        dispatch!(&self.0, m => m.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn lkey(&self) -> u32 {
        dispatch!(&self.0, m => m.lkey())
    }

    /// Remote key (meaningful only with REMOTE_READ or REMOTE_WRITE access).
    pub fn rkey(&self) -> u32 {
        dispatch!(&self.0, m => m.rkey())
    }

    pub fn access(&self) -> Access {
        dispatch!(&self.0, m => m.access())
    }

    /// Pointer to the first byte, for I/O engines that fill the region (io_uring).
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr() as *mut u8
    }

    /// An SGE over `len` bytes at `offset`. Panics if the range is outside the region (a
    /// caller bug: offsets are computed by the caller, never taken from a peer).
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        let end = offset.checked_add(len as usize);
        assert!(
            end.is_some_and(|e| e <= self.len()),
            "sge {offset}+{len} outside memory region of {} bytes",
            self.len()
        );
        Sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey: self.lkey(),
        }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(FabricError::InvalidArgument {
                what: format!(
                    "range {offset}+{len} outside memory region of {} bytes",
                    self.len()
                ),
            }),
        }
    }

    /// Copies `dst.len()` bytes from the region at `offset` into `dst`.
    ///
    /// Call it only when no work request is writing that range (after its completion).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        // SAFETY: the range is inside the live region (checked); `dst` cannot overlap it as it
        // is an exclusive borrow of ordinary memory the region does not hand out.
        unsafe {
            std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// Call it only when no work request is reading or writing that range.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        // SAFETY: the range is inside the live region (checked); the region's memory is only
        // ever accessed through raw pointers, so no Rust reference aliases it.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.as_ptr().add(offset), src.len())
        };
        Ok(())
    }
}

impl Mw {
    /// The window's current remote key (changes at every bind).
    pub fn rkey(&self) -> u32 {
        dispatch!(&self.0, w => w.rkey())
    }
}
