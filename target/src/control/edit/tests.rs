use super::*;

const BASE: &str = r#"# the comment stays
[[listener]]
provider = "soft"
address = "127.0.0.1"
port = 4420

[arena]
bytes = "64MiB"   # and this one

[[subsystem]]
nqn = "nqn.2026-11.io.rdmablk:a"
hosts = ["nqn.2026-11.io.rdmablk:h1"]

[[subsystem.namespace]]
nsid = 1
backend = { kind = "ram", size = "8MiB" }
"#;

fn edit(json: &str, text: &str) -> Result<String, String> {
    apply(text, &serde_json::from_str(json).expect("request"))
}

#[test]
fn tcp_listeners_are_added_and_removed_by_their_transport() {
    let add = r#"{"cmd":"listener-add","provider":"tcp","address":"127.0.0.1","port":4420}"#;
    let t = edit(add, BASE).unwrap();
    assert!(t.contains("transport = \"tcp\""), "{t}");
    let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
    assert_eq!(cfg.listeners.len(), 2);
    assert_eq!(
        cfg.listeners[1].transport,
        crate::config::Transport::named("tcp").unwrap()
    );
    assert_eq!(cfg.listeners[1].provider, None);
    // The soft listener on the same address and port is another listener.
    assert!(edit(add, &t).unwrap_err().contains("exists already"));
    let rm = r#"{"cmd":"listener-remove","provider":"tcp","address":"127.0.0.1","port":4420}"#;
    let t = edit(rm, &t).unwrap();
    let cfg = crate::config::Config::from_str(&t).unwrap();
    assert_eq!(cfg.listeners.len(), 1);
    assert_eq!(
        cfg.listeners[0].transport,
        crate::config::Transport::named("rdma").unwrap()
    );
    assert!(edit(rm, &t).unwrap_err().contains("no listener tcp"));
}

#[test]
fn edits_keep_comments_and_parse_as_configs() {
    let t = edit(
        r#"{"cmd":"namespace-add","nqn":"nqn.2026-11.io.rdmablk:a","nsid":2,
                "backend":{"kind":"ram","size":"4MiB"}}"#,
        BASE,
    )
    .unwrap();
    let t = edit(
        r#"{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"nqn.2026-11.io.rdmablk:h2"}"#,
        &t,
    )
    .unwrap();
    let t = edit(
        r#"{"cmd":"subsystem-add","nqn":"nqn.2026-11.io.rdmablk:b","allow_any_host":true}"#,
        &t,
    )
    .unwrap();
    let t = edit(
        r#"{"cmd":"listener-add","provider":"soft","address":"127.0.0.1","port":4421}"#,
        &t,
    )
    .unwrap();
    assert!(t.contains("# the comment stays") && t.contains("# and this one"));
    let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
    assert_eq!(cfg.subsystems.len(), 2);
    assert_eq!(cfg.subsystems[0].namespaces.len(), 2);
    assert_eq!(cfg.subsystems[0].hosts.len(), 2);
    assert_eq!(cfg.listeners.len(), 2);
    let t = edit(
        r#"{"cmd":"namespace-remove","nqn":"nqn.2026-11.io.rdmablk:a","nsid":1}"#,
        &t,
    )
    .unwrap();
    let t = edit(
        r#"{"cmd":"subsystem-remove","nqn":"nqn.2026-11.io.rdmablk:b"}"#,
        &t,
    )
    .unwrap();
    let cfg = crate::config::Config::from_str(&t).unwrap();
    assert_eq!(cfg.subsystems.len(), 1);
    assert_eq!(cfg.subsystems[0].namespaces[0].nsid, 2);
}

#[test]
fn host_add_with_a_tls_psk_writes_a_table_the_config_accepts() {
    const PSK: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    let add = |host: &str, t: &str| {
        edit(
            &format!(
                r#"{{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"{host}",
                        "tls_psk":"{PSK}"}}"#
            ),
            t,
        )
    };
    let t = add("nqn.2026-11.io.rdmablk:h9", BASE).unwrap();
    // A listed host gets the key (its entry replaced).
    let t = add("nqn.2026-11.io.rdmablk:h1", &t).unwrap();
    let cfg = crate::config::Config::from_str(&t).expect("a valid configuration");
    let hosts = &cfg.subsystems[0].hosts;
    assert!(hosts.iter().all(|h| h.tls_psk().unwrap().is_some()), "{t}");
    let bad = add("h2", BASE).unwrap().replace("VRLb", "XRLb");
    let e = crate::config::Config::from_str(&bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("tls_psk") && e.contains("CRC"), "{e}");
}

