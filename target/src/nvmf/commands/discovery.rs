//! The discovery controller: what `nvme discover` and `nvme connect-all` talk to.
//!
//! Every listener serves the discovery subsystem under the well-known NQN
//! `nqn.2014-08.org.nvmexpress.discovery` and, if configured, the target's unique discovery NQN
//! (`target.discovery_nqn`). A discovery controller has an admin queue only (Connect of an I/O
//! queue is refused) and serves Identify Controller, Get Log Page 0x70 (the Discovery Log
//! Page), Keep Alive, Asynchronous Event Request and the keep-alive and async-event features;
//! anything else is Invalid Opcode / Invalid Field, as nvmet answers.
//!
//! The log a host reads lists, for every subsystem whose allow-list admits the host's NQN, one
//! entry per listener a host like it can use (a host on the soft provider learns of soft
//! listeners, which only rdmablk's own initiator speaks; any other host, of every other
//! listener: RDMA on an RNIC and NVMe/TCP: [`Variant::shown_to`]), then one referral entry
//! per `[[referral]]`. A host never learns of a subsystem it may not connect to. Each entry's
//! TRTYPE, ADRFAM and TSAS are its transport's
//! ([`crate::nvmf::transport::TransportKind::discovery_fields`]). The generation counter
//! changes whenever what the log could say changes.

use std::net::SocketAddr;

use rdmablk::nvme::discovery::{encode_log, subtype, treq, DiscoveryLogEntry};
use rdmablk::nvme::identify::CNTRLTYPE_DISCOVERY;
use rdmablk::nvme::opcodes::admin as op;
use rdmablk::nvme::{IdentifyController, Nqn};

use crate::config::{TlsMode, Transport};
use crate::nvmf::subsystems::controller::Controller;
use crate::nvmf::transport::{QueueTransport, Variant};
use crate::nvmf::{Shared, ADMIN_QUEUE_DEPTH};

/// Keep-alive timeout of a discovery controller whose host asked for none (KATO 0), so that
/// hosts that vanish do not hold controllers forever (nvmet: NVMET_DISC_KATO_MS).
pub const DISCOVERY_KATO_MS: u64 = 120_000;

/// Whether a discovery controller serves admin `opcode` (else Invalid Opcode, with DNR).
pub fn serves(opcode: u8) -> bool {
    matches!(
        opcode,
        op::IDENTIFY
            | op::GET_LOG_PAGE
            | op::KEEP_ALIVE
            | op::ASYNC_EVENT_REQUEST
            | op::SET_FEATURES
            | op::GET_FEATURES
    )
}

/// Identify Controller of a discovery controller: CNTRLTYPE discovery, no namespaces, no I/O
/// command set, the discovery subsystem's NQN.
pub fn identify_controller<X: QueueTransport>(
    ctrl: &Controller,
    shared: &Shared,
) -> IdentifyController {
    let nqn = Nqn::new(&ctrl.subsys.nqn)
        .unwrap_or_else(|_| Nqn::new(crate::config::DISCOVERY_NQN).expect("static NQN"));
    let mut id = IdentifyController::nvmf_defaults(ctrl.cntlid, nqn, 0);
    X::controller_fields(&mut id, 0);
    id.cntrltype = CNTRLTYPE_DISCOVERY;
    id.oaes = rdmablk::nvme::identify::oaes::DISCOVERY_LOG_CHANGE;
    id.oncs = 0;
    id.vwc = 0;
    id.nn = 0;
    id.ioccsz = 0;
    id.iorcsz = 0;
    id.lpa = rdmablk::nvme::identify::lpa::EXTENDED;
    id.mdts = crate::nvmf::mdts(shared.fixed.limits.max_io_size);
    id.maxcmd = shared.fixed.limits.max_queue_depth.min(0xFFFF) as u16;
    id.kas = (shared.fixed.target.keep_alive_granularity_ms / 100).clamp(1, 0xFFFF) as u16;
    id.aerl = (crate::nvmf::queue::MAX_HELD_AERS - 1) as u8;
    id
}

/// The whole Discovery Log Page for the host of `ctrl`, as the path it came in on
/// (`ctrl.path`) may reach.
pub fn log_page(shared: &Shared, ctrl: &Controller) -> Vec<u8> {
    let host: Variant = ctrl.path.variant;
    let ports: Vec<(u16, SocketAddr, Transport, TlsMode)> = shared
        .lock_ports()
        .iter()
        .enumerate()
        .filter(|(_, l)| l.cfg.variant().shown_to(host))
        .map(|(i, l)| {
            let portid = u16::try_from(i + 1).unwrap_or(u16::MAX);
            (portid, l.addr, l.cfg.transport, l.cfg.tls)
        })
        .collect();
    let mut entries = Vec::new();
    for s in shared
        .subsystems
        .load()
        .iter()
        .filter(|s| s.allows(&ctrl.hostnqn))
    {
        for &(portid, addr, transport, tls) in &ports {
            let mut f = transport.kind().discovery_fields(addr.ip());
            let treq = tls_fields(tls, &mut f.tsas);
            entries.push(DiscoveryLogEntry {
                trtype: f.trtype,
                adrfam: f.adrfam,
                subtype: subtype::NVME,
                treq,
                portid,
                cntlid: rdmablk::nvme::fabrics::CNTLID_DYNAMIC,
                asqsz: ADMIN_QUEUE_DEPTH as u16,
                eflags: 0,
                trsvcid: addr.port().to_string(),
                traddr: addr.ip().to_string(),
                subnqn: s.nqn.clone(),
                tsas: f.tsas,
            });
        }
    }
    let config = shared.live.load();
    for r in &config.referrals {
        let f = r.transport.kind().discovery_fields(r.address);
        entries.push(DiscoveryLogEntry {
            trtype: f.trtype,
            adrfam: f.adrfam,
            subtype: subtype::REFERRAL,
            treq: treq::NOT_SPECIFIED,
            portid: 0,
            cntlid: rdmablk::nvme::fabrics::CNTLID_DYNAMIC,
            asqsz: ADMIN_QUEUE_DEPTH as u16,
            eflags: 0,
            trsvcid: r.port.to_string(),
            traddr: r.address.to_string(),
            subnqn: crate::config::DISCOVERY_NQN.to_owned(),
            tsas: f.tsas,
        });
    }
    let genctr = shared
        .discovery_genctr
        .load(std::sync::atomic::Ordering::Acquire);
    encode_log(genctr, &entries)
}

/// TREQ, and TSAS's SECTYPE (byte 0 of TCP's TSAS), of a port with `tls`: TLS 1.3 (2) where
/// it is offered, "required" (1) or "not required" (2) as the listener says (SPDK, nvmet);
/// clear-text ports keep "not specified" and "no security".
fn tls_fields(tls: TlsMode, tsas: &mut [u8; 16]) -> u8 {
    const SECTYPE_TLS13: u8 = 2;
    match tls {
        TlsMode::None => treq::NOT_SPECIFIED,
        TlsMode::Allowed => {
            tsas[0] = SECTYPE_TLS13;
            treq::NOT_REQUIRED
        }
        TlsMode::Required => {
            tsas[0] = SECTYPE_TLS13;
            treq::REQUIRED
        }
    }
}
