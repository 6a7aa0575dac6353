//! The public completion queue ([`Cq`]): polling, arming and the ways to wait for a
//! completion (alone, passively, or together with another descriptor: [`CqReady`]).

use std::os::fd::RawFd;
use std::time::Duration;

use super::{Cq, Inner, Result, Wc};

impl Cq {
    /// Polls up to `wcs.len()` completions; returns how many were written. Never blocks.
    pub fn poll(&self, wcs: &mut [Wc]) -> Result<usize> {
        dispatch!(&self.0, c => c.poll(wcs))
    }

    /// Arms the CQ: the next completion makes [`Cq::fd`] readable and ends a [`Cq::wait`].
    ///
    /// The race-free blocking pattern: poll until empty; `arm`; poll once more (a completion
    /// may have arrived before the arm); if still empty, `wait`.
    pub fn arm(&self) -> Result<()> {
        dispatch!(&self.0, c => c.arm())
    }

    /// Waits for the event of an armed CQ and acknowledges it. Returns false on timeout.
    /// `None` waits forever.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        dispatch!(&self.0, c => c.wait(timeout))
    }

    /// [`Cq::wait`], except that on the soft provider this thread does not parse arriving
    /// frames itself: the QPs' receive threads do, in parallel with it. For a waiter whose
    /// completions bring large payloads (reads of 64 KiB and more), which a receive thread
    /// copies while the application goes on.
    pub fn wait_passive(&self, timeout: Option<Duration>) -> Result<bool> {
        dispatch!(&self.0, c => c.wait_passive(timeout))
    }

    /// Waits until the armed CQ has its event or `other` (an eventfd of the caller's: a ring's,
    /// a message queue's) is readable, or `timeout` passes. The CQ's event is not taken: call
    /// [`Cq::wait`] with a zero timeout. `other` must stay open as long as the CQ lives, and
    /// one thread at a time waits on a CQ with other descriptors (the soft provider keeps
    /// `other` in the CQ's epoll set).
    ///
    /// Prefer this to polling [`Cq::fd`] together with `other`: on the soft provider the
    /// waiting thread parses arriving frames itself, instead of being woken by a provider
    /// thread that parsed them.
    pub fn wait_with(&self, other: RawFd, timeout: Duration) -> Result<CqReady> {
        dispatch!(&self.0, c => c.wait_with(other, timeout))
    }

    /// A file descriptor that becomes readable when an armed CQ gets a completion (for epoll);
    /// call [`Cq::wait`] with a zero timeout to consume the event.
    pub fn fd(&self) -> RawFd {
        dispatch!(&self.0, c => c.fd())
    }
}

/// What [`Cq::wait_with`] found ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CqReady {
    /// The CQ's event (on the soft provider also: a completion was added while this thread
    /// waited, possibly by frames it parsed itself).
    pub cq: bool,
    /// The caller's other descriptor.
    pub other: bool,
}
