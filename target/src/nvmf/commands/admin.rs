//! Admin commands: Identify, Set/Get Features, Get Log Page, Keep Alive, Async Event
//! Request, Abort. All complete synchronously except a held Async Event Request.

use std::sync::Arc;

use rdmablk::nvme::admin::ABORT_NOT_ABORTED;
use rdmablk::nvme::ana::{self, LSP_RGO};
use rdmablk::nvme::features::{fid, VWC_ENABLE};
use rdmablk::nvme::identify::{
    anacap, cmic, cns, encode_ns_descriptors, encode_ns_list, oaes, IDENTIFY_LEN,
};
use rdmablk::nvme::log_page::{
    encode_changed_ns, lid, CommandEffects, FwSlotLog, SmartLog, PAGE_4K_LEN,
};
use rdmablk::nvme::opcodes::{admin as op, io as io_op};
use rdmablk::nvme::{
    ascii_padded, GetFeatures, GetLogPage, IdentifyCmd, IdentifyController, IdentifyNamespace, Nqn,
    NsDescriptor, NumQueues, SetFeatures, Status,
};

use super::data_phase::{data_phase, Next, SglFit};
use super::discovery;
use crate::config::{ANA_GROUP_MAX, MAX_NAMESPACES_PER_SUBSYSTEM};
use crate::namespace::reservation::ResvError;
use crate::nvmf::queue::{Queue, MAX_HELD_AERS};
use crate::nvmf::request::DataDir;
use crate::nvmf::subsystems::ana::ANATT_SECS;
use crate::nvmf::subsystems::controller::{Controller, RESV_NOTICE_MASK_BITS};
use crate::nvmf::subsystems::subsystem::fnv1a;
use crate::nvmf::transport::QueueTransport;
use crate::nvmf::{mdts, Shared, FIRMWARE_REVISION, MODEL};

/// Checks and runs an admin command on the admin queue of `ctrl`.
pub fn prepare<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
    ctrl: &Arc<Controller>,
) -> Next {
    let sqe = q.reqs[slot as usize].sqe;
    if !ctrl.is_ready() {
        // Every admin command (Fabrics commands are not admin commands) waits for CC.EN and
        // CSTS.RDY, Identify and Keep Alive included, as nvmet (`nvmet_check_ctrl_status`) and
        // SPDK answer them. Hosts enable the controller right after Connect and before their
        // first Identify; keep-alive starts after that.
        q.reqs[slot as usize].fail(Status::COMMAND_SEQUENCE_ERROR.with_dnr());
        return Next::Respond;
    }
    if ctrl.subsys.is_discovery() && !discovery::serves(sqe.opcode) {
        q.reqs[slot as usize].fail(Status::INVALID_OPCODE.with_dnr());
        return Next::Respond;
    }
    let result = match sqe.opcode {
        op::IDENTIFY => identify(q, slot, shared, ctrl),
        op::GET_LOG_PAGE => get_log_page(q, slot, shared, ctrl),
        op::SET_FEATURES => set_features(q, slot, shared, ctrl),
        op::GET_FEATURES => get_features(q, slot, shared, ctrl),
        op::KEEP_ALIVE => Ok(Next::Respond),
        op::ASYNC_EVENT_REQUEST => {
            if q.aers.len() >= MAX_HELD_AERS {
                Err(Status::ASYNC_EVENT_LIMIT_EXCEEDED.with_dnr())
            } else {
                q.aers.push(slot);
                Ok(Next::Hold)
            }
        }
        op::ABORT => {
            q.reqs[slot as usize].dw0 = ABORT_NOT_ABORTED;
            Ok(Next::Respond)
        }
        _ => Err(Status::INVALID_OPCODE.with_dnr()),
    };
    match result {
        Ok(n) => n,
        Err(st) => {
            q.reqs[slot as usize].fail(st);
            Next::Respond
        }
    }
}

