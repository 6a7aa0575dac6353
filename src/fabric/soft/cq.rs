//! Completion queues: a bounded ring of work completions shared by any number of QPs, with an
//! eventfd that an armed CQ signals on its next completion.
//!
//! A thread that waits on a CQ ([`Cq::wait`], [`Cq::wait_with`]) waits in the CQ's epoll set,
//! which holds the eventfd and the sockets of the QPs that receive into this CQ. When frames
//! arrive while it waits, the kernel wakes it and not the QP's receive thread, and it parses
//! them itself (`rx.rs` explains the order of the two sets): at QD1 a completion reaches the
//! application without a hop through another thread. [`Cq::fd`] stays the plain eventfd: a
//! caller that polls it in its own loop gets its completions from the receive threads.

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::fabric::{CqReady, FabricError, Result, Wc};

use super::device::max_cqe;
use super::event::{Epoll, EventFd};
use super::rx::RxShared;

/// Epoll data of the eventfd; QP sockets get tokens from 1, other descriptors of
/// [`Cq::wait_with`] are `OTHER | fd`.
const EVENTFD: u64 = 0;
const OTHER: u64 = 1 << 63;

pub(super) struct CqInner {
    ring: Mutex<VecDeque<Wc>>,
    depth: usize,
    /// A completion did not fit: the CQ is broken (verbs: IBV_EVENT_CQ_ERR).
    overrun: AtomicBool,
    armed: AtomicBool,
    efd: EventFd,
    /// Completions pushed so far (tells a waiter that parsed frames whether any completed).
    pushes: AtomicU64,
    ep: Epoll,
    /// The receive sides whose sockets are in `ep`, by token.
    rxs: Mutex<HashMap<u64, Weak<RxShared>>>,
    next_token: AtomicU64,
    /// Descriptors [`Cq::wait_with`] added (edge-triggered), and whether one was seen ready by
    /// a wait that did not ask for it (it is reported to the next that does).
    others: Mutex<Vec<(RawFd, bool)>>,
}

impl CqInner {
    /// Adds a completion (from a provider thread or a post). Never blocks.
    pub fn push(&self, wc: Wc) {
        self.pushes.fetch_add(1, Ordering::SeqCst);
        {
            let mut ring = self.ring.lock().unwrap();
            if ring.len() >= self.depth {
                if !self.overrun.swap(true, Ordering::SeqCst) {
                    tracing::error!(depth = self.depth, "soft CQ overrun: completion lost");
                }
            } else {
                ring.push_back(wc);
            }
        }
        if self.armed.swap(false, Ordering::SeqCst) {
            self.efd.notify();
        }
    }

    /// Adds a QP's socket to the waiters' epoll set; returns its token. Call before the QP's
    /// receive thread registers the socket in its own set.
    pub fn register(&self, rx: &Arc<RxShared>) -> Result<u64> {
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        self.rxs.lock().unwrap().insert(token, Arc::downgrade(rx));
        let ev = libc::EPOLLIN | libc::EPOLLET | libc::EPOLLEXCLUSIVE;
        if let Err(e) = self.ep.add(rx.fd(), ev, token) {
            self.rxs.lock().unwrap().remove(&token);
            return Err(e);
        }
        Ok(token)
    }

    /// Takes a QP's socket out of the set (before the socket is closed).
    pub fn unregister(&self, token: u64, fd: RawFd) {
        self.ep.remove(fd);
        self.rxs.lock().unwrap().remove(&token);
    }

    /// Waits in the epoll set; parses frames of sockets that became readable.
    fn wait_ready(&self, other: Option<RawFd>, timeout: Option<Duration>) -> Result<CqReady> {
        // What this thread posted inside a send batch leaves before it waits for completions.
        super::tx::batch_flush();
        let mut ready = CqReady::default();
        if let Some(fd) = other {
            let mut others = self.others.lock().unwrap();
            match others.iter_mut().find(|(f, _)| *f == fd) {
                Some((_, seen)) => ready.other = std::mem::take(seen),
                None => {
                    self.ep
                        .add(fd, libc::EPOLLIN | libc::EPOLLET, OTHER | fd as u64)?;
                    others.push((fd, false));
                }
            }
        }
        // Far-off timeouts (`Duration::MAX`) wait forever.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let pushes = self.pushes.load(Ordering::SeqCst);
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
        let mut more = false;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let wait = if ready.cq || ready.other || more {
                Some(Duration::ZERO)
            } else {
                left
            };
            let n = self.ep.wait(&mut evs, wait)?;
            // A full batch: more may be ready, and a socket's wake-up, once taken, is ours
            // alone (its receive thread was not woken): look again before returning.
            more = n == evs.len();
            for ev in &evs[..n] {
                // A copy: epoll_event is packed.
                let data = ev.u64;
                match data {
                    EVENTFD => ready.cq = true,
                    t if t & OTHER != 0 => {
                        let fd = (t & !OTHER) as RawFd;
                        if other == Some(fd) {
                            ready.other = true;
                        } else if let Some(o) = self
                            .others
                            .lock()
                            .unwrap()
                            .iter_mut()
                            .find(|(f, _)| *f == fd)
                        {
                            o.1 = true;
                        }
                    }
                    token => {
                        let rx = self.rxs.lock().unwrap().get(&token).and_then(Weak::upgrade);
                        if let Some(rx) = rx {
                            rx.drive_inline();
                        }
                    }
                }
            }
            // Completions, not frames, are what the caller waits for (an unarmed CQ's too).
            ready.cq |= self.pushes.load(Ordering::SeqCst) != pushes;
            if more {
                continue;
            }
            // Frames that only moved a payload along or carried ACKs of unsignalled WRs are no
            // reason to return; nor is an interrupted wait.
            if ready.cq || ready.other || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(ready);
            }
        }
    }
}

