//! The loop transport's "wire": a target and its hosts in one process, commands and data
//! passed through memory, as the kernel's nvme-loop does. It exists to prove that the
//! NVMe-oF core of the target and of the initiator knows no transport, to test that core end
//! to end without a network, and to measure what the core costs per I/O.
//!
//! One queue is one [`Channel`]:
//! - **Capsules** (an SQE and up to [`CAPSULE_DATA`] bytes of in-capsule data) are written by
//!   the host into one of the channel's capsule slots and announced in a batch; the target
//!   copies each out and hands the slot back ([`ToHost::Taken`]).
//! - **Responses** go back in a batch ([`ToHost::Response`]).
//! - **Data** moves by keyed SGLs, as over RDMA: the host connects with one memory
//!   [`Region`] (its buffer pool), whose [`HostEnd::key`] its SGLs carry; the target copies
//!   to and from it ([`TargetEnd::read_host`], [`TargetEnd::write_host`]) after checking the
//!   key and the range. The channel keeps the region alive, so a target can never reach freed
//!   memory, and [`HostEnd::close`] returns only once no copy is under way: from then on the
//!   target reaches none of the host's memory (the loop's equivalent of a QP in error).
//! - **Wake-ups**: either side may sleep on an eventfd ([`Wake`]) that the other writes only
//!   when the sleeper armed it, so a polling peer costs no system call per batch.
//!
//! A listener is a name in a process-wide table ([`listen`]): an IP address and port, which
//! nothing binds.

use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::nvme::{Cqe, SQE_LEN};

/// In-capsule data bytes a capsule slot holds (as NVMe/TCP's admin capsules: the Connect
/// data of every queue, and I/O commands' in-capsule data up to the controller's IOCCSZ).
pub const CAPSULE_DATA: usize = 8192;
/// Bytes of one capsule slot.
pub const CAPSULE_BYTES: usize = SQE_LEN + CAPSULE_DATA;
/// The most capsule slots a channel may have (a queue's entries).
pub const MAX_ENTRIES: u32 = 4096;
/// How long a side about to sleep first watches for the other's next batch, unarmed: the
/// peer is in this process and usually answers within microseconds, and a batch that comes
/// meanwhile costs neither side a system call (a sleep and a wake-up cost both several).
pub const SPIN: Duration = Duration::from_micros(20);

/// Time (ns) hosts and targets of this process spent watching for the other side's next batch
/// ([`SPIN`]): CPU time that is waiting, not work, for a benchmark to tell apart.
static HOST_SPIN_NS: AtomicU64 = AtomicU64::new(0);
static TARGET_SPIN_NS: AtomicU64 = AtomicU64::new(0);

/// The time (ns) this process's loop hosts and targets have spent watching for each other's
/// batches so far: (hosts, targets).
pub fn spin_ns() -> (u64, u64) {
    (
        HOST_SPIN_NS.load(Ordering::Relaxed),
        TARGET_SPIN_NS.load(Ordering::Relaxed),
    )
}

/// Which side a [`Wake`] belongs to (whose spin time it counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Host,
    Target,
}

/// Why a loop operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoopError {
    #[error("loop address {0} is already listened on")]
    InUse(SocketAddr),
    #[error("no loop listener at {0}")]
    Refused(SocketAddr),
    #[error("a loop queue needs 1..={MAX_ENTRIES} entries, not {0}")]
    Entries(u32),
    #[error("cannot make an eventfd: {0}")]
    EventFd(String),
    #[error("the loop queue is closed")]
    Closed,
    #[error("keyed SGL key {key:#x} is not the queue's")]
    Key { key: u32 },
    #[error("keyed SGL {addr:#x}+{len} lies outside the host's memory region")]
    Range { addr: u64, len: usize },
}

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
    fn at(&self, addr: u64, len: usize) -> Option<*mut u8> {
        let start = (addr as usize).checked_sub(self.ptr as usize)?;
        let end = start.checked_add(len)?;
        // SAFETY: `start..end` lies within the region (checked just below before use).
        (end <= self.len).then(|| unsafe { self.ptr.add(start) })
    }
}

