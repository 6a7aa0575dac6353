use super::*;
use crate::nvmf::transport::TRANSPORTS;

const MINIMAL: &str = r#"
[[listener]]
provider = "soft"
address = "127.0.0.1"

[arena]
bytes = "64MiB"

[[subsystem]]
nqn = "nqn.2026-11.io.rdmablk:test"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
backend = { kind = "ram", size = "16MiB" }
"#;

fn with(extra_top: &str, extra_ns: &str) -> String {
    // Tables must follow plain keys, so splice into the right places.
    MINIMAL
        .replacen("[[listener]]", &format!("{extra_top}\n[[listener]]"), 1)
        .replace("nsid = 1\n", &format!("nsid = 1\n{extra_ns}\n"))
}

fn problems(text: &str) -> Vec<Problem> {
    match Config::from_str(text) {
        Err(ConfigError::Invalid { problems, .. }) => problems,
        other => panic!("expected validation problems, got {other:?}"),
    }
}

fn has_problem(text: &str, key: &str) -> bool {
    let p = problems(text);
    let found = p.iter().any(|p| p.key == key);
    if !found {
        eprintln!("problems: {p:#?}");
    }
    found
}

#[test]
fn minimal_config_gets_the_documented_defaults() {
    let c = Config::from_str(MINIMAL).unwrap();
    assert_eq!(c.listeners[0].port, 4420);
    assert_eq!(c.listeners[0].provider, Some(Provider::Soft));
    assert_eq!(c.limits, Limits::default());
    assert_eq!(c.limits.max_queue_depth, 128);
    assert_eq!(c.limits.max_io_size, 128 << 10);
    assert_eq!(c.limits.in_capsule_data_size, 4096);
    assert_eq!(c.limits.max_queues_per_controller, 128);
    assert_eq!(c.target, TargetConfig::default());
    assert!(c.arena.lock && !c.arena.hugepages);
    assert_eq!(c.arena.bytes.bytes(), 64 << 20);
    let ns = &c.subsystems[0].namespaces[0];
    assert_eq!(ns.block_size, 4096);
    assert_eq!(
        ns.backend,
        BackendConfig::Ram(SizedBackendConfig {
            size: ByteSize(16 << 20)
        })
    );
}

#[test]
fn unknown_keys_are_refused_by_name_with_the_line() {
    let text = MINIMAL.replace("bytes = \"64MiB\"", "bytes = \"64MiB\"\nhugepage = true");
    let e = Config::from_str(&text).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("hugepage"), "{msg}");
    assert!(
        matches!(e, ConfigError::Parse { line: Some(8), .. }),
        "{e:?}"
    );
    // Inside the tagged backend table too.
    let text = MINIMAL.replace("size = \"16MiB\"", "size = \"16MiB\", sise = 1");
    let msg = Config::from_str(&text).unwrap_err().to_string();
    assert!(msg.contains("sise"), "{msg}");
}

#[test]
fn a_wrong_type_names_its_key_and_shows_its_line() {
    // A plain key.
    let text = MINIMAL.replace("nsid = 1", "nsid = \"one\"");
    let msg = Config::from_str(&text).unwrap_err().to_string();
    assert!(
        msg.starts_with("line 14: nsid: invalid type: string \"one\"")
            && msg.ends_with("(in `nsid = \"one\"`)"),
        "{msg}"
    );
    // Inside the tagged backend table, where serde reports the whole table: the key whose
    // value the message quotes.
    let text = MINIMAL.replace("size = \"16MiB\"", "size = 12.5");
    let msg = Config::from_str(&text).unwrap_err().to_string();
    assert!(
        msg.starts_with("line 15: backend.size: invalid type: floating point `12.5`"),
        "{msg}"
    );
    let text = MINIMAL.replace(
        "{ kind = \"ram\", size = \"16MiB\" }",
        "{ kind = \"block\", path = \"/dev/x\", poll = \"yes\" }",
    );
    let msg = Config::from_str(&text).unwrap_err().to_string();
    assert!(
        msg.starts_with("line 15: backend.poll: invalid type: string \"yes\""),
        "{msg}"
    );
    // Two keys with the quoted value: the table's key only.
    let text = MINIMAL.replace(
        "{ kind = \"ram\", size = \"16MiB\" }",
        "{ kind = \"block\", path = \"yes\", poll = \"yes\" }",
    );
    let msg = Config::from_str(&text).unwrap_err().to_string();
    assert!(msg.starts_with("line 15: backend: invalid type"), "{msg}");
}

