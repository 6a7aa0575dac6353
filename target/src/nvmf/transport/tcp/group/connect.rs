//! A connection between its accept and its Fabrics Connect ([`Pending`]): its TLS, the
//! connection initialization (ICReq, ICResp), and its first command, the Fabrics Connect that
//! makes it a queue (or the answer that refuses it).

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rdmablk::nvme::fabrics::ConnectFailure;
use rdmablk::nvme::opcodes::{self, fctype};
use rdmablk::nvme::transport::tcp::{
    pdu_type, CommonHeader, Direction, Fes, IcReq, IcResp, Negotiated, PduLayout, TermError,
    CH_LEN, IC_LEN, TERM_REQ_MAX_DATA,
};
use rdmablk::nvme::{Connect, Cqe, Sqe, Status, SQE_LEN};

use super::super::queue::{capsule_resp, TcpXport};
use super::super::receive::check_header_digest;
use super::super::socket::Socket;
use super::super::{tls, ADMIN_CAPSULE_DATA, MAXH2CDATA};
use super::{blank_pdu, term_req, TcpGroup, IN};
use crate::arena::{Parcel, ParcelLayout};
use crate::nvmf::queue::{Phase, Queue, QueueId};
use crate::nvmf::request_flow::Ctx;
use crate::nvmf::{Shared, ADMIN_QUEUE_DEPTH};

/// A connection between its accept and its Fabrics Connect.
pub(super) struct Pending {
    pub(super) sock: Socket,
    pub(super) peer: SocketAddr,
    pub(super) listener: u64,
    pub(super) created: Instant,
    /// Set once the ICReq is answered.
    pub(super) neg: Option<Negotiated>,
    /// Over `limits.max_connections`: its Connect is answered Controller Busy.
    pub(super) over_limit: bool,
    /// Its TLS, before NVMe/TCP starts (`tls.rs`).
    pub(super) tls: tls::Stage,
}

/// Gives back what a connection that is not (or no longer) pending counted: its place in
/// `Shared::queues_open`, or in `Shared::refusing` if it came over the limit.
pub(super) fn uncount(shared: &Shared, over_limit: bool) {
    let counter = if over_limit {
        &shared.refusing
    } else {
        &shared.queues_open
    };
    counter.fetch_sub(1, Ordering::AcqRel);
}

/// The Fabrics Connect a queue's first command must be; otherwise the completion it gets
/// instead: the Connect's own refusal (RECFMT, SQSIZE, ...), or Command Sequence Error for
/// any other command (there is no controller yet), as the core answers over RDMA.
fn first_command(sqe: &Sqe) -> Result<Connect, Cqe> {
    if sqe.opcode == opcodes::FABRICS && sqe.fctype() == fctype::CONNECT {
        return Connect::from_sqe(sqe).map_err(|f| f.to_cqe(sqe.cid, 0, 0));
    }
    Err(Cqe::error(
        sqe.cid,
        0,
        0,
        Status::COMMAND_SEQUENCE_ERROR.with_dnr(),
    ))
}

impl TcpGroup {
    pub(super) fn drop_pending(&mut self, i: usize, shared: &Shared, why: &str) {
        if let Some(p) = self.pending[i].take() {
            tracing::info!(peer = %p.peer, why, "NVMe/TCP connection closed before its Connect");
            uncount(shared, p.over_limit);
        }
    }

