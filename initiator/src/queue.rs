//! One NVMe-oF/RDMA queue (admin or I/O) over one reliable-connected QP: command capsules,
//! 16-byte response receives, request tracking by command ID, the three ways write data
//! travels (keyed SGL, in-capsule, pushed into a window slot), timeouts and failure.
//!
//! A request's life (`ReqState`): `Free` -> `Posted` (capsule posted, waiting for both the
//! send completion and the response capsule) -> completed, back to `Free`. The capsule buffer
//! is reused only after its send completed *and* its response arrived (the same rule as the
//! Linux host). A queue that fails (error completion, disconnect, malformed response, command
//! timeout) is disconnected first, then every posted request completes with a transport
//! error: once the QP is in the error state the target can no longer reach their buffers.
//!
//! Work request IDs: bits 63:62 say what the WR is (capsule send, response receive), the low
//! 16 bits are the command ID or the receive slot.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::fabric::{
    self, CmEvent, ConnParam, Cq, FabricError, MemBuf, Mr, Pd, ProviderKind, QpCaps, QpInit,
    RecvWr, SendFlags, SendWr, Sge, Wc, WcStatus, WrOp,
};
use rdmablk::fabric::{Access, Qp};
use rdmablk::nvme::opcodes;
use rdmablk::nvme::transport::rdma::{
    CmAccept, CmReject, CmRequest, PushAnswer, PushRequest, PushWindow, PushedSgl,
};
use rdmablk::nvme::{Cqe, InCapsuleSgl, KeyedSgl, Sgl, Sqe, CQE_LEN, SQE_LEN};

use crate::buf::IoBuf;
use crate::error::{Error, Result};
use crate::stats::Stats;

const WR_SEND: u64 = 1 << 62;
const WR_RECV: u64 = 2 << 62;
const WR_KIND: u64 = 3 << 62;
/// How often a busy queue looks at CM events and command deadlines.
const HOUSEKEEPING: Duration = Duration::from_millis(10);

/// The fabric objects that outlive reconnects: device, PD (and the buffer pool on it).
#[derive(Clone)]
pub(crate) struct Fabric {
    pub kind: ProviderKind,
    pub pd: Pd,
}

/// One contiguous piece of registered memory a command's data lives in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
    pub rkey: u32,
}

impl Seg {
    pub fn of(buf: &IoBuf, at: usize, len: u32) -> Seg {
        debug_assert!(at + len as usize <= buf.len());
        Seg {
            addr: buf.addr(at),
            len,
            lkey: buf.lkey(),
            rkey: buf.rkey(),
        }
    }
}

/// Data direction of a command.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dir {
    None,
    /// Controller to host (Read, Identify): the target RDMA WRITEs into `Seg`.
    ToHost(Seg),
    /// Host to controller (Write, Connect data, DSM ranges).
    ToCtrl(Seg),
}

/// A finished request.
#[derive(Debug)]
pub(crate) struct Done {
    pub tag: u64,
    /// The response, whatever its status; `Err` if the queue failed first.
    pub result: Result<Cqe>,
    pub buf: Option<IoBuf>,
}

