//! NVMe/TCP against rdmablk-target over real sockets: a host written from the NVMe/TCP
//! specification (the PDUs of `rdmablk::nvme::transport::tcp`, as the Linux host sends them:
//! CPDA 0 expected, Connect data in the capsule, the Transport SGL Data Block for other data)
//! connects, enables the controller, identifies it, writes and reads back every size with and
//! without digests; malformed PDUs get a C2HTermReq and the connection closes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::identify::{cns, sgls, IdentifyController, IDENTIFY_LEN};
use rdmablk::nvme::opcodes::io;
use rdmablk::nvme::properties::{self, PropertySize};
use rdmablk::nvme::transport::tcp::{
    digest, encode_capsule_cmd, flags, pdu_type, CommonHeader, DataHeader, Direction, Fes, IcReq,
    IcResp, Negotiated, PduLayout, R2t, TermReq, CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN, IC_LEN,
};
use rdmablk::nvme::{
    Connect, ConnectData, Cqe, InCapsuleSgl, Nqn, PropertyGet, PropertySet, ReadWrite, Sgl, Sqe,
    Status, TransportSgl, CQE_LEN,
};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

const SUBNQN: &str = "nqn.2026-11.io.rdmablk:tcp";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000tcp1";
const BLOCK: u32 = 512;
const MAX_IO: u32 = 128 * 1024;
const ICD: u32 = 4096;

fn start() -> (Target, SocketAddr) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    let port = rdmablk_testkit::free_port("127.0.0.1");
    let text = format!(
        r#"
[[listener]]
transport = "tcp"
address = "127.0.0.1"
port = {port}

[target]
worker_threads = 1
poll_mode = "interrupt"

[control]
socket = ""

[arena]
bytes = "64MiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = {MAX_IO}
in_capsule_data_size = {ICD}
max_queues_per_controller = 4

[[subsystem]]
nqn = "{SUBNQN}"
hosts = ["{HOSTNQN}"]

[[subsystem.namespace]]
nsid = 1
block_size = {BLOCK}
backend = {{ kind = "ram", size = "16MiB" }}
"#
    );
    let cfg = Config::from_str(&text).expect("config");
    let t = Target::start(cfg).expect("target starts");
    let addr = t.local_addrs()[0];
    (t, addr)
}

/// One NVMe/TCP queue from the host's side.
struct Host {
    s: TcpStream,
    neg: Negotiated,
    next_cid: u16,
}

impl Host {
    fn connect(addr: SocketAddr, hdgst: bool, ddgst: bool) -> Host {
        let mut s = TcpStream::connect(addr).expect("TCP connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let req = IcReq {
            pfv: 0,
            hpda: 0,
            hdgst,
            ddgst,
            maxr2t: 0,
        };
        s.write_all(&req.encode()).unwrap();
        let mut b = [0u8; IC_LEN];
        s.read_exact(&mut b).expect("ICResp");
        let ch = CommonHeader::decode(b[..8].try_into().unwrap());
        PduLayout::check(&ch, Direction::ControllerToHost, None, 0).expect("ICResp header");
        let resp = IcResp::decode(&b, &req).expect("ICResp as the Linux host checks it");
        assert!(resp.maxh2cdata >= 4096);
        Host {
            s,
            neg: Negotiated {
                hdgst,
                ddgst,
                pda: 0,
            },
            next_cid: 1,
        }
    }

    /// Sends a command capsule with `data` in the capsule.
    fn send_capsule(&mut self, sqe: &Sqe, data: &[u8]) {
        let mut h = [0u8; CAPSULE_CMD_HLEN];
        let l = encode_capsule_cmd(sqe, data.len(), &self.neg, &mut h);
        let mut pdu = h.to_vec();
        if self.neg.hdgst {
            pdu.extend_from_slice(&digest(&h).to_le_bytes());
        }
        pdu.resize(if data.is_empty() { pdu.len() } else { l.pdo }, 0);
        pdu.extend_from_slice(data);
        if self.neg.ddgst && !data.is_empty() {
            pdu.extend_from_slice(&digest(data).to_le_bytes());
        }
        assert_eq!(pdu.len(), l.plen);
        self.s.write_all(&pdu).unwrap();
    }

