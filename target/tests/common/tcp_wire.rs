//! The raw test host's NVMe/TCP wire: one TCP connection and every byte on it under the test's
//! control. The common host's TCP link (`tcp_link.rs`) is built on it, and the NVMe/TCP-only
//! tests (`tcp.rs`, `tcp_malformed.rs`, `tcp_scale.rs`, `tcp_stalled_peers.rs`) drive it by
//! hand: a connection left uninitialized or initialized with any digests, PDUs put together
//! and taken apart with their digests (a data digest made wrong on request), arbitrary or
//! malformed bytes sent, every PDU the target sends read as it comes (C2HTermReqs included),
//! and one command at a time run with its R2Ts answered as a test wants. It holds a socket and
//! a few words, so a test can keep thousands.
//!
//! PDUs are laid out as the Linux host sends them (CPDA 0 expected, Connect data in the
//! capsule, the Transport SGL Data Block for other data); the codecs are
//! `rdmablk::nvme::transport::tcp`'s. The target these connections meet is `tcp_target.rs`'s.

use std::cell::Cell;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::opcodes::io;
use rdmablk::nvme::properties::{self, PropertySize};
use rdmablk::nvme::transport::tcp::{
    digest, encode_capsule_cmd, flags, pdu_type, CommonHeader, DataHeader, Direction, Fes, IcReq,
    IcResp, Negotiated, PduLayout, R2t, TermReq, CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN, DIGEST_LEN,
    IC_LEN,
};
use rdmablk::nvme::{
    Connect, ConnectData, Cqe, InCapsuleSgl, Nqn, PropertyGet, PropertySet, ReadWrite, Sgl, Sqe,
    TransportSgl, CQE_LEN, SQE_LEN,
};

use super::{host_id_of, HANG_GUARD, HOSTNQN, SUBNQN};

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

/// One NVMe/TCP connection from the host's side, byte by byte.
pub struct TcpWire {
    pub s: TcpStream,
    /// What the connection negotiated (nothing until an ICReq is answered).
    pub neg: Negotiated,
    /// The ICResp's MAXH2CDATA (0 until an ICReq is answered).
    pub maxh2cdata: u32,
    /// The command ID [`TcpWire::exec`] gives its next command.
    pub next_cid: u16,
    /// The host NQN its Fabrics Connect names ([`HOSTNQN`] unless a test sets another).
    pub hostnqn: &'static str,
    /// The KATO an admin queue's Connect asks for.
    pub kato_ms: u32,
    /// The next data digest this host sends (a capsule's or an H2CData's) is wrong.
    corrupt_ddgst: Cell<bool>,
}

