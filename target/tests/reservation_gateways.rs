//! Reservations shared by two gateways of one namespace (`shared_reservations`): two targets
//! serve one file, a host on each. A reservation taken through one gateway is enforced by the
//! other before the command completes; two hosts acquiring at once through the two gateways:
//! exactly one wins; a preempt and abort through one gateway completes only after the
//! preempted host's write on the other finished; the notice reaches the preempted host's
//! controller on the other gateway; and reservations without Persist Through Power Loss last
//! while any gateway has the namespace open, not after the last one closes it.

mod common;

use std::path::Path;
use std::sync::{Arc, Barrier};

use common::*;
use rdmablk::nvme::admin::AsyncEvent;
use rdmablk::nvme::log_page::lid;
use rdmablk::nvme::reservation::{
    decode_report, encode_keys, encode_notice, notice, op, racqa, rrega, rrela, ResvCdw10,
};
use rdmablk::nvme::{Cqe, GetLogPage, InCapsuleSgl, Sgl, Sqe, Status};
use rdmablk_target::Target;

const NSID: u32 = 1;
const WRITE_EXCLUSIVE: u8 = 1;
const EXCLUSIVE_ACCESS: u8 = 2;

fn resv(h: &mut Host, opcode: u8, action: u8, rtype: u8, k1: u64, k2: u64) -> Cqe {
    let c = ResvCdw10 {
        action,
        iekey: false,
        rtype,
        cptpl: 0,
    };
    let mut sqe = Sqe::new(opcode, 0);
    sqe.nsid = NSID;
    sqe.cdw10 = c.to_cdw10();
    let data = encode_keys(k1, k2);
    let len = if opcode == op::RELEASE { 8 } else { 16 };
    sqe.set_sgl(&Sgl::InCapsule(InCapsuleSgl { offset: 0, len }));
    h.submit(sqe, &data[..len as usize])
}

/// Reservation Report: (generation, type, registrant count).
fn report(h: &mut Host) -> (u32, u8, usize) {
    let mut sqe = Sqe::new(op::REPORT, 0);
    sqe.nsid = NSID;
    sqe.cdw10 = 4096 / 4 - 1;
    sqe.cdw11 = 1;
    sqe.set_sgl(&h.keyed(0, 4096));
    assert_status(&h.submit(sqe, &[]), Status::SUCCESS);
    let (g, t, _, regs) = decode_report(&h.read_data(0, 4096)).expect("a report");
    (g, t, regs.len())
}

/// A gateway: a target of both hosts serving `file`, its reservations shared in `dir`;
/// `latency_us` per backend operation.
fn gateway(file: &Path, dir: &Path, latency_us: u32) -> Target {
    let backend = format!(
        r#"backend = {{ kind = "error", latency_us = {latency_us}, inner = {{ kind = "file", path = "{}", create_size = "16MiB", direct = false }} }}
shared_reservations = "{}""#,
        file.display(),
        dir.display()
    );
    // `shared_reservations` belongs to the namespace: put it before the backend line.
    let (backend_line, shared_line) = backend.split_once('\n').expect("two lines");
    start_on_free_port(|port| {
        config_text(port, "32MiB", "")
            .replace(
                &format!("hosts = [\"{HOSTNQN}\"]"),
                &format!("hosts = [\"{HOSTNQN}\", \"{OTHER_HOSTNQN}\"]"),
            )
            .replace(RAM_BACKEND, &format!("{shared_line}\n{backend_line}"))
    })
}

fn register(h: &mut Host, key: u64) {
    assert_status(
        &resv(h, op::REGISTER, rrega::REGISTER, 0, 0, key),
        Status::SUCCESS,
    );
}

fn take(h: &mut Host, key: u64, rtype: u8) {
    assert_status(
        &resv(h, op::ACQUIRE, racqa::ACQUIRE, rtype, key, 0),
        Status::SUCCESS,
    );
}

fn stop(gateways: impl IntoIterator<Item = Target>) {
    for t in gateways {
        wait_idle(&t);
        t.shutdown();
    }
}

/// An admin queue and an I/O queue of `hostnqn` on `t`.
fn connect(t: &Target, hostnqn: &str) -> (Host, Host) {
    let addr = t.local_addrs()[0];
    let (admin, id) = admin_queue_as(addr, hostnqn, 0);
    let io = io_queue_as(addr, hostnqn, 1, id);
    (admin, io)
}

