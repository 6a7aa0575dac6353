//! Reservations end to end with two raw hosts (distinct host NQNs and host IDs) on one
//! namespace: the holder writes, the other host's writes get Reservation Conflict while its
//! reads go through (Write Exclusive), a preempt moves the reservation, the report shows who
//! is registered, and the fields nvmet checks are checked. The Linux host's nvme-cli runs
//! blktests nvme/054's sequence against rdmablk in `tests/vm/reservations.sh`.

mod common;

use common::*;
use rdmablk::nvme::admin::AsyncEvent;
use rdmablk::nvme::features::fid;
use rdmablk::nvme::identify::{cns, oncs, IdentifyController, IdentifyNamespace};
use rdmablk::nvme::log_page::lid;
use rdmablk::nvme::reservation::{
    decode_report, encode_keys, op, racqa, rrega, rrela, ResvCdw10, RESCAP_PTPL,
    RESCAP_TYPES_AND_IEKEY,
};
use rdmablk::nvme::reservation::{encode_notice, notice};
use rdmablk::nvme::{Cqe, GetFeatures, GetLogPage, InCapsuleSgl, Sgl, Sqe, Status};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

const NSID: u32 = 1;

/// A Register / Acquire / Release with its keys in the capsule.
fn resv(h: &mut Host, opcode: u8, c: ResvCdw10, k1: u64, k2: u64) -> Cqe {
    let mut sqe = Sqe::new(opcode, 0);
    sqe.nsid = NSID;
    sqe.cdw10 = c.to_cdw10();
    let data = encode_keys(k1, k2);
    let len = if opcode == op::RELEASE { 8 } else { 16 };
    sqe.set_sgl(&Sgl::InCapsule(InCapsuleSgl { offset: 0, len }));
    h.submit(sqe, &data[..len as usize])
}

/// A reservation command that must succeed.
fn ok(h: &mut Host, opcode: u8, c: ResvCdw10, k1: u64, k2: u64) {
    assert_status(&resv(h, opcode, c, k1, k2), Status::SUCCESS);
}

/// The next Reservation Notification log page (64 bytes, zeroes when none).
fn notice_page(h: &mut Host) -> Vec<u8> {
    let mut sqe = GetLogPage::new(lid::RESERVATION_NOTIFICATION, 0xFFFF_FFFF, 0, 64).to_sqe(0);
    sqe.set_sgl(&h.keyed(0, 64));
    assert_status(&h.submit(sqe, &[]), Status::SUCCESS);
    h.read_data(0, 64)
}

/// A target admitting both hosts, with `backend` for the RAM namespace and `extra_target`
/// in `[target]`.
fn two_host_target(port: u16, backend: &str, extra_target: &str) -> Target {
    let text = config_text(port, "32MiB", extra_target)
        .replace(
            &format!("hosts = [\"{HOSTNQN}\"]"),
            &format!("hosts = [\"{HOSTNQN}\", \"{OTHER_HOSTNQN}\"]"),
        )
        .replace(RAM_BACKEND, backend);
    Target::start(Config::from_str(&text).expect("config")).expect("target starts")
}

fn cdw10(action: u8, rtype: u8) -> ResvCdw10 {
    ResvCdw10 {
        action,
        iekey: false,
        rtype,
        cptpl: 0,
    }
}

/// A report as (generation, type, [(host ID, key, holds)]).
type Report = (u32, u8, Vec<([u8; 16], u64, bool)>);

/// Reservation Report (extended, 4 KiB).
fn report(h: &mut Host) -> Report {
    let mut sqe = Sqe::new(op::REPORT, 0);
    sqe.nsid = NSID;
    sqe.cdw10 = 4096 / 4 - 1;
    sqe.cdw11 = 1;
    sqe.set_sgl(&h.keyed(0, 4096));
    assert_status(&h.submit(sqe, &[]), Status::SUCCESS);
    let (g, t, _, regs) = decode_report(&h.read_data(0, 4096)).expect("a report");
    (
        g,
        t,
        regs.iter().map(|r| (r.hostid, r.rkey, r.holds)).collect(),
    )
}