#[test]
fn from_file_names_the_path() {
    let dir = std::env::temp_dir().join(format!("rdmablk-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.toml");
    std::fs::write(&p, MINIMAL.replace("[arena]", "[arena]\nfoo = 1")).unwrap();
    let msg = Config::from_file(&p).unwrap_err().to_string();
    assert!(msg.contains("bad.toml") && msg.contains("foo"), "{msg}");
    let msg = Config::from_file(dir.join("missing.toml"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("missing.toml"), "{msg}");
    std::fs::write(&p, MINIMAL.replace("bytes = \"64MiB\"", "bytes = \"1MiB\"")).unwrap();
    let msg = Config::from_file(&p).unwrap_err().to_string();
    assert!(
        msg.contains("bad.toml") && msg.contains("arena.bytes"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn arena_smaller_than_one_window_is_refused_with_the_size_needed() {
    let text = MINIMAL.replace(
        "bytes = \"64MiB\"",
        "bytes = \"16MiB\"\ndata_bytes = 16515072",
    );
    let p = problems(&text);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "arena.bytes");
    // 128 x (64 + 4096) receive + 128 x 16 response, page-rounded.
    assert!(
        p[0].message.contains(&ByteSize(536_576).to_string()),
        "{}",
        p[0]
    );
    // Lowering the depth makes it fit.
    let text = with("[limits]\nmax_queue_depth = 64", "").replace(
        "bytes = \"64MiB\"",
        "bytes = \"16MiB\"\ndata_bytes = 16252928",
    );
    Config::from_str(&text).unwrap();
}

#[test]
fn data_pools_too_small_for_two_of_the_largest_transfers_are_refused() {
    let text = with(
        "[target]\nworker_threads = 4\n[limits]\nmax_io_size = 8388608",
        "",
    );
    let p = problems(&text);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "arena.data_bytes");
    assert!(p[0].message.contains("per worker"), "{}", p[0]);
}

#[test]
fn limits_out_of_range_are_refused() {
    for (limits, key) in [
        ("max_queue_depth = 0", "limits.max_queue_depth"),
        ("max_queue_depth = 1025", "limits.max_queue_depth"),
        ("max_queue_depth = 16", "limits.max_queue_depth"),
        ("max_io_size = 6000", "limits.max_io_size"),
        ("max_io_size = 16777216", "limits.max_io_size"),
        ("in_capsule_data_size = 100", "limits.in_capsule_data_size"),
        (
            "in_capsule_data_size = 32768",
            "limits.in_capsule_data_size",
        ),
        (
            "max_io_size = 8192\nin_capsule_data_size = 16384",
            "limits.in_capsule_data_size",
        ),
        (
            "max_queues_per_controller = 1",
            "limits.max_queues_per_controller",
        ),
        ("max_connections = 0", "limits.max_connections"),
        ("push_window_bytes = 1073741825", "limits.push_window_bytes"),
    ] {
        let text = with(&format!("[limits]\n{limits}"), "");
        assert!(has_problem(&text, key), "{limits} not refused as {key}");
    }
    let text = with("[target]\nworker_threads = 0", "");
    assert!(has_problem(&text, "target.worker_threads"));
    let text = with("[target]\nkeep_alive_granularity_ms = 150", "");
    assert!(has_problem(&text, "target.keep_alive_granularity_ms"));
    for bad in ["tcp_place_from = 512", "tcp_place_from = 131073"] {
        let text = with(&format!("[target]\n{bad}"), "");
        assert!(has_problem(&text, "target.tcp_place_from"), "{bad}");
    }
    for good in ["tcp_place_from = 0", "tcp_place_from = 16384"] {
        Config::from_str(&with(&format!("[target]\n{good}"), "")).unwrap();
    }
    for bad in [
        "tcp_pass_bytes_per_host = 4095",
        "tcp_pass_bytes_per_host = 67108865",
    ] {
        let text = with(&format!("[target]\n{bad}"), "");
        assert!(
            has_problem(&text, "target.tcp_pass_bytes_per_host"),
            "{bad}"
        );
    }
    for good in [
        "tcp_pass_bytes_per_host = 0",
        "tcp_pass_bytes_per_host = 4096",
        "tcp_pass_bytes_per_host = 67108864",
    ] {
        Config::from_str(&with(&format!("[target]\n{good}"), "")).unwrap();
    }
    let text = with("[target]\npoll_spin_us = 10001", "");
    assert!(has_problem(&text, "target.poll_spin_us"));
    let text = with(
        "[target]\npoll_mode = \"adaptive\"\npoll_spin_us = 10000",
        "",
    );
    Config::from_str(&text).unwrap();
}

#[test]
fn io_size_must_be_a_multiple_of_every_block_size() {
    // 4096 multiples are always multiples of 512 and 4096; a bad block size is named.
    let text = with("", "block_size = 1024");
    assert!(has_problem(&text, "subsystem[0].namespace[0].block_size"));
    let text = with("", "block_size = 512");
    Config::from_str(&text).unwrap();
}

#[test]
fn namespace_ids_are_checked() {
    let text = MINIMAL.replace("nsid = 1", "nsid = 0");
    assert!(has_problem(&text, "subsystem[0].namespace[0].nsid"));
    let text = MINIMAL.replace("nsid = 1", "nsid = 4294967295");
    assert!(has_problem(&text, "subsystem[0].namespace[0].nsid"));
    let text = format!(
        "{MINIMAL}\n[[subsystem.namespace]]\nnsid = 1\nbackend = {{ kind = \"null\", size = 4096 }}\n"
    );
    let p = problems(&text);
    assert!(
        p.iter()
            .any(|p| p.key == "subsystem[0].namespace[1].nsid" && p.message.contains("used twice")),
        "{p:?}"
    );
}

#[test]
fn nqns_and_hosts_are_checked() {
    // nvmet's names (blktests uses "blktests-subsystem-1") load; only unusable ones fail.
    let text = MINIMAL.replace("nqn.2026-11.io.rdmablk:test", "blktests-subsystem-1");
    let cfg = Config::from_str(&text).expect("nvmet's subsystem names load");
    assert_eq!(cfg.subsystems[0].nqn, "blktests-subsystem-1");
    let text = MINIMAL.replace("io.rdmablk:test", "io.rdmablk:has space");
    assert!(has_problem(&text, "subsystem[0].nqn"));
    let dup = format!(
        "{MINIMAL}\n[[subsystem]]\nnqn = \"nqn.2026-11.io.rdmablk:test\"\nallow_any_host = true\n"
    );
    assert!(has_problem(&dup, "subsystem[1].nqn"));
    let text = MINIMAL.replace("allow_any_host = true", "allow_any_host = false");
    assert!(has_problem(&text, "subsystem[0].hosts"));
    let text = MINIMAL.replace(
        "allow_any_host = true",
        "hosts = [\"nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6\", \"bad host\"]",
    );
    let p = problems(&text);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].key, "subsystem[0].hosts[1]");
    let text = MINIMAL.replace("nqn.2026-11.io.rdmablk:test", DISCOVERY_NQN);
    assert!(has_problem(&text, "subsystem[0].nqn"));
}

#[test]
fn backends_are_checked() {
    let text = MINIMAL.replace("size = \"16MiB\"", "size = 1000");
    assert!(has_problem(&text, "subsystem[0].namespace[0].backend.size"));
    let text = MINIMAL.replace(
        "backend = { kind = \"ram\", size = \"16MiB\" }",
        "backend = { kind = \"block\", path = \"/tmp/disk\" }",
    );
    assert!(has_problem(&text, "subsystem[0].namespace[0].backend.path"));
    let text = MINIMAL.replace(
        "backend = { kind = \"ram\", size = \"16MiB\" }",
        "backend = { kind = \"file\", path = \"disk.img\" }",
    );
    assert!(has_problem(&text, "subsystem[0].namespace[0].backend.path"));
    let text = MINIMAL.replace(
        "backend = { kind = \"ram\", size = \"16MiB\" }",
        "backend = { kind = \"tape\" }",
    );
    let msg = Config::from_str(&text).unwrap_err().to_string();
    assert!(msg.contains("tape"), "{msg}");
    // nvme: the generic character device, and one of three completion modes.
    let nvme = |b: &str| MINIMAL.replace("backend = { kind = \"ram\", size = \"16MiB\" }", b);
    let c = Config::from_str(&nvme(
        "backend = { kind = \"nvme\", path = \"/dev/ng0n1\", completions = \"poll\" }",
    ))
    .unwrap();
    let BackendConfig::Nvme(n) = &c.subsystems[0].namespaces[0].backend else {
        panic!("not an nvme backend");
    };
    assert_eq!(n.completions, crate::config::NvmeCompletions::Poll);
    let c = Config::from_str(&nvme(
        "backend = { kind = \"nvme\", path = \"/dev/ng1n2\" }",
    ))
    .unwrap();
    let BackendConfig::Nvme(n) = &c.subsystems[0].namespaces[0].backend else {
        panic!("not an nvme backend");
    };
    assert_eq!(n.completions, crate::config::NvmeCompletions::Auto);
    let text = nvme("backend = { kind = \"nvme\", path = \"/dev/nvme0n1\" }");
    let p = problems(&text);
    assert!(
        p.iter()
            .any(|p| p.key == "subsystem[0].namespace[0].backend.path"
                && p.message.contains("kind = \"block\"")),
        "{p:?}"
    );
    let text = nvme("backend = { kind = \"nvme\", path = \"/dev/ng0n1\", completions = \"spin\" }");
    let msg = Config::from_str(&text).unwrap_err().to_string();
    assert!(msg.contains("spin"), "{msg}");
    // block: poll is off unless asked for, and a boolean.
    let block = |extra: &str| {
        let c = Config::from_str(&nvme(&format!(
            "backend = {{ kind = \"block\", path = \"/dev/nvme0n1\"{extra} }}"
        )))?;
        let BackendConfig::Block(b) = &c.subsystems[0].namespaces[0].backend else {
            panic!("not a block backend");
        };
        Ok::<bool, crate::config::ConfigError>(b.poll)
    };
    assert!(!block("").unwrap());
    assert!(block(", poll = true").unwrap());
    let msg = block(", poll = \"yes\"").unwrap_err().to_string();
    assert!(msg.contains("expected a boolean"), "{msg}");
}

#[test]
fn error_backend_nests_and_checks_its_faults() {
    let ns = r#"
[subsystem.namespace.backend]
kind = "error"
seed = 7
latency_us = 100
fail_reads = { rate = 0.5 }
fail_flushes = { nth = 3, sticky = true }
inner = { kind = "ram", size = "1MiB" }
"#;
    let text = MINIMAL.replace("backend = { kind = \"ram\", size = \"16MiB\" }", ns);
    let c = Config::from_str(&text).unwrap();
    let BackendConfig::Error(e) = &c.subsystems[0].namespaces[0].backend else {
        panic!("not an error backend");
    };
    assert_eq!(e.seed, 7);
    assert_eq!(e.fail_flushes.nth, Some(3));
    assert!(e.fail_flushes.sticky && !e.fail_writes.is_active());
    let bad = text
        .replace("rate = 0.5", "rate = 1.5")
        .replace("nth = 3", "nth = 0");
    let p = problems(&bad);
    let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
    assert!(
        keys.contains(&"subsystem[0].namespace[0].backend.fail_reads.rate"),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"subsystem[0].namespace[0].backend.fail_flushes.nth"),
        "{keys:?}"
    );
    let bad = text.replace("size = \"1MiB\"", "size = \"1MiB\", colour = 1");
    assert!(Config::from_str(&bad)
        .unwrap_err()
        .to_string()
        .contains("colour"));
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = with(
        "[limits]\nmax_queue_depth = 0\nin_capsule_data_size = 7",
        "block_size = 7",
    );
    let p = problems(&text);
    assert!(p.len() >= 3, "{p:?}");
    let msg = ConfigError::Invalid {
        path: None,
        problems: p,
    }
    .to_string();
    assert!(
        msg.contains("limits.max_queue_depth") && msg.contains("block_size"),
        "{msg}"
    );
}

