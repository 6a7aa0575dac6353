use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use openssl::symm::{decrypt_aead, Cipher};

use super::*;
use crate::nvme::tls::session::tests::{key, pump, target, HOST, SUBSYS};
use crate::nvme::tls::session::{host_offer, TlsConn};
use crate::nvme::tls::IdentityVersion;

fn hex(s: &str) -> Vec<u8> {
    decode_hex(s).expect("hex").to_vec()
}

#[test]
fn rfc8448_application_traffic_keys() {
    // RFC 8448 section 3 (simple 1-RTT handshake, TLS_AES_128_GCM_SHA256): the application
    // traffic secrets and the write keys and IVs derived from them.
    for (secret, k, iv) in [
        (
            "9e40646ce79a7f9dc05af8889bce6552875afa0b06df0087f792ebb7c17504a5",
            "17422dda596ed5d9acd890e3c63f5051",
            "5b78923dee08579033e523d9",
        ),
        (
            "a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643",
            "9f02283b6c9c07efc26bb9f2ac92e356",
            "cf782b88dd83549aadf1e984",
        ),
    ] {
        let t = traffic_key(PskHash::Sha256, &hex(secret)).unwrap();
        assert_eq!(*t.key, hex(k));
        assert_eq!(t.iv.to_vec(), hex(iv));
    }
    assert!(
        traffic_key(PskHash::Sha384, &[0u8; 32]).is_err(),
        "a secret of the wrong hash"
    );
}

#[test]
fn keylog_lines_keep_the_two_application_secrets_only() {
    let mut s = TrafficSecrets::default();
    s.note("CLIENT_HANDSHAKE_TRAFFIC_SECRET 00ff 0102");
    s.note("CLIENT_TRAFFIC_SECRET_0 00ff 0a0b");
    s.note("SERVER_TRAFFIC_SECRET_0 00ff 0c0d");
    s.note("EXPORTER_SECRET 00ff 0e0f");
    assert_eq!(s.client.as_deref().map(|v| v.to_vec()), Some(vec![10, 11]));
    assert_eq!(s.server.as_deref().map(|v| v.to_vec()), Some(vec![12, 13]));
    s.note("SERVER_TRAFFIC_SECRET_0 00ff 0c0");
    assert!(s.server.is_none(), "an odd hex string is no secret");
}

/// A host's and a target's connection over buffers, their handshake done (`hash` 1 or 2).
fn connected(hash: u8) -> (TlsConn, TlsConn) {
    let (psk, id) = host_offer(&key(hash), IdentityVersion::V1, HOST, SUBSYS).unwrap();
    let mut c = TlsConn::client(psk, &id).unwrap();
    let mut s = target(key(hash));
    assert_eq!(pump(&mut c, &mut s), (Ok(true), Ok(true)));
    (c, s)
}

/// Opens the first record of `wire` with `k` as record number `seq`: its plaintext and
/// content type, and the bytes after it.
fn open_record<'a>(
    hash: PskHash,
    k: &TrafficKey,
    seq: u64,
    wire: &'a [u8],
) -> (Vec<u8>, u8, &'a [u8]) {
    let len = usize::from(u16::from_be_bytes([wire[3], wire[4]]));
    let (aad, body) = (&wire[..5], &wire[5..5 + len]);
    let (sealed, tag) = body.split_at(len - 16);
    let mut nonce = *k.iv;
    for (n, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
        *n ^= s;
    }
    let cipher = match hash {
        PskHash::Sha256 => Cipher::aes_128_gcm(),
        PskHash::Sha384 => Cipher::aes_256_gcm(),
    };
    let mut inner = decrypt_aead(cipher, &k.key, Some(&nonce), aad, sealed, tag)
        .unwrap_or_else(|e| panic!("record {seq} does not open: {e}"));
    while inner.last() == Some(&0) {
        inner.pop();
    }
    let kind = inner.pop().expect("a content type");
    (inner, kind, &wire[5 + len..])
}

