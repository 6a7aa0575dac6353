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

use rdmablk::fabric::{Access, FabricError, MemBuf, MemBufOptions, Mr, Pd};

use crate::config::{ArenaConfig, ByteSize};

mod allocator;
mod layout;
mod parcel;
pub mod pool;

pub use allocator::{ArenaAllocator, ArenaStats, Extent};
pub use layout::{ParcelLayout, CAPSULE_SLOT_ALIGN, CQE_BYTES, PAGE_BYTES, SQE_BYTES};
pub use parcel::{Parcel, Region};

use parcel::ParcelMemory;

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

#[cfg(test)]
mod tests;
