//! The Fabrics Connect capsule as the target receives it: the Connect SQE, its data pointer
//! check and the 1024-byte Connect data with its two NQN fields; plus Disconnect and the
//! Invalid Parameters response a refusal turns into. Asserts no panic, roundtrips, and that a
//! failure points at a field the initiator can name.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::fabrics::{InvalidParam, CONNECT_DATA_LEN};
use rdmablk::nvme::nqn::{NQN_FIELD_LEN, NQN_MAX_LEN};
use rdmablk::nvme::{Connect, ConnectData, ConnectFailure, Cqe, Disconnect, Nqn, Sqe};
use rdmablk_fuzz::take_padded;

fuzz_target!(|input: &[u8]| {
    let (head, data) = take_padded::<64>(input);
    let sqe = Sqe::decode(&head);
    match Connect::from_sqe(&sqe) {
        Ok(c) => {
            assert!(c.sqsize != 0 && c.queue_entries() >= 2);
            if let Ok(sgl) = sqe.sgl() {
                let _ = Connect::check_data_sgl(&sgl);
                assert_eq!(Connect::from_sqe(&c.to_sqe(sqe.cid, &sgl)), Ok(c));
            }
        }
        Err(f) => failure_is_nameable(&f),
    }
    let _ = Disconnect::from_sqe(&sqe);

    match ConnectData::decode_slice(data) {
        Ok(d) => {
            assert_eq!(data.len(), CONNECT_DATA_LEN);
            assert_eq!(ConnectData::decode(&d.encode()).as_ref(), Ok(&d));
            for n in std::iter::once(&d.subnqn).chain(d.hostnqn.as_ref()) {
                assert!(!n.as_str().is_empty() && n.as_str().len() <= NQN_MAX_LEN);
                assert_eq!(n.as_str().parse::<Nqn>().as_ref(), Ok(n));
            }
            let _ = d.hostid_is_null();
        }
        Err(f) => failure_is_nameable(&f),
    }
    // A single NQN field, whatever its neighbours hold.
    let (field, _) = take_padded::<NQN_FIELD_LEN>(data);
    if let Ok(n) = Nqn::from_field(&field) {
        assert_eq!(Nqn::from_field(&n.to_field()).as_ref(), Ok(&n));
        let _ = n.to_string();
    }
});

fn failure_is_nameable(f: &ConnectFailure) {
    assert!(f.status.dnr, "Connect refusals are final");
    let cqe = f.to_cqe(1, 0, 1);
    assert_eq!(Cqe::decode(&cqe.to_bytes()), cqe);
    if let Some(p) = f.invalid {
        assert_eq!(InvalidParam::from_dw0(f.dw0()), p);
        assert_ne!(p.field_name(), "unknown field");
    }
}