#[test]
fn write_exclusive_preempt_and_the_report_between_two_hosts() {
    init_tracing();
    // Host A and host B on the subsystem.
    let t = two_host_target(free_port(), RAM_BACKEND, "");
    let addr = t.local_addrs()[0];
    let (mut admin_a, a_id) = admin_queue_as(addr, HOSTNQN, 0);
    let (admin_b, b_id) = admin_queue_as(addr, OTHER_HOSTNQN, 0);
    let mut a = io_queue_as(addr, HOSTNQN, 1, a_id);
    let mut b = io_queue_as(addr, OTHER_HOSTNQN, 1, b_id);
    let (id_a, id_b) = (host_id_of(HOSTNQN), host_id_of(OTHER_HOSTNQN));

    // What the controller advertises.
    let (c, page) = identify_page(&mut admin_a, cns::CONTROLLER, 0);
    assert_status(&c, Status::SUCCESS);
    let idc = IdentifyController::decode(&page).expect("identify controller");
    assert_ne!(idc.oncs & oncs::RESERVATIONS, 0);
    let (_, page) = identify_page(&mut admin_a, cns::NAMESPACE, NSID);
    assert_eq!(
        IdentifyNamespace::decode(&page).rescap,
        RESCAP_TYPES_AND_IEKEY
    );
    // Get Features Host Identifier: the 128-bit ID Connect brought.
    let mut sqe = GetFeatures {
        fid: fid::HOST_ID,
        select: 0,
        nsid: 0,
        cdw11: 1,
    }
    .to_sqe(0);
    sqe.set_sgl(&admin_a.keyed(0, 16));
    assert_status(&admin_a.submit(sqe, &[]), Status::SUCCESS);
    assert_eq!(admin_a.read_data(0, 16), id_a);

    // A registers (key 1) and takes Write Exclusive.
    ok(&mut a, op::REGISTER, cdw10(rrega::REGISTER, 0), 0, 1);
    ok(&mut a, op::ACQUIRE, cdw10(racqa::ACQUIRE, 1), 1, 0);
    assert_status(&a.rw(true, NSID, 0, 8), Status::SUCCESS);
    let c = b.rw(true, NSID, 0, 8);
    assert_status(&c, Status::RESERVATION_CONFLICT);
    assert!(c.status.dnr);
    assert_status(&b.rw(false, NSID, 0, 8), Status::SUCCESS);
    // B is not registered: acquiring conflicts.
    assert_status(
        &resv(&mut b, op::ACQUIRE, cdw10(racqa::ACQUIRE, 1), 2, 0),
        Status::RESERVATION_CONFLICT,
    );
    assert_eq!(report(&mut b), (1, 1, vec![(id_a, 1, true)]));

    // A waits for events (an Async Event Request outstanding).
    let mut aer = Sqe::new(rdmablk::nvme::opcodes::admin::ASYNC_EVENT_REQUEST, 0);
    aer.cid = 0x7000;
    admin_a.send_capsule(&aer.to_bytes());

    // B registers (key 2) and preempts A (PRKEY 1): B holds, A is gone and conflicts.
    ok(&mut b, op::REGISTER, cdw10(rrega::REGISTER, 0), 0, 2);
    ok(&mut b, op::ACQUIRE, cdw10(racqa::PREEMPT, 1), 2, 1);
    assert_status(&b.rw(true, NSID, 0, 8), Status::SUCCESS);
    assert_status(&a.rw(true, NSID, 8, 8), Status::RESERVATION_CONFLICT);
    assert_eq!(report(&mut a), (3, 1, vec![(id_b, 2, true)]));
    // A hears of it: the event, then one Reservation Notification log page, then none.
    let aen = admin_a.wait_response().expect("the AER completes");
    assert_eq!(AsyncEvent::from_dw0(aen.dw0), AsyncEvent::reservation_log());
    let page = notice_page(&mut admin_a);
    assert_eq!(
        page,
        encode_notice(1, notice::REGISTRATION_PREEMPTED, 0, NSID).to_vec()
    );
    assert_eq!(
        notice_page(&mut admin_a),
        vec![0u8; 64],
        "one page, read once"
    );

    // B releases: everyone writes again; the registration stays.
    ok(&mut b, op::RELEASE, cdw10(rrela::RELEASE, 1), 2, 0);
    assert_status(&a.rw(true, NSID, 8, 8), Status::SUCCESS);
    assert_eq!(report(&mut a), (3, 0, vec![(id_b, 2, false)]));

    // Fields: the non-extended report cannot hold 128-bit host IDs; a report smaller than its
    // header; persisting through power loss is refused (rdmablk does not); an undefined action.
    let mut sqe = Sqe::new(op::REPORT, 0);
    sqe.nsid = NSID;
    sqe.cdw10 = 4096 / 4 - 1;
    sqe.set_sgl(&a.keyed(0, 4096));
    assert_status(&a.submit(sqe, &[]), Status::HOST_ID_INCONSISTENT_FORMAT);
    sqe.cdw11 = 1;
    sqe.cdw10 = 32 / 4 - 1;
    sqe.set_sgl(&a.keyed(0, 32));
    assert_status(&a.submit(sqe, &[]), Status::INVALID_FIELD);
    let mut c = cdw10(rrega::REGISTER, 0);
    c.cptpl = 0b11;
    assert_status(&resv(&mut a, op::REGISTER, c, 0, 9), Status::INVALID_FIELD);
    assert_status(
        &resv(&mut a, op::REGISTER, cdw10(5, 0), 0, 9),
        Status::INVALID_OPCODE,
    );
    // Keys shorter than the command's.
    let mut sqe = Sqe::new(op::REGISTER, 0);
    sqe.nsid = NSID;
    sqe.set_sgl(&Sgl::InCapsule(InCapsuleSgl { offset: 0, len: 8 }));
    assert_status(&a.submit(sqe, &[0u8; 8]), Status::SGL_INVALID_DATA_LENGTH);
    // A reservation command to a namespace that does not exist.
    let mut sqe = Sqe::new(op::REGISTER, 0);
    sqe.nsid = 9;
    sqe.set_sgl(&Sgl::InCapsule(InCapsuleSgl { offset: 0, len: 16 }));
    assert_status(&a.submit(sqe, &[0u8; 16]), Status::INVALID_NAMESPACE);

    // B clears: no registrant left.
    ok(&mut b, op::RELEASE, cdw10(rrela::CLEAR, 0), 2, 0);
    assert_eq!(report(&mut a), (4, 0, vec![]));
    drop((a, b, admin_a, admin_b));
    wait_idle(&t);
    t.shutdown();
}

