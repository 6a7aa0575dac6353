//! The transmit thread of a QP: puts requests (requester side) and responses (responder side)
//! on the TCP connection.
//!
//! Small frames are coalesced in one reusable buffer and written when the thread runs out of
//! work (or the buffer fills), so a burst of posts costs one `write`. Large payloads are
//! written straight from registered memory, never copied into the buffer.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::Instant;

use crate::fabric::{Sge, WcStatus};

use super::mr::{resolve_local, MrAccess};
use super::qp::QpShared;
use super::queue::{Next, Resp, RespKind, TxKind, TxReq};
use super::wire::{Header, Opcode, Syndrome, FLAG_SOLICITED, MAX_MSG_BYTES};

/// Size of the coalescing buffer.
const OUT_CAP: usize = 64 * 1024;
/// Payload pieces at least this large bypass the buffer.
const DIRECT_MIN: usize = 16 * 1024;

enum Work {
    Req(TxReq),
    Resp(Resp),
    Disconnect,
    Flush,
    Stop,
}

struct Tx {
    sh: Arc<QpShared>,
    stream: TcpStream,
    out: Vec<u8>,
    sges: Vec<Sge>,
    accs: Vec<MrAccess>,
    /// False once a write failed or DISCONNECT left: nothing more goes on the wire.
    wire_ok: bool,
}

pub(super) fn run(sh: Arc<QpShared>, stream: TcpStream) {
    let max_sge = sh.caps.max_send_sge as usize;
    let mut tx = Tx {
        sh,
        stream,
        out: Vec::with_capacity(OUT_CAP + super::wire::HEADER_LEN),
        sges: Vec::with_capacity(max_sge),
        accs: Vec::with_capacity(max_sge),
        wire_ok: true,
    };
    loop {
        match tx.next_work() {
            Work::Req(req) => tx.request(req),
            Work::Resp(resp) => tx.response(resp),
            Work::Flush => tx.flush(),
            Work::Disconnect => {
                tx.header(&Header::new(Opcode::Disconnect, 0, tx.sh.qpn));
                tx.flush();
                let _ = tx.stream.shutdown(Shutdown::Write);
                tx.wire_ok = false;
            }
            Work::Stop => {
                tx.flush();
                return;
            }
        }
    }
}

impl Tx {
    /// Waits for something to do; inline requests are encoded on the way, under the lock.
    fn next_work(&mut self) -> Work {
        let sh = self.sh.clone();
        let mut sq = sh.lock_sq();
        loop {
            if let Some(r) = sq.responses.pop_front() {
                return Work::Resp(r);
            }
            let mut deadline = None;
            match sq.next_work(&mut self.sges) {
                Next::Tx(req) if req.inline => {
                    let data = sq.inline_data(req.idx);
                    let mut h = self.req_header(&req);
                    h.length = data.len() as u32;
                    if self.wire_ok {
                        self.out.extend_from_slice(&h.encode());
                        self.out.extend_from_slice(data);
                    }
                    if self.out.len() >= OUT_CAP {
                        return Work::Flush;
                    }
                    continue;
                }
                Next::Tx(req) => return Work::Req(req),
                Next::Blocked(t) => deadline = t,
                Next::Idle => {}
            }
            sh.sync_error(&sq);
            if sq.disconnect {
                sq.disconnect = false;
                return Work::Disconnect;
            }
            if !self.out.is_empty() {
                return Work::Flush;
            }
            if sq.stop {
                return Work::Stop;
            }
            sq = match deadline {
                None => sh.sq_cv.wait(sq).unwrap(),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    sh.sq_cv.wait_timeout(sq, left).unwrap().0
                }
            };
        }
    }

    fn req_header(&self, req: &TxReq) -> Header {
        let op = match req.kind {
            TxKind::Send => Opcode::Send,
            TxKind::SendInv(_) => Opcode::SendInv,
            TxKind::Write { .. } => Opcode::Write,
            TxKind::Read { .. } => Opcode::ReadReq,
        };
        let mut h = Header::new(op, req.psn, self.sh.qpn);
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

    fn request(&mut self, req: TxReq) {
        let is_read = matches!(req.kind, TxKind::Read { .. });
        let mut total: u64 = 0;
        self.accs.clear();
        for s in &self.sges {
            total += s.length as u64;
            match resolve_local(
                &self.sh.dev,
                s.lkey,
                s.addr,
                s.length,
                is_read,
                self.sh.pd_id,
            ) {
                // A READ's destination is checked again when the response lands.
                Ok(_) if is_read => {}
                Ok(acc) => self.accs.push(acc),
                Err(status) => return self.fail(req.idx, status),
            }
        }
        if total > MAX_MSG_BYTES as u64 {
            return self.fail(req.idx, WcStatus::LocLenErr);
        }
        let mut h = self.req_header(&req);
        h.length = total as u32;
        self.header(&h);
        if !is_read {
            let accs = std::mem::take(&mut self.accs);
            for (i, acc) in accs.iter().enumerate() {
                let s = self.sges[i];
                self.payload(acc.slice(s.addr, s.length as usize));
            }
            self.accs = accs;
            self.accs.clear();
        }
        if self.out.len() >= OUT_CAP {
            self.flush();
        }
    }

    fn fail(&mut self, idx: u64, status: WcStatus) {
        self.accs.clear();
        let mut sq = self.sh.lock_sq();
        sq.complete(idx, status, 0);
        self.sh.sync_error(&sq);
    }

    fn response(&mut self, resp: Resp) {
        let mut h = Header::new(Opcode::Ack, resp.psn, self.sh.qpn);
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
                    self.payload(acc.slice(addr, len as usize));
                }
            }
        }
        if self.out.len() >= OUT_CAP {
            self.flush();
        }
    }

    fn header(&mut self, h: &Header) {
        if self.wire_ok {
            self.out.extend_from_slice(&h.encode());
        }
    }

    fn payload(&mut self, data: &[u8]) {
        if !self.wire_ok {
            return;
        }
        if data.len() < DIRECT_MIN && self.out.len() + data.len() <= OUT_CAP {
            self.out.extend_from_slice(data);
        } else {
            self.flush();
            self.write(data);
        }
    }

    fn flush(&mut self) {
        if !self.out.is_empty() {
            let out = std::mem::take(&mut self.out);
            self.write(&out);
            self.out = out;
            self.out.clear();
        }
    }

    fn write(&mut self, data: &[u8]) {
        if !self.wire_ok {
            return;
        }
        if let Err(e) = self.stream.write_all(data) {
            // The receive thread sees the connection end and runs the disconnect.
            tracing::debug!(qpn = self.sh.qpn, error = %e, "soft QP write failed");
            self.wire_ok = false;
            let _ = self.stream.shutdown(Shutdown::Both);
        }
    }
}