#[test]
fn device_limits_are_rechecked_at_start() {
    let c = Config::from_str(MINIMAL).unwrap();
    let mut attr = rdmablk::fabric::DeviceAttr {
        name: "rxe0".into(),
        max_qp: 1024,
        max_qp_wr: 256,
        max_sge: 32,
        max_cqe: 4096,
        max_cq: 1024,
        max_mr: 1024,
        max_mr_size: u64::MAX,
        max_mw: 1024,
        max_qp_rd_atom: 16,
        max_qp_init_rd_atom: 16,
        mw_type2: true,
        mem_mgt_extensions: true,
        port_active: true,
        max_srq: 1024,
        max_srq_wr: 16384,
        max_srq_sge: 27,
    };
    c.check_device(&attr, 2).unwrap();
    let e = c.check_device(&attr, 3).unwrap_err();
    assert_eq!(e.problems()[0].key, "limits.max_queue_depth");
    assert!(e.to_string().contains("rxe0"));
    attr.max_mr_size = 1 << 20;
    assert!(c.check_device(&attr, 1).is_err());
}

fn repo_config(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("config")
        .join(name)
}

#[test]
fn example_files_load_and_validate() {
    let full = Config::from_file(repo_config("rdmablk-target.toml")).unwrap();
    assert!(!full.subsystems.is_empty());
    let kinds: Vec<&str> = full
        .subsystems
        .iter()
        .flat_map(|s| s.namespaces.iter().map(|n| n.backend.kind()))
        .collect();
    for k in ["file", "block", "null", "ram", "error"] {
        assert!(
            kinds.contains(&k),
            "the documented example lacks a {k} backend"
        );
    }
    let quick = Config::from_file(repo_config("quickstart.toml")).unwrap();
    // The two transports a machine without an RDMA NIC has: soft RDMA and NVMe/TCP.
    assert_eq!(quick.listeners.len(), 2);
    assert_eq!(quick.listeners[0].provider, Some(Provider::Soft));
    assert_eq!(quick.listeners[0].port, 4420);
    assert_eq!(
        (quick.listeners[1].transport, quick.listeners[1].port),
        (transport("tcp"), 4421)
    );
    assert_eq!(quick.subsystems[0].nqn, "nqn.2026-11.io.rdmablk:quickstart");
    assert!(quick.subsystems[0].allow_any_host);
    let ns = &quick.subsystems[0].namespaces[0];
    assert_eq!(ns.block_size, 4096);
    assert_eq!(
        ns.backend,
        BackendConfig::Ram(SizedBackendConfig {
            size: ByteSize(256 << 20)
        })
    );
}

