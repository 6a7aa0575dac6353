use std::sync::Arc;

use openssl::ssl::{SslConnector, SslMethod, SslVersion};

use super::*;

pub(crate) const HOST: &str =
    "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
pub(crate) const SUBSYS: &str = "nqn.2016-06.io.spdk:cnode1";

pub(crate) fn key(hash: u8) -> ConfiguredPsk {
    let n = if hash == 2 { 48 } else { 32 };
    let bytes: Vec<u8> = (0..n as u8).collect();
    ConfiguredPsk::new(&bytes, PskHash::from_id(hash)).unwrap()
}

pub(crate) fn target(configured: ConfiguredPsk) -> TlsConn {
    let lookup: PskLookup = Arc::new(move |id: &PskIdentity| {
        if id.host_nqn() != HOST || id.subsys_nqn() != SUBSYS {
            return Err("no such host".into());
        }
        target_psk(&configured, id)
    });
    TlsConn::server(lookup).unwrap()
}

/// Moves ciphertext both ways until neither side has more to say; the handshake's result
/// on each side.
pub(crate) fn pump(
    c: &mut TlsConn,
    s: &mut TlsConn,
) -> (Result<bool, TlsError>, Result<bool, TlsError>) {
    let (mut rc, mut rs) = (Ok(false), Ok(false));
    for _ in 0..20 {
        rc = c.handshake();
        let out = c.outgoing().to_vec();
        c.sent(out.len());
        s.feed(&out);
        rs = s.handshake();
        let back = s.outgoing().to_vec();
        s.sent(back.len());
        c.feed(&back);
        if out.is_empty() && back.is_empty() {
            break;
        }
    }
    (rc, rs)
}

fn roundtrip(c: &mut TlsConn, s: &mut TlsConn) {
    let msg: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    c.write_plain(&msg).unwrap();
    let out = c.outgoing().to_vec();
    c.sent(out.len());
    let mut got = vec![0u8; msg.len() + 10];
    let (mut n, mut fed) = (0, 0);
    loop {
        // Only as much ciphertext as the connection holds goes in at a time.
        fed += s.feed(&out[fed..]);
        let k = s.read_plain(&mut got[n..]).unwrap();
        if k == 0 && fed == out.len() {
            break;
        }
        n += k;
    }
    assert_eq!(&got[..n], &msg[..]);
    assert!(!s.has_buffered_input());
}

#[test]
fn both_suites_both_identity_versions_connect_and_carry_data() {
    for (hash, suite) in [(1, "TLS_AES_128_GCM_SHA256"), (2, "TLS_AES_256_GCM_SHA384")] {
        for version in [IdentityVersion::V0, IdentityVersion::V1] {
            let (psk, id) = host_offer(&key(hash), version, HOST, SUBSYS).unwrap();
            let mut c = TlsConn::client(psk, &id).unwrap();
            let mut s = target(key(hash));
            let (rc, rs) = pump(&mut c, &mut s);
            assert_eq!((rc, rs), (Ok(true), Ok(true)), "hash {hash} {version:?}");
            assert_eq!(c.cipher(), Some(suite));
            assert_eq!(s.cipher(), Some(suite));
            assert_eq!(s.accepted_identity(), Some(&id));
            roundtrip(&mut c, &mut s);
            roundtrip(&mut s, &mut c);
        }
    }
}

#[test]
fn a_wrong_key_is_refused_on_both_sides() {
    let other = ConfiguredPsk::new(&[7u8; 32], Some(PskHash::Sha256)).unwrap();
    // Version 1: the digest gives the wrong key away before the handshake uses it.
    let (psk, id) = host_offer(&other, IdentityVersion::V1, HOST, SUBSYS).unwrap();
    let mut c = TlsConn::client(psk, &id).unwrap();
    let mut s = target(key(1));
    let (rc, rs) = pump(&mut c, &mut s);
    let why = format!("{:?}", rs.unwrap_err());
    assert!(why.contains("wrong key"), "{why}");
    assert!(rc.is_err(), "the host hears of it");
    // Version 0: the identity matches, the binder does not.
    let (psk, id) = host_offer(&other, IdentityVersion::V0, HOST, SUBSYS).unwrap();
    let mut c = TlsConn::client(psk, &id).unwrap();
    let mut s = target(key(1));
    let (rc, rs) = pump(&mut c, &mut s);
    assert!(rs.is_err() && rc.is_err(), "{rs:?} {rc:?}");
}