#[test]
fn the_derived_keys_open_what_openssl_seals_after_the_handshake() {
    for hash in [1, 2] {
        let h = PskHash::from_id(hash).unwrap();
        let (mut c, mut s) = connected(hash);
        let (cs, server) = c.take_traffic_secrets().unwrap();
        assert!(!server);
        let (ss, server) = s.take_traffic_secrets().unwrap();
        assert!(server);
        assert!(
            cs.client.is_some() && cs.client == ss.client,
            "one client secret"
        );
        assert!(
            cs.server.is_some() && cs.server == ss.server,
            "one server secret"
        );
        assert_ne!(cs.client, cs.server);
        let ck = traffic_key(h, cs.client.as_ref().unwrap()).unwrap();
        let sk = traffic_key(h, cs.server.as_ref().unwrap()).unwrap();
        assert_eq!(ck.key.len(), if hash == 1 { 16 } else { 32 });
        // Each side's first two application records are numbers 0 and 1 under its key.
        for (conn, k) in [(&mut c, &ck), (&mut s, &sk)] {
            conn.write_plain(b"first").unwrap();
            conn.write_plain(b"second").unwrap();
            let wire = conn.outgoing().to_vec();
            let (p0, t0, rest) = open_record(h, k, 0, &wire);
            let (p1, t1, rest) = open_record(h, k, 1, rest);
            assert_eq!(
                (&p0[..], t0, &p1[..], t1),
                (&b"first"[..], 23, &b"second"[..], 23)
            );
            assert!(rest.is_empty());
        }
    }
}

#[test]
fn a_byte_past_the_handshake_held_in_user_space_stops_the_hand_off() {
    let (mut c, mut s) = connected(1);
    c.write_plain(b"early").unwrap();
    assert!(c
        .take_traffic_secrets()
        .unwrap_err()
        .contains("held in user space"));
    let out = c.outgoing().to_vec();
    c.sent(out.len());
    s.feed(&out);
    let e = s.take_traffic_secrets().unwrap_err();
    assert!(e.contains(&format!("{} bytes received", out.len())), "{e}");
}

#[test]
fn the_handshake_reads_no_byte_past_its_last_record() {
    // What a peer sends right after its last handshake record (here a record of 4 bytes)
    // stays unread, on both sides, for the kernel to take.
    let next = [0x17, 3, 3, 0, 4, 1, 2, 3, 4];
    for hash in [1, 2] {
        let (psk, id) = host_offer(&key(hash), IdentityVersion::V0, HOST, SUBSYS).unwrap();
        let mut c = TlsConn::client(psk, &id).unwrap();
        let mut s = target(key(hash));
        assert_eq!(c.handshake(), Ok(false));
        let mut wire = c.outgoing().to_vec();
        c.sent(wire.len());
        let mut r = &wire[..];
        while !r.is_empty() {
            s.read_from(&mut r).unwrap();
            assert_eq!(s.handshake(), Ok(false));
        }
        // The target's flight, then a record it did not send: the host stops before it.
        wire = [s.outgoing(), &next[..]].concat();
        s.sent(wire.len() - next.len());
        let mut r = &wire[..];
        while !c.handshake().unwrap() {
            c.read_from(&mut r).unwrap();
        }
        assert_eq!(
            r,
            &next[..],
            "hash {hash}: the host read past the handshake"
        );
        // The host's Finished (after its change_cipher_spec), then its first record.
        wire = [c.outgoing(), &next[..]].concat();
        c.sent(wire.len() - next.len());
        let mut r = &wire[..];
        while !s.handshake().unwrap() {
            s.read_from(&mut r).unwrap();
        }
        assert_eq!(
            r,
            &next[..],
            "hash {hash}: the target read past the handshake"
        );
        assert!(c.take_traffic_secrets().is_ok() && s.take_traffic_secrets().is_ok());
    }
}

#[test]
fn control_records_are_named() {
    assert!(describe(ALERT, &[1, 0]).contains("close_notify"));
    assert_eq!(
        describe(ALERT, &[2, 20]),
        "the peer sent a TLS alert: bad_record_mac (fatal)"
    );
    assert!(describe(HANDSHAKE, &[24, 0, 0, 1, 0]).contains("KeyUpdate"));
    assert!(describe(HANDSHAKE, &[4, 0]).contains("NewSessionTicket"));
}

