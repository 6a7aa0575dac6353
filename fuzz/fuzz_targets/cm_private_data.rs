//! RDMA CM private data, both directions: the connect request the target receives (with or
//! without rdmablk's push-write extension), and the accept / reject the initiator receives.
//! Byte 0 of the input picks the record (0 request, 1 accept, 2 reject, anything else all
//! three); the rest is the private data. Asserts no panic, roundtrips, and that a granted
//! push window adds up.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::transport::rdma::{CmAccept, CmReject, CmRejectStatus, CmRequest, PushAnswer};
use rdmablk::nvme::transport::rdma::{CM_ACCEPT_LEN, CM_REQUEST_LEN};

fuzz_target!(|input: &[u8]| {
    let Some((&which, pd)) = input.split_first() else {
        return;
    };
    if which == 0 || which > 2 {
        request(pd);
    }
    if which == 1 || which > 2 {
        accept(pd);
    }
    if which >= 2 {
        reject(pd);
    }
});

fn request(pd: &[u8]) {
    match CmRequest::decode(pd) {
        Ok(r) => {
            assert!(pd.len() >= CM_REQUEST_LEN);
            let re = r.encode();
            assert_eq!(CmRequest::decode(&re), Ok(r));
            // The standard fields are bit-exact; only reserved bytes may differ.
            assert_eq!(&re[..10], &pd[..10]);
            let max = u16::from_le_bytes([pd[pd.len() - 2], pd[pd.len() - 1]]);
            if r.check_queue_sizes(max).is_ok() {
                assert!(r.sq_entries() <= u32::from(max));
                assert!(r.hrqsize >= 1 && r.hrqsize <= max);
            }
            let _ = r.check_queue_sizes(32);
        }
        Err(st) => {
            assert!(matches!(
                st,
                CmRejectStatus::InvalidLength | CmRejectStatus::InvalidRecordFormat
            ));
            let back = CmRejectStatus::from_u16(st.to_u16());
            assert_eq!(back, st);
        }
    }
}

fn accept(pd: &[u8]) {
    let Ok(a) = CmAccept::decode(pd) else {
        return;
    };
    assert!(pd.len() >= CM_ACCEPT_LEN);
    assert_eq!(CmAccept::decode(&a.encode()), Ok(a));
    if let PushAnswer::Granted(w) = a.push {
        assert!(w.slots > 0 && w.slot_bytes > 0);
        assert_eq!(
            u64::from(w.len),
            u64::from(w.slots) * u64::from(w.slot_bytes)
        );
        assert_eq!(w.slot_addr(0), Some(w.addr));
        let _ = w.slot_addr(w.slots - 1);
        assert_eq!(w.slot_addr(w.slots), None);
    }
}

fn reject(pd: &[u8]) {
    let Ok(r) = CmReject::decode(pd) else {
        return;
    };
    assert_eq!(CmReject::decode(&r.encode()), Ok(r));
    assert_eq!(r.encode()[2..4], pd[2..4]);
    assert_eq!(CmRejectStatus::from_u16(r.status.to_u16()), r.status);
    assert!(!r.status.to_string().is_empty());
}
