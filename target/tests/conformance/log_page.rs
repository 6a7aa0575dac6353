//! Rows of "Get Log Page".

use rdmablk::nvme::{GetLogPage, Status};

use super::common::*;
use super::fixture::*;

const ALL: u32 = 0xFFFF_FFFF;

#[test]
fn conformance_log_lid_unsupported() {
    let (_fx, mut h, _) = ready();
    // Device self-test, telemetry, supported log pages, discovery (on an NVM controller),
    // vendor specific.
    for lid in [0x00u8, 0x06, 0x07, 0x70, 0xC0] {
        let (c, _) = get_log(&mut h, lid, ALL, 0, 512);
        expect(&c, Status::INVALID_LOG_PAGE.with_dnr());
    }
    ok(&get_log(&mut h, 0x02, ALL, 0, 512).0);
}

#[test]
fn conformance_log_lids_supported() {
    let (_fx, mut h, _) = ready();
    for (lid, len) in [
        (0x01u8, 64u32),
        (0x02, 512),
        (0x03, 512),
        (0x04, 4096),
        (0x05, 4096),
        (0x0C, 4096),
        (0x80, 64),
    ] {
        let (c, _) = get_log(&mut h, lid, ALL, 0, len);
        ok(&c);
    }
    let (c, page) = get_log(&mut h, 0x05, ALL, 0, 4096);
    ok(&c);
    assert_eq!(
        page[0x06 * 4] & 1,
        1,
        "Identify is supported (admin effects)"
    );
    assert_eq!(
        page[1024 + 0x02 * 4] & 1,
        1,
        "Read is supported (I/O effects)"
    );
}

#[test]
fn conformance_log_numd() {
    let (_fx, mut h, _) = ready();
    // NUMD and the SGL disagree.
    let sqe = GetLogPage::new(0x02, ALL, 0, 512).to_sqe(0);
    expect(
        &h.submit(keyed(&h, sqe, 1024), &[]),
        Status::SGL_INVALID_DATA_LENGTH.with_dnr(),
    );
    // More than the largest transfer.
    let sqe = GetLogPage::new(0x02, ALL, 0, u64::from(MAX_IO) * 2).to_sqe(0);
    expect(
        &h.submit(keyed(&h, sqe, MAX_IO), &[]),
        Status::INVALID_FIELD.with_dnr(),
    );
    // Shorter than the page: a prefix. Longer: zero-filled.
    h.write_data(0, &[0xEE; 4096]);
    let (c, page) = get_log(&mut h, 0x02, ALL, 0, 8);
    ok(&c);
    assert_eq!(&page[1..3], &300u16.to_le_bytes(), "SMART temperature");
    h.write_data(0, &[0xEE; 4096]);
    let (c, page) = get_log(&mut h, 0x02, ALL, 0, 1024);
    ok(&c);
    assert!(
        page[512..].iter().all(|&b| b == 0),
        "beyond the page: zeroes"
    );
}

#[test]
fn conformance_log_offset() {
    let (_fx, mut h, _) = ready();
    for offset in [1u64, 2, 3, 0x1_0000_0001] {
        let (c, _) = get_log(&mut h, 0x02, ALL, offset, 4);
        expect(&c, Status::INVALID_FIELD.with_dnr());
    }
    // Past the page (512 bytes of SMART).
    for offset in [516u64, 4096, 1 << 40] {
        let (c, _) = get_log(&mut h, 0x02, ALL, offset, 4);
        expect(&c, Status::INVALID_FIELD.with_dnr());
    }
    let (c, page) = get_log(&mut h, 0x02, ALL, 0, 8);
    ok(&c);
    let (c, shifted) = get_log(&mut h, 0x02, ALL, 4, 4);
    ok(&c);
    assert_eq!(&shifted[..], &page[4..8], "the window at LPO");
    // At the very end: an empty window, zero-filled.
    ok(&get_log(&mut h, 0x02, ALL, 512, 4).0);
}

#[test]
fn conformance_log_rae() {
    let (_fx, mut h, _) = ready();
    for rae in [false, true] {
        let mut sqe = GetLogPage::new(0x04, ALL, 0, 4096).to_sqe(0);
        sqe.cdw10 |= u32::from(rae) << 15;
        let c = h.submit(keyed(&h, sqe, 4096), &[]);
        ok(&c);
        assert!(
            h.read_data(0, 4096).iter().all(|&b| b == 0),
            "nothing changed"
        );
    }
}

#[test]
fn conformance_log_lsp_ignored() {
    let (_fx, mut h, _) = ready();
    let mut sqe = GetLogPage::new(0x02, ALL, 0, 512).to_sqe(0);
    sqe.cdw10 |= 0x7F << 8;
    ok(&h.submit(keyed(&h, sqe, 512), &[]));
}

#[test]
fn conformance_log_nsid() {
    let (_fx, mut h, _) = ready();
    for nsid in [0u32, 1, INACTIVE_NSID, 0xFFFF_FFFE, ALL] {
        // SMART: controller-wide (0, all) or an active namespace's, as nvmet.
        let smart = get_log(&mut h, 0x02, nsid, 0, 512).0;
        if matches!(nsid, 0 | 1 | ALL) {
            ok(&smart);
        } else {
            expect(&smart, Status::INVALID_NAMESPACE.with_dnr());
        }
        // Error information ignores it.
        ok(&get_log(&mut h, 0x01, nsid, 0, 64).0);
    }
}

#[test]
fn conformance_log_csi_lsi_ignored() {
    let (_fx, mut h, _) = ready();
    let mut sqe = GetLogPage::new(0x02, ALL, 0, 512).to_sqe(0);
    sqe.cdw11 |= 0xABCD << 16;
    sqe.cdw14 |= 0x02 << 24;
    ok(&h.submit(keyed(&h, sqe, 512), &[]));
}
