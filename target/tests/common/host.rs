//! The raw test host's queue: one command at a time, every byte of the capsule under the
//! test's control. Over RDMA (the soft or verbs provider: a QP, a CQ and one registered
//! buffer), over the loop transport (an in-memory channel to a target in this process, and
//! the same buffer as its memory region) or over NVMe/TCP (one connection, [`super::tcp_link`]),
//! as [`e2e_transport`] says (over NVMe/TCP with header and data digests if
//! [`e2e_tcp_digests`]). Data pointers are keyed SGLs into the buffer's data area over RDMA and
//! loop, Transport SGL Data Blocks over NVMe/TCP ([`Host::keyed`]).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::fabric::{
    self, Access, CmEvent, ConnParam, Cq, FabricError, MemBuf, Mr, Pd, Qp, QpCaps, QpInit, RecvWr,
    SendFlags, SendWr, Wc, WrOp,
};
use rdmablk::nvme::transport::loopback::{self, HostEnd, Region, ToHost};
use rdmablk::nvme::transport::rdma::{CmAccept, CmRequest, PushAnswer};
use rdmablk::nvme::{
    Connect, ConnectData, Cqe, InCapsuleSgl, KeyedSgl, Nqn, PropertyGet, PropertySet, PropertySize,
    Sgl, SglNeed, Sqe, TransportSgl,
};

use super::tcp_link::TcpLink;
use super::{e2e_fabric, rw_sqe, BLOCK, HANG_GUARD, HOSTID, HOSTNQN, MAX_IO};

const RECV_OFF: usize = 0;
const CMD_OFF: usize = 8 << 10;
/// Capsule buffers, used in turn: a posted SEND reads its buffer when it executes, so a
/// capsule must not be overwritten by the next one before then.
const CMD_SLOT: usize = 64 + 4096 + 64;
pub const CMD_SLOTS: usize = 12;
/// Host data buffer (keyed SGLs point here).
pub const DATA_OFF: usize = 64 << 10;
const BUF_LEN: usize = DATA_OFF + 2 * MAX_IO as usize;
const SEND_ID: u64 = 1 << 40;
const TIMEOUT: Duration = Duration::from_secs(10);

/// The transport the raw host's tests run over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum E2eTransport {
    /// RDMA on [`e2e_fabric`] (the default).
    Rdma,
    /// The loop transport (`RDMABLK_E2E_TRANSPORT=loop`): a target in the test's process.
    Loop,
    /// NVMe/TCP (`RDMABLK_E2E_TRANSPORT=tcp`) to a tcp listener.
    Tcp,
}

impl E2eTransport {
    pub fn name(self) -> &'static str {
        match self {
            E2eTransport::Rdma => "RDMA",
            E2eTransport::Loop => "the loop transport",
            E2eTransport::Tcp => "NVMe/TCP",
        }
    }

    /// The data pointers Identify Controller's SGLS must offer a host of this transport.
    pub fn sgl_need(self) -> SglNeed {
        match self {
            E2eTransport::Rdma | E2eTransport::Loop => SglNeed::Keyed,
            E2eTransport::Tcp => SglNeed::None,
        }
    }
}

/// The transport `RDMABLK_E2E_TRANSPORT` names (`loop`, `tcp`; unset or empty: RDMA).
pub fn e2e_transport() -> E2eTransport {
    match std::env::var("RDMABLK_E2E_TRANSPORT").as_deref() {
        Err(_) | Ok("") => E2eTransport::Rdma,
        Ok("loop") => E2eTransport::Loop,
        Ok("tcp") => E2eTransport::Tcp,
        Ok(other) => panic!("RDMABLK_E2E_TRANSPORT={other}: loop, tcp, or unset for RDMA"),
    }
}

/// Whether the tests run over the loop transport.
pub fn e2e_loop() -> bool {
    e2e_transport() == E2eTransport::Loop
}

/// Whether the tests run over NVMe/TCP.
pub fn e2e_tcp() -> bool {
    e2e_transport() == E2eTransport::Tcp
}

