//! I/O commands (Read, Write, Flush, Write Zeroes, Dataset Management, and the reservation
//! commands) and their backend operations.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::Arc;

use rdmablk::nvme::io::{DsmRange, DSM_RANGE_LEN};
use rdmablk::nvme::opcodes::io as op;
use rdmablk::nvme::reservation::{
    encode_report, keys, op as resv, ReportCmd, ResvCdw10, ONE_KEY, REPORT_HEADER_LEN, TWO_KEYS,
};
use rdmablk::nvme::{Dsm, ReadWrite, Sct, Status, WriteZeroes};

use super::data_phase::{data_phase, Next, SglFit};
use crate::backend::{IoBuf, IoError, IoErrorKind, IoOp, IoRequest, SubmitError};
use crate::namespace::reservation::{HostId, ResvError};
use crate::nvmf::queue::Queue;
use crate::nvmf::request::{Action, DataDir, Tag};
use crate::nvmf::runtime::fence::Fence;
use crate::nvmf::subsystems::controller::Controller;
use crate::nvmf::transport::QueueTransport;
use crate::nvmf::worker::ns_queues::NsQueues;
use crate::nvmf::Shared;
use rdmablk::nvme::reservation::{notice, racqa};

/// Broadcast NSID (Flush of every namespace).
const NSID_ALL: u32 = 0xFFFF_FFFF;

/// Checks an I/O command; sets the request's action and data phase.
pub fn prepare<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
    ctrl: &Arc<Controller>,
) -> Next {
    match check(q, slot, shared, ctrl) {
        Ok(n) => n,
        Err(st) => {
            q.reqs[slot as usize].fail(st);
            Next::Respond
        }
    }
}

