//! The buffer arena: one pinned mapping, registered once, holding the workers' data pools and
//! the RDMA queues' parcels.
//!
//! At start the target maps `arena.bytes` ([`MemBuf`]: populated, optionally locked and on huge
//! pages) and registers it once as a memory region with `LOCAL_WRITE | MW_BIND` only: no remote
//! key of the arena itself ever leaves the target. The same memory is registered with each
//! worker's io_uring as fixed buffers ([`Arena::fixed_region`]), so block I/O goes straight
//! between the disk and the buffers RDMA reads from and writes to.
//!
//! Each worker takes one extent for its data pool ([`pool`], `arena.data_bytes` split evenly):
//! every command's data lives there from its capsule to its response, so the memory data takes
//! follows the data in flight, not the number of queues. Each RDMA queue gets a [`Parcel`]: a
//! contiguous, page-aligned slice for what the device must reach per queue, sized for its
//! negotiated queue depth ([`ParcelLayout`]); an NVMe/TCP or loop queue's parcel is ordinary
//! memory ([`Parcel::heap`]), no part of the arena:
//!
//! ```text
//! parcel offset 0                                                    total_bytes
//! | recv slots: depth x capsule slot | resp slots: depth x 16 | pad | push data slots |
//!   capsule slot = round_up(64 + in_capsule_data_size, 64)     an RDMA push queue only:
//!                                                              depth x push slot, 4 KiB-aligned
//!                                                              (`Limits::push_slot_bytes`)
//! ```
//!
//! On RDMA, a push-write queue's host gets a key over its parcel's data slots only (a type-2
//! memory window bound over a region registered for that area, or such a region itself:
//! `nvmf/transport/rdma/queue.rs`); everything else of the parcel is only ever used with the
//! arena region's lkey.
//!
//! The carving itself is [`ArenaAllocator`], a plain first-fit free list over 4 KiB pages with
//! coalescing, testable without a device. Its free list is preallocated for the most parcels
//! the arena can hold, so carving never allocates.

use std::sync::{Arc, Mutex};

use rdmablk::fabric::{Access, FabricError, MemBuf, MemBufOptions, Mr, Pd, Sge};

use crate::config::{ArenaConfig, ByteSize};

pub mod pool;

/// Bytes of an NVMe submission queue entry (the command part of a capsule).
pub const SQE_BYTES: usize = 64;
/// Bytes of an NVMe completion queue entry (a response capsule).
pub const CQE_BYTES: usize = 16;
/// Alignment of a receive (command capsule) slot.
pub const CAPSULE_SLOT_ALIGN: usize = 64;
/// Alignment and allocation granularity of parcels and of data slots (O_DIRECT needs at
/// least the logical block size; 4 KiB covers 512 B and 4 KiB devices).
pub const PAGE_BYTES: usize = 4096;

/// Where everything lies inside a connection's parcel, all offsets relative to its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParcelLayout {
    /// Requests (receive slots, response slots, data slots) the parcel holds.
    pub queue_depth: u32,
    /// One receive buffer: a command capsule (64-byte SQE + in-capsule data), 64 B-rounded.
    pub capsule_slot_bytes: usize,
    /// In-capsule data bytes a capsule may carry (`limits.in_capsule_data_size`).
    pub in_capsule_data_bytes: usize,
    /// Offset of the response slots (16-byte CQEs sent with the arena's lkey).
    pub resp_offset: usize,
    /// Offset of the data area (page-aligned).
    pub data_offset: usize,
    /// One data slot, page-rounded (a push queue's: `Limits::push_slot_bytes`; 0: the parcel
    /// has no data slots).
    pub data_slot_bytes: usize,
    /// Data slots: `queue_depth` for an RDMA push queue (its host places data by command
    /// ID), 0 for every other queue (its commands take buffers from the worker's data pool,
    /// [`pool`]).
    pub data_slots: u32,
    /// Whole parcel, a multiple of [`PAGE_BYTES`].
    pub total_bytes: usize,
}