/// A target of both hosts whose reservations persist in `state_dir`, on `port`.
fn persisting_target(port: u16, state_dir: &std::path::Path) -> Target {
    two_host_target(port, RAM_BACKEND, &format!("state_dir = {:?}", state_dir))
}

#[test]
fn a_reservation_persisted_through_power_loss_survives_a_restart() {
    init_tracing();
    let dir = tmp_dir("resv-ptpl");
    let port = free_port();
    let t = persisting_target(port, &dir);
    let addr = t.local_addrs()[0];
    let (mut admin_a, a_id) = admin_queue_as(addr, HOSTNQN, 0);
    let mut a = io_queue_as(addr, HOSTNQN, 1, a_id);
    let (_, page) = identify_page(&mut admin_a, cns::NAMESPACE, NSID);
    assert_eq!(
        IdentifyNamespace::decode(&page).rescap,
        RESCAP_TYPES_AND_IEKEY | RESCAP_PTPL,
        "PTPL offered with a state directory"
    );
    // A registers asking for persistence (CPTPL 11b) and takes Exclusive Access.
    let mut c = cdw10(rrega::REGISTER, 0);
    c.cptpl = 0b11;
    ok(&mut a, op::REGISTER, c, 0, 7);
    ok(&mut a, op::ACQUIRE, cdw10(racqa::ACQUIRE, 2), 7, 0);
    drop((a, admin_a));
    wait_idle(&t);
    t.shutdown();

    // After the restart: still held, B's reads refused, the report says PTPLS.
    let t = persisting_target(port, &dir);
    let addr = t.local_addrs()[0];
    let (mut admin_b, b_id) = admin_queue_as(addr, OTHER_HOSTNQN, 0);
    let mut b = io_queue_as(addr, OTHER_HOSTNQN, 1, b_id);
    assert_status(&b.rw(false, NSID, 0, 8), Status::RESERVATION_CONFLICT);
    let mut sqe = Sqe::new(op::REPORT, 0);
    sqe.nsid = NSID;
    sqe.cdw10 = 4096 / 4 - 1;
    sqe.cdw11 = 1;
    sqe.set_sgl(&b.keyed(0, 4096));
    assert_status(&b.submit(sqe, &[]), Status::SUCCESS);
    let (g, rtype, ptpls, regs) = decode_report(&b.read_data(0, 4096)).expect("a report");
    assert_eq!((g, rtype, ptpls, regs.len()), (1, 2, true, 1));
    assert_eq!(
        (regs[0].hostid, regs[0].rkey, regs[0].holds),
        (host_id_of(HOSTNQN), 7, true)
    );
    let mut gf = GetFeatures {
        fid: fid::RESERVATION_PERSIST,
        select: 0,
        nsid: NSID,
        cdw11: 0,
    }
    .to_sqe(0);
    gf.nsid = NSID;
    let c = admin_b.submit(gf, &[]);
    assert_status(&c, Status::SUCCESS);
    assert_eq!(c.dw0 & 1, 1, "Get Features Reservation Persistence");
    drop((b, admin_b));

    // A turns persistence off (CPTPL 10b on a re-register): the next restart starts clean.
    let (admin_a, a_id) = admin_queue_as(addr, HOSTNQN, 0);
    let mut a = io_queue_as(addr, HOSTNQN, 1, a_id);
    let mut c = cdw10(rrega::REGISTER, 0);
    c.cptpl = 0b10;
    ok(&mut a, op::REGISTER, c, 0, 7);
    drop((a, admin_a));
    wait_idle(&t);
    t.shutdown();
    let t = persisting_target(port, &dir);
    let addr = t.local_addrs()[0];
    let (admin_b, b_id) = admin_queue_as(addr, OTHER_HOSTNQN, 0);
    let mut b = io_queue_as(addr, OTHER_HOSTNQN, 1, b_id);
    assert_status(&b.rw(true, NSID, 0, 8), Status::SUCCESS);
    drop((b, admin_b));
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn preempt_and_abort_completes_after_the_preempted_hosts_writes() {
    init_tracing();
    // Every backend operation takes 300 ms: a write of A is still running when B preempts.
    let backend = r#"backend = { kind = "error", latency_us = 300000, inner = { kind = "ram", size = "16MiB" } }"#;
    let t = two_host_target(free_port(), backend, "");
    let addr = t.local_addrs()[0];
    let (admin_a, a_id) = admin_queue_as(addr, HOSTNQN, 0);
    let (admin_b, b_id) = admin_queue_as(addr, OTHER_HOSTNQN, 0);
    let mut a = io_queue_as(addr, HOSTNQN, 1, a_id);
    let mut b = io_queue_as(addr, OTHER_HOSTNQN, 1, b_id);
    ok(&mut a, op::REGISTER, cdw10(rrega::REGISTER, 0), 0, 1);
    ok(&mut a, op::ACQUIRE, cdw10(racqa::ACQUIRE, 1), 1, 0);
    ok(&mut b, op::REGISTER, cdw10(rrega::REGISTER, 0), 0, 2);
    // A's write is sent, not waited for.
    start_write(&t, &mut a, NSID, 0x55);
    let io = || ns_counters(&t, NSID);
    assert_eq!(io().written_bytes, 0, "A's write is still on the backend");
    ok(
        &mut b,
        op::ACQUIRE,
        cdw10(racqa::PREEMPT_AND_ABORT, 1),
        2,
        1,
    );
    // The preempt completed after A's write did, never before.
    assert_eq!(
        io().written_bytes,
        u64::from(8 * BLOCK),
        "preempt and abort completed while A's write was still running"
    );
    let done = a.wait_response().expect("A's write completes");
    assert_eq!(done.cid, 0x55);
    assert_status(&done, Status::SUCCESS);
    // A's next write is refused.
    assert_status(&a.rw(true, NSID, 0, 8), Status::RESERVATION_CONFLICT);
    drop((a, b, admin_a, admin_b));
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn the_notification_mask_silences_the_types_a_host_masked() {
    init_tracing();
    let t = two_host_target(free_port(), RAM_BACKEND, "");
    let addr = t.local_addrs()[0];
    let (mut admin_a, a_id) = admin_queue_as(addr, HOSTNQN, 0);
    let (mut admin_b, b_id) = admin_queue_as(addr, OTHER_HOSTNQN, 0);
    let mut a = io_queue_as(addr, HOSTNQN, 1, a_id);
    let mut b = io_queue_as(addr, OTHER_HOSTNQN, 1, b_id);
    let set_mask = |h: &mut Host, nsid: u32, mask: u32| {
        let sf = rdmablk::nvme::SetFeatures {
            fid: fid::RESERVATION_MASK,
            value: mask,
            save: false,
            nsid,
        };
        h.submit(sf.to_sqe(0), &[])
    };
    let get_mask = |h: &mut Host| {
        let mut gf = GetFeatures {
            fid: fid::RESERVATION_MASK,
            select: 0,
            nsid: NSID,
            cdw11: 0,
        }
        .to_sqe(0);
        gf.nsid = NSID;
        let c = h.submit(gf, &[]);
        assert_status(&c, Status::SUCCESS);
        c.dw0
    };
    // Bits other than 1..3 are Invalid Field; an unknown namespace is Invalid Namespace.
    assert_status(&set_mask(&mut admin_a, NSID, 1), Status::INVALID_FIELD);
    assert_status(&set_mask(&mut admin_a, 7, 2), Status::INVALID_NAMESPACE);
    assert_eq!(get_mask(&mut admin_a), 0);
    // A masks Registration Preempted (bit 1) on every namespace it sees.
    assert_status(&set_mask(&mut admin_a, 0xFFFF_FFFF, 0b10), Status::SUCCESS);
    assert_eq!(get_mask(&mut admin_a), 0b10);
    assert_eq!(
        get_mask(&mut admin_b),
        0,
        "the mask is A's controller's, not B's"
    );
    for (h, key) in [(&mut a, 1), (&mut b, 2)] {
        ok(h, op::REGISTER, cdw10(rrega::REGISTER, 0), 0, key);
    }
    ok(&mut a, op::ACQUIRE, cdw10(racqa::ACQUIRE, 1), 1, 0);
    // B preempts A: A is told nothing (the command completed: notices are made before).
    ok(&mut b, op::ACQUIRE, cdw10(racqa::PREEMPT, 1), 2, 1);
    assert_eq!(notice_page(&mut admin_a), vec![0u8; 64], "masked: no page");
    // Unmasked again, the next preempt of A is on its log.
    assert_status(&set_mask(&mut admin_a, NSID, 0), Status::SUCCESS);
    ok(&mut b, op::RELEASE, cdw10(rrela::RELEASE, 1), 2, 0);
    ok(&mut a, op::REGISTER, cdw10(rrega::REGISTER, 0), 0, 1);
    ok(&mut a, op::ACQUIRE, cdw10(racqa::ACQUIRE, 1), 1, 0);
    ok(&mut b, op::ACQUIRE, cdw10(racqa::PREEMPT, 1), 2, 1);
    assert_eq!(
        notice_page(&mut admin_a),
        encode_notice(1, notice::REGISTRATION_PREEMPTED, 0, NSID).to_vec()
    );
    drop((a, b, admin_a, admin_b));
    wait_idle(&t);
    t.shutdown();
}
