//! The process heap as the allocator sees it: bytes the program holds, and bytes it has freed
//! that the allocator keeps for reuse.
//!
//! RSS alone cannot tell a leak from memory the allocator keeps: glibc gives each thread that
//! allocates an arena of its own (up to 8 per core) and caches the stacks of exited threads,
//! so a target whose connections come and go (the soft provider runs threads per queue) holds
//! some MiB more RSS after the first hours of churn than at start, and keeps it. A leak shows
//! in [`HeapStats::in_use`] instead, which comes back to its idle figure once every host has
//! gone (`tools/soak` checks that; `docs/reliability.md`).

/// What `mallinfo2` reports, summed over every arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeapStats {
    /// Bytes in allocated blocks (arena chunks and separately mapped ones).
    pub in_use: u64,
    /// Bytes in free blocks the allocator keeps.
    pub free: u64,
}

/// The heap now; `None` where the C library has no `mallinfo2` (non-glibc builds).
pub fn stats() -> Option<HeapStats> {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallinfo2 takes no arguments and returns a struct by value; it locks each
        // arena in turn and is safe to call from any thread.
        let m = unsafe { libc::mallinfo2() };
        Some(HeapStats {
            in_use: (m.uordblks + m.hblkhd) as u64,
            free: m.fordblks as u64,
        })
    }
    #[cfg(not(target_env = "gnu"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_env = "gnu")]
    fn an_allocation_held_shows_in_use_and_goes_when_freed() {
        // 512 MiB of zeroes: calloc maps it and touches nothing. Other tests run alongside
        // and allocate too, hence the wide margins.
        const BIG: u64 = 512 << 20;
        let before = stats().unwrap().in_use;
        let held = vec![0u8; BIG as usize];
        let during = stats().unwrap().in_use;
        assert!(during >= before + BIG - (128 << 20), "{before} -> {during}");
        drop(held);
        let after = stats().unwrap().in_use;
        assert!(after + BIG - (128 << 20) <= during, "{during} -> {after}");
    }
}
