use super::*;
use crate::nvme::{Status, WireError};

/// The Linux host's admin queue request: qid 0, hrqsize 32, hsqsize 31, rest zero.
const LINUX_ADMIN_REQ: [u8; 32] = {
    let mut b = [0u8; 32];
    b[4] = 32;
    b[6] = 31;
    b
};

#[test]
fn decodes_linux_request_without_extension() {
    let r = CmRequest::decode(&LINUX_ADMIN_REQ).unwrap();
    assert_eq!(
        r,
        CmRequest {
            qid: 0,
            hrqsize: 32,
            hsqsize: 31,
            cntlid: 0,
            push: None
        }
    );
    assert_eq!(r.encode(), LINUX_ADMIN_REQ);
    assert!(r.check_queue_sizes(32).is_ok());
    assert_eq!(r.check_queue_sizes(16), Err(CmRejectStatus::InvalidHsqsize));
    // IB CM pads private data: longer is fine.
    let mut padded = [0u8; 56];
    padded[..32].copy_from_slice(&LINUX_ADMIN_REQ);
    assert_eq!(CmRequest::decode(&padded).unwrap(), r);
}

#[test]
fn request_errors() {
    assert_eq!(
        CmRequest::decode(&[0u8; 31]),
        Err(CmRejectStatus::InvalidLength)
    );
    let mut b = LINUX_ADMIN_REQ;
    b[0] = 1;
    assert_eq!(
        CmRequest::decode(&b),
        Err(CmRejectStatus::InvalidRecordFormat)
    );
    let r = CmRequest {
        qid: 1,
        hrqsize: 0,
        hsqsize: 7,
        cntlid: 0,
        push: None,
    };
    assert_eq!(
        r.check_queue_sizes(128),
        Err(CmRejectStatus::InvalidHrqsize)
    );
}

#[test]
fn push_request_layout_and_roundtrip() {
    let p = PushRequest {
        slots: 64,
        slot_bytes: 8192,
    };
    let r = CmRequest {
        qid: 2,
        hrqsize: 128,
        hsqsize: 127,
        cntlid: 0,
        push: Some(p),
    };
    let b = r.encode();
    assert_eq!(
        &b[8..20],
        &[0u8; 12],
        "cntlid and the bytes after it stay zero"
    );
    assert_eq!(&b[20..24], b"RDBK");
    assert_eq!((b[24], b[25]), (1, 1));
    assert_eq!(&b[26..28], &64u16.to_le_bytes());
    assert_eq!(&b[28..32], &8192u32.to_le_bytes());
    assert_eq!(CmRequest::decode(&b).unwrap(), r);
}

#[test]
fn push_request_needs_magic_version_and_flag() {
    let r = CmRequest {
        qid: 1,
        hrqsize: 4,
        hsqsize: 3,
        cntlid: 0,
        push: Some(PushRequest {
            slots: 0,
            slot_bytes: 0,
        }),
    };
    for (i, v) in [(20usize, b'X'), (24, 2), (24, 0), (25, 0)] {
        let mut b = r.encode();
        b[i] = v;
        let d = CmRequest::decode(&b).unwrap();
        assert_eq!(d.push, None, "byte {i} = {v}");
        assert_eq!(
            (d.qid, d.hrqsize, d.hsqsize),
            (1, 4, 3),
            "standard fields intact"
        );
    }
    // Junk in reserved bytes without the magic is ignored, not rejected.
    let mut b = LINUX_ADMIN_REQ;
    b[10..32].fill(0xA5);
    assert_eq!(CmRequest::decode(&b).unwrap().push, None);
}

