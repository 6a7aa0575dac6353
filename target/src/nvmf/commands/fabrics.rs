//! Fabrics commands: Connect, Property Get/Set, Disconnect.

use std::sync::Arc;

use rdmablk::nvme::fabrics::{offset, CATTR_DISABLE_SQ_FLOW, CNTLID_DYNAMIC, CONNECT_DATA_LEN};
use rdmablk::nvme::opcodes::fctype;
use rdmablk::nvme::properties::{self, PropertySize};
use rdmablk::nvme::{
    Cap, Connect, ConnectData, ConnectFailure, Disconnect, PropertyGet, PropertySet, Status, Vs,
};

use super::data_phase::{data_phase, Next, SglFit};
use super::{auth, discovery};
use crate::arena::pool::host_key;
use crate::nvmf::queue::Queue;
use crate::nvmf::request::{Action, DataDir};
use crate::nvmf::subsystems::controller::{HostPath, NewController};
use crate::nvmf::transport::QueueTransport;
use crate::nvmf::Shared;

/// CAP.TO: worst-case time to ready, in 500 ms units (as nvmet: 7.5 s).
const CAP_TIMEOUT_500MS: u8 = 15;

/// Refuses a Connect, logged at warn with the field the status points at (and the NQNs, once
/// the data has been read): a host that cannot connect is an operator's question.
fn fail_connect<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    f: ConnectFailure,
    data: Option<&ConnectData>,
) -> Next {
    tracing::warn!(peer = %q.peer, qid = q.qid,
        subnqn = data.map_or("", |d| d.subnqn.as_str()),
        hostnqn = data.map_or("", ConnectData::hostnqn_str),
        status = %f.status, field = f.field_name(), "connect refused");
    let r = &mut q.reqs[slot as usize];
    r.fail(f.status);
    r.dw0 = f.dw0();
    Next::Respond
}

/// Checks a Fabrics command (opcode 0x7F) and runs those that need no data.
pub fn prepare<X: QueueTransport>(q: &mut Queue<X>, slot: u32, shared: &Shared) -> Next {
    let sqe = q.reqs[slot as usize].sqe;
    let ft = sqe.fctype();
    if ft == fctype::CONNECT {
        return prepare_connect(q, slot, shared);
    }
    let r = &mut q.reqs[slot as usize];
    let Some(ctrl) = q.ctrl.clone() else {
        r.fail(Status::COMMAND_SEQUENCE_ERROR.with_dnr());
        return Next::Respond;
    };
    ctrl.touch(shared.now_ms());
    if ft == fctype::AUTH_SEND || ft == fctype::AUTH_RECEIVE {
        return auth::prepare(q, slot, shared);
    }
    if ft != fctype::DISCONNECT && !auth::admitted(&q.auth) {
        q.reqs[slot as usize].fail(Status::AUTH_REQUIRED.with_dnr());
        return Next::Respond;
    }
    let r = &mut q.reqs[slot as usize];
    match ft {
        fctype::PROPERTY_GET if q.qid == 0 => match PropertyGet::from_sqe(&sqe) {
            Ok(g) => match property_value(&ctrl, g.offset, shared) {
                // Read at its own size only (nvmet, SPDK): 8 bytes of a 4-byte property
                // would read the next register too, and CAP's halves are not offered.
                Some((v, size)) if g.size == size => {
                    r.dw0 = v as u32;
                    r.dw1 = (v >> 32) as u32;
                }
                _ => r.fail(Status::INVALID_FIELD.with_dnr()),
            },
            Err(st) => r.fail(st),
        },
        fctype::PROPERTY_SET if q.qid == 0 => match PropertySet::from_sqe(&sqe) {
            // CC is the one writable property, and it has 4 bytes (nvmet, SPDK).
            Ok(s) if s.offset == properties::CC && s.size == PropertySize::Four => {
                let csts = ctrl.write_cc(s.value as u32);
                tracing::debug!(
                    cntlid = ctrl.cntlid,
                    cc = s.value,
                    csts = csts.0,
                    "CC written"
                );
            }
            Ok(_) => r.fail(Status::INVALID_FIELD.with_dnr()),
            Err(st) => r.fail(st),
        },
        fctype::DISCONNECT => match Disconnect::from_sqe(&sqe) {
            Ok(Disconnect) => r.close_after = Some("host sent Disconnect"),
            Err(st) => r.fail(st),
        },
        _ => r.fail(Status::INVALID_OPCODE.with_dnr()),
    }
    Next::Respond
}