#[test]
fn host_add_with_keys_writes_a_table_the_config_accepts() {
    const KEY: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    let t = edit(
        &format!(
            r#"{{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"blktests-host",
                    "dhchap_key":"{KEY}","dhchap_ctrl_key":"{KEY}"}}"#
        ),
        BASE,
    )
    .unwrap();
    assert!(
        t.contains(r#"{ nqn = "blktests-host", dhchap_key = "#),
        "{t}"
    );
    // keys given to a listed host replace its entry (a host list is never empty)
    let t = edit(
        &format!(
            r#"{{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a",
                    "host":"nqn.2026-11.io.rdmablk:h1","dhchap_key":"{KEY}"}}"#
        ),
        &t,
    )
    .unwrap();
    assert!(!t.contains(r#"["nqn.2026-11.io.rdmablk:h1""#), "{t}");
    let e = edit(
        r#"{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"blktests-host"}"#,
        &t,
    )
    .unwrap_err();
    assert!(e.contains("already"), "{e}");
    let t = edit(
        r#"{"cmd":"namespace-add","nqn":"nqn.2026-11.io.rdmablk:a","nsid":2,
                "uuid":"91fdba0d-f87b-4c25-b80f-db7be1418b9e",
                "backend":{"kind":"ram","size":"4MiB"}}"#,
        &t,
    )
    .unwrap();
    let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
    let hosts = &cfg.subsystems[0].hosts;
    assert_eq!(hosts.len(), 2);
    assert!(hosts[0].has_inline_secret() && hosts[1].has_inline_secret());
    assert_eq!(hosts[1].nqn(), "blktests-host");
    assert!(cfg.subsystems[0].namespaces[1].uuid.is_some());
    let t = edit(
        r#"{"cmd":"host-remove","nqn":"nqn.2026-11.io.rdmablk:a","host":"blktests-host"}"#,
        &t,
    )
    .unwrap();
    assert!(
        !t.contains("blktests-host") && t.contains("rdmablk:h1"),
        "{t}"
    );
    let e = edit(
        &format!(
            r#"{{"cmd":"host-add","nqn":"nqn.2026-11.io.rdmablk:a","host":"h",
                    "dhchap_ctrl_key":"{KEY}"}}"#
        ),
        BASE,
    )
    .unwrap_err();
    assert!(e.contains("needs the host's key"), "{e}");
}

#[test]
fn namespace_host_edits_show_and_hide_a_namespace() {
    const A: &str = "nqn.2026-11.io.rdmablk:a";
    const H1: &str = "nqn.2026-11.io.rdmablk:h1";
    let add = format!(r#"{{"cmd":"namespace-host-add","nqn":"{A}","nsid":1,"host":"{H1}"}}"#);
    let t = edit(&add, BASE).unwrap();
    let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
    assert_eq!(
        cfg.subsystems[0].namespaces[0].hosts,
        Some(vec![H1.to_owned()])
    );
    assert!(edit(&add, &t).unwrap_err().contains("already"));
    let rm = add.replace("namespace-host-add", "namespace-host-remove");
    let t = edit(&rm, &t).unwrap();
    // The last host removed: no host sees it (not every host).
    let cfg = crate::config::Config::from_str(&t).unwrap();
    assert_eq!(cfg.subsystems[0].namespaces[0].hosts, Some(Vec::new()));
    assert!(edit(&rm, &t).unwrap_err().contains("does not list"));
    let e = edit(&add.replace("\"nsid\":1", "\"nsid\":9"), BASE).unwrap_err();
    assert!(e.contains("no namespace 9"), "{e}");
}

#[test]
fn namespace_qos_sets_and_clears_the_limits() {
    let set = r#"{"cmd":"namespace-qos","nqn":"nqn.2026-11.io.rdmablk:a","nsid":1,
                      "iops":2000,"write_bandwidth":"100MiB"}"#;
    let t = edit(set, BASE).unwrap();
    let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
    let q = cfg.subsystems[0].namespaces[0].qos;
    assert_eq!(q.iops, Some(2000));
    assert_eq!(q.write_bandwidth.map(|b| b.bytes()), Some(100 << 20));
    assert_eq!(q.bandwidth, None);
    let clear = r#"{"cmd":"namespace-qos","nqn":"nqn.2026-11.io.rdmablk:a","nsid":1}"#;
    let t = edit(clear, &t).unwrap();
    assert!(!t.contains("qos"), "{t}");
    let e = edit(&set.replace("100MiB", "100MB"), BASE).unwrap_err();
    assert!(e.contains("write_bandwidth"), "{e}");
    // --per-host: the host_qos table, the namespace's own qos untouched.
    let per_host = set.replace(r#""nsid":1,"#, r#""nsid":1,"per_host":true,"#);
    let t = edit(&per_host, BASE).unwrap();
    let cfg = crate::config::Config::from_str(&t).expect("still a valid configuration");
    let n = &cfg.subsystems[0].namespaces[0];
    assert_eq!((n.host_qos.iops, n.qos.iops), (Some(2000), None));
}

#[test]
fn impossible_edits_say_why() {
    let e = edit(r#"{"cmd":"subsystem-remove","nqn":"nqn.x:y"}"#, BASE).unwrap_err();
    assert!(e.contains("no subsystem"), "{e}");
    let e = edit(
            r#"{"cmd":"namespace-add","nqn":"nqn.2026-11.io.rdmablk:a","nsid":1,"backend":{"kind":"ram","size":"1MiB"}}"#,
            BASE,
        )
        .unwrap_err();
    assert!(e.contains("already"), "{e}");
    assert!(serde_json::from_str::<Edit>(r#"{"cmd":"nope"}"#).is_err());
}
