//! What NVMe/TCP's TLS setup will read from outside: a configured PSK in the interchange
//! format (`NVMeTLSkey-1:hh:base64:`, from a configuration file or `rdmablk-ctl`) and a PSK
//! identity string as a host offers it in its ClientHello. Byte 0 picks which (even: key,
//! odd: identity); the rest is the text. Asserts no panic; that a key that parses writes back
//! to a string that parses to the same (hash, key length and retained-PSK derivation); that
//! an identity that parses writes back to the same string and parses to the same identity,
//! and goes through the target's key check and TLS PSK derivation (`target_psk`, what the
//! TLS handshake's PSK callback runs on a host's identity) without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::tls::session::target_psk;
use rdmablk::nvme::tls::{ConfiguredPsk, PskHash, PskIdentity};

fuzz_target!(|b: &[u8]| {
    let Some((&which, rest)) = b.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    if which % 2 == 0 {
        if let Ok(k) = ConfiguredPsk::parse(text) {
            let again = ConfiguredPsk::parse(&k.to_interchange()).expect("a written key parses");
            assert_eq!(again.retained_hash(), k.retained_hash());
            assert_eq!(again.hash(), k.hash());
            let host = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
            let (a, b) = (k.retained(host).unwrap(), again.retained(host).unwrap());
            assert_eq!(a.as_bytes(), b.as_bytes());
        }
    } else if let Ok(id) = PskIdentity::parse(text) {
        let written = id.to_string();
        assert_eq!(written, text);
        assert_eq!(PskIdentity::parse(&written).as_ref(), Ok(&id));
        for (len, hash) in [(32, PskHash::Sha256), (48, PskHash::Sha384)] {
            let key = ConfiguredPsk::new(&vec![7u8; len], Some(hash)).expect("a key");
            let _ = target_psk(&key, &id);
        }
    }
});
