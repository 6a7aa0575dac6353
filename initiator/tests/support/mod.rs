//! A minimal NVMe-oF/RDMA target for the initiator's end-to-end tests on the soft provider,
//! written from the wire format only (the initiator never imports rdmablk-target). It serves
//! one RAM namespace, processes each queue's commands one at a time on its own thread, and
//! can grant push-write windows. It exists so the initiator's protocol, push writes and
//! reconnect logic can be proven before (and independently of) the real target.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdmablk::fabric::{
    Access, CmEvent, ConnParam, ConnRequest, Cq, Device, MemBuf, Mr, ProviderKind, Qp, QpCaps,
    QpInit, RecvWr, SendFlags, SendWr, Wc, WrOp,
};
use rdmablk::nvme::fabrics::{offset as conn_off, ConnectFailure, CNTLID_DYNAMIC};
use rdmablk::nvme::identify::{cns, encode_ns_list, IDENTIFY_LEN};
use rdmablk::nvme::opcodes::{admin, fctype, io, FABRICS};
use rdmablk::nvme::properties::{self as props};
use rdmablk::nvme::transport::rdma::{CmAccept, CmRequest, PushAnswer, PushWindow, PushedSgl};
use rdmablk::nvme::{
    Cap, Cc, Cqe, Csts, IdentifyCmd, IdentifyController, IdentifyNamespace, Nqn, NumQueues,
    PropertyGet, PropertySet, ReadWrite, SetFeatures, Sgl, Sqe, Status, Vs, WriteZeroes, CQE_LEN,
    SQE_LEN,
};

pub const NQN: &str = "nqn.2024-01.io.rdmablk:mock";
const IN_CAPSULE: usize = 8192;
const CAPSULE: usize = SQE_LEN + IN_CAPSULE;
const DATA_BYTES: usize = 1 << 20;

/// What the mock serves.
#[derive(Clone)]
pub struct MockConfig {
    pub nqn: String,
    pub block_size: u32,
    /// Grant push windows to hosts that ask.
    pub grant_push: bool,
    /// Refuse hosts other than this one (Connect Invalid Host).
    pub allowed_host: Option<String>,
    pub mdts: u8,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            nqn: NQN.into(),
            block_size: 512,
            grant_push: true,
            allowed_host: None,
            mdts: 5, // 128 KiB
        }
    }
}

/// Counters of what the mock saw.
#[derive(Default)]
pub struct MockStats {
    pub pushed_writes: AtomicU64,
    pub in_capsule_writes: AtomicU64,
    pub keyed_writes: AtomicU64,
    pub reads: AtomicU64,
    pub keep_alives: AtomicU64,
    /// When each Keep Alive was taken (before its response was sent), in order.
    pub keep_alive_times: Mutex<Vec<Instant>>,
    pub connects: AtomicU64,
}

