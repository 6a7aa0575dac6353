//! NVMe/RDMA: `rdma://` (the verbs provider) and `soft://` (rdmablk's soft provider). A
//! controller's buffer pool is registered on a protection domain of the device that reaches
//! its address ([`Rdma`]'s `open_pool`), and its queues are opened with that provider and PD
//! and the push-write request ([`RdmaFabric`]). One queue ([`RdmaLink`]) is a
//! reliable-connected QP whose sends carry command capsules (with in-capsule data as a second
//! SGE, or after an RDMA WRITE of pushed data into the target's window slot) and whose
//! receives take 16-byte responses; CM connect with the NVMe/RDMA private data; CM events.
//!
//! Work request IDs: bits 63:62 say what the WR is (capsule send, response receive), the low
//! 16 bits are the command ID or the receive slot.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rdmablk::fabric::{
    self, Access, CmEvent, ConnParam, Cq, FabricError, MemBuf, Mr, Pd, ProviderKind, Qp, QpCaps,
    QpInit, RecvWr, SendFlags, SendWr, Sge, Wc, WcStatus, WrOp,
};
use rdmablk::nvme::discovery::trtype;
use rdmablk::nvme::opcodes;
use rdmablk::nvme::transport::rdma::{
    CmAccept, CmReject, CmRequest, PushAnswer, PushRequest, PushWindow, PushedSgl,
};
use rdmablk::nvme::{Cqe, InCapsuleSgl, KeyedSgl, Sgl, SglNeed, Sqe, CQE_LEN, SQE_LEN};

use super::{Dir, Event, Fabric, QueueParams, QueueTransport, Seg, Transport, TransportOps};
use crate::buf::BufPool;
use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::stats::Stats;

/// NVMe/RDMA's row of the transport table.
pub(crate) struct Rdma;

impl TransportOps for Rdma {
    fn schemes(&self) -> &'static [&'static str] {
        &["rdma", "soft"]
    }

    fn trtype(&self) -> u8 {
        trtype::RDMA
    }

    /// A soft-provider target lists its soft listeners as RDMA: an entry is reached over the
    /// provider the discovery ran on (verbs when the discovery ran over another transport).
    fn discovered_scheme(&self, via: Transport) -> &'static str {
        match via.provider() {
            Some(ProviderKind::Soft) => "soft",
            _ => "rdma",
        }
    }

    fn provider(&self, scheme: &str) -> Option<ProviderKind> {
        match scheme {
            "soft" => Some(ProviderKind::Soft),
            _ => Some(ProviderKind::Verbs),
        }
    }

    fn open_pool(
        &self,
        t: Transport,
        addr: SocketAddr,
        opts: &ConnectOptions,
        bytes: usize,
    ) -> Result<BufPool> {
        let kind = provider_of(t);
        let resolved = fabric::resolve(kind, addr, opts.connect_timeout())
            .map_err(Error::fabric(0, "resolve address"))?;
        let pd = resolved
            .device()
            .alloc_pd()
            .map_err(Error::fabric(0, "allocate protection domain"))?;
        BufPool::new(Some(&pd), bytes)
    }

    fn open(
        &self,
        t: Transport,
        _: &str,
        opts: &ConnectOptions,
        pool: &BufPool,
    ) -> Result<Arc<dyn Fabric>> {
        // Never so by construction: a controller's pool comes from its own row, and a
        // multipath set's from its first RDMA path's.
        let pd = pool.pd().ok_or_else(|| Error::Controller {
            what: format!("{}:// needs a buffer pool registered for RDMA", t.scheme()),
        })?;
        Ok(Arc::new(RdmaFabric {
            kind: provider_of(t),
            pd: pd.clone(),
            push_writes: opts.push_writes,
        }))
    }
}

fn provider_of(t: Transport) -> ProviderKind {
    t.provider().unwrap_or(ProviderKind::Verbs)
}

/// NVMe/RDMA opened for one controller: the provider and the protection domain its buffer
/// pool is registered on, and whether its I/O queues ask for push writes.
struct RdmaFabric {
    kind: ProviderKind,
    pd: Pd,
    push_writes: bool,
}

impl Fabric for RdmaFabric {
    fn sgl_need(&self) -> SglNeed {
        SglNeed::Keyed
    }

    fn connect(&self, p: &QueueParams, stats: Arc<Stats>) -> Result<Box<dyn QueueTransport>> {
        // Push writes (rdmablk's extension) on I/O queues: a slot per command, of the
        // largest transfer.
        let push = (self.push_writes && p.qid != 0).then_some(PushRequest {
            slots: p.entries,
            slot_bytes: p.max_transfer_bytes,
        });
        Ok(Box::new(RdmaLink::connect(
            self.kind, &self.pd, p, push, stats,
        )?))
    }
}

const WR_SEND: u64 = 1 << 62;
const WR_RECV: u64 = 2 << 62;
const WR_KIND: u64 = 3 << 62;

