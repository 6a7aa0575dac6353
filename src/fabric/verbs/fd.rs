//! Waiting on the file descriptors of completion channels and CM event channels.
//!
//! Both kinds are made non-blocking, so a `get` after a spurious wake-up returns EAGAIN instead
//! of blocking; waits use `poll(2)` with a deadline.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::fabric::{FabricError, Result};

/// Sets O_NONBLOCK on `fd`.
pub fn set_nonblocking(fd: RawFd, op: &'static str) -> Result<()> {
    // SAFETY: F_GETFL/F_SETFL only read and set flags of a descriptor we own; an invalid fd is
    // reported as an error, not undefined behaviour.
    let rc = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            flags
        } else {
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)
        }
    };
    if rc < 0 {
        return Err(FabricError::last_os(op));
    }
    Ok(())
}

/// A deadline from a timeout (`None` = forever).
pub fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now() + t)
}

/// Waits until `fd` is readable or `deadline` passes. Returns false on timeout.
pub fn wait_readable(fd: RawFd, deadline: Option<Instant>, op: &'static str) -> Result<bool> {
    loop {
        let timeout_ms: libc::c_int = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so a 0.5 ms remainder does not turn into a busy 0 ms poll loop.
                let ms = left.as_micros().div_ceil(1000);
                ms.min(libc::c_int::MAX as u128) as libc::c_int
            }
        };
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd that lives across the call.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if n > 0 {
            return Ok(true);
        }
        if n == 0 {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            continue;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(FabricError::os(op, e));
        }
    }
}
