//! The raw test host's NVMe/TCP link: one TCP connection initialized as the Linux host does
//! it (ICReq with PFV 0, HPDA 0, MAXR2T 0, digests off; ICResp checked as the Linux host
//! checks it), command capsules with in-capsule data, H2CData answering each R2T from the
//! host buffer, C2HData into it, CapsuleResp. The PDU codecs are
//! `rdmablk::nvme::transport::tcp`'s; what the target sends is checked PDU by PDU as
//! rdmablk-initiator checks it (`host_rx`: C2HData in order and within its command, R2Ts within
//! their write, SUCCESS only at the end), so a conformance run over NVMe/TCP also fails on a
//! target PDU a host would refuse.
//!
//! The functions that put a PDU on the wire and take one off it ([`initialize`],
//! [`assemble`], [`split`]) are also the NVMe/TCP-only tests' (`target/tests/tcp_host/`,
//! which sends malformed PDUs, digests and R2T answers by hand).
//!
//! NVMe/TCP has no keyed SGLs: a command's data outside the capsule is described by a
//! Transport SGL Data Block (0x5A) that names only its length, so the link keeps every
//! command's data at the start of the host's data area, the offset the other links' keyed
//! SGLs name in the tests (see `Host::keyed`).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use rdmablk::nvme::opcodes;
use rdmablk::nvme::transport::tcp::host_rx::{Expect, HostPdu, HostRx, HostRxError, Next};
use rdmablk::nvme::transport::tcp::{
    digest, encode_capsule_cmd, flags, pdu_type, CommonHeader, DataHeader, Direction, IcReq,
    IcResp, Negotiated, PduLayout, R2t, CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN, DIGEST_LEN, IC_LEN,
};
use rdmablk::nvme::{Cqe, Sgl, Sqe, Status, SQE_LEN};

/// The most data a PDU from the target may carry (its largest C2HData is MDTS, 128 KiB).
pub const MAX_PDU_DATA: u32 = 1 << 20;

/// Initializes a new connection as the Linux host does (ICReq: PFV 0, HPDA 0, MAXR2T 0, the
/// digests asked for) and checks the ICResp as the Linux host checks it; the PDUs' shape
/// from then on and the ICResp.
pub fn initialize(
    s: &mut TcpStream,
    hdgst: bool,
    ddgst: bool,
) -> std::io::Result<(Negotiated, IcResp)> {
    let req = IcReq {
        pfv: 0,
        hpda: 0,
        hdgst,
        ddgst,
        maxr2t: 0,
    };
    s.write_all(&req.encode())?;
    let mut b = [0u8; IC_LEN];
    s.read_exact(&mut b)?;
    let ch = CommonHeader::decode(b[..CH_LEN].try_into().expect("8 bytes"));
    PduLayout::check(&ch, Direction::ControllerToHost, None, 0).expect("ICResp header");
    let resp = IcResp::decode(&b, &req).expect("an ICResp as the Linux host checks it");
    assert!(resp.maxh2cdata >= 4096, "MAXH2CDATA {}", resp.maxh2cdata);
    let neg = Negotiated {
        hdgst,
        ddgst,
        pda: 0,
    };
    Ok((neg, resp))
}

/// A whole PDU from its `header` (common header included) laid out as `l` says: the header
/// digest if `neg` has them, padding to PDO, `data`, and `data_digest` after it if `neg` has
/// data digests (a test may pass a wrong one).
pub fn assemble(
    header: &[u8],
    l: &PduLayout,
    neg: &Negotiated,
    data: &[u8],
    data_digest: u32,
) -> Vec<u8> {
    let mut pdu = header.to_vec();
    if neg.hdgst {
        pdu.extend_from_slice(&digest(header).to_le_bytes());
    }
    if !data.is_empty() {
        pdu.resize(l.pdo, 0);
        pdu.extend_from_slice(data);
        if neg.ddgst {
            pdu.extend_from_slice(&data_digest.to_le_bytes());
        }
    }
    pdu
}

/// A whole PDU received, laid out as `l` says, cut into its header and its data; its header
/// and data digests, where it has them, must be right.
pub fn split<'a>(l: &PduLayout, pdu: &'a [u8]) -> (&'a [u8], &'a [u8]) {
    let header = &pdu[..l.hlen];
    if l.hdgst > 0 {
        let got = u32::from_le_bytes(pdu[l.hlen..l.hlen + DIGEST_LEN].try_into().expect("4"));
        assert_eq!(got, digest(header), "header digest of type {}", l.pdu_type);
    }
    let data = &pdu[l.pdo.max(l.hlen)..][..l.data_len];
    if l.ddgst > 0 {
        let at = l.pdo + l.data_len;
        let got = u32::from_le_bytes(pdu[at..at + DIGEST_LEN].try_into().expect("4"));
        assert_eq!(got, digest(data), "data digest of type {}", l.pdu_type);
    }
    (header, data)
}

