//! Rows of "Fabrics Connect".

use rdmablk::nvme::fabrics::{CATTR_DISABLE_SQ_FLOW, CNTLID_DYNAMIC, CONNECT_DATA_LEN};
use rdmablk::nvme::features::fid;
use rdmablk::nvme::{Connect, Status};

use super::common::*;
use super::fixture::*;

const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

fn admin_host(fx: &Fx) -> Host {
    Host::connect(fx.addr, cm_request(0, 32)).expect("admin CM connect")
}

#[test]
fn conformance_connect_recfmt_nonzero() {
    let fx = target();
    let mut h = admin_host(&fx);
    let data = connect_data(SUBNQN, CNTLID_DYNAMIC);
    let mut sqe = connect_cmd(0, 31).to_sqe(0, &h.keyed(0, CONNECT_DATA_LEN as u32));
    h.write_data(0, &data);
    sqe.cdw10 |= 1;
    expect(
        &h.submit(sqe, &[]),
        Status::CONNECT_INCOMPATIBLE_FORMAT.with_dnr(),
    );
    ok(&connect_raw(&mut h, connect_cmd(0, 31), &data, 1024));
}

#[test]
fn conformance_connect_qid() {
    let fx = target();
    let data = connect_data(SUBNQN, CNTLID_DYNAMIC);
    // The Connect's QID must be the queue's: the CM private data's (RDMA), the channel's
    // (loop). An NVMe/TCP connection becomes the queue its first Connect names (here I/O
    // queue 1, refused for its dynamic cntlid): a later Connect naming another QID on it is
    // the mismatch.
    let mut h = admin_host(&fx);
    if e2e_tcp() {
        let c = connect_raw(&mut h, connect_cmd(1, 31), &data, 1024);
        expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
        assert_eq!(c.dw0, 0x0001_0010, "IATTR data, IPO cntlid");
    }
    let c = connect_raw(
        &mut h,
        connect_cmd(if e2e_tcp() { 0 } else { 1 }, 31),
        &data,
        1024,
    );
    expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(c.dw0, 42, "IATTR command, IPO qid");
    if e2e_tcp() {
        h = admin_host(&fx);
    }
    let c = connect_raw(&mut h, connect_cmd(0, 31), &data, 1024);
    ok(&c);
    let cntlid = c.dw0 as u16;
    enable(&mut h);
    // One I/O queue granted: QID 2 is beyond it.
    ok(&set_features(&mut h, fid::NUM_QUEUES, 0));
    let io = connect_data(SUBNQN, cntlid);
    let mut q2 = Host::connect(fx.addr, cm_request(2, DEPTH as u16)).unwrap();
    let c = connect_raw(&mut q2, connect_cmd(2, DEPTH as u16 - 1), &io, 1024);
    expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(c.dw0, 42);
    let mut q1 = Host::connect(fx.addr, cm_request(1, DEPTH as u16)).unwrap();
    ok(&connect_raw(
        &mut q1,
        connect_cmd(1, DEPTH as u16 - 1),
        &io,
        1024,
    ));
    // QID 1 again, on another queue: already connected.
    let mut again = Host::connect(fx.addr, cm_request(1, DEPTH as u16)).unwrap();
    let c = connect_raw(&mut again, connect_cmd(1, DEPTH as u16 - 1), &io, 1024);
    expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(c.dw0, 42);
}

#[test]
fn conformance_connect_sqsize() {
    let fx = target();
    let data = connect_data(SUBNQN, CNTLID_DYNAMIC);
    let mut h = admin_host(&fx);
    // 0 (a one-entry queue) and more entries than the queue negotiated (32).
    for sqsize in [0u16, 32, 0xFFFF] {
        let c = connect_raw(&mut h, connect_cmd(0, sqsize), &data, 1024);
        expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
        assert_eq!(c.dw0, 44, "IATTR command, IPO sqsize");
    }
    ok(&connect_raw(&mut h, connect_cmd(0, 31), &data, 1024));
}

