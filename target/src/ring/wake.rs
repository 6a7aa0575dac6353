//! The worker's backend wake-up: an eventfd its io_uring signals on every completion, and that
//! backends completing on threads of their own (RBD: librbd's callbacks) signal with
//! [`BackendWake::signal`], so an interrupt-mode worker with backend I/O in flight sleeps on
//! its CQ's channel and this fd together (`Cq::wait_with`) instead of spinning until the I/O finishes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An eventfd; [`crate::ring::WorkerIo`] registers it with the worker's ring.
#[derive(Debug)]
pub struct BackendWake {
    fd: OwnedFd,
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
        Ok(BackendWake { fd })
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