/// Why a submission was not queued; the buffer comes back.
#[derive(Debug)]
pub(crate) enum SubmitError {
    Full(Option<IoBuf>),
    Failed(Error, Option<IoBuf>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReqState {
    Free,
    Posted,
}

struct Req {
    state: ReqState,
    tag: u64,
    buf: Option<IoBuf>,
    send_done: bool,
    cqe: Option<Cqe>,
    push_slot: Option<u16>,
    /// `None` for a command the controller holds on purpose (Asynchronous Event Request).
    deadline: Option<Instant>,
    /// Reads at least [`LARGE_READ`] bytes: see [`Queue::wait`].
    large: bool,
}

/// Reads from this size up arrive as payloads larger than what a thread waiting on the CQ
/// parses itself on the soft provider; [`Queue::wait`] leaves them to the provider's receive
/// thread, which copies them while this thread goes on.
const LARGE_READ: u32 = 64 * 1024;

struct Push {
    window: PushWindow,
}

/// What a queue is connected with.
pub(crate) struct QueueParams {
    pub addr: SocketAddr,
    pub qid: u16,
    /// Submission queue entries (the CM request's HRQSIZE; HSQSIZE is one less).
    pub entries: u16,
    /// In-capsule data bytes the controller takes on this queue (0 on the admin queue).
    pub in_capsule_bytes: u32,
    pub push: Option<PushRequest>,
    pub connect_timeout: Duration,
    pub cmd_timeout: Duration,
}

pub(crate) struct Queue {
    qid: u16,
    entries: u16,
    qp: Qp,
    cq: Cq,
    capsules: Mr,
    responses: Mr,
    reqs: Vec<Req>,
    free: Vec<u16>,
    posted: usize,
    /// Posted requests that are large reads.
    large_posted: usize,
    in_capsule_bytes: u32,
    push: Option<Push>,
    cmd_timeout: Duration,
    failed: Option<String>,
    next_housekeeping: Instant,
    wcs: Vec<Wc>,
    /// Completions of other commands (a held Asynchronous Event Request) that arrived while
    /// [`Queue::exec`] waited for its own: see [`Queue::take_stray`].
    stray: Vec<Done>,
    /// The session's abort switch (see `Session::abort`).
    abort: Option<Arc<AtomicBool>>,
    stats: Arc<Stats>,
}

impl Queue {
    /// Resolves, creates the QP and CM-connects queue `p.qid` (no NVMe command yet).
    pub fn connect(fab: &Fabric, p: &QueueParams, stats: Arc<Stats>) -> Result<Queue> {
        let qid = p.qid;
        let n = usize::from(p.entries);
        let resolved = fabric::resolve(fab.kind, p.addr, p.connect_timeout)
            .map_err(Error::fabric(qid, "resolve address"))?;
        let device = resolved.device();
        let attr = device.attr().map_err(Error::fabric(qid, "query device"))?;
        let cq = device
            .create_cq(3 * u32::from(p.entries) + 8)
            .map_err(Error::fabric(qid, "create CQ"))?;
        let capsules = register(&fab.pd, n * SQE_LEN, Access::LOCAL_WRITE, qid)?;
        let responses = register(&fab.pd, n * CQE_LEN, Access::LOCAL_WRITE, qid)?;
        let caps = QpCaps {
            // A capsule send and, for pushed writes, an RDMA WRITE per command.
            max_send_wr: 2 * u32::from(p.entries) + 1,
            max_recv_wr: u32::from(p.entries),
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInit {
            pd: &fab.pd,
            send_cq: &cq,
            recv_cq: &cq,
            caps,
        };
        let req = CmRequest {
            qid,
            hrqsize: p.entries,
            hsqsize: p.entries - 1,
            cntlid: 0,
            push: p.push,
        };
        let param = ConnParam {
            private_data: req.encode().to_vec(),
            responder_resources: attr.max_qp_rd_atom.min(255) as u8,
            initiator_depth: attr.max_qp_init_rd_atom.clamp(1, 16) as u8,
            retry_count: 7,
            rnr_retry_count: 7,
        };
        let connected = match resolved.connect(&init, &param, p.connect_timeout) {
            Ok(c) => c,
            Err(FabricError::Rejected { addr, private_data }) => {
                return Err(match CmReject::decode(&private_data) {
                    Ok(r) => Error::Rejected {
                        qid,
                        status: r.status,
                    },
                    Err(_) => Error::Refused {
                        qid,
                        addr: addr.to_string(),
                    },
                })
            }
            Err(e) => return Err(Error::fabric(qid, "connect")(e)),
        };
        let accept = CmAccept::decode(&connected.private_data).map_err(Error::wire)?;
        let push = match (p.push, accept.push) {
            (Some(_), PushAnswer::Granted(w)) => Some(Push { window: w }),
            (None, PushAnswer::Granted(_)) => {
                return Err(Error::protocol(
                    "the accept grants push writes that were not asked for",
                ))
            }
            _ => None,
        };
        tracing::debug!(qid, entries = p.entries, crqsize = accept.crqsize,
            push = ?accept.push, "queue connected");
        let mut q = Queue {
            qid,
            entries: p.entries,
            qp: connected.qp,
            cq,
            capsules,
            responses,
            reqs: (0..n)
                .map(|_| Req {
                    state: ReqState::Free,
                    tag: 0,
                    buf: None,
                    send_done: false,
                    cqe: None,
                    push_slot: None,
                    deadline: None,
                    large: false,
                })
                .collect(),
            free: (0..p.entries).rev().collect(),
            posted: 0,
            large_posted: 0,
            in_capsule_bytes: p.in_capsule_bytes,
            push,
            cmd_timeout: p.cmd_timeout,
            failed: None,
            next_housekeeping: Instant::now(),
            wcs: vec![Wc::default(); 2 * n + 8],
            stray: Vec::new(),
            abort: None,
            stats,
        };
        for i in 0..p.entries {
            q.post_recv(i)?;
        }
        Ok(q)
    }

    pub fn qid(&self) -> u16 {
        self.qid
    }

    pub fn entries(&self) -> u16 {
        self.entries
    }

    /// Commands posted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.posted
    }

    /// The push window, if the target granted one.
    pub fn push_window(&self) -> Option<PushWindow> {
        self.push.as_ref().map(|p| p.window)
    }

    pub fn set_in_capsule_bytes(&mut self, n: u32) {
        self.in_capsule_bytes = n;
    }

    /// The time each command posted from now on gets for its response (an I/O queue gets
    /// `io_timeout_ms` once its Connect is done; its Connect had `connect_timeout_ms`).
    pub fn set_cmd_timeout(&mut self, timeout: Duration) {
        self.cmd_timeout = timeout;
    }

    /// Makes the queue fail at its next housekeeping once `abort` is set.
    pub fn set_abort(&mut self, abort: Arc<AtomicBool>) {
        self.abort = Some(abort);
    }

    /// Why the queue failed, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    fn post_recv(&mut self, slot: u16) -> Result<()> {
        let sge = [self
            .responses
            .sge(usize::from(slot) * CQE_LEN, CQE_LEN as u32)];
        self.qp
            .post_recv(&[RecvWr {
                wr_id: WR_RECV | u64::from(slot),
                sgl: &sge,
            }])
            .map_err(Error::fabric(self.qid, "post receive"))
    }

    /// Posts a command. `sqe`'s cid and data pointer are filled in here. `buf` is kept until
    /// completion (it is what `dir` points into, or `None` when the caller keeps the memory
    /// alive across the command itself).
    pub fn submit(
        &mut self,
        sqe: Sqe,
        dir: Dir,
        buf: Option<IoBuf>,
        tag: u64,
    ) -> Result<(), SubmitError> {
        let deadline = Instant::now() + self.cmd_timeout;
        self.post(sqe, dir, buf, tag, Some(deadline))
    }

    /// Posts a command the controller holds until it has something to say (Asynchronous
    /// Event Request): no timeout applies to it.
    pub fn submit_held(&mut self, sqe: Sqe, tag: u64) -> Result<()> {
        match self.post(sqe, Dir::None, None, tag, None) {
            Ok(()) => Ok(()),
            Err(SubmitError::Failed(e, _)) => Err(e),
            Err(SubmitError::Full(_)) => Err(Error::protocol("no free command ID on the queue")),
        }
    }

    fn post(
        &mut self,
        mut sqe: Sqe,
        dir: Dir,
        buf: Option<IoBuf>,
        tag: u64,
        deadline: Option<Instant>,
    ) -> Result<(), SubmitError> {
        if let Some(why) = &self.failed {
            let e = Error::Transport {
                qid: self.qid,
                what: why.clone(),
            };
            return Err(SubmitError::Failed(e, buf));
        }
        let Some(cid) = self.free.pop() else {
            return Err(SubmitError::Full(buf));
        };
        sqe.cid = cid;
        let mut push_slot = None;
        let mut write_wr = None;
        let mut data_sge = None;
        let sgl = match dir {
            Dir::None => Sgl::Keyed(KeyedSgl {
                addr: 0,
                len: 0,
                key: 0,
                invalidate: false,
            }),
            Dir::ToHost(s) => keyed(s),
            Dir::ToCtrl(s) if sqe.opcode == opcodes::io::WRITE && self.qid != 0 => {
                match self.push_slot(cid, s.len) {
                    Some((slot, remote_addr, rkey)) => {
                        push_slot = Some(slot);
                        write_wr = Some((s, remote_addr, rkey));
                        self.stats.add_pushed(s.len);
                        Sgl::InCapsule(InCapsuleSgl { offset: 0, len: 0 }) // replaced below
                    }
                    None if s.len <= self.in_capsule_bytes => {
                        data_sge = Some(Sge {
                            addr: s.addr,
                            length: s.len,
                            lkey: s.lkey,
                        });
                        self.stats.add_in_capsule(s.len);
                        Sgl::InCapsule(InCapsuleSgl {
                            offset: 0,
                            len: s.len,
                        })
                    }
                    None => {
                        self.stats.add_keyed_write(s.len);
                        keyed(s)
                    }
                }
            }
            Dir::ToCtrl(s) => keyed(s),
        };
        match push_slot {
            Some(slot) => {
                let len = write_wr.map_or(0, |w| w.0.len);
                sqe.dptr = PushedSgl {
                    slot: u64::from(slot),
                    len,
                }
                .encode();
            }
            None => sqe.set_sgl(&sgl),
        }
        let off = usize::from(cid) * SQE_LEN;
        self.capsules
            .write_at(off, &sqe.to_bytes())
            .expect("capsule slot inside its region");
        let cap_sge = self.capsules.sge(off, SQE_LEN as u32);
        let sges = [cap_sge, data_sge.unwrap_or_default()];
        let nsge = if data_sge.is_some() { 2 } else { 1 };
        let wsge;
        let mut wrs: [Option<SendWr<'_>>; 2] = [None, None];
        if let Some((s, remote_addr, rkey)) = write_wr {
            wsge = [Sge {
                addr: s.addr,
                length: s.len,
                lkey: s.lkey,
            }];
            wrs[0] = Some(SendWr {
                wr_id: 0,
                op: WrOp::RdmaWrite { remote_addr, rkey },
                sgl: &wsge,
                flags: SendFlags::empty(),
            });
        }
        wrs[1] = Some(SendWr {
            wr_id: WR_SEND | u64::from(cid),
            op: WrOp::Send,
            sgl: &sges[..nsge],
            flags: SendFlags::SIGNALED,
        });
        let chain: Vec<SendWr<'_>> = wrs.iter().flatten().copied().collect();
        if let Err(e) = self.qp.post_send(&chain) {
            self.free.push(cid);
            let e = Error::fabric(self.qid, "post command")(e);
            self.fail(e.to_string());
            return Err(SubmitError::Failed(e, buf));
        }
        let large = matches!(dir, Dir::ToHost(s) if s.len >= LARGE_READ);
        let r = &mut self.reqs[usize::from(cid)];
        debug_assert_eq!(r.state, ReqState::Free);
        *r = Req {
            state: ReqState::Posted,
            tag,
            buf,
            send_done: false,
            cqe: None,
            push_slot,
            deadline,
            large,
        };
        self.posted += 1;
        self.large_posted += usize::from(large);
        tracing::trace!(
            qid = self.qid,
            cid,
            opcode = sqe.opcode,
            "request Free -> Posted"
        );
        Ok(())
    }

    /// The push slot of command `cid`: slot = cid, so a slot is busy exactly while its command
    /// is (rdmablk-target requires slot = cid % queue depth).
    fn push_slot(&self, cid: u16, len: u32) -> Option<(u16, u64, u32)> {
        let w = self.push.as_ref()?.window;
        if len > w.slot_bytes || len == 0 {
            return None;
        }
        Some((cid, w.slot_addr(cid)?, w.rkey))
    }

    /// Moves finished requests into `out` without blocking; returns how many.
    pub fn poll(&mut self, out: &mut Vec<Done>) -> usize {
        let before = out.len();
        if self.failed.is_none() {
            self.poll_cq(out);
        }
        if self.failed.is_none() && Instant::now() >= self.next_housekeeping {
            self.housekeeping();
        }
        if self.failed.is_some() {
            self.fail_posted(out);
        }
        out.len() - before
    }

    fn poll_cq(&mut self, out: &mut Vec<Done>) {
        loop {
            let mut wcs = std::mem::take(&mut self.wcs);
            let n = match self.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    self.wcs = wcs;
                    return self.fail(format!("poll CQ: {e}"));
                }
            };
            for wc in &wcs[..n] {
                self.on_wc(wc, out);
                if self.failed.is_some() {
                    break;
                }
            }
            self.wcs = wcs;
            if n < self.wcs.len() || self.failed.is_some() {
                return;
            }
        }
    }

