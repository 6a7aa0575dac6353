//! Event file descriptors: what makes `Cq::fd`, `Qp::cm_fd` and `Listener::fd` readable, the
//! small queue of pending events (connection requests, CM events) behind the latter two, and
//! the timerfd and epoll sets of the receive side (`rx.rs`, `cq.rs`).

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::fabric::{FabricError, Result};

/// A non-blocking Linux eventfd.
#[derive(Debug)]
pub(super) struct EventFd(OwnedFd);

impl EventFd {
    /// `semaphore`: every read takes one count (one read per event) instead of all of them.
    pub fn new(semaphore: bool) -> Result<EventFd> {
        let mut flags = libc::EFD_NONBLOCK | libc::EFD_CLOEXEC;
        if semaphore {
            flags |= libc::EFD_SEMAPHORE;
        }
        // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, flags) };
        if fd < 0 {
            return Err(FabricError::last_os("eventfd"));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Adds one count; the descriptor becomes readable.
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own descriptor.
        let r = unsafe { libc::write(self.fd(), (&one as *const u64).cast(), 8) };
        debug_assert!(r == 8, "eventfd write failed");
    }

    /// Takes one count (semaphore mode) or all counts; false if there was none.
    pub fn consume(&self) -> bool {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking descriptor.
        let r = unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
        r == 8
    }

    /// Waits until readable or `timeout` passes (`None`: forever). True if readable.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        wait_readable(&[self.fd()], timeout).map(|r| r.is_some())
    }
}

/// Waits until one of `fds` is readable; returns its index, or `None` on timeout.
pub(super) fn wait_readable(fds: &[RawFd], timeout: Option<Duration>) -> Result<Option<usize>> {
    const MAX_FDS: usize = 4;
    assert!(fds.len() <= MAX_FDS);
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let mut pfds = [libc::pollfd {
            fd: -1,
            events: 0,
            revents: 0,
        }; MAX_FDS];
        for (p, &fd) in pfds.iter_mut().zip(fds) {
            p.fd = fd;
            p.events = libc::POLLIN;
        }
        let ms: libc::c_int = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so a short timeout does not become a busy poll.
                left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int
            }
        };
        // SAFETY: `pfds` is a live array of `fds.len()` initialised pollfd entries.
        let r = unsafe { libc::poll(pfds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(FabricError::os("poll", e));
        }
        if let Some(i) = pfds[..fds.len()].iter().position(|p| p.revents != 0) {
            return Ok(Some(i));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}

/// Waits up to `timeout` (microsecond precision: `ppoll`) until `fd` has one of `events`
/// (`libc::POLLIN`, `libc::POLLOUT`); true if it does. An interrupted or failed wait counts as
/// not ready: the callers look again.
pub(super) fn wait_fd(fd: RawFd, events: libc::c_short, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one live pollfd and a live timespec; no signal mask.
    unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) > 0 }
}

/// A non-blocking `CLOCK_MONOTONIC` timerfd (the receive side's held-ACK deadline).
#[derive(Debug)]
pub(super) struct TimerFd(OwnedFd);

impl TimerFd {
    pub fn new() -> Result<TimerFd> {
        // SAFETY: timerfd_create has no memory-safety preconditions; the result is checked.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(FabricError::last_os("timerfd_create"));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(TimerFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Fires once, `after` from now (a pending expiry is replaced). False if it cannot.
    pub fn arm(&self, after: Duration) -> bool {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs() as libc::time_t,
                // A zero it_value would disarm: at least 1 ns.
                tv_nsec: (after.subsec_nanos().max(1)) as libc::c_long,
            },
        };
        // SAFETY: a live itimerspec and our own descriptor; no old value is asked for.
        let r = unsafe { libc::timerfd_settime(self.fd(), 0, &spec, std::ptr::null_mut()) };
        r == 0
    }

    /// Takes the expiry count; false if the timer had not fired.
    pub fn consume(&self) -> bool {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking descriptor.
        let r = unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
        r == 8
    }
}