impl ParcelLayout {
    /// The layout of a queue of `queue_depth` requests with no data slots: receive and
    /// response slots only.
    pub const fn without_data(queue_depth: u32, in_capsule_data_size: u32) -> Self {
        let mut l = ParcelLayout::new(queue_depth, in_capsule_data_size, 0);
        l.data_slots = 0;
        l.total_bytes = l.data_offset;
        l
    }

    /// The layout of an RDMA queue that receives through its worker's shared receive queue:
    /// response slots only (one page at depth 128 and below), no receive slots.
    pub const fn responses_only(queue_depth: u32, in_capsule_data_size: u32) -> Self {
        let mut l = ParcelLayout::without_data(queue_depth, in_capsule_data_size);
        l.capsule_slot_bytes = 0;
        l.resp_offset = 0;
        l.data_offset = round_up(queue_depth as usize * CQE_BYTES, PAGE_BYTES);
        l.total_bytes = l.data_offset;
        l
    }

    /// The layout for `queue_depth` requests with the given limits and a data slot of
    /// `data_slot_bytes` (rounded up to a page) per request (an RDMA push queue's).
    pub const fn new(queue_depth: u32, in_capsule_data_size: u32, data_slot_bytes: u32) -> Self {
        let depth = queue_depth as usize;
        let capsule_slot_bytes = round_up(
            SQE_BYTES + in_capsule_data_size as usize,
            CAPSULE_SLOT_ALIGN,
        );
        let resp_offset = depth * capsule_slot_bytes;
        let data_offset = round_up(resp_offset + depth * CQE_BYTES, PAGE_BYTES);
        let data_slot_bytes = round_up(data_slot_bytes as usize, PAGE_BYTES);
        let total_bytes = round_up(data_offset + depth * data_slot_bytes, PAGE_BYTES);
        ParcelLayout {
            queue_depth,
            capsule_slot_bytes,
            in_capsule_data_bytes: in_capsule_data_size as usize,
            resp_offset,
            data_offset,
            data_slot_bytes,
            data_slots: queue_depth,
            total_bytes,
        }
    }

    /// Offset of receive slot `i`.
    pub fn recv_offset(&self, i: u32) -> usize {
        assert!(
            self.capsule_slot_bytes > 0,
            "receive slot {i} of a parcel without receive slots"
        );
        assert!(
            i < self.queue_depth,
            "receive slot {i} of {}",
            self.queue_depth
        );
        i as usize * self.capsule_slot_bytes
    }

    /// Offset of response slot `i`.
    pub fn resp_slot_offset(&self, i: u32) -> usize {
        assert!(
            i < self.queue_depth,
            "response slot {i} of {}",
            self.queue_depth
        );
        self.resp_offset + i as usize * CQE_BYTES
    }

    /// Offset of data slot `i`.
    pub fn data_slot_offset(&self, i: u32) -> usize {
        assert!(i < self.data_slots, "data slot {i} of {}", self.data_slots);
        self.data_offset + i as usize * self.data_slot_bytes
    }

    /// Bytes of the data area (all data slots).
    pub fn data_bytes(&self) -> usize {
        self.data_slots as usize * self.data_slot_bytes
    }
}

const fn round_up(n: usize, align: usize) -> usize {
    n.div_ceil(align) * align
}

/// An error of the arena.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// Mapping or locking the arena failed at start.
    #[error("cannot map the buffer arena of {bytes} (arena.bytes{}): {source}",
        if *.hugepages { ", arena.hugepages = true" } else { "" })]
    Map {
        bytes: ByteSize,
        hugepages: bool,
        #[source]
        source: FabricError,
    },
    /// Registering the arena as a memory region failed at start.
    #[error("cannot register the buffer arena of {bytes} with the RDMA device: {source}")]
    Register {
        bytes: ByteSize,
        #[source]
        source: FabricError,
    },
    /// No free range is large enough for the parcel (the engine rejects the connection with
    /// NO_RESOURCES).
    #[error(
        "arena full: a window of {wanted} bytes was asked for, {free} bytes are free \
             (largest free range {largest_free} bytes); raise arena.bytes or lower \
             limits.max_queue_depth"
    )]
    Full {
        wanted: usize,
        free: usize,
        largest_free: usize,
    },
    /// A parcel of zero bytes, or larger than the arena.
    #[error("invalid window of {wanted} bytes for an arena of {arena} bytes")]
    BadSize { wanted: usize, arena: usize },
}