#[test]
fn hosts_with_dhchap_keys() {
    const KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6";
    let hosts =
        |entries: &str| MINIMAL.replace("allow_any_host = true", &format!("hosts = [{entries}]"));
    let ok = hosts(&format!(
        r#""nqn.2026-11.io.rdmablk:plain", {{ nqn = "{HOST}", dhchap_key = "{KEY}", dhchap_ctrl_key = "{KEY}", dhchap_hash = "hmac(sha512)", dhchap_dhgroup = "ffdhe4096" }}"#
    ));
    let cfg = Config::from_str(&ok).unwrap();
    let hosts_cfg = &cfg.subsystems[0].hosts;
    assert_eq!(hosts_cfg[1].nqn(), HOST);
    let auth = hosts_cfg[1].resolve().unwrap().unwrap();
    assert_eq!(auth.hash, rdmablk::nvme::auth::HashId::Sha512);
    assert!(auth.ctrl_key.is_some());
    assert!(hosts_cfg[0].resolve().unwrap().is_none());
    // Secrets stay out of Debug output.
    assert!(!format!("{cfg:?}").contains("AAECAw"));

    let bad_crc = hosts(&format!(
        r#"{{ nqn = "{HOST}", dhchap_key = "{}" }}"#,
        KEY.replace("KfiaR", "KfiaS")
    ));
    let p = problems(&bad_crc);
    assert_eq!(p[0].key, "subsystem[0].hosts[0]");
    assert!(
        p[0].message.contains("CRC") && !p[0].message.contains("AAECAw"),
        "{p:?}"
    );
    for entry in [
        format!(r#"{{ nqn = "{HOST}", dhchap_key = "{KEY}", dhchap_key_file = "/k" }}"#),
        format!(r#"{{ nqn = "{HOST}", dhchap_ctrl_key = "{KEY}" }}"#),
        format!(r#"{{ nqn = "{HOST}", dhchap_key = "{KEY}", dhchap_dhgroup = "ffdhe1024" }}"#),
        format!(r#"{{ nqn = "{HOST}", dhchap_key_file = "/nonexistent/rdmablk.key" }}"#),
    ] {
        assert!(
            has_problem(&hosts(&entry), "subsystem[0].hosts[0]"),
            "{entry}"
        );
    }
}

#[test]
fn rbd_backend_gets_its_defaults_and_bad_keys_are_named() {
    let rbd = |table: &str| MINIMAL.replace("{ kind = \"ram\", size = \"16MiB\" }", table);
    let ok = rbd(r#"{ kind = "rbd", pool = "rbd", image = "img1" }"#);
    if cfg!(feature = "rbd") {
        let c = Config::from_str(&ok).unwrap();
        let BackendConfig::Rbd(r) = &c.subsystems[0].namespaces[0].backend else {
            panic!("not rbd")
        };
        assert_eq!(r.ceph_conf, PathBuf::from("/etc/ceph/ceph.conf"));
        assert_eq!((r.user.as_str(), r.keyring.as_ref()), ("admin", None));
        assert_eq!((r.connect_timeout_s, r.op_timeout_s), (10, 30));
    } else {
        assert!(has_problem(&ok, "subsystem[0].namespace[0].backend.kind"));
    }
    let key = |k: &str| format!("subsystem[0].namespace[0].backend.{k}");
    for (table, bad) in [
        (r#"{ kind = "rbd", pool = "", image = "i" }"#, "pool"),
        (r#"{ kind = "rbd", pool = "p", image = "a/b" }"#, "image"),
        (
            r#"{ kind = "rbd", pool = "p", image = "i", user = "client.admin" }"#,
            "user",
        ),
        (
            r#"{ kind = "rbd", pool = "p", image = "i", ceph_conf = "ceph.conf" }"#,
            "ceph_conf",
        ),
        (
            r#"{ kind = "rbd", pool = "p", image = "i", keyring = "k" }"#,
            "keyring",
        ),
        (
            r#"{ kind = "rbd", pool = "p", image = "i", connect_timeout_s = 0 }"#,
            "connect_timeout_s",
        ),
        (
            r#"{ kind = "rbd", pool = "p", image = "i", op_timeout_s = 9999 }"#,
            "op_timeout_s",
        ),
    ] {
        assert!(has_problem(&rbd(table), &key(bad)), "{table}");
    }
    // A missing required key is a parse error naming it.
    let err = Config::from_str(&rbd(r#"{ kind = "rbd", pool = "rbd" }"#)).unwrap_err();
    assert!(err.to_string().contains("image"), "{err}");
}

/// A newcomer's first file (a listener, a subsystem, a RAM namespace) needs no `[arena]`: the
/// arena is sized from the limits, 16 parcels at the largest queue depth, and says so.
#[test]
fn a_config_without_arena_gets_one_sized_from_the_limits() {
    let text = MINIMAL.replace("[arena]\nbytes = \"64MiB\"\n", "");
    let c = Config::from_str(&text).unwrap();
    let parcel = c.max_parcel_layout().total_bytes as u64;
    assert!(c.arena.sized_from_limits && c.arena.lock && !c.arena.hugepages);
    // The data pools (128 MiB) and 64 RDMA parcels (receive and response slots only).
    assert_eq!(parcel, 536_576);
    assert_eq!(c.data_pool_bytes(), 128 << 20);
    assert_eq!(
        c.arena.bytes.bytes(),
        ((128 << 20) + 64 * parcel).next_multiple_of(2 << 20)
    );
    assert_eq!(c.data_pool_bytes_per_worker(), 128 << 20);
    // Fewer connections allowed, fewer parcels; a table without `bytes` is sized the same way.
    let few = text.replace(
        "[[listener]]",
        "[limits]\nmax_connections = 3\n[[listener]]",
    );
    let few =
        Config::from_str(&few.replace("[[subsystem]]", "[arena]\nlock = false\n[[subsystem]]"))
            .unwrap();
    assert!(few.arena.sized_from_limits && !few.arena.lock);
    assert_eq!(
        few.arena.bytes.bytes(),
        ((128 << 20) + 3 * parcel).next_multiple_of(2 << 20)
    );
    // The pools given, the arena holds them beside the parcels; several workers share them.
    let given = text.replace(
        "[[listener]]",
        "[target]\nworker_threads = 4\n[arena]\ndata_bytes = \"32MiB\"\n[[listener]]",
    );
    let given = Config::from_str(&given).unwrap();
    assert_eq!(given.data_pool_bytes(), 32 << 20);
    assert_eq!(given.data_pool_bytes_per_worker(), 8 << 20);
    assert_eq!(
        given.arena.bytes.bytes(),
        ((32 << 20) + 64 * parcel).next_multiple_of(2 << 20)
    );
    // A size given is kept as given.
    assert!(!Config::from_str(MINIMAL).unwrap().arena.sized_from_limits);
}

/// `[[listener]] transport` names the same transports as `[[referral]] transport`: `rdma` is
/// the default and needs a provider; `tcp` takes none.
#[test]
fn listener_transport_is_rdma_by_default_and_provider_belongs_to_rdma() {
    let c = Config::from_str(MINIMAL).unwrap();
    assert_eq!(c.listeners[0].transport, transport("rdma"));
    let rdma = MINIMAL.replace("[[listener]]\n", "[[listener]]\ntransport = \"rdma\"\n");
    assert_eq!(
        Config::from_str(&rdma).unwrap().listeners[0].transport,
        transport("rdma")
    );
    // tcp with the provider the minimal file has: refused, naming the key and the fix.
    let tcp = MINIMAL.replace("[[listener]]\n", "[[listener]]\ntransport = \"tcp\"\n");
    let p = problems(&tcp);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].key, "listener[0].provider");
    assert!(p[0].message.contains("remove it"), "{}", p[0].message);
    // tcp without one: fine.
    let tcp = tcp.replace("provider = \"soft\"\n", "");
    let c = Config::from_str(&tcp).unwrap();
    assert_eq!(
        (c.listeners[0].transport, c.listeners[0].provider),
        (transport("tcp"), None)
    );
    // rdma without one: refused.
    let p = problems(&MINIMAL.replace("provider = \"soft\"\n", ""));
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].key, "listener[0].provider");
    assert!(p[0].message.contains("\"verbs\""), "{}", p[0].message);
    // The same address and port on both transports are two listeners.
    let both = format!(
        "{}\n[[listener]]\ntransport = \"tcp\"\naddress = \"127.0.0.1\"\n",
        MINIMAL
    );
    assert!(Config::from_str(&both).is_ok());
}

/// `tls` belongs to tcp listeners: an rdma or loop listener with it is refused, naming the key.
#[test]
fn tls_is_for_tcp_listeners_only() {
    let rdma = MINIMAL.replace("[[listener]]\n", "[[listener]]\ntls = \"required\"\n");
    let p = problems(&rdma);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].key, "listener[0].tls");
    assert!(p[0].message.contains("rdma listener"), "{}", p[0].message);
    let lp = MINIMAL.replace(
        "[[listener]]\nprovider = \"soft\"\n",
        "[[listener]]\ntransport = \"loop\"\ntls = \"allowed\"\n",
    );
    let p = problems(&lp);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].key, "listener[0].tls");
    let tcp = MINIMAL.replace(
        "[[listener]]\nprovider = \"soft\"\n",
        "[[listener]]\ntransport = \"tcp\"\ntls = \"allowed\"\n",
    );
    assert!(Config::from_str(&tcp).is_ok());
}

/// `loop` listeners take no provider either, and a referral cannot point to a loop target
/// (it lives in its own process).
#[test]
fn loop_listener_takes_no_provider_and_is_no_referral() {
    let lp = MINIMAL.replace("[[listener]]\n", "[[listener]]\ntransport = \"loop\"\n");
    let p = problems(&lp);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].key, "listener[0].provider");
    assert!(p[0].message.contains("loop listener"), "{}", p[0].message);
    let c = Config::from_str(&lp.replace("provider = \"soft\"\n", "")).unwrap();
    assert_eq!(c.listeners[0].transport, transport("loop"));
    let referral =
        format!("{MINIMAL}\n[[referral]]\naddress = \"10.0.0.9\"\ntransport = \"loop\"\n");
    let p = problems(&referral);
    assert_eq!(p.len(), 1, "{p:#?}");
    assert_eq!(p[0].key, "referral[0].transport");
}

