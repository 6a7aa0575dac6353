//! In-band authentication as both sides receive it: the Authentication Send / Receive SQE
//! and every DH-HMAC-CHAP message (negotiate, challenge, reply, success1, success2,
//! failure1/2), plus `DHHC-1` key strings and FFDHE public values. Asserts no panic, that a
//! decoded message re-encodes to a prefix-equal message that decodes the same, and that a
//! refusal is one of the spec's failure reasons.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::auth::ffdhe::KeyPair;
use rdmablk::nvme::auth::key::DhchapKey;
use rdmablk::nvme::auth::{AuthReceive, AuthSend, DhGroup, FailureReason, Message};
use rdmablk::nvme::Sqe;
use rdmablk_fuzz::take_padded;

fuzz_target!(|input: &[u8]| {
    let (head, msg) = take_padded::<64>(input);
    let sqe = Sqe::decode(&head);
    if let Ok(s) = AuthSend::from_sqe(&sqe) {
        assert_eq!(AuthSend::from_sqe(&s.to_sqe(sqe.cid)), Ok(s));
    }
    if let Ok(r) = AuthReceive::from_sqe(&sqe) {
        assert_eq!(AuthReceive::from_sqe(&r.to_sqe(sqe.cid)), Ok(r));
    }
    match Message::decode(msg) {
        Ok(m) => {
            let again = m.encode();
            assert!(again.len() <= msg.len().max(again.len()));
            assert_eq!(Message::decode(&again).as_ref(), Ok(&m));
            let _ = (m.t_id(), m.name());
        }
        Err(r) => assert_eq!(FailureReason::from_code(r.code()), Some(r)),
    }
    if let Ok(text) = std::str::from_utf8(msg) {
        if let Ok(k) = DhchapKey::parse(text) {
            assert_eq!(DhchapKey::parse(&k.to_dhhc1()).as_ref(), Ok(&k));
        }
    }
    // A peer's DH value against a fixed key pair: refused or a full-size secret. (Only for
    // full-size and tiny values: a modular exponentiation per input would slow the rest.)
    if msg.len() == 256 || msg.len() == 257 || (1..=2).contains(&msg.len()) {
        static KEY: OnceLock<KeyPair> = OnceLock::new();
        let k = KEY.get_or_init(|| {
            KeyPair::from_exponent(DhGroup::Ffdhe2048, [0x5A; 64]).expect("ffdhe2048")
        });
        if let Ok(s) = k.shared_secret(msg) {
            assert_eq!(s.len(), 256);
        }
    }
});
