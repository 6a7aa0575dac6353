//! Rows of "Identify".

use rdmablk::nvme::identify::{cns, IDENTIFY_LEN};
use rdmablk::nvme::{IdentifyController, IdentifyNamespace, Status};

use super::common::*;
use super::fixture::*;

#[test]
fn conformance_identify_cns00_active_ns() {
    let (_fx, mut h, _) = ready();
    let (c, page) = identify(&mut h, cns::NAMESPACE, 1);
    ok(&c);
    let ns = IdentifyNamespace::decode(page.as_slice().try_into().unwrap());
    assert_eq!(ns.nsze, NS_BLOCKS);
    // The broadcast NSID names no one namespace.
    let (c, _) = identify(&mut h, cns::NAMESPACE, 0xFFFF_FFFF);
    expect(&c, Status::INVALID_NAMESPACE.with_dnr());
}

#[test]
fn conformance_identify_cns00_inactive_ns() {
    let (_fx, mut h, _) = ready();
    let (c, page) = identify(&mut h, cns::NAMESPACE, INACTIVE_NSID);
    ok(&c);
    assert!(
        page.iter().all(|&b| b == 0),
        "an inactive NSID reads zeroes"
    );
    let (c, page) = identify(&mut h, cns::NAMESPACE, 0xFFFF_FFFE);
    ok(&c);
    assert!(page.iter().all(|&b| b == 0));
}

#[test]
fn conformance_identify_cns00_nsid_zero() {
    let (_fx, mut h, _) = ready();
    let (c, _) = identify(&mut h, cns::NAMESPACE, 0);
    expect(&c, Status::INVALID_NAMESPACE.with_dnr());
    ok(&identify(&mut h, cns::NAMESPACE, 1).0);
}

#[test]
fn conformance_identify_cns01_controller() {
    let (_fx, mut h, cntlid) = ready();
    // CSI and NSID are not looked at for CNS 01h.
    let mut sqe = keyed(&h, identify_sqe(cns::CONTROLLER, 7), IDENTIFY_LEN as u32);
    sqe.cdw11 = 0x0100_0000;
    let c = h.submit(sqe, &[]);
    ok(&c);
    let page = h.read_data(0, IDENTIFY_LEN);
    let id = IdentifyController::decode(page.as_slice().try_into().unwrap()).unwrap();
    id.check_fabrics(cntlid, e2e_transport().sgl_need())
        .expect("what the Linux host checks");
}

#[test]
fn conformance_identify_cns02_active_ns_list() {
    let (_fx, mut h, _) = ready();
    for nsid in [0xFFFF_FFFEu32, 0xFFFF_FFFF] {
        let (c, _) = identify(&mut h, cns::ACTIVE_NS_LIST, nsid);
        expect(&c, Status::INVALID_NAMESPACE.with_dnr());
    }
    let (c, page) = identify(&mut h, cns::ACTIVE_NS_LIST, 0);
    ok(&c);
    assert_eq!(&page[..12], &[1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0]);
    let (c, page) = identify(&mut h, cns::ACTIVE_NS_LIST, 1);
    ok(&c);
    assert_eq!(&page[..8], &[2, 0, 0, 0, 0, 0, 0, 0], "NSIDs above 1");
}

#[test]
fn conformance_identify_cns03_ns_descriptors() {
    let (_fx, mut h, _) = ready();
    for nsid in [0u32, INACTIVE_NSID, 0xFFFF_FFFF] {
        let (c, _) = identify(&mut h, cns::NS_DESC_LIST, nsid);
        expect(&c, Status::INVALID_NAMESPACE.with_dnr());
    }
    let (c, page) = identify(&mut h, cns::NS_DESC_LIST, 1);
    ok(&c);
    // NIDT 3 (UUID, 16 bytes), then NIDT 4 (CSI, 1 byte).
    assert_eq!((page[0], page[1]), (3, 16));
    assert_eq!((page[20], page[21], page[24]), (4, 1, 0));
}

#[test]
fn conformance_identify_cns05_csi_ns() {
    let (_fx, mut h, _) = ready();
    let (c, _) = identify(&mut h, 0x05, 1);
    expect(&c, Status::INVALID_FIELD.with_dnr());
    ok(&identify(&mut h, cns::NAMESPACE, 1).0);
}

#[test]
fn conformance_identify_cns06_csi_ctrl() {
    let (_fx, mut h, _) = ready();
    let (c, _) = identify(&mut h, 0x06, 0);
    expect(&c, Status::INVALID_FIELD.with_dnr());
    ok(&identify(&mut h, cns::CONTROLLER, 0).0);
}

#[test]
fn conformance_identify_cns_other() {
    let (_fx, mut h, _) = ready();
    for cns in [0x04u8, 0x07, 0x08, 0x10, 0x12, 0x13, 0x1C, 0xFF] {
        let (c, _) = identify(&mut h, cns, 0);
        expect(&c, Status::INVALID_FIELD.with_dnr());
    }
    ok(&identify(&mut h, cns::CONTROLLER, 0).0);
}

#[test]
fn conformance_identify_cntid_ignored() {
    let (_fx, mut h, _) = ready();
    let mut sqe = keyed(&h, identify_sqe(cns::CONTROLLER, 0), IDENTIFY_LEN as u32);
    sqe.cdw10 |= 0x1234 << 16;
    ok(&h.submit(sqe, &[]));
}

#[test]
fn conformance_identify_data_length() {
    let (_fx, mut h, _) = ready();
    for len in [0u32, 4092, 4095, 4097, 8192] {
        let sqe = keyed(&h, identify_sqe(cns::CONTROLLER, 0), len);
        expect(
            &h.submit(sqe, &[]),
            Status::SGL_INVALID_DATA_LENGTH.with_dnr(),
        );
    }
    ok(&identify(&mut h, cns::CONTROLLER, 0).0);
}