/// A contiguous byte range of the arena, page-aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub offset: usize,
    pub len: usize,
}

/// Accounting of an arena, for logs and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ArenaStats {
    pub total_bytes: usize,
    pub bytes_in_use: usize,
    pub parcels: usize,
    /// Most bytes ever in use at once.
    pub high_water_bytes: usize,
    /// Largest parcel that could be carved right now.
    pub largest_free_bytes: usize,
    /// Carvings refused for lack of space.
    pub refused: u64,
    /// Bytes the workers' data pools hold (counted in neither `bytes_in_use` nor `parcels`).
    pub pool_bytes: usize,
}

/// First-fit allocator of page-aligned extents with coalescing: the carving logic of the
/// arena, without any memory behind it.
///
/// Deterministic (the same sequence of calls gives the same offsets). Cost per carve or free
/// is linear in the number of free extents, which is at most one more than the live parcels;
/// the free list never reallocates.
#[derive(Debug)]
pub struct ArenaAllocator {
    total: usize,
    /// Free extents, sorted by offset, never adjacent (coalesced).
    free: Vec<Extent>,
    stats: ArenaStats,
}

impl ArenaAllocator {
    /// An allocator over `total_bytes` (rounded down to whole pages).
    pub fn new(total_bytes: usize) -> Self {
        let total = total_bytes / PAGE_BYTES * PAGE_BYTES;
        // Free extents are separated by live parcels, so there are at most parcels + 1 of
        // them; reserve for a generous count so carving at connect time rarely reallocates.
        let mut free = Vec::with_capacity((total / PAGE_BYTES / 2 + 1).min(4096));
        if total > 0 {
            free.push(Extent {
                offset: 0,
                len: total,
            });
        }
        ArenaAllocator {
            total,
            free,
            stats: ArenaStats {
                total_bytes: total,
                largest_free_bytes: total,
                ..ArenaStats::default()
            },
        }
    }

    /// Carves `len` bytes (rounded up to whole pages) from the lowest free range that fits.
    pub fn alloc(&mut self, len: usize) -> Result<Extent, ArenaError> {
        if len == 0 || len > self.total {
            return Err(ArenaError::BadSize {
                wanted: len,
                arena: self.total,
            });
        }
        let len = round_up(len, PAGE_BYTES);
        let Some(i) = self.free.iter().position(|e| e.len >= len) else {
            self.stats.refused += 1;
            return Err(ArenaError::Full {
                wanted: len,
                free: self.total - self.stats.bytes_in_use - self.stats.pool_bytes,
                largest_free: self.largest_free(),
            });
        };
        let e = &mut self.free[i];
        let out = Extent {
            offset: e.offset,
            len,
        };
        if e.len == len {
            self.free.remove(i);
        } else {
            e.offset += len;
            e.len -= len;
        }
        self.stats.bytes_in_use += len;
        self.stats.parcels += 1;
        self.stats.high_water_bytes = self.stats.high_water_bytes.max(self.stats.bytes_in_use);
        self.stats.largest_free_bytes = self.largest_free();
        Ok(out)
    }

