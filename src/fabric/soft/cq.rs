//! Completion queues: a bounded ring of work completions shared by any number of QPs, with an
//! eventfd that an armed CQ signals on its next completion.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::fabric::{FabricError, Result, Wc};

use super::device::MAX_CQE;
use super::event::EventFd;

pub(super) struct CqInner {
    ring: Mutex<VecDeque<Wc>>,
    depth: usize,
    /// A completion did not fit: the CQ is broken (verbs: IBV_EVENT_CQ_ERR).
    overrun: AtomicBool,
    armed: AtomicBool,
    efd: EventFd,
}

impl CqInner {
    /// Adds a completion (from a provider thread or a post). Never blocks.
    pub fn push(&self, wc: Wc) {
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
}

/// A completion queue. Cheap to clone.
#[derive(Clone)]
pub struct Cq(pub(super) Arc<CqInner>);

impl Cq {
    pub(super) fn new(depth: u32) -> Result<Cq> {
        if depth == 0 || depth > MAX_CQE {
            return Err(FabricError::InvalidArgument {
                what: format!("CQ depth {depth} (the soft device allows 1..={MAX_CQE})"),
            });
        }
        Ok(Cq(Arc::new(CqInner {
            ring: Mutex::new(VecDeque::with_capacity(depth as usize)),
            depth: depth as usize,
            overrun: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            efd: EventFd::new(false)?,
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

    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        // What this thread posted inside a send batch leaves before it waits for completions.
        super::tx::batch_flush();
        if timeout == Some(Duration::ZERO) {
            // A look, not a wait: one read of the non-blocking eventfd instead of poll + read.
            return Ok(self.0.efd.consume());
        }
        if !self.0.efd.wait(timeout)? {
            return Ok(false);
        }
        self.0.efd.consume();
        Ok(true)
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