/// Whether the NVMe/TCP link negotiates header and data digests: `RDMABLK_E2E_TCP_DIGESTS`
/// `1` (unset, empty or `0`: neither).
pub fn e2e_tcp_digests() -> bool {
    match std::env::var("RDMABLK_E2E_TCP_DIGESTS").as_deref() {
        Err(_) | Ok("") | Ok("0") => false,
        Ok("1") => true,
        Ok(other) => panic!("RDMABLK_E2E_TCP_DIGESTS={other}: 1 for both digests, or unset"),
    }
}

/// For a test of RDMA itself (CM private data, memory windows, push writes, receive
/// completions): true, with a note, when it does not apply because the run is over another
/// transport.
pub fn skip_unless_rdma(test: &str) -> bool {
    let t = e2e_transport();
    let skip = t != E2eTransport::Rdma;
    if skip {
        eprintln!("{test}: skipped over {} (it tests NVMe/RDMA)", t.name());
    }
    skip
}

/// The RDMA parts of a host queue.
pub struct RdmaHost {
    pub qp: Qp,
    pub cq: Cq,
    pub pd: Pd,
    pub mr: Mr,
}

/// The loop parts of a host queue.
struct LoopHost {
    end: RefCell<HostEnd>,
    mem: Arc<MemBuf>,
    got: RefCell<Vec<ToHost>>,
    /// Responses seen but not taken yet.
    held: RefCell<VecDeque<Cqe>>,
}

enum Link {
    Rdma(RdmaHost),
    Loop(LoopHost),
    Tcp(TcpLink),
}

/// One host queue.
pub struct Host {
    link: Link,
    pub depth: u32,
    /// The CM accept's private data (over loop and NVMe/TCP: the depth asked for, no push
    /// writes).
    pub accept: CmAccept,
    next_cid: u16,
    next_cmd_slot: Cell<usize>,
    /// The last response's receive completion (RDMA).
    pub last_wc: Option<Wc>,
    /// Capsules sent, and those whose taking [`Host::wait_response`] has seen (the target's
    /// transport took them).
    sends_posted: Cell<u64>,
    sends_ok: Cell<u64>,
}

pub fn cm_request(qid: u16, depth: u16) -> CmRequest {
    CmRequest {
        qid,
        hrqsize: depth,
        hsqsize: depth - 1,
        cntlid: 0,
        push: None,
    }
}

impl Host {
    /// Connects a queue: over RDMA, a CM connect with `cm` as private data; over loop, a
    /// channel for queue `cm.qid` of `cm.hrqsize` entries; over NVMe/TCP, a connection
    /// initialized (ICReq, ICResp): the queue it becomes is its first Connect's.
    pub fn connect(addr: SocketAddr, cm: CmRequest) -> Result<Host, FabricError> {
        let depth = u32::from(cm.hrqsize).max(1);
        match e2e_transport() {
            E2eTransport::Rdma => Host::connect_raw(addr, cm.encode().to_vec(), depth),
            E2eTransport::Loop => Ok(Host::connect_loop(addr, cm.qid, depth)),
            E2eTransport::Tcp => {
                let digests = e2e_tcp_digests();
                let link = TcpLink::connect(addr, cm.qid, BUF_LEN - DATA_OFF, digests)
                    .unwrap_or_else(|e| panic!("NVMe/TCP connect to {addr}: {e}"));
                Ok(Host::over(Link::Tcp(link), depth))
            }
        }
    }

    fn connect_loop(addr: SocketAddr, qid: u16, depth: u32) -> Host {
        let mem = Arc::new(MemBuf::zeroed(BUF_LEN).expect("host buffer"));
        // SAFETY: the buffer lives as long as the Arc kept with the region.
        let region = unsafe { Region::new(mem.as_ptr(), mem.len(), Box::new(Arc::clone(&mem))) };
        let end = loopback::connect(addr, qid, depth, region).expect("loop connect");
        let link = Link::Loop(LoopHost {
            end: RefCell::new(end),
            mem,
            got: RefCell::new(Vec::new()),
            held: RefCell::new(VecDeque::new()),
        });
        Host::over(link, depth)
    }

