//! Bringing a controller up, the way the Linux host does (drivers/nvme/host/fabrics.c,
//! core.c, rdma.c), as one function that either returns a working [`Session`] or an error
//! naming the step that failed:
//!
//! 1. admin queue: CM connect (qid 0, HRQSIZE 32, HSQSIZE 31), Fabrics Connect with cntlid
//!    0xFFFF and the 1024-byte data behind a keyed SGL (the target RDMA READs it), KATO;
//! 2. Property Get CAP and VS; Property Set CC (EN, 64/16-byte entries); wait for CSTS.RDY
//!    up to CAP.TO;
//! 3. Identify Controller, checked as a host must (cntlid, MAXCMD, KAS, IOCCSZ, IORCSZ,
//!    ICDOFF, keyed SGLs); MDTS and in-capsule size taken from it;
//! 4. Set Features Number of Queues; Identify active namespace list, Identify each namespace;
//! 5. I/O queues: the transport's connect (RDMA: CM connect with qid, queue size and the
//!    optional push-write request), Fabrics Connect with the admin queue's cntlid;
//! 6. when the controller reports ANA (CMIC bit 3): the ANA log (Get Log Page 0x0C), and, if
//!    it sends ANA change notices (OAES bit 11), Set Features Asynchronous Event
//!    Configuration for them and one Asynchronous Event Request held on the admin queue.
//!
//! A session is replaced whole on reconnect.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdmablk::nvme::ana::{AnaLog, GROUP_LEN, HEADER_LEN};
use rdmablk::nvme::fabrics::InvalidParam;
use rdmablk::nvme::identify::{
    cmic, cns, decode_ns_descriptors, decode_ns_list, oaes, sgls, NsDescriptor, IDENTIFY_LEN,
};
use rdmablk::nvme::log_page::lid;
use rdmablk::nvme::properties::{self as props};
use rdmablk::nvme::{
    admin as nvme_admin, fabrics, features, Cap, Cc, CommandKind, Connect, ConnectData, Csts,
    GetLogPage, IdentifyCmd, IdentifyController, IdentifyNamespace, Nqn, NumQueues, PropertyGet,
    PropertySet, PropertySize, SetFeatures, Sqe, Status, Vs,
};

use crate::buf::BufPool;
use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::queue::{Dir, Queue, Seg};
use crate::stats::Stats;
use crate::transport::{Fabric, QueueParams};
use crate::url::TargetUrl;

/// Admin queue entries (the Linux host's NVME_AQ_DEPTH).
pub(crate) const ADMIN_ENTRIES: u16 = 32;
/// Tag of the Asynchronous Event Request held on the admin queue.
pub(crate) const AER_TAG: u64 = u64::MAX - 1;

/// What a connected controller told us.
#[derive(Debug, Clone)]
pub struct ControllerInfo {
    pub cntlid: u16,
    pub model: String,
    pub serial: String,
    pub firmware: String,
    pub version: (u16, u8, u8),
    /// I/O queues connected.
    pub io_queues: u16,
    /// Entries per I/O queue.
    pub queue_size: u16,
    /// Largest data one command carries (MDTS and our `max_io_bytes`).
    pub max_transfer_bytes: u32,
    /// In-capsule data bytes on I/O queues (0: none).
    pub in_capsule_bytes: u32,
    /// Push-write window granted on the I/O queues: (slots, slot bytes); `None` when the
    /// target did not grant one (standard targets never do).
    pub push_window: Option<(u16, u32)>,
    /// Identify ONCS (optional NVM commands: DSM, Write Zeroes ...).
    pub oncs: u16,
    /// Keep-alive timeout in effect (0: none).
    pub kato_ms: u32,
    /// Subsystem NQN from Identify Controller (empty if the controller left it out).
    pub subnqn: String,
    /// Identify CMIC (bit 1 several controllers, bit 3 ANA reporting).
    pub cmic: u8,
    /// The ANA log as last read (at connect, on an ANA change notice, or on request);
    /// `None` when the controller does not report ANA.
    pub ana: Option<AnaLog>,
    /// Whether the controller sends ANA change notices (and one is armed).
    pub ana_notices: bool,
    pub namespaces: Vec<NamespaceInfo>,
}

