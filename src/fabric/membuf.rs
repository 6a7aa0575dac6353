//! Owned, page-aligned memory for registration: what the fabric API registers by ownership.
//!
//! A [`MemBuf`] is an anonymous mapping that lives until it is dropped. Registering it hands it
//! to the memory region ([`super::Pd::register`]), which deregisters before unmapping, so no work
//! request can ever reach memory that is gone.

use std::ptr::NonNull;

use super::error::{FabricError, Result};

/// How to map a [`MemBuf`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemBufOptions {
    /// Back the buffer with 2 MiB huge pages (MAP_HUGETLB); the length is rounded up to 2 MiB.
    pub hugepages: bool,
    /// Touch every page at map time (MAP_POPULATE) so the hot path never faults.
    pub populate: bool,
    /// `mlock` the buffer; fails with [`FabricError::Memlock`] naming the limit.
    pub lock: bool,
}

/// Page-aligned, zero-filled anonymous memory owned by this value.
#[derive(Debug)]
pub struct MemBuf {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
    locked: bool,
}

// SAFETY: MemBuf owns its mapping exclusively; the raw pointer is just its address.
unsafe impl Send for MemBuf {}
// SAFETY: shared access only hands out raw pointers or copies under the caller's discipline.
unsafe impl Sync for MemBuf {}

const HUGE_PAGE: usize = 2 << 20;

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// The RLIMIT_MEMLOCK soft limit in bytes (u64::MAX for unlimited).
pub fn memlock_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return 0;
    }
    if r.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        r.rlim_cur
    }
}

impl MemBuf {
    /// Maps `len` bytes (rounded up to the page, or huge page, size).
    pub fn new(len: usize, opts: MemBufOptions) -> Result<MemBuf> {
        if len == 0 {
            return Err(FabricError::InvalidArgument {
                what: "MemBuf of 0 bytes".into(),
            });
        }
        let align = if opts.hugepages {
            HUGE_PAGE
        } else {
            page_size()
        };
        let map_len =
            len.checked_next_multiple_of(align)
                .ok_or_else(|| FabricError::InvalidArgument {
                    what: format!("MemBuf of {len} bytes is too large"),
                })?;
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        if opts.hugepages {
            flags |= libc::MAP_HUGETLB;
        }
        if opts.populate {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: anonymous mapping with no address hint; the result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            let op = if opts.hugepages {
                "mmap with huge pages (reserve them: echo N > /proc/sys/vm/nr_hugepages)"
            } else {
                "mmap"
            };
            return Err(FabricError::os(op, e));
        }
        let ptr = NonNull::new(p.cast::<u8>()).expect("mmap returned NULL without MAP_FAILED");
        let mut buf = MemBuf {
            ptr,
            len,
            map_len,
            locked: false,
        };
        if opts.lock {
            // SAFETY: the range is our own live mapping.
            if unsafe { libc::mlock(p, map_len) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(match e.raw_os_error() {
                    Some(libc::ENOMEM) | Some(libc::EPERM) => FabricError::Memlock {
                        len: map_len,
                        limit: memlock_limit(),
                    },
                    _ => FabricError::os("mlock", e),
                });
            }
            buf.locked = true;
        }
        Ok(buf)
    }

    /// A zero-filled buffer of `len` bytes with default options.
    pub fn zeroed(len: usize) -> Result<MemBuf> {
        MemBuf::new(len, MemBufOptions::default())
    }

    /// Requested length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The whole buffer as a slice. Exclusive access proves no one else is writing it, but
    /// note that a buffer that has been registered is owned by its memory region instead.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr..ptr+len is our live mapping and `&mut self` makes this access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The whole buffer as a shared slice.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr..ptr+len is our live mapping; an unregistered MemBuf is only written
        // through `&mut self`, so a shared borrow sees no concurrent writer.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for MemBuf {
    fn drop(&mut self) {
        // SAFETY: we own exactly this mapping; no registration refers to it any more (memory
        // regions own their MemBuf and deregister before dropping it).
        unsafe {
            if self.locked {
                libc::munlock(self.ptr.as_ptr().cast(), self.map_len);
            }
            if libc::munmap(self.ptr.as_ptr().cast(), self.map_len) != 0 {
                tracing::error!(len = self.map_len, "munmap of a MemBuf failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_zeroed_and_page_aligned() {
        let mut b = MemBuf::zeroed(10_000).unwrap();
        assert_eq!(b.len(), 10_000);
        assert_eq!(b.as_ptr() as usize % page_size(), 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[9_999] = 7;
        assert_eq!(b.as_slice()[9_999], 7);
    }

    #[test]
    fn zero_length_is_refused() {
        assert!(matches!(
            MemBuf::zeroed(0),
            Err(FabricError::InvalidArgument { .. })
        ));
    }
}