/// The transport of the table named `name`.
fn transport(name: &str) -> Transport {
    Transport::named(name).expect(name)
}

/// `transport` takes the names of the transport table's lines, and nothing else: an unknown
/// one is refused when the file is read, with the names it could have been.
#[test]
fn transport_names_are_the_tables() {
    let names: Vec<&str> = TRANSPORTS.iter().map(|k| k.name()).collect();
    assert_eq!(names, ["rdma", "tcp", "loop"]);
    for name in names {
        assert_eq!(transport(name).as_str(), name);
    }
    assert_eq!(Transport::default(), transport(DEFAULT_TRANSPORT));
    let bad = MINIMAL.replace("[[listener]]\n", "[[listener]]\ntransport = \"udp\"\n");
    let e = Config::from_str(&bad).unwrap_err().to_string();
    assert!(
        e.contains("unknown variant `udp`, expected one of `rdma`, `tcp`, `loop`"),
        "{e}"
    );
}

#[test]
fn shared_reservations_must_be_an_absolute_path() {
    assert!(has_problem(
        &with("", r#"shared_reservations = "shared/ns1""#),
        "subsystem[0].namespace[0].shared_reservations"
    ));
    let c = Config::from_str(&with("", r#"shared_reservations = "/var/lib/rdmablk/ns1""#))
        .expect("an absolute path is fine");
    assert_eq!(
        c.subsystems[0].namespaces[0].shared_reservations.as_deref(),
        Some(std::path::Path::new("/var/lib/rdmablk/ns1"))
    );
}

#[test]
fn worker_cpus_take_a_linux_cpu_list_this_process_may_use() {
    let allowed = allowed_cpus().expect("sched_getaffinity");
    let first = allowed.cpus()[0];
    let cfg = Config::from_str(&with(&format!("[target]\nworker_cpus = \"{first}\""), "")).unwrap();
    assert_eq!(
        cfg.target.worker_cpus.as_ref().map(|l| l.for_worker(3)),
        Some(Some(first))
    );
    // A malformed list: the parse error names the key and its line, and says why.
    let msg = Config::from_str(&with("[target]\nworker_cpus = \"3-1\"", ""))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("line 3: worker_cpus: "), "{msg}");
    assert!(msg.contains("runs backwards"), "{msg}");
    // A CPU the process may not run on: refused, naming the CPU and what it may use.
    let last = cpu_list::MAX_CPUS - 1;
    let p = problems(&with(
        &format!("[target]\nworker_cpus = \"{first},{last}\""),
        "",
    ));
    let p = p
        .iter()
        .find(|p| p.key == "target.worker_cpus")
        .unwrap_or_else(|| panic!("{p:?}"));
    assert!(
        p.message.contains(&format!("CPU {last} is not one")),
        "{}",
        p.message
    );
    assert!(p.message.contains(&allowed.to_string()), "{}", p.message);
}

#[test]
fn push_slots_split_the_push_budget_over_the_depth() {
    let l = Limits::default();
    assert_eq!(l.push_window_bytes, 2 << 20);
    assert_eq!(l.push_slot_bytes(128), Some(16 << 10));
    assert_eq!(l.push_slot_bytes(32), Some(64 << 10));
    // At least a page, at most max_io_size.
    assert_eq!(l.push_slot_bytes(1024), Some(4096));
    assert_eq!(l.push_slot_bytes(2), Some(128 << 10));
    // Rounded down to a page.
    let odd = Limits {
        push_window_bytes: 100_000,
        ..l
    };
    assert_eq!(odd.push_slot_bytes(2), Some(49152));
    let layout = odd.parcel_layout(2).unwrap();
    assert_eq!((layout.data_slots, layout.data_slot_bytes), (2, 49152));
    let off = Limits {
        push_window_bytes: 0,
        ..l
    };
    assert_eq!(
        (off.push_slot_bytes(32), off.parcel_layout(32)),
        (None, None)
    );
}
