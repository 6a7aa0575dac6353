//! I/O buffers: the pool the application allocates [`IoBuf`]s from.
//!
//! The pool is one mapping carved into 4 KiB pages. Over RDMA it is one memory region (local
//! write, remote read and remote write) registered once at connect; over NVMe/TCP plain
//! memory the transport reads from and writes to. An [`IoBuf`] is a unique handle to a run of pages; the
//! target reaches it with RDMA READ/WRITE through the pool's rkey (keyed SGL type 0x40), so
//! I/O from an `IoBuf` copies nothing. I/O from plain slices bounces through a temporary
//! `IoBuf` (one memcpy per I/O).
//!
//! Ownership keeps the rule "registered memory outlives every I/O that names it, and nobody
//! touches it meanwhile": an `IoBuf` is moved into a submission and comes back in its
//! completion, and each `IoBuf` holds an `Arc` of the pool, so the region outlives it.

use std::sync::{Arc, Mutex};

use rdmablk::fabric::{Access, MemBuf, Mr, Pd};

/// The pool's memory: registered for RDMA (on that protection domain), or plain.
enum PoolMem {
    Registered(Mr, Pd),
    Plain(MemBuf),
}

impl PoolMem {
    fn as_ptr(&self) -> *mut u8 {
        match self {
            PoolMem::Registered(m, _) => m.as_ptr(),
            PoolMem::Plain(m) => m.as_ptr(),
        }
    }

    fn keys(&self) -> (u32, u32) {
        match self {
            PoolMem::Registered(m, _) => (m.lkey(), m.rkey()),
            PoolMem::Plain(_) => (0, 0),
        }
    }
}

use crate::error::{Error, Result};

/// Allocation granule and alignment of [`IoBuf`]s.
pub const PAGE_BYTES: usize = 4096;

struct PoolInner {
    mem: PoolMem,
    /// One bit per page, set = in use.
    used: Mutex<Vec<u64>>,
    pages: usize,
}

/// A pool of registered memory. Cheap to clone.
#[derive(Clone)]
pub struct BufPool(Arc<PoolInner>);

impl std::fmt::Debug for BufPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BufPool({} bytes)", self.0.pages * PAGE_BYTES)
    }
}

impl BufPool {
    /// A pool of `bytes` (rounded up to pages), registered on `pd` if given (RDMA), else
    /// plain memory (NVMe/TCP).
    pub(crate) fn new(pd: Option<&Pd>, bytes: usize) -> Result<BufPool> {
        let pages = bytes.div_ceil(PAGE_BYTES).max(1);
        let buf =
            MemBuf::zeroed(pages * PAGE_BYTES).map_err(Error::fabric(0, "map buffer pool"))?;
        let mem = match pd {
            Some(pd) => {
                let access = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
                PoolMem::Registered(
                    pd.register(buf, access)
                        .map_err(Error::fabric(0, "register buffer pool"))?,
                    pd.clone(),
                )
            }
            None => PoolMem::Plain(buf),
        };
        Ok(BufPool(Arc::new(PoolInner {
            mem,
            used: Mutex::new(vec![0; pages.div_ceil(64)]),
            pages,
        })))
    }

    /// Address of the pool's first byte: every [`IoBuf`] lies at `as_ptr() + offset` with
    /// `offset < capacity()` (lets a caller that keeps its own buffer handles map them).
    pub fn as_ptr(&self) -> *mut u8 {
        self.0.mem.as_ptr()
    }

    /// The protection domain the pool is registered on (`None`: plain memory).
    pub(crate) fn pd(&self) -> Option<&Pd> {
        match &self.0.mem {
            PoolMem::Registered(_, pd) => Some(pd),
            PoolMem::Plain(_) => None,
        }
    }

    /// Pool size in bytes.
    pub fn capacity(&self) -> usize {
        self.0.pages * PAGE_BYTES
    }

    /// A buffer of `len` bytes, page aligned; its contents are unspecified (whatever the last
    /// user left), like `malloc`.
    pub fn alloc(&self, len: usize) -> Result<IoBuf> {
        let want = len.max(1).div_ceil(PAGE_BYTES);
        let exhausted = || Error::PoolExhausted {
            want: len,
            pool_bytes: self.capacity(),
        };
        let mut used = self.0.used.lock().unwrap_or_else(|p| p.into_inner());
        let first = find_run(&used, self.0.pages, want).ok_or_else(exhausted)?;
        for p in first..first + want {
            used[p / 64] |= 1 << (p % 64);
        }
        Ok(IoBuf {
            pool: self.0.clone(),
            offset: first * PAGE_BYTES,
            len,
            pages: want,
        })
    }
}

/// First run of `want` free pages, first fit.
fn find_run(used: &[u64], pages: usize, want: usize) -> Option<usize> {
    let mut run = 0;
    for p in 0..pages {
        if used[p / 64] & (1 << (p % 64)) == 0 {
            run += 1;
            if run == want {
                return Some(p + 1 - want);
            }
        } else {
            run = 0;
        }
    }
    None
}

