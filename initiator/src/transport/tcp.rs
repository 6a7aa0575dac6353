//! NVMe/TCP for one queue: a TCP connection initialized with ICReq / ICResp (the ICResp
//! checked as the Linux host checks it), command capsules (data up to the in-capsule size
//! inside, 8 KiB for admin and fabrics commands), H2CData answering the target's R2Ts (split
//! at its MAXH2CDATA), C2HData received into the command's buffer, CapsuleResp, header and
//! data digests, and the target's C2HTermReq reported as the queue's failure.
//!
//! Everything a batch of submissions queues leaves with the next poll in as few `write`s as
//! the socket takes.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use rdmablk::nvme::opcodes;
use rdmablk::nvme::transport::tcp::{
    digest, encode_capsule_cmd, flags, pdu_type, CommonHeader, DataHeader, Direction, IcReq,
    IcResp, Negotiated, PduLayout, R2t, TermReq, CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN, DIGEST_LEN,
    IC_LEN,
};
use rdmablk::nvme::{Cqe, InCapsuleSgl, Sgl, Sqe, Status, TransportSgl, CQE_LEN};

use super::{Event, QueueParams, QueueTransport};
use crate::error::{Error, Result};
use crate::queue::{Dir, Seg};
use crate::stats::Stats;

/// In-capsule data of admin and fabrics commands (the Linux host's NVME_TCP_ADMIN_CCSZ).
const ADMIN_CAPSULE_DATA: u32 = 8192;
/// The most data the target may put in one C2HData PDU that we accept.
const MAX_C2H_DATA: u32 = 16 << 20;
/// Receive buffer bytes (grows to the largest PDU seen, within [`MAX_C2H_DATA`]).
const RX_BYTES: usize = 256 * 1024;

/// One queue's TCP connection.
pub(crate) struct TcpLink {
    qid: u16,
    stream: TcpStream,
    neg: Negotiated,
    maxh2cdata: u32,
    in_capsule_bytes: u32,
    /// By command ID: the data the command moves (while it is in flight).
    cmds: Vec<Option<Dir>>,
    /// By command ID: C2H data bytes received so far.
    c2h_got: Vec<u32>,
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    tx: Vec<u8>,
    tx_off: usize,
    /// Commands whose capsule was queued since the last poll.
    sent: Vec<u16>,
    broken: Option<String>,
    stats: Arc<Stats>,
}

fn transport_err(qid: u16, what: String) -> Error {
    Error::Transport { qid, what }
}

impl TcpLink {
    /// Connects queue `p.qid` to `p.addr` and initializes the connection (no NVMe command
    /// yet).
    pub fn connect(
        p: &QueueParams,
        hdgst: bool,
        ddgst: bool,
        stats: Arc<Stats>,
    ) -> Result<TcpLink> {
        let qid = p.qid;
        let mut stream = TcpStream::connect_timeout(&p.addr, p.connect_timeout).map_err(|e| {
            if e.kind() == ErrorKind::ConnectionRefused {
                Error::Refused {
                    qid,
                    addr: p.addr.to_string(),
                }
            } else {
                transport_err(qid, format!("connect to {}: {e}", p.addr))
            }
        })?;
        let io = |e: std::io::Error| transport_err(qid, format!("connection initialization: {e}"));
        stream.set_nodelay(true).map_err(io)?;
        stream
            .set_read_timeout(Some(p.connect_timeout.max(Duration::from_millis(1))))
            .map_err(io)?;
        let req = IcReq {
            pfv: 0,
            hpda: 0,
            hdgst,
            ddgst,
            maxr2t: 0,
        };
        stream.write_all(&req.encode()).map_err(io)?;
        let mut b = [0u8; IC_LEN];
        stream.read_exact(&mut b).map_err(io)?;
        let ch = CommonHeader::decode(b[..CH_LEN].try_into().expect("8 bytes"));
        let bad = |e: rdmablk::nvme::transport::tcp::TermError| {
            Error::protocol(format!("queue {qid}: ICResp: {e}"))
        };
        PduLayout::check(&ch, Direction::ControllerToHost, None, 0).map_err(bad)?;
        let resp = IcResp::decode(&b, &req).map_err(bad)?;
        stream.set_nonblocking(true).map_err(io)?;
        let n = usize::from(p.entries);
        tracing::debug!(
            qid,
            entries = p.entries,
            maxh2cdata = resp.maxh2cdata,
            hdgst,
            ddgst,
            "NVMe/TCP queue connected"
        );
        Ok(TcpLink {
            qid,
            stream,
            neg: Negotiated {
                hdgst,
                ddgst,
                pda: 0,
            },
            maxh2cdata: resp.maxh2cdata,
            in_capsule_bytes: p.in_capsule_bytes,
            cmds: vec![None; n],
            c2h_got: vec![0; n],
            rx: vec![0u8; RX_BYTES],
            rx_start: 0,
            rx_end: 0,
            tx: Vec::with_capacity(64 * 1024),
            tx_off: 0,
            sent: Vec::with_capacity(n),
            broken: None,
            stats,
        })
    }