    /// A host queue over a link without CM private data: the accept is the depth asked for.
    fn over(link: Link, depth: u32) -> Host {
        Host {
            link,
            depth,
            accept: CmAccept {
                crqsize: depth as u16,
                push: PushAnswer::Absent,
            },
            next_cid: 1,
            next_cmd_slot: Cell::new(0),
            last_wc: None,
            sends_posted: Cell::new(0),
            sends_ok: Cell::new(0),
        }
    }

    /// CM connect with arbitrary private data (RDMA only).
    pub fn connect_raw(
        addr: SocketAddr,
        private_data: Vec<u8>,
        depth: u32,
    ) -> Result<Host, FabricError> {
        Host::connect_rnr(addr, private_data, depth, 7)
    }

    /// As [`Host::connect_raw`], with the host's RNR retry count (0: a SEND that finds no
    /// receive posted at the target fails at once with RNR_RETRY_EXC_ERR).
    pub fn connect_rnr(
        addr: SocketAddr,
        private_data: Vec<u8>,
        depth: u32,
        rnr_retry_count: u8,
    ) -> Result<Host, FabricError> {
        assert!(
            e2e_transport() == E2eTransport::Rdma,
            "an RDMA CM connect in a test run over {}",
            e2e_transport().name()
        );
        let resolved = fabric::resolve(e2e_fabric().0, addr, TIMEOUT)?;
        let dev = resolved.device();
        let pd = dev.alloc_pd()?;
        let cq = dev.create_cq(4 * depth + 16)?;
        let access =
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE | Access::MW_BIND;
        let mr = pd.register(MemBuf::zeroed(BUF_LEN)?, access)?;
        let init = QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            caps: QpCaps {
                max_send_wr: 2 * depth + 4,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            srq: None,
        };
        let param = ConnParam {
            private_data,
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count,
            min_rnr_timer: None,
        };
        let c = resolved.connect(&init, &param, TIMEOUT)?;
        let accept = CmAccept::decode(&c.private_data).expect("accept private data");
        let h = Host {
            link: Link::Rdma(RdmaHost {
                qp: c.qp,
                cq,
                pd,
                mr,
            }),
            depth,
            accept,
            next_cid: 1,
            next_cmd_slot: Cell::new(0),
            last_wc: None,
            sends_posted: Cell::new(0),
            sends_ok: Cell::new(0),
        };
        for i in 0..depth {
            h.post_recv(i);
        }
        Ok(h)
    }

    /// The RDMA parts (a test of RDMA itself; see [`skip_unless_rdma`]).
    pub fn rdma(&self) -> &RdmaHost {
        match &self.link {
            Link::Rdma(r) => r,
            _ => panic!(
                "an RDMA-only test ran over {} (use skip_unless_rdma)",
                e2e_transport().name()
            ),
        }
    }

    fn post_recv(&self, i: u32) {
        let r = self.rdma();
        let sge = [r.mr.sge(RECV_OFF + i as usize * 16, 16)];
        r.qp.post_recv(&[RecvWr {
            wr_id: u64::from(i),
            sgl: &sge,
        }])
        .expect("post recv");
    }

    /// Address of the host buffer's first byte, as keyed SGLs name it (RDMA and loop).
    pub fn buf_addr(&self) -> u64 {
        match &self.link {
            Link::Rdma(r) => r.mr.addr(),
            Link::Loop(l) => l.mem.as_ptr() as u64,
            Link::Tcp(_) => panic!("NVMe/TCP has no keyed SGLs (Host::keyed gives its SGL)"),
        }
    }

    /// The key of keyed SGLs into the host buffer (RDMA: the MR's rkey).
    pub fn key(&self) -> u32 {
        match &self.link {
            Link::Rdma(r) => r.mr.rkey(),
            Link::Loop(l) => l.end.borrow().key(),
            Link::Tcp(_) => panic!("NVMe/TCP has no keyed SGLs (Host::keyed gives its SGL)"),
        }
    }