    fn on_wc(&mut self, wc: &Wc, out: &mut Vec<Done>) {
        if wc.status != WcStatus::Success {
            let what = match wc.wr_id & WR_KIND {
                WR_SEND => "command send",
                WR_RECV => "response receive",
                _ => "RDMA WRITE of pushed data",
            };
            return self.fail(format!("{what} completed with {}", wc.status));
        }
        let idx = (wc.wr_id & 0xFFFF) as u16;
        match wc.wr_id & WR_KIND {
            WR_SEND => {
                let r = &mut self.reqs[usize::from(idx)];
                if r.state != ReqState::Posted || r.send_done {
                    return self.fail(format!("send completion for idle cid {idx}"));
                }
                r.send_done = true;
                if r.cqe.is_some() {
                    self.complete(idx, out);
                }
            }
            WR_RECV => self.on_response(idx, wc, out),
            _ => self.fail(format!("completion with unknown wr_id {:#x}", wc.wr_id)),
        }
    }

    fn on_response(&mut self, slot: u16, wc: &Wc, out: &mut Vec<Done>) {
        if wc.byte_len as usize != CQE_LEN {
            return self.fail(format!(
                "response capsule of {} bytes, expected {CQE_LEN}",
                wc.byte_len
            ));
        }
        let mut b = [0u8; CQE_LEN];
        self.responses
            .read_at(usize::from(slot) * CQE_LEN, &mut b)
            .expect("response slot inside its region");
        if let Err(e) = self.post_recv(slot) {
            return self.fail(e.to_string());
        }
        let cqe = Cqe::decode(&b);
        if let Some(rkey) = wc.invalidated_rkey {
            // We send keyed SGLs of type 0x40 only: no key is ours to invalidate.
            return self.fail(format!(
                "Bogus remote invalidation of rkey {rkey:#x} (cid {}): we asked for none",
                cqe.cid
            ));
        }
        let Some(r) = self.reqs.get_mut(usize::from(cqe.cid)) else {
            return self.fail(format!("response for cid {} past the queue", cqe.cid));
        };
        if r.state != ReqState::Posted || r.cqe.is_some() {
            return self.fail(format!("response for idle cid {}", cqe.cid));
        }
        r.cqe = Some(cqe);
        if r.send_done {
            self.complete(cqe.cid, out);
        }
    }

