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
//!
//! The steps live beside this file: [`connect`] (Fabrics Connect and why one was refused),
//! [`properties`] (Property Get / Set, enable, shutdown), [`identify`] (controller and
//! namespaces), [`ana`] (the ANA log and its change notices); [`info`] holds what the
//! controller reported.

mod ana;
mod connect;
mod identify;
mod info;
mod properties;

pub(crate) use ana::ana_log_bytes;
pub use info::{ControllerInfo, NamespaceIds, NamespaceInfo};

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use rdmablk::nvme::identify::{cmic, oaes, sgls};
use rdmablk::nvme::properties::{self as props};
use rdmablk::nvme::{
    admin as nvme_admin, fabrics, features, Cap, NumQueues, SetFeatures, Sqe, Status, Vs,
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
        admin.set_poll_spin(o.poll_spin(self.url.transport));
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
            q.set_poll_spin(o.poll_spin(self.url.transport));
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

fn fabrics_ok(status: Status, op: &'static str) -> Result<()> {
    if status.is_success() {
        Ok(())
    } else {
        Err(Error::Nvme { op, status })
    }
}
