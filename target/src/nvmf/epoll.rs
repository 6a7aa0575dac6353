//! An epoll set (level-triggered), as the workers use them: the NVMe/TCP poll group's over its
//! sockets, the RDMA poll group's over its queues' CM channels, an idle worker's over the wake
//! descriptors of its transports after the first.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// An epoll set; closed when dropped.
#[derive(Debug)]
pub struct EpollSet(OwnedFd);

impl EpollSet {
    pub fn new() -> std::io::Result<EpollSet> {
        // SAFETY: plain system call; the descriptor is owned from here on.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nothing else owns.
        Ok(EpollSet(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// `epoll_ctl(op, fd)` with `events` and `token`; false if the kernel refused it.
    pub fn ctl(&self, op: i32, fd: RawFd, events: u32, token: u64) -> bool {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: both descriptors are open; `ev` is a valid event for the call.
        unsafe { libc::epoll_ctl(self.0.as_raw_fd(), op, fd, &mut ev) == 0 }
    }

    /// Waits up to `timeout_ms` (0: a look) for events into `events`; how many came (0 on an
    /// error, EINTR included).
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        let max = events.len().min(i32::MAX as usize) as i32;
        // SAFETY: `events` is a live buffer of at least `max` entries.
        let n =
            unsafe { libc::epoll_wait(self.0.as_raw_fd(), events.as_mut_ptr(), max, timeout_ms) };
        n.max(0) as usize
    }

    /// The set's own descriptor (to wait on it, or put it in another set).
    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}