/// One queue's QP and buffers.
pub(crate) struct RdmaLink {
    qid: u16,
    qp: Qp,
    cq: Cq,
    capsules: Mr,
    responses: Mr,
    in_capsule_bytes: u32,
    push: Option<PushWindow>,
    wcs: Vec<Wc>,
    stats: Arc<Stats>,
}

impl RdmaLink {
    /// Resolves, creates the QP and CM-connects queue `p.qid` over `kind` with buffers on
    /// `pd`, asking for `push` (no NVMe command yet).
    fn connect(
        kind: ProviderKind,
        pd: &Pd,
        p: &QueueParams,
        push: Option<PushRequest>,
        stats: Arc<Stats>,
    ) -> Result<RdmaLink> {
        let qid = p.qid;
        let n = usize::from(p.entries);
        let resolved = fabric::resolve(kind, p.addr, p.connect_timeout)
            .map_err(Error::fabric(qid, "resolve address"))?;
        let device = resolved.device();
        let attr = device.attr().map_err(Error::fabric(qid, "query device"))?;
        let cq = device
            .create_cq(3 * u32::from(p.entries) + 8)
            .map_err(Error::fabric(qid, "create CQ"))?;
        let capsules = register(pd, n * SQE_LEN, Access::LOCAL_WRITE, qid)?;
        let responses = register(pd, n * CQE_LEN, Access::LOCAL_WRITE, qid)?;
        let caps = QpCaps {
            // A capsule send and, for pushed writes, an RDMA WRITE per command.
            max_send_wr: 2 * u32::from(p.entries) + 1,
            max_recv_wr: u32::from(p.entries),
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInit {
            pd,
            send_cq: &cq,
            recv_cq: &cq,
            caps,
            srq: None,
        };
        let req = CmRequest {
            qid,
            hrqsize: p.entries,
            hsqsize: p.entries - 1,
            cntlid: 0,
            push,
        };
        let param = ConnParam {
            private_data: req.encode().to_vec(),
            responder_resources: attr.max_qp_rd_atom.min(255) as u8,
            initiator_depth: attr.max_qp_init_rd_atom.clamp(1, 16) as u8,
            retry_count: 7,
            rnr_retry_count: 7,
            min_rnr_timer: None,
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
                        hint: "no NVMe/RDMA reject data: is it an NVMe-oF target on that port?",
                    },
                })
            }
            Err(e) => return Err(Error::fabric(qid, "connect")(e)),
        };
        let accept = CmAccept::decode(&connected.private_data).map_err(Error::wire)?;
        let push = match (push, accept.push) {
            (Some(_), PushAnswer::Granted(w)) => Some(w),
            (None, PushAnswer::Granted(_)) => {
                return Err(Error::protocol(
                    "the accept grants push writes that were not asked for",
                ))
            }
            _ => None,
        };
        tracing::debug!(qid, entries = p.entries, crqsize = accept.crqsize,
            push = ?accept.push, "queue connected");
        let mut link = RdmaLink {
            qid,
            qp: connected.qp,
            cq,
            capsules,
            responses,
            in_capsule_bytes: p.in_capsule_bytes,
            push,
            wcs: vec![Wc::default(); 2 * n + 8],
            stats,
        };
        for i in 0..p.entries {
            link.post_recv(i)?;
        }
        Ok(link)
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

    /// The push slot of command `cid` (its address and key): slot = cid, so a slot is busy exactly while its command
    /// is (rdmablk-target requires slot = cid % queue depth).
    fn push_slot(&self, cid: u16, len: u32) -> Option<(u64, u32)> {
        let w = self.push.as_ref()?;
        if len > w.slot_bytes || len == 0 {
            return None;
        }
        Some((w.slot_addr(cid)?, w.rkey))
    }

    fn on_wc(&mut self, wc: &Wc, events: &mut Vec<Event>) -> Result<(), String> {
        if wc.status != WcStatus::Success {
            let what = match wc.wr_id & WR_KIND {
                WR_SEND => "command send",
                WR_RECV => "response receive",
                _ => "RDMA WRITE of pushed data",
            };
            return Err(format!("{what} completed with {}", wc.status));
        }
        let idx = (wc.wr_id & 0xFFFF) as u16;
        match wc.wr_id & WR_KIND {
            WR_SEND => events.push(Event::Sent(idx)),
            WR_RECV => events.push(Event::Response(self.on_response(idx, wc)?)),
            _ => return Err(format!("completion with unknown wr_id {:#x}", wc.wr_id)),
        }
        Ok(())
    }

    fn on_response(&mut self, slot: u16, wc: &Wc) -> Result<Cqe, String> {
        if wc.byte_len as usize != CQE_LEN {
            return Err(format!(
                "response capsule of {} bytes, expected {CQE_LEN}",
                wc.byte_len
            ));
        }
        let mut b = [0u8; CQE_LEN];
        self.responses
            .read_at(usize::from(slot) * CQE_LEN, &mut b)
            .expect("response slot inside its region");
        self.post_recv(slot).map_err(|e| e.to_string())?;
        let cqe = Cqe::decode(&b);
        if let Some(rkey) = wc.invalidated_rkey {
            // We send keyed SGLs of type 0x40 only: no key is ours to invalidate.
            return Err(format!(
                "Bogus remote invalidation of rkey {rkey:#x} (cid {}): we asked for none",
                cqe.cid
            ));
        }
        Ok(cqe)
    }
}

