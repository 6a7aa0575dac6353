//! NVMe/TCP: `tcp://`, opened for a controller with the digests its options ask for
//! ([`TcpFabric`]). One queue ([`TcpLink`]) is a TCP connection initialized with ICReq / ICResp (the ICResp
//! checked as the Linux host checks it), command capsules (data up to the in-capsule size
//! inside, 8 KiB for admin and fabrics commands), H2CData answering the target's R2Ts (split
//! at its MAXH2CDATA), C2HData received into the command's buffer, CapsuleResp, header and
//! data digests, and the target's C2HTermReq reported as the queue's failure.
//!
//! Receiving: the socket is read into the queue's receive buffer, and each PDU is checked
//! there ([`HostRx`]). A C2HData PDU of [`PLACE_FROM`] bytes or more whose data has not all
//! arrived is checked from its header and the rest of its data is read from the socket
//! straight into the command's buffer ("placed"): the kernel's copy is the only one, as in
//! the Linux host. A poll hands back at most [`responses_per_poll`] responses and keeps the
//! rest for the next, so that the host submits again while the target's answers still come.
//!
//! Sending: everything a batch of submissions queues leaves with the next poll in as few
//! writes as the socket takes ([`SendQueue`]): in-capsule data and H2CData of
//! [`BORROW_FROM`] bytes or more are written from the command's buffer, not copied.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use rdmablk::nvme::discovery::trtype;
use rdmablk::nvme::opcodes;
use rdmablk::nvme::transport::tcp::host_rx::{Expect, HostRx};
use rdmablk::nvme::transport::tcp::{
    digest, encode_capsule_cmd, flags, pdu_type, CommonHeader, DataHeader, Direction, IcReq,
    IcResp, Negotiated, PduLayout, R2t, CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN, DIGEST_LEN, IC_LEN,
};
use rdmablk::nvme::{InCapsuleSgl, Sgl, SglNeed, Sqe, TransportSgl};

use super::tcp_tls::{Stream, TlsOffer};
use super::{Dir, Event, Fabric, QueueParams, QueueTransport, Transport, TransportOps};
use crate::buf::BufPool;
use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::stats::Stats;
use receive::{Placing, PLACE_FROM, RX_BYTES};
use send::{SendQueue, BORROW_FROM};

mod receive;
mod send;

/// In-capsule data of admin and fabrics commands (the Linux host's NVME_TCP_ADMIN_CCSZ).
const ADMIN_CAPSULE_DATA: u32 = 8192;
/// The most data the target may put in one C2HData PDU that we accept.
const MAX_C2H_DATA: u32 = 16 << 20;

/// One queue's TCP connection.
pub(crate) struct TcpLink {
    qid: u16,
    stream: Stream,
    neg: Negotiated,
    maxh2cdata: u32,
    in_capsule_bytes: u32,
    /// Checks what the target sends against the data of each command in flight.
    rx_check: HostRx,
    /// By command ID: the address of the command's data buffer (of the length `rx_check`
    /// was told; used only for the ranges it hands back).
    buf_addr: Vec<u64>,
    rx: Vec<u8>,
    rx_start: usize,
    rx_end: usize,
    tx: SendQueue,
    /// Commands whose capsule was queued since the last poll.
    sent: Vec<u16>,
    /// The C2HData being placed; once its data is in, its digest is the next thing on the
    /// stream (if it has one).
    placing: Option<Placing>,
    /// The most one read into `rx` takes: `PLACE_READ` while the last C2HData was one to
    /// place, all of `rx` otherwise.
    read_max: usize,
    /// Bytes read from the stream so far (for `tcp::ack`: a read of bulk data is
    /// acknowledged at once).
    rx_bytes: u64,
    broken: Option<String>,
    stats: Arc<Stats>,
    /// Commands whose response has not come yet (capsules sent less responses received).
    outstanding: usize,
    /// This poll's limit on `events.len()` ([`responses_per_poll`]).
    events_max: usize,
    /// The last poll stopped at its limit with PDUs left in `rx`: the next one parses them
    /// before it reads the socket, and `wait` does not sleep.
    held: bool,
    /// The last poll read or wrote bytes (whether or not anything completed).
    moved: bool,
}

