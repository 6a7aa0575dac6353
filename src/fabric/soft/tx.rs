//! Transmission, run to completion: a QP's requests (requester side) and responses (responder
//! side) go onto its TCP connection from the thread that produced them. The thread that posts a
//! send WR writes its frame; the receive thread writes the ACKs and READ responses it owes once
//! it has read everything the socket held. Both use a non-blocking `sendmsg` under the QP's wire
//! lock ([`Wire`]), so no frame costs a thread hop or a wake-up.
//!
//! The QP's transmit thread ([`run`]) sleeps until something must wait: bytes the socket did not
//! take at once (its send buffer is full: the thread waits until it drains), a request held back
//! by an RNR NAK (the thread waits out the RNR timer), or the teardown.
//!
//! Small frames are coalesced in one buffer and written together when the producer runs out of
//! work, so a burst of posts, or every answer to what one socket read brought, costs one
//! `sendmsg`. Large payloads go straight from registered memory, in the same `sendmsg` as the
//! frames before them; only a part the socket refused is copied, to wait for it.

use std::cell::RefCell;
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use crate::fabric::{Sge, WcStatus};

use super::cm::WRITE_TIMEOUT;
use super::event::wait_fd;
use super::mr::{resolve_local, MrAccess};
use super::qp::QpShared;
use super::queue::{Next, Resp, RespKind, SendQueue, TxKind, TxReq};
use super::wire::{Header, Opcode, Syndrome, FLAG_SOLICITED, HEADER_LEN, MAX_MSG_BYTES};

/// Size of the coalescing buffer: past it, frames are written before more are encoded.
const OUT_CAP: usize = 64 * 1024;
/// Payload pieces at least this large bypass the buffer.
const DIRECT_MIN: usize = 16 * 1024;
/// How long the transmit thread waits for a full socket to drain before it looks at the queue
/// again (a QP being dropped is noticed within this).
const DRAIN_POLL: Duration = Duration::from_millis(100);
/// At teardown, how many [`DRAIN_POLL`]s the transmit thread still gives a full socket to take
/// what is pending (the DISCONNECT among it) before it gives up.
const STOP_DRAIN_TRIES: u32 = 20;

/// A QP's side of its TCP connection: the encoded bytes not yet written, and what the writing
/// needs. Lives in `QpShared::wire`; lock order: wire, then the send queue.
pub(super) struct Wire {
    /// Encoded frames; `out[sent..]` is not on the socket yet.
    out: Vec<u8>,
    sent: usize,
    /// The socket refused bytes (its send buffer is full): `out[sent..]` waits for it.
    refused: Option<Instant>,
    /// DISCONNECT is in `out`: shut the write side down once it is written.
    closing: bool,
    /// False once a write failed or DISCONNECT left: nothing more goes on the wire.
    wire_ok: bool,
    sges: Vec<Sge>,
    accs: Vec<MrAccess>,
}

/// What a [`Wire::pump`] left for the transmit thread.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Pumped {
    /// The socket refused bytes: they wait in the buffer until it drains.
    pub stalled: bool,
    /// A request waits for its RNR timer, until then.
    pub deadline: Option<Instant>,
}

impl Pumped {
    fn needs_thread(&self) -> bool {
        self.stalled || self.deadline.is_some()
    }
}

impl Wire {
    pub fn new(max_sge: usize) -> Wire {
        Wire {
            out: Vec::with_capacity(OUT_CAP + HEADER_LEN),
            sent: 0,
            refused: None,
            closing: false,
            wire_ok: true,
            sges: Vec::with_capacity(max_sge),
            accs: Vec::with_capacity(max_sge),
        }
    }

    fn stalled(&self) -> bool {
        self.refused.is_some()
    }