/// Property value and its natural size.
fn property_value(
    ctrl: &crate::nvmf::subsystems::controller::Controller,
    offset: u32,
    shared: &Shared,
) -> Option<(u64, PropertySize)> {
    let st = ctrl.state();
    Some(match offset {
        properties::CAP => {
            let cap = Cap::default()
                .with_mqes((shared.fixed.limits.max_queue_depth - 1).min(0xFFFF) as u16)
                .with_cqr(true)
                .with_timeout_500ms(CAP_TIMEOUT_500MS)
                .with_css(Cap::CSS_NVM)
                .with_mpsmin(0)
                .with_mpsmax(0);
            (cap.0, PropertySize::Eight)
        }
        properties::VS => (u64::from(Vs::V1_3.0), PropertySize::Four),
        properties::CC => (u64::from(st.cc.0), PropertySize::Four),
        properties::CSTS => (u64::from(st.csts.0), PropertySize::Four),
        _ => return None,
    })
}

fn prepare_connect<X: QueueTransport>(q: &mut Queue<X>, slot: u32, shared: &Shared) -> Next {
    let sqe = q.reqs[slot as usize].sqe;
    if q.ctrl.is_some() {
        q.reqs[slot as usize].fail(Status::COMMAND_SEQUENCE_ERROR.with_dnr());
        return Next::Respond;
    }
    let c = match Connect::from_sqe(&sqe) {
        Ok(c) => c,
        Err(f) => return fail_connect(q, slot, f, None),
    };
    if c.qid != q.qid {
        return fail_connect(q, slot, ConnectFailure::invalid_command(offset::QID), None);
    }
    if c.queue_entries() > q.depth {
        let f = ConnectFailure::invalid_command(offset::SQSIZE);
        return fail_connect(q, slot, f, None);
    }
    q.reqs[slot as usize].action = Action::Connect;
    match data_phase(
        q,
        slot,
        DataDir::HostToController,
        CONNECT_DATA_LEN as u32,
        SglFit::Exact,
        shared,
    ) {
        Ok(next) => next,
        Err(st) => {
            q.reqs[slot as usize].fail(st);
            Next::Respond
        }
    }
}

/// Executes a Connect whose 1024 data bytes are in the request's data slot.
pub fn execute_connect<X: QueueTransport>(q: &mut Queue<X>, slot: u32, shared: &Shared) {
    let r = q.reqs[slot as usize];
    let connect = match Connect::from_sqe(&r.sqe) {
        Ok(c) => c,
        Err(f) => {
            fail_connect(q, slot, f, None);
            return;
        }
    };
    let mut bytes = [0u8; CONNECT_DATA_LEN];
    if q.read_data(r.data, 0, &mut bytes).is_err() {
        q.reqs[slot as usize].fail(Status::INTERNAL);
        return;
    }
    let data = match ConnectData::decode(&bytes) {
        Ok(d) => d,
        Err(f) => {
            fail_connect(q, slot, f, None);
            return;
        }
    };
    match connect_controller(q, &connect, &data, shared) {
        Ok((cntlid, authreq)) => {
            // CATTR bit 2: the host does not use SQHD on this queue; from this response on it
            // reads 0xFFFF (nvmet `nvmet_install_queue`, SPDK). Other CATTR bits are reserved
            // and ignored, as both peers do.
            q.sqhd_disabled = connect.cattr & CATTR_DISABLE_SQ_FLOW != 0;
            q.reqs[slot as usize].dw0 = u32::from(cntlid) | authreq;
        }
        Err(f) => {
            fail_connect(q, slot, f, Some(&data));
        }
    }
}