/// The most responses one poll hands back with `outstanding` commands awaiting theirs: half of
/// them (at least 4). The rest wait in the receive buffer for the next poll, which takes them
/// without a read. The application submits again between polls, so new commands leave while the
/// target's answers are still being handled: host and target overlap instead of taking turns
/// with the whole queue's worth (2026-12-07, rdmablk-perf against rdmablk-target, one core
/// each: the 4K 70/30 mix at QD32 went from 0.59x to about 1.0x of `spdk_nvme_perf`'s IOPS;
/// half the queue beat a quarter at 4K randread QD32 by 1.13x at 0.88x the host's CPU per I/O,
/// `docs/benchmarks.md`).
fn responses_per_poll(outstanding: usize) -> usize {
    (outstanding / 2).max(4)
}

fn transport_err(qid: u16, what: String) -> Error {
    Error::Transport { qid, what }
}

/// NVMe/TCP's row of the transport table (its buffer pool is plain memory).
pub(crate) struct Tcp;

impl TransportOps for Tcp {
    fn schemes(&self) -> &'static [&'static str] {
        &["tcp"]
    }

    fn trtype(&self) -> u8 {
        trtype::TCP
    }

    /// Measured over NVMe/TCP (`crate::options::DEFAULT_POLL_SPIN_US`).
    fn default_poll_spin_us(&self) -> u32 {
        crate::options::DEFAULT_POLL_SPIN_US
    }

    fn open(
        &self,
        _: Transport,
        subnqn: &str,
        opts: &ConnectOptions,
        _: &BufPool,
    ) -> Result<Arc<dyn Fabric>> {
        Ok(Arc::new(TcpFabric {
            hdr_digest: opts.hdr_digest,
            data_digest: opts.data_digest,
            tls: TlsOffer::of(opts, subnqn),
        }))
    }
}

/// NVMe/TCP opened for one controller: the digests its queues ask for, and TLS if a key is
/// given (the identity names the controller's subsystem).
struct TcpFabric {
    hdr_digest: bool,
    data_digest: bool,
    tls: Option<TlsOffer>,
}

impl Fabric for TcpFabric {
    fn sgl_need(&self) -> SglNeed {
        SglNeed::None
    }

    fn connect(&self, p: &QueueParams, stats: Arc<Stats>) -> Result<Box<dyn QueueTransport>> {
        let link = TcpLink::connect(
            p,
            self.hdr_digest,
            self.data_digest,
            self.tls.as_ref(),
            stats,
        )?;
        Ok(Box::new(link))
    }
}

impl TcpLink {
    /// Connects queue `p.qid` to `p.addr` and initializes the connection (no NVMe command
    /// yet).
    pub fn connect(
        p: &QueueParams,
        hdgst: bool,
        ddgst: bool,
        tls: Option<&TlsOffer>,
        stats: Arc<Stats>,
    ) -> Result<TcpLink> {
        let qid = p.qid;
        let started = std::time::Instant::now();
        let stream = TcpStream::connect_timeout(&p.addr, p.connect_timeout).map_err(|e| {
            if e.kind() == ErrorKind::ConnectionRefused {
                Error::Refused {
                    qid,
                    addr: p.addr.to_string(),
                    hint: "nothing listens on that TCP port: is the target running, with a tcp listener there?",
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
        let mut stream = Stream::start(stream, tls, started + p.connect_timeout)
            .map_err(|why| transport_err(qid, format!("{}: {why}", p.addr)))?;
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
        let neg = Negotiated {
            hdgst,
            ddgst,
            pda: 0,
        };
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
            neg,
            maxh2cdata: resp.maxh2cdata,
            in_capsule_bytes: p.in_capsule_bytes,
            rx_check: {
                let mut c = HostRx::new(n, neg, resp.maxh2cdata.max(MAX_C2H_DATA));
                c.place_from(PLACE_FROM);
                c
            },
            buf_addr: vec![0; n],
            rx: vec![0u8; RX_BYTES],
            rx_start: 0,
            rx_end: 0,
            tx: SendQueue::new(n),
            sent: Vec::with_capacity(n),
            placing: None,
            read_max: RX_BYTES,
            rx_bytes: 0,
            broken: None,
            stats,
            outstanding: 0,
            events_max: usize::MAX,
            held: false,
            moved: false,
        })
    }

    /// Appends a PDU of command `cid`: `head` (the header), its digest, padding to `pdo`,
    /// `data` (from the command's buffer) and its digest.
    ///
    /// # Safety
    /// `data` stays readable and unchanged until the command completes or the connection
    /// fails (as [`SendQueue::push_borrowed`] asks).
    unsafe fn queue_pdu(&mut self, cid: u16, head: &[u8], pdo: usize, data: &[u8]) {
        self.tx.push_own(head);
        if self.neg.hdgst {
            self.tx.push_own(&digest(head).to_le_bytes());
        }
        if !data.is_empty() {
            let pad = pdo.saturating_sub(head.len() + if self.neg.hdgst { DIGEST_LEN } else { 0 });
            self.tx.push_zeros(pad);
            if data.len() < BORROW_FROM {
                self.tx.push_own(data);
            } else {
                // SAFETY: this function's contract.
                unsafe { self.tx.push_borrowed(cid, data) };
            }
            if self.neg.ddgst {
                self.tx.push_own(&digest(data).to_le_bytes());
            }
        }
    }

    fn flush(&mut self) {
        if self.stream.has_pending_output() && self.broken.is_none() {
            if let Err(e) = self.stream.push_output() {
                self.fail_with(format!("send: {e}"));
            }
        }
        if self.broken.is_some() {
            return;
        }
        match self.tx.flush(&mut self.stream) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::WriteZero => {
                self.fail_with("the target closed the connection".into())
            }
            Err(e) => self.fail_with(format!("send: {e}")),
        }
    }

    fn fail_with(&mut self, why: String) {
        self.broken.get_or_insert(why);
        // Nothing more goes into a command's buffer on a broken connection, and nothing more
        // is read from one: the queue gives the buffers back.
        self.placing = None;
        self.tx.clear();
    }

    /// Sends the data an R2T asks for (checked against the command's length) from the
    /// command's buffer at `addr`, in H2CData PDUs of at most MAXH2CDATA.
    fn send_h2c(&mut self, r: R2t, addr: u64) {
        if self.broken.is_some() {
            return; // nothing more is sent (an R2T parsed from what came before the break)
        }
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
            // SAFETY: `addr` is the command's buffer, kept by its queue until the command
            // completes (`poll` releases it from `tx` before its response is reported); the
            // range is within it (`rx_check` checked the R2T).
            unsafe {
                let data =
                    std::slice::from_raw_parts((addr as *const u8).add(off as usize), len as usize);
                self.queue_pdu(r.cccid, &b, l.pdo, data);
            }
            off += len;
        }
    }
}