    /// Encodes and writes everything the QP has to send — queued responses first, then send
    /// WRs in order (executing local WRs on the way), then a requested DISCONNECT — until the
    /// queue has nothing more that may go now or the socket takes no more.
    pub fn pump(&mut self, sh: &QpShared) -> Pumped {
        let fd = sh.stream.as_raw_fd();
        if self.stalled() {
            self.send(sh, fd, &[]);
            if self.stalled() {
                return Pumped {
                    stalled: true,
                    ..Pumped::default()
                };
            }
        }
        loop {
            let mut sq = sh.lock_sq();
            if let Some(r) = sq.responses.pop_front() {
                drop(sq);
                self.response(sh, fd, r);
            } else {
                match sq.next_work(&mut self.sges) {
                    Next::Tx(req) if req.inline => {
                        let data = sq.inline_data(req.idx);
                        let mut h = req_header(sh.qpn, &req);
                        h.length = data.len() as u32;
                        if self.wire_ok {
                            self.out.extend_from_slice(&h.encode());
                            self.out.extend_from_slice(data);
                        }
                    }
                    Next::Tx(req) => {
                        drop(sq);
                        self.request(sh, fd, req);
                    }
                    Next::Blocked(deadline) => return self.finish(sh, fd, sq, deadline),
                    Next::Idle => return self.finish(sh, fd, sq, None),
                }
            }
            if self.out.len() >= OUT_CAP {
                self.send(sh, fd, &[]);
            }
            if self.stalled() {
                return Pumped {
                    stalled: true,
                    ..Pumped::default()
                };
            }
        }
    }

    /// Nothing more may go now: the error state reaches the receive queue, a requested
    /// DISCONNECT goes last, and what was encoded is written.
    fn finish(
        &mut self,
        sh: &QpShared,
        fd: RawFd,
        mut sq: MutexGuard<'_, SendQueue>,
        deadline: Option<Instant>,
    ) -> Pumped {
        sh.sync_error(&sq);
        if sq.disconnect {
            sq.disconnect = false;
            if self.wire_ok {
                let h = Header::new(Opcode::Disconnect, 0, sh.qpn);
                self.out.extend_from_slice(&h.encode());
                self.closing = true;
            }
        }
        drop(sq);
        self.send(sh, fd, &[]);
        Pumped {
            stalled: self.stalled(),
            deadline,
        }
    }

    fn request(&mut self, sh: &QpShared, fd: RawFd, req: TxReq) {
        let is_read = matches!(req.kind, TxKind::Read { .. });
        let mut total: u64 = 0;
        self.accs.clear();
        for s in &self.sges {
            total += s.length as u64;
            match resolve_local(&sh.dev, s.lkey, s.addr, s.length, is_read, sh.pd_id) {
                // A READ's destination is checked again when the response lands.
                Ok(_) if is_read => {}
                Ok(acc) => self.accs.push(acc),
                Err(status) => return self.fail(sh, req.idx, status),
            }
        }
        if total > MAX_MSG_BYTES as u64 {
            return self.fail(sh, req.idx, WcStatus::LocLenErr);
        }
        let mut h = req_header(sh.qpn, &req);
        h.length = total as u32;
        self.header(&h);
        if !is_read {
            let (accs, sges) = (
                std::mem::take(&mut self.accs),
                std::mem::take(&mut self.sges),
            );
            for (acc, s) in accs.iter().zip(&sges) {
                self.payload(sh, fd, acc.slice(s.addr, s.length as usize));
            }
            (self.accs, self.sges) = (accs, sges);
            self.accs.clear();
        }
    }

    fn fail(&mut self, sh: &QpShared, idx: u64, status: WcStatus) {
        self.accs.clear();
        let mut sq = sh.lock_sq();
        sq.complete(idx, status, 0);
        sh.sync_error(&sq);
    }

    fn response(&mut self, sh: &QpShared, fd: RawFd, resp: Resp) {
        let mut h = Header::new(Opcode::Ack, resp.psn, sh.qpn);
        match resp.kind {
            RespKind::Ack => self.header(&h),
            RespKind::Nak(syn) => {
                h.op = Opcode::Nak;
                h.syndrome = syn;
                debug_assert!(syn != Syndrome::None);
                self.header(&h);
            }
            RespKind::ReadResp { acc, addr, len } => {
                h.op = Opcode::ReadResp;
                h.length = len;
                self.header(&h);
                if let Some(acc) = acc {
                    self.payload(sh, fd, acc.slice(addr, len as usize));
                }
            }
        }
    }