#[test]
fn only_whole_tickets_are_passed_over() {
    let ticket = |n: usize| [&[4, 0, (n >> 8) as u8, n as u8][..], &vec![7u8; n]].concat();
    assert!(only_tickets(&ticket(0)));
    assert!(only_tickets(&ticket(300)));
    assert!(only_tickets(&[ticket(200), ticket(5)].concat()));
    assert!(!only_tickets(&[]));
    // Split across records, cut short, or beside another message (a KeyUpdate).
    assert!(!only_tickets(&ticket(300)[..100]));
    assert!(!only_tickets(&[4, 0, 0]));
    assert!(!only_tickets(&[ticket(10), vec![24, 0, 0, 1, 0]].concat()));
    assert!(!only_tickets(&[vec![24, 0, 0, 1, 0], ticket(10)].concat()));
    assert!(describe(20, &[1]).contains("content type 20"));
}

/// Both ends of a loopback TCP connection, their handshake done over it (non-blocking).
fn over_tcp(hash: u8) -> ((TcpStream, Box<TlsConn>), (TcpStream, Box<TlsConn>)) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let cs = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (ss, _) = l.accept().unwrap();
    cs.set_nonblocking(true).unwrap();
    ss.set_nonblocking(true).unwrap();
    let (psk, id) = host_offer(&key(hash), IdentityVersion::V1, HOST, SUBSYS).unwrap();
    let mut c = Box::new(TlsConn::client(psk, &id).unwrap());
    let mut s = Box::new(target(key(hash)));
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut cd, mut sd) = (false, false);
    while !(cd && sd) {
        assert!(Instant::now() < deadline, "no handshake over TCP");
        for (done, conn, sock) in [(&mut cd, &mut c, &cs), (&mut sd, &mut s, &ss)] {
            if !*done {
                conn.read_from(&mut &*sock).unwrap();
                *done = conn.handshake().unwrap();
                assert!(conn.write_to(&mut &*sock).unwrap());
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    ((cs, c), (ss, s))
}

/// Reads `n` plaintext bytes through OpenSSL's record layer from `sock`.
fn read_user(est: &mut Established, sock: &TcpStream, n: usize) -> Vec<u8> {
    let conn = est.user_mut().expect("user space");
    let mut got = vec![0u8; n];
    let (mut have, deadline) = (0, Instant::now() + Duration::from_secs(10));
    while have < n {
        assert!(Instant::now() < deadline, "{have} of {n} bytes");
        conn.read_from(&mut &*sock).unwrap();
        have += conn.read_plain(&mut got[have..]).unwrap();
    }
    got
}

#[test]
fn the_kernel_takes_the_records_where_it_has_ktls() {
    let ktls = kernel_has_ktls();
    for hash in [1, 2] {
        let ((cs, c), (ss, s)) = over_tcp(hash);
        if !ktls {
            // This kernel has none: refused when required, OpenSSL's otherwise.
            let e = hand_off(s, &ss, RecordLayer::Kernel).unwrap_err();
            assert!(e.contains("required") && e.contains("TCP_ULP"), "{e}");
            let est = hand_off(c, &cs, RecordLayer::Auto).unwrap();
            assert_eq!(est.record_layer(), "user");
            assert!(est.why_user().unwrap().contains("TCP_ULP"));
            continue;
        }
        // The target's records in the kernel, the host's in user space: the keys and the
        // record numbers of the two layers agree, both ways.
        let s_est = hand_off(s, &ss, RecordLayer::Auto).unwrap();
        assert_eq!((s_est.record_layer(), s_est.why_user()), ("kernel", None));
        assert_eq!(s_est.identity().map(|i| i.host_nqn()), Some(HOST));
        let mut c_est = hand_off(c, &cs, RecordLayer::User).unwrap();
        assert_eq!(c_est.record_layer(), "user");
        let conn = c_est.user_mut().unwrap();
        conn.write_plain(b"to the kernel").unwrap();
        assert!(conn.write_to(&mut &cs).unwrap());
        ss.set_nonblocking(false).unwrap();
        ss.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 13];
        (&ss).read_exact(&mut b).unwrap();
        assert_eq!(&b, b"to the kernel");
        let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7) as u8).collect();
        (&ss).write_all(&big).unwrap();
        assert!(
            read_user(&mut c_est, &cs, big.len()) == big,
            "hash {hash}: 200 KB back"
        );
        // The host's close_notify (or KeyUpdate) reaches the target's kernel side as a
        // control record: named, never data.
        let conn = c_est.user_mut().unwrap();
        let want = if hash == 1 {
            conn.close();
            "close_notify"
        } else {
            conn.key_update();
            "KeyUpdate"
        };
        assert!(conn.write_to(&mut &cs).unwrap());
        let e = (&ss).read(&mut b).unwrap_err();
        let why = match receive_error(&ss, &e) {
            Some(ReceiveError::Ends(why)) => why,
            other => panic!("{e}: {other:?}"),
        };
        assert!(why.contains(want), "{why}");
        both_in_the_kernel(hash);
    }
}

