//! A worker's NVMe/TCP connections: one epoll set over their sockets, polled without
//! blocking each pass of the worker's loop and slept on when it idles; the connection
//! initialization (ICReq, ICResp) and the first command, the Fabrics Connect that says which
//! queue the connection is and how deep (`group/connect.rs`); then every PDU of the queue:
//! command capsules, H2C data answering our R2Ts, the host's TermReq. Everything a pass queued
//! to send leaves at the end of the pass, with one `sendmsg` per connection.

use std::any::Any;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::nvme::transport::tcp::{pdu_type, TermError, TermReq, DATA_HLEN, TERM_REQ_MAX_DATA};

use super::placed::PlacedCounters;
use super::queue::{TcpQueue, TcpXport};
use super::receive::receive;
use super::socket::{Socket, TxPdu, TX_HEADER_BYTES};
use super::TcpPending;
use crate::arena::pool::DataBuf;
use crate::backend::Completion;
use crate::nvmf::epoll::EpollSet;
use crate::nvmf::queue::begin_close;
use crate::nvmf::request::Tag;
use crate::nvmf::request_flow::{on_sent, Ctx};
use crate::nvmf::transport::{PollGroup, Ready};
use crate::nvmf::worker::queues::Queues;
use crate::nvmf::Shared;

mod connect;
mod pass_share;

use connect::{uncount, Pending};
use pass_share::PassShare;

/// Epoll token of the worker's other descriptor.
const OTHER: u64 = u64::MAX;
/// Epoll tokens of connections not yet a queue: this bit and their index.
const PENDING: u64 = 1 << 62;
/// Events taken per epoll_wait.
const EVENTS: usize = 64;

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
    /// This worker's placement counters (`receive.rs`).
    placed: Arc<PlacedCounters>,
    /// What each host has read this pass (`target.tcp_pass_bytes_per_host`).
    share: PassShare,
}

const IN: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
const IN_OUT: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLOUT) as u32;

impl TcpGroup {
    pub fn new(max_depth: u32, placed: Arc<PlacedCounters>) -> std::io::Result<TcpGroup> {
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
            placed,
            share: PassShare::default(),
        })
    }

    fn epoll_wait(&mut self, timeout_ms: i32) -> usize {
        self.epoll.wait(&mut self.events, timeout_ms)
    }

    /// What queue `key`'s socket brought, as far as its host's share of the pass goes
    /// (`group/pass_share.rs`; 0: no limit).
    fn on_queue(&mut self, key: u32, ctx: &mut Ctx<'_>, per_host: u64) {
        let Some(q) = self.queues.get(key) else {
            return;
        };
        if !q.is_closing() {
            // A connection whose unread data may be OpenSSL's is neither cut short nor
            // counted: nothing would tell the next pass it has more.
            let shared = q.xport.sock.kernel_holds_unread();
            let left = if shared {
                self.share.left(q.host, per_host)
            } else {
                u64::MAX
            };
            if left == 0 {
                return; // its host has had its share: the next pass hears of it again
            }
            let before = q.xport.sock.received_bytes;
            receive(q, &self.placed, ctx, left);
            if shared {
                self.share
                    .spend(q.host, q.xport.sock.received_bytes - before);
            }
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
        let per_host = u64::from(ctx.shared.fixed.target.tcp_pass_bytes_per_host);
        let start = self.share.begin(n);
        for i in 0..n {
            let token = self.events[(start + i) % n].u64;
            if token == OTHER {
                continue;
            }
            any = true;
            if token & PENDING != 0 {
                self.on_pending((token & !PENDING) as usize, ctx);
            } else {
                self.on_queue(token as u32, ctx, per_host);
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