    fn complete(&mut self, cid: u16, out: &mut Vec<Done>) {
        let r = &mut self.reqs[usize::from(cid)];
        let cqe = r.cqe.take().expect("complete with a response");
        let (tag, buf, slot) = (r.tag, r.buf.take(), r.push_slot.take());
        r.state = ReqState::Free;
        r.send_done = false;
        debug_assert!(slot.map_or(true, |s| s == cid));
        self.free.push(cid);
        self.posted -= 1;
        self.large_posted -= usize::from(std::mem::take(&mut r.large));
        tracing::trace!(qid = self.qid, cid, status = %cqe.status, "request Posted -> Free");
        out.push(Done {
            tag,
            result: Ok(cqe),
            buf,
        });
    }

    fn housekeeping(&mut self) {
        let now = Instant::now();
        self.next_housekeeping = now + HOUSEKEEPING;
        if self
            .abort
            .as_ref()
            .is_some_and(|a| a.load(Ordering::Acquire))
        {
            return self.fail("the controller failed (keep-alive, or another queue)".into());
        }
        match self.qp.cm_event(Some(Duration::ZERO)) {
            Ok(None) | Ok(Some(CmEvent::Established)) => {}
            Ok(Some(CmEvent::Disconnected)) => return self.fail("the target disconnected".into()),
            Ok(Some(CmEvent::Error(e))) => return self.fail(format!("connection error: {e}")),
            Err(e) => return self.fail(format!("connection events: {e}")),
        }
        if let Some((cid, _)) = self
            .reqs
            .iter()
            .enumerate()
            .find(|(_, r)| r.state == ReqState::Posted && r.deadline.is_some_and(|d| d <= now))
        {
            let ms = self.cmd_timeout.as_millis();
            self.fail(format!("command cid {cid} got no response in {ms} ms"));
        }
    }

