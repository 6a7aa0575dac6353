//! The loop's memory region: the host's memory the target may read and write.

/// Memory of the host's that the target may read and write: the loop's memory region.
pub struct Region {
    ptr: *mut u8,
    len: usize,
    _keep: Box<dyn Send + Sync>,
}

// SAFETY: the region is plain memory kept alive by `_keep`; who writes it when is the NVMe
// contract between host and target (a command's buffer is the target's while it is in flight),
// the same as for memory registered for RDMA.
unsafe impl Send for Region {}
// SAFETY: as above; the region itself is never mutated.
unsafe impl Sync for Region {}

impl Region {
    /// The `len` bytes at `ptr`, valid while `keep` lives.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be valid for reads and writes for as long as `keep` lives, and the
    /// caller accepts that a target writes into it whenever a command the host sent allows.
    pub unsafe fn new(ptr: *mut u8, len: usize, keep: Box<dyn Send + Sync>) -> Region {
        Region {
            ptr,
            len,
            _keep: keep,
        }
    }

    /// Where `addr..addr + len` lies in the region, if it does.
    pub(super) fn at(&self, addr: u64, len: usize) -> Option<*mut u8> {
        let start = (addr as usize).checked_sub(self.ptr as usize)?;
        let end = start.checked_add(len)?;
        // SAFETY: `start..end` lies within the region (checked just below before use).
        (end <= self.len).then(|| unsafe { self.ptr.add(start) })
    }
}