    /// What a connection before its Connect sent: the ICReq, then the Connect capsule, which
    /// makes it a queue.
    pub(super) fn on_pending(&mut self, i: usize, ctx: &mut Ctx<'_>) {
        let Some(p) = self.pending[i].as_mut() else {
            return;
        };
        match tls::advance(&mut p.tls, &mut p.sock, p.peer, ctx.shared) {
            Ok(true) => {}
            Ok(false) => return,
            Err(why) => {
                tracing::warn!(peer = %p.peer, why, "NVMe/TCP TLS: connection refused");
                return self.drop_pending(i, ctx.shared, "TLS refused");
            }
        }
        p.sock.fill();
        loop {
            let Some(p) = self.pending[i].as_mut() else {
                return;
            };
            let buf = p.sock.received();
            if buf.len() < CH_LEN {
                if p.sock.tls_backlog() && p.sock.fill() {
                    continue;
                }
                break;
            }
            let ch = CommonHeader::decode(buf[..CH_LEN].try_into().expect("8 bytes"));
            let layout =
                match PduLayout::check(&ch, Direction::HostToController, p.neg, ADMIN_CAPSULE_DATA)
                {
                    Ok(l) => l,
                    Err(e) => return self.fatal_pending(i, e, ctx.shared),
                };
            if buf.len() < layout.plen {
                if p.sock.tls_backlog() && p.sock.fill() {
                    continue;
                }
                break;
            }
            match p.neg {
                None => {
                    let b: &[u8; IC_LEN] = buf[..IC_LEN].try_into().expect("128 bytes");
                    let req = match IcReq::decode(b) {
                        Ok(r) => r,
                        Err(e) => return self.fatal_pending(i, e, ctx.shared),
                    };
                    let resp = IcResp {
                        pfv: 0,
                        cpda: 0,
                        hdgst: req.hdgst,
                        ddgst: req.ddgst,
                        maxh2cdata: MAXH2CDATA,
                    };
                    p.sock.consume(IC_LEN);
                    let mut pdu = blank_pdu();
                    pdu.head[..IC_LEN].copy_from_slice(&resp.encode());
                    pdu.head_len = IC_LEN as u16;
                    p.sock.queue(pdu);
                    p.neg = Some(Negotiated {
                        hdgst: req.hdgst,
                        ddgst: req.ddgst,
                        pda: req.hpda,
                    });
                    tracing::debug!(peer = %p.peer, hdgst = req.hdgst, ddgst = req.ddgst,
                        hpda = req.hpda, "NVMe/TCP connection initialized");
                }
                Some(neg) => {
                    if ch.pdu_type != pdu_type::CAPSULE_CMD {
                        let e = TermError {
                            fes: Fes::PduSequenceError,
                            fei: 0,
                            what: "the first PDU after the connection's initialization is not a command",
                        };
                        return self.fatal_pending(i, e, ctx.shared);
                    }
                    let sqe_at = CH_LEN;
                    let sqe =
                        Sqe::decode(buf[sqe_at..sqe_at + SQE_LEN].try_into().expect("64 bytes"));
                    let c = match first_command(&sqe) {
                        Ok(c) => c,
                        Err(cqe) => {
                            // A command the queue cannot start with is answered with its
                            // status and the connection stays (nvmet, SPDK, and rdmablk over
                            // RDMA do the same): the host may send its Connect next. What
                            // the header digest guards is checked first.
                            if let Err(e) = check_header_digest(buf, &layout) {
                                return self.fatal_pending(i, e, ctx.shared);
                            }
                            tracing::warn!(peer = %p.peer, opcode = sqe.opcode,
                                status = %cqe.status,
                                "NVMe/TCP: a queue's first command is not a valid Connect");
                            p.sock.consume(layout.plen);
                            p.sock.queue(capsule_resp(&cqe, neg.hdgst));
                            p.sock.flush(&mut |_| {});
                            continue;
                        }
                    };
                    if let Err(why) = tls::check_connect(&p.sock, buf, &layout) {
                        tracing::warn!(peer = %p.peer, why, "NVMe/TCP TLS: Connect refused");
                        let cqe = ConnectFailure::invalid_host().to_cqe(sqe.cid, c.qid, 0);
                        let shared = ctx.shared;
                        return self.refuse_connect(i, &cqe, neg, shared, "TLS identity");
                    }
                    return self.connect_queue(i, sqe, c, neg, ctx);
                }
            }
        }
        let broken = self.pending[i].as_ref().and_then(|p| p.sock.broken.clone());
        if let Some(why) = broken {
            self.drop_pending(i, ctx.shared, &why);
        }
    }