    /// Marks the queue failed and stops the QP, so the target can no longer touch any buffer
    /// of a posted request. Posted requests complete with errors at the next poll.
    pub fn fail(&mut self, why: String) {
        if self.failed.is_none() {
            tracing::warn!(qid = self.qid, "queue failed: {why}");
            let _ = self.qp.disconnect();
            self.failed = Some(why);
        }
    }

    fn fail_posted(&mut self, out: &mut Vec<Done>) {
        let why = self.failed.clone().unwrap_or_default();
        for cid in 0..self.reqs.len() {
            let r = &mut self.reqs[cid];
            if r.state != ReqState::Posted {
                continue;
            }
            r.state = ReqState::Free;
            r.cqe = None;
            r.send_done = false;
            r.push_slot = None;
            out.push(Done {
                tag: r.tag,
                result: Err(Error::Transport {
                    qid: self.qid,
                    what: why.clone(),
                }),
                buf: r.buf.take(),
            });
            self.posted -= 1;
            self.large_posted -= usize::from(std::mem::take(&mut r.large));
        }
        // Slots and command IDs are not reused on a failed queue.
    }

    /// Waits until at least one request finishes, the queue fails, or `timeout` passes.
    pub fn wait(&mut self, out: &mut Vec<Done>, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        let mut spins = 0;
        loop {
            let n = self.poll(out);
            if n > 0 || self.posted == 0 {
                return n;
            }
            let now = Instant::now();
            if now >= deadline {
                return 0;
            }
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            if self.cq.arm().is_err() {
                std::thread::yield_now();
                continue;
            }
            let n = self.poll(out);
            if n > 0 {
                return n;
            }
            let slice = (deadline - now).min(HOUSEKEEPING);
            // Small answers this thread parses as they arrive (soft provider: no hop through
            // the receive thread); large read payloads the receive thread copies meanwhile.
            let _ = if self.large_posted > 0 {
                self.cq.wait_passive(Some(slice))
            } else {
                self.cq.wait(Some(slice))
            };
        }
    }