impl QueueTransport for TcpLink {
    fn send(&mut self, mut sqe: Sqe, dir: Dir) -> std::result::Result<(), Error> {
        let cid = usize::from(sqe.cid);
        if cid >= self.rx_check.entries() {
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
                // is in flight (until its response, which `poll` releases it from `tx` for).
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
        let (expect, addr) = match dir {
            Dir::None => (Expect::Nothing, 0),
            Dir::ToCtrl(s) if !in_capsule.is_empty() => (Expect::Nothing, s.addr),
            Dir::ToCtrl(s) => (Expect::ToCtrl { len: s.len }, s.addr),
            Dir::ToHost(s) => (Expect::ToHost { len: s.len }, s.addr),
        };
        self.rx_check.expect(sqe.cid, expect);
        self.buf_addr[cid] = addr;
        let mut h = [0u8; CAPSULE_CMD_HLEN];
        let l = encode_capsule_cmd(&sqe, in_capsule.len(), &self.neg, &mut h);
        // SAFETY: `in_capsule` is the command's buffer, as above.
        unsafe { self.queue_pdu(sqe.cid, &h, l.pdo, in_capsule) };
        self.sent.push(sqe.cid);
        self.outstanding += 1;
        Ok(())
    }

    fn poll(&mut self, events: &mut Vec<Event>) -> std::result::Result<(), String> {
        let moved_before = self.rx_bytes + self.tx.sent_bytes;
        self.flush();
        for cid in self.sent.drain(..) {
            events.push(Event::Sent(cid));
        }
        let answered = events.len();
        self.events_max = answered + responses_per_poll(self.outstanding);
        if let Err(why) = self.receive(events) {
            self.fail_with(why);
        }
        // A command answered gives its buffer back: nothing of it may stay queued (a
        // target answers only once it has the data, unless it misbehaves).
        for ev in &events[answered..] {
            if let Event::Response(cqe) = ev {
                self.tx.release(cqe.cid);
                self.outstanding = self.outstanding.saturating_sub(1);
            }
        }
        self.flush();
        self.moved = self.rx_bytes + self.tx.sent_bytes != moved_before;
        match &self.broken {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    fn moved(&self) -> bool {
        self.moved
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
        if self.held || self.stream.has_buffered_input() {
            return; // responses in hand, or TLS holds what the socket will not signal
        }
        let mut events = libc::POLLIN;
        if !self.tx.is_empty() || self.stream.has_pending_output() {
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