/// A completion queue. Cheap to clone.
#[derive(Clone)]
pub struct Cq(pub(super) Arc<CqInner>);

impl Cq {
    pub(super) fn new(depth: u32) -> Result<Cq> {
        let max = max_cqe();
        if depth == 0 || depth > max {
            return Err(FabricError::InvalidArgument {
                what: format!("CQ depth {depth} (the soft device allows 1..={max})"),
            });
        }
        let efd = EventFd::new(false)?;
        let ep = Epoll::new()?;
        ep.add(efd.fd(), libc::EPOLLIN, EVENTFD)?;
        Ok(Cq(Arc::new(CqInner {
            ring: Mutex::new(VecDeque::with_capacity(depth as usize)),
            depth: depth as usize,
            overrun: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            efd,
            pushes: AtomicU64::new(0),
            ep,
            rxs: Mutex::new(HashMap::new()),
            next_token: AtomicU64::new(EVENTFD + 1),
            others: Mutex::new(Vec::new()),
        })))
    }

    pub fn poll(&self, wcs: &mut [Wc]) -> Result<usize> {
        if self.0.overrun.load(Ordering::SeqCst) {
            return Err(FabricError::os(
                "poll CQ",
                std::io::Error::other(format!(
                    "completion queue overrun: more than {} completions were pending (create the \
                     CQ at least as deep as the queues of all QPs that share it)",
                    self.0.depth
                )),
            ));
        }
        let mut ring = self.0.ring.lock().unwrap();
        let n = wcs.len().min(ring.len());
        for (dst, src) in wcs.iter_mut().zip(ring.drain(..n)) {
            *dst = src;
        }
        Ok(n)
    }

    pub fn arm(&self) -> Result<()> {
        self.0.armed.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Waits for the armed CQ's event and takes it. Frames of the CQ's QPs that arrive
    /// meanwhile are parsed by this thread; true if a completion was added.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        if timeout == Some(Duration::ZERO) {
            super::tx::batch_flush();
            // A look, not a wait: one read of the non-blocking eventfd instead of poll + read.
            return Ok(self.0.efd.consume());
        }
        let ready = self.0.wait_ready(None, timeout)?;
        if ready.cq {
            self.0.efd.consume();
        }
        Ok(ready.cq)
    }

    /// Waits for the armed CQ's event on its eventfd alone: the receive threads parse what
    /// arrives (the epoll set has no waiter, so the kernel wakes them).
    pub fn wait_passive(&self, timeout: Option<Duration>) -> Result<bool> {
        super::tx::batch_flush();
        if !self.0.efd.wait(timeout)? {
            return Ok(false);
        }
        Ok(self.0.efd.consume())
    }

    /// Waits for the armed CQ's event or for `other` to become readable. The CQ's event is not
    /// taken: [`Cq::wait`] with a zero timeout does that.
    ///
    /// `other` joins the CQ's epoll set, edge-triggered, for good: it must stay open as long
    /// as the CQ lives, and only one thread may wait on the CQ with other descriptors (an
    /// event taken by one waiter is only remembered for the descriptor, not handed over).
    pub fn wait_with(&self, other: RawFd, timeout: Duration) -> Result<CqReady> {
        self.0.wait_ready(Some(other), Some(timeout))
    }

    pub fn fd(&self) -> RawFd {
        self.0.efd.fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{WcOpcode, WcStatus};

    fn wc(id: u64) -> Wc {
        Wc {
            wr_id: id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            ..Wc::default()
        }
    }

    #[test]
    fn armed_cq_signals_and_overrun_is_an_error() {
        let cq = Cq::new(2).unwrap();
        assert!(!cq.wait(Some(Duration::ZERO)).unwrap());
        cq.0.push(wc(1)); // not armed: no event
        assert!(!cq.wait(Some(Duration::ZERO)).unwrap());
        cq.arm().unwrap();
        cq.0.push(wc(2));
        assert!(cq.wait(Some(Duration::ZERO)).unwrap());
        let mut out = [Wc::default(); 4];
        assert_eq!(cq.poll(&mut out).unwrap(), 2);
        assert_eq!((out[0].wr_id, out[1].wr_id), (1, 2));
        for i in 0..3 {
            cq.0.push(wc(i));
        }
        assert!(cq.poll(&mut out).is_err());
    }
}