/// One NVMe/TCP queue's connection, from the host's side.
pub struct TcpLink {
    s: TcpStream,
    neg: Negotiated,
    /// The ICResp's MAXH2CDATA: H2CData PDUs carry at most this much.
    maxh2cdata: u32,
    /// The queue's ID, as the response a SUCCESS C2HData stands for names it.
    qid: u16,
    /// The host's data area: C2HData lands here, H2CData is sent from here.
    data: RefCell<Vec<u8>>,
    /// Bytes received, not yet a whole PDU.
    rx: RefCell<Vec<u8>>,
    /// What the target sends, checked as rdmablk-initiator checks it (by command ID: what
    /// each command's data does).
    check: RefCell<HostRx>,
    /// What one read takes from the socket.
    chunk: RefCell<Vec<u8>>,
    /// Responses received, not taken yet.
    held: RefCell<VecDeque<Cqe>>,
    /// The target's C2HTermReq, if it sent one.
    term: RefCell<Option<String>>,
    /// Why the connection ended (end of stream, a reset), once it has.
    closed: RefCell<Option<String>>,
}

impl TcpLink {
    /// Connects to `addr` for queue `qid` and initializes the connection; `data_len` is the
    /// size of the host's data area.
    pub fn connect(addr: SocketAddr, qid: u16, data_len: usize) -> std::io::Result<TcpLink> {
        let mut s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let (neg, resp) = initialize(&mut s, false, false)?;
        Ok(TcpLink {
            s,
            neg,
            maxh2cdata: resp.maxh2cdata,
            qid,
            data: RefCell::new(vec![0; data_len]),
            rx: RefCell::new(Vec::new()),
            check: RefCell::new(HostRx::new(1 << 16, neg, MAX_PDU_DATA)),
            chunk: RefCell::new(vec![0; 256 << 10]),
            held: RefCell::new(VecDeque::new()),
            term: RefCell::new(None),
            closed: RefCell::new(None),
        })
    }

    /// Sends `capsule` (an SQE and its in-capsule data) as a CapsuleCmd PDU, byte for byte.
    /// Fewer than 64 bytes cannot be a CapsuleCmd: they go out behind a common header
    /// whose PLEN is below its HLEN, a PDU the target must refuse. False if the connection
    /// is gone.
    pub fn send_capsule(&self, capsule: &[u8]) -> bool {
        let pdu = if capsule.len() < SQE_LEN {
            let mut pdu = [0u8; CH_LEN].to_vec();
            CommonHeader {
                pdu_type: pdu_type::CAPSULE_CMD,
                flags: 0,
                hlen: CAPSULE_CMD_HLEN as u8,
                pdo: 0,
                plen: (CH_LEN + capsule.len()) as u32,
            }
            .encode(&mut pdu);
            pdu.extend_from_slice(capsule);
            pdu
        } else {
            let (sqe, data) = capsule.split_at(SQE_LEN);
            let sqe: &[u8; SQE_LEN] = sqe.try_into().expect("64 bytes");
            let decoded = Sqe::decode(sqe);
            let e = expect_of(&decoded);
            self.check.borrow_mut().expect(decoded.cid, e);
            capsule_pdu(sqe, data, &self.neg, digest(data))
        };
        (&self.s).write_all(&pdu).is_ok()
    }

    /// Takes what the target sent within `wait`: responses held, R2Ts answered, C2HData
    /// placed, a C2HTermReq or the end of the connection noted.
    pub fn poll(&self, wait: Duration) {
        if self.closed.borrow().is_some() {
            return;
        }
        let mut chunk = self.chunk.borrow_mut();
        let _ = self
            .s
            .set_read_timeout(Some(wait.max(Duration::from_millis(1))));
        match (&self.s).read(&mut chunk) {
            Ok(0) => self.close("the target closed the connection".into()),
            Ok(n) => self.rx.borrow_mut().extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => self.close(format!("the connection failed: {e}")),
        }
        drop(chunk);
        let mut rx = self.rx.borrow_mut();
        loop {
            let next = self.check.borrow_mut().next(&rx);
            let len = match next {
                Ok(Next::NeedMore { .. }) => return,
                Ok(Next::Pdu { pdu, len }) => {
                    self.on_pdu(pdu);
                    len
                }
                Ok(Next::Place(p)) => unreachable!("no placement asked for: {p:?}"),
                Err(e @ HostRxError::TermReq { .. }) => {
                    self.term.borrow_mut().get_or_insert(e.to_string());
                    rx.clear();
                    return;
                }
                Err(e) => panic!("the target's PDUs, as rdmablk-initiator checks them: {e}"),
            };
            rx.drain(..len);
        }
    }

    fn close(&self, why: String) {
        self.closed.borrow_mut().get_or_insert(why);
    }