#[test]
fn conformance_connect_cattr_sq_flow_disabled() {
    let fx = target();
    let data = connect_data(SUBNQN, CNTLID_DYNAMIC);
    let mut h = admin_host(&fx);
    let c = Connect {
        cattr: CATTR_DISABLE_SQ_FLOW,
        ..connect_cmd(0, 31)
    };
    let r = connect_raw(&mut h, c, &data, 1024);
    ok(&r);
    assert_eq!(
        r.sq_head, 0xFFFF,
        "SQHD reserved from the Connect response on"
    );
    enable(&mut h);
    let (c, _) = identify(&mut h, 1, 0);
    ok(&c);
    assert_eq!(c.sq_head, 0xFFFF);
    // Without the bit SQHD advances.
    let mut g = admin_host(&fx);
    let r = connect_raw(&mut g, connect_cmd(0, 31), &data, 1024);
    ok(&r);
    assert_eq!(r.sq_head, 1);
    enable(&mut g);
    assert_eq!(identify(&mut g, 1, 0).0.sq_head, 3);
}

#[test]
fn conformance_connect_cattr_reserved_ignored() {
    let fx = target();
    let data = connect_data(SUBNQN, CNTLID_DYNAMIC);
    let mut h = admin_host(&fx);
    let c = Connect {
        cattr: !CATTR_DISABLE_SQ_FLOW,
        ..connect_cmd(0, 31)
    };
    let r = connect_raw(&mut h, c, &data, 1024);
    ok(&r);
    assert_eq!(r.sq_head, 1, "only bit 2 disables SQ flow control");
}

fn kato_of(h: &mut Host) -> u32 {
    let c = get_features(h, fid::KEEP_ALIVE_TIMER);
    ok(&c);
    c.dw0
}

#[test]
fn conformance_connect_kato() {
    // KATO 0 on an NVM controller: no keep-alive (nvmet, SPDK), unless the operator set
    // `target.default_keep_alive_timeout_ms`.
    let fx = target();
    let (mut h, _) = admin_queue(fx.addr, 0);
    assert_eq!(kato_of(&mut h), 0);
    let (mut h, _) = admin_queue(fx.addr, 5000);
    assert_eq!(kato_of(&mut h), 5000);
    let fx = target_with("default_keep_alive_timeout_ms = 7000");
    let (mut h, _) = admin_queue(fx.addr, 0);
    assert_eq!(kato_of(&mut h), 7000);
    // A discovery controller with KATO 0 gets 120 s (nvmet NVMET_DISC_KATO_MS).
    let mut d = admin_host(&fx);
    ok(&connect_raw(
        &mut d,
        connect_cmd(0, 31),
        &connect_data(DISCOVERY_NQN, CNTLID_DYNAMIC),
        1024,
    ));
    enable(&mut d);
    assert_eq!(kato_of(&mut d), 120_000);
}

#[test]
fn conformance_connect_data_cntlid() {
    let fx = target();
    let mut h = admin_host(&fx);
    // Admin queue: must ask for a dynamic controller.
    let c = connect_raw(&mut h, connect_cmd(0, 31), &connect_data(SUBNQN, 1), 1024);
    expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(c.dw0, 0x0001_0010, "IATTR data, IPO cntlid");
    let r = connect_raw(
        &mut h,
        connect_cmd(0, 31),
        &connect_data(SUBNQN, CNTLID_DYNAMIC),
        1024,
    );
    ok(&r);
    let cntlid = r.dw0 as u16;
    enable(&mut h);
    // I/O queue: an existing controller of this host (NQN and host ID).
    let mut q = Host::connect(fx.addr, cm_request(1, DEPTH as u16)).unwrap();
    for bad in [cntlid.wrapping_add(1), CNTLID_DYNAMIC] {
        let c = connect_raw(
            &mut q,
            connect_cmd(1, DEPTH as u16 - 1),
            &connect_data(SUBNQN, bad),
            1024,
        );
        expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
        assert_eq!(c.dw0, 0x0001_0010);
    }
    let mut other_id = connect_data(SUBNQN, cntlid);
    other_id[0] ^= 0xFF;
    let c = connect_raw(&mut q, connect_cmd(1, DEPTH as u16 - 1), &other_id, 1024);
    expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    ok(&connect_raw(
        &mut q,
        connect_cmd(1, DEPTH as u16 - 1),
        &connect_data(SUBNQN, cntlid),
        1024,
    ));
}

#[test]
fn conformance_connect_subnqn() {
    let fx = target();
    let mut h = admin_host(&fx);
    let c = h.fabrics_connect(0, "nqn.2026-11.io.rdmablk:nope", HOSTNQN, CNTLID_DYNAMIC, 0);
    expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
    assert_eq!(c.dw0, 0x0001_0100, "IATTR data, IPO subnqn");
    ok(&h.fabrics_connect(0, DISCOVERY_NQN, HOSTNQN, CNTLID_DYNAMIC, 0));
    let mut h = admin_host(&fx);
    ok(&h.fabrics_connect(0, SUBNQN, HOSTNQN, CNTLID_DYNAMIC, 0));
}