    /// Returns an extent from [`ArenaAllocator::alloc`]. Panics on a double free or an extent
    /// this allocator did not hand out (a bug that would corrupt other connections' buffers).
    pub fn free(&mut self, x: Extent) {
        assert!(
            x.len > 0 && x.offset % PAGE_BYTES == 0 && x.offset + x.len <= self.total,
            "freeing {x:?}, which is not an extent of this arena"
        );
        let i = self.free.partition_point(|e| e.offset < x.offset);
        if let Some(prev) = i.checked_sub(1).map(|p| self.free[p]) {
            assert!(prev.offset + prev.len <= x.offset, "double free of {x:?}");
        }
        if let Some(next) = self.free.get(i) {
            assert!(x.offset + x.len <= next.offset, "double free of {x:?}");
        }
        let merge_prev = i > 0 && {
            let p = self.free[i - 1];
            p.offset + p.len == x.offset
        };
        let merge_next = self
            .free
            .get(i)
            .is_some_and(|n| x.offset + x.len == n.offset);
        match (merge_prev, merge_next) {
            (true, true) => {
                let next = self.free.remove(i);
                self.free[i - 1].len += x.len + next.len;
            }
            (true, false) => self.free[i - 1].len += x.len,
            (false, true) => {
                self.free[i].offset = x.offset;
                self.free[i].len += x.len;
            }
            (false, false) => {
                self.free.insert(i, x);
            }
        }
        self.stats.bytes_in_use -= x.len;
        self.stats.parcels -= 1;
        self.stats.largest_free_bytes = self.largest_free();
    }

    /// Carves `len` bytes for a data pool: counted as pool bytes, not as a parcel.
    pub fn alloc_pool(&mut self, len: usize) -> Result<Extent, ArenaError> {
        let high_water = self.stats.high_water_bytes;
        let x = self.alloc(len)?;
        self.stats.high_water_bytes = high_water;
        self.stats.parcels -= 1;
        self.stats.bytes_in_use -= x.len;
        self.stats.pool_bytes += x.len;
        Ok(x)
    }

    /// Returns a pool's extent from [`ArenaAllocator::alloc_pool`].
    pub fn free_pool(&mut self, x: Extent) {
        self.stats.parcels += 1;
        self.stats.bytes_in_use += x.len;
        self.stats.pool_bytes -= x.len;
        self.free(x);
    }

    fn largest_free(&self) -> usize {
        self.free.iter().map(|e| e.len).max().unwrap_or(0)
    }

    pub fn stats(&self) -> ArenaStats {
        self.stats
    }

    /// Free extents, lowest first (for tests and debugging).
    pub fn free_extents(&self) -> &[Extent] {
        &self.free
    }
}