    fn header(&mut self, h: &Header) {
        if self.wire_ok {
            self.out.extend_from_slice(&h.encode());
        }
    }

    /// A frame's payload: small pieces join the buffer, large ones are written with it.
    fn payload(&mut self, sh: &QpShared, fd: RawFd, data: &[u8]) {
        if !self.wire_ok {
            return;
        }
        if data.len() < DIRECT_MIN && self.out.len() + data.len() <= OUT_CAP {
            self.out.extend_from_slice(data);
        } else {
            self.send(sh, fd, data);
        }
    }

    /// Writes the unwritten buffer, then `extra`, without blocking; whatever the socket does not
    /// take stays in the buffer (`extra`'s rest copied there) for the next try.
    fn send(&mut self, sh: &QpShared, fd: RawFd, mut extra: &[u8]) {
        if !self.wire_ok {
            self.out.clear();
            self.sent = 0;
            self.refused = None;
            return;
        }
        let mut refused = false;
        loop {
            let head = &self.out[self.sent..];
            if head.is_empty() && extra.is_empty() {
                break;
            }
            let iov = [
                libc::iovec {
                    iov_base: head.as_ptr() as *mut libc::c_void,
                    iov_len: head.len(),
                },
                libc::iovec {
                    iov_base: extra.as_ptr() as *mut libc::c_void,
                    iov_len: extra.len(),
                },
            ];
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = iov.len() as _;
            // SAFETY: `msg` points at two iovecs describing live slices (`head` borrows
            // `self.out`, `extra` the caller's memory) that outlive the call; `fd` is the QP's
            // socket, kept open by `sh.stream`.
            let r = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock => {
                        refused = true;
                        break;
                    }
                    _ => return self.broken(sh, e),
                }
            }
            let mut n = r as usize;
            let from_head = n.min(head.len());
            self.sent += from_head;
            n -= from_head;
            extra = &extra[n..];
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            if self.out.capacity() > 4 * OUT_CAP {
                self.out.shrink_to(OUT_CAP + HEADER_LEN);
            }
        }
        if !extra.is_empty() {
            self.out.extend_from_slice(extra);
        }
        if !refused {
            self.refused = None;
        } else if self.refused.is_none() {
            self.refused = Some(Instant::now());
        }
        if self.closing && !self.stalled() {
            self.closing = false;
            let _ = sh.stream.shutdown(Shutdown::Write);
            self.wire_ok = false;
        }
    }

    /// A peer that has not read for [`WRITE_TIMEOUT`] while we had bytes for it: the
    /// connection fails (the receive thread sees it end), as a blocking write would.
    fn check_stall(&mut self, sh: &QpShared) {
        if self.refused.is_some_and(|t| t.elapsed() > WRITE_TIMEOUT) {
            let e = io::Error::new(io::ErrorKind::TimedOut, "the peer stopped reading");
            self.broken(sh, e);
        }
    }

    fn broken(&mut self, sh: &QpShared, e: io::Error) {
        // The receive thread sees the connection end and runs the disconnect.
        tracing::debug!(qpn = sh.qpn, error = %e, "soft QP write failed");
        self.wire_ok = false;
        self.closing = false;
        self.refused = None;
        self.out.clear();
        self.sent = 0;
        let _ = sh.stream.shutdown(Shutdown::Both);
    }
}

fn req_header(qpn: u32, req: &TxReq) -> Header {
    let op = match req.kind {
        TxKind::Send => Opcode::Send,
        TxKind::SendInv(_) => Opcode::SendInv,
        TxKind::Write { .. } => Opcode::Write,
        TxKind::Read { .. } => Opcode::ReadReq,
    };
    let mut h = Header::new(op, req.psn, qpn);
    match req.kind {
        TxKind::SendInv(rkey) => h.rkey = rkey,
        TxKind::Write { remote_addr, rkey } | TxKind::Read { remote_addr, rkey } => {
            h.remote_addr = remote_addr;
            h.rkey = rkey;
        }
        TxKind::Send => {}
    }
    if req.solicited {
        h.flags |= FLAG_SOLICITED;
    }
    h
}

