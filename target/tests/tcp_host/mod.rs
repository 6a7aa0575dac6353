//! The NVMe/TCP-only tests' host (`tcp.rs`, `tcp_malformed.rs`, `tcp_stalled_peers.rs`):
//! the raw host's NVMe/TCP wire functions (`common/tcp_link.rs`: the connection's
//! initialization, PDUs put together and taken apart with their digests) driven by hand, one
//! command at a time with every byte under the test's control (as the Linux host sends them:
//! CPDA 0 expected, Connect data in the capsule, the Transport SGL Data Block for other data;
//! or malformed on purpose, with digests, with R2T answers cut as a test wants), and the
//! target configuration these tests share.

#![allow(dead_code)]

#[path = "../common/tcp_link.rs"]
mod tcp_link;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::opcodes::io;
use rdmablk::nvme::properties::{self, PropertySize};
use rdmablk::nvme::transport::tcp::{
    digest, pdu_type, CommonHeader, DataHeader, Direction, Negotiated, PduLayout, R2t, CH_LEN,
    DATA_HLEN,
};
use rdmablk::nvme::{
    Connect, ConnectData, Cqe, InCapsuleSgl, Nqn, PropertyGet, PropertySet, ReadWrite, Sgl, Sqe,
    TransportSgl, CQE_LEN,
};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

pub const SUBNQN: &str = "nqn.2026-11.io.rdmablk:tcp";
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000tcp1";
/// A second host the target's subsystem also admits.
pub const HOSTNQN2: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000tcp2";
pub const BLOCK: u32 = 512;
pub const MAX_IO: u32 = 128 * 1024;
pub const ICD: u32 = 4096;

/// How long a test waits for an event before it calls the target hung.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// A target with one NVMe/TCP listener on 127.0.0.1 and one worker.
pub fn start() -> (Target, SocketAddr) {
    start_with("", 32)
}

/// [`start`] with `extra_target` lines in its `[target]` table and I/O queues up to
/// `max_queue_depth` deep.
pub fn start_with(extra_target: &str, max_queue_depth: u32) -> (Target, SocketAddr) {
    start_with_arena(extra_target, max_queue_depth, "64MiB")
}

/// [`start_with`] with an arena of `arena` bytes (as the config writes them).
pub fn start_with_arena(
    extra_target: &str,
    max_queue_depth: u32,
    arena: &str,
) -> (Target, SocketAddr) {
    start_with_limits(extra_target, max_queue_depth, arena, "")
}