impl QueueTransport for RdmaLink {
    fn send(&mut self, mut sqe: Sqe, dir: Dir) -> Result<(), Error> {
        let cid = sqe.cid;
        let mut push = None;
        let mut data_sge = None;
        // None: the data is pushed (the data pointer names its slot).
        let sgl = match dir {
            Dir::None => Some(Sgl::Keyed(KeyedSgl {
                addr: 0,
                len: 0,
                key: 0,
                invalidate: false,
            })),
            Dir::ToHost(s) => Some(keyed(s)),
            Dir::ToCtrl(s) if sqe.opcode == opcodes::io::WRITE && self.qid != 0 => {
                match self.push_slot(cid, s.len) {
                    Some((remote_addr, rkey)) => {
                        push = Some((s, remote_addr, rkey));
                        self.stats.add_pushed(s.len);
                        None
                    }
                    None if s.len <= self.in_capsule_bytes => {
                        data_sge = Some(Sge {
                            addr: s.addr,
                            length: s.len,
                            lkey: s.lkey,
                        });
                        self.stats.add_in_capsule(s.len);
                        Some(Sgl::InCapsule(InCapsuleSgl {
                            offset: 0,
                            len: s.len,
                        }))
                    }
                    None => {
                        self.stats.add_keyed_write(s.len);
                        Some(keyed(s))
                    }
                }
            }
            Dir::ToCtrl(s) => Some(keyed(s)),
        };
        match (sgl, push) {
            (Some(sgl), _) => sqe.set_sgl(&sgl),
            (None, Some((s, _, _))) => {
                sqe.dptr = PushedSgl {
                    slot: u64::from(cid),
                    len: s.len,
                }
                .encode()
            }
            (None, None) => unreachable!("no data pointer without a push"),
        }
        let off = usize::from(cid) * SQE_LEN;
        self.capsules
            .write_at(off, &sqe.to_bytes())
            .expect("capsule slot inside its region");
        let cap_sge = self.capsules.sge(off, SQE_LEN as u32);
        let sges = [cap_sge, data_sge.unwrap_or_default()];
        let nsge = if data_sge.is_some() { 2 } else { 1 };
        let send = SendWr {
            wr_id: WR_SEND | u64::from(cid),
            op: WrOp::Send,
            sgl: &sges[..nsge],
            flags: SendFlags::SIGNALED,
        };
        let posted = match push {
            Some((s, remote_addr, rkey)) => {
                let wsge = [Sge {
                    addr: s.addr,
                    length: s.len,
                    lkey: s.lkey,
                }];
                let write = SendWr {
                    wr_id: 0,
                    op: WrOp::RdmaWrite { remote_addr, rkey },
                    sgl: &wsge,
                    flags: SendFlags::empty(),
                };
                self.qp.post_send(&[write, send])
            }
            None => self.qp.post_send(&[send]),
        };
        posted.map_err(Error::fabric(self.qid, "post command"))
    }

    fn poll(&mut self, events: &mut Vec<Event>) -> Result<(), String> {
        loop {
            let mut wcs = std::mem::take(&mut self.wcs);
            let n = match self.cq.poll(&mut wcs) {
                Ok(n) => n,
                Err(e) => {
                    self.wcs = wcs;
                    return Err(format!("poll CQ: {e}"));
                }
            };
            let mut result = Ok(());
            for wc in &wcs[..n] {
                result = self.on_wc(wc, events);
                if result.is_err() {
                    break;
                }
            }
            self.wcs = wcs;
            result?;
            if n < self.wcs.len() {
                return Ok(());
            }
        }
    }

    fn check(&mut self) -> Result<(), String> {
        match self.qp.cm_event(Some(Duration::ZERO)) {
            Ok(None) | Ok(Some(CmEvent::Established)) => Ok(()),
            Ok(Some(CmEvent::Disconnected)) => Err("the target disconnected".into()),
            Ok(Some(CmEvent::Error(e))) => Err(format!("connection error: {e}")),
            Err(e) => Err(format!("connection events: {e}")),
        }
    }

    fn arm(&mut self) -> bool {
        self.cq.arm().is_ok()
    }

    fn wait(&mut self, timeout: Duration, bulk: bool) {
        // Small answers this thread parses as they arrive (soft provider: no hop through the
        // receive thread); large read payloads the receive thread copies meanwhile.
        let _ = if bulk {
            self.cq.wait_passive(Some(timeout))
        } else {
            self.cq.wait(Some(timeout))
        };
    }

    fn disconnect(&mut self) {
        let _ = self.qp.disconnect();
    }

    fn set_in_capsule_bytes(&mut self, n: u32) {
        self.in_capsule_bytes = n;
    }

    fn push_slots(&self) -> Option<(u16, u32)> {
        self.push.map(|w| (w.slots, w.slot_bytes))
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