/// One active namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: u32,
    pub block_size: u32,
    pub blocks: u64,
    /// Global identifiers (what tells two paths lead to the same namespace).
    pub ids: NamespaceIds,
    /// ANA group ID (0: none reported).
    pub ana_group: u32,
}

/// A namespace's globally unique identifiers, each `None` when not reported (all zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NamespaceIds {
    pub nguid: Option<[u8; 16]>,
    pub eui64: Option<[u8; 8]>,
    pub uuid: Option<[u8; 16]>,
}

impl NamespaceIds {
    /// Whether none is reported.
    pub fn is_empty(&self) -> bool {
        self.nguid.is_none() && self.eui64.is_none() && self.uuid.is_none()
    }
}

impl std::fmt::Display for NamespaceIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let mut parts = Vec::new();
        if let Some(v) = self.nguid {
            parts.push(format!("nguid {}", hex(&v)));
        }
        if let Some(v) = self.eui64 {
            parts.push(format!("eui64 {}", hex(&v)));
        }
        if let Some(v) = self.uuid {
            parts.push(format!("uuid {}", hex(&v)));
        }
        if parts.is_empty() {
            return f.write_str("no identifiers");
        }
        f.write_str(&parts.join(", "))
    }
}

fn non_zero<const N: usize>(v: [u8; N]) -> Option<[u8; N]> {
    v.iter().any(|&b| b != 0).then_some(v)
}

/// A connected controller: admin queue, I/O queues and what it reported.
pub(crate) struct Session {
    pub admin: Queue,
    pub io: Vec<Queue>,
    pub info: ControllerInfo,
    /// Set when the session is known broken: every queue of it fails at its next check, so
    /// commands in flight come back at once (to be re-sent) instead of at their timeout.
    pub abort: Arc<AtomicBool>,
}

pub(crate) struct Setup<'a> {
    pub url: &'a TargetUrl,
    pub opts: &'a ConnectOptions,
    pub fabric: &'a dyn Fabric,
    pub pool: &'a BufPool,
    pub stats: &'a Arc<Stats>,
}