/// Both ends' records in the kernel: a megabyte each way at once.
fn both_in_the_kernel(hash: u8) {
    {
        let ((cs, c), (ss, s)) = over_tcp(hash);
        let c_est = hand_off(c, &cs, RecordLayer::Kernel).unwrap();
        let s_est = hand_off(s, &ss, RecordLayer::Kernel).unwrap();
        assert_eq!(
            (c_est.record_layer(), s_est.record_layer()),
            ("kernel", "kernel")
        );
        for sock in [&cs, &ss] {
            sock.set_nonblocking(false).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(20)))
                .unwrap();
        }
        let data: Vec<u8> = (0..1u32 << 20).map(|i| (i ^ (i >> 11)) as u8).collect();
        tickets_then_data(&ss, &cs, hash);
        std::thread::scope(|t| {
            for (from, to) in [(&cs, &ss), (&ss, &cs)] {
                let d = &data;
                t.spawn(move || (&*from).write_all(d).unwrap());
                t.spawn(move || {
                    let mut got = vec![0u8; d.len()];
                    (&*to).read_exact(&mut got).unwrap();
                    assert!(got == *d, "hash {hash}: 1 MiB differs");
                });
            }
        });
    }
}

/// Sends one record of content type `kind` through the kernel's TLS (`TLS_SET_RECORD_TYPE`).
fn send_record(sock: &TcpStream, kind: u8, body: &[u8]) {
    const TLS_SET_RECORD_TYPE: libc::c_int = 1;
    let mut cbuf = [0u64; 4];
    let mut iov = libc::iovec {
        iov_base: body.as_ptr().cast_mut().cast(),
        iov_len: body.len(),
    };
    // SAFETY: a zeroed msghdr naming our buffers, which outlive the call; the control
    // message is built with the CMSG macros inside `cbuf`.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(1) as _;
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = SOL_TLS;
        (*c).cmsg_type = TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(c) = kind;
        libc::sendmsg(sock.as_raw_fd(), &msg, 0)
    };
    assert_eq!(n, body.len() as isize, "{}", io::Error::last_os_error());
}

/// A server's NewSessionTickets after the hand-off (as OpenSSL's servers send them: SPDK's
/// target) are passed over and the data after them read; a KeyUpdate still ends.
fn tickets_then_data(server: &TcpStream, host: &TcpStream, hash: u8) {
    let ticket = |n: usize| [&[4, 0, (n >> 8) as u8, n as u8][..], &vec![9u8; n]].concat();
    // Two in one record, one in the next.
    send_record(server, HANDSHAKE, &[ticket(700), ticket(180)].concat());
    send_record(server, HANDSHAKE, &ticket(90));
    (&*server).write_all(b"after the tickets").unwrap();
    let mut got = [0u8; 17];
    let mut have = 0;
    let mut passed = 0;
    while have < got.len() {
        match (&*host).read(&mut got[have..]) {
            Ok(n) => have += n,
            Err(e) => match receive_error(host, &e) {
                Some(ReceiveError::Ticket) => passed += 1,
                other => panic!("hash {hash}: {e}: {other:?}"),
            },
        }
    }
    // Two passes, or one on kernels before 6.8's "tls: stop recv() if initial
    // process_rx_list gave us non-DATA", which hand out both ticket records in one read (the
    // whole of it still tickets).
    assert_eq!(&got, b"after the tickets", "hash {hash}");
    assert!((1..=2).contains(&passed), "hash {hash}: {passed} passes");
    send_record(
        server,
        HANDSHAKE,
        &[ticket(10), vec![24, 0, 0, 1, 0]].concat(),
    );
    let e = (&*host).read(&mut got).unwrap_err();
    match receive_error(host, &e) {
        Some(ReceiveError::Ends(why)) => assert!(why.contains("NewSessionTicket"), "{why}"),
        other => panic!("hash {hash}: {e}: {other:?}"),
    }
}
