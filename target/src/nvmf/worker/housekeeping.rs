//! A worker's housekeeping, every few milliseconds ([`super::TICK`]): held Async Event
//! Requests completed with their controllers' events, connection events, the connect,
//! response, authentication and keep-alive timers, and connections that finished draining
//! dropped.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdmablk::fabric::CmEvent;

use super::Worker;
use crate::nvmf::auth;
use crate::nvmf::queue::{begin_close, disconnect, Phase};
use crate::nvmf::request_flow::respond;
use crate::nvmf::transport::rdma::queue::{
    send_stalled, RdmaQueue, DRAIN_TIMEOUT, INVALIDATE_TIMEOUT,
};
use crate::nvmf::transport::QueueTransport;

impl Worker {
    /// Completes held Async Event Requests with the events their controllers raised.
    fn deliver_events(&mut self) {
        for i in 0..self.conns.len() {
            let key = match &self.conns[i] {
                Some(c) if c.qid == 0 && c.is_live() && !c.aers.is_empty() => c.key,
                _ => continue,
            };
            let Some((conn, mut ctx)) = self.ctx_and_conn(key) else {
                continue;
            };
            let Some(ctrl) = conn.ctrl.clone() else {
                continue;
            };
            while !conn.aers.is_empty() {
                let Some(event) = ctrl.take_event() else {
                    break;
                };
                let slot = conn.aers.remove(0);
                conn.reqs[slot as usize].dw0 = event;
                tracing::debug!(
                    cntlid = ctrl.cntlid,
                    event = format_args!("{event:#010x}"),
                    "asynchronous event"
                );
                respond(conn, slot, &mut ctx);
            }
        }
    }

    pub(super) fn housekeeping(&mut self) {
        self.nsq.reap_closed(&mut self.comps);
        self.deliver_events();
        let now = self.shared.now_ms();
        for i in 0..self.conns.len() {
            let Some(conn) = self.conns[i].as_mut() else {
                continue;
            };
            let shared = &*self.shared;
            while let Ok(Some(ev)) = conn.xport.qp.cm_event(Some(Duration::ZERO)) {
                match ev {
                    CmEvent::Established => {
                        tracing::debug!(peer = %conn.peer, qid = conn.qid, "established")
                    }
                    CmEvent::Disconnected => begin_close(conn, "host disconnected", shared),
                    CmEvent::Error(e) => {
                        tracing::warn!(peer = %conn.peer, error = %e, "connection error");
                        begin_close(conn, "connection error", shared);
                    }
                }
            }
            match conn.phase {
                Phase::Live | Phase::Binding => {
                    let connect_ms = u128::from(shared.cfg.target.connect_timeout_ms);
                    if conn.ctrl.is_none()
                        && connect_ms != 0
                        && conn.created.elapsed().as_millis() > connect_ms
                    {
                        tracing::warn!(peer = %conn.peer, qid = conn.qid,
                            connect_timeout_ms = connect_ms as u64,
                            "no Fabrics Connect in time: dropping the queue");
                        begin_close(conn, "no Fabrics Connect in time", shared);
                    } else if send_stalled(&mut conn.xport, shared.cfg.target.response_timeout_ms) {
                        tracing::warn!(peer = %conn.peer, qid = conn.qid, sends = conn.xport.sends_out,
                            response_timeout_ms = shared.cfg.target.response_timeout_ms,
                            "the host takes no responses (it stopped posting receives, or \
                             stopped): tearing the queue down");
                        begin_close(conn, "the host takes no responses", shared);
                    } else if let Some(ctrl) = conn.ctrl.clone() {
                        if ctrl.is_dead() {
                            begin_close(conn, "controller torn down", shared);
                        } else if let Some(why) =
                            conn.auth.as_mut().and_then(|a| a.expired(Instant::now()))
                        {
                            tracing::warn!(peer = %conn.peer, qid = conn.qid, cntlid = ctrl.cntlid,
                                "{why}: tearing the queue down");
                            begin_close(conn, why, shared);
                        } else if conn.qid == 0
                            // Until the admin queue has authenticated the host sends no
                            // Keep Alive (Linux starts it once the controller is live);
                            // AUTH_TIMEOUT bounds that time instead. With KATO 5 s the
                            // large FFDHE groups outlasted it under TCG (docs/auth.md).
                            && auth::admitted(&conn.auth)
                            && ctrl.keep_alive_expired(now)
                        {
                            tracing::warn!(peer = %conn.peer, cntlid = ctrl.cntlid,
                                kato_ms = ctrl.kato_ms(), "keep-alive timeout: tearing the controller down");
                            shared
                                .counters
                                .keep_alive_expirations
                                .fetch_add(1, Ordering::Relaxed);
                            begin_close(conn, "keep-alive timeout", shared);
                        }
                    }
                }
                Phase::Invalidating { since } if since.elapsed() > INVALIDATE_TIMEOUT => {
                    disconnect(conn)
                }
                Phase::Invalidating { .. } => {}
                Phase::Draining { since } => {
                    let timed_out = since.elapsed() > DRAIN_TIMEOUT && conn.backend_ops == 0;
                    let drained = RdmaQueue::drained(conn) && conn.backend_ops == 0;
                    if timed_out && !drained {
                        tracing::warn!(peer = %conn.peer, qid = conn.qid, sends = conn.xport.sends_out,
                            recvs = conn.xport.recvs_out, "flushed completions missing; destroying the QP anyway");
                    }
                    if drained || timed_out {
                        self.finish(i);
                    }
                }
            }
        }
    }

    /// Drops a drained connection: QP, then its remote key, then its window.
    fn finish(&mut self, i: usize) {
        let Some(conn) = self.conns[i].take() else {
            return;
        };
        self.gens[i] = self.gens[i].wrapping_add(1);
        if let Some(ctrl) = &conn.ctrl {
            if conn.qid == 0 {
                self.shared.controllers.remove(ctrl.cntlid);
            } else {
                ctrl.detach_queue(conn.qid);
            }
        }
        let (peer, qid, reason, cqes) = (conn.peer, conn.qid, conn.close_reason, conn.xport.cqes);
        drop(conn);
        self.release(cqes);
        tracing::info!(%peer, qid, reason, "queue closed");
        self.shared.log_arena("queue closed");
    }
}
