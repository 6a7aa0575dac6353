//! Rows of "Property Get / Set".

use rdmablk::nvme::properties::{self, PropertySize};
use rdmablk::nvme::{Cap, PropertyGet, PropertySet, Status};

use super::common::*;
use super::fixture::*;

fn get(h: &mut Host, attrib: u32, offset: u32) -> rdmablk::nvme::Cqe {
    let mut sqe = PropertyGet {
        size: PropertySize::Four,
        offset,
    }
    .to_sqe(0);
    sqe.cdw10 = attrib;
    h.submit(sqe, &[])
}

fn set(h: &mut Host, attrib: u32, offset: u32, value: u64) -> rdmablk::nvme::Cqe {
    let mut sqe = PropertySet {
        size: PropertySize::Eight,
        offset,
        value,
    }
    .to_sqe(0);
    sqe.cdw10 = attrib;
    h.submit(sqe, &[])
}

#[test]
fn conformance_property_attrib_size_reserved() {
    let (_fx, mut h, _) = ready();
    for attrib in 2..=7u32 {
        expect(
            &get(&mut h, attrib, properties::VS),
            Status::INVALID_FIELD.with_dnr(),
        );
        expect(
            &set(&mut h, attrib, properties::CC, CC_ENABLE),
            Status::INVALID_FIELD.with_dnr(),
        );
    }
    ok(&get(&mut h, 0, properties::VS));
    ok(&get(&mut h, 1, properties::CAP));
}

#[test]
fn conformance_property_get_size() {
    let (_fx, mut h, _) = ready();
    for offset in [properties::VS, properties::CC, properties::CSTS] {
        expect(&get(&mut h, 1, offset), Status::INVALID_FIELD.with_dnr());
        ok(&get(&mut h, 0, offset));
    }
    // CAP is read whole (8 bytes); neither half on its own.
    for offset in [properties::CAP, properties::CAP + 4] {
        expect(&get(&mut h, 0, offset), Status::INVALID_FIELD.with_dnr());
    }
    let c = get(&mut h, 1, properties::CAP);
    ok(&c);
    assert_ne!(c.result64() >> 32, 0, "CAP's upper half in dw1");
}

#[test]
fn conformance_property_get_offset() {
    let (_fx, mut h, _) = ready();
    // INTMS/INTMC, NSSR, AQA, CMBLOC and a property beyond the register file.
    for offset in [0x0Cu32, 0x10, 0x20, 0x24, 0x38, 0x1000] {
        expect(&get(&mut h, 0, offset), Status::INVALID_FIELD.with_dnr());
    }
    // ASQ, ACQ (8 bytes): not offered on fabrics.
    for offset in [0x28u32, 0x30] {
        expect(&get(&mut h, 1, offset), Status::INVALID_FIELD.with_dnr());
    }
    let c = get(&mut h, 0, properties::CSTS);
    ok(&c);
    assert_eq!(c.dw0 & 1, 1, "CSTS.RDY");
}

#[test]
fn conformance_property_set() {
    let (_fx, mut h, _) = ready();
    // Read-only and unknown properties.
    for offset in [
        properties::CAP,
        properties::VS,
        properties::CSTS,
        0x20,
        0x24,
    ] {
        expect(&set(&mut h, 0, offset, 0), Status::INVALID_FIELD.with_dnr());
    }
    // CC has 4 bytes.
    expect(
        &set(&mut h, 1, properties::CC, CC_ENABLE),
        Status::INVALID_FIELD.with_dnr(),
    );
    ok(&set(&mut h, 0, properties::CC, CC_ENABLE));
    let c = get(&mut h, 0, properties::CC);
    assert_eq!(u64::from(c.dw0), CC_ENABLE);
}

#[test]
fn conformance_property_cap_contents() {
    let (_fx, mut h, _) = ready();
    let c = get(&mut h, 1, properties::CAP);
    ok(&c);
    let cap = Cap(c.result64());
    assert_eq!(cap.mqes(), (DEPTH - 1) as u16, "MQES: queue depth - 1");
    assert!(cap.cqr(), "CQR: contiguous queues required");
    assert_eq!(cap.timeout_500ms(), 15, "TO: 7.5 s");
    assert_eq!(cap.css(), Cap::CSS_NVM, "CSS: NVM only (no bit 43)");
    assert_eq!((cap.mpsmin(), cap.mpsmax()), (0, 0), "4 KiB pages only");
}

#[test]
fn conformance_property_on_io_queue() {
    let (_fx, _admin, mut q) = with_io();
    expect(
        &get(&mut q, 1, properties::CAP),
        Status::INVALID_OPCODE.with_dnr(),
    );
    expect(
        &set(&mut q, 0, properties::CC, CC_ENABLE),
        Status::INVALID_OPCODE.with_dnr(),
    );
    ok(&q.rw(false, 1, 0, 1));
}
