//! A queue's [`Parcel`]: its slice of the arena (or, for NVMe/TCP and loop, ordinary memory)
//! laid out by [`ParcelLayout`], and the [`Region`]s (address and length) of its slots.

use std::sync::Arc;

use rdmablk::fabric::Sge;

use super::{Arena, Extent, ParcelLayout, CQE_BYTES, PAGE_BYTES};

/// One connection's slice of the arena. Frees its space when dropped or [`released`].
///
/// A parcel's memory may be the target of RDMA through memory windows bound on the
/// connection's QP. The space must not return to the arena (and reach another connection)
/// while that is possible, so keep the `Parcel` in the connection **after** its QP and memory
/// windows (struct fields drop in declaration order): the QP is destroyed, or the memory
/// windows are invalidated, before the space is freed. [`Parcel::release`] takes the parcel by
/// value, so the engine frees it exactly once, at the point it chooses.
///
/// [`released`]: Parcel::release
#[derive(Debug)]
pub struct Parcel {
    pub(super) memory: ParcelMemory,
    pub(super) extent: Extent,
    pub(super) layout: ParcelLayout,
}

/// What a parcel's bytes are.
#[derive(Debug)]
pub(super) enum ParcelMemory {
    /// An extent of the arena (a queue the device reaches: RDMA).
    Arena(Arc<Arena>),
    /// Ordinary memory, zeroed and only touched where used (a queue only the worker's own
    /// copies reach: NVMe/TCP, loop), so a connected but idle queue costs no pinned memory
    /// and little resident memory.
    Heap(std::ptr::NonNull<u8>),
}

// SAFETY: a parcel's memory is its own (an arena extent no other parcel has, or a heap block
// it allocated); it is reached only through raw pointers by the one thread that has the
// queue at a time (the listener that made it, then its worker).
unsafe impl Send for Parcel {}
// SAFETY: `&Parcel` gives out addresses only (regions); every access to the bytes is through
// raw pointers under the rules of whoever holds the queue, as for the arena itself.
unsafe impl Sync for Parcel {}

/// A byte range inside a parcel, as absolute virtual address and length (what SGEs, memory
/// window binds and io_uring name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub addr: u64,
    pub len: usize,
}

impl Region {
    pub fn as_ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }

    /// An SGE over the region with `lkey`.
    pub fn sge(&self, lkey: u32) -> Sge {
        Sge {
            addr: self.addr,
            length: u32::try_from(self.len).expect("region longer than an SGE can name"),
            lkey,
        }
    }
}

impl Parcel {
    /// A parcel laid out as `layout` in ordinary memory, not the arena: for a transport whose
    /// queues the device never reaches (NVMe/TCP, loop). Zeroed lazily by the kernel, so
    /// only the slots a queue uses become resident.
    ///
    /// An anonymous mapping of its own, not the allocator's: malloc would hand back memory it
    /// reused, which calloc zeroes by writing it (resident again), where a fresh mapping's
    /// pages stay unbacked until a slot is used.
    pub fn heap(layout: ParcelLayout) -> Parcel {
        let len = layout.total_bytes.max(PAGE_BYTES);
        // SAFETY: an anonymous private mapping at an address the kernel picks; no file, no
        // fixed address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        let ptr = (ptr != libc::MAP_FAILED)
            .then(|| std::ptr::NonNull::new(ptr.cast::<u8>()))
            .flatten()
            .unwrap_or_else(|| {
                let l = std::alloc::Layout::from_size_align(len, PAGE_BYTES).expect("layout");
                std::alloc::handle_alloc_error(l)
            });
        Parcel {
            memory: ParcelMemory::Heap(ptr),
            extent: Extent { offset: 0, len },
            layout,
        }
    }

    pub fn layout(&self) -> &ParcelLayout {
        &self.layout
    }

    /// Whether the parcel is an extent of the arena (else ordinary memory).
    pub fn in_arena(&self) -> bool {
        matches!(self.memory, ParcelMemory::Arena(_))
    }

    /// Offset of the parcel's first byte inside the arena (and its memory region).
    pub fn arena_offset(&self) -> usize {
        self.extent.offset
    }

    /// Bytes of the parcel.
    pub fn len(&self) -> usize {
        self.extent.len
    }

    pub fn is_empty(&self) -> bool {
        self.extent.len == 0
    }

    fn region(&self, offset: usize, len: usize) -> Region {
        debug_assert!(offset + len <= self.extent.len);
        let base = match &self.memory {
            ParcelMemory::Arena(a) => a.ptr as u64 + self.extent.offset as u64,
            ParcelMemory::Heap(p) => p.as_ptr() as u64,
        };
        Region {
            addr: base + offset as u64,
            len,
        }
    }

    /// The whole parcel.
    pub fn whole(&self) -> Region {
        self.region(0, self.extent.len)
    }

    /// Receive slot `i`: where command capsule `i` is received.
    pub fn recv_slot(&self, i: u32) -> Region {
        self.region(self.layout.recv_offset(i), self.layout.capsule_slot_bytes)
    }

    /// Response slot `i`: a 16-byte CQE.
    pub fn resp_slot(&self, i: u32) -> Region {
        self.region(self.layout.resp_slot_offset(i), CQE_BYTES)
    }

    /// Data slot `i`: up to `data_slot_bytes` of one request, page-aligned.
    pub fn data_slot(&self, i: u32) -> Region {
        self.region(self.layout.data_slot_offset(i), self.layout.data_slot_bytes)
    }

    /// The whole data area (for a memory window over all data slots).
    pub fn data_area(&self) -> Region {
        self.region(self.layout.data_offset, self.layout.data_bytes())
    }

    /// Returns the space to the arena. Call it only after the connection's QP is destroyed or
    /// every memory window bound over this parcel has been invalidated.
    pub fn release(self) {
        drop(self)
    }
}

impl Drop for Parcel {
    fn drop(&mut self) {
        let arena = match &self.memory {
            ParcelMemory::Arena(a) => a,
            ParcelMemory::Heap(p) => {
                // SAFETY: mapped in `Parcel::heap` with this length, unmapped once (here); no
                // pointer into it outlives the parcel (the queue's transport state goes first).
                unsafe { libc::munmap(p.as_ptr().cast(), self.extent.len) };
                return;
            }
        };
        arena.lock().free(self.extent);
        tracing::debug!(
            offset = self.extent.offset,
            len = self.extent.len,
            "arena window freed"
        );
    }
}
