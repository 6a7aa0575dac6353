//! The data pool: each worker's data buffers, taken by a command when its capsule arrives and
//! given back when its response has left, so the arena's memory follows the data in flight,
//! not the number of queues.
//!
//! At start each worker takes one extent of the arena (`arena.data_bytes` split evenly,
//! [`DataPool::new`]); a command that moves data takes a buffer of its length from it (4 KiB
//! pages, a power of two of them: a buddy allocator, so a 4 KiB read takes 4 KiB and a 128 KiB
//! write 128 KiB, contiguous for io_uring's fixed buffers and one SGE). A command that finds
//! no room waits: its capsule stays where it arrived (an RDMA receive not reposted, an NVMe/TCP
//! receive slot) and the command is queued, per host, first come first served; freed pages go
//! to the waiting hosts in turn ([`DataPool::next_ready`]). Other queues' completions never
//! wait on it: only a new command's start does.
//!
//! A host's share: the last eighth of the pool goes only to hosts under their even share (the
//! pool divided by the hosts holding or waiting for pages, at least two), so a host with many
//! deep queues of large writes, or one that holds buffers and never sends their data, leaves
//! room for a light host's commands and for a host that has just arrived.
//!
//! The pool is the worker's own (no lock): the worker's poll groups reach it through
//! [`crate::nvmf::request_flow::Ctx`].

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::{Arc, OnceLock};

use super::{Arena, ArenaError, Extent, Region, PAGE_BYTES};

/// Largest buffer order (pages = 2^order): 8 MiB, the largest `limits.max_io_size`.
pub const MAX_ORDER: u8 = 11;
const NIL: u32 = u32::MAX;
const NOT_FREE: u8 = u8::MAX;

/// A command's data buffer: where its data lies (an absolute address in the arena) and how
/// long it may be. From the pool, or (an RDMA push queue) a slot of the queue's own push area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataBuf {
    pub addr: u64,
    pub len: u32,
    /// First page in the pool, or [`NIL`] (not the pool's).
    page: u32,
    order: u8,
    /// The host whose share it counts in.
    host: u64,
}

impl DataBuf {
    /// No buffer (a command without data).
    pub const NONE: DataBuf = DataBuf {
        addr: 0,
        len: 0,
        page: NIL,
        order: 0,
        host: 0,
    };

    /// A buffer that is not the pool's (an RDMA push slot).
    pub fn outside(r: Region) -> DataBuf {
        DataBuf {
            addr: r.addr,
            len: u32::try_from(r.len).expect("a data slot is at most 8 MiB"),
            page: NIL,
            order: 0,
            host: 0,
        }
    }

    /// Whether the buffer came from a pool (and must go back to it).
    pub fn is_pooled(&self) -> bool {
        self.page != NIL
    }

    pub fn region(&self) -> Region {
        Region {
            addr: self.addr,
            len: self.len as usize,
        }
    }
}

/// Pages of the buffer a command of `bytes` takes, as an order (`None`: 0 bytes, or more
/// than [`MAX_ORDER`] allows).
pub fn order_for(bytes: u32) -> Option<u8> {
    if bytes == 0 {
        return None;
    }
    let pages = (bytes as usize).div_ceil(PAGE_BYTES).next_power_of_two();
    let order = pages.trailing_zeros() as u8;
    (order <= MAX_ORDER).then_some(order)
}

/// The key a host's share is kept under: its host NQN once its queue is connected, its
/// network address before. A keyed hash whose keys are drawn once a process, so a peer cannot
/// choose names whose keys collide in [`DataPool`]'s map, which then uses them as they are
/// ([`HostKeyHasher`]: no second hash per command).
pub fn host_key(id: &[u8]) -> u64 {
    static KEYS: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    KEYS.get_or_init(Default::default).hash_one(id)
}

/// The hasher of maps keyed by [`host_key`]: the key is already a keyed hash, taken as it is.
#[derive(Default)]
struct HostKeyHasher(u64);

impl Hasher for HostKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; anything else is folded in, never lost.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

