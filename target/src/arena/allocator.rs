//! The carving logic of the arena without any memory behind it: [`ArenaAllocator`], a
//! first-fit free list of page-aligned [`Extent`]s with coalescing, and its [`ArenaStats`].

use super::layout::round_up;
use super::{ArenaError, PAGE_BYTES};

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
