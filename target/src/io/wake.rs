//! The worker's backend wake-up: an eventfd its io_uring signals on every completion, so an
//! interrupt-mode worker with block I/O in flight sleeps on its CQ's channel and this fd
//! together instead of spinning until the kernel finishes the I/O.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::uring::Ring;

/// An eventfd registered with a [`Ring`].
#[derive(Debug)]
pub struct BackendWake {
    fd: OwnedFd,
}

/// What [`BackendWake::wait_with`] saw ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    /// The other fd (the CQ's completion channel) is readable.
    pub other: bool,
    /// The ring posted a completion.
    pub backend: bool,
}

impl BackendWake {
    /// A non-blocking eventfd, registered with `ring`.
    pub fn register(ring: &Ring) -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a negative return is an error.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        ring.register_eventfd(fd.as_raw_fd())?;
        Ok(BackendWake { fd })
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

    /// Sleeps until `other` or this fd is readable, or `timeout` passes (EINTR counts as a
    /// wake-up: the caller polls again anyway).
    pub fn wait_with(&self, other: RawFd, timeout: Duration) -> Ready {
        let mut fds = [
            libc::pollfd {
                fd: other,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: `fds` is a live array of two pollfds and its length is passed with it.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n <= 0 {
            return Ready {
                other: false,
                backend: n < 0,
            };
        }
        Ready {
            other: fds[0].revents != 0,
            backend: fds[1].revents != 0,
        }
    }
}
