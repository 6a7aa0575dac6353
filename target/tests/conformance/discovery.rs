//! Rows of "Discovery controller".

use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::features::fid;
use rdmablk::nvme::identify::cns;
use rdmablk::nvme::opcodes::admin as op;
use rdmablk::nvme::{Sqe, Status};

use super::common::*;
use super::fixture::*;

const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
const LOG: u8 = 0x70;

/// A discovery controller's admin queue, enabled.
fn discovery(fx: &Fx) -> Host {
    let mut h = Host::connect(fx.addr, cm_request(0, 32)).expect("admin CM connect");
    ok(&h.fabrics_connect(0, DISCOVERY_NQN, HOSTNQN, CNTLID_DYNAMIC, 0));
    enable(&mut h);
    h
}

#[test]
fn conformance_discovery_opcodes() {
    let fx = target();
    let mut h = discovery(&fx);
    for o in [op::ABORT, op::FORMAT_NVM, 0x01, 0x05, 0xC0] {
        expect(
            &h.submit(Sqe::new(o, 0), &[]),
            Status::INVALID_OPCODE.with_dnr(),
        );
    }
    ok(&h.submit(rdmablk::nvme::admin::keep_alive_sqe(0), &[]));
}

#[test]
fn conformance_discovery_before_cc_en() {
    let fx = target();
    let mut h = Host::connect(fx.addr, cm_request(0, 32)).unwrap();
    ok(&h.fabrics_connect(0, DISCOVERY_NQN, HOSTNQN, CNTLID_DYNAMIC, 0));
    let (c, _) = get_log(&mut h, LOG, 0, 0, 1024);
    expect(&c, Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    enable(&mut h);
    ok(&get_log(&mut h, LOG, 0, 0, 1024).0);
}

#[test]
fn conformance_discovery_identify_cns() {
    let fx = target();
    let mut h = discovery(&fx);
    for c in [cns::NAMESPACE, cns::ACTIVE_NS_LIST, cns::NS_DESC_LIST, 0x06] {
        let (r, _) = identify(&mut h, c, 1);
        expect(&r, Status::INVALID_FIELD.with_dnr());
    }
    let (r, page) = identify(&mut h, cns::CONTROLLER, 0);
    ok(&r);
    assert_eq!(page[111], 2, "CNTRLTYPE: discovery");
}

#[test]
fn conformance_discovery_log_lid() {
    let fx = target();
    let mut h = discovery(&fx);
    for lid in [0x01u8, 0x02, 0x04, 0x05] {
        let (c, _) = get_log(&mut h, lid, 0, 0, 512);
        expect(&c, Status::INVALID_FIELD.with_dnr());
    }
    ok(&get_log(&mut h, LOG, 0, 0, 1024).0);
}

#[test]
fn conformance_discovery_log_offset() {
    let fx = target();
    let mut h = discovery(&fx);
    // One subsystem on one listener: the header and one entry, 2048 bytes.
    for offset in [2u64, 2052, 1 << 20] {
        let (c, _) = get_log(&mut h, LOG, 0, offset, 1024);
        expect(&c, Status::INVALID_FIELD.with_dnr());
    }
    let (c, page) = get_log(&mut h, LOG, 0, 1024, 1024);
    ok(&c);
    let trtype = match e2e_transport() {
        E2eTransport::Rdma => 1,
        E2eTransport::Tcp => 3,
        E2eTransport::Loop => 0xFE,
    };
    assert_eq!(
        page[0], trtype,
        "entry 0: TRTYPE of the listener (RDMA, TCP or loop)"
    );
    ok(&get_log(&mut h, LOG, 0, 2048, 4).0);
}

#[test]
fn conformance_discovery_features() {
    let fx = target();
    let mut h = discovery(&fx);
    for f in [
        fid::NUM_QUEUES,
        fid::VOLATILE_WRITE_CACHE,
        fid::ARBITRATION,
        fid::HOST_ID,
    ] {
        expect(
            &set_features(&mut h, f, 0),
            Status::INVALID_FIELD.with_dnr(),
        );
        expect(&get_features(&mut h, f), Status::INVALID_FIELD.with_dnr());
    }
    ok(&set_features(&mut h, fid::KEEP_ALIVE_TIMER, 10_000));
    ok(&set_features(&mut h, fid::ASYNC_EVENT_CONFIG, 1 << 31));
    assert_eq!(get_features(&mut h, fid::ASYNC_EVENT_CONFIG).dw0, 1 << 31);
}

#[test]
fn conformance_discovery_io_queue() {
    let fx = target();
    let mut admin = Host::connect(fx.addr, cm_request(0, 32)).unwrap();
    let c = admin.fabrics_connect(0, DISCOVERY_NQN, HOSTNQN, CNTLID_DYNAMIC, 0);
    ok(&c);
    let cntlid = c.dw0 as u16;
    let mut q = Host::connect(fx.addr, cm_request(1, 8)).unwrap();
    let c = q.fabrics_connect(1, DISCOVERY_NQN, HOSTNQN, cntlid, 0);
    expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(c.dw0, 42, "IATTR command, IPO qid");
}