fn connect_controller<X: QueueTransport>(
    q: &mut Queue<X>,
    c: &Connect,
    d: &ConnectData,
    shared: &Shared,
) -> Result<(u16, u32), ConnectFailure> {
    let subsys = shared
        .subsystem(d.subnqn.as_str())
        .ok_or(ConnectFailure::invalid_data(offset::SUBNQN))?;
    if !subsys.allows(d.hostnqn_str()) {
        return Err(ConnectFailure::invalid_host());
    }
    let host_auth = subsys
        .host_auth(d.hostnqn_str())
        .map_err(|_| ConnectFailure::invalid_host())?;
    let now = shared.now_ms();
    if subsys.is_discovery() && q.qid != 0 {
        // A discovery controller has no I/O queues.
        return Err(ConnectFailure::invalid_command(offset::QID));
    }
    if q.qid == 0 {
        if d.cntlid != CNTLID_DYNAMIC {
            return Err(ConnectFailure::invalid_data(offset::CNTLID));
        }
        let kato = match c.kato_ms {
            0 if subsys.is_discovery() => discovery::DISCOVERY_KATO_MS,
            0 => u64::from(shared.fixed.target.default_keep_alive_timeout_ms),
            k => u64::from(k),
        };
        let max_queues = if subsys.is_discovery() {
            1
        } else {
            shared.fixed.limits.max_queues_per_controller.min(0xFFFF) as u16
        };
        let port = shared
            .lock_ports()
            .iter()
            .find(|l| l.id == q.listener)
            .map(|l| (Arc::clone(&l.ana), l.cfg.transport, l.cfg.variant()));
        // The listener was removed since this queue connected: its connections are closing.
        let (ana, transport, variant) =
            port.ok_or(ConnectFailure::from(Status::CONNECT_CONTROLLER_BUSY))?;
        let new = NewController {
            subsys: subsys.clone(),
            hostnqn: d.hostnqn_str().to_owned(),
            hostid: d.hostid,
            ana,
            path: HostPath {
                transport,
                variant,
                peer: q.peer,
            },
            kato_ms: kato,
            max_queues,
        };
        let ctrl = shared
            .controllers
            .create(new, now)
            .ok_or(ConnectFailure::from(
                Status::CONNECT_CONTROLLER_BUSY.with_dnr(),
            ))?;
        tracing::info!(peer = %q.peer, cntlid = ctrl.cntlid, subnqn = %d.subnqn,
            hostnqn = %d.hostnqn_str(), kato_ms = kato, "controller created");
        let id = ctrl.cntlid;
        q.host = host_key(d.hostnqn_str().as_bytes());
        q.ctrl = Some(ctrl);
        let authreq = auth::on_connect(q, host_auth, d.hostnqn_str(), &subsys.nqn);
        return Ok((id, authreq));
    }
    let ctrl = shared
        .controllers
        .get(d.cntlid)
        .filter(|k| {
            !k.is_dead()
                && k.subsys.nqn == subsys.nqn
                && k.hostnqn == d.hostnqn_str()
                && k.hostid == d.hostid
        })
        .ok_or(ConnectFailure::invalid_data(offset::CNTLID))?;
    if q.qid > ctrl.state().io_queues || !ctrl.attach_queue(q.qid) {
        return Err(ConnectFailure::invalid_command(offset::QID));
    }
    ctrl.touch(now);
    tracing::info!(peer = %q.peer, cntlid = ctrl.cntlid, qid = q.qid, depth = q.depth,
        "I/O queue connected");
    let id = ctrl.cntlid;
    q.host = host_key(d.hostnqn_str().as_bytes());
    q.ctrl = Some(ctrl);
    let authreq = auth::on_connect(q, host_auth, d.hostnqn_str(), &subsys.nqn);
    Ok((id, authreq))
}