type HostMap<V> = HashMap<u64, V, BuildHasherDefault<HostKeyHasher>>;

/// A command waiting for a buffer: which poll group, queue and request it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub group: u8,
    pub queue: u32,
    pub slot: u32,
    pub order: u8,
}

#[derive(Debug, Default)]
struct HostShare {
    held_pages: u32,
    waiters: VecDeque<Waiter>,
}

/// What the pool counts (metrics, `rdmablk-ctl status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub total_pages: u32,
    pub pages_in_use: u32,
    /// Commands waiting for a buffer now.
    pub waiting: u32,
    /// Commands that ever had to wait.
    pub waited: u64,
    /// Hosts holding or waiting for pages now.
    pub hosts: u32,
}

/// One host's part of a pool now: what it holds and how many of its commands wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostPoolStats {
    /// [`host_key`] of the host.
    pub host: u64,
    /// Pages its commands hold now.
    pub pages_in_use: u32,
    /// Its commands waiting for pages now.
    pub waiting: u32,
}

/// A worker's data pool (see the module documentation).
pub struct DataPool {
    /// The pool's extent of the arena, given back when the pool is dropped.
    _extent: ArenaExtent,
    base: u64,
    buddy: Buddy,
    hosts: HostMap<HostShare>,
    /// Hosts with waiters, in the order they are served.
    turn: VecDeque<u64>,
    waiting: u32,
    waited: u64,
    /// Pages were freed since the waiters were last looked at.
    freed: bool,
}

impl std::fmt::Debug for DataPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataPool")
            .field("base", &self.base)
            .field("stats", &self.stats())
            .finish()
    }
}

impl DataPool {
    /// A pool of `bytes` (whole pages) carved from `arena`.
    pub fn new(arena: &Arc<Arena>, bytes: usize) -> Result<DataPool, ArenaError> {
        let extent = ArenaExtent::carve(arena, bytes)?;
        let pages = u32::try_from(extent.extent.len / PAGE_BYTES).unwrap_or(u32::MAX);
        Ok(DataPool {
            base: arena.as_ptr() as u64 + extent.extent.offset as u64,
            _extent: extent,
            buddy: Buddy::new(pages),
            hosts: HostMap::default(),
            turn: VecDeque::new(),
            waiting: 0,
            waited: 0,
            freed: false,
        })
    }

    /// A buffer of `1 << order` pages for `host`, or the waiter queued (None) until
    /// [`DataPool::next_ready`] hands it one.
    pub fn take(&mut self, host: u64, w: Waiter) -> Option<DataBuf> {
        let total = self.buddy.pages;
        let known = self.hosts.len() as u32;
        let free = total - self.buddy.used;
        let entry = self.hosts.entry(host);
        let active = known + u32::from(matches!(entry, Entry::Vacant(_)));
        let share = entry.or_default();
        if share.waiters.is_empty() && may_take(share, w.order, total, free, active) {
            if let Some(page) = self.buddy.alloc(w.order) {
                share.held_pages += 1 << w.order;
                return Some(self.buf(page, w.order, host));
            }
        }
        if share.waiters.is_empty() {
            self.turn.push_back(host);
        }
        share.waiters.push_back(w);
        self.waiting += 1;
        self.waited += 1;
        None
    }

    /// Gives `b` back (nothing for a buffer that is not the pool's).
    pub fn give(&mut self, b: DataBuf) {
        if !b.is_pooled() {
            return;
        }
        let host = b.host;
        self.buddy.free(b.page, b.order);
        self.freed = true;
        if let Some(share) = self.hosts.get_mut(&host) {
            share.held_pages = share.held_pages.saturating_sub(1 << b.order);
            if share.held_pages == 0 && share.waiters.is_empty() {
                self.hosts.remove(&host);
            }
        }
    }

    /// Whether waiters might be served now (pages were freed since the last look).
    pub fn has_ready(&self) -> bool {
        self.freed && self.waiting > 0
    }