    /// The data pointer of a command whose data is `len` bytes of the data buffer at `off`:
    /// a keyed SGL (RDMA, loop), or over NVMe/TCP the Transport SGL Data Block (0x5A) of
    /// `len`, which names no address: the link moves every command's data at offset 0.
    pub fn keyed(&self, off: usize, len: u32) -> Sgl {
        if let Link::Tcp(_) = self.link {
            assert_eq!(off, 0, "over NVMe/TCP a command's data is at data offset 0");
            return Sgl::Transport(TransportSgl { len });
        }
        Sgl::Keyed(KeyedSgl {
            addr: self.buf_addr() + (DATA_OFF + off) as u64,
            len,
            key: self.key(),
            invalidate: false,
        })
    }

    pub fn write_data(&self, off: usize, bytes: &[u8]) {
        match &self.link {
            Link::Tcp(t) => t.write_data(off, bytes),
            Link::Rdma(r) => r.mr.write_at(DATA_OFF + off, bytes).unwrap(),
            Link::Loop(l) => {
                assert!(DATA_OFF + off + bytes.len() <= l.mem.len());
                // SAFETY: within the buffer (checked); no command of this host is in flight.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        l.mem.as_ptr().add(DATA_OFF + off),
                        bytes.len(),
                    )
                }
            }
        }
    }

    pub fn read_data(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        match &self.link {
            Link::Tcp(t) => return t.read_data(off, len),
            Link::Rdma(r) => r.mr.read_at(DATA_OFF + off, &mut v).unwrap(),
            Link::Loop(l) => {
                assert!(DATA_OFF + off + len <= l.mem.len());
                // SAFETY: within the buffer (checked); no command of this host is in flight.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        l.mem.as_ptr().add(DATA_OFF + off),
                        v.as_mut_ptr(),
                        len,
                    )
                }
            }
        }
        v
    }

    /// Sends raw capsule bytes (no response expected by this call).
    pub fn send_capsule(&self, bytes: &[u8]) {
        assert!(bytes.len() <= CMD_SLOT);
        self.sends_posted.set(self.sends_posted.get() + 1);
        let r = match &self.link {
            Link::Rdma(r) => r,
            Link::Tcp(t) => {
                if t.send_capsule(bytes) {
                    self.sends_ok.set(self.sends_ok.get() + 1);
                }
                return;
            }
            Link::Loop(l) => {
                let mut end = l.end.borrow_mut();
                end.queue_raw(bytes)
                    .expect("a free capsule slot on the loop queue");
                end.flush();
                return;
            }
        };
        let slot = self.next_cmd_slot.get();
        self.next_cmd_slot.set((slot + 1) % CMD_SLOTS);
        let off = CMD_OFF + slot * CMD_SLOT;
        r.mr.write_at(off, bytes).unwrap();
        let sge = [r.mr.sge(off, bytes.len() as u32)];
        r.qp.post_send(&[SendWr {
            wr_id: SEND_ID,
            op: WrOp::Send,
            sgl: &sge,
            flags: SendFlags::SIGNALED,
        }])
        .expect("post send");
    }

    /// Whether every capsule sent so far was taken by the target's transport, as far as
    /// [`Host::wait_response`] has seen (their SEND completions were successful).
    pub fn all_sends_taken(&self) -> bool {
        self.sends_ok.get() == self.sends_posted.get()
    }

    /// Sends `sqe` (cid assigned here) with in-capsule `data`; waits for its response.
    pub fn submit(&mut self, sqe: Sqe, data: &[u8]) -> Cqe {
        self.try_submit(sqe, data).expect("a response")
    }

    /// As [`Host::submit`], but a queue that fails (torn down by the target) is an error
    /// with its text instead of a panic.
    pub fn try_submit(&mut self, mut sqe: Sqe, data: &[u8]) -> Result<Cqe, String> {
        sqe.cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1).max(1);
        let mut capsule = sqe.to_bytes().to_vec();
        capsule.extend_from_slice(data);
        self.send_capsule(&capsule);
        let cqe = self.wait_response()?;
        assert_eq!(cqe.cid, sqe.cid, "response for another command");
        Ok(cqe)
    }

    /// Takes what the loop or NVMe/TCP target sent: (loop) taken capsules counted, responses
    /// held; Err once the queue can answer no more.
    fn poll_link(&self) -> Result<(), String> {
        let l = match &self.link {
            Link::Loop(l) => l,
            Link::Tcp(t) => {
                t.poll(Duration::from_micros(200));
                return match t.failure() {
                    Some(why) => Err(why),
                    None => Ok(()),
                };
            }
            Link::Rdma(_) => unreachable!("loop and NVMe/TCP only"),
        };
        let mut got = l.got.borrow_mut();
        got.clear();
        l.end.borrow_mut().poll(&mut got);
        let mut held = l.held.borrow_mut();
        for m in got.iter() {
            match m {
                ToHost::Taken(_) => self.sends_ok.set(self.sends_ok.get() + 1),
                ToHost::Response(c) => held.push_back(*c),
            }
        }
        if held.is_empty() && l.end.borrow().is_closed() {
            return Err("the target closed the loop queue".into());
        }
        Ok(())
    }

    /// A response received and not taken yet (loop, NVMe/TCP).
    fn take_held(&self) -> Option<Cqe> {
        match &self.link {
            Link::Loop(l) => l.held.borrow_mut().pop_front(),
            Link::Tcp(t) => t.take_response(),
            Link::Rdma(_) => None,
        }
    }

    /// Responses received and not taken yet (loop, NVMe/TCP).
    fn held(&self) -> usize {
        match &self.link {
            Link::Loop(l) => l.held.borrow().len(),
            Link::Tcp(t) => t.responses_held(),
            Link::Rdma(_) => 0,
        }
    }

    /// Waits for the next response capsule.
    pub fn wait_response(&mut self) -> Result<Cqe, String> {
        let deadline = Instant::now() + TIMEOUT;
        if !matches!(self.link, Link::Rdma(_)) {
            loop {
                if let Some(c) = self.take_held() {
                    return Ok(c);
                }
                self.poll_link()?;
                if let Some(c) = self.take_held() {
                    return Ok(c);
                }
                if Instant::now() > deadline {
                    return Err("no response in time".into());
                }
                if let Link::Loop(_) = self.link {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        // One at a time: this returns at the first response, and a completion polled after it
        // in a batch would be lost (hosts with several commands in flight get many at once).
        let mut wcs = [Wc::default(); 1];
        loop {
            let n = self.rdma().cq.poll(&mut wcs).map_err(|e| e.to_string())?;
            for wc in &wcs[..n] {
                if wc.wr_id == SEND_ID {
                    if !wc.status.is_success() {
                        return Err(format!("send failed: {}", wc.status));
                    }
                    self.sends_ok.set(self.sends_ok.get() + 1);
                    continue;
                }
                if !wc.status.is_success() {
                    return Err(format!("receive failed: {}", wc.status));
                }
                let slot = wc.wr_id as u32;
                let mut b = [0u8; 16];
                self.rdma()
                    .mr
                    .read_at(RECV_OFF + slot as usize * 16, &mut b)
                    .unwrap();
                self.post_recv(slot);
                self.last_wc = Some(*wc);
                return Ok(Cqe::decode(&b));
            }
            if Instant::now() > deadline {
                return Err("no response in time".into());
            }
            if n == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Waits up to `timeout` for the target to tear the connection down: true at the
    /// fabric's Disconnected event (over loop: the channel closed), false when the time runs
    /// out. Any other connection event (an error: a device removed, an address change, a
    /// failed event channel) is not a disconnect by the target and fails the test with its
    /// text.
    pub fn wait_disconnected(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        if let Link::Tcp(t) = &self.link {
            while !t.is_closed() {
                if Instant::now() >= deadline {
                    return false;
                }
                t.poll(Duration::from_millis(2));
            }
            return true;
        }
        if let Link::Loop(l) = &self.link {
            while !l.end.borrow().is_closed() {
                if Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            return true;
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rdma().qp.cm_event(Some(left)) {
                Ok(Some(CmEvent::Disconnected)) => return true,
                Ok(Some(CmEvent::Error(e))) => {
                    panic!("waiting for a disconnect, got a connection error: {e}")
                }
                Ok(Some(CmEvent::Established)) => {}
                Ok(None) if left.is_zero() => return false,
                Ok(None) => {}
                Err(e) => panic!("waiting for a disconnect, the CM event channel failed: {e}"),
            }
        }
    }

    /// Waits (up to [`HANG_GUARD`]) until `n` more responses have arrived, without taking
    /// them: over RDMA their receives are not posted again (a host that stops taking
    /// responses).
    pub fn wait_untaken_responses(&self, n: usize) {
        let deadline = Instant::now() + HANG_GUARD;
        if !matches!(self.link, Link::Rdma(_)) {
            loop {
                self.poll_link().expect("the queue lives");
                if self.held() >= n {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "{n} responses within {HANG_GUARD:?}"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let mut wcs = [Wc::default(); 1];
        let mut got = 0;
        while got < n {
            let k = self.rdma().cq.poll(&mut wcs).expect("poll the CQ");
            for wc in &wcs[..k] {
                assert!(wc.status.is_success(), "completion {:?}", wc);
                if wc.wr_id != SEND_ID {
                    got += 1;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{got} of {n} responses within {HANG_GUARD:?}"
            );
            if k == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// Fabrics Connect; the 1024-byte data goes keyed (admin) or in-capsule (I/O queues,
    /// and every queue over NVMe/TCP, as the Linux host sends it there). The host ID is
    /// [`host_id_of`] `hostnqn`.
    pub fn fabrics_connect(
        &mut self,
        qid: u16,
        subnqn: &str,
        hostnqn: &str,
        cntlid: u16,
        kato_ms: u32,
    ) -> Cqe {
        let data = ConnectData {
            hostid: host_id_of(hostnqn),
            cntlid,
            subnqn: Nqn::new(subnqn).unwrap(),
            hostnqn: (!hostnqn.is_empty()).then(|| Nqn::new(hostnqn).unwrap()),
        }
        .encode();
        let c = Connect {
            qid,
            sqsize: (self.depth - 1) as u16,
            cattr: 0,
            kato_ms,
        };
        if qid == 0 && !matches!(self.link, Link::Tcp(_)) {
            self.write_data(0, &data);
            let sgl = self.keyed(0, data.len() as u32);
            self.submit(c.to_sqe(0, &sgl), &[])
        } else {
            let sgl = Sgl::InCapsule(InCapsuleSgl {
                offset: 0,
                len: data.len() as u32,
            });
            self.submit(c.to_sqe(0, &sgl), &data)
        }
    }

    pub fn property_get(&mut self, offset: u32, size: PropertySize) -> Cqe {
        self.submit(PropertyGet { size, offset }.to_sqe(0), &[])
    }

    pub fn property_set(&mut self, offset: u32, value: u64) -> Cqe {
        self.submit(
            PropertySet {
                size: PropertySize::Four,
                offset,
                value,
            }
            .to_sqe(0),
            &[],
        )
    }

    /// Read (`write` false) or Write of `blocks` at `lba` with a keyed SGL at data offset 0.
    pub fn rw(&mut self, write: bool, nsid: u32, lba: u64, blocks: u32) -> Cqe {
        let sgl = self.keyed(0, blocks * BLOCK);
        self.submit(rw_sqe(write, nsid, lba, blocks, &sgl), &[])
    }
}

/// The host ID the test hosts send with `hostnqn`: [`HOSTID`] for [`HOSTNQN`], another one
/// derived from the NQN for any other host (each host its own, as real hosts have).
pub fn host_id_of(hostnqn: &str) -> [u8; 16] {
    if hostnqn == HOSTNQN {
        return HOSTID;
    }
    let h = hostnqn.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut id = HOSTID;
    id[..8].copy_from_slice(&h.to_le_bytes());
    id
}