    /// Completions of held commands that [`Queue::exec`] set aside while it waited.
    pub fn take_stray(&mut self, out: &mut Vec<Done>) {
        out.append(&mut self.stray);
    }

    /// Runs one command to completion (admin commands, Connect). The request's own
    /// response status is returned as is; transport failures are `Err`. Other completions
    /// arriving meanwhile (a held event request) are kept for [`Queue::take_stray`].
    pub fn exec(&mut self, sqe: Sqe, dir: Dir, buf: Option<IoBuf>) -> Result<(Cqe, Option<IoBuf>)> {
        self.exec_within(sqe, dir, buf, self.cmd_timeout)
    }

    /// [`Queue::exec`] with its own command timeout (Keep Alive: the keep-alive timeout).
    pub fn exec_within(
        &mut self,
        sqe: Sqe,
        dir: Dir,
        buf: Option<IoBuf>,
        timeout: Duration,
    ) -> Result<(Cqe, Option<IoBuf>)> {
        const TAG: u64 = u64::MAX;
        let deadline = Some(Instant::now() + timeout);
        match self.post(sqe, dir, buf, TAG, deadline) {
            Ok(()) => {}
            Err(SubmitError::Failed(e, _)) => return Err(e),
            Err(SubmitError::Full(_)) => {
                return Err(Error::protocol("exec on a queue with commands in flight"))
            }
        }
        let mut out = Vec::with_capacity(4);
        loop {
            self.wait(&mut out, self.cmd_timeout);
            if let Some(i) = out.iter().position(|d| d.tag == TAG) {
                let d = out.swap_remove(i);
                self.stray.append(&mut out);
                return d.result.map(|c| (c, d.buf));
            }
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if self.failed.is_none() {
            let _ = self.qp.disconnect();
        }
    }
}

fn keyed(s: Seg) -> Sgl {
    Sgl::Keyed(KeyedSgl {
        addr: s.addr,
        len: s.len,
        key: s.rkey,
        invalidate: false,
    })
}

fn register(pd: &Pd, len: usize, access: Access, qid: u16) -> Result<Mr> {
    let mem = MemBuf::zeroed(len).map_err(Error::fabric(qid, "map queue buffers"))?;
    pd.register(mem, access)
        .map_err(Error::fabric(qid, "register queue buffers"))
}