fn check<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
    ctrl: &Arc<Controller>,
) -> Result<Next, Status> {
    let sqe = q.reqs[slot as usize].sqe;
    // The namespace, if it is active (and visible to the host) and its ANA group is accessible through this
    // controller's listener (else the path status, without DNR: the host tries another path).
    let namespace = |nsid: u32| {
        let ns = ctrl
            .namespace(nsid)
            .ok_or(Status::INVALID_NAMESPACE.with_dnr())?;
        match ctrl.ana.state(ns.ana_group()).io_status() {
            Some(path_status) => Err(path_status),
            None => Ok(ns),
        }
    };
    // The same, for a command that reads (`write` false) or modifies: another host's
    // reservation may forbid it (Reservation Conflict).
    let accessible = |nsid: u32, write: bool| {
        let ns = namespace(nsid)?;
        if ns.reservations().allows(&ctrl.hostid, write) {
            Ok(ns)
        } else {
            Err(Status::RESERVATION_CONFLICT.with_dnr())
        }
    };
    let action;
    let mut fit = SglFit::Exact;
    let (dir, len) = match sqe.opcode {
        op::READ | op::WRITE => {
            let rw = ReadWrite::from_sqe(&sqe);
            let write = sqe.opcode == op::WRITE;
            let ns = accessible(rw.nsid, write)?;
            let bytes = rw.byte_len(ns.block_size());
            let len =
                u32::try_from(bytes).map_err(|_| Status::SGL_INVALID_DATA_LENGTH.with_dnr())?;
            action = Action::ReadWrite {
                ns: ns.slot(),
                lba: rw.slba,
                blocks: rw.blocks(),
                write,
                fua: rw.fua,
            };
            let dir = if write {
                DataDir::HostToController
            } else {
                DataDir::ControllerToHost
            };
            // The data pointer first (MDTS, type), then the range, as nvmet orders them.
            q.reqs[slot as usize].action = action;
            let next = data_phase(q, slot, dir, len, SglFit::Exact, shared)?;
            rw.check_range(ns.num_blocks())?;
            if write && ns.read_only() {
                return Err(Status::NS_WRITE_PROTECTED.with_dnr());
            }
            return Ok(next);
        }
        op::FLUSH => {
            let ns = if sqe.nsid == NSID_ALL {
                None
            } else {
                Some(accessible(sqe.nsid, true)?.slot())
            };
            action = Action::Flush { ns };
            (DataDir::None, 0)
        }
        op::WRITE_ZEROES => {
            let wz = WriteZeroes::from_sqe(&sqe);
            let ns = accessible(wz.nsid, true)?;
            wz.check_range(ns.num_blocks())?;
            action = Action::WriteZeroes {
                ns: ns.slot(),
                lba: wz.slba,
                blocks: wz.blocks(),
                deallocate: wz.deallocate,
            };
            (DataDir::None, 0)
        }
        op::DATASET_MANAGEMENT => {
            let dsm = Dsm::from_sqe(&sqe);
            let ns = accessible(dsm.nsid, true)?;
            action = if dsm.deallocate {
                Action::Deallocate {
                    ns: ns.slot(),
                    ranges: dsm.ranges() as u32,
                }
            } else {
                // Attribute hints only: nothing to do, and no need to fetch the ranges.
                Action::Respond
            };
            if action == Action::Respond {
                (DataDir::None, 0)
            } else {
                fit = SglFit::AtLeast;
                (DataDir::HostToController, dsm.data_len())
            }
        }
        resv::REGISTER | resv::ACQUIRE | resv::RELEASE => {
            let ns = namespace(sqe.nsid)?;
            if ns.read_only() {
                // As nvmet: a write-protected namespace takes no reservation commands.
                return Err(Status::NS_WRITE_PROTECTED);
            }
            action = Action::Reservation { ns: ns.slot() };
            // The keys; a longer data buffer is fine (nvmet reads what it needs).
            fit = SglFit::AtLeast;
            let keys = if sqe.opcode == resv::RELEASE {
                ONE_KEY
            } else {
                TWO_KEYS
            };
            (DataDir::HostToController, keys)
        }
        resv::REPORT => {
            let ns = namespace(sqe.nsid)?;
            let rc = ReportCmd::from_sqe(&sqe);
            // Fabrics host identifiers are 128 bits: only the extended structure holds them.
            if !rc.eds {
                return Err(Status::HOST_ID_INCONSISTENT_FORMAT.with_dnr());
            }
            let len = rc.bytes();
            if len < REPORT_HEADER_LEN as u64 || len > u64::from(shared.fixed.limits.max_io_size) {
                return Err(Status::INVALID_FIELD.with_dnr());
            }
            let (generation, rtype, ptpls, regs) = ns.reservations().report();
            let page = encode_report(generation, rtype, ptpls, &regs, len as usize);
            q.reqs[slot as usize].action = Action::Respond;
            let next = data_phase(
                q,
                slot,
                DataDir::ControllerToHost,
                len as u32,
                SglFit::Exact,
                shared,
            )?;
            let ds = q.reqs[slot as usize].data;
            q.write_data(ds, 0, &page).map_err(|_| Status::INTERNAL)?;
            return Ok(next);
        }
        _ => return Err(Status::INVALID_OPCODE.with_dnr()),
    };
    q.reqs[slot as usize].action = action;
    data_phase(q, slot, dir, len, fit, shared)
}

/// Runs a Reservation Register, Acquire or Release whose keys are in the data slot; a failure
/// is the request's status. A preempt and abort that preempted hosts returns its fence: the
/// command completes once the fence is done ([`crate::nvmf::runtime::fence`]).
pub fn reservation<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
) -> Option<Arc<Fence>> {
    let r = q.reqs[slot as usize];
    let Action::Reservation { ns } = r.action else {
        return None;
    };
    match reservation_status(q, &r, ns, shared) {
        Ok(fence) => fence,
        Err(st) => {
            q.reqs[slot as usize].fail(st);
            None
        }
    }
}

