//! In-band authentication (DH-HMAC-CHAP) against the real `rdmablk-target`, in-process, on
//! the soft provider by default (`RDMABLK_E2E_PROVIDER=verbs RDMABLK_E2E_ADDR=10.0.2.15` over
//! verbs): right key (unidirectional with the null group, bidirectional with ffdhe2048 and
//! SHA-384), wrong key, no key, wrong controller key, a host that needs no key; every
//! refusal leaves no controller behind.

use std::time::{Duration, Instant};

use rdmablk::nvme::auth::key::DhchapKey;
use rdmablk::nvme::auth::HashId;
use rdmablk_initiator::{ConnectOptions, Controller, Error};
use rdmablk_target::Target;

const NQN: &str = "nqn.2026-11.io.rdmablk:auth";
const BIDI_HOST: &str = "nqn.2026-11.io.rdmablk:host-bidi";
const UNI_HOST: &str = "nqn.2026-11.io.rdmablk:host-uni";
const PLAIN_HOST: &str = "nqn.2026-11.io.rdmablk:host-plain";

fn key(fill: u8, transform: Option<HashId>) -> DhchapKey {
    DhchapKey::new(&[fill; 32], transform).unwrap()
}

fn e2e_fabric() -> (String, String) {
    let kind = std::env::var("RDMABLK_E2E_PROVIDER").unwrap_or_else(|_| "soft".into());
    let addr = std::env::var("RDMABLK_E2E_ADDR").unwrap_or_else(|_| "127.0.0.1".into());
    (kind, addr)
}

fn start_target() -> Target {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    let (provider, address) = e2e_fabric();
    let toml = |port: u16| {
        format!(
            r#"
[[listener]]
provider = "{provider}"
address = "{address}"
port = {port}

[target]
worker_threads = 1
poll_mode = "interrupt"

[arena]
bytes = "32MiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = 16384
max_queues_per_controller = 3

[[subsystem]]
nqn = "{NQN}"
hosts = [
  {{ nqn = "{BIDI_HOST}", dhchap_key = "{bidi}", dhchap_ctrl_key = "{ctrl}", dhchap_hash = "sha384", dhchap_dhgroup = "ffdhe2048" }},
  {{ nqn = "{UNI_HOST}", dhchap_key = "{uni}" }},
  "{PLAIN_HOST}",
]

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = {{ kind = "ram", size = "1MiB" }}
"#,
            bidi = &*key(1, Some(HashId::Sha256)).to_dhhc1(),
            ctrl = &*key(2, Some(HashId::Sha512)).to_dhhc1(),
            uni = &*key(3, None).to_dhhc1(),
        )
    };
    Target::start_on_picked_port(toml, || rdmablk_testkit::free_port(&address))
        .expect("target starts")
}

fn url(t: &Target) -> String {
    let scheme = if e2e_fabric().0 == "verbs" {
        "rdma"
    } else {
        "soft"
    };
    format!("{scheme}://{}/{NQN}", t.local_addrs()[0])
}

fn opts(host: &str, k: Option<DhchapKey>, ctrl: Option<DhchapKey>) -> ConnectOptions {
    ConnectOptions {
        hostnqn: host.into(),
        io_queues: 2,
        queue_size: 16,
        max_io_bytes: 16384,
        buffer_pool_bytes: 1 << 20,
        reconnect_attempts: 0,
        connect_timeout_ms: 10_000,
        dhchap_key: k,
        dhchap_ctrl_key: ctrl,
        ..ConnectOptions::default()
    }
}

fn io_works(c: &Controller) {
    let ns = c.namespace(1).unwrap();
    ns.write_at(4096, &[0x5A; 4096]).unwrap();
    let mut back = [0u8; 4096];
    ns.read_at(4096, &mut back).unwrap();
    assert_eq!(back, [0x5A; 4096]);
}

fn auth_error(r: Result<Controller, Error>) -> String {
    match r {
        Ok(_) => panic!("connected without the right credentials"),
        Err(e @ Error::Auth { .. }) => e.to_string(),
        Err(e) => panic!("expected an authentication error, got {e:?}"),
    }
}