#[test]
fn conformance_connect_hostnqn_not_allowed() {
    let fx = target();
    let mut h = admin_host(&fx);
    let c = h.fabrics_connect(0, SUBNQN, OTHER_HOSTNQN, CNTLID_DYNAMIC, 0);
    expect(&c, Status::CONNECT_INVALID_HOST.with_dnr());
    assert_eq!(c.dw0, 0x0001_0200, "IATTR data, IPO hostnqn");
    // The discovery subsystem admits every host.
    ok(&h.fabrics_connect(0, DISCOVERY_NQN, OTHER_HOSTNQN, CNTLID_DYNAMIC, 0));
}

#[test]
fn conformance_connect_nqn_termination() {
    let fx = target();
    let mut h = admin_host(&fx);
    let good = connect_data(SUBNQN, CNTLID_DYNAMIC);
    // No NUL in the 256-byte field; a NUL only after 223 bytes; not UTF-8; empty.
    for (field, fill) in [(256usize, 256usize), (512, 256)] {
        let mut d = good;
        d[field..field + fill].fill(b'x');
        let c = connect_raw(&mut h, connect_cmd(0, 31), &d, 1024);
        expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
        assert_eq!(c.dw0, 0x0001_0000 | field as u32);
        let mut d = good;
        d[field..field + 224].fill(b'x');
        d[field + 224..field + 256].fill(0);
        let c = connect_raw(&mut h, connect_cmd(0, 31), &d, 1024);
        expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
        let mut d = good;
        d[field + 4] = 0xFF;
        let c = connect_raw(&mut h, connect_cmd(0, 31), &d, 1024);
        expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
        // Empty: a subsystem NQN must name one; an empty host NQN is a host like any other
        // (spdk_nvme_perf sends one), refused here by the subsystem's allow-list.
        let mut d = good;
        d[field..field + 256].fill(0);
        let c = connect_raw(&mut h, connect_cmd(0, 31), &d, 1024);
        if field == 256 {
            expect(&c, Status::CONNECT_INVALID_PARAMETERS.with_dnr());
        } else {
            expect(&c, Status::CONNECT_INVALID_HOST.with_dnr());
            assert_eq!(c.dw0, 0x0001_0200, "IATTR 1, IPO 512: the HOSTNQN field");
        }
    }
    ok(&connect_raw(&mut h, connect_cmd(0, 31), &good, 1024));
}

#[test]
fn conformance_connect_data_length() {
    let fx = target();
    let data = connect_data(SUBNQN, CNTLID_DYNAMIC);
    let mut h = admin_host(&fx);
    for len in [0u32, 512, 1023, 1025, 4096] {
        let c = connect_raw(&mut h, connect_cmd(0, 31), &data, len);
        expect(&c, Status::SGL_INVALID_DATA_LENGTH.with_dnr());
    }
    ok(&connect_raw(&mut h, connect_cmd(0, 31), &data, 1024));
}

#[test]
fn conformance_connect_on_connected_queue() {
    let fx = target();
    let (mut h, cntlid) = admin_queue(fx.addr, 0);
    let c = h.fabrics_connect(0, SUBNQN, HOSTNQN, CNTLID_DYNAMIC, 0);
    expect(&c, Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    let mut q = io_queue(fx.addr, 1, cntlid);
    let c = q.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
    expect(&c, Status::COMMAND_SEQUENCE_ERROR.with_dnr());
    ok(&q.rw(false, 1, 0, 1));
}

#[test]
fn conformance_connect_result_cntlid() {
    let fx = target();
    let mut h = admin_host(&fx);
    let c = h.fabrics_connect(0, SUBNQN, HOSTNQN, CNTLID_DYNAMIC, 0);
    ok(&c);
    let cntlid = c.dw0 as u16;
    assert!(
        (1..=0xFFEF).contains(&cntlid),
        "a dynamic cntlid: {cntlid:#x}"
    );
    assert_eq!(c.dw0 >> 16, 0, "no authentication required");
    enable(&mut h);
    let (c, page) = identify(&mut h, 1, 0);
    ok(&c);
    assert_eq!(
        u16::from_le_bytes([page[78], page[79]]),
        cntlid,
        "Identify CNTLID"
    );
    let mut q = Host::connect(fx.addr, cm_request(1, DEPTH as u16)).unwrap();
    let c = q.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
    ok(&c);
    assert_eq!(c.dw0 as u16, cntlid);
}