/// A registered I/O buffer: a unique handle to `len` bytes of the pool, page aligned.
/// Returned to the pool when dropped.
pub struct IoBuf {
    pool: Arc<PoolInner>,
    offset: usize,
    len: usize,
    pages: usize,
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({} bytes at pool+{:#x})", self.len, self.offset)
    }
}

impl IoBuf {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: offset..offset+len lies inside the pool's live region (allocated from it);
        // this IoBuf is the only handle to those pages, and while an I/O runs on them the
        // IoBuf is owned by the queue, so no borrow of it exists during device access.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.len) }
    }

    fn ptr(&self) -> *mut u8 {
        // SAFETY: offset < region length (it came from the allocator), so the pointer stays
        // inside the mapping.
        unsafe { self.pool.mem.as_ptr().add(self.offset) }
    }

    /// Address the device sees for byte `at` of this buffer.
    pub(crate) fn addr(&self, at: usize) -> u64 {
        debug_assert!(at <= self.len);
        self.pool.mem.as_ptr() as u64 + (self.offset + at) as u64
    }

    pub(crate) fn lkey(&self) -> u32 {
        self.pool.mem.keys().0
    }

    pub(crate) fn rkey(&self) -> u32 {
        self.pool.mem.keys().1
    }

    /// Shortens the buffer's visible length (the pages stay allocated until drop).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Splits the buffer in two at byte `at`, a multiple of [`PAGE_BYTES`] inside the buffer
    /// (`0 < at < len`): `self` keeps `[0, at)`, the returned buffer holds `[at, len)`. Each
    /// half is again a unique handle to its own pages and frees them on drop. `None` (and
    /// `self` unchanged) when `at` is not such a point.
    ///
    /// Lets a caller that must hand out one contiguous region (fio's I/O memory) allocate it
    /// once and still submit its pieces independently.
    pub fn split_off(&mut self, at: usize) -> Option<IoBuf> {
        if at == 0 || at >= self.len || at % PAGE_BYTES != 0 {
            return None;
        }
        let head_pages = at / PAGE_BYTES;
        let tail = IoBuf {
            pool: self.pool.clone(),
            offset: self.offset + at,
            len: self.len - at,
            pages: self.pages - head_pages,
        };
        self.len = at;
        self.pages = head_pages;
        Some(tail)
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for IoBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        let mut used = self.pool.used.lock().unwrap_or_else(|p| p.into_inner());
        let first = self.offset / PAGE_BYTES;
        for p in first..first + self.pages {
            debug_assert!(
                used[p / 64] & (1 << (p % 64)) != 0,
                "double free of page {p}"
            );
            used[p / 64] &= !(1 << (p % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmablk::fabric::{Device, ProviderKind};

    fn pool(bytes: usize) -> BufPool {
        let dev = Device::open(ProviderKind::Soft, None).unwrap();
        BufPool::new(Some(&dev.alloc_pd().unwrap()), bytes).unwrap()
    }

    #[test]
    fn allocates_page_aligned_disjoint_buffers_and_frees() {
        let p = pool(64 << 10);
        let mut a = p.alloc(5000).unwrap();
        let mut b = p.alloc(4096).unwrap();
        assert_eq!(a.addr(0) % PAGE_BYTES as u64, 0);
        assert_eq!(b.addr(0), a.addr(0) + 8192);
        a.as_mut_slice().fill(1);
        b.as_mut_slice().fill(2);
        assert!(a.as_slice().iter().all(|&x| x == 1));
        assert_eq!(a.lkey(), b.lkey());
        drop(a);
        let c = p.alloc(8192).unwrap();
        assert_eq!(c.addr(0), b.addr(0) - 8192, "freed run reused");
    }

    #[test]
    fn split_off_gives_disjoint_halves_that_free_their_own_pages() {
        let p = pool(64 << 10);
        let mut a = p.alloc(5 * PAGE_BYTES).unwrap();
        assert!(a.split_off(0).is_none());
        assert!(a.split_off(100).is_none());
        assert!(a.split_off(5 * PAGE_BYTES).is_none());
        let b = a.split_off(2 * PAGE_BYTES).unwrap();
        assert_eq!((a.len(), b.len()), (2 * PAGE_BYTES, 3 * PAGE_BYTES));
        assert_eq!(b.addr(0), a.addr(0) + 2 * PAGE_BYTES as u64);
        drop(a);
        // The head's two pages are free again; the tail's three are not.
        let c = p.alloc(2 * PAGE_BYTES).unwrap();
        assert_eq!(c.addr(0), b.addr(0) - 2 * PAGE_BYTES as u64);
        drop(b);
        drop(c);
        assert_eq!(p.alloc(16 * PAGE_BYTES).unwrap().len(), 16 * PAGE_BYTES);
    }

    #[test]
    fn exhaustion_is_an_error_not_a_panic() {
        let p = pool(16 << 10);
        let _a = p.alloc(12 << 10).unwrap();
        let e = p.alloc(8 << 10).unwrap_err();
        assert!(matches!(e, Error::PoolExhausted { .. }), "{e}");
        let _b = p.alloc(4 << 10).unwrap();
        assert_eq!(find_run(&[u64::MAX], 64, 1), None);
        assert_eq!(find_run(&[0b1011], 64, 2), Some(4));
    }
}