pub struct MockTarget {
    pub addr: SocketAddr,
    pub stats: Arc<MockStats>,
    pub ram: Arc<Mutex<Vec<u8>>>,
    stop: Arc<AtomicBool>,
    listener: Option<JoinHandle<()>>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl MockTarget {
    /// Starts on 127.0.0.1 (port 0: any) with a fresh RAM namespace of `bytes`.
    pub fn start(cfg: MockConfig, bytes: usize) -> MockTarget {
        Self::start_with(cfg, Arc::new(Mutex::new(vec![0; bytes])), 0)
    }

    /// Starts on `port` serving `ram` (a restart keeps the data).
    pub fn start_with(cfg: MockConfig, ram: Arc<Mutex<Vec<u8>>>, port: u16) -> MockTarget {
        let dev = Device::open(ProviderKind::Soft, None).expect("soft device");
        let listener = dev
            .listen(SocketAddr::from(([127, 0, 0, 1], port)), 64)
            .expect("listen");
        let addr = listener.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(MockStats::default());
        let conns = Arc::new(Mutex::new(Vec::new()));
        let (s, st, r, c) = (stop.clone(), stats.clone(), ram.clone(), conns.clone());
        let cntlids = Arc::new(AtomicU64::new(1));
        let t = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Ok(Some(req)) = listener.get_request(Some(Duration::from_millis(20))) else {
                    continue;
                };
                let conn = Conn::new(cfg.clone(), r.clone(), st.clone(), s.clone());
                let ids = cntlids.clone();
                let h = std::thread::spawn(move || conn.run(req, ids));
                c.lock().unwrap().push(h);
            }
        });
        MockTarget {
            addr,
            stats,
            ram,
            stop,
            listener: Some(t),
            conns,
        }
    }

    pub fn url(&self) -> String {
        format!("soft://{}/{}", self.addr, NQN)
    }

    /// Stops listening and drops every connection (a target crash, as the host sees it).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.listener.take() {
            let _ = t.join();
        }
        for h in self.conns.lock().unwrap().drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for MockTarget {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Conn {
    cfg: MockConfig,
    ram: Arc<Mutex<Vec<u8>>>,
    stats: Arc<MockStats>,
    stop: Arc<AtomicBool>,
    cc: Cc,
    cntlid: u16,
}

struct Io {
    qp: Qp,
    cq: Cq,
    recv: Mr,
    resp: Mr,
    data: Mr,
    window: Option<(Mr, PushWindow)>,
    pending: VecDeque<Wc>,
}

impl Conn {
    fn new(
        cfg: MockConfig,
        ram: Arc<Mutex<Vec<u8>>>,
        stats: Arc<MockStats>,
        stop: Arc<AtomicBool>,
    ) -> Conn {
        Conn {
            cfg,
            ram,
            stats,
            stop,
            cc: Cc(0),
            cntlid: 0,
        }
    }

    fn run(mut self, req: ConnRequest, ids: Arc<AtomicU64>) {
        let Ok(cm) = CmRequest::decode(req.private_data()) else {
            return;
        };
        let entries = usize::from(cm.hrqsize.max(1));
        let dev = req.device();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(4 * entries as u32 + 8).unwrap();
        let reg = |len: usize, a: Access| pd.register(MemBuf::zeroed(len).unwrap(), a).unwrap();
        let recv = reg(entries * CAPSULE, Access::LOCAL_WRITE);
        let resp = reg(entries * CQE_LEN, Access::LOCAL_WRITE);
        let data = reg(DATA_BYTES, Access::LOCAL_WRITE);
        let (window, answer) = match cm.push {
            Some(p) if self.cfg.grant_push && cm.qid != 0 => {
                let slots = if p.slots == 0 { 32 } else { p.slots.min(256) };
                let slot_bytes = if p.slot_bytes == 0 {
                    128 << 10
                } else {
                    p.slot_bytes.min(1 << 20)
                };
                let mr = reg(
                    usize::from(slots) * slot_bytes as usize,
                    Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                );
                let w = PushWindow::new(mr.addr(), mr.rkey(), slots, slot_bytes).unwrap();
                (Some((mr, w)), PushAnswer::Granted(w))
            }
            Some(_) => (None, PushAnswer::Declined),
            None => (None, PushAnswer::Absent),
        };
        let qp = req
            .create_qp(&QpInit {
                pd: &pd,
                send_cq: &cq,
                recv_cq: &cq,
                caps: QpCaps {
                    max_send_wr: 4 * entries as u32 + 4,
                    max_recv_wr: entries as u32,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                srq: None,
            })
            .unwrap();
        let mut io = Io {
            qp,
            cq,
            recv,
            resp,
            data,
            window,
            pending: VecDeque::new(),
        };
        for i in 0..entries {
            io.post_recv(i);
        }
        let acc = CmAccept {
            crqsize: cm.hsqsize + 1,
            push: answer,
        };
        io.qp
            .accept(&ConnParam {
                private_data: acc.encode().to_vec(),
                ..ConnParam::default()
            })
            .unwrap();
        if cm.qid == 0 {
            self.cntlid = ids.fetch_add(1, Ordering::Relaxed) as u16;
        }
        while !self.stop.load(Ordering::Relaxed) {
            if let Ok(Some(CmEvent::Disconnected | CmEvent::Error(_))) =
                io.qp.cm_event(Some(Duration::ZERO))
            {
                return;
            }
            let Some(wc) = io.next_recv() else { continue };
            if !wc.status.is_success() {
                return;
            }
            let slot = (wc.wr_id & 0xFFFF) as usize;
            let mut cap = vec![0u8; wc.byte_len as usize];
            io.recv.read_at(slot * CAPSULE, &mut cap).unwrap();
            io.post_recv(slot);
            let Ok((sqe, incap)) = Sqe::from_capsule(&cap) else {
                return;
            };
            let cqe = self.execute(&mut io, cm.qid, &sqe, incap);
            if !io.respond(slot, &cqe) {
                return;
            }
        }
        let _ = io.qp.disconnect();
    }

    fn execute(&mut self, io: &mut Io, qid: u16, sqe: &Sqe, incap: &[u8]) -> Cqe {
        let ok = |dw0| Cqe::success(sqe.cid, qid, 0, dw0);
        let err = |s: Status| Cqe::error(sqe.cid, qid, 0, s);
        match (qid, sqe.opcode) {
            (_, FABRICS) => match sqe.fctype() {
                fctype::CONNECT => self.connect(io, qid, sqe, incap),
                fctype::PROPERTY_GET => {
                    let g = PropertyGet::from_sqe(sqe).unwrap();
                    let v: u64 = match g.offset {
                        props::CAP => Cap(0).with_mqes(127).with_timeout_500ms(1).with_css(1).0,
                        props::VS => u64::from(Vs::V1_3.0),
                        props::CC => u64::from(self.cc.0),
                        props::CSTS => u64::from(Csts(0).with_rdy(self.cc.en()).0),
                        _ => 0,
                    };
                    let mut c = ok(0);
                    c.set_result64(v);
                    c
                }
                fctype::PROPERTY_SET => {
                    let s = PropertySet::from_sqe(sqe).unwrap();
                    if s.offset == props::CC {
                        self.cc = Cc(s.value as u32);
                    }
                    ok(0)
                }
                _ => err(Status::INVALID_OPCODE),
            },
            (0, admin::IDENTIFY) => {
                let id = IdentifyCmd::from_sqe(sqe);
                let nsid1 = u64::from(self.cfg.block_size);
                let page: [u8; IDENTIFY_LEN] = match id.cns {
                    cns::CONTROLLER => {
                        let mut c = IdentifyController::nvmf_defaults(
                            self.cntlid,
                            Nqn::new(&self.cfg.nqn).unwrap(),
                            IN_CAPSULE as u32,
                        );
                        c.mdts = self.cfg.mdts;
                        c.nn = 1;
                        c.encode()
                    }
                    cns::NAMESPACE if id.nsid == 1 => {
                        let blocks = self.ram.lock().unwrap().len() as u64 / nsid1;
                        IdentifyNamespace::simple(
                            blocks,
                            self.cfg.block_size.trailing_zeros() as u8,
                        )
                        .encode()
                    }
                    cns::ACTIVE_NS_LIST => encode_ns_list(&[1], id.nsid),
                    _ => return err(Status::INVALID_FIELD.with_dnr()),
                };
                match io.send_to_host(sqe, &page) {
                    Ok(()) => ok(0),
                    Err(s) => err(s),
                }
            }
            (0, admin::SET_FEATURES) => {
                let f = SetFeatures::from_sqe(sqe);
                let v = NumQueues::from_dword(f.value).grant(8).to_dword();
                ok(v)
            }
            (0, admin::KEEP_ALIVE) => {
                self.stats
                    .keep_alive_times
                    .lock()
                    .unwrap()
                    .push(Instant::now());
                self.stats.keep_alives.fetch_add(1, Ordering::Relaxed);
                ok(0)
            }
            (0, _) => err(Status::INVALID_OPCODE.with_dnr()),
            (_, io::READ) => {
                let rw = ReadWrite::from_sqe(sqe);
                let bs = u64::from(self.cfg.block_size);
                let (off, len) = ((rw.slba * bs) as usize, rw.blocks() as usize * bs as usize);
                let bytes = {
                    let ram = self.ram.lock().unwrap();
                    if off + len > ram.len() {
                        return err(Status::LBA_OUT_OF_RANGE.with_dnr());
                    }
                    ram[off..off + len].to_vec()
                };
                self.stats.reads.fetch_add(1, Ordering::Relaxed);
                match io.send_to_host(sqe, &bytes) {
                    Ok(()) => ok(0),
                    Err(s) => err(s),
                }
            }
            (_, io::WRITE) => {
                let rw = ReadWrite::from_sqe(sqe);
                let bs = u64::from(self.cfg.block_size);
                let (off, len) = ((rw.slba * bs) as usize, rw.blocks() as usize * bs as usize);
                let bytes = match self.host_data(io, sqe, incap, len) {
                    Ok(b) => b,
                    Err(s) => return err(s),
                };
                let mut ram = self.ram.lock().unwrap();
                if off + len > ram.len() {
                    return err(Status::LBA_OUT_OF_RANGE.with_dnr());
                }
                ram[off..off + len].copy_from_slice(&bytes);
                ok(0)
            }
            (_, io::WRITE_ZEROES) => {
                let wz = WriteZeroes::from_sqe(sqe);
                let bs = self.cfg.block_size as usize;
                let off = wz.slba as usize * bs;
                let len = wz.blocks() as usize * bs;
                let mut ram = self.ram.lock().unwrap();
                if off + len > ram.len() {
                    return err(Status::LBA_OUT_OF_RANGE.with_dnr());
                }
                ram[off..off + len].fill(0);
                ok(0)
            }
            (_, io::FLUSH) | (_, io::DATASET_MANAGEMENT) => ok(0),
            _ => err(Status::INVALID_OPCODE.with_dnr()),
        }
    }

    fn connect(&mut self, io: &mut Io, qid: u16, sqe: &Sqe, incap: &[u8]) -> Cqe {
        let data = match self.host_data(io, sqe, incap, 1024) {
            Ok(d) => d,
            Err(s) => return Cqe::error(sqe.cid, qid, 0, s),
        };
        let cd = match rdmablk::nvme::ConnectData::decode_slice(&data) {
            Ok(cd) => cd,
            Err(f) => return f.to_cqe(sqe.cid, qid, 0),
        };
        if cd.subnqn.as_str() != self.cfg.nqn {
            return ConnectFailure::invalid_data(conn_off::SUBNQN).to_cqe(sqe.cid, qid, 0);
        }
        if let Some(h) = &self.cfg.allowed_host {
            if cd.hostnqn_str() != h {
                return ConnectFailure::invalid_host().to_cqe(sqe.cid, qid, 0);
            }
        }
        if qid == 0 {
            assert_eq!(cd.cntlid, CNTLID_DYNAMIC);
        } else {
            self.cntlid = cd.cntlid;
        }
        self.stats.connects.fetch_add(1, Ordering::Relaxed);
        Cqe::success(sqe.cid, qid, 0, u32::from(self.cntlid))
    }

    /// The command's host-to-controller data: pushed slot, in-capsule, or RDMA READ.
    fn host_data(
        &self,
        io: &mut Io,
        sqe: &Sqe,
        incap: &[u8],
        len: usize,
    ) -> Result<Vec<u8>, Status> {
        if let Some(p) = PushedSgl::decode(&sqe.dptr) {
            let (mr, w) = io
                .window
                .as_ref()
                .ok_or(Status::SGL_INVALID_TYPE.with_dnr())?;
            p.check(w, u64::from(sqe.cid % w.slots))?;
            if p.len as usize != len {
                return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
            }
            let mut b = vec![0u8; len];
            mr.read_at(p.slot as usize * w.slot_bytes as usize, &mut b)
                .unwrap();
            self.stats.pushed_writes.fetch_add(1, Ordering::Relaxed);
            return Ok(b);
        }
        match sqe.sgl()? {
            // The mock is an RDMA target: NVMe/TCP's data block is an unknown type to it.
            Sgl::Transport(_) => Err(Status::SGL_INVALID_TYPE.with_dnr()),
            Sgl::InCapsule(c) => {
                let (o, l) = (c.offset as usize, c.len as usize);
                if l != len || o + l > incap.len() {
                    return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
                }
                if sqe.opcode == io::WRITE {
                    self.stats.in_capsule_writes.fetch_add(1, Ordering::Relaxed);
                }
                Ok(incap[o..o + l].to_vec())
            }
            Sgl::Keyed(k) => {
                if k.len as usize != len || len > DATA_BYTES {
                    return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
                }
                let sge = [io.data.sge(0, k.len)];
                io.qp
                    .post_send(&[SendWr {
                        wr_id: 1 << 40,
                        op: WrOp::RdmaRead {
                            remote_addr: k.addr,
                            rkey: k.key,
                        },
                        sgl: &sge,
                        flags: SendFlags::SIGNALED,
                    }])
                    .map_err(|_| Status::DATA_TRANSFER_ERROR)?;
                if !io.wait_wr(1 << 40) {
                    return Err(Status::DATA_TRANSFER_ERROR);
                }
                if sqe.opcode == io::WRITE {
                    self.stats.keyed_writes.fetch_add(1, Ordering::Relaxed);
                }
                let mut b = vec![0u8; len];
                io.data.read_at(0, &mut b).unwrap();
                Ok(b)
            }
        }
    }
}

impl Io {
    fn post_recv(&self, slot: usize) {
        let sge = [self.recv.sge(slot * CAPSULE, CAPSULE as u32)];
        let _ = self.qp.post_recv(&[RecvWr {
            wr_id: slot as u64,
            sgl: &sge,
        }]);
    }

    fn poll_one(&mut self) -> Option<Wc> {
        let mut wcs = [Wc::default(); 1];
        match self.cq.poll(&mut wcs) {
            Ok(1) => Some(wcs[0]),
            _ => None,
        }
    }

    /// Next receive completion (send completions are dropped, errors returned).
    fn next_recv(&mut self) -> Option<Wc> {
        if let Some(w) = self.pending.pop_front() {
            return Some(w);
        }
        for _ in 0..1000 {
            match self.poll_one() {
                Some(w) if w.wr_id < (1 << 32) || !w.status.is_success() => return Some(w),
                Some(_) => continue,
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        None
    }

    /// Waits for the completion of `wr_id`, stashing receives.
    fn wait_wr(&mut self, wr_id: u64) -> bool {
        for _ in 0..200_000 {
            match self.poll_one() {
                Some(w) if w.wr_id == wr_id => return w.status.is_success(),
                Some(w) if w.wr_id < (1 << 32) => self.pending.push_back(w),
                Some(w) if !w.status.is_success() => return false,
                Some(_) => {}
                None => std::thread::sleep(Duration::from_micros(20)),
            }
        }
        false
    }

    fn send_to_host(&mut self, sqe: &Sqe, bytes: &[u8]) -> Result<(), Status> {
        let Ok(Sgl::Keyed(k)) = sqe.sgl() else {
            return Err(Status::SGL_INVALID_TYPE.with_dnr());
        };
        let n = bytes.len().min(k.len as usize);
        self.data.write_at(0, &bytes[..n]).unwrap();
        let sge = [self.data.sge(0, n as u32)];
        self.qp
            .post_send(&[SendWr {
                wr_id: 2 << 40,
                op: WrOp::RdmaWrite {
                    remote_addr: k.addr,
                    rkey: k.key,
                },
                sgl: &sge,
                flags: SendFlags::SIGNALED,
            }])
            .map_err(|_| Status::DATA_TRANSFER_ERROR)?;
        if self.wait_wr(2 << 40) {
            Ok(())
        } else {
            Err(Status::DATA_TRANSFER_ERROR)
        }
    }

    fn respond(&mut self, slot: usize, cqe: &Cqe) -> bool {
        self.resp.write_at(slot * CQE_LEN, &cqe.to_bytes()).unwrap();
        let sge = [self.resp.sge(slot * CQE_LEN, CQE_LEN as u32)];
        let id = (3 << 40) | slot as u64;
        let posted = self.qp.post_send(&[SendWr {
            wr_id: id,
            op: WrOp::Send,
            sgl: &sge,
            flags: SendFlags::SIGNALED,
        }]);
        posted.is_ok() && self.wait_wr(id)
    }
}