fn reservation_status<X: QueueTransport>(
    q: &Queue<X>,
    r: &crate::nvmf::request::Request,
    ns: usize,
    shared: &Shared,
) -> Result<Option<Arc<Fence>>, Status> {
    let ctrl = q.ctrl.as_ref().ok_or(Status::INTERNAL)?;
    let ns = shared
        .namespaces
        .get(ns)
        .ok_or(Status::INVALID_NAMESPACE.with_dnr())?;
    let release = r.sqe.opcode == resv::RELEASE;
    let mut data = [0u8; TWO_KEYS as usize];
    let n = if release { ONE_KEY } else { TWO_KEYS } as usize;
    q.read_data(r.data, 0, &mut data[..n])
        .map_err(|_| Status::INTERNAL)?;
    let (k1, k2) = keys(&data[..n]);
    let c = ResvCdw10::from_sqe(&r.sqe);
    let host = &ctrl.hostid;
    let resv = ns.reservations();
    let result = match r.sqe.opcode {
        // CPTPL 11b without a state directory is Invalid Field: rdmablk says it cannot
        // persist rather than pretend (nvmet ignores the field).
        resv::REGISTER => resv.register_announced(host, c.action, c.iekey, k1, k2, c.cptpl),
        resv::ACQUIRE => resv.acquire_announced(host, c.action, c.iekey, c.rtype, k1, k2),
        _ => resv.release_announced(host, c.action, c.iekey, c.rtype, k1),
    };
    let (result, announce) = match result {
        Ok((n, a)) => (Ok(n), a),
        Err(e) => (Err(e), None),
    };
    // Preempt and abort: wait for the preempted hosts' modifying commands already running;
    // a shared namespace: for every other gateway to enforce the change (and drain them too).
    let mut fence = None;
    if let Ok(notices) = &result {
        let mut preempted: Vec<HostId> = notices
            .iter()
            .filter(|(_, k)| *k == notice::REGISTRATION_PREEMPTED)
            .map(|(h, _)| *h)
            .collect();
        if r.sqe.opcode != resv::ACQUIRE || c.action != racqa::PREEMPT_AND_ABORT {
            preempted.clear();
        }
        if !preempted.is_empty() || announce.is_some() {
            let groups = shared.workers.get().map_or(1, Vec::len) * shared.transports.len();
            fence = Some(shared.fences.raise(ns.slot(), preempted, groups, announce));
        }
    }
    // Other hosts' controllers of this subsystem hear of what changed for them.
    if let Ok(notices) = &result {
        if !notices.is_empty() {
            for other in shared.controllers.all() {
                if !Arc::ptr_eq(&other.subsys, &ctrl.subsys) {
                    continue;
                }
                for (_, kind) in notices.iter().filter(|(h, _)| *h == other.hostid) {
                    other.reservation_notice(*kind, ns.nsid());
                }
            }
        }
    }
    result.map(|_| fence).map_err(|e| match e {
        ResvError::Conflict => Status::RESERVATION_CONFLICT.with_dnr(),
        ResvError::InvalidField => Status::INVALID_FIELD.with_dnr(),
        ResvError::InvalidAction => Status::INVALID_OPCODE.with_dnr(),
        ResvError::Persist => Status::INTERNAL,
    })
}

/// Prepares the backend operations of request `slot` once its data is in place: validates
/// DSM ranges, counts operations. Returns false if nothing needs the backend.
pub fn plan<X: QueueTransport>(q: &mut Queue<X>, slot: u32, shared: &Shared) -> bool {
    let r = q.reqs[slot as usize];
    let total = match r.action {
        Action::ReadWrite { .. } | Action::WriteZeroes { .. } => 1,
        Action::Flush { ns: Some(_) } => 1,
        Action::Flush { ns: None } => match &q.ctrl {
            Some(c) => c.visible_namespaces().count() as u32,
            None => 0,
        },
        Action::Deallocate { ns, ranges } => {
            let Some(nsze) = shared.namespaces.get(ns).map(|n| n.num_blocks()) else {
                q.reqs[slot as usize].fail(Status::INVALID_NAMESPACE.with_dnr());
                return false;
            };
            for i in 0..ranges {
                match dsm_range(q, slot, i) {
                    Some(rg) if rg.check_range(nsze).is_ok() => {}
                    Some(_) => {
                        q.reqs[slot as usize].fail(Status::LBA_OUT_OF_RANGE.with_dnr());
                        return false;
                    }
                    None => {
                        q.reqs[slot as usize].fail(Status::INTERNAL);
                        return false;
                    }
                }
            }
            ranges
        }
        Action::Respond | Action::Connect | Action::Auth | Action::Reservation { .. } => 0,
    };
    let r = &mut q.reqs[slot as usize];
    r.ops_total = total;
    r.ops_next = 0;
    total > 0
}

fn dsm_range<X: QueueTransport>(q: &Queue<X>, slot: u32, i: u32) -> Option<DsmRange> {
    let ds = q.reqs[slot as usize].data;
    let mut b = [0u8; DSM_RANGE_LEN];
    q.read_data(ds, i as usize * DSM_RANGE_LEN, &mut b).ok()?;
    Some(DsmRange::decode(&b))
}

