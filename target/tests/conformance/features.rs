//! Rows of "Get / Set Features".

use rdmablk::nvme::features::fid;
use rdmablk::nvme::{NumQueues, SetFeatures, Status};

use super::fixture::*;

#[test]
fn conformance_features_set_fid() {
    let (_fx, mut h, _) = ready();
    // LBA range type, interrupt coalescing/config (no interrupts on fabrics), write
    // atomicity, timestamp, host behaviour, vendor specific.
    for f in [0x00u8, 0x03, 0x08, 0x09, 0x0A, 0x0E, 0x16, 0xC0] {
        expect(
            &set_features(&mut h, f, 0),
            Status::INVALID_FIELD.with_dnr(),
        );
    }
    // Reservation Persistence is per namespace; persisting needs a state directory (this
    // target has none), turning it off does not.
    let persist = |nsid: u32, value: u32| {
        SetFeatures {
            fid: fid::RESERVATION_PERSIST,
            value,
            save: false,
            nsid,
        }
        .to_sqe(0)
    };
    expect(
        &h.submit(persist(0, 0), &[]),
        Status::INVALID_NAMESPACE.with_dnr(),
    );
    expect(
        &h.submit(persist(1, 1), &[]),
        Status::INVALID_FIELD.with_dnr(),
    );
    ok(&h.submit(persist(1, 0), &[]));
    // The Reservation Notification Mask: per namespace (FFFFFFFFh: every one), bits 1-3.
    let mask = |nsid: u32, value: u32| {
        SetFeatures {
            fid: fid::RESERVATION_MASK,
            value,
            save: false,
            nsid,
        }
        .to_sqe(0)
    };
    expect(
        &h.submit(mask(0, 2), &[]),
        Status::INVALID_NAMESPACE.with_dnr(),
    );
    expect(&h.submit(mask(1, 1), &[]), Status::INVALID_FIELD.with_dnr());
    ok(&h.submit(mask(1, 0b1110), &[]));
    ok(&h.submit(mask(u32::MAX, 0), &[]));
    // The host identifier comes with Connect.
    expect(
        &set_features(&mut h, fid::HOST_ID, 0),
        Status::COMMAND_SEQUENCE_ERROR.with_dnr(),
    );
    for f in [
        fid::NUM_QUEUES,
        fid::KEEP_ALIVE_TIMER,
        fid::ASYNC_EVENT_CONFIG,
        fid::VOLATILE_WRITE_CACHE,
        fid::ARBITRATION,
        fid::POWER_MGMT,
        fid::TEMP_THRESHOLD,
        fid::ERROR_RECOVERY,
    ] {
        ok(&set_features(&mut h, f, 0));
    }
}

#[test]
fn conformance_features_get_fid() {
    let (_fx, mut h, _) = ready();
    for f in [0x00u8, 0x03, 0x08, 0x09, 0x0E, 0x16, 0x81, 0xC0] {
        expect(&get_features(&mut h, f), Status::INVALID_FIELD.with_dnr());
    }
    let c = get_features(&mut h, fid::VOLATILE_WRITE_CACHE);
    ok(&c);
    assert_eq!(c.dw0, 1, "write cache enabled");
    for f in [
        fid::NUM_QUEUES,
        fid::KEEP_ALIVE_TIMER,
        fid::ASYNC_EVENT_CONFIG,
        fid::ARBITRATION,
        fid::POWER_MGMT,
        fid::TEMP_THRESHOLD,
        fid::ERROR_RECOVERY,
    ] {
        ok(&get_features(&mut h, f));
    }
}

#[test]
fn conformance_features_get_sel() {
    let (_fx, mut h, _) = ready();
    for sel in 4..=7u32 {
        let mut sqe = get_features_sqe(fid::NUM_QUEUES);
        sqe.cdw10 |= sel << 8;
        expect(&h.submit(sqe, &[]), Status::INVALID_FIELD.with_dnr());
    }
    for sel in 0..=3u32 {
        let mut sqe = get_features_sqe(fid::NUM_QUEUES);
        sqe.cdw10 |= sel << 8;
        ok(&h.submit(sqe, &[]));
    }
}

#[test]
fn conformance_features_set_sv_ignored() {
    let (_fx, mut h, _) = ready();
    let sqe = SetFeatures {
        fid: fid::KEEP_ALIVE_TIMER,
        save: true,
        nsid: 0,
        value: 3000,
    }
    .to_sqe(0);
    ok(&h.submit(sqe, &[]));
    assert_eq!(get_features(&mut h, fid::KEEP_ALIVE_TIMER).dw0, 3000);
}

#[test]
fn conformance_features_nsid_ignored() {
    let (_fx, mut h, _) = ready();
    for nsid in [1u32, INACTIVE_NSID, 0xFFFF_FFFF] {
        let mut sqe = get_features_sqe(fid::NUM_QUEUES);
        sqe.nsid = nsid;
        ok(&h.submit(sqe, &[]));
        let sqe = SetFeatures {
            fid: fid::ASYNC_EVENT_CONFIG,
            save: false,
            nsid,
            value: 0x100,
        }
        .to_sqe(0);
        ok(&h.submit(sqe, &[]));
    }
}

#[test]
fn conformance_features_num_queues() {
    let (_fx, mut h, _) = ready();
    for bad in [0x0000_FFFFu32, 0xFFFF_0000, 0xFFFF_FFFF] {
        expect(
            &set_features(&mut h, fid::NUM_QUEUES, bad),
            Status::INVALID_FIELD.with_dnr(),
        );
    }
    // max_queues_per_controller 4: at most 3 I/O queues; a smaller request is granted as is.
    let c = set_features(
        &mut h,
        fid::NUM_QUEUES,
        NumQueues { nsq: 7, ncq: 7 }.to_dword(),
    );
    ok(&c);
    assert_eq!(NumQueues::from_dword(c.dw0), NumQueues { nsq: 2, ncq: 2 });
    let c = set_features(
        &mut h,
        fid::NUM_QUEUES,
        NumQueues { nsq: 0, ncq: 1 }.to_dword(),
    );
    ok(&c);
    assert_eq!(NumQueues::from_dword(c.dw0), NumQueues { nsq: 0, ncq: 1 });
    let c = get_features(&mut h, fid::NUM_QUEUES);
    assert_eq!(NumQueues::from_dword(c.dw0), NumQueues { nsq: 0, ncq: 0 });
}

#[test]
fn conformance_features_kato() {
    let (_fx, mut h, _) = ready();
    ok(&set_features(&mut h, fid::KEEP_ALIVE_TIMER, 1500));
    let c = get_features(&mut h, fid::KEEP_ALIVE_TIMER);
    ok(&c);
    assert_eq!(c.dw0, 1500, "milliseconds");
    ok(&set_features(&mut h, fid::KEEP_ALIVE_TIMER, 0));
    assert_eq!(get_features(&mut h, fid::KEEP_ALIVE_TIMER).dw0, 0);
}