impl TcpWire {
    /// A TCP connection to `addr`, nothing sent on it.
    pub fn uninitialized(addr: SocketAddr) -> std::io::Result<TcpWire> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        Ok(TcpWire {
            s,
            neg: Negotiated::default(),
            maxh2cdata: 0,
            next_cid: 1,
            hostnqn: HOSTNQN,
            kato_ms: 5000,
            corrupt_ddgst: Cell::new(false),
        })
    }

    /// Connects and initializes the connection (ICReq, ICResp) with the digests asked for.
    pub fn try_connect(addr: SocketAddr, hdgst: bool, ddgst: bool) -> std::io::Result<TcpWire> {
        let mut w = TcpWire::uninitialized(addr)?;
        let (neg, resp) = initialize(&mut w.s, hdgst, ddgst)?;
        w.neg = neg;
        w.maxh2cdata = resp.maxh2cdata;
        Ok(w)
    }

    /// [`TcpWire::try_connect`], failing the test if it fails.
    pub fn connect(addr: SocketAddr, hdgst: bool, ddgst: bool) -> TcpWire {
        TcpWire::try_connect(addr, hdgst, ddgst)
            .unwrap_or_else(|e| panic!("NVMe/TCP connection to {addr}: {e}"))
    }

    /// Sends `bytes` as they are.
    pub fn send(&self, bytes: &[u8]) -> std::io::Result<()> {
        (&self.s).write_all(bytes)
    }

    /// The next data digest sent (a capsule's or an H2CData's) is wrong.
    pub fn corrupt_next_data_digest(&self) {
        self.corrupt_ddgst.set(true);
    }

    /// The data digest of `data` to send, or a wrong one once after
    /// [`TcpWire::corrupt_next_data_digest`] (only where data digests are on).
    fn data_digest(&self, data: &[u8]) -> u32 {
        if !self.neg.ddgst || data.is_empty() {
            return 0;
        }
        let d = digest(data);
        if self.corrupt_ddgst.take() {
            !d
        } else {
            d
        }
    }

    /// A command capsule PDU carrying `sqe` byte for byte and `data` in the capsule: header,
    /// header digest, padding, data, data digest.
    pub fn capsule_bytes(&self, sqe: &[u8; SQE_LEN], data: &[u8]) -> Vec<u8> {
        capsule_pdu(sqe, data, &self.neg, self.data_digest(data))
    }

    /// [`TcpWire::capsule_bytes`] of `sqe`.
    pub fn capsule_pdu(&self, sqe: &Sqe, data: &[u8]) -> Vec<u8> {
        self.capsule_bytes(&sqe.to_bytes(), data)
    }

    /// Sends a command capsule with `data` in the capsule.
    pub fn send_capsule(&self, sqe: &Sqe, data: &[u8]) {
        self.send(&self.capsule_pdu(sqe, data))
            .expect("a capsule sent");
    }

    /// An H2CData PDU: header, header digest, padding, data, data digest.
    pub fn h2c_pdu(&self, cccid: u16, ttag: u16, datao: u32, data: &[u8], last: bool) -> Vec<u8> {
        let h = DataHeader {
            cccid,
            ttag,
            datao,
            datal: data.len() as u32,
        };
        h2c_pdu(&h, last, data, &self.neg, self.data_digest(data))
    }

    pub fn h2c(&self, cccid: u16, ttag: u16, datao: u32, data: &[u8], last: bool) {
        self.send(&self.h2c_pdu(cccid, ttag, datao, data, last))
            .expect("H2CData sent");
    }

    /// Sends an H2CData PDU in pieces, cut at `cuts` (offsets into the whole PDU), with a
    /// pause before each, so that the target sees its header before its data, and its data
    /// a part at a time.
    pub fn h2c_trickle(
        &self,
        (cccid, ttag, datao): (u16, u16, u32),
        data: &[u8],
        last: bool,
        cuts: &[usize],
    ) {
        let pdu = self.h2c_pdu(cccid, ttag, datao, data, last);
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&pdu.len())) {
            let cut = cut.min(pdu.len());
            if cut <= at {
                continue;
            }
            self.send(&pdu[at..cut]).expect("part of an H2CData sent");
            std::thread::sleep(Duration::from_millis(30));
            at = cut;
        }
    }

    /// Reads one PDU as it comes: its layout (checked as a host checks what a controller
    /// sends, against the connection's digests), its header and its data, digests verified.
    pub fn recv(&self) -> std::io::Result<(PduLayout, Vec<u8>, Vec<u8>)> {
        let mut pdu = vec![0u8; CH_LEN];
        (&self.s).read_exact(&mut pdu)?;
        let h = CommonHeader::decode(pdu[..CH_LEN].try_into().expect("8 bytes"));
        let l = PduLayout::check(
            &h,
            Direction::ControllerToHost,
            Some(self.neg),
            MAX_PDU_DATA,
        )
        .unwrap_or_else(|e| panic!("PDU from the target: {e}"));
        pdu.resize(l.plen, 0);
        (&self.s).read_exact(&mut pdu[CH_LEN..])?;
        let (header, data) = split(&l, &pdu);
        Ok((l, header.to_vec(), data.to_vec()))
    }

    /// Reads until the target's C2HTermReq; returns its FES and FEI, and checks the
    /// connection closes after it.
    pub fn term_req(&mut self) -> (Option<Fes>, u32) {
        let (l, header, _) = self.recv().expect("a C2HTermReq");
        assert_eq!(l.pdu_type, pdu_type::C2H_TERM_REQ);
        let r = TermReq::decode(header[..DATA_HLEN].try_into().expect("24 bytes"));
        let mut b = [0u8; 1];
        assert_eq!(
            (&self.s).read(&mut b).unwrap_or(0),
            0,
            "closed after the TermReq"
        );
        r
    }

    /// Reads one PDU, which must be a CapsuleResp; its completion.
    pub fn recv_response(&self) -> Cqe {
        let (l, header, _) = self.recv().expect("a CapsuleResp");
        assert_eq!(l.pdu_type, pdu_type::CAPSULE_RESP, "PDU type of the answer");
        Cqe::decode(
            header[CH_LEN..CH_LEN + CQE_LEN]
                .try_into()
                .expect("16 bytes"),
        )
    }

    /// Runs one command: its data to the controller (in the capsule when `in_capsule`, else by
    /// R2T and H2CData, in two PDUs when above a page) and from it; returns the response and
    /// the data read.
    pub fn exec(
        &mut self,
        mut sqe: Sqe,
        out: &[u8],
        in_len: u32,
        in_capsule: bool,
    ) -> (Cqe, Vec<u8>) {
        sqe.cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1);
        let len = if out.is_empty() {
            in_len
        } else {
            out.len() as u32
        };
        if in_capsule && !out.is_empty() {
            sqe.set_sgl(&Sgl::InCapsule(InCapsuleSgl {
                offset: 0,
                len: out.len() as u32,
            }));
            self.send_capsule(&sqe, out);
        } else {
            sqe.set_sgl(&Sgl::Transport(TransportSgl { len }));
            self.send_capsule(&sqe, &[]);
        }
        let mut read = Vec::new();
        loop {
            let (l, header, data) = self.recv().expect("a PDU");
            match l.pdu_type {
                pdu_type::R2T => {
                    let r = R2t::decode(header[..DATA_HLEN].try_into().unwrap());
                    assert_eq!(r.cccid, sqe.cid);
                    assert_eq!((r.r2to, r.r2tl as usize), (0, out.len()));
                    // Two H2CData PDUs when the data is larger than a page: DATAO moves on.
                    let split = if out.len() > 4096 {
                        out.len() / 2
                    } else {
                        out.len()
                    };
                    for (i, chunk) in [&out[..split], &out[split..]].iter().enumerate() {
                        if chunk.is_empty() {
                            continue;
                        }
                        let last = i == 1 || split == out.len();
                        self.h2c(r.cccid, r.ttag, (i * split) as u32, chunk, last);
                    }
                }
                pdu_type::C2H_DATA => {
                    let d = DataHeader::decode(header[..DATA_HLEN].try_into().unwrap());
                    assert_eq!(d.cccid, sqe.cid);
                    assert_eq!(d.datao as usize, read.len());
                    read.extend_from_slice(&data);
                }
                pdu_type::CAPSULE_RESP => {
                    let cqe = Cqe::decode(header[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap());
                    assert_eq!(cqe.cid, sqe.cid);
                    return (cqe, read);
                }
                t => panic!("unexpected PDU type {t}"),
            }
        }
    }

    /// The Fabrics Connect of queue `qid` (data in the capsule, as the Linux host sends it),
    /// run by [`TcpWire::exec`].
    pub fn fabrics_connect(&mut self, qid: u16, sqsize: u16, cntlid: u16) -> Cqe {
        let sqe = self.connect_sqe(qid, sqsize);
        let data = self.connect_data(cntlid);
        self.exec(sqe, &data, 0, true).0
    }

    /// The Connect command of queue `qid` (its SGL: the data in the capsule).
    pub fn connect_sqe(&self, qid: u16, sqsize: u16) -> Sqe {
        let c = Connect {
            qid,
            sqsize,
            cattr: 0,
            kato_ms: if qid == 0 { self.kato_ms } else { 0 },
        };
        let sgl = InCapsuleSgl {
            offset: 0,
            len: rdmablk::nvme::fabrics::CONNECT_DATA_LEN as u32,
        };
        c.to_sqe(0, &Sgl::InCapsule(sgl))
    }

    /// The Connect data of this host for controller `cntlid`.
    pub fn connect_data(&self, cntlid: u16) -> [u8; rdmablk::nvme::fabrics::CONNECT_DATA_LEN] {
        ConnectData {
            hostid: host_id_of(self.hostnqn),
            cntlid,
            subnqn: Nqn::new(SUBNQN).unwrap(),
            hostnqn: Some(Nqn::new(self.hostnqn).unwrap()),
        }
        .encode()
    }

    /// Waits (up to [`HANG_GUARD`]) for the target to close the connection, taking and
    /// dropping whatever it sent before.
    pub fn wait_closed(&mut self) {
        wait_closed(&mut self.s);
    }

    /// An admin queue (Connect with KATO 5 s), enabled.
    pub fn admin(addr: SocketAddr, hdgst: bool, ddgst: bool) -> (TcpWire, u16) {
        TcpWire::admin_kato(addr, hdgst, ddgst, 5000)
    }

    /// An admin queue whose Connect asks for `kato_ms`, enabled.
    pub fn admin_kato(addr: SocketAddr, hdgst: bool, ddgst: bool, kato_ms: u32) -> (TcpWire, u16) {
        TcpWire::admin_as(addr, hdgst, ddgst, kato_ms, HOSTNQN)
    }

    /// [`TcpWire::admin_kato`] for host `hostnqn`.
    pub fn admin_as(
        addr: SocketAddr,
        hdgst: bool,
        ddgst: bool,
        kato_ms: u32,
        hostnqn: &'static str,
    ) -> (TcpWire, u16) {
        let mut a = TcpWire::connect(addr, hdgst, ddgst);
        a.kato_ms = kato_ms;
        a.hostnqn = hostnqn;
        let c = a.fabrics_connect(0, 31, CNTLID_DYNAMIC);
        assert!(c.status.is_success(), "admin Connect: {}", c.status);
        let cntlid = c.dw0 as u16;
        let set = PropertySet {
            size: PropertySize::Four,
            offset: properties::CC,
            value: 0x0046_0001,
        };
        assert!(a.exec(set.to_sqe(0), &[], 0, false).0.status.is_success());
        let get = PropertyGet {
            size: PropertySize::Four,
            offset: properties::CSTS,
        };
        let (c, _) = a.exec(get.to_sqe(0), &[], 0, false);
        assert_eq!(c.dw0 & 1, 1, "CSTS.RDY after CC.EN");
        (a, cntlid)
    }

    /// An I/O queue `qid` of controller `cntlid`, `depth` deep, with data digests if `ddgst`.
    pub fn io_queue(addr: SocketAddr, ddgst: bool, qid: u16, cntlid: u16, depth: u16) -> TcpWire {
        TcpWire::io_queue_as(addr, ddgst, qid, cntlid, depth, HOSTNQN)
    }

    /// [`TcpWire::io_queue`] for host `hostnqn` (the host its controller's admin queue named).
    pub fn io_queue_as(
        addr: SocketAddr,
        ddgst: bool,
        qid: u16,
        cntlid: u16,
        depth: u16,
        hostnqn: &'static str,
    ) -> TcpWire {
        let mut q = TcpWire::connect(addr, false, ddgst);
        q.hostnqn = hostnqn;
        let c = q.fabrics_connect(qid, depth - 1, cntlid);
        assert!(c.status.is_success(), "I/O Connect: {}", c.status);
        q
    }
}

/// A Read (`write` false) or Write of `blocks` at `lba` of namespace 1, its data pointer
/// left for [`TcpWire::exec`] to set.
pub fn rw_cmd(write: bool, lba: u64, blocks: u32) -> Sqe {
    ReadWrite {
        nsid: 1,
        slba: lba,
        nlb: (blocks - 1) as u16,
        fua: false,
        lr: false,
        dsm: 0,
    }
    .to_sqe(if write { io::WRITE } else { io::READ }, 0)
}

/// Waits (up to [`HANG_GUARD`]) for the peer to close `s` (end of stream, or a reset when
/// the peer closed with bytes it had not read), taking and dropping what arrives before.
pub fn wait_closed(s: &mut TcpStream) {
    let deadline = Instant::now() + HANG_GUARD;
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut b = vec![0u8; 64 << 10];
    loop {
        match s.read(&mut b) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("reading a connection the target should close: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the target kept the connection open"
        );
    }
}