    /// Reads one PDU: its header fields and data.
    fn recv(&mut self) -> std::io::Result<(PduLayout, Vec<u8>, Vec<u8>)> {
        let mut ch = [0u8; CH_LEN];
        self.s.read_exact(&mut ch)?;
        let h = CommonHeader::decode(&ch);
        let l = PduLayout::check(&h, Direction::ControllerToHost, Some(self.neg), 1 << 20)
            .unwrap_or_else(|e| panic!("PDU from the target: {e}"));
        let mut rest = vec![0u8; l.plen - CH_LEN];
        self.s.read_exact(&mut rest)?;
        let mut header = ch.to_vec();
        header.extend_from_slice(&rest[..l.hlen - CH_LEN]);
        if l.hdgst > 0 {
            let got = u32::from_le_bytes(
                rest[l.hlen - CH_LEN..l.hlen - CH_LEN + 4]
                    .try_into()
                    .unwrap(),
            );
            assert_eq!(got, digest(&header), "header digest of type {}", l.pdu_type);
        }
        let data = if l.data_len > 0 {
            rest[l.pdo - CH_LEN..l.pdo - CH_LEN + l.data_len].to_vec()
        } else {
            Vec::new()
        };
        if l.ddgst > 0 {
            let at = l.pdo - CH_LEN + l.data_len;
            let got = u32::from_le_bytes(rest[at..at + 4].try_into().unwrap());
            assert_eq!(got, digest(&data), "data digest");
        }
        Ok((l, header, data))
    }