/// [`start_with_arena`] with `extra_limits` lines in its `[limits]` table.
pub fn start_with_limits(
    extra_target: &str,
    max_queue_depth: u32,
    arena: &str,
    extra_limits: &str,
) -> (Target, SocketAddr) {
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
{extra_target}

[control]
socket = ""

[arena]
bytes = "{arena}"
lock = false

[limits]
max_queue_depth = {max_queue_depth}
max_io_size = {MAX_IO}
in_capsule_data_size = {ICD}
max_queues_per_controller = 4
{extra_limits}

[[subsystem]]
nqn = "{SUBNQN}"
hosts = ["{HOSTNQN}", "{HOSTNQN2}"]

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
pub struct Host {
    pub s: TcpStream,
    pub neg: Negotiated,
    pub next_cid: u16,
    /// The host NQN its Fabrics Connect names ([`HOSTNQN`] unless a test sets another).
    pub hostnqn: &'static str,
    /// The KATO an admin queue's Connect asks for.
    pub kato_ms: u32,
    /// The next data digest this host sends (a capsule's or an H2CData's) is wrong.
    pub corrupt_ddgst: bool,
}

impl Host {
    /// Connects and initializes the connection (ICReq, ICResp).
    pub fn connect(addr: SocketAddr, hdgst: bool, ddgst: bool) -> Host {
        let mut s = TcpStream::connect(addr).expect("TCP connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let (neg, _) = tcp_link::initialize(&mut s, hdgst, ddgst).expect("ICResp");
        Host {
            s,
            neg,
            next_cid: 1,
            kato_ms: 5000,
            hostnqn: HOSTNQN,
            corrupt_ddgst: false,
        }
    }

    /// Sends a command capsule with `data` in the capsule.
    pub fn send_capsule(&mut self, sqe: &Sqe, data: &[u8]) {
        let pdu = self.capsule_pdu(sqe, data);
        self.s.write_all(&pdu).unwrap();
    }

    /// A command capsule PDU with `data` in the capsule: header, header digest, padding,
    /// data, data digest.
    pub fn capsule_pdu(&mut self, sqe: &Sqe, data: &[u8]) -> Vec<u8> {
        let d = if self.neg.ddgst && !data.is_empty() {
            self.data_digest(data)
        } else {
            0
        };
        tcp_link::capsule_pdu(&sqe.to_bytes(), data, &self.neg, d)
    }

    /// Reads one PDU: its header fields and data.
    pub fn recv(&mut self) -> std::io::Result<(PduLayout, Vec<u8>, Vec<u8>)> {
        let mut pdu = vec![0u8; CH_LEN];
        self.s.read_exact(&mut pdu)?;
        let h = CommonHeader::decode(pdu[..CH_LEN].try_into().expect("8 bytes"));
        let l = PduLayout::check(
            &h,
            Direction::ControllerToHost,
            Some(self.neg),
            tcp_link::MAX_PDU_DATA,
        )
        .unwrap_or_else(|e| panic!("PDU from the target: {e}"));
        pdu.resize(l.plen, 0);
        self.s.read_exact(&mut pdu[CH_LEN..])?;
        let (header, data) = tcp_link::split(&l, &pdu);
        Ok((l, header.to_vec(), data.to_vec()))
    }

    /// Runs one command: its data to the controller (in the capsule when `in_capsule`, else by
    /// R2T and H2CData) and from it; returns the response and the data read.
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

    pub fn h2c(&mut self, cccid: u16, ttag: u16, datao: u32, data: &[u8], last: bool) {
        let pdu = self.h2c_pdu(cccid, ttag, datao, data, last);
        self.s.write_all(&pdu).unwrap();
    }

    /// Sends an H2CData PDU in pieces, cut at `cuts` (offsets into the whole PDU), with a
    /// pause before each, so that the target sees its header before its data, and its data
    /// a part at a time.
    pub fn h2c_trickle(
        &mut self,
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
            self.s.write_all(&pdu[at..cut]).unwrap();
            self.s.flush().unwrap();
            std::thread::sleep(Duration::from_millis(30));
            at = cut;
        }
    }

    /// An H2CData PDU: header, header digest, padding, data, data digest.
    pub fn h2c_pdu(
        &mut self,
        cccid: u16,
        ttag: u16,
        datao: u32,
        data: &[u8],
        last: bool,
    ) -> Vec<u8> {
        let h = DataHeader {
            cccid,
            ttag,
            datao,
            datal: data.len() as u32,
        };
        let d = if self.neg.ddgst {
            self.data_digest(data)
        } else {
            0
        };
        tcp_link::h2c_pdu(&h, last, data, &self.neg, d)
    }

    pub fn fabrics_connect(&mut self, qid: u16, sqsize: u16, cntlid: u16) -> Cqe {
        let data = ConnectData {
            hostid: [7; 16],
            cntlid,
            subnqn: Nqn::new(SUBNQN).unwrap(),
            hostnqn: Some(Nqn::new(self.hostnqn).unwrap()),
        }
        .encode();
        let c = Connect {
            qid,
            sqsize,
            cattr: 0,
            kato_ms: if qid == 0 { self.kato_ms } else { 0 },
        };
        let sqe = c.to_sqe(0, &Sgl::InCapsule(InCapsuleSgl { offset: 0, len: 0 }));
        self.exec(sqe, &data, 0, true).0
    }

    /// The data digest of `data`, or a wrong one if [`Host::corrupt_ddgst`] asks (once).
    fn data_digest(&mut self, data: &[u8]) -> u32 {
        let d = digest(data);
        if std::mem::take(&mut self.corrupt_ddgst) {
            !d
        } else {
            d
        }
    }

    /// Waits (up to [`HANG_GUARD`]) for the target to close the connection, taking and
    /// dropping whatever it sent before.
    pub fn wait_closed(&mut self) {
        wait_closed(&mut self.s);
    }
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
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("reading a connection the target should close: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the target kept the connection open"
        );
    }
}

/// An admin queue (Connect with [`Host::kato_ms`] 5 s), enabled.
pub fn admin(addr: SocketAddr, hdgst: bool, ddgst: bool) -> (Host, u16) {
    admin_kato(addr, hdgst, ddgst, 5000)
}

/// An admin queue whose Connect asks for `kato_ms`, enabled.
pub fn admin_kato(addr: SocketAddr, hdgst: bool, ddgst: bool, kato_ms: u32) -> (Host, u16) {
    admin_as(addr, hdgst, ddgst, kato_ms, HOSTNQN)
}

/// [`admin_kato`] for host `hostnqn`.
pub fn admin_as(
    addr: SocketAddr,
    hdgst: bool,
    ddgst: bool,
    kato_ms: u32,
    hostnqn: &'static str,
) -> (Host, u16) {
    let mut a = Host::connect(addr, hdgst, ddgst);
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

pub fn rw_sqe(write: bool, lba: u64, blocks: u32) -> Sqe {
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

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    rdmablk_testkit::pattern(seed, len)
}

/// An I/O queue `qid` of controller `cntlid`, `depth` deep.
pub fn io_queue(addr: SocketAddr, ddgst: bool, qid: u16, cntlid: u16, depth: u16) -> Host {
    io_queue_as(addr, ddgst, qid, cntlid, depth, HOSTNQN)
}

/// [`io_queue`] for host `hostnqn` (the host its controller's admin queue named).
pub fn io_queue_as(
    addr: SocketAddr,
    ddgst: bool,
    qid: u16,
    cntlid: u16,
    depth: u16,
    hostnqn: &'static str,
) -> Host {
    let mut q = Host::connect(addr, false, ddgst);
    q.hostnqn = hostnqn;
    let c = q.fabrics_connect(qid, depth - 1, cntlid);
    assert!(c.status.is_success(), "I/O Connect: {}", c.status);
    q
}

/// Waits (up to [`HANG_GUARD`]) until the target holds `connections` connections; an
/// NVMe/TCP queue never takes an arena parcel (its capsules are in ordinary memory, its data
/// in the worker's pool).
pub fn wait_held(t: &Target, connections: usize) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let s = t.arena_stats();
        assert_eq!(s.parcels, 0, "NVMe/TCP queues hold arena parcels: {s:?}");
        if t.queues_open() == connections {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the target holds {} connections and {s:?}, not {connections}",
            t.queues_open()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
