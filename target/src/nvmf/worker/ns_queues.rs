//! One worker's backend queues, one per namespace slot
//! ([`crate::nvmf::subsystems::ns_table`]), and their life: opened when a namespace is added,
//! closed (after its I/O in flight, then a flush) when it is removed. Each also holds the worker's commands that its namespace's QoS limits hold
//! back ([`crate::namespace::qos`]), in arrival order, until the limits admit them: the
//! namespace's limits (`qos`) keep that order for every host; a command held only by its
//! host's limits (`host_qos`) lets the other hosts' commands pass.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::backend::{Completion, IoOp, IoRequest, SubmitError};
use crate::namespace::qos::{Cost, HostQos, Qos};
use crate::namespace::{Namespace, NamespaceQueue};
use crate::ring::WorkerIo;

/// The shortest wait before held commands are offered to their limits again: a worker wakes
/// at most once a millisecond per namespace and lets go of what the limits admit by then (the
/// limits' burst, [`crate::namespace::qos::BURST`], absorbs the delay; the rate is kept).
const RETRY_MIN: Duration = Duration::from_millis(1);

/// The answer a worker gives to an open or close request.
pub type Ack = Sender<Result<(), String>>;

struct Slot {
    q: NamespaceQueue,
    nsid: u32,
    /// Set once the namespace was removed: no new I/O; closed when idle, then acked.
    closing: Option<Ack>,
    qos: Arc<Qos>,
    host_qos: Arc<HostQos>,
    /// Each host's buckets (by host NQN), looked up here without a lock once known.
    hosts: HashMap<String, Arc<Qos>>,
    /// Commands the limits hold, oldest first.
    held: VecDeque<Held>,
    /// A held command waits for the namespace's own limits: new commands go behind it.
    ns_blocked: bool,
    /// When the limits may admit a held command.
    retry_at: Option<Instant>,
}

/// A command the limits hold: its backend tag, cost, since when, and its host's buckets
/// (when per-host limits were set).
struct Held {
    tag: u64,
    cost: Cost,
    since: Instant,
    host: Option<Arc<Qos>>,
}

/// Takes `cost` from the host's buckets, then the namespace's; `Err` with the wait and
/// whether the namespace's limits refused it (what the host's took is given back).
fn try_admit(
    ns: &Qos,
    host: Option<&Qos>,
    cost: Cost,
    now: Instant,
) -> Result<(), (Duration, bool)> {
    if let Some(h) = host {
        h.admit(cost, now).map_err(|w| (w, false))?;
    }
    if let Err(w) = ns.admit(cost, now) {
        if let Some(h) = host {
            h.refund(cost);
        }
        return Err((w, true));
    }
    Ok(())
}

/// The earlier of `a` and `b`.
fn earliest(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// A worker's queues by namespace slot.
#[derive(Default)]
pub struct NsQueues {
    slots: Vec<Option<Slot>>,
    /// Commands held by QoS limits, every slot's.
    held: usize,
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
            qos: Arc::clone(ns.qos()),
            host_qos: Arc::clone(ns.host_qos()),
            hosts: HashMap::new(),
            held: VecDeque::new(),
            ns_blocked: false,
            retry_at: None,
        });
        Ok(())
    }

    /// Whether command `tag` of `cost` from host `hostnqn` on slot `i` may run now: true, or
    /// false when the QoS limits hold it ([`NsQueues::release_held`] lets it go). It waits
    /// behind held commands that wait for the namespace's limits, not behind those that wait
    /// for their own host's.
    #[inline]
    pub fn admit(&mut self, i: usize, tag: u64, cost: Cost, hostnqn: &str) -> bool {
        let Some(Some(s)) = self.slots.get_mut(i) else {
            return true; // gone: the submit fails it
        };
        let per_host = s.host_qos.enabled();
        if !s.qos.enabled() && !per_host && s.held.is_empty() {
            return true;
        }
        let host = per_host.then(|| {
            if let Some(q) = s.hosts.get(hostnqn) {
                return Arc::clone(q);
            }
            let q = s.host_qos.of(hostnqn);
            s.hosts.insert(hostnqn.to_owned(), Arc::clone(&q));
            q
        });
        let now = Instant::now();
        if !s.ns_blocked {
            match try_admit(&s.qos, host.as_deref(), cost, now) {
                Ok(()) => return true,
                Err((wait, ns)) => {
                    s.ns_blocked |= ns;
                    s.retry_at = earliest(s.retry_at, now + wait.max(RETRY_MIN));
                }
            }
        }
        s.qos.held();
        if let Some(h) = &host {
            h.held();
        }
        s.held.push_back(Held {
            tag,
            cost,
            since: now,
            host,
        });
        self.held += 1;
        false
    }

    /// Appends to `out` the held commands the limits admit now (and every held command of a
    /// closing namespace, or of one whose limits were lifted: their submit decides).
    pub fn release_held(&mut self, out: &mut Vec<u64>) {
        if self.held == 0 {
            return;
        }
        let now = Instant::now();
        for s in self.slots.iter_mut().flatten() {
            let free = s.closing.is_some() || (!s.qos.enabled() && !s.host_qos.enabled());
            if s.held.is_empty() || (!free && s.retry_at.is_some_and(|t| t > now)) {
                continue;
            }
            s.retry_at = None;
            s.ns_blocked = false;
            let mut k = 0;
            while k < s.held.len() {
                if !free {
                    let h = &s.held[k];
                    if let Err((wait, ns)) = try_admit(&s.qos, h.host.as_deref(), h.cost, now) {
                        s.retry_at = earliest(s.retry_at, now + wait.max(RETRY_MIN));
                        if ns {
                            // The namespace's limits: the rest waits in order.
                            s.ns_blocked = true;
                            break;
                        }
                        // Only this host's limits: the next host's command may go.
                        k += 1;
                        continue;
                    }
                }
                let Some(h) = s.held.remove(k) else { break };
                self.held -= 1;
                s.qos.released(now - h.since);
                if let Some(q) = &h.host {
                    q.released(now - h.since);
                }
                out.push(h.tag);
            }
        }
    }

    /// How long until a held command may be admitted (`None`: none is held).
    pub fn held_wait(&self) -> Option<Duration> {
        if self.held == 0 {
            return None;
        }
        let now = Instant::now();
        self.slots
            .iter()
            .flatten()
            .filter(|s| !s.held.is_empty())
            .map(|s| {
                s.retry_at
                    .map_or(Duration::ZERO, |t| t.saturating_duration_since(now))
            })
            .min()
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
            let done = matches!(entry,
                Some(s) if s.closing.is_some() && s.q.in_flight() == 0 && s.held.is_empty());
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