fn wait_no_controllers(t: &Target) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.controllers() != 0 {
        assert!(
            Instant::now() < deadline,
            "{} controllers left",
            t.controllers()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn right_keys_connect_and_do_io() {
    let t = start_target();
    let bidi = Controller::connect_with(
        &url(&t),
        opts(
            BIDI_HOST,
            Some(key(1, Some(HashId::Sha256))),
            Some(key(2, Some(HashId::Sha512))),
        ),
    )
    .expect("bidirectional, ffdhe2048, SHA-384");
    io_works(&bidi);
    // The controller authenticates itself only when asked: the same host without a
    // controller key connects too.
    let host_only = Controller::connect_with(
        &url(&t),
        opts(BIDI_HOST, Some(key(1, Some(HashId::Sha256))), None),
    )
    .expect("unidirectional");
    io_works(&host_only);
    let uni = Controller::connect_with(&url(&t), opts(UNI_HOST, Some(key(3, None)), None))
        .expect("null group, untransformed key");
    io_works(&uni);
    // A host listed without a key needs none; one that has a key anyway is not asked for it.
    let plain = Controller::connect_with(&url(&t), opts(PLAIN_HOST, None, None)).unwrap();
    io_works(&plain);
    let plain_keyed =
        Controller::connect_with(&url(&t), opts(PLAIN_HOST, Some(key(9, None)), None)).unwrap();
    io_works(&plain_keyed);
    drop((bidi, host_only, uni, plain, plain_keyed));
    wait_no_controllers(&t);
}

#[test]
fn wrong_missing_and_impostor_keys_are_refused() {
    let t = start_target();
    let e = auth_error(Controller::connect_with(
        &url(&t),
        opts(UNI_HOST, Some(key(4, None)), None),
    ));
    assert!(
        e.contains("refused") && e.contains("authentication failed"),
        "{e}"
    );
    // Same secret, other transformation hash: a different key.
    let e = auth_error(Controller::connect_with(
        &url(&t),
        opts(UNI_HOST, Some(key(3, Some(HashId::Sha256))), None),
    ));
    assert!(e.contains("refused"), "{e}");
    let e = auth_error(Controller::connect_with(
        &url(&t),
        opts(UNI_HOST, None, None),
    ));
    assert!(e.contains("no host key"), "{e}");
    // The host proves itself, but the controller does not hold the key the host expects.
    let e = auth_error(Controller::connect_with(
        &url(&t),
        opts(
            BIDI_HOST,
            Some(key(1, Some(HashId::Sha256))),
            Some(key(7, Some(HashId::Sha512))),
        ),
    ));
    assert!(e.contains("controller's response is wrong"), "{e}");
    // A controller with no controller key for a host that asks for one.
    let e = auth_error(Controller::connect_with(
        &url(&t),
        opts(UNI_HOST, Some(key(3, None)), Some(key(2, None))),
    ));
    assert!(e.contains("refused"), "{e}");
    wait_no_controllers(&t);
    // The refusals broke nothing: the right key still works.
    let ok = Controller::connect_with(&url(&t), opts(UNI_HOST, Some(key(3, None)), None)).unwrap();
    io_works(&ok);
}

#[test]
fn key_files_in_urls() {
    let t = start_target();
    let dir = std::env::temp_dir().join(format!("rdmablk-auth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("host.key");
    std::fs::write(&path, format!("{}\n", &*key(3, None).to_dhhc1())).unwrap();
    let mut o = opts(UNI_HOST, None, None);
    let u = format!("{}?dhchap_key_file={}", url(&t), path.display());
    let parsed = rdmablk_initiator::TargetUrl::parse_with(&u, &mut o).unwrap();
    assert!(o.dhchap_key.is_some());
    let c = Controller::connect_with(&parsed.to_string(), o).unwrap();
    io_works(&c);
    let e = rdmablk_initiator::TargetUrl::parse_with(
        &format!("{}?dhchap_key_file={}", url(&t), dir.join("nope").display()),
        &mut opts(UNI_HOST, None, None),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("dhchap_key_file") && e.contains("nope"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