#[test]
fn accept_standard_declined_granted() {
    // nvmet: crqsize = hsqsize + 1, reserved zero.
    let std_acc = CmAccept {
        crqsize: 32,
        push: PushAnswer::Absent,
    };
    let b = std_acc.encode();
    assert_eq!(b[..4], [0, 0, 32, 0]);
    assert_eq!(&b[4..], &[0u8; 28]);
    assert_eq!(CmAccept::decode(&b).unwrap(), std_acc);

    let dec = CmAccept {
        crqsize: 128,
        push: PushAnswer::Declined,
    };
    let b = dec.encode();
    assert_eq!(&b[4..8], b"RDBK");
    assert_eq!(&b[9..], &[0u8; 23]);
    assert_eq!(CmAccept::decode(&b).unwrap(), dec);

    let w = PushWindow::new(0x7F00_0000_1000, 0xABCD, 64, 8192).unwrap();
    assert_eq!(w.len, 512 * 1024);
    assert_eq!(w.slot_addr(1), Some(0x7F00_0000_3000));
    assert_eq!(w.slot_addr(64), None);
    let acc = CmAccept {
        crqsize: 128,
        push: PushAnswer::Granted(w),
    };
    let b = acc.encode();
    assert_eq!((b[8], b[9]), (1, 1));
    assert_eq!(&b[16..24], &0x7F00_0000_1000u64.to_le_bytes());
    assert_eq!(&b[24..28], &(512u32 * 1024).to_le_bytes());
    assert_eq!(&b[28..32], &0xABCDu32.to_le_bytes());
    assert_eq!(CmAccept::decode(&b).unwrap(), acc);

    let mut bad = b;
    bad[24] ^= 1;
    assert!(
        CmAccept::decode(&bad).is_err(),
        "length must be slots * slot_bytes"
    );
    let mut zero_slots = b;
    zero_slots[10..12].fill(0);
    assert!(CmAccept::decode(&zero_slots).is_err());
    assert!(PushWindow::new(0, 0, u16::MAX, u32::MAX).is_none());
    assert!(CmAccept::decode(&b[..31]).is_err());
    let mut f = b;
    f[0] = 1;
    assert!(matches!(
        CmAccept::decode(&f),
        Err(WireError::RecordFormat { found: 1, .. })
    ));
}

#[test]
fn reject_roundtrip() {
    for v in 1..=9u16 {
        let r = CmReject {
            status: CmRejectStatus::from_u16(v),
        };
        let b = r.encode();
        assert_eq!(b, [0, 0, v as u8, 0]);
        assert_eq!(CmReject::decode(&b).unwrap(), r);
        assert_eq!(r.status.to_u16(), v);
    }
    assert_eq!(
        CmRejectStatus::InvalidHsqsize.to_string(),
        "invalid host SQ size"
    );
    assert!(CmReject::decode(&[0, 0, 1]).is_err());
}

#[test]
fn pushed_descriptor_layout_and_checks() {
    let p = PushedSgl {
        slot: 0x0102,
        len: 4096,
    };
    let b = p.encode();
    assert_eq!(b, [2, 1, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0xF0]);
    assert_eq!(PushedSgl::decode(&b), Some(p));
    assert_eq!(
        crate::nvme::Sgl::decode(&b),
        Err(Status::SGL_INVALID_TYPE.with_dnr())
    );
    let other = crate::nvme::Sgl::InCapsule(crate::nvme::InCapsuleSgl { offset: 0, len: 8 });
    assert_eq!(PushedSgl::decode(&other.encode()), None);
    let w = |slots, slot_bytes| PushWindow {
        slots,
        slot_bytes,
        addr: 0,
        len: u32::from(slots) * slot_bytes,
        rkey: 1,
    };
    assert!(p.check(&w(0x0103, 4096), 0x0102).is_ok());
    let offset = Err(Status::SGL_INVALID_OFFSET.with_dnr());
    assert_eq!(p.check(&w(0x0102, 4096), 0x0102), offset);
    assert_eq!(p.check(&w(0x0103, 4096), 0x0101), offset);
    let mut high = b;
    high[7] = 1; // bytes 2..8 are part of the slot index
    assert_eq!(
        PushedSgl::decode(&high)
            .unwrap()
            .check(&w(0x0103, 4096), 0x0102),
        offset
    );
    assert_eq!(
        p.check(&w(0x0103, 4095), 0x0102),
        Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr())
    );
}
