//! NVMe/TCP over TLS 1.3 with a PSK, rdmablk-initiator against rdmablk-target (in-process,
//! 127.0.0.1): verified I/O at every size under both cipher suites and both identity
//! versions; a wrong key, a host without TLS on a `required` port, garbage instead of a
//! ClientHello, each refused; a handshake that stalls halfway costs another host nothing and
//! is let go at the connect timeout; discovery's TREQ and TSAS.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rdmablk::nvme::tls::{ConfiguredPsk, PskHash};
use rdmablk_initiator::{discover_with, ConnectOptions, Controller, TlsKey};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:5f3c1a4e-0b7d-4f6e-9a31-6c2d8e4b7a10";
const SUB256: &str = "nqn.2026-12.io.rdmablk:tls-sha256";
const SUB384: &str = "nqn.2026-12.io.rdmablk:tls-sha384";

fn key(hash: PskHash, seed: u8) -> String {
    let bytes: Vec<u8> = (0..hash.digest_len() as u8)
        .map(|i| i.wrapping_mul(7) ^ seed)
        .collect();
    ConfiguredPsk::new(&bytes, Some(hash))
        .unwrap()
        .to_interchange()
        .to_string()
}

struct Tls {
    target: Option<Target>,
    toml: String,
    required: std::net::SocketAddr,
    allowed: std::net::SocketAddr,
}

impl Drop for Tls {
    fn drop(&mut self) {
        if let Some(t) = self.target.take() {
            t.shutdown();
        }
    }
}