/// `hello` (a ClientHello record whose pre_shared_key extension, the last, offers one identity)
/// with that identity's binder made `n` bytes long, every enclosing length fixed.
fn with_binder_len(hello: &[u8], n: usize) -> Vec<u8> {
    let u16_at = |p: usize| usize::from(u16::from_be_bytes([hello[p], hello[p + 1]]));
    assert_eq!(
        (hello[0], hello[5]),
        (0x16, 1),
        "a handshake record with a ClientHello"
    );
    // handshake header (4), legacy_version (2), random (32)
    let mut p = 5 + 4 + 2 + 32;
    p += 1 + usize::from(hello[p]); // legacy_session_id
    p += 2 + u16_at(p); // cipher_suites
    p += 1 + usize::from(hello[p]); // legacy_compression_methods
    let extensions = p;
    p += 2;
    while u16_at(p) != 41 {
        p += 4 + u16_at(p + 2);
    }
    let psk_ext = p + 2;
    let binders = psk_ext + 2 + 2 + u16_at(psk_ext + 2);
    assert_eq!(
        binders + 2 + u16_at(binders),
        hello.len(),
        "pre_shared_key comes last"
    );
    let mut out = hello[..binders].to_vec();
    out.extend_from_slice(&u16::try_from(1 + n).unwrap().to_be_bytes());
    out.push(u8::try_from(n).unwrap());
    out.resize(out.len() + n, 0xb1);
    let shrink = hello.len() - out.len();
    for (at, width) in [(3, 2), (6, 3), (extensions, 2), (psk_ext, 2)] {
        let old = hello[at..at + width]
            .iter()
            .fold(0, |a, b| a << 8 | usize::from(*b));
        let new = (old - shrink).to_be_bytes();
        out[at..at + width].copy_from_slice(&new[new.len() - width..]);
    }
    out
}

/// A host that makes the binder of a SHA-384 identity with SHA-256 (GnuTLS before 3.8.11,
/// Debian 13's tlshd): refused, with why in the error.
#[test]
fn a_binder_of_another_hash_is_refused_with_why() {
    let (psk, id) = host_offer(&key(2), IdentityVersion::V0, HOST, SUBSYS).unwrap();
    let mut c = TlsConn::client(psk, &id).unwrap();
    assert_eq!(c.handshake(), Ok(false));
    let hello = c.outgoing().to_vec();
    // The control: a binder of the right length (not the right bytes) gets as far as its check.
    let mut s = target(key(2));
    s.feed(&with_binder_len(&hello, 48));
    let why = format!("{:?}", s.handshake().unwrap_err());
    assert!(why.contains("binder does not verify"), "{why}");
    let mut s = target(key(2));
    s.feed(&with_binder_len(&hello, 32));
    let why = format!("{:?}", s.handshake().unwrap_err());
    assert!(why.contains("binder is not 48 bytes long"), "{why}");
}

#[test]
fn an_unknown_host_and_a_hash_mismatch_are_refused() {
    let (psk, id) = host_offer(&key(1), IdentityVersion::V1, "nqn.x:other", SUBSYS).unwrap();
    let mut c = TlsConn::client(psk, &id).unwrap();
    let mut s = target(key(1));
    let (_, rs) = pump(&mut c, &mut s);
    assert!(format!("{rs:?}").contains("no such host"), "{rs:?}");
    let (psk, id) = host_offer(&key(2), IdentityVersion::V1, HOST, SUBSYS).unwrap();
    let mut c = TlsConn::client(psk, &id).unwrap();
    let mut s = target(key(1));
    let (_, rs) = pump(&mut c, &mut s);
    assert!(
        format!("{rs:?}").contains("configured key is for"),
        "{rs:?}"
    );
}

/// A client of another library's making, driven through the same buffers.
fn foreign_client(max: SslVersion) -> SslStream<Wire> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_max_proto_version(Some(max)).unwrap();
    let mut c = b
        .build()
        .configure()
        .unwrap()
        .verify_hostname(false)
        .into_ssl("x")
        .unwrap();
    c.set_connect_state();
    let mut c = SslStream::new(c, Wire::default()).unwrap();
    let _ = c.do_handshake();
    c
}

#[test]
fn tls12_and_certificate_only_clients_and_garbage_are_refused() {
    for max in [SslVersion::TLS1_2, SslVersion::TLS1_3] {
        let mut c = foreign_client(max);
        let hello = std::mem::take(&mut c.get_mut().tx);
        assert!(is_tls_record(hello[0]));
        let mut s = target(key(1));
        s.feed(&hello);
        let r = s.handshake();
        assert!(matches!(r, Err(TlsError::Handshake(_))), "{max:?}: {r:?}");
        assert!(!s.outgoing().is_empty(), "{max:?}: an alert goes back");
    }
    let mut s = target(key(1));
    s.feed(b"\x16\x03\x01\x00\x05hello, this is not a ClientHello at all");
    assert!(s.handshake().is_err());
    let mut s = target(key(1));
    s.feed(&[0u8; 128]);
    assert!(s.handshake().is_err());
}

#[test]
fn a_handshake_fed_byte_by_byte_completes() {
    let (psk, id) = host_offer(&key(2), IdentityVersion::V1, HOST, SUBSYS).unwrap();
    let mut c = TlsConn::client(psk, &id).unwrap();
    let mut s = target(key(2));
    assert_eq!(c.handshake(), Ok(false));
    let hello = c.outgoing().to_vec();
    c.sent(hello.len());
    for b in &hello {
        assert_eq!(s.handshake(), Ok(false));
        s.feed(std::slice::from_ref(b));
    }
    assert_eq!(s.handshake(), Ok(false), "waits for the host's Finished");
    let (rc, rs) = pump(&mut c, &mut s);
    assert_eq!((rc, rs), (Ok(true), Ok(true)));
}