    /// Appends a PDU: `head` (the header), its digest, padding to `pdo`, `data` and its
    /// digest.
    fn queue_pdu(&mut self, head: &[u8], pdo: usize, data: &[u8]) {
        self.tx.extend_from_slice(head);
        if self.neg.hdgst {
            self.tx.extend_from_slice(&digest(head).to_le_bytes());
        }
        if !data.is_empty() {
            let pad = pdo.saturating_sub(head.len() + if self.neg.hdgst { DIGEST_LEN } else { 0 });
            self.tx.resize(self.tx.len() + pad, 0);
            self.tx.extend_from_slice(data);
            if self.neg.ddgst {
                self.tx.extend_from_slice(&digest(data).to_le_bytes());
            }
        }
    }

    fn flush(&mut self) {
        while self.tx_off < self.tx.len() && self.broken.is_none() {
            match self.stream.write(&self.tx[self.tx_off..]) {
                Ok(0) => self.fail_with("the target closed the connection".into()),
                Ok(n) => self.tx_off += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => self.fail_with(format!("send: {e}")),
            }
        }
        if self.tx_off == self.tx.len() {
            self.tx.clear();
            self.tx_off = 0;
        }
    }

    fn fill(&mut self) {
        if self.rx_start > 0 {
            self.rx.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
        while self.rx_end < self.rx.len() && self.broken.is_none() {
            let asked = self.rx.len() - self.rx_end;
            match self.stream.read(&mut self.rx[self.rx_end..]) {
                Ok(0) => self.fail_with("the target closed the connection".into()),
                Ok(n) => {
                    self.rx_end += n;
                    if n < asked {
                        return; // drained: no second call just to hear EAGAIN
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => self.fail_with(format!("receive: {e}")),
            }
        }
    }

    fn fail_with(&mut self, why: String) {
        self.broken.get_or_insert(why);
    }

    /// Handles the whole PDUs received; Err: a protocol error (the queue fails).
    fn parse(&mut self, events: &mut Vec<Event>) -> std::result::Result<(), String> {
        loop {
            let base = self.rx_start;
            let avail = self.rx_end - base;
            if avail < CH_LEN {
                return Ok(());
            }
            let ch = CommonHeader::decode(self.rx[base..base + CH_LEN].try_into().expect("8"));
            let max = self.maxh2cdata.max(MAX_C2H_DATA);
            let l = PduLayout::check(&ch, Direction::ControllerToHost, Some(self.neg), max)
                .map_err(|e| format!("PDU from the target: {e}"))?;
            if avail < l.plen {
                if l.plen > self.rx.len() {
                    self.rx.resize(l.plen, 0);
                }
                return Ok(());
            }
            let pdu = &self.rx[base..base + l.plen];
            if l.hdgst > 0 {
                let got = u32::from_le_bytes(pdu[l.hlen..l.hlen + 4].try_into().expect("4"));
                if got != digest(&pdu[..l.hlen]) {
                    return Err("header digest mismatch".into());
                }
            }
            let data_at = base + if l.data_len > 0 { l.pdo } else { 0 };
            if l.ddgst > 0 {
                let data = &pdu[l.pdo..l.pdo + l.data_len];
                let at = l.pdo + l.data_len;
                let got = u32::from_le_bytes(pdu[at..at + 4].try_into().expect("4"));
                if got != digest(data) {
                    return Err("data digest mismatch".into());
                }
            }
            let mut header = [0u8; DATA_HLEN];
            header.copy_from_slice(&pdu[..DATA_HLEN.min(l.hlen)]);
            self.rx_start += l.plen;
            match l.pdu_type {
                pdu_type::CAPSULE_RESP => {
                    let cqe = Cqe::decode(header[CH_LEN..CH_LEN + CQE_LEN].try_into().expect("16"));
                    if let Some(c) = self.cmds.get_mut(usize::from(cqe.cid)) {
                        *c = None;
                    }
                    events.push(Event::Response(cqe));
                }
                pdu_type::C2H_DATA => {
                    let h = DataHeader::decode(&header);
                    h.check(&l).map_err(|e| e.to_string())?;
                    let cid = usize::from(h.cccid);
                    let Some(Some(Dir::ToHost(seg))) = self.cmds.get(cid).copied() else {
                        return Err(format!("C2HData for command {cid}, which reads nothing"));
                    };
                    let got = self.c2h_got[cid];
                    if h.datao != got
                        || u64::from(h.datao) + u64::from(h.datal) > u64::from(seg.len)
                    {
                        return Err(format!(
                            "C2HData of command {cid} at {}+{} does not follow its data ({got} of {} bytes)",
                            h.datao, h.datal, seg.len
                        ));
                    }
                    let data = &self.rx[data_at..data_at + l.data_len];
                    // SAFETY: `seg` is the command's buffer, which its queue keeps (and nothing
                    // else touches) until the command completes; the range is within it.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            data.as_ptr(),
                            (seg.addr as *mut u8).add(h.datao as usize),
                            data.len(),
                        )
                    };
                    self.c2h_got[cid] = got + h.datal;
                    if l.flags & flags::DATA_SUCCESS != 0 {
                        if self.c2h_got[cid] != seg.len {
                            return Err(format!("SUCCESS before all of command {cid}'s data"));
                        }
                        self.cmds[cid] = None;
                        events.push(Event::Response(Cqe::error(
                            h.cccid,
                            self.qid,
                            0xFFFF,
                            Status::SUCCESS,
                        )));
                    }
                }
                pdu_type::R2T => {
                    let r = R2t::decode(&header);
                    let cid = usize::from(r.cccid);
                    let Some(Some(Dir::ToCtrl(seg))) = self.cmds.get(cid).copied() else {
                        return Err(format!("R2T for command {cid}, which writes nothing"));
                    };
                    if r.r2tl == 0 || u64::from(r.r2to) + u64::from(r.r2tl) > u64::from(seg.len) {
                        return Err(format!(
                            "R2T for {}+{} of command {cid}'s {} bytes",
                            r.r2to, r.r2tl, seg.len
                        ));
                    }
                    self.send_h2c(r, seg);
                }
                pdu_type::C2H_TERM_REQ => {
                    let (fes, fei) = TermReq::decode(&header);
                    return Err(format!(
                        "the target terminated the connection (C2HTermReq: {fes:?}, field at byte {fei})"
                    ));
                }
                t => return Err(format!("unexpected PDU type {t}")),
            }
        }
    }

    /// Sends the data an R2T asks for, in H2CData PDUs of at most MAXH2CDATA.
    fn send_h2c(&mut self, r: R2t, seg: Seg) {
        let mut off = r.r2to;
        let end = r.r2to + r.r2tl;
        while off < end {
            let len = (end - off).min(self.maxh2cdata);
            let last = off + len == end;
            let h = DataHeader {
                cccid: r.cccid,
                ttag: r.ttag,
                datao: off,
                datal: len,
            };
            let mut b = [0u8; DATA_HLEN];
            let f = if last { flags::DATA_LAST } else { 0 };
            let l = h.encode(pdu_type::H2C_DATA, f, &self.neg, &mut b);
            // SAFETY: `seg` is the command's buffer, kept by its queue until the command
            // completes; the range is within it (checked against the R2T).
            let data = unsafe {
                std::slice::from_raw_parts((seg.addr as *const u8).add(off as usize), len as usize)
            };
            self.queue_pdu(&b, l.pdo, data);
            off += len;
        }
    }
}

impl QueueTransport for TcpLink {
    fn send(&mut self, mut sqe: Sqe, dir: Dir) -> std::result::Result<(), Error> {
        let cid = usize::from(sqe.cid);
        if cid >= self.cmds.len() {
            return Err(Error::protocol(format!("command ID {cid} past the queue")));
        }
        let limit = if self.qid == 0 || sqe.opcode == opcodes::FABRICS {
            ADMIN_CAPSULE_DATA
        } else {
            self.in_capsule_bytes
        };
        let mut in_capsule: &[u8] = &[];
        let sgl = match dir {
            Dir::None => Sgl::Transport(TransportSgl { len: 0 }),
            Dir::ToCtrl(s) if s.len <= limit => {
                // SAFETY: the caller keeps the buffer alive and untouched while the command
                // is in flight; it is copied into the capsule right here.
                in_capsule =
                    unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.len as usize) };
                self.stats.add_in_capsule(s.len);
                Sgl::InCapsule(InCapsuleSgl {
                    offset: 0,
                    len: s.len,
                })
            }
            Dir::ToCtrl(s) => {
                self.stats.add_keyed_write(s.len);
                Sgl::Transport(TransportSgl { len: s.len })
            }
            Dir::ToHost(s) => Sgl::Transport(TransportSgl { len: s.len }),
        };
        sqe.set_sgl(&sgl);
        self.cmds[cid] = match dir {
            Dir::None => None,
            Dir::ToCtrl(_) if !in_capsule.is_empty() => None,
            d => Some(d),
        };
        self.c2h_got[cid] = 0;
        let mut h = [0u8; CAPSULE_CMD_HLEN];
        let l = encode_capsule_cmd(&sqe, in_capsule.len(), &self.neg, &mut h);
        self.queue_pdu(&h, l.pdo, in_capsule);
        self.sent.push(sqe.cid);
        Ok(())
    }

    fn poll(&mut self, events: &mut Vec<Event>) -> std::result::Result<(), String> {
        self.flush();
        for cid in self.sent.drain(..) {
            events.push(Event::Sent(cid));
        }
        self.fill();
        if let Err(why) = self.parse(events) {
            self.fail_with(why);
        }
        self.flush();
        match &self.broken {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    fn check(&mut self) -> std::result::Result<(), String> {
        match &self.broken {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    fn arm(&mut self) -> bool {
        true
    }

    fn wait(&mut self, timeout: Duration, _bulk: bool) {
        self.flush();
        let mut events = libc::POLLIN;
        if self.tx_off < self.tx.len() {
            events |= libc::POLLOUT;
        }
        let mut pfd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events,
            revents: 0,
        };
        let ms = timeout.as_millis().clamp(0, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, ms) };
    }

    fn disconnect(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        self.fail_with("disconnected".into());
    }

    fn set_in_capsule_bytes(&mut self, n: u32) {
        self.in_capsule_bytes = n;
    }
}