    /// The next waiting command that can have its buffer now, hosts in turn, with the buffer
    /// taken for it; None once no waiter fits.
    pub fn next_ready(&mut self) -> Option<(Waiter, DataBuf)> {
        if self.waiting == 0 {
            self.freed = false;
            return None;
        }
        let total = self.buddy.pages;
        let active = self.hosts.len() as u32;
        for _ in 0..self.turn.len() {
            let host = self.turn.pop_front()?;
            let free = total - self.buddy.used;
            let Some(share) = self.hosts.get_mut(&host) else {
                continue;
            };
            let Some(&w) = share.waiters.front() else {
                continue;
            };
            if may_take(share, w.order, total, free, active) {
                if let Some(page) = self.buddy.alloc(w.order) {
                    share.waiters.pop_front();
                    share.held_pages += 1 << w.order;
                    if !share.waiters.is_empty() {
                        self.turn.push_back(host);
                    }
                    self.waiting -= 1;
                    return Some((w, self.buf(page, w.order, host)));
                }
            }
            self.turn.push_back(host);
        }
        self.freed = false;
        None
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            total_pages: self.buddy.pages,
            pages_in_use: self.buddy.used,
            waiting: self.waiting,
            waited: self.waited,
            hosts: self.hosts.len() as u32,
        }
    }

    /// Every host that holds or waits for pages now, into `out` (cleared first; its capacity
    /// is kept, so a caller that keeps `out` allocates only when more hosts come).
    pub fn host_stats(&self, out: &mut Vec<HostPoolStats>) {
        out.clear();
        out.extend(self.hosts.iter().map(|(&host, s)| HostPoolStats {
            host,
            pages_in_use: s.held_pages,
            waiting: s.waiters.len() as u32,
        }));
    }

    fn buf(&self, page: u32, order: u8, host: u64) -> DataBuf {
        DataBuf {
            addr: self.base + u64::from(page) * PAGE_BYTES as u64,
            len: (PAGE_BYTES << order) as u32,
            page,
            order,
            host,
        }
    }
}

/// Whether a host may take `1 << order` more pages now: while an eighth of the pool stays
/// free after it, or while it holds no more than its even share among the `active` hosts
/// (counted as at least two: a host alone keeps the last eighth for whoever comes next).
fn may_take(share: &HostShare, order: u8, total: u32, free: u32, active: u32) -> bool {
    let want = 1u32 << order;
    if want > free {
        return false;
    }
    free - want >= total / 8 || share.held_pages + want <= total / active.max(2)
}

/// An extent of the arena held outside any queue (a worker's data pool, a worker's shared
/// receive buffers). Counted as pool bytes, not as a parcel.
pub struct ArenaExtent {
    arena: Arc<Arena>,
    extent: Extent,
}

impl ArenaExtent {
    pub fn carve(arena: &Arc<Arena>, bytes: usize) -> Result<ArenaExtent, ArenaError> {
        let extent = arena.lock().alloc_pool(bytes)?;
        Ok(ArenaExtent {
            arena: Arc::clone(arena),
            extent,
        })
    }

    /// Address of the extent's first byte (inside the arena's memory region).
    pub fn addr(&self) -> u64 {
        self.arena.as_ptr() as u64 + self.extent.offset as u64
    }

    /// Bytes of the extent (whole pages, at least what was asked for).
    pub fn len(&self) -> usize {
        self.extent.len
    }

    pub fn is_empty(&self) -> bool {
        self.extent.len == 0
    }
}

impl Drop for ArenaExtent {
    fn drop(&mut self) {
        self.arena.lock().free_pool(self.extent);
    }
}

/// A buddy allocator over `pages` pages: blocks of `2^order` pages, aligned to their size.
/// Free blocks are kept in one doubly linked list per order, threaded through per-page
/// arrays, so taking and freeing never allocate.
#[derive(Debug)]
struct Buddy {
    pages: u32,
    used: u32,
    heads: [u32; MAX_ORDER as usize + 1],
    next: Vec<u32>,
    prev: Vec<u32>,
    /// For the first page of a free block: its order; otherwise [`NOT_FREE`].
    free_order: Vec<u8>,
}