    /// Runs one command: its data to the controller (in the capsule when `in_capsule`, else by
    /// R2T and H2CData) and from it; returns the response and the data read.
    fn exec(&mut self, mut sqe: Sqe, out: &[u8], in_len: u32, in_capsule: bool) -> (Cqe, Vec<u8>) {
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

    fn h2c(&mut self, cccid: u16, ttag: u16, datao: u32, data: &[u8], last: bool) {
        let h = DataHeader {
            cccid,
            ttag,
            datao,
            datal: data.len() as u32,
        };
        let mut b = [0u8; DATA_HLEN];
        let f = if last { flags::DATA_LAST } else { 0 };
        let l = h.encode(pdu_type::H2C_DATA, f, &self.neg, &mut b);
        let mut pdu = b.to_vec();
        if self.neg.hdgst {
            pdu.extend_from_slice(&digest(&b).to_le_bytes());
        }
        pdu.resize(l.pdo, 0);
        pdu.extend_from_slice(data);
        if self.neg.ddgst {
            pdu.extend_from_slice(&digest(data).to_le_bytes());
        }
        self.s.write_all(&pdu).unwrap();
    }

    fn fabrics_connect(&mut self, qid: u16, sqsize: u16, cntlid: u16) -> Cqe {
        let data = ConnectData {
            hostid: [7; 16],
            cntlid,
            subnqn: Nqn::new(SUBNQN).unwrap(),
            hostnqn: Nqn::new(HOSTNQN).unwrap(),
        }
        .encode();
        let c = Connect {
            qid,
            sqsize,
            cattr: 0,
            kato_ms: if qid == 0 { 5000 } else { 0 },
        };
        let sqe = c.to_sqe(0, &Sgl::InCapsule(InCapsuleSgl { offset: 0, len: 0 }));
        self.exec(sqe, &data, 0, true).0
    }
}

fn admin(addr: SocketAddr, hdgst: bool, ddgst: bool) -> (Host, u16) {
    let mut a = Host::connect(addr, hdgst, ddgst);
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

fn rw_sqe(write: bool, lba: u64, blocks: u32) -> Sqe {
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

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    rdmablk_testkit::pattern(seed, len)
}

fn every_size(addr: SocketAddr, hdgst: bool, ddgst: bool) {
    let (mut a, cntlid) = admin(addr, hdgst, ddgst);
    let id = rdmablk::nvme::IdentifyCmd {
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
        nsid: 0,
    }
    .to_sqe(0);
    let (c, page) = a.exec(id, &[], IDENTIFY_LEN as u32, false);
    assert!(c.status.is_success(), "Identify: {}", c.status);
    let idc = IdentifyController::decode(page[..].try_into().unwrap()).expect("Identify page");
    assert_eq!(idc.sgls & sgls::KEYED, 0, "no keyed SGLs over TCP");
    assert_ne!(idc.sgls & sgls::OFFSET, 0, "in-capsule data offered");
    assert_eq!(idc.ioccsz, (64 + ICD) / 16);
    assert_eq!(idc.icdoff, 0);

    let mut q = Host::connect(addr, hdgst, ddgst);
    let c = q.fabrics_connect(1, 31, cntlid);
    assert!(c.status.is_success(), "I/O Connect: {}", c.status);
    let mut lba = 0u64;
    let mut blocks = 1u32;
    while blocks * BLOCK <= MAX_IO {
        let len = (blocks * BLOCK) as usize;
        let data = pattern(lba + u64::from(hdgst) * 7 + u64::from(ddgst) * 13, len);
        let in_capsule = len as u32 <= ICD;
        let (c, _) = q.exec(rw_sqe(true, lba, blocks), &data, 0, in_capsule);
        assert!(c.status.is_success(), "write {len}: {}", c.status);
        if in_capsule {
            // The same size again by R2T: both ways of sending data work.
            let (c, _) = q.exec(rw_sqe(true, lba, blocks), &data, 0, false);
            assert!(c.status.is_success(), "write {len} by R2T: {}", c.status);
        }
        let (c, read) = q.exec(rw_sqe(false, lba, blocks), &[], len as u32, false);
        assert!(c.status.is_success(), "read {len}: {}", c.status);
        assert!(
            read == data,
            "data read back at {len} bytes (digests {hdgst}/{ddgst})"
        );
        lba += u64::from(blocks);
        blocks *= 2;
    }
    // A keyed SGL is NVMe/RDMA's: refused with SGL Descriptor Type Invalid.
    let mut sqe = rw_sqe(false, 0, 1);
    sqe.cid = 999;
    sqe.set_sgl(&Sgl::Keyed(rdmablk::nvme::KeyedSgl {
        addr: 0x1000,
        len: BLOCK,
        key: 1,
        invalidate: false,
    }));
    q.send_capsule(&sqe, &[]);
    let (l, header, _) = q.recv().unwrap();
    assert_eq!(l.pdu_type, pdu_type::CAPSULE_RESP);
    let cqe = Cqe::decode(header[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap());
    assert_eq!(cqe.status, Status::SGL_INVALID_TYPE.with_dnr());
}

#[test]
fn a_host_writes_and_reads_every_size_without_and_with_digests() {
    let (t, addr) = start();
    every_size(addr, false, false);
    every_size(addr, true, true);
    every_size(addr, true, false);
    t.shutdown();
}

/// Reads until the target's C2HTermReq; returns its FES and FEI, and checks the connection
/// closes after it.
fn term_req(h: &mut Host) -> (Option<Fes>, u32) {
    let (l, header, _) = h.recv().expect("a C2HTermReq");
    assert_eq!(l.pdu_type, pdu_type::C2H_TERM_REQ);
    let r = TermReq::decode(header[..DATA_HLEN].try_into().unwrap());
    let mut b = [0u8; 1];
    assert_eq!(h.s.read(&mut b).unwrap_or(0), 0, "closed after the TermReq");
    r
}

#[test]
fn malformed_pdus_get_a_term_req_and_the_connection_closes() {
    let (t, addr) = start();
    // A capsule whose HLEN is not a capsule's.
    let mut h = Host::connect(addr, false, false);
    let mut bad = [0u8; CAPSULE_CMD_HLEN];
    encode_capsule_cmd(&Sqe::default(), 0, &h.neg, &mut bad);
    bad[2] = 24;
    h.s.write_all(&bad).unwrap();
    assert_eq!(term_req(&mut h), (Some(Fes::InvalidHeaderField), 2));

    // H2CData for an R2T that was never sent, on a connected queue.
    let (mut a, _) = admin(addr, false, false);
    a.h2c(1, 3, 0, &[0u8; 512], true);
    assert_eq!(term_req(&mut a).0, Some(Fes::DataTransferOutOfRange));

    // A second ICReq.
    let mut h = Host::connect(addr, false, false);
    let req = IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: false,
        ddgst: false,
        maxr2t: 0,
    };
    h.s.write_all(&req.encode()).unwrap();
    assert_eq!(term_req(&mut h).0, Some(Fes::PduSequenceError));

    // A header digest that does not match.
    let (mut a, _) = admin(addr, true, false);
    let mut h = [0u8; CAPSULE_CMD_HLEN];
    encode_capsule_cmd(&Sqe::default(), 0, &a.neg, &mut h);
    a.s.write_all(&h).unwrap();
    a.s.write_all(&0xDEAD_BEEFu32.to_le_bytes()).unwrap();
    assert_eq!(term_req(&mut a).0, Some(Fes::HeaderDigestError));

    // The target is fine: a new host does I/O.
    let (_a, cntlid) = admin(addr, false, false);
    let mut q = Host::connect(addr, false, false);
    assert!(q.fabrics_connect(1, 31, cntlid).status.is_success());
    let (c, _) = q.exec(rw_sqe(false, 0, 1), &[], BLOCK, false);
    assert!(c.status.is_success());
    t.shutdown();
}
