//! A worker's NVMe/TCP connections: one epoll set over their sockets, polled without
//! blocking each pass of the worker's loop and slept on when it idles; the connection
//! initialization (ICReq, ICResp) and the first command, the Fabrics Connect that says which
//! queue the connection is and how deep; then every PDU of the queue: command capsules, H2C
//! data answering our R2Ts, the host's TermReq. Everything a pass queued to send leaves at the
//! end of the pass, with one `sendmsg` per connection.

use std::any::Any;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdmablk::nvme::fabrics::ConnectFailure;
use rdmablk::nvme::opcodes::{self, fctype};
use rdmablk::nvme::transport::tcp::{
    pdu_type, CommonHeader, Direction, Fes, IcReq, IcResp, Negotiated, PduLayout, TermError,
    TermReq, CH_LEN, DATA_HLEN, IC_LEN, TERM_REQ_MAX_DATA,
};
use rdmablk::nvme::{Connect, Cqe, Sqe, Status, SQE_LEN};

use super::queue::{capsule_resp, TcpQueue, TcpXport};
use super::receive::{check_header_digest, receive};
use super::socket::{Socket, TxPdu, TX_HEADER_BYTES};
use super::{TcpPending, ADMIN_CAPSULE_DATA, MAXH2CDATA};
use crate::arena::pool::DataBuf;
use crate::arena::{Parcel, ParcelLayout};
use crate::backend::Completion;
use crate::nvmf::epoll::EpollSet;
use crate::nvmf::queue::{begin_close, Phase, Queue, QueueId};
use crate::nvmf::request::Tag;
use crate::nvmf::request_flow::{on_sent, Ctx};
use crate::nvmf::transport::{PollGroup, Ready};
use crate::nvmf::worker::queues::Queues;
use crate::nvmf::{Shared, ADMIN_QUEUE_DEPTH};

/// Epoll token of the worker's other descriptor.
const OTHER: u64 = u64::MAX;
/// Epoll tokens of connections not yet a queue: this bit and their index.
const PENDING: u64 = 1 << 62;
/// Events taken per epoll_wait.
const EVENTS: usize = 64;

/// A connection between its accept and its Fabrics Connect.
struct Pending {
    sock: Socket,
    peer: SocketAddr,
    listener: u64,
    created: Instant,
    /// Set once the ICReq is answered.
    neg: Option<Negotiated>,
    /// Over `limits.max_connections`: its Connect is answered Controller Busy.
    over_limit: bool,
    /// Its TLS, before NVMe/TCP starts (`tls.rs`).
    tls: super::tls::Stage,
}

/// Gives back what a connection that is not (or no longer) pending counted: its place in
/// `Shared::queues_open`, or in `Shared::refusing` if it came over the limit.
fn uncount(shared: &Shared, over_limit: bool) {
    let counter = if over_limit {
        &shared.refusing
    } else {
        &shared.queues_open
    };
    counter.fetch_sub(1, Ordering::AcqRel);
}

/// A worker's NVMe/TCP connections.
pub struct TcpGroup {
    epoll: EpollSet,
    pending: Vec<Option<Pending>>,
    queues: Queues<TcpXport>,
    events: Vec<libc::epoll_event>,
    /// The worker's other descriptor while it is in the epoll set.
    other: Option<RawFd>,
    /// Queues with requests whose response was written (the core hears at the next poll).
    sent_keys: Vec<u32>,
    /// Transmit queue capacity of a new connection.
    tx_capacity: usize,
    /// No connection at all (as of the last housekeeping, or since the start): a pass does
    /// not ask epoll (a worker serving another transport too polls every pass).
    empty: bool,
    /// Events the last `wait` returned, not yet handled: the next poll takes them instead of
    /// asking epoll again (one system call fewer per wake-up; the set is level-triggered,
    /// so nothing is lost either way).
    woken: usize,
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

const IN: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
const IN_OUT: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLOUT) as u32;

impl TcpGroup {
    pub fn new(max_depth: u32) -> std::io::Result<TcpGroup> {
        Ok(TcpGroup {
            epoll: EpollSet::new()?,
            pending: Vec::new(),
            queues: Queues::default(),
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
            other: None,
            sent_keys: Vec::new(),
            tx_capacity: 3 * max_depth as usize + 8,
            empty: true,
            woken: 0,
        })
    }

    fn epoll_wait(&mut self, timeout_ms: i32) -> usize {
        self.epoll.wait(&mut self.events, timeout_ms)
    }

    fn drop_pending(&mut self, i: usize, shared: &Shared, why: &str) {
        if let Some(p) = self.pending[i].take() {
            tracing::info!(peer = %p.peer, why, "NVMe/TCP connection closed before its Connect");
            uncount(shared, p.over_limit);
        }
    }