#[test]
fn a_reservation_through_one_gateway_is_enforced_by_the_other() {
    init_tracing();
    let dir = tmp_dir("resv-gw-enforce");
    let file = dir.join("disk");
    let g1 = gateway(&file, &dir.join("resv"), 0);
    let g2 = gateway(&file, &dir.join("resv"), 0);
    let (mut admin_a, mut a) = connect(&g1, HOSTNQN);
    let (_admin_b, mut b) = connect(&g2, OTHER_HOSTNQN);
    let mut aer = Sqe::new(rdmablk::nvme::opcodes::admin::ASYNC_EVENT_REQUEST, 0);
    aer.cid = 0x7000;
    admin_a.send_capsule(&aer.to_bytes());

    // A takes Write Exclusive through gateway 1; B's write through gateway 2 is refused as
    // soon as A's command completed, B's read is not.
    register(&mut a, 1);
    take(&mut a, 1, WRITE_EXCLUSIVE);
    assert_status(&b.rw(true, NSID, 0, 8), Status::RESERVATION_CONFLICT);
    assert_status(&b.rw(false, NSID, 0, 8), Status::SUCCESS);
    assert_status(&a.rw(true, NSID, 0, 8), Status::SUCCESS);

    // B registers through gateway 2: gateway 1 reports both.
    register(&mut b, 2);
    assert_eq!(report(&mut a), (2, WRITE_EXCLUSIVE, 2));
    assert_eq!(report(&mut b), (2, WRITE_EXCLUSIVE, 2));

    // B preempts A through gateway 2: A's next write through gateway 1 is refused, and A's
    // controller on gateway 1 hears that it was preempted.
    assert_status(
        &resv(&mut b, op::ACQUIRE, racqa::PREEMPT, WRITE_EXCLUSIVE, 2, 1),
        Status::SUCCESS,
    );
    assert_status(&a.rw(true, NSID, 8, 8), Status::RESERVATION_CONFLICT);
    assert_status(&b.rw(true, NSID, 8, 8), Status::SUCCESS);
    let aen = admin_a.wait_response().expect("the AER completes");
    assert_eq!(AsyncEvent::from_dw0(aen.dw0), AsyncEvent::reservation_log());
    let mut sqe = GetLogPage::new(lid::RESERVATION_NOTIFICATION, 0xFFFF_FFFF, 0, 64).to_sqe(0);
    sqe.set_sgl(&admin_a.keyed(0, 64));
    assert_status(&admin_a.submit(sqe, &[]), Status::SUCCESS);
    assert_eq!(
        admin_a.read_data(0, 64),
        encode_notice(1, notice::REGISTRATION_PREEMPTED, 0, NSID).to_vec()
    );

    // A clear through gateway 2 frees gateway 1 too.
    assert_status(
        &resv(&mut b, op::RELEASE, rrela::CLEAR, 0, 2, 0),
        Status::SUCCESS,
    );
    assert_status(&a.rw(true, NSID, 16, 8), Status::SUCCESS);
    assert_eq!(report(&mut a), (4, 0, 0));
    drop((a, b, admin_a, _admin_b));
    stop([g1, g2]);
}

#[test]
fn two_hosts_acquiring_at_once_through_two_gateways_exactly_one_wins() {
    init_tracing();
    let dir = tmp_dir("resv-gw-race");
    let file = dir.join("disk");
    let g1 = gateway(&file, &dir.join("resv"), 0);
    let g2 = gateway(&file, &dir.join("resv"), 0);
    let (admin_a, mut a) = connect(&g1, HOSTNQN);
    let (admin_b, mut b) = connect(&g2, OTHER_HOSTNQN);
    register(&mut a, 1);
    register(&mut b, 2);
    const ROUNDS: usize = 25;
    let start = Arc::new(Barrier::new(2));
    let race = |mut h: Host, key: u64, start: Arc<Barrier>| {
        std::thread::spawn(move || {
            let mut won = Vec::new();
            for _ in 0..ROUNDS {
                start.wait();
                let c = resv(
                    &mut h,
                    op::ACQUIRE,
                    racqa::ACQUIRE,
                    EXCLUSIVE_ACCESS,
                    key,
                    0,
                );
                let ok = c.status.is_success();
                if !ok {
                    assert_status(&c, Status::RESERVATION_CONFLICT);
                }
                // Both answered: the winner checks its write goes through, then releases.
                start.wait();
                if ok {
                    assert_status(&h.rw(true, NSID, 0, 8), Status::SUCCESS);
                    assert_status(
                        &resv(
                            &mut h,
                            op::RELEASE,
                            rrela::RELEASE,
                            EXCLUSIVE_ACCESS,
                            key,
                            0,
                        ),
                        Status::SUCCESS,
                    );
                } else {
                    // The loser is refused even a read while the winner holds it.
                    assert_status(&h.rw(false, NSID, 0, 8), Status::RESERVATION_CONFLICT);
                }
                start.wait();
                won.push(ok);
            }
            (h, won)
        })
    };
    let ta = race(a, 1, Arc::clone(&start));
    let tb = race(b, 2, Arc::clone(&start));
    let (_a, won_a) = ta.join().expect("host A's thread");
    let (_b, won_b) = tb.join().expect("host B's thread");
    for (round, (wa, wb)) in won_a.iter().zip(&won_b).enumerate() {
        assert!(
            wa ^ wb,
            "round {round}: A won {wa}, B won {wb}: exactly one must"
        );
    }
    drop((_a, _b, admin_a, admin_b));
    stop([g1, g2]);
}