/// Submits the request's remaining backend operations. On `Busy` the request is queued on
/// `backlog` to be resumed when the backend has room.
pub fn submit<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    group: u8,
    nsq: &mut NsQueues,
    backlog: &mut VecDeque<u64>,
) {
    let key = q.key;
    while q.reqs[slot as usize].ops_next < q.reqs[slot as usize].ops_total {
        let r = q.reqs[slot as usize];
        let i = r.ops_next;
        let (ns, op) = match backend_op(q, slot, i) {
            Ok(Some(x)) => x,
            Ok(None) => {
                q.reqs[slot as usize].ops_next += 1;
                continue;
            }
            Err(()) => {
                q.reqs[slot as usize].fail(Status::INTERNAL);
                q.reqs[slot as usize].ops_next += 1;
                continue;
            }
        };
        let tag = Tag::new(group, key, slot).encode();
        let Some(nq) = nsq.get(ns) else {
            // Removed while the request waited: it fails, the namespace's other I/O is done.
            let r = &mut q.reqs[slot as usize];
            r.fail(Status::INVALID_NAMESPACE.with_dnr());
            r.ops_next += 1;
            continue;
        };
        match nq.submit(IoRequest { tag, op }) {
            Ok(()) => {
                let r = &mut q.reqs[slot as usize];
                r.ops_in_flight += 1;
                r.ops_next += 1;
                q.backend_ops += 1;
            }
            Err(SubmitError::Busy) => {
                backlog.push_back(tag);
                return;
            }
            Err(SubmitError::Rejected(e)) => {
                let r = &mut q.reqs[slot as usize];
                r.fail(status_of(e));
                r.ops_next += 1;
            }
        }
    }
}

/// Operation `i` of the request: `Ok(None)` when there is nothing to do (an empty DSM range).
fn backend_op<X: QueueTransport>(
    q: &Queue<X>,
    slot: u32,
    i: u32,
) -> Result<Option<(usize, IoOp)>, ()> {
    let r = &q.reqs[slot as usize];
    Ok(Some(match r.action {
        Action::ReadWrite {
            ns,
            lba,
            blocks,
            write,
            fua,
        } => {
            let region = r.data.region();
            debug_assert!(r.data_len as usize <= region.len);
            let ptr = NonNull::new(region.as_ptr()).ok_or(())?;
            // SAFETY: the data slot belongs to this request until it is free again, which
            // happens only after this operation's completion has been polled; the parcel
            // stays mapped until the queue is dropped, which waits for every backend
            // operation of the queue (`Queue::backend_ops`). No transport operation names
            // the slot while the backend owns it (host data is fetched before, and
            // controller-to-host data sent after, the backend's completion).
            let buf = unsafe { IoBuf::from_raw_parts(ptr, r.data_len) };
            if write {
                (
                    ns,
                    IoOp::Write {
                        lba,
                        blocks,
                        buf,
                        fua,
                    },
                )
            } else {
                (ns, IoOp::Read { lba, blocks, buf })
            }
        }
        Action::WriteZeroes {
            ns, lba, blocks, ..
        } => (ns, IoOp::WriteZeroes { lba, blocks }),
        Action::Flush { ns: Some(ns) } => (ns, IoOp::Flush),
        Action::Flush { ns: None } => {
            let ctrl = q.ctrl.as_ref().ok_or(())?;
            match ctrl.visible_namespaces().nth(i as usize) {
                Some(n) => (n.slot(), IoOp::Flush),
                None => return Ok(None),
            }
        }
        Action::Deallocate { ns, .. } => {
            let rg = dsm_range(q, slot, i).ok_or(())?;
            if rg.nlb == 0 {
                return Ok(None);
            }
            (
                ns,
                IoOp::Deallocate {
                    lba: rg.slba,
                    blocks: rg.nlb,
                },
            )
        }
        Action::Respond | Action::Connect | Action::Auth | Action::Reservation { .. } => {
            return Err(())
        }
    }))
}

/// The NVMe status of a backend failure.
pub fn status_of(e: IoError) -> Status {
    let (sct, sc) = e.kind.nvme_status();
    let st = Status::new(Sct::from_bits(sct), sc);
    match e.kind {
        IoErrorKind::OutOfRange
        | IoErrorKind::ReadOnly
        | IoErrorKind::InvalidRequest
        | IoErrorKind::WritesFenced
        | IoErrorKind::Device { dnr: true, .. } => st.with_dnr(),
        _ => st,
    }
}