/// An eventfd the other side writes only when this side armed it before sleeping.
pub struct Wake {
    fd: OwnedFd,
    armed: AtomicBool,
    side: Side,
}

impl Wake {
    pub fn new(side: Side) -> Result<Arc<Wake>, LoopError> {
        // SAFETY: plain system call; the descriptor is owned from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(LoopError::EventFd(
                std::io::Error::last_os_error().to_string(),
            ));
        }
        Ok(Arc::new(Wake {
            // SAFETY: `fd` is a new descriptor nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            armed: AtomicBool::new(false),
            side,
        }))
    }

    /// The descriptor: readable once kicked while armed (level-triggered until [`Wake::arm`]
    /// clears it).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Before sleeping: clears an earlier kick and arms. Look for work once more after it:
    /// what arrived before is not signalled.
    pub fn arm(&self) {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v` from our eventfd (non-blocking).
        unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Not sleeping any more (found work after arming).
    pub fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
    }

    /// Wakes the sleeper if it armed (one write per sleep, none while it polls).
    pub fn kick(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            let one = 1u64;
            // SAFETY: writes 8 bytes from `one` to our eventfd.
            unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// Watches `ready` for up to [`SPIN`] (disarmed: a peer that sends meanwhile does not
    /// kick), then arms, looks once more and sleeps as [`Wake::wait`] does.
    pub fn spin_then_wait(
        &self,
        other: Option<RawFd>,
        timeout: Duration,
        ready: impl Fn() -> bool,
    ) -> Woke {
        self.disarm();
        let start = std::time::Instant::now();
        let spin = SPIN.min(timeout);
        let counter = match self.side {
            Side::Host => &HOST_SPIN_NS,
            Side::Target => &TARGET_SPIN_NS,
        };
        loop {
            let found = ready();
            let spun = start.elapsed();
            if found || spun >= spin {
                counter.fetch_add(spun.as_nanos() as u64, Ordering::Relaxed);
                if found {
                    return Woke::READY;
                }
                break;
            }
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
        self.arm();
        if ready() {
            self.disarm();
            return Woke::READY;
        }
        self.wait(other, timeout.saturating_sub(start.elapsed()))
    }

    /// Sleeps until kicked, `other` is readable, or `timeout` passes.
    pub fn wait(&self, other: Option<RawFd>, timeout: Duration) -> Woke {
        let mut fds = [
            libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: other.unwrap_or(-1),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as i32;
        let n = if other.is_some() { 2 } else { 1 };
        // SAFETY: `n` valid pollfds.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), n, ms) };
        self.disarm();
        Woke {
            kicked: r > 0 && fds[0].revents != 0,
            other: r > 0 && fds[1].revents != 0,
        }
    }
}

/// Why a [`Wake`] sleeper returned (both false: the timeout passed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Woke {
    /// The peer kicked it, or the work it watched for was there before it slept.
    pub kicked: bool,
    /// The caller's other descriptor is readable.
    pub other: bool,
}

impl Woke {
    const READY: Woke = Woke {
        kicked: true,
        other: false,
    };
}

/// What the target sends the host.
#[derive(Clone, Copy, Debug)]
pub enum ToHost {
    /// The capsule in slot `.0` was taken: the slot is the host's again.
    Taken(u32),
    /// A response capsule.
    Response(Cqe),
}

/// A batch one side hands the other, with a count to look at without the lock.
struct Mailbox<T> {
    items: Mutex<Vec<T>>,
    count: AtomicU32,
}

impl<T> Mailbox<T> {
    fn new(cap: usize) -> Mailbox<T> {
        Mailbox {
            items: Mutex::new(Vec::with_capacity(cap)),
            count: AtomicU32::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<T>> {
        self.items.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `batch` (emptied) under one lock.
    fn post(&self, batch: &mut Vec<T>) {
        let n = batch.len() as u32;
        let mut items = self.lock();
        items.append(batch);
        self.count.fetch_add(n, Ordering::SeqCst);
    }

    /// Moves everything posted into `out`; false if there was nothing (no lock taken).
    fn take(&self, out: &mut Vec<T>) -> bool {
        if self.count.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let mut items = self.lock();
        self.count.fetch_sub(items.len() as u32, Ordering::SeqCst);
        out.append(&mut items);
        true
    }

    fn pending(&self) -> bool {
        self.count.load(Ordering::SeqCst) != 0
    }
}

/// One queue between a host and a target.
pub struct Channel {
    /// The queue the host opens (as NVMe/RDMA's CM request says it).
    qid: u16,
    entries: u32,
    key: u32,
    region: Region,
    /// Capsule slots: written by the host while the slot is its own, read by the target
    /// after the slot was announced (the mailbox's lock orders the two).
    capsules: Box<[UnsafeCell<[u8; CAPSULE_BYTES]>]>,
    to_target: Mailbox<(u32, u32)>,
    to_host: Mailbox<ToHost>,
    closed: AtomicBool,
    /// The target's copies of host memory under way.
    copying: AtomicU32,
    host_wake: Arc<Wake>,
    target_wake: OnceLock<Arc<Wake>>,
}

// SAFETY: capsule slots are handed between the two sides through the mailboxes (a slot is
// written only by the host before it is announced and read only by the target after); the
// rest is atomics, locks and the region (Send + Sync).
unsafe impl Sync for Channel {}

static LISTENERS: OnceLock<Mutex<HashMap<SocketAddr, Sender<TargetEnd>>>> = OnceLock::new();
static NEXT_KEY: AtomicU32 = AtomicU32::new(0x100);

fn listeners() -> MutexGuard<'static, HashMap<SocketAddr, Sender<TargetEnd>>> {
    LISTENERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A loop listener: the name hosts connect to, and the queue of their new channels.
pub struct Listener {
    addr: SocketAddr,
    rx: Receiver<TargetEnd>,
}

/// Listens on `addr` in this process. Port 0 picks a free one.
pub fn listen(addr: SocketAddr) -> Result<Listener, LoopError> {
    let mut table = listeners();
    let mut addr = addr;
    if addr.port() == 0 {
        let port = (1..=u16::MAX)
            .find(|p| !table.contains_key(&SocketAddr::new(addr.ip(), *p)))
            .ok_or(LoopError::InUse(addr))?;
        addr.set_port(port);
    }
    if table.contains_key(&addr) {
        return Err(LoopError::InUse(addr));
    }
    let (tx, rx) = mpsc::channel();
    table.insert(addr, tx);
    Ok(Listener { addr, rx })
}

impl Listener {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next new channel, waiting up to `timeout`.
    pub fn accept(&self, timeout: Duration) -> Option<TargetEnd> {
        self.rx.recv_timeout(timeout).ok()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        listeners().remove(&self.addr);
        // Channels not accepted yet drop with the receiver: their hosts see them closed.
    }
}

/// Opens queue `qid` of `entries` capsule slots to the listener at `addr`, through which the
/// target may reach `region`. Its first command is the Fabrics Connect, as on every
/// transport.
pub fn connect(
    addr: SocketAddr,
    qid: u16,
    entries: u32,
    region: Region,
) -> Result<HostEnd, LoopError> {
    if entries == 0 || entries > MAX_ENTRIES {
        return Err(LoopError::Entries(entries));
    }
    let ch = Arc::new(Channel {
        qid,
        entries,
        key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
        region,
        capsules: (0..entries)
            .map(|_| UnsafeCell::new([0u8; CAPSULE_BYTES]))
            .collect(),
        to_target: Mailbox::new(entries as usize),
        to_host: Mailbox::new(2 * entries as usize),
        closed: AtomicBool::new(false),
        copying: AtomicU32::new(0),
        host_wake: Wake::new(Side::Host)?,
        target_wake: OnceLock::new(),
    });
    let tx = listeners()
        .get(&addr)
        .cloned()
        .ok_or(LoopError::Refused(addr))?;
    tx.send(TargetEnd(Arc::clone(&ch)))
        .map_err(|_| LoopError::Refused(addr))?;
    Ok(HostEnd {
        ch,
        free: (0..entries).rev().collect(),
        batch: Vec::with_capacity(entries as usize),
    })
}

/// The host's end of a channel.
pub struct HostEnd {
    ch: Arc<Channel>,
    free: Vec<u32>,
    batch: Vec<(u32, u32)>,
}

impl HostEnd {
    /// The key the host's keyed SGLs carry.
    pub fn key(&self) -> u32 {
        self.ch.key
    }

    pub fn entries(&self) -> u32 {
        self.ch.entries
    }

    /// Writes a capsule (`sqe` and in-capsule `data`) into a free slot, to leave with the
    /// next [`HostEnd::flush`]; its slot, or None if none is free (every capsule in flight).
    pub fn queue(&mut self, sqe: &[u8; SQE_LEN], data: &[u8]) -> Option<u32> {
        assert!(data.len() <= CAPSULE_DATA, "in-capsule data beyond a slot");
        let slot = self.free.pop()?;
        // SAFETY: the slot is the host's (free): the target reads it only once announced.
        let cap = unsafe { &mut *self.ch.capsules[slot as usize].get() };
        cap[..SQE_LEN].copy_from_slice(sqe);
        cap[SQE_LEN..SQE_LEN + data.len()].copy_from_slice(data);
        self.batch.push((slot, (SQE_LEN + data.len()) as u32));
        Some(slot)
    }

    /// As [`HostEnd::queue`] with the capsule's bytes as given, whatever they hold (a test
    /// host's malformed capsules).
    pub fn queue_raw(&mut self, capsule: &[u8]) -> Option<u32> {
        assert!(capsule.len() <= CAPSULE_BYTES, "capsule beyond a slot");
        let slot = self.free.pop()?;
        // SAFETY: the slot is the host's (free): the target reads it only once announced.
        let cap = unsafe { &mut *self.ch.capsules[slot as usize].get() };
        cap[..capsule.len()].copy_from_slice(capsule);
        self.batch.push((slot, capsule.len() as u32));
        Some(slot)
    }

    /// Hands the queued capsules to the target (one lock for the batch) and wakes it if it
    /// sleeps.
    pub fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        self.ch.to_target.post(&mut self.batch);
        if let Some(w) = self.ch.target_wake.get() {
            w.kick();
        }
    }

    /// Appends what the target sent to `out` (slots it took are free again).
    pub fn poll(&mut self, out: &mut Vec<ToHost>) {
        let from = out.len();
        if self.ch.to_host.take(out) {
            for m in &out[from..] {
                if let ToHost::Taken(slot) = m {
                    self.free.push(*slot);
                }
            }
        }
    }

    pub fn is_closed(&self) -> bool {
        self.ch.closed.load(Ordering::SeqCst)
    }

    /// Before sleeping in [`HostEnd::wait`]; poll once more after it.
    pub fn arm(&self) {
        self.ch.host_wake.arm();
    }

    /// Sleeps until the target sends, closes, or `timeout` passes (watching for a while
    /// before it sleeps: [`Wake::spin_then_wait`]).
    pub fn wait(&self, timeout: Duration) {
        let ch = &self.ch;
        let _ = ch.host_wake.spin_then_wait(None, timeout, || {
            ch.to_host.pending() || ch.closed.load(Ordering::SeqCst)
        });
    }

    /// Closes the queue; returns once the target reaches none of the host's memory.
    pub fn close(&mut self) {
        self.ch.closed.store(true, Ordering::SeqCst);
        if let Some(w) = self.ch.target_wake.get() {
            w.kick();
        }
        while self.ch.copying.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

impl Drop for HostEnd {
    fn drop(&mut self) {
        self.close();
    }
}

/// The target's end of a channel.
pub struct TargetEnd(Arc<Channel>);

impl TargetEnd {
    /// The queue the host opened.
    pub fn qid(&self) -> u16 {
        self.0.qid
    }

    /// Capsule slots the host has.
    pub fn entries(&self) -> u32 {
        self.0.entries
    }

    /// Where the target sleeps: the host kicks `wake` when it sends while it is armed.
    pub fn set_wake(&self, wake: &Arc<Wake>) {
        let _ = self.0.target_wake.set(Arc::clone(wake));
    }

    /// Whether capsules wait to be taken.
    pub fn pending(&self) -> bool {
        self.0.to_target.pending()
    }

    /// Moves the announced capsules (slot, length) into `out`.
    pub fn take(&self, out: &mut Vec<(u32, u32)>) -> bool {
        self.0.to_target.take(out)
    }

    /// The capsule in `slot`, `len` bytes long (announced, not yet handed back).
    pub fn capsule(&self, slot: u32, len: u32) -> Option<&[u8]> {
        let cap = self.0.capsules.get(slot as usize)?;
        // SAFETY: an announced slot is the target's until it hands it back with
        // `ToHost::Taken`; the host does not write it meanwhile.
        let cap = unsafe { &*cap.get() };
        cap.get(..len as usize)
    }

    /// Sends `batch` (emptied) to the host and wakes it if it sleeps.
    pub fn send(&self, batch: &mut Vec<ToHost>) {
        if batch.is_empty() {
            return;
        }
        self.0.to_host.post(batch);
        self.0.host_wake.kick();
    }

    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::SeqCst)
    }

    /// Closes the queue (the host's next look fails it).
    pub fn close(&self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.0.host_wake.kick();
    }

    /// Runs `f` on host memory `addr..addr + len` named by a keyed SGL with `key`, unless
    /// the queue is closed (then the host may have reused it).
    fn with_host<R>(
        &self,
        addr: u64,
        len: usize,
        key: u32,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R, LoopError> {
        let ch = &self.0;
        if key != ch.key {
            return Err(LoopError::Key { key });
        }
        let at = ch
            .region
            .at(addr, len)
            .ok_or(LoopError::Range { addr, len })?;
        ch.copying.fetch_add(1, Ordering::SeqCst);
        let r = if ch.closed.load(Ordering::SeqCst) {
            Err(LoopError::Closed)
        } else {
            Ok(f(at))
        };
        ch.copying.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Copies host memory at `addr` (keyed SGL `key`) into `dst`.
    pub fn read_host(&self, addr: u64, key: u32, dst: &mut [u8]) -> Result<(), LoopError> {
        self.with_host(addr, dst.len(), key, |src| {
            // SAFETY: `src..src + len` lies in the live region (checked); `dst` is ours.
            unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) }
        })
    }

    /// Copies `src` into host memory at `addr` (keyed SGL `key`).
    pub fn write_host(&self, addr: u64, key: u32, src: &[u8]) -> Result<(), LoopError> {
        self.with_host(addr, src.len(), key, |dst| {
            // SAFETY: `dst..dst + len` lies in the live region (checked); `src` is ours.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
        })
    }
}

impl Drop for TargetEnd {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::Status;

    fn region(buf: &Arc<Mutex<Vec<u8>>>) -> Region {
        let ptr = buf.lock().unwrap().as_mut_ptr();
        let len = buf.lock().unwrap().len();
        // SAFETY: the Vec is kept alive by the Arc and never resized.
        unsafe { Region::new(ptr, len, Box::new(Arc::clone(buf))) }
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 9], port))
    }

    #[test]
    fn capsules_responses_and_data_cross_and_checks_hold() {
        let l = listen(addr(0)).unwrap();
        assert!(matches!(listen(l.local_addr()), Err(LoopError::InUse(_))));
        let mem = Arc::new(Mutex::new(vec![7u8; 4096]));
        let base = mem.lock().unwrap().as_ptr() as u64;
        let mut h = connect(l.local_addr(), 1, 2, region(&mem)).unwrap();
        let t = l.accept(Duration::from_secs(1)).unwrap();
        let sqe = [1u8; SQE_LEN];
        assert_eq!(h.queue(&sqe, b"abc"), Some(0));
        assert_eq!(h.queue(&sqe, b""), Some(1));
        assert_eq!(h.queue(&sqe, b""), None, "two slots");
        h.flush();
        let mut got = Vec::new();
        assert!(t.take(&mut got));
        assert_eq!(got, vec![(0, 67), (1, 64)]);
        assert_eq!(&t.capsule(0, 67).unwrap()[64..], b"abc");
        let mut d = [0u8; 8];
        t.read_host(base + 8, h.key(), &mut d).unwrap();
        assert_eq!(d, [7; 8]);
        t.write_host(base, h.key(), b"xy").unwrap();
        assert_eq!(&mem.lock().unwrap()[..2], b"xy");
        assert_eq!(
            t.write_host(base, h.key() + 1, b"z"),
            Err(LoopError::Key { key: h.key() + 1 })
        );
        assert!(matches!(
            t.write_host(base + 4095, h.key(), b"zz"),
            Err(LoopError::Range { .. })
        ));
        assert!(t.read_host(base - 1, h.key(), &mut d).is_err());
        let mut out = vec![
            ToHost::Taken(0),
            ToHost::Response(Cqe::error(1, 1, 0, Status::SUCCESS)),
        ];
        t.send(&mut out);
        let mut seen = Vec::new();
        h.poll(&mut seen);
        assert_eq!(seen.len(), 2);
        assert_eq!(h.queue(&sqe, b""), Some(0), "the taken slot is free again");
        h.close();
        assert!(t.is_closed());
        assert_eq!(t.write_host(base, h.key(), b"q"), Err(LoopError::Closed));
    }

    #[test]
    fn refused_without_a_listener_and_closed_when_the_target_drops() {
        let a = {
            let l = listen(addr(0)).unwrap();
            l.local_addr()
        };
        let mem = Arc::new(Mutex::new(vec![0u8; 64]));
        assert!(matches!(
            connect(a, 0, 1, region(&mem)),
            Err(LoopError::Refused(_))
        ));
        assert!(matches!(
            connect(a, 0, 0, region(&mem)),
            Err(LoopError::Entries(0))
        ));
        let l = listen(a).unwrap();
        let h = connect(a, 0, 1, region(&mem)).unwrap();
        drop(l.accept(Duration::from_secs(1)));
        assert!(h.is_closed());
    }

    #[test]
    fn an_armed_sleeper_is_woken() {
        let w = Wake::new(Side::Target).unwrap();
        w.arm();
        let w2 = Arc::clone(&w);
        let t = std::thread::spawn(move || w2.kick());
        // Its own eventfd as the "other" descriptor: readable means the kick arrived (a
        // timeout would return false). 60 s is only a hang guard.
        let woke = w.wait(Some(w.fd()), Duration::from_secs(60));
        assert!(woke.kicked && woke.other, "woken by the kick: {woke:?}");
        t.join().unwrap();
        // Cleared (arm reads the eventfd) and disarmed: a kick writes nothing.
        w.arm();
        w.disarm();
        w.kick();
        assert_eq!(
            w.wait(Some(w.fd()), Duration::ZERO),
            Woke {
                kicked: false,
                other: false
            },
            "an unarmed kick wakes no one"
        );
    }
}
