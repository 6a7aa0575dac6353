//! Wake-ups between the two sides: an eventfd ([`Wake`]) the other side writes only when the
//! sleeper armed it, the watch for the peer's next batch before sleeping ([`SPIN`]), and the
//! time spent watching ([`spin_ns`]).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::LoopError;

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