    /// What a connection before its Connect sent: the ICReq, then the Connect capsule, which
    /// makes it a queue.
    fn on_pending(&mut self, i: usize, ctx: &mut Ctx<'_>) {
        let Some(p) = self.pending[i].as_mut() else {
            return;
        };
        match super::tls::advance(&mut p.tls, &mut p.sock, p.peer, ctx.shared) {
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
                    if let Err(why) = super::tls::check_connect(&p.sock, buf, &layout) {
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
        self.on_queue(key, ctx);
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

    /// What queue `key`'s socket brought.
    fn on_queue(&mut self, key: u32, ctx: &mut Ctx<'_>) {
        let Some(q) = self.queues.get(key) else {
            return;
        };
        if !q.is_closing() {
            receive(q, ctx);
            close_if_broken(q, ctx.shared);
        }
        // A closed connection (shut down, its output discarded) has nothing more to read or
        // send while its queue drains: out of the epoll set, or its end of file would make
        // every pass busy (and an adaptive worker spin) until housekeeping drops the queue.
        if q.is_closing() && q.xport.sock.broken.is_some() {
            let fd = q.xport.sock.stream.as_raw_fd();
            self.epoll.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
        }
    }

    /// Tells the core of the responses written since the last call (`on_sent`: their request
    /// contexts are free). True if a capsule that waited for a free context was started.
    fn deliver_sent(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut started = false;
        for key in std::mem::take(&mut self.sent_keys) {
            let Some(q) = self.queues.get(key) else {
                continue;
            };
            started |= !q.pending_capsules.is_empty();
            let mut sent = std::mem::take(&mut q.xport.sent);
            for slot in sent.drain(..) {
                on_sent(q, slot, ctx);
            }
            q.xport.sent = sent;
        }
        started
    }

    fn flush_all(&mut self) {
        for q in self.queues.iter_mut() {
            if !q.xport.sock.has_output() || q.xport.sock.broken.is_some() {
                continue;
            }
            let x = &mut q.xport;
            let sent = &mut x.sent;
            let before = sent.len();
            let full = x.sock.flush(&mut |slot| sent.push(slot));
            if sent.len() > before && before == 0 {
                self.sent_keys.push(q.key);
            }
            if full != x.epollout {
                let events = if full { IN_OUT } else { IN };
                let fd = x.sock.stream.as_raw_fd();
                if self
                    .epoll
                    .ctl(libc::EPOLL_CTL_MOD, fd, events, u64::from(q.key))
                {
                    x.epollout = full;
                }
            }
        }
        for p in self.pending.iter_mut().flatten() {
            if p.sock.has_output() {
                p.sock.flush(&mut |_| {});
            }
        }
    }
}

fn blank_pdu() -> TxPdu {
    TxPdu {
        head: [0u8; TX_HEADER_BYTES],
        head_len: 0,
        data: None,
        ddgst: None,
        completes: None,
    }
}

pub(super) fn term_req(e: TermError, quote: &[u8]) -> TxPdu {
    let mut pdu = blank_pdu();
    let b: &mut [u8; DATA_HLEN + TERM_REQ_MAX_DATA] = (&mut pdu.head
        [..DATA_HLEN + TERM_REQ_MAX_DATA])
        .try_into()
        .expect("152 bytes");
    let n = TermReq::from(e).encode(pdu_type::C2H_TERM_REQ, quote, b);
    pdu.head_len = n as u16;
    pdu
}

impl PollGroup for TcpGroup {
    fn add(&mut self, handover: Box<dyn Any + Send>, ctx: &mut Ctx<'_>) {
        let Ok(p) = handover.downcast::<TcpPending>() else {
            tracing::error!("the NVMe/TCP poll group was handed another transport's connection");
            return;
        };
        let TcpPending {
            stream,
            peer,
            listener,
            over_limit,
            tls,
        } = *p;
        let sock = match Socket::new(stream, self.tx_capacity) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%peer, error = %e, "cannot set up an NVMe/TCP connection");
                uncount(ctx.shared, over_limit);
                return;
            }
        };
        self.empty = false;
        let i = match self.pending.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.pending.push(None);
                self.pending.len() - 1
            }
        };
        if !self.epoll.ctl(
            libc::EPOLL_CTL_ADD,
            sock.stream.as_raw_fd(),
            IN,
            PENDING | i as u64,
        ) {
            tracing::warn!(%peer, "epoll refused an NVMe/TCP connection");
            uncount(ctx.shared, over_limit);
            return;
        }
        self.pending[i] = Some(Pending {
            sock,
            peer,
            listener,
            created: Instant::now(),
            neg: None,
            over_limit,
            tls: super::tls::Stage::new(tls),
        });
    }

    fn refuse(&mut self, handover: Box<dyn Any + Send>, shared: &Shared) {
        let over_limit = handover
            .downcast_ref::<TcpPending>()
            .is_some_and(|p| p.over_limit);
        uncount(shared, over_limit);
    }

    fn begin_pass(&mut self) {}

    fn end_pass(&mut self, ctx: &mut Ctx<'_>) -> bool {
        self.flush_all();
        self.deliver_sent(ctx)
    }

    fn poll(&mut self, ctx: &mut Ctx<'_>) -> bool {
        let mut any = self.deliver_sent(ctx);
        if self.empty {
            self.woken = 0;
            return any;
        }
        let n = match std::mem::take(&mut self.woken) {
            0 => self.epoll_wait(0),
            n => n,
        };
        for e in 0..n {
            let token = self.events[e].u64;
            if token == OTHER {
                continue;
            }
            any = true;
            if token & PENDING != 0 {
                self.on_pending((token & !PENDING) as usize, ctx);
            } else {
                self.on_queue(token as u32, ctx);
            }
        }
        any
    }

    fn on_backend(&mut self, tag: Tag, c: &Completion, ctx: &mut Ctx<'_>) {
        self.queues.on_backend(tag, c, ctx);
    }

    fn resume(&mut self, tag: Tag, ctx: &mut Ctx<'_>) {
        self.queues.resume(tag, ctx);
    }

    fn on_buffer(&mut self, key: u32, slot: u32, data: DataBuf, ctx: &mut Ctx<'_>) {
        self.queues.on_buffer(key, slot, data, ctx);
    }

    fn housekeeping(&mut self, ctx: &mut Ctx<'_>) {
        self.queues.deliver_events(ctx);
        self.queues
            .housekeeping(ctx.shared, ctx.pool, close_if_broken, |_| {});
        let connect_ms = u128::from(ctx.shared.fixed.target.connect_timeout_ms);
        for i in 0..self.pending.len() {
            let late = self.pending[i]
                .as_ref()
                .is_some_and(|p| connect_ms != 0 && p.created.elapsed().as_millis() > connect_ms);
            if late {
                self.drop_pending(i, ctx.shared, "no Fabrics Connect in time");
            }
        }
        self.empty = self.pending.iter().all(Option::is_none) && self.queues.is_empty();
    }

    fn close_listener(&mut self, id: u64, shared: &Shared) {
        self.queues.close_listener(id, shared);
        for i in 0..self.pending.len() {
            if self.pending[i].as_ref().is_some_and(|p| p.listener == id) {
                self.drop_pending(i, shared, "listener removed");
            }
        }
    }

    fn shutdown_step(&mut self, first: bool, grace_over: bool, ctx: &mut Ctx<'_>) -> bool {
        self.queues.shutdown_step(first, grace_over, ctx);
        for i in 0..self.pending.len() {
            self.drop_pending(i, ctx.shared, "target shutting down");
        }
        self.queues.is_empty()
    }

    /// The epoll set is level-triggered: whatever arrives between the last poll and the wait
    /// is reported by the wait, so there is nothing to arm and no second look to take (the
    /// pass's end told the core of every response sent).
    fn arm(&mut self, ctx: &mut Ctx<'_>) -> Option<bool> {
        Some(self.deliver_sent(ctx))
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.epoll.fd())
    }

    fn wait(&mut self, other: Option<RawFd>, timeout: Duration) -> Option<Ready> {
        if other != self.other {
            if let Some(old) = self.other.take() {
                self.epoll.ctl(libc::EPOLL_CTL_DEL, old, 0, OTHER);
            }
            if let Some(fd) = other {
                if !self
                    .epoll
                    .ctl(libc::EPOLL_CTL_ADD, fd, libc::EPOLLIN as u32, OTHER)
                {
                    return None;
                }
                self.other = Some(fd);
            }
        }
        let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as i32;
        let n = self.epoll_wait(ms);
        let mut ready = Ready::default();
        for e in &self.events[..n] {
            if e.u64 == OTHER {
                ready.other = true;
            } else {
                ready.events = true;
            }
        }
        self.woken = if ready.events { n } else { 0 };
        Some(ready)
    }
}

/// Begins to close queue `q` if its connection broke (the host closed it, or a send or
/// receive failed) and it is not closing already.
fn close_if_broken(q: &mut TcpQueue, shared: &Shared) {
    if let Some(why) = &q.xport.sock.broken {
        if !q.is_closing() {
            tracing::info!(peer = %q.peer, qid = q.qid, why, "NVMe/TCP connection ended");
            begin_close(q, "host disconnected", shared);
        }
    }
}