enum Memory {
    /// Mapped but not registered: for io_uring-only use and for tests without a device.
    Plain(#[allow(dead_code)] MemBuf),
    /// Registered: the memory region owns the mapping and deregisters it before unmapping.
    Registered(Mr),
}

/// The pinned buffer arena. Share it as `Arc<Arena>`; parcels keep it alive.
pub struct Arena {
    memory: Memory,
    ptr: *mut u8,
    len: usize,
    allocator: Mutex<ArenaAllocator>,
}

// SAFETY: the raw pointer is the address of a mapping the Arena owns (through its MemBuf or
// Mr) for its whole life; the allocator state is behind a Mutex; the bytes themselves are only
// reached through parcels, which hand out raw pointers under their own documented rules.
unsafe impl Send for Arena {}
// SAFETY: as above; every `&self` method either reads immutable fields or locks the Mutex.
unsafe impl Sync for Arena {}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("addr", &self.ptr)
            .field("len", &self.len)
            .field("registered", &self.mr().is_some())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Arena {
    /// Maps the arena as configured: populated, locked unless `arena.lock = false`, on huge
    /// pages if asked. Not yet registered (see [`Arena::register`]).
    pub fn map(cfg: &ArenaConfig) -> Result<Arena, ArenaError> {
        let bytes = cfg.bytes.bytes() as usize;
        let opts = MemBufOptions {
            hugepages: cfg.hugepages,
            populate: true,
            lock: cfg.lock,
        };
        let buf = MemBuf::new(bytes, opts).map_err(|source| ArenaError::Map {
            bytes: cfg.bytes,
            hugepages: cfg.hugepages,
            source,
        })?;
        Ok(Arena::from_memory(Memory::Plain(buf), bytes))
    }

    /// An unpinned, unregistered arena of `bytes` (tests, tools).
    pub fn unpinned(bytes: usize) -> Result<Arena, ArenaError> {
        Arena::map(&ArenaConfig {
            bytes: ByteSize(bytes as u64),
            lock: false,
            ..ArenaConfig::default()
        })
    }

    fn from_memory(memory: Memory, len: usize) -> Arena {
        let ptr = match &memory {
            Memory::Plain(b) => b.as_ptr(),
            Memory::Registered(m) => m.as_ptr(),
        };
        Arena {
            memory,
            ptr,
            len,
            allocator: Mutex::new(ArenaAllocator::new(len)),
        }
    }

    /// Registers the arena with `pd` as one memory region with `LOCAL_WRITE | MW_BIND` (never
    /// remote access: peers reach the arena only through memory windows the engine binds).
    /// Consumes the arena, so no parcel can exist yet. Registering twice is a bug (panics).
    pub fn register(self, pd: &Pd) -> Result<Arena, ArenaError> {
        let Arena { memory, len, .. } = self;
        let Memory::Plain(buf) = memory else {
            panic!("the arena is already registered");
        };
        let mr = pd
            .register(buf, Access::LOCAL_WRITE | Access::MW_BIND)
            .map_err(|source| ArenaError::Register {
                bytes: ByteSize(len as u64),
                source,
            })?;
        assert!(
            !mr.access().contains(Access::REMOTE_READ)
                && !mr.access().contains(Access::REMOTE_WRITE),
            "the arena must not be remotely accessible"
        );
        Ok(Arena::from_memory(Memory::Registered(mr), len))
    }

    /// The memory region, once registered.
    pub fn mr(&self) -> Option<&Mr> {
        match &self.memory {
            Memory::Registered(m) => Some(m),
            Memory::Plain(_) => None,
        }
    }

    /// The region's local key, once registered.
    pub fn lkey(&self) -> Option<u32> {
        self.mr().map(Mr::lkey)
    }

    /// Start address (for io_uring fixed-buffer registration and SGEs).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole arena as `(address, length)` for `io_uring_register_buffers`.
    pub fn fixed_region(&self) -> (*mut u8, usize) {
        (self.ptr, self.len)
    }

    /// Whether `[ptr, ptr + len)` lies inside the arena.
    pub fn contains(&self, ptr: *const u8, len: usize) -> bool {
        let start = self.ptr as usize;
        let p = ptr as usize;
        p >= start
            && p.checked_add(len)
                .is_some_and(|end| end <= start + self.len)
    }

    /// Carves a parcel laid out as `layout` for one connection. On
    /// [`ArenaError::Full`], reject the connection with NO_RESOURCES.
    pub fn carve(self: &Arc<Self>, layout: ParcelLayout) -> Result<Parcel, ArenaError> {
        let extent = self.lock().alloc(layout.total_bytes)?;
        tracing::debug!(
            offset = extent.offset,
            len = extent.len,
            depth = layout.queue_depth,
            "arena window carved"
        );
        Ok(Parcel {
            memory: ParcelMemory::Arena(Arc::clone(self)),
            extent,
            layout,
        })
    }

    /// Current accounting.
    pub fn stats(&self) -> ArenaStats {
        self.lock().stats()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ArenaAllocator> {
        // A panic while holding the lock is an allocator assertion: the state is suspect, but
        // refusing every later connection would be worse than continuing with it.
        self.allocator.lock().unwrap_or_else(|p| p.into_inner())
    }
}

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
    memory: ParcelMemory,
    extent: Extent,
    layout: ParcelLayout,
}

/// What a parcel's bytes are.
#[derive(Debug)]
enum ParcelMemory {
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

#[cfg(test)]
mod tests;
