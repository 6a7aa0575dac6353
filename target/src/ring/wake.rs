//! The worker's backend wake-up: an eventfd its io_uring signals on every completion, and that
//! backends completing on threads of their own (RBD: librbd's callbacks) signal with
//! [`BackendWake::signal`], so an interrupt-mode worker with backend I/O in flight sleeps on
//! its CQ's channel and this fd together (`Cq::wait_with`) instead of spinning until the I/O finishes.
//!
//! A backend thread signals only a worker that may sleep ([`BackendWake::signal_armed`]): the
//! worker arms the fd ([`BackendWake::arm`]) before its last look at the backends that precedes
//! a wait, and the first completion after that writes it and disarms it. A worker that is busy
//! (polling, or spinning in adaptive mode) takes its completions from the backends' channels on
//! its next pass with no write at all: one eventfd write per sleep, not one per completion.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};

/// An eventfd; [`crate::ring::WorkerIo`] registers it with the worker's ring.
#[derive(Debug)]
pub struct BackendWake {
    fd: OwnedFd,
    /// The worker may be about to sleep on the fd: the next [`BackendWake::signal_armed`]
    /// writes it. Armed at creation, so a worker that never armed it is still woken.
    armed: AtomicBool,
}

impl BackendWake {
    /// A non-blocking eventfd.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a negative return is an error.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(BackendWake {
            fd,
            armed: AtomicBool::new(true),
        })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Makes the fd readable (from any thread): a backend operation completed.
    pub fn signal(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64. It can only fail with EAGAIN when the
        // counter is about to overflow, and then the fd is readable anyway.
        let _ = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    /// What a backend thread calls after it has published a completion (put it on the
    /// channel the worker polls): writes the fd only if the worker armed it since the last
    /// write, so a busy worker is not written to once per completion.
    pub fn signal_armed(&self) {
        // Pairs with the fence in `arm`: either this sees `armed` set, or the worker's last
        // look after arming sees the completion published before this fence.
        fence(Ordering::SeqCst);
        if self.armed.swap(false, Ordering::AcqRel) {
            self.signal();
        }
    }

    /// The worker's step before its last look at the backends that precedes a wait: clears
    /// the count and arms the fd, so a completion published from now on makes it readable
    /// (through [`BackendWake::signal_armed`] or the ring).
    pub fn arm(&self) {
        self.clear();
        self.armed.store(true, Ordering::Relaxed);
        // Pairs with the fence in `signal_armed`: the look that follows sees every completion
        // whose signaller found the fd disarmed.
        fence(Ordering::SeqCst);
    }

    /// Clears the count, so a completion posted from now on makes the fd readable again.
    /// Call before the last look at the ring that precedes a wait.
    pub fn clear(&self) {
        let mut count = 0u64;
        // SAFETY: reads at most 8 bytes into a live u64; non-blocking, so EAGAIN when zero.
        let _ = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut count as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readable(w: &BackendWake) -> bool {
        let mut p = libc::pollfd {
            fd: w.raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, no timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & libc::POLLIN != 0
    }

    #[test]
    fn an_armed_fd_is_written_once_per_arming() {
        let w = BackendWake::new().unwrap();
        // Armed at creation: a worker that never armed it is still woken.
        w.signal_armed();
        assert!(readable(&w));
        w.arm();
        assert!(!readable(&w), "arm clears the count");
        w.signal_armed();
        assert!(readable(&w), "the first completion after arming writes");
        w.clear();
        w.signal_armed();
        assert!(!readable(&w), "a busy worker is not written to again");
        w.arm();
        w.signal_armed();
        assert!(readable(&w), "armed again, written again");
        w.clear();
        w.signal();
        assert!(readable(&w), "signal writes whether armed or not");
    }
}