/// Sets up a controller-to-host transfer of `page` (zero-filled to `len`) into the data slot.
fn send_page<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
    len: u32,
    page: &[u8],
) -> Result<Next, Status> {
    if len > shared.fixed.limits.max_io_size {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    let next = data_phase(
        q,
        slot,
        DataDir::ControllerToHost,
        len,
        SglFit::Exact,
        shared,
    )?;
    let ds = q.reqs[slot as usize].data;
    let n = page.len().min(len as usize);
    let write = |off: usize, b: &[u8]| q.write_data(ds, off, b);
    write(0, &page[..n]).map_err(|_| Status::INTERNAL)?;
    let zeros = [0u8; 512];
    let mut off = n;
    while off < len as usize {
        let k = (len as usize - off).min(zeros.len());
        write(off, &zeros[..k]).map_err(|_| Status::INTERNAL)?;
        off += k;
    }
    Ok(next)
}

fn identify<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
    ctrl: &Arc<Controller>,
) -> Result<Next, Status> {
    let sqe = q.reqs[slot as usize].sqe;
    let id = IdentifyCmd::from_sqe(&sqe);
    let subsys = &ctrl.subsys;
    if subsys.is_discovery() {
        // A discovery controller has no namespaces: Identify Controller only.
        if id.cns != cns::CONTROLLER {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        let page = discovery::identify_controller::<X>(ctrl, shared).encode();
        return send_page(q, slot, shared, IDENTIFY_LEN as u32, &page);
    }
    let page: [u8; IDENTIFY_LEN] = match id.cns {
        cns::CONTROLLER => identify_controller::<X>(ctrl, shared).encode(),
        cns::NAMESPACE => match id.nsid {
            0 | u32::MAX => return Err(Status::INVALID_NAMESPACE.with_dnr()),
            nsid => match ctrl.namespace(nsid) {
                Some(ns) => {
                    let lbads = ns.block_size().trailing_zeros() as u8;
                    let mut idn = IdentifyNamespace::simple(ns.num_blocks(), lbads);
                    // DLFEAT: deallocated blocks read as zeroes, where the backend
                    // guarantees it (else 0: not reported).
                    idn.dlfeat = u8::from(ns.deallocated_reads_zeroes());
                    idn.nguid = uuid_of(subsys.nqn.as_str(), &ns);
                    // NMIC bit 0: the namespace may be attached to several controllers (every
                    // host's, and a host's second path). Without it the Linux host refuses the
                    // namespace on a second controller ("duplicate IDs in subsystem").
                    idn.nmic = NMIC_SHARED;
                    idn.anagrpid = ns.ana_group();
                    // Every reservation type and IEKEY; not Persist Through Power Loss.
                    idn.rescap = rdmablk::nvme::reservation::RESCAP_TYPES_AND_IEKEY;
                    if ns.reservations().can_persist() {
                        idn.rescap |= rdmablk::nvme::reservation::RESCAP_PTPL;
                    }
                    idn.encode()
                }
                // An inactive NSID: all zeroes.
                None => [0u8; IDENTIFY_LEN],
            },
        },
        cns::ACTIVE_NS_LIST => {
            if id.nsid >= 0xFFFF_FFFE {
                return Err(Status::INVALID_NAMESPACE.with_dnr());
            }
            let mut nsids = [0u32; 1024];
            let mut n = 0;
            for ns in ctrl
                .visible_namespaces()
                .filter(|ns| ns.nsid() > id.nsid)
                .take(1024)
            {
                nsids[n] = ns.nsid();
                n += 1;
            }
            encode_ns_list(&nsids[..n], id.nsid)
        }
        cns::NS_DESC_LIST => match ctrl.namespace(id.nsid) {
            Some(ns) => encode_ns_descriptors(&[
                NsDescriptor::Uuid(uuid_of(subsys.nqn.as_str(), &ns)),
                NsDescriptor::Csi(0),
            ]),
            None => return Err(Status::INVALID_NAMESPACE.with_dnr()),
        },
        // CSI-specific and other CNS values: hosts probe them and skip on this status.
        _ => return Err(Status::INVALID_FIELD.with_dnr()),
    };
    send_page(q, slot, shared, IDENTIFY_LEN as u32, &page)
}

/// The namespace's UUID: configured, or derived from the subsystem NQN and NSID.
fn uuid_of(nqn: &str, ns: &crate::namespace::Namespace) -> [u8; 16] {
    ns.uuid().unwrap_or_else(|| {
        let a = fnv1a(nqn.as_bytes());
        let b = fnv1a(&a.to_le_bytes()) ^ u64::from(ns.nsid()).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut u = [0u8; 16];
        u[..8].copy_from_slice(&a.to_be_bytes());
        u[8..].copy_from_slice(&b.to_be_bytes());
        u[6] = (u[6] & 0x0F) | 0x80; // version 8 (custom)
        u[8] = (u[8] & 0x3F) | 0x80; // RFC 4122 variant
        u
    })
}

/// Identify Namespace NMIC bit 0: may be attached to two or more controllers.
const NMIC_SHARED: u8 = 1 << 0;

fn identify_controller<X: QueueTransport>(
    ctrl: &Controller,
    shared: &Shared,
) -> IdentifyController {
    let limits = &shared.fixed.limits;
    let nqn =
        Nqn::new(&ctrl.subsys.nqn).unwrap_or_else(|_| Nqn::new("nqn.invalid").expect("static NQN"));
    let mut id = IdentifyController::nvmf_defaults(ctrl.cntlid, nqn, limits.in_capsule_data_size);
    X::controller_fields(&mut id, limits.in_capsule_data_size);
    id.sn = ascii_padded(&ctrl.subsys.serial);
    id.mn = ascii_padded(MODEL);
    id.fr = ascii_padded(FIRMWARE_REVISION);
    // Every host gets its own controller and a host may have several (duplicate connects,
    // several paths, several gateways), each listener a port, and namespaces report ANA
    // states: say so, as nvmet does.
    id.cmic = cmic::MULTI_PORT | cmic::MULTI_CTRL | cmic::ANA;
    id.oaes |= oaes::ANA_CHANGE;
    id.anatt = ANATT_SECS;
    id.anacap = anacap::ALL_STATES;
    id.anagrpmax = ANA_GROUP_MAX;
    id.nanagrpid = ANA_GROUP_MAX;
    id.mdts = mdts(limits.max_io_size);
    id.maxcmd = limits.max_queue_depth.min(0xFFFF) as u16;
    // NN: the largest NSID a namespace may get (so one added live is not past it), MNAN: how
    // many namespaces at most. The Linux host sizes its ANA log buffer from MNAN and
    // NANAGRPID and refuses ANA if MNAN is 0 or above NN.
    id.mnan = MAX_NAMESPACES_PER_SUBSYSTEM as u32;
    id.nn = ctrl.subsys.max_nsid().max(id.mnan);
    id.kas = (shared.fixed.target.keep_alive_granularity_ms / 100).clamp(1, 0xFFFF) as u16;
    id.aerl = (MAX_HELD_AERS - 1) as u8;
    // Reservation Register / Report / Acquire / Release (as nvmet, always).
    id.oncs |= rdmablk::nvme::identify::oncs::RESERVATIONS;
    id
}

fn set_features<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
    ctrl: &Controller,
) -> Result<Next, Status> {
    let sf = SetFeatures::from_sqe(&q.reqs[slot as usize].sqe);
    let r = &mut q.reqs[slot as usize];
    if ctrl.subsys.is_discovery() && !discovery_feature(sf.fid) {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    match sf.fid {
        fid::NUM_QUEUES => {
            let want = NumQueues::from_dword(sf.value);
            want.check_request()?;
            let max_io = (shared.fixed.limits.max_queues_per_controller - 1).min(0xFFFF) as u16;
            let got = want.grant(max_io);
            ctrl.state().io_queues = got.nsq.min(got.ncq) + 1;
            r.dw0 = got.to_dword();
        }
        fid::KEEP_ALIVE_TIMER => {
            ctrl.set_kato_ms(u64::from(sf.value));
            ctrl.touch(shared.now_ms());
        }
        fid::ASYNC_EVENT_CONFIG => ctrl.state().aec = sf.value,
        fid::VOLATILE_WRITE_CACHE => ctrl.state().vwc = sf.value & VWC_ENABLE != 0,
        fid::ARBITRATION | fid::POWER_MGMT | fid::TEMP_THRESHOLD | fid::ERROR_RECOVERY => {}
        // On fabrics the host identifier comes with Connect and cannot be set (NVMe Base
        // 5.27.1.25; nvmet and SPDK answer Command Sequence Error).
        fid::HOST_ID => return Err(Status::COMMAND_SEQUENCE_ERROR.with_dnr()),
        fid::RESERVATION_MASK => {
            // Per namespace of this controller; NSID FFFFFFFFh: every namespace it sees.
            if sf.value & !RESV_NOTICE_MASK_BITS != 0 {
                return Err(Status::INVALID_FIELD.with_dnr());
            }
            if sf.nsid == u32::MAX {
                for ns in ctrl.visible_namespaces() {
                    ctrl.set_reservation_notice_mask(ns.nsid(), sf.value as u8);
                }
            } else {
                let ns = ctrl
                    .namespace(sf.nsid)
                    .ok_or(Status::INVALID_NAMESPACE.with_dnr())?;
                ctrl.set_reservation_notice_mask(ns.nsid(), sf.value as u8);
            }
            r.dw0 = sf.value;
        }
        fid::RESERVATION_PERSIST => {
            // Per namespace: PTPL (bit 0) on or off, where a state directory allows it.
            let ns = ctrl
                .namespace(sf.nsid)
                .ok_or(Status::INVALID_NAMESPACE.with_dnr())?;
            match ns.reservations().set_ptpl(sf.value & 1 != 0) {
                Ok(()) => {}
                Err(ResvError::Persist) => return Err(Status::INTERNAL),
                Err(_) => return Err(Status::INVALID_FIELD.with_dnr()),
            }
        }
        _ => return Err(Status::INVALID_FIELD.with_dnr()),
    }
    Ok(Next::Respond)
}

fn get_features<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
    ctrl: &Controller,
) -> Result<Next, Status> {
    let gf = GetFeatures::from_sqe(&q.reqs[slot as usize].sqe)?;
    if ctrl.subsys.is_discovery() && !discovery_feature(gf.fid) {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    if gf.fid == fid::HOST_ID {
        // The 128-bit host identifier Connect brought (EXHID must be set: fabrics host IDs
        // are 128 bits), as nvmet and SPDK return it.
        if gf.cdw11 & 1 == 0 {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        return send_page(q, slot, shared, 16, &ctrl.hostid);
    }
    let st = ctrl.state();
    let v = match gf.fid {
        fid::NUM_QUEUES => NumQueues::both(st.io_queues.max(1)).to_dword(),
        fid::KEEP_ALIVE_TIMER => ctrl.kato_ms().min(u64::from(u32::MAX)) as u32,
        fid::ASYNC_EVENT_CONFIG => st.aec,
        fid::VOLATILE_WRITE_CACHE => u32::from(st.vwc),
        fid::ARBITRATION | fid::POWER_MGMT | fid::TEMP_THRESHOLD | fid::ERROR_RECOVERY => 0,
        fid::RESERVATION_PERSIST => {
            let ns = ctrl
                .namespace(gf.nsid)
                .ok_or(Status::INVALID_NAMESPACE.with_dnr())?;
            u32::from(ns.reservations().ptpl())
        }
        fid::RESERVATION_MASK => {
            let ns = ctrl
                .namespace(gf.nsid)
                .ok_or(Status::INVALID_NAMESPACE.with_dnr())?;
            u32::from(ctrl.reservation_notice_mask(ns.nsid()))
        }
        _ => return Err(Status::INVALID_FIELD.with_dnr()),
    };
    drop(st);
    q.reqs[slot as usize].dw0 = v;
    Ok(Next::Respond)
}

/// The features a discovery controller has (nvmet: keep-alive timer, async event config).
fn discovery_feature(f: u8) -> bool {
    matches!(f, fid::KEEP_ALIVE_TIMER | fid::ASYNC_EVENT_CONFIG)
}

fn get_log_page<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
    ctrl: &Controller,
) -> Result<Next, Status> {
    let glp = GetLogPage::from_sqe(&q.reqs[slot as usize].sqe)?;
    let len = u32::try_from(glp.len_bytes()).map_err(|_| Status::INVALID_FIELD.with_dnr())?;
    if ctrl.subsys.is_discovery() {
        if glp.lid != lid::DISCOVERY {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        let log = discovery::log_page(shared, ctrl);
        ctrl.discovery_log_read(glp.rae);
        let window = glp.window(&log)?.to_vec();
        return send_page(q, slot, shared, len, &window);
    }
    if glp.lid == lid::ANA {
        // The log's size is its largest (what the host computes from NANAGRPID and MNAN):
        // a host that reads it in 4 KiB pieces (libnvme) gets zeroes past the groups.
        let mut log = ctrl
            .ana
            .log(&ctrl.subsys, &ctrl.hostnqn)
            .encode(glp.lsp & LSP_RGO != 0);
        let max = ana::HEADER_LEN
            + ana::GROUP_LEN * ANA_GROUP_MAX as usize
            + 4 * MAX_NAMESPACES_PER_SUBSYSTEM;
        log.resize(log.len().max(max), 0);
        ctrl.ana_log_read(glp.rae);
        let window = glp.window(&log)?.to_vec();
        return send_page(q, slot, shared, len, &window);
    }
    let mut page = [0u8; PAGE_4K_LEN];
    let page_len = match glp.lid {
        // Error information: no errors recorded (all-zero entries).
        lid::ERROR => PAGE_4K_LEN,
        lid::SMART => {
            // Per namespace (an NSID other than 0 and all): the namespace must be active for
            // this host (nvmet's rule); the page is the controller's either way.
            if !matches!(glp.nsid, 0 | u32::MAX) && ctrl.namespace(glp.nsid).is_none() {
                return Err(Status::INVALID_NAMESPACE.with_dnr());
            }
            let smart = SmartLog {
                temperature_k: 300,
                avail_spare: 100,
                spare_thresh: 10,
                ..SmartLog::default()
            }
            .encode();
            page[..smart.len()].copy_from_slice(&smart);
            smart.len()
        }
        lid::FW_SLOT => {
            let mut frs = [[0u8; 8]; 7];
            frs[0] = ascii_padded(FIRMWARE_REVISION);
            let fw = FwSlotLog { afi: 1, frs };
            let b = fw.encode();
            page[..b.len()].copy_from_slice(&b);
            b.len()
        }
        lid::CHANGED_NS_LIST => {
            page = encode_changed_ns(&ctrl.changed_namespaces(glp.rae));
            PAGE_4K_LEN
        }
        lid::RESERVATION_NOTIFICATION => {
            // One page per read, the oldest (nvmet does the same).
            let (count, kind, left, nsid) = ctrl.take_reservation_notice(glp.rae);
            let b = rdmablk::nvme::reservation::encode_notice(count, kind, left, nsid);
            page[..b.len()].copy_from_slice(&b);
            b.len()
        }
        lid::CMD_EFFECTS => {
            page = command_effects().encode();
            PAGE_4K_LEN
        }
        _ => return Err(Status::INVALID_LOG_PAGE.with_dnr()),
    };
    let window = glp.window(&page[..page_len])?;
    let window_len = window.len();
    let mut tmp = [0u8; PAGE_4K_LEN];
    tmp[..window_len].copy_from_slice(window);
    send_page(q, slot, shared, len, &tmp[..window_len])
}

fn command_effects() -> CommandEffects {
    use rdmablk::nvme::log_page::effects::{CSUPP, LBCC};
    use rdmablk::nvme::reservation::op as resv_op;
    let mut e = CommandEffects::default();
    for o in [
        op::GET_LOG_PAGE,
        op::IDENTIFY,
        op::ABORT,
        op::SET_FEATURES,
        op::GET_FEATURES,
        op::ASYNC_EVENT_REQUEST,
        op::KEEP_ALIVE,
    ] {
        e.admin[usize::from(o)] = CSUPP;
    }
    e.io[usize::from(io_op::READ)] = CSUPP;
    for o in [
        resv_op::REGISTER,
        resv_op::REPORT,
        resv_op::ACQUIRE,
        resv_op::RELEASE,
    ] {
        e.io[usize::from(o)] = CSUPP;
    }
    for o in [
        io_op::WRITE,
        io_op::FLUSH,
        io_op::WRITE_ZEROES,
        io_op::DATASET_MANAGEMENT,
    ] {
        e.io[usize::from(o)] = CSUPP | LBCC;
    }
    e
}

#[cfg(test)]
mod tests {
    use super::mdts;

    #[test]
    fn mdts_from_max_io_size() {
        assert_eq!(mdts(4096), 0);
        assert_eq!(mdts(128 << 10), 5);
        assert_eq!(mdts(8 << 20), 11);
        assert_eq!(mdts(96 << 10), 4);
    }
}
