//! One worker's backend queues, one per namespace slot ([`super::ns_table`]), and their life:
//! opened when a namespace is added, closed (after its I/O in flight, then a flush) when it
//! is removed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::backend::{Completion, IoOp, IoRequest, SubmitError};
use crate::namespace::{Namespace, NamespaceQueue};
use crate::ring::WorkerIo;

/// The answer a worker gives to an open or close request.
pub type Ack = Sender<Result<(), String>>;

struct Slot {
    q: NamespaceQueue,
    nsid: u32,
    /// Set once the namespace was removed: no new I/O; closed when idle, then acked.
    closing: Option<Ack>,
}

/// A worker's queues by namespace slot.
#[derive(Default)]
pub struct NsQueues {
    slots: Vec<Option<Slot>>,
}

impl NsQueues {
    /// Opens the worker's queue to `ns` (on the worker's thread, with its `io`).
    pub fn open(&mut self, ns: &Arc<Namespace>, io: &WorkerIo, depth: u32) -> Result<(), String> {
        let q = ns.open_queue(io, depth).map_err(|e| e.to_string())?;
        let i = ns.slot();
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = Some(Slot {
            q,
            nsid: ns.nsid(),
            closing: None,
        });
        Ok(())
    }

    /// Starts closing slot `i`: new I/O is refused; [`NsQueues::reap_closed`] finishes it.
    pub fn close(&mut self, i: usize, ack: Ack) {
        match self.slots.get_mut(i).and_then(Option::as_mut) {
            Some(s) => s.closing = Some(ack),
            None => {
                let _ = ack.send(Ok(()));
            }
        }
    }

    /// The queue of slot `i` for new I/O (`None`: no such namespace, or it is going away).
    pub fn get(&mut self, i: usize) -> Option<&mut NamespaceQueue> {
        match self.slots.get_mut(i) {
            Some(Some(s)) if s.closing.is_none() => Some(&mut s.q),
            _ => None,
        }
    }

    /// Polls every queue (closing ones too: their I/O still completes) into `out`, calling
    /// `each` per completion. True if anything completed.
    pub fn poll(&mut self, out: &mut [Completion], mut each: impl FnMut(Completion)) -> bool {
        let mut any = false;
        for s in self.slots.iter_mut().flatten() {
            loop {
                let n = s.q.poll(out);
                for c in &out[..n] {
                    each(*c);
                }
                any |= n > 0;
                if n < out.len() {
                    break;
                }
            }
        }
        any
    }

    /// Backend operations in flight on every queue.
    pub fn in_flight(&self) -> u32 {
        self.slots.iter().flatten().map(|s| s.q.in_flight()).sum()
    }

    /// Closes the closing queues whose I/O is done: flush, drop, answer.
    pub fn reap_closed(&mut self, scratch: &mut [Completion]) {
        for entry in &mut self.slots {
            let done = matches!(entry, Some(s) if s.closing.is_some() && s.q.in_flight() == 0);
            if !done {
                continue;
            }
            let Some(mut s) = entry.take() else { continue };
            let result = flush(&mut s.q, scratch).map_err(|why| {
                tracing::error!(nsid = s.nsid, error = %why, "flush of a removed namespace failed");
                format!("namespace {}: final flush: {why}", s.nsid)
            });
            if let Some(ack) = s.closing.take() {
                let _ = ack.send(result);
            }
        }
    }

    /// Flushes every queue (at shutdown); returns `(nsid, why)` of each that failed.
    pub fn flush_all(&mut self, scratch: &mut [Completion]) -> Vec<(u32, String)> {
        let mut failed = Vec::new();
        for s in self.slots.iter_mut().flatten() {
            if let Err(why) = flush(&mut s.q, scratch) {
                failed.push((s.nsid, why));
            }
        }
        failed
    }
}

/// Flushes `q` and waits (at most 30 s) for the flush's completion.
fn flush(q: &mut NamespaceQueue, scratch: &mut [Completion]) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let tag = u64::MAX;
    q.submit(IoRequest {
        tag,
        op: IoOp::Flush,
    })
    .map_err(|e| match e {
        SubmitError::Rejected(e) => format!("refused: {e}"),
        SubmitError::Busy => "refused: backend queue full".to_string(),
    })?;
    loop {
        let n = q.poll(scratch);
        if let Some(c) = scratch[..n].iter().find(|c| c.tag == tag) {
            return c.result.map_err(|e| e.to_string());
        }
        if q.in_flight() == 0 {
            return Err("the flush completion was lost".into());
        }
        if Instant::now() > deadline {
            return Err("did not complete in 30 s".into());
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}