/// The send batch of this thread (see [`crate::fabric::SendBatch`]): QPs whose posts wait for
/// the batch to end.
struct Batch {
    depth: u32,
    qps: Vec<Arc<QpShared>>,
}

thread_local! {
    static BATCH: RefCell<Batch> = const {
        RefCell::new(Batch {
            depth: 0,
            qps: Vec::new(),
        })
    };
}

pub(super) fn batch_begin() {
    BATCH.with(|b| b.borrow_mut().depth += 1);
}

/// Ends a batch: the outermost end pumps every QP posted to inside it.
pub(super) fn batch_end() {
    let outermost = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        b.depth -= 1;
        b.depth == 0
    });
    if outermost {
        pump_batched();
    }
}

/// Before the thread blocks waiting for completions: what it posted in an open batch leaves now
/// (the batch stays open), so a wait inside a batch never waits for its own unsent requests.
pub(super) fn batch_flush() {
    pump_batched();
}

/// Pumps the QPs the open (or just ended) batch holds back, and empties its list.
fn pump_batched() {
    // Most passes post nothing: look before taking, or the list's capacity would go with it.
    if BATCH.with(|b| b.borrow().qps.is_empty()) {
        return;
    }
    let mut qps = BATCH.with(|b| std::mem::take(&mut b.borrow_mut().qps));
    for sh in &qps {
        pump(sh);
    }
    qps.clear();
    // The list's capacity is kept for the next batch: no allocation per pass.
    BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if b.qps.is_empty() {
            b.qps = qps;
        }
    });
}

/// After a post: pumps now, or at the end of this thread's batch if one is open.
pub(super) fn post_done(sh: &Arc<QpShared>) {
    let deferred = BATCH.with(|b| {
        let mut b = b.borrow_mut();
        if b.depth == 0 {
            return false;
        }
        // Listed once per batch (a short list: the QPs one pass posted to). Each thread
        // keeps its own list, so another thread's open batch never holds this post back.
        if !b.qps.iter().any(|q| Arc::ptr_eq(q, sh)) {
            b.qps.push(Arc::clone(sh));
        }
        true
    });
    if !deferred {
        pump(sh);
    }
}

/// Puts what the QP has to send on the wire from the calling thread (a post, the receive thread
/// after a read); wakes the transmit thread only for what has to wait.
pub(super) fn pump(sh: &QpShared) {
    let p = sh.wire.lock().unwrap().pump(sh);
    if p.needs_thread() {
        sh.lock_sq().tx_kick = true;
        sh.sq_cv.notify_one();
    }
}

/// The transmit thread: sleeps until a pump leaves it work (a full socket, an RNR timer) or
/// the QP is dropped.
pub(super) fn run(sh: Arc<QpShared>) {
    let fd = sh.stream.as_raw_fd();
    let mut stop_tries = 0;
    {
        // Posts pump from their own thread; the first pass here waits to be needed. A pass
        // that ran at start would send what a thread's open send batch still holds.
        let mut sq = sh.lock_sq();
        while !sq.tx_kick && !sq.stop {
            sq = sh.sq_cv.wait(sq).unwrap();
        }
    }
    loop {
        let p = {
            let mut w = sh.wire.lock().unwrap();
            w.check_stall(&sh);
            w.pump(&sh)
        };
        let stop = sh.lock_sq().stop;
        if p.stalled {
            if stop {
                stop_tries += 1;
                if stop_tries > STOP_DRAIN_TRIES {
                    tracing::debug!(qpn = sh.qpn, "soft QP dropped with unsent bytes");
                    return;
                }
            }
            wait_fd(fd, libc::POLLOUT, DRAIN_POLL);
            continue;
        }
        if stop {
            return;
        }
        let mut sq = sh.lock_sq();
        while !sq.tx_kick && !sq.stop {
            match p.deadline {
                None => sq = sh.sq_cv.wait(sq).unwrap(),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    sq = sh.sq_cv.wait_timeout(sq, left).unwrap().0;
                }
            }
        }
        sq.tx_kick = false;
    }
}
