//! Rows of "Keep Alive, AER, Abort" and of "Shutdown / teardown".

use rdmablk::nvme::admin::{async_event_request_sqe, keep_alive_sqe, ABORT_NOT_ABORTED};
use rdmablk::nvme::opcodes::admin as op;
use rdmablk::nvme::properties::{self, Cc, PropertySize};
use rdmablk::nvme::{Sqe, Status};

use super::fixture::*;

#[test]
fn conformance_keep_alive() {
    let fx = target();
    let mut h = connected_not_enabled(fx.addr);
    expect(
        &h.submit(keep_alive_sqe(0), &[]),
        Status::COMMAND_SEQUENCE_ERROR.with_dnr(),
    );
    enable(&mut h);
    ok(&h.submit(keep_alive_sqe(0), &[]));
    // With KATO 0 too (nvmet answers Keep Alive Timeout Invalid there; SPDK succeeds).
    ok(&set_features(
        &mut h,
        rdmablk::nvme::features::fid::KEEP_ALIVE_TIMER,
        0,
    ));
    ok(&h.submit(keep_alive_sqe(0), &[]));
}

#[test]
fn conformance_aer_limit() {
    let (_fx, mut h, _) = ready();
    // AERL 3: four held at once.
    for cid in 0..4u16 {
        let mut sqe = async_event_request_sqe(0);
        sqe.cid = 1000 + cid;
        h.send_capsule(&sqe.to_bytes());
    }
    let mut fifth = async_event_request_sqe(0);
    fifth.cid = 1004;
    h.send_capsule(&fifth.to_bytes());
    let c = h.wait_response().expect("the fifth is answered");
    assert_eq!(c.cid, 1004);
    expect(&c, Status::ASYNC_EVENT_LIMIT_EXCEEDED.with_dnr());
    ok(&h.submit(keep_alive_sqe(0), &[]));
}

#[test]
fn conformance_abort() {
    let (_fx, mut h, _) = ready();
    let mut sqe = Sqe::new(op::ABORT, 0);
    sqe.cdw10 = 0x0005_0001; // CID 5 on SQ 1: nothing is ever aborted.
    let c = h.submit(sqe, &[]);
    ok(&c);
    assert_eq!(c.dw0, ABORT_NOT_ABORTED);
}

#[test]
fn conformance_shutdown_io_after_cc_disable_or_shutdown() {
    let (fx, mut admin, mut q) = with_io();
    ok(&q.rw(false, 1, 0, 1));
    // CC.SHN: shutdown complete, no longer ready, I/O refused.
    let shn = Cc(CC_ENABLE as u32).with_shn(properties::shn::NORMAL);
    ok(&admin.property_set(properties::CC, u64::from(shn.0)));
    let c = admin.property_get(properties::CSTS, PropertySize::Four);
    assert_eq!(c.dw0 & 0xD, 0x8, "CSTS: SHST complete, RDY 0");
    expect(
        &q.rw(false, 1, 0, 1),
        Status::COMMAND_SEQUENCE_ERROR.with_dnr(),
    );
    // Reset (EN 1 -> 0 -> 1): ready again.
    ok(&admin.property_set(properties::CC, 0));
    expect(
        &q.rw(false, 1, 0, 1),
        Status::COMMAND_SEQUENCE_ERROR.with_dnr(),
    );
    let (c, _) = identify(&mut admin, 1, 0);
    expect(&c, Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    enable(&mut admin);
    ok(&q.rw(false, 1, 0, 1));
    drop((q, admin));
    drop(fx);
}