fn start() -> Tls {
    start_with(&format!(r#"tls_psk = "{}""#, key(PskHash::Sha256, 1)))
}

/// A target whose SUB256 entry for HOST has `key256` (`tls_psk = ..` or `tls_psk_file = ..`).
fn start_with(key256: &str) -> Tls {
    start_custom(key256, "")
}

/// [`start_with`] with `extra_target` lines in the target's `[target]` table.
fn start_custom(key256: &str, extra_target: &str) -> Tls {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let addr = rdmablk_testkit::e2e_fabric().1;
    let p1 = rdmablk_testkit::free_port(&addr);
    let mut p2 = rdmablk_testkit::free_port(&addr);
    while p2 == p1 {
        p2 = rdmablk_testkit::free_port(&addr);
    }
    let toml = format!(
        r#"
[[listener]]
transport = "tcp"
address = "{addr}"
port = {p1}
tls = "required"

[[listener]]
transport = "tcp"
address = "{addr}"
port = {p2}
tls = "allowed"

[target]
worker_threads = 1
poll_mode = "interrupt"
connect_timeout_ms = 1500
{extra_target}

[control]
socket = ""

[arena]
bytes = "64MiB"
lock = false

[[subsystem]]
nqn = "{SUB256}"
hosts = [ {{ nqn = "{HOST}", {key256} }} ]

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = {{ kind = "ram", size = "8MiB" }}

[[subsystem]]
nqn = "{SUB384}"
hosts = [ {{ nqn = "{HOST}", tls_psk = "{k384}" }} ]

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = {{ kind = "ram", size = "8MiB" }}
"#,
        k384 = key(PskHash::Sha384, 2),
    );
    let t = Target::start(Config::from_str(&toml).expect("config")).expect("target starts");
    let addrs = t.local_addrs();
    Tls {
        toml,
        required: addrs[0],
        allowed: addrs[1],
        target: Some(t),
    }
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        hostnqn: HOST.into(),
        queue_size: 32,
        io_queues: 2,
        io_timeout_ms: 5_000,
        connect_timeout_ms: 3_000,
        reconnect_attempts: 2,
        reconnect_delay_ms: 50,
        ..ConnectOptions::default()
    }
}

/// Writes and reads back every size from 512 B to 1 MiB.
fn verified_sizes(ctrl: &Controller, pass: u8) {
    let ns = ctrl.namespace(1).unwrap();
    let (mut off, mut size) = (0u64, 512usize);
    while size <= 1 << 20 {
        let data = rdmablk_testkit::block_pattern(off, size, pass);
        ns.write_at(off, &data).unwrap();
        let mut back = vec![0u8; size];
        ns.read_at(off, &mut back).unwrap();
        assert!(back == data, "{size} B at {off}: data differs");
        off += size as u64;
        size *= 2;
    }
}

fn url(addr: std::net::SocketAddr, sub: &str, query: &str) -> String {
    format!("tcp://{addr}/{sub}{query}")
}

#[test]
fn verified_io_under_both_suites_and_both_identity_versions() {
    let t = start();
    let mut pass = 0;
    for (sub, k) in [
        (SUB256, key(PskHash::Sha256, 1)),
        (SUB384, key(PskHash::Sha384, 2)),
    ] {
        for version in ["0", "1"] {
            for addr in [t.required, t.allowed] {
                pass += 1;
                let q = format!("?tls=1&psk={k}&tls_identity={version}&hdr_digest=1");
                let ctrl = Controller::connect_with(&url(addr, sub, &q), opts())
                    .unwrap_or_else(|e| panic!("{sub} identity v{version} via {addr}: {e}"));
                verified_sizes(&ctrl, pass);
                drop(ctrl);
            }
        }
    }
    // The key in a file, as operators install it.
    let dir = rdmablk_testkit::tmp_dir("tls-key");
    let file = dir.join("host.psk");
    std::fs::write(&file, key(PskHash::Sha256, 1)).unwrap();
    let q = format!("?psk_file={}&data_digest=1", file.display());
    let ctrl = Controller::connect_with(&url(t.required, SUB256, &q), opts()).unwrap();
    verified_sizes(&ctrl, 99);
}

/// A host's share of a worker's pass cut to a page (`tcp_pass_bytes_per_host = 4096`) under
/// TLS, with the target's records in OpenSSL's layer and in the kernel's where it has kTLS
/// (a connection's reads cut short every visit, its records read across many passes): every
/// size reads back.
#[test]
fn a_page_a_pass_under_tls_loses_nothing() {
    let k = key(PskHash::Sha256, 1);
    for layer in ["user", "auto"] {
        let t = start_custom(
            &format!(r#"tls_psk = "{k}""#),
            &format!("tcp_pass_bytes_per_host = 4096\ntls_record_layer = \"{layer}\""),
        );
        let q = format!("?psk={k}&data_digest=1");
        let ctrl = Controller::connect_with(&url(t.required, SUB256, &q), opts())
            .unwrap_or_else(|e| panic!("record layer {layer}: {e}"));
        verified_sizes(&ctrl, 31);
        drop(ctrl);
    }
}

#[test]
fn a_wrong_key_is_refused_and_never_falls_back_to_clear_text() {
    let t = start();
    for version in ["0", "1"] {
        for addr in [t.required, t.allowed] {
            let q = format!("?psk={}&tls_identity={version}", key(PskHash::Sha256, 9));
            let e = Controller::connect_with(&url(addr, SUB256, &q), opts())
                .err()
                .expect("refused");
            assert!(e.to_string().contains("TLS"), "v{version} {addr}: {e}");
        }
    }
    // The hash of the key must be the subsystem's key's.
    let q = format!("?psk={}", key(PskHash::Sha384, 2));
    assert!(Controller::connect_with(&url(t.required, SUB256, &q), opts()).is_err());
    // A host NQN the key was not configured for.
    let q = format!("?psk={}", key(PskHash::Sha256, 1));
    let mut o = opts();
    o.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001".into();
    assert!(Controller::connect_with(&url(t.required, SUB256, &q), o).is_err());
    // The target still serves the right key.
    let q = format!("?psk={}", key(PskHash::Sha256, 1));
    let ctrl = Controller::connect_with(&url(t.required, SUB256, &q), opts()).unwrap();
    verified_sizes(&ctrl, 3);
}

#[test]
fn clear_text_is_refused_on_a_required_port_and_served_on_an_allowed_one() {
    let t = start();
    let e = Controller::connect_with(&url(t.required, SUB256, ""), opts())
        .err()
        .expect("refused");
    eprintln!("clear text on the required port: {e}");
    // The allowed port serves clear text (the host list still applies: this host may).
    let ctrl = Controller::connect_with(&url(t.allowed, SUB256, ""), opts()).unwrap();
    verified_sizes(&ctrl, 5);
    // A raw ICReq on the required port: closed without an answer, before any capsule.
    let mut s = TcpStream::connect(t.required).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut icreq = [0u8; 128];
    icreq[0] = 0; // ICReq
    icreq[2] = 128;
    icreq[4] = 128;
    s.write_all(&icreq).unwrap();
    let mut b = [0u8; 16];
    assert!(matches!(s.read(&mut b), Ok(0) | Err(_)), "no ICResp");
}

#[test]
fn garbage_and_a_stalled_handshake_cost_another_host_nothing() {
    let t = start();
    // Garbage that starts like a TLS record, and plain garbage.
    for junk in [
        &b"\x16\x03\x01\x00\x10not a client hello at all"[..],
        b"GET / HTTP/1.1\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(t.required).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(junk).unwrap();
        let mut b = [0u8; 64];
        let started = Instant::now();
        // An alert, perhaps, then the close.
        while let Ok(n) = s.read(&mut b) {
            if n == 0 {
                break;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(4), "closed at once");
    }
    // Half a ClientHello, then nothing.
    let mut stalled = TcpStream::connect(t.required).unwrap();
    stalled
        .write_all(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        .unwrap();
    let opened = Instant::now();
    let q = format!("?psk={}", key(PskHash::Sha384, 2));
    let ctrl = Controller::connect_with(&url(t.required, SUB384, &q), opts()).unwrap();
    verified_sizes(&ctrl, 7);
    assert!(
        opened.elapsed() < Duration::from_millis(1500),
        "the stall did not block"
    );
    // The target lets the stalled one go at its connect timeout (1.5 s), not before.
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut b = [0u8; 16];
    let r = stalled.read(&mut b);
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    let waited = opened.elapsed();
    assert!(waited >= Duration::from_millis(1400), "{waited:?}");
    assert!(waited < Duration::from_secs(8), "{waited:?}");
}

#[test]
fn discovery_says_which_ports_require_tls() {
    let t = start();
    let mut o = opts();
    o.hostnqn = HOST.into();
    let entries = discover_with(&format!("tcp://{}", t.allowed), o).unwrap();
    let port = |a: std::net::SocketAddr| {
        entries
            .iter()
            .find(|e| e.subnqn == SUB256 && e.addr == Some(a))
            .unwrap_or_else(|| panic!("{a} listed: {entries:?}"))
    };
    let (r, a) = (port(t.required), port(t.allowed));
    assert_eq!((r.raw.treq, r.raw.tsas[0]), (1, 2), "required, TLS 1.3");
    assert_eq!((a.raw.treq, a.raw.tsas[0]), (2, 2), "not required, TLS 1.3");
    // TlsKey is public for programs that set it in ConnectOptions.
    assert!(TlsKey::parse("NVMeTLSkey-1:01:junk:").is_err());
}

/// A host of this test's own over TLS: the identity names (HOST, SUB256), the queue's Connect
/// names SUB384 (which HOST may use, under another key): Connect Invalid Host, as the key
/// authenticated the pair of its identity and no other.
#[test]
fn a_connect_for_another_subsystem_than_the_identity_is_refused() {
    use rdmablk::nvme::tls::session::{host_offer, TlsConn};
    use rdmablk::nvme::tls::IdentityVersion;
    use rdmablk::nvme::transport::tcp::{encode_capsule_cmd, IcReq, Negotiated, CAPSULE_CMD_HLEN};
    use rdmablk::nvme::{Connect, ConnectData, Cqe, InCapsuleSgl, Nqn, Sgl, Status};

    let t = start();
    let key = ConfiguredPsk::parse(&key(PskHash::Sha256, 1)).unwrap();
    let (psk, id) = host_offer(&key, IdentityVersion::V1, HOST, SUB256).unwrap();
    let mut c = TlsConn::client(psk, &id).unwrap();
    let mut s = TcpStream::connect(t.required).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while !c.handshake().unwrap() {
        c.write_to(&mut s).unwrap();
        c.read_from(&mut s).unwrap();
    }
    // Plaintext through TLS; reads until `n` bytes came.
    let send = |c: &mut TlsConn, s: &mut TcpStream, b: &[u8]| {
        c.write_plain(b).unwrap();
        assert!(c.write_to(s).unwrap());
    };
    let recv = |c: &mut TlsConn, s: &mut TcpStream, n: usize| {
        let mut out = vec![0u8; n];
        let mut got = 0;
        while got < n {
            match c.read_plain(&mut out[got..]).unwrap() {
                0 => {
                    c.read_from(s).unwrap();
                }
                k => got += k,
            }
        }
        out
    };
    let req = IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: false,
        ddgst: false,
        maxr2t: 0,
    };
    send(&mut c, &mut s, &req.encode());
    let _icresp = recv(&mut c, &mut s, 128);
    let data = ConnectData {
        hostid: [7; 16],
        cntlid: 0xFFFF,
        subnqn: Nqn::new(SUB384).unwrap(),
        hostnqn: Some(Nqn::new(HOST).unwrap()),
    }
    .encode();
    let sqe = Connect {
        qid: 0,
        sqsize: 31,
        cattr: 0,
        kato_ms: 5000,
    }
    .to_sqe(
        1,
        &Sgl::InCapsule(InCapsuleSgl {
            offset: 0,
            len: 1024,
        }),
    );
    let neg = Negotiated {
        hdgst: false,
        ddgst: false,
        pda: 0,
    };
    let mut h = [0u8; CAPSULE_CMD_HLEN];
    let l = encode_capsule_cmd(&sqe, data.len(), &neg, &mut h);
    let mut pdu = h.to_vec();
    pdu.resize(l.pdo, 0);
    pdu.extend_from_slice(&data);
    send(&mut c, &mut s, &pdu);
    let resp = recv(&mut c, &mut s, 24);
    assert_eq!(resp[0], 5, "a CapsuleResp");
    let cqe = Cqe::decode(resp[8..24].try_into().unwrap());
    assert_eq!(
        cqe.status,
        Status::CONNECT_INVALID_HOST.with_dnr(),
        "{cqe:?}"
    );
}

/// Rotation: the key file rewritten and the configuration applied again (a reload reads key
/// files again): the old key is refused at the next handshake, the new one taken, and the
/// controller connected with the old key goes on.
#[test]
fn a_rotated_key_applies_to_the_next_handshake() {
    let dir = rdmablk_testkit::tmp_dir("tls-rotate");
    let file = dir.join("host.psk");
    let (old, new) = (key(PskHash::Sha256, 1), key(PskHash::Sha256, 5));
    std::fs::write(&file, &old).unwrap();
    let t = start_with(&format!(r#"tls_psk_file = "{}""#, file.display()));
    let with = |k: &str| url(t.required, SUB256, &format!("?psk={k}"));
    let before = Controller::connect_with(&with(&old), opts()).unwrap();
    std::fs::write(&file, &new).unwrap();
    let handle = t.target.as_ref().unwrap().handle();
    handle
        .apply(Config::from_str(&t.toml).unwrap())
        .expect("reload");
    assert!(
        Controller::connect_with(&with(&old), opts()).is_err(),
        "the old key"
    );
    let after = Controller::connect_with(&with(&new), opts()).unwrap();
    verified_sizes(&after, 11);
    verified_sizes(&before, 12);
}

/// Which record layer carries the records: the kernel's (kTLS) where this kernel has it,
/// OpenSSL's in user space where it has not, as each side's `tls_record_layer` asks; counted
/// by the target per connection (admin queue and 2 I/O queues: 3), `kernel` refused with
/// why where the kernel cannot take the keys, and a reload sets the target's for the next
/// connections.
#[test]
fn the_record_layer_is_the_kernels_where_it_has_ktls_and_openssls_elsewhere() {
    let t = start();
    let handle = t.target.as_ref().unwrap().handle();
    let counts = || {
        let s = handle.status();
        let n = |layer: &str| s["tls_connections"][layer].as_u64().expect("a count");
        (n("kernel"), n("user"))
    };
    let ktls = rdmablk::nvme::tls::ktls::kernel_has_ktls();
    let k = key(PskHash::Sha256, 1);
    let with = |layer: &str| {
        url(
            t.required,
            SUB256,
            &format!("?psk={k}&tls_record_layer={layer}"),
        )
    };
    // The host's records in user space, the target's where `auto` puts them.
    let (k0, u0) = counts();
    let ctrl = Controller::connect_with(&with("user"), opts()).unwrap();
    verified_sizes(&ctrl, 21);
    drop(ctrl);
    let (k1, u1) = counts();
    assert_eq!((k1 - k0, u1 - u0), if ktls { (3, 0) } else { (0, 3) });
    // The host requires the kernel's.
    match Controller::connect_with(&with("kernel"), opts()) {
        Ok(ctrl) if ktls => verified_sizes(&ctrl, 22),
        Err(e) if !ktls => {
            let e = e.to_string();
            assert!(e.contains("required") && e.contains("TCP_ULP"), "{e}");
        }
        r => panic!("kTLS {ktls}: {:?}", r.map(|_| "connected")),
    }
    // The target requires the kernel's (a reload: the next connections).
    let toml = t.toml.replace(
        "connect_timeout_ms = 1500",
        "connect_timeout_ms = 1500\ntls_record_layer = \"kernel\"",
    );
    handle
        .apply(Config::from_str(&toml).unwrap())
        .expect("reload");
    let r = Controller::connect_with(&with("auto"), opts());
    assert_eq!(r.is_ok(), ktls, "kTLS {ktls}: {:?}", r.err());
    if let Ok(ctrl) = r {
        verified_sizes(&ctrl, 23);
    }
    let (k3, u3) = counts();
    assert_eq!(k3 - k1, if ktls { 6 } else { 0 });
    if ktls {
        assert_eq!(u3, u1, "nothing in user space");
    } else {
        // The host that required the kernel's records refused only after its handshake was
        // done: the target may have counted that handshake (in user space) before the host
        // left, or seen the host go first. The target's own refusal above (no kTLS for
        // `kernel`) counts nothing.
        assert!(
            u3 - u1 <= 1,
            "nothing in user space but that handshake: {}",
            u3 - u1
        );
    }
}
