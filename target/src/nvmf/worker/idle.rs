//! How a worker waits when a pass found nothing: spinning (`busy`, and `adaptive` for
//! `poll_spin_us` after work) or sleeping on its first poll group's events together with its
//! own eventfd, the backend's and, with several transports, [`OthersWait`]: an epoll set over
//! the other groups' wake descriptors.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use super::Worker;
use crate::config;
use crate::nvmf::epoll::EpollSet;
use crate::nvmf::transport::PollGroup;

/// How long an idle worker in interrupt mode sleeps on its CQ before looking at connection
/// events and timers again, right after work; each wait that finds nothing doubles it, up to
/// [`IDLE_WAIT_MAX`]. Whatever needs the worker at once wakes it: a completion on its CQ (a
/// host's capsule, a flushed QP) or a message ([`WorkerTx`](super::WorkerTx)).
const IDLE_WAIT: Duration = Duration::from_millis(5);
/// The longest idle sleep: the delay, beyond its timer, of a keep-alive expiry or a drain
/// timeout noticed by an idle worker (no host waits on it).
const IDLE_WAIT_MAX: Duration = Duration::from_millis(80);
/// A command held by QoS limits that may go sooner than this is waited for by yielding, not
/// sleeping (a sleep's timeout is rounded to milliseconds).
const HELD_SPIN: Duration = Duration::from_micros(50);

impl Worker {
    /// Adaptive mode, a pass that found nothing at `now`: whether the spell of polling since
    /// the last work goes on (the next pass polls again) or is over (the worker may sleep).
    pub(super) fn spinning(&mut self, now: Instant) -> bool {
        if self.spin.is_zero() {
            return false;
        }
        now < *self.spin_until.get_or_insert(now + self.spin)
    }

    /// Nothing happened in the last pass. Busy mode spins. Interrupt mode sleeps on the CQ's
    /// channel; with block I/O in flight it sleeps on the channel and the ring's eventfd
    /// together, so neither QD1 spins a core until the kernel answers nor does a busy queue pay
    /// a sleep while work keeps arriving (the loop only gets here after a pass found nothing).
    /// Backends that complete without the ring (or a ring without an eventfd) get yields.
    pub(super) fn idle(&mut self) {
        if self.busy_poll {
            std::hint::spin_loop();
            return;
        }
        // Commands held by QoS limits: sleep no longer than until the first may go.
        let held = self.nsq.held_wait();
        if held.is_some_and(|d| d < HELD_SPIN) {
            std::thread::yield_now();
            return;
        }
        // (Rounded up to whole milliseconds, as the waits count them: rounded down, a wait
        // under a millisecond would return at once and spin.)
        let held_ms = held.map(|h| Duration::from_millis(h.as_micros().div_ceil(1000) as u64));
        let cap = |d: Duration| held_ms.map_or(d, |h| d.min(h));
        let in_flight = self.nsq.in_flight() as usize;
        if self.backend_wake.is_none() {
            // A namespace added by a reload may have brought the first backend that signals.
            self.backend_wake = self._io.wake_in_use();
        }
        let use_wake = match &self.backend_wake {
            _ if in_flight == 0 && self.backlog.is_empty() => false,
            Some(w) if self.backlog.is_empty() && self._io.all_signalled(in_flight) => {
                w.arm();
                true
            }
            _ => {
                std::thread::yield_now();
                return;
            }
        };
        if self.groups.len() > 1 {
            if self.others.is_none() {
                // No set to wait on the other groups with: nap briefly instead.
                std::thread::sleep(Duration::from_micros(50));
                return;
            }
            for g in 1..self.groups.len() {
                match self.with_group(g, |group, ctx| group.arm(ctx)) {
                    None => {
                        std::thread::sleep(Duration::from_micros(200));
                        return;
                    }
                    Some(true) => return,
                    Some(false) => {}
                }
            }
        }
        match self.with_group(0, |group, ctx| group.arm(ctx)) {
            None => {
                std::thread::sleep(Duration::from_micros(200));
                return;
            }
            Some(true) => return,
            Some(false) => {}
        }
        if !use_wake {
            let Some(fd) = self.msg_wake.as_ref().map(|w| w.raw_fd()) else {
                let other = self.other_fd(None);
                let _ = self.groups[0].1.wait(other, cap(IDLE_WAIT));
                return;
            };
            // The fd is cleared only when the wait found it readable (no syscall per idle
            // entry): a message sent since this pass's take_new left it readable, so the
            // wait returns at once, and the next pass takes the message.
            let wait = cap(IDLE_WAIT
                .saturating_mul(1 << self.idle_streak.min(5))
                .min(IDLE_WAIT_MAX));
            let other = self.other_fd(Some(fd));
            let Some(ready) = self.groups[0].1.wait(other, wait) else {
                std::thread::sleep(Duration::from_micros(200));
                return;
            };
            if ready.other {
                if let Some(w) = &self.msg_wake {
                    w.clear();
                }
            }
            if !ready.events && !ready.other {
                self.idle_streak = self.idle_streak.saturating_add(1);
            }
            return;
        }
        if self.poll_backends() {
            return;
        }
        let Some(w) = &self.backend_wake else {
            return;
        };
        let fd = w.raw_fd();
        let other = self.other_fd(Some(fd));
        if self.groups[0].1.wait(other, cap(IDLE_WAIT)).is_none() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The descriptor the first group waits on besides its own events: the worker's `fd`,
    /// or with several groups the set holding it and the other groups' descriptors.
    fn other_fd(&mut self, fd: Option<RawFd>) -> Option<RawFd> {
        match &mut self.others {
            Some(o) => Some(o.with(fd)),
            None => fd,
        }
    }
}

/// An epoll set over the wake descriptors of a worker's groups after the first, and the
/// worker's own descriptor of the moment (its message or backend eventfd): with several
/// transports, the first group sleeps on its own events plus this set.
pub(super) struct OthersWait {
    epoll: EpollSet,
    /// The worker's descriptor now in the set.
    extra: Option<RawFd>,
}

impl OthersWait {
    /// The set for `groups`, if there is more than one and every group after the first has
    /// a wake descriptor.
    pub(super) fn new(groups: &[(config::Transport, Box<dyn PollGroup>)]) -> Option<OthersWait> {
        if groups.len() < 2 {
            return None;
        }
        let Ok(epoll) = EpollSet::new() else {
            tracing::warn!("no epoll set for several transports: idle workers nap instead");
            return None;
        };
        let set = OthersWait { epoll, extra: None };
        for (_, g) in &groups[1..] {
            if !set.ctl(libc::EPOLL_CTL_ADD, g.wake_fd()?) {
                return None;
            }
        }
        Some(set)
    }

    fn ctl(&self, op: i32, fd: RawFd) -> bool {
        self.epoll.ctl(op, fd, libc::EPOLLIN as u32, fd as u64)
    }

    /// Puts `fd` in the set in place of the worker's previous descriptor; the set's own.
    fn with(&mut self, fd: Option<RawFd>) -> RawFd {
        if fd != self.extra {
            if let Some(old) = self.extra.take() {
                self.ctl(libc::EPOLL_CTL_DEL, old);
            }
            if let Some(new) = fd {
                if self.ctl(libc::EPOLL_CTL_ADD, new) {
                    self.extra = Some(new);
                }
            }
        }
        self.epoll.fd()
    }
}