impl Setup<'_> {
    pub fn establish(&self) -> Result<Session> {
        let o = self.opts;
        let mut admin = Queue::connect(
            self.fabric,
            &QueueParams {
                addr: self.url.addr,
                qid: 0,
                entries: ADMIN_ENTRIES,
                in_capsule_bytes: 0,
                max_transfer_bytes: 0,
                connect_timeout: o.connect_timeout(),
            },
            o.connect_timeout(),
            self.stats.clone(),
        )?;
        let cntlid = self.fabrics_connect(
            &mut admin,
            0,
            ADMIN_ENTRIES - 1,
            fabrics::CNTLID_DYNAMIC,
            o.kato_ms,
        )?;
        let cap = Cap(self.prop_get(&mut admin, props::CAP)?);
        let vs = Vs(self.prop_get(&mut admin, props::VS)? as u32);
        if !cap.supports_nvm() {
            return Err(Error::Controller {
                what: format!("CAP {:#x} lacks the NVM command set", cap.0),
            });
        }
        self.enable(&mut admin, cap)?;
        let id = self.identify_controller(&mut admin, cntlid)?;
        let io_wanted = o.io_queues;
        let granted = self.set_num_queues(&mut admin, io_wanted)?;
        let namespaces = self.identify_namespaces(&mut admin)?;
        let queue_size = o
            .queue_size
            .min(cap.mqes().saturating_add(1))
            .min(id.maxcmd)
            .max(2);
        let mdts_bytes = match id.mdts {
            0 => u64::MAX,
            m => 4096u64 << m.min(40),
        };
        let max_transfer_bytes = u64::from(o.max_io_bytes).min(mdts_bytes) as u32;
        let in_capsule_bytes = if id.sgls & sgls::OFFSET != 0 {
            id.in_capsule_bytes()
        } else {
            0
        };
        let mut io = Vec::with_capacity(usize::from(granted));
        for qid in 1..=granted {
            let mut q = Queue::connect(
                self.fabric,
                &QueueParams {
                    addr: self.url.addr,
                    qid,
                    entries: queue_size,
                    in_capsule_bytes: 0,
                    max_transfer_bytes,
                    connect_timeout: o.connect_timeout(),
                },
                o.connect_timeout(),
                self.stats.clone(),
            )?;
            self.fabrics_connect(&mut q, qid, queue_size - 1, cntlid, 0)?;
            q.set_in_capsule_bytes(in_capsule_bytes);
            q.set_cmd_timeout(o.io_timeout());
            io.push(q);
        }
        let ana = if id.cmic & cmic::ANA != 0 {
            let most = ana_log_bytes(id.nanagrpid, namespaces.len(), max_transfer_bytes);
            Some(self.read_ana_log(&mut admin, most)?)
        } else {
            None
        };
        let ana_notices = ana.is_some() && id.oaes & oaes::ANA_CHANGE != 0;
        if ana_notices {
            self.arm_ana_notices(&mut admin)?;
        }
        let push_window = io.first().and_then(|q| q.push_slots());
        let info = ControllerInfo {
            cntlid,
            model: id.model(),
            serial: id.serial(),
            firmware: id.firmware(),
            version: (vs.major(), vs.minor(), vs.tertiary()),
            io_queues: granted,
            queue_size,
            max_transfer_bytes,
            in_capsule_bytes,
            push_window,
            oncs: id.oncs,
            kato_ms: o.kato_ms,
            subnqn: id
                .subnqn
                .as_ref()
                .map(|n| n.to_string())
                .unwrap_or_default(),
            cmic: id.cmic,
            ana,
            ana_notices,
            namespaces,
        };
        tracing::info!(url = %self.url, cntlid, io_queues = granted, queue_size,
            max_transfer_bytes, in_capsule_bytes, push = ?push_window, "controller connected");
        let abort = Arc::new(AtomicBool::new(false));
        admin.set_abort(abort.clone());
        for q in &mut io {
            q.set_abort(abort.clone());
        }
        Ok(Session {
            admin,
            io,
            info,
            abort,
        })
    }

    /// Runs one admin command with optional data of `len` bytes.
    pub(crate) fn admin_cmd(
        &self,
        q: &mut Queue,
        sqe: Sqe,
        data: Option<(bool, Vec<u8>, usize)>,
        what: &'static str,
    ) -> Result<(rdmablk::nvme::Cqe, Option<Vec<u8>>)> {
        let (dir, buf) = match data {
            None => (Dir::None, None),
            Some((to_ctrl, bytes, len)) => {
                let mut b = self.pool.alloc(len)?;
                b.as_mut_slice()[..bytes.len()].copy_from_slice(&bytes);
                let seg = Seg::of(&b, 0, len as u32);
                let dir = if to_ctrl {
                    Dir::ToCtrl(seg)
                } else {
                    Dir::ToHost(seg)
                };
                (dir, Some(b))
            }
        };
        let (cqe, buf) = q.exec(sqe, dir, buf)?;
        if !cqe.status.is_success() && sqe.opcode != rdmablk::nvme::opcodes::FABRICS {
            return Err(Error::Nvme {
                op: what,
                status: cqe.status,
            });
        }
        Ok((cqe, buf.map(|b| b.as_slice().to_vec())))
    }

    pub(crate) fn fabrics_connect(
        &self,
        q: &mut Queue,
        qid: u16,
        sqsize: u16,
        cntlid: u16,
        kato_ms: u32,
    ) -> Result<u16> {
        let subnqn = Nqn::new(&self.url.subnqn).map_err(Error::wire)?;
        let hostnqn = Nqn::new(&self.opts.hostnqn).map_err(Error::wire)?;
        let data = ConnectData {
            hostid: self.opts.hostid,
            cntlid,
            subnqn,
            hostnqn: Some(hostnqn),
        }
        .encode();
        let cmd = Connect {
            qid,
            sqsize,
            cattr: 0,
            kato_ms,
        };
        // The data pointer is filled by the queue (keyed SGL over the registered copy).
        let sqe = cmd.to_sqe(
            0,
            &rdmablk::nvme::Sgl::InCapsule(rdmablk::nvme::InCapsuleSgl { offset: 0, len: 0 }),
        );
        let (cqe, _) =
            self.admin_cmd(q, sqe, Some((true, data.to_vec(), data.len())), "Connect")?;
        if !cqe.status.is_success() {
            return Err(Error::ConnectRefused {
                qid,
                subnqn: self.url.subnqn.clone(),
                status: cqe.status,
                reason: connect_refusal(cqe.status, cqe.dw0, &self.opts.hostnqn),
            });
        }
        crate::auth::authenticate(self, q, qid, cqe.dw0)?;
        let got = cqe.dw0 as u16;
        if qid != 0 && got != cntlid {
            tracing::debug!(
                qid,
                got,
                cntlid,
                "I/O queue Connect returned another cntlid"
            );
        }
        Ok(if qid == 0 { got } else { cntlid })
    }

    pub(crate) fn prop_get(&self, q: &mut Queue, offset: u32) -> Result<u64> {
        let size = PropertySize::of_offset(offset).unwrap_or(PropertySize::Four);
        let (cqe, _) = self.admin_cmd(
            q,
            PropertyGet { size, offset }.to_sqe(0),
            None,
            "Property Get",
        )?;
        fabrics_ok(cqe.status, "Property Get")?;
        Ok(match size {
            PropertySize::Eight => cqe.result64(),
            PropertySize::Four => u64::from(cqe.dw0),
        })
    }

    fn prop_set(&self, q: &mut Queue, offset: u32, value: u32) -> Result<()> {
        let sqe = PropertySet {
            size: PropertySize::Four,
            offset,
            value: u64::from(value),
        }
        .to_sqe(0);
        let (cqe, _) = self.admin_cmd(q, sqe, None, "Property Set")?;
        fabrics_ok(cqe.status, "Property Set")
    }

    pub(crate) fn enable(&self, q: &mut Queue, cap: Cap) -> Result<()> {
        let cc = Cc(0)
            .with_css(0)
            .with_mps(0)
            .with_iosqes(6)
            .with_iocqes(4)
            .with_en(true);
        self.prop_set(q, props::CC, cc.0)?;
        let limit = Duration::from_millis(500 * u64::from(cap.timeout_500ms().max(1)));
        let deadline = Instant::now() + limit;
        loop {
            let csts = Csts(self.prop_get(q, props::CSTS)? as u32);
            if csts.cfs() {
                return Err(Error::Controller {
                    what: "CSTS.CFS: controller fatal status after enable".into(),
                });
            }
            if csts.rdy() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Controller {
                    what: format!(
                        "CSTS.RDY not set {} ms after CC.EN (CAP.TO)",
                        limit.as_millis()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn identify(&self, q: &mut Queue, cns: u8, nsid: u32) -> Result<Box<[u8; IDENTIFY_LEN]>> {
        let sqe = IdentifyCmd {
            cns,
            cntid: 0,
            csi: 0,
            nsid,
        }
        .to_sqe(0);
        let (_, data) =
            self.admin_cmd(q, sqe, Some((false, Vec::new(), IDENTIFY_LEN)), "Identify")?;
        let v = data.unwrap_or_default();
        let arr: Box<[u8; IDENTIFY_LEN]> = v
            .into_boxed_slice()
            .try_into()
            .map_err(|_| Error::protocol("Identify data of the wrong size"))?;
        Ok(arr)
    }

    fn identify_controller(&self, q: &mut Queue, cntlid: u16) -> Result<IdentifyController> {
        let b = self.identify(q, cns::CONTROLLER, 0)?;
        let id = IdentifyController::decode(&b).map_err(Error::wire)?;
        id.check_fabrics(cntlid, self.fabric.sgl_need())
            .map_err(|e| Error::Controller {
                what: e.to_string(),
            })?;
        Ok(id)
    }

    fn set_num_queues(&self, q: &mut Queue, wanted: u16) -> Result<u16> {
        let sqe = SetFeatures {
            fid: features::fid::NUM_QUEUES,
            save: false,
            nsid: 0,
            value: NumQueues::both(wanted).to_dword(),
        }
        .to_sqe(0);
        let (cqe, _) = self.admin_cmd(q, sqe, None, "Set Features (Number of Queues)")?;
        let got = NumQueues::from_dword(cqe.dw0);
        // Both counts are 0-based on the wire.
        let n = wanted
            .min(got.nsq.saturating_add(1))
            .min(got.ncq.saturating_add(1));
        if n == 0 {
            return Err(Error::Controller {
                what: "the controller grants no I/O queues".into(),
            });
        }
        Ok(n)
    }

    pub(crate) fn identify_namespaces(&self, q: &mut Queue) -> Result<Vec<NamespaceInfo>> {
        let list = self.identify(q, cns::ACTIVE_NS_LIST, 0)?;
        let nsids = decode_ns_list(&list).map_err(Error::wire)?;
        let mut out = Vec::with_capacity(nsids.len());
        for nsid in nsids {
            let b = self.identify(q, cns::NAMESPACE, nsid)?;
            let ns = IdentifyNamespace::decode(&b);
            if ns.nsze == 0 {
                continue;
            }
            let block_size = ns.block_bytes().map_err(Error::wire)?;
            let mut ids = NamespaceIds {
                nguid: non_zero(ns.nguid),
                eui64: non_zero(ns.eui64),
                uuid: None,
            };
            // Targets before NVMe 1.3 have no descriptor list: the Identify fields stand.
            if let Ok(b) = self.identify(q, cns::NS_DESC_LIST, nsid) {
                for d in decode_ns_descriptors(&b).unwrap_or_default() {
                    match d {
                        NsDescriptor::Uuid(v) => ids.uuid = non_zero(v),
                        NsDescriptor::Nguid(v) => ids.nguid = ids.nguid.or(non_zero(v)),
                        NsDescriptor::Eui64(v) => ids.eui64 = ids.eui64.or(non_zero(v)),
                        NsDescriptor::Csi(_) => {}
                    }
                }
            }
            out.push(NamespaceInfo {
                nsid,
                block_size,
                blocks: ns.nsze,
                ids,
                ana_group: ns.anagrpid,
            });
        }
        Ok(out)
    }

    /// Reads the ANA log (at most `len` bytes, a multiple of 4); the event it answers, if any,
    /// is cleared (RAE 0).
    pub(crate) fn read_ana_log(&self, q: &mut Queue, len: usize) -> Result<AnaLog> {
        let sqe = GetLogPage::new(lid::ANA, 0, 0, len as u64).to_sqe(0);
        let (_, data) = self.admin_cmd(q, sqe, Some((false, Vec::new(), len)), "Get Log Page")?;
        AnaLog::decode(&data.unwrap_or_default()).map_err(|e| Error::Protocol {
            what: e.to_string(),
        })
    }

    /// Enables ANA change notices and posts the Asynchronous Event Request that carries them.
    fn arm_ana_notices(&self, q: &mut Queue) -> Result<()> {
        let sqe = SetFeatures {
            fid: features::fid::ASYNC_EVENT_CONFIG,
            save: false,
            nsid: 0,
            value: oaes::ANA_CHANGE,
        }
        .to_sqe(0);
        self.admin_cmd(q, sqe, None, "Set Features (Async Event Configuration)")?;
        q.submit_held(nvme_admin::async_event_request_sqe(0), AER_TAG)
    }

    /// Best-effort shutdown notification (CC.SHN normal), as a host does on disconnect.
    pub fn shutdown(&self, admin: &mut Queue) {
        let cc = Cc(0)
            .with_iosqes(6)
            .with_iocqes(4)
            .with_en(true)
            .with_shn(props::shn::NORMAL);
        if let Err(e) = self.prop_set(admin, props::CC, cc.0) {
            tracing::debug!("shutdown notification: {e}");
        }
    }

    /// One Keep Alive command.
    /// One Keep Alive command; no answer within the keep-alive timeout fails the admin queue
    /// (as the Linux host's keep-alive work does), not the longer command timeout.
    pub fn keep_alive(&self, admin: &mut Queue) -> Result<()> {
        let timeout = Duration::from_millis(u64::from(self.opts.kato_ms.max(1)));
        let (cqe, _) =
            admin.exec_within(nvme_admin::keep_alive_sqe(0), Dir::None, None, timeout)?;
        fabrics_ok(cqe.status, "Keep Alive")?;
        self.stats.add_keep_alive();
        Ok(())
    }
}

/// Bytes of the largest ANA log `groups` groups and `namespaces` namespaces make, within
/// one transfer.
pub(crate) fn ana_log_bytes(groups: u32, namespaces: usize, max_transfer: u32) -> usize {
    let groups = (groups.clamp(1, 1024)) as usize;
    let want = HEADER_LEN + groups * GROUP_LEN + 4 * namespaces.max(1);
    want.min(max_transfer.max(4096) as usize)
        .next_multiple_of(4)
}

fn fabrics_ok(status: Status, op: &'static str) -> Result<()> {
    if status.is_success() {
        Ok(())
    } else {
        Err(Error::Nvme { op, status })
    }
}

/// Says why a Connect was refused, from its status and result (IPO/IATTR).
pub(crate) fn connect_refusal(status: Status, dw0: u32, hostnqn: &str) -> String {
    if status == Status::CONNECT_INVALID_PARAMETERS
        || status.sc == Status::CONNECT_INVALID_PARAMETERS.sc
            && status.sct == Status::CONNECT_INVALID_PARAMETERS.sct
    {
        let p = InvalidParam::from_dw0(dw0);
        return match p.field_name() {
            "subnqn" => {
                "unknown subsystem NQN (the target does not export it; check the NQN)".into()
            }
            "hostnqn" => format!("host NQN {hostnqn} is invalid"),
            "cntlid" => "unknown controller ID (the controller went away: reconnect)".into(),
            f => format!("invalid Connect parameter {f}"),
        };
    }
    if status.sct == Status::CONNECT_INVALID_HOST.sct
        && status.sc == Status::CONNECT_INVALID_HOST.sc
    {
        return format!(
            "host {hostnqn} is not allowed to access the subsystem (add it to the subsystem's \
             allowed hosts, or allow any host)"
        );
    }
    if status.sct == Status::CONNECT_CONTROLLER_BUSY.sct
        && status.sc == Status::CONNECT_CONTROLLER_BUSY.sc
    {
        return "controller busy (the queue is already connected, or the target is out of controllers)".into();
    }
    status.display_for(CommandKind::Fabrics).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmablk::nvme::fabrics::ConnectFailure;

    #[test]
    fn connect_refusals_name_the_cause() {
        let f = ConnectFailure::invalid_data(fabrics::offset::SUBNQN);
        let s = connect_refusal(f.status, f.dw0(), "nqn.h");
        assert!(s.contains("unknown subsystem NQN"), "{s}");
        let f = ConnectFailure::invalid_host();
        let s = connect_refusal(f.status, f.dw0(), "nqn.h");
        assert!(s.contains("not allowed") && s.contains("nqn.h"), "{s}");
        let s = connect_refusal(Status::CONNECT_CONTROLLER_BUSY, 0, "nqn.h");
        assert!(s.contains("busy"), "{s}");
        let s = connect_refusal(Status::INTERNAL, 0, "nqn.h");
        assert!(!s.is_empty());
    }
}