#[test]
fn preempt_and_abort_through_one_gateway_drains_the_other() {
    init_tracing();
    let dir = tmp_dir("resv-gw-abort");
    let file = dir.join("disk");
    // Gateway 2's backend takes 300 ms per operation: A's write there is still running when
    // B preempts and aborts through gateway 1.
    let g1 = gateway(&file, &dir.join("resv"), 0);
    let g2 = gateway(&file, &dir.join("resv"), 300_000);
    let (_admin_a, mut a) = connect(&g2, HOSTNQN);
    let (_admin_b, mut b) = connect(&g1, OTHER_HOSTNQN);
    register(&mut a, 1);
    take(&mut a, 1, WRITE_EXCLUSIVE);
    register(&mut b, 2);
    start_write(&g2, &mut a, NSID, 0x55);
    let io = || ns_counters(&g2, NSID);
    assert_eq!(
        io().written_bytes,
        0,
        "A's write is still on gateway 2's backend"
    );
    assert_status(
        &resv(
            &mut b,
            op::ACQUIRE,
            racqa::PREEMPT_AND_ABORT,
            WRITE_EXCLUSIVE,
            2,
            1,
        ),
        Status::SUCCESS,
    );
    assert_eq!(
        io().written_bytes,
        u64::from(8 * BLOCK),
        "preempt and abort completed while A's write on the other gateway was still running"
    );
    let done = a.wait_response().expect("A's write completes");
    assert_eq!(done.cid, 0x55);
    assert_status(&a.rw(true, NSID, 0, 8), Status::RESERVATION_CONFLICT);
    drop((a, b, _admin_a, _admin_b));
    stop([g1, g2]);
}

#[test]
fn without_ptpl_a_reservation_lasts_while_any_gateway_has_the_namespace_open() {
    init_tracing();
    let dir = tmp_dir("resv-gw-ptpl");
    let file = dir.join("disk");
    let g1 = gateway(&file, &dir.join("resv"), 0);
    let g2 = gateway(&file, &dir.join("resv"), 0);
    let (admin_a, mut a) = connect(&g1, HOSTNQN);
    register(&mut a, 1);
    take(&mut a, 1, EXCLUSIVE_ACCESS);
    drop((a, admin_a));
    stop([g1]);
    // Gateway 1 restarts while gateway 2 serves: the reservation is still there.
    let g1 = gateway(&file, &dir.join("resv"), 0);
    let (admin_b, mut b) = connect(&g1, OTHER_HOSTNQN);
    assert_status(&b.rw(false, NSID, 0, 8), Status::RESERVATION_CONFLICT);
    assert_eq!(report(&mut b), (1, EXCLUSIVE_ACCESS, 1));
    drop((b, admin_b));
    // Both stop (the namespace lost power): the next gateway starts without it.
    stop([g1, g2]);
    let g1 = gateway(&file, &dir.join("resv"), 0);
    let (admin_b, mut b) = connect(&g1, OTHER_HOSTNQN);
    assert_status(&b.rw(true, NSID, 0, 8), Status::SUCCESS);
    assert_eq!(report(&mut b).1, 0);
    drop((b, admin_b));
    stop([g1]);
}