impl Buddy {
    fn new(pages: u32) -> Buddy {
        let n = pages as usize;
        let mut b = Buddy {
            pages,
            used: 0,
            heads: [NIL; MAX_ORDER as usize + 1],
            next: vec![NIL; n],
            prev: vec![NIL; n],
            free_order: vec![NOT_FREE; n],
        };
        // The largest aligned blocks that fit, from the start.
        let mut page = 0u32;
        while page < pages {
            let mut order = MAX_ORDER;
            while order > 0 && (page % (1 << order) != 0 || page + (1 << order) > pages) {
                order -= 1;
            }
            b.push(page, order);
            page += 1 << order;
        }
        b
    }

    fn push(&mut self, page: u32, order: u8) {
        let head = self.heads[order as usize];
        self.next[page as usize] = head;
        self.prev[page as usize] = NIL;
        if head != NIL {
            self.prev[head as usize] = page;
        }
        self.heads[order as usize] = page;
        self.free_order[page as usize] = order;
    }

    fn unlink(&mut self, page: u32, order: u8) {
        let (p, n) = (self.prev[page as usize], self.next[page as usize]);
        if p == NIL {
            self.heads[order as usize] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
        self.free_order[page as usize] = NOT_FREE;
    }

    fn alloc(&mut self, order: u8) -> Option<u32> {
        let from = (order..=MAX_ORDER).find(|&o| self.heads[o as usize] != NIL)?;
        let page = self.heads[from as usize];
        self.unlink(page, from);
        // Split down: the upper halves go back to their lists.
        let mut o = from;
        while o > order {
            o -= 1;
            self.push(page + (1 << o), o);
        }
        self.used += 1 << order;
        Some(page)
    }

    fn free(&mut self, page: u32, order: u8) {
        assert!(
            page < self.pages && self.free_order[page as usize] == NOT_FREE,
            "freeing pool page {page}, which is not in use"
        );
        self.used -= 1 << order;
        let (mut page, mut order) = (page, order);
        while order < MAX_ORDER {
            let buddy = page ^ (1 << order);
            if buddy >= self.pages || self.free_order[buddy as usize] != order {
                break;
            }
            self.unlink(buddy, order);
            page = page.min(buddy);
            order += 1;
        }
        self.push(page, order);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(bytes: usize) -> DataPool {
        let arena = Arc::new(Arena::unpinned(bytes + (1 << 20)).unwrap());
        DataPool::new(&arena, bytes).unwrap()
    }

    fn w(slot: u32, order: u8) -> Waiter {
        Waiter {
            group: 0,
            queue: 1,
            slot,
            order,
        }
    }

    #[test]
    fn orders() {
        assert_eq!(order_for(0), None);
        assert_eq!(order_for(1), Some(0));
        assert_eq!(order_for(4096), Some(0));
        assert_eq!(order_for(4097), Some(1));
        assert_eq!(order_for(128 << 10), Some(5));
        assert_eq!(order_for(8 << 20), Some(11));
        assert_eq!(order_for((8 << 20) + 1), None);
    }

    #[test]
    fn buddy_splits_and_merges_back_whole() {
        let mut b = Buddy::new(37);
        let mut taken = Vec::new();
        for o in [0u8, 3, 1, 0, 2, 0, 4] {
            taken.push((b.alloc(o).unwrap(), o));
        }
        let mut seen = [false; 37];
        for &(p, o) in &taken {
            assert_eq!(p % (1 << o), 0, "aligned");
            for i in p..p + (1 << o) {
                assert!(!seen[i as usize], "page {i} handed out twice");
                seen[i as usize] = true;
            }
        }
        for (p, o) in taken.into_iter().rev() {
            b.free(p, o);
        }
        assert_eq!(b.used, 0);
        // Back to the initial blocks: 32 + 4 + 1.
        assert_eq!(b.heads[5], 0);
        assert_eq!(b.heads[2], 32);
        assert_eq!(b.heads[0], 36);
        assert!(b.alloc(6).is_none());
        assert_eq!(b.alloc(5), Some(0));
    }

    #[test]
    fn a_full_pool_queues_and_serves_in_order() {
        let mut p = pool(8 * PAGE_BYTES);
        // A host alone takes the last eighth only within half the pool: two hosts here.
        let a = p.take(1, w(0, 2)).unwrap();
        let b = p.take(3, w(1, 2)).unwrap();
        assert_ne!(a.addr, b.addr);
        assert_eq!(a.len as usize, 4 * PAGE_BYTES);
        assert!(p.take(1, w(2, 0)).is_none());
        assert!(p.take(1, w(3, 0)).is_none());
        assert_eq!(p.stats().waiting, 2);
        assert!(p.next_ready().is_none());
        p.give(a);
        assert!(p.has_ready());
        let (first, _) = p.next_ready().unwrap();
        let (second, _) = p.next_ready().unwrap();
        assert_eq!((first.slot, second.slot), (2, 3));
        assert!(p.next_ready().is_none());
        assert_eq!(p.stats().waiting, 0);
    }

    #[test]
    fn a_heavy_host_leaves_room_for_a_light_one() {
        // 64 pages. Alone, the heavy host takes all but the last eighth.
        let mut p = pool(64 * PAGE_BYTES);
        let mut heavy: Vec<DataBuf> = Vec::new();
        while let Some(b) = p.take(1, w(heavy.len() as u32, 2)) {
            heavy.push(b);
        }
        assert_eq!(heavy.len(), 14, "{:?}", p.stats());
        // Its next command waits; a light host arriving now (the heavy one holding on, as a
        // host that never sends its data does) starts at once, and again.
        assert_eq!(p.stats().waiting, 1);
        assert!(p.take(2, w(100, 0)).is_some());
        assert!(p.take(2, w(101, 1)).is_some());
        // Buffers coming back go to the heavy host's waiter first (hosts in turn), and
        // while both are active it still never takes the last eighth.
        for _ in 0..4 {
            p.give(heavy.pop().unwrap());
        }
        let (first, _) = p.next_ready().unwrap();
        assert_eq!(first.slot, 14);
        while let Some(b) = p.take(1, w(50, 2)) {
            heavy.push(b);
        }
        let free = 64 - p.stats().pages_in_use;
        assert!(free >= 64 / 8 - 4, "{free} pages left free");
        assert!(p.take(2, w(102, 0)).is_some());
    }

    #[test]
    fn waiters_of_hosts_take_turns() {
        let mut p = pool(4 * PAGE_BYTES);
        let all = p.take(1, w(0, 2)).unwrap();
        for s in 1..4 {
            assert!(p.take(1, w(s, 0)).is_none());
        }
        assert!(p.take(2, w(10, 0)).is_none());
        p.give(all);
        let order: Vec<u32> = std::iter::from_fn(|| p.next_ready().map(|(w, _)| w.slot)).collect();
        // Host 1 first (it waited first), then host 2, then host 1's others.
        assert_eq!(order[..2], [1, 10]);
        assert_eq!(order.len(), 4);
    }

    #[test]
    fn host_keys_name_hosts_and_the_map_keeps_them_apart() {
        assert_eq!(host_key(b"nqn.a"), host_key(b"nqn.a"), "one key a name");
        assert_ne!(host_key(b"nqn.a"), host_key(b"nqn.b"));
        // Keys alike in their low bits (the map's hasher takes keys as they are) stay
        // distinct hosts with their own shares.
        let mut p = pool(64 * PAGE_BYTES);
        let keys: Vec<u64> = (0..16u64).map(|i| (i << 40) | 7).collect();
        let bufs: Vec<DataBuf> = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| p.take(k, w(i as u32, 0)).expect("room"))
            .collect();
        assert_eq!(p.hosts.len(), keys.len());
        for b in bufs {
            p.give(b);
        }
        assert!(p.hosts.is_empty(), "a host holding nothing is forgotten");
    }
}