    /// Makes pending connection `i` the queue its first command, the Fabrics Connect `c`,
    /// names, then lets the core run that command.
    fn connect_queue(
        &mut self,
        i: usize,
        sqe: Sqe,
        c: Connect,
        neg: Negotiated,
        ctx: &mut Ctx<'_>,
    ) {
        let shared = ctx.shared;
        let limits = &shared.fixed.limits;
        if self.pending[i].as_ref().is_some_and(|p| p.over_limit) {
            tracing::warn!(
                qid = c.qid,
                limit = limits.max_connections,
                "limits.max_connections reached: Connect answered Controller Busy"
            );
            let cqe = Cqe::error(sqe.cid, c.qid, 0, Status::CONNECT_CONTROLLER_BUSY);
            return self.refuse_connect(i, &cqe, neg, shared, "limits.max_connections reached");
        }
        let max = if c.qid == 0 {
            ADMIN_QUEUE_DEPTH
        } else {
            limits.max_queue_depth
        };
        // A host asking for more than allowed gets the core's Connect answer (SQSIZE
        // invalid) on a queue of the largest depth allowed.
        let depth = c.queue_entries().clamp(1, max);
        // Capsules only, in ordinary memory: no device reaches an NVMe/TCP queue, and its
        // commands' data takes buffers from the worker's pool when they arrive, so a queue
        // costs no pinned memory and, idle, little resident memory.
        let parcel = Parcel::heap(ParcelLayout::without_data(
            depth,
            limits.in_capsule_data_size.max(ADMIN_CAPSULE_DATA),
        ));
        let Some(p) = self.pending[i].take() else {
            return;
        };
        let key = self.queues.next_key();
        let fd = p.sock.stream.as_raw_fd();
        if !self.epoll.ctl(libc::EPOLL_CTL_MOD, fd, IN, u64::from(key)) {
            tracing::warn!(peer = %p.peer, "epoll refused a connection");
            shared.queues_open.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        let id = QueueId {
            key,
            qid: c.qid,
            depth,
            peer: p.peer,
            listener: p.listener,
        };
        let xport = TcpXport::new(p.sock, neg, depth);
        let icd = limits.in_capsule_data_size;
        let q = Queue::new(xport, parcel, id, Phase::Live, icd, p.created);
        tracing::info!(peer = %q.peer, qid = q.qid, depth, hdgst = neg.hdgst, ddgst = neg.ddgst,
            window_bytes = q.parcel.len(), "queue connected (NVMe/TCP)");
        shared.log_arena("queue connected");
        self.queues.put(q);
        self.on_queue(key, ctx, 0);
    }

    /// Answers pending connection `i`'s Connect with `cqe` (a failure), and closes it once the
    /// answer is written: the host reads why its queue was not made.
    fn refuse_connect(&mut self, i: usize, cqe: &Cqe, neg: Negotiated, shared: &Shared, why: &str) {
        if let Some(p) = self.pending[i].as_mut() {
            p.sock.queue(capsule_resp(cqe, neg.hdgst));
            p.sock.flush(&mut |_| {});
            let _ = p.sock.stream.shutdown(std::net::Shutdown::Write);
        }
        self.drop_pending(i, shared, why);
    }

    /// Sends a TermReq for what pending connection `i` sent, and closes it.
    fn fatal_pending(&mut self, i: usize, e: TermError, shared: &Shared) {
        if let Some(p) = self.pending[i].as_mut() {
            tracing::warn!(peer = %p.peer, error = %e, "NVMe/TCP connection refused");
            let quote = p.sock.received();
            let quote = &quote[..quote.len().min(TERM_REQ_MAX_DATA)];
            let pdu = term_req(e, quote);
            p.sock.queue(pdu);
            p.sock.flush(&mut |_| {});
        }
        self.drop_pending(i, shared, e.what);
    }
}
