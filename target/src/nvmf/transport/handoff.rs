//! Handing accepted connections to the workers: what the listener threads of NVMe/TCP and
//! loop share. Each connection goes to the next worker in turn and counts against
//! `limits.max_connections` until its poll group lets it go (`Shared::queues_open`). RDMA's
//! listener keeps its own, because it answers a refusal with a CM reject that names the cause.

use std::any::Any;
use std::fmt::Display;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::config;
use crate::nvmf::worker::{WorkerMsg, WorkerTx};
use crate::nvmf::Shared;

/// Connections over `limits.max_connections` answered at once (each holds a socket and a
/// receive buffer until its Connect is answered); more are closed.
pub const MAX_REFUSING: usize = 32;

/// One listener's hand-over: the workers, whose turn is next, the limit.
pub struct Handoff<'a> {
    shared: &'a Shared,
    transport: config::Transport,
    workers: Vec<WorkerTx>,
    next: usize,
    max: usize,
}

impl<'a> Handoff<'a> {
    pub fn new(shared: &'a Shared, transport: config::Transport) -> Handoff<'a> {
        Handoff {
            shared,
            transport,
            workers: shared.workers.get().cloned().unwrap_or_default(),
            next: 0,
            max: shared.fixed.limits.max_connections as usize,
        }
    }

    /// Whether the listener should go on accepting: the target runs, the listener was not
    /// removed, and there are workers to take connections.
    pub fn running(&self, stop: &AtomicBool) -> bool {
        !self.shared.stopping() && !stop.load(Ordering::Acquire) && !self.workers.is_empty()
    }

    /// Whether `limits.max_connections` queues are alive: a transport that can answer a
    /// refusal (NVMe/TCP) hands the next one over with [`Handoff::hand_over_refusal`].
    pub fn full(&self) -> bool {
        self.shared.queues_open.load(Ordering::Acquire) >= self.max
    }

    /// Hands over a connection the limit has no room for, to be answered with a refusal rather
    /// than closed, counted in `Shared::refusing` (not `queues_open`); closed instead while
    /// [`MAX_REFUSING`] are being answered. False if it was dropped.
    pub fn hand_over_refusal(&mut self, peer: impl Display, conn: Box<dyn Any + Send>) -> bool {
        let refusing = &self.shared.refusing;
        if refusing.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSING {
            refusing.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(%peer, transport = ?self.transport, limit = self.max,
                "limits.max_connections reached and {MAX_REFUSING} refusals under way: connection closed");
            return false;
        }
        if !self.send(conn) {
            refusing.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(%peer, "the worker is gone; connection dropped");
            return false;
        }
        true
    }

    /// Sends `conn` to the next worker; false if that worker is gone.
    fn send(&mut self, conn: Box<dyn Any + Send>) -> bool {
        let w = self.next % self.workers.len();
        self.next = self.next.wrapping_add(1);
        let msg = WorkerMsg::Handover {
            transport: self.transport,
            handover: conn,
        };
        self.workers[w].send(msg).is_ok()
    }

    /// Hands `conn` (the transport's own hand-over type) to the next worker; false if it was
    /// dropped (over `limits.max_connections`, or the worker is gone), which is logged
    /// naming `peer`.
    pub fn hand_over(&mut self, peer: impl Display, conn: Box<dyn Any + Send>) -> bool {
        let queues_open = &self.shared.queues_open;
        if queues_open.fetch_add(1, Ordering::AcqRel) >= self.max {
            queues_open.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(
                %peer,
                transport = ?self.transport,
                limit = self.max,
                "limits.max_connections reached: connection closed"
            );
            return false;
        }
        if !self.send(conn) {
            queues_open.fetch_sub(1, Ordering::AcqRel);
            tracing::warn!(%peer, "the worker is gone; connection dropped");
            return false;
        }
        true
    }
}