/// An epoll set. Readiness is reported as the `u64` each descriptor was added with.
#[derive(Debug)]
pub(super) struct Epoll(OwnedFd);

impl Epoll {
    pub fn new() -> Result<Epoll> {
        // SAFETY: epoll_create1 has no memory-safety preconditions; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(FabricError::last_os("epoll_create1"));
        }
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds `fd` for `events` (`libc::EPOLLIN`, possibly with `EPOLLET` / `EPOLLEXCLUSIVE`).
    pub fn add(&self, fd: RawFd, events: i32, data: u64) -> Result<()> {
        let mut ev = libc::epoll_event {
            events: events as u32,
            u64: data,
        };
        // SAFETY: a live epoll_event; a descriptor that is not open only gives EBADF.
        let r = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if r < 0 {
            return Err(FabricError::last_os("epoll_ctl(ADD)"));
        }
        Ok(())
    }

    /// Removes `fd` (before it is closed: a duplicate of it keeps the registration alive).
    pub fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as in `add`; a descriptor that is not in the set only gives ENOENT.
        unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) };
    }

    /// Waits up to `timeout` (`None`: forever; rounded up to whole milliseconds) and returns
    /// how many entries of `out` are filled. An interrupted wait returns 0.
    pub fn wait(&self, out: &mut [libc::epoll_event], timeout: Option<Duration>) -> Result<usize> {
        let ms: libc::c_int = match timeout {
            None => -1,
            Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int,
        };
        let cap = out.len().min(i32::MAX as usize) as libc::c_int;
        // SAFETY: `out` is a live, writable array of `cap` epoll_event entries.
        let n = unsafe { libc::epoll_wait(self.0.as_raw_fd(), out.as_mut_ptr(), cap, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(FabricError::os("epoll_wait", e));
        }
        Ok(n as usize)
    }
}

/// A queue of events with a descriptor that is readable while the queue is not empty.
#[derive(Debug)]
pub(super) struct EventQueue<T> {
    items: Mutex<VecDeque<T>>,
    efd: EventFd,
}

impl<T> EventQueue<T> {
    pub fn new() -> Result<EventQueue<T>> {
        Ok(EventQueue {
            items: Mutex::new(VecDeque::new()),
            efd: EventFd::new(true)?,
        })
    }

    pub fn fd(&self) -> RawFd {
        self.efd.fd()
    }

    pub fn len(&self) -> usize {
        self.items.lock().unwrap().len()
    }

    pub fn push(&self, item: T) {
        self.items.lock().unwrap().push_back(item);
        self.efd.notify();
    }

    /// Next event, waiting up to `timeout` (`None`: forever); `Ok(None)` on timeout.
    pub fn pop(&self, timeout: Option<Duration>) -> Result<Option<T>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            // Every push adds one count after queueing its item, so a count taken means an
            // item is there for us.
            if self.efd.consume() {
                return Ok(self.items.lock().unwrap().pop_front());
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if !self.efd.wait(left)? {
                return Ok(None);
            }
        }
    }

    /// Removes every pending event.
    pub fn drain(&self) -> Vec<T> {
        let mut items = self.items.lock().unwrap();
        while self.efd.consume() {}
        items.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_fd_tracks_pending_events() {
        let q = EventQueue::new().unwrap();
        assert_eq!(q.pop(Some(Duration::ZERO)).unwrap(), None::<u32>);
        q.push(1);
        q.push(2);
        assert!(wait_readable(&[q.fd()], Some(Duration::ZERO))
            .unwrap()
            .is_some());
        assert_eq!(q.pop(None).unwrap(), Some(1));
        assert_eq!(q.pop(Some(Duration::from_millis(1))).unwrap(), Some(2));
        assert!(wait_readable(&[q.fd()], Some(Duration::ZERO))
            .unwrap()
            .is_none());
        let t = Instant::now();
        assert_eq!(q.pop(Some(Duration::from_millis(20))).unwrap(), None);
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}
