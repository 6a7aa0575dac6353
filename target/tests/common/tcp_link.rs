//! The raw test host's NVMe/TCP link: one TCP connection initialized as the Linux host does
//! it (ICReq with PFV 0, HPDA 0, MAXR2T 0, the digests asked for; ICResp checked as the Linux host
//! checks it), command capsules with in-capsule data, H2CData answering each R2T from the
//! host buffer, C2HData into it, CapsuleResp. The PDU codecs are
//! `rdmablk::nvme::transport::tcp`'s; what the target sends is checked PDU by PDU as
//! rdmablk-initiator checks it (`host_rx`: C2HData in order and within its command, R2Ts within
//! their write, SUCCESS only at the end), so a conformance run over NVMe/TCP also fails on a
//! target PDU a host would refuse.
//!
//! The link is built on [`TcpWire`], the raw-PDU layer the NVMe/TCP-only tests drive by hand:
//! the connection's initialization, every PDU put together (with its digests) and sent. Header
//! and data digests are the link's option: `RDMABLK_E2E_TCP_DIGESTS=1` turns both on
//! (`e2e_tcp_digests`), and then every PDU the target sends must carry both, right.
//!
//! NVMe/TCP has no keyed SGLs: a command's data outside the capsule is described by a
//! Transport SGL Data Block (0x5A) that names only its length, so the link keeps every
//! command's data at the start of the host's data area, the offset the other links' keyed
//! SGLs name in the tests (see `Host::keyed`).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::net::SocketAddr;
use std::time::Duration;

use rdmablk::nvme::opcodes;
use rdmablk::nvme::transport::tcp::host_rx::{Expect, HostPdu, HostRx, HostRxError, Next};
use rdmablk::nvme::transport::tcp::{pdu_type, CommonHeader, R2t, CAPSULE_CMD_HLEN, CH_LEN};
use rdmablk::nvme::{Cqe, Sgl, Sqe, Status, SQE_LEN};

use super::tcp_wire::{TcpWire, MAX_PDU_DATA};

/// One NVMe/TCP queue's connection, from the host's side.
pub struct TcpLink {
    /// The connection: what it negotiated, the PDUs put together and sent.
    wire: TcpWire,
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
    /// Connects to `addr` for queue `qid` and initializes the connection, with header and
    /// data digests if `digests`; `data_len` is the size of the host's data area.
    pub fn connect(
        addr: SocketAddr,
        qid: u16,
        data_len: usize,
        digests: bool,
    ) -> std::io::Result<TcpLink> {
        let wire = TcpWire::try_connect(addr, digests, digests)?;
        let neg = wire.neg;
        Ok(TcpLink {
            wire,
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
            self.wire.capsule_bytes(sqe, data)
        };
        self.wire.send(&pdu).is_ok()
    }

    /// Takes what the target sent within `wait`: responses held, R2Ts answered, C2HData
    /// placed, a C2HTermReq or the end of the connection noted.
    pub fn poll(&self, wait: Duration) {
        if self.closed.borrow().is_some() {
            return;
        }
        let mut chunk = self.chunk.borrow_mut();
        let s = &self.wire.s;
        let _ = s.set_read_timeout(Some(wait.max(Duration::from_millis(1))));
        match (&*s).read(&mut chunk) {
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
            let n = (from + len - at).min(self.wire.maxh2cdata as usize);
            let last = at + n == from + len;
            let pdu = self
                .wire
                .h2c_pdu(r.cccid, r.ttag, at as u32, &data[at..at + n], last);
            if self.wire.send(&pdu).is_err() {
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