    fn on_pdu(&self, pdu: HostPdu<'_>) {
        match pdu {
            HostPdu::Response(cqe) => self.held.borrow_mut().push_back(cqe),
            HostPdu::C2hData {
                cid,
                offset,
                data,
                success,
            } => {
                let at = offset as usize;
                self.data.borrow_mut()[at..at + data.len()].copy_from_slice(data);
                if success {
                    // The command succeeded and no CapsuleResp follows (SQ flow control off:
                    // SQHD reserved, 0xFFFF as nvmet and rdmablk report it then).
                    let cqe = Cqe::error(cid, self.qid, 0xFFFF, Status::SUCCESS);
                    self.held.borrow_mut().push_back(cqe);
                }
            }
            HostPdu::R2t(r) => self.answer_r2t(r),
        }
    }

    /// H2CData PDUs of at most MAXH2CDATA for the data the R2T asks for, LAST on the final.
    fn answer_r2t(&self, r: R2t) {
        let data = self.data.borrow();
        let (from, len) = (r.r2to as usize, r.r2tl as usize);
        assert!(
            len > 0 && from + len <= data.len(),
            "an R2T beyond the host's data area: {r:?}"
        );
        let mut at = from;
        while at < from + len {
            let n = (from + len - at).min(self.maxh2cdata as usize);
            let last = at + n == from + len;
            let h = DataHeader {
                cccid: r.cccid,
                ttag: r.ttag,
                datao: at as u32,
                datal: n as u32,
            };
            let chunk = &data[at..at + n];
            let pdu = h2c_pdu(&h, last, chunk, &self.neg, digest(chunk));
            if (&self.s).write_all(&pdu).is_err() {
                return; // the target closed the connection: poll sees it
            }
            at += n;
        }
    }

    /// The next response received, if any.
    pub fn take_response(&self) -> Option<Cqe> {
        self.held.borrow_mut().pop_front()
    }

    /// Responses received and not taken.
    pub fn responses_held(&self) -> usize {
        self.held.borrow().len()
    }

    /// Why the queue can take no more responses: the target's C2HTermReq or the connection's
    /// end, and nothing held.
    pub fn failure(&self) -> Option<String> {
        if !self.held.borrow().is_empty() {
            return None;
        }
        let term = self.term.borrow().clone();
        term.or_else(|| self.closed.borrow().clone())
    }

    /// Whether the target closed the connection.
    pub fn is_closed(&self) -> bool {
        self.closed.borrow().is_some()
    }

    pub fn write_data(&self, off: usize, bytes: &[u8]) {
        self.data.borrow_mut()[off..off + bytes.len()].copy_from_slice(bytes);
    }

    pub fn read_data(&self, off: usize, len: usize) -> Vec<u8> {
        self.data.borrow()[off..off + len].to_vec()
    }
}

/// What command `sqe`'s data does through the transport: a Transport SGL Data Block moves
/// its length in the direction the opcode (or a Fabrics command's fctype) says; any other
/// data pointer moves nothing through the transport (in-capsule data, none, or one the
/// target refuses).
fn expect_of(sqe: &Sqe) -> Expect {
    let code = if sqe.opcode == opcodes::FABRICS {
        sqe.fctype()
    } else {
        sqe.opcode
    };
    match Sgl::decode(&sqe.dptr) {
        Ok(Sgl::Transport(t)) if t.len > 0 && opcodes::is_host_to_controller(code) => {
            Expect::ToCtrl { len: t.len }
        }
        Ok(Sgl::Transport(t)) if t.len > 0 && opcodes::is_controller_to_host(code) => {
            Expect::ToHost { len: t.len }
        }
        _ => Expect::Nothing,
    }
}

/// A CapsuleCmd PDU carrying `sqe` exactly as given (reserved bits and all) and `data` in the
/// capsule, with `data_digest` after the data if the connection has data digests.
pub fn capsule_pdu(
    sqe: &[u8; SQE_LEN],
    data: &[u8],
    neg: &Negotiated,
    data_digest: u32,
) -> Vec<u8> {
    let mut h = [0u8; CAPSULE_CMD_HLEN];
    let l = encode_capsule_cmd(&Sqe::decode(sqe), data.len(), neg, &mut h);
    h[CH_LEN..].copy_from_slice(sqe);
    let pdu = assemble(&h, &l, neg, data, data_digest);
    assert_eq!(pdu.len(), l.plen);
    pdu
}

/// An H2CData PDU of header `h` (its DATAL `data`'s length), LAST if `last`, with
/// `data_digest` after the data if the connection has data digests.
pub fn h2c_pdu(
    h: &DataHeader,
    last: bool,
    data: &[u8],
    neg: &Negotiated,
    data_digest: u32,
) -> Vec<u8> {
    let mut b = [0u8; DATA_HLEN];
    let f = if last { flags::DATA_LAST } else { 0 };
    let l = h.encode(pdu_type::H2C_DATA, f, neg, &mut b);
    assemble(&b, &l, neg, data, data_digest)
}
