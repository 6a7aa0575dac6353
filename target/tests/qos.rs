//! QoS limits end to end: rdmablk's initiator drives a namespace limited to 100 commands per
//! second from several threads; every command completes (held, never failed) with its data
//! intact, the target counts what it held, and lifting the limit by reload lets the held
//! commands go. How close to the limit a namespace runs, and that its neighbours are not
//! slowed, is measured by `tools/bench/qos` (a benchmark, not a timed test).

mod common;

use std::time::{Duration, Instant};

use common::*;
use rdmablk_initiator::{ConnectOptions, Controller};
use rdmablk_target::config::Config;
use rdmablk_target::metrics::namespace_io;
use rdmablk_target::Target;

/// Namespace 1 with `qos` (a TOML inline table, or nothing), namespace 2 unlimited.
fn cfg(port: u16, qos: &str) -> Config {
    let (kind, address) = e2e_fabric();
    let text = format!(
        r#"
[[listener]]
provider = "{}"
address = "{address}"
port = {port}

[target]
worker_threads = 2

[arena]
bytes = "48MiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = 131072

[[subsystem]]
nqn = "{SUBNQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 512
{qos}
backend = {{ kind = "ram", size = "8MiB" }}

[[subsystem.namespace]]
nsid = 2
block_size = 512
backend = {{ kind = "ram", size = "8MiB" }}
"#,
        kind.as_str()
    );
    Config::from_str(&text).expect("test config")
}

fn connect(t: &Target) -> Controller {
    connect_as(t, HOSTNQN)
}

fn connect_as(t: &Target, hostnqn: &str) -> Controller {
    let scheme = if e2e_fabric().0 == rdmablk::fabric::ProviderKind::Verbs {
        "rdma"
    } else {
        "soft"
    };
    let url = format!("{scheme}://{}/{SUBNQN}", t.local_addrs()[0]);
    Controller::connect_with(
        &url,
        ConnectOptions {
            hostnqn: hostnqn.into(),
            io_queues: 4,
            queue_size: 16,
            reconnect_attempts: 0,
            ..ConnectOptions::default()
        },
    )
    .expect("initiator connects")
}

/// `threads` threads each write and read back `each` 4 KiB blocks of namespace `nsid`; the
/// commands sent.
fn drive(ctrl: &Controller, nsid: u32, threads: u64, each: u64) -> u64 {
    std::thread::scope(|s| {
        for t in 0..threads {
            let ctrl = ctrl.clone();
            s.spawn(move || {
                let ns = ctrl.namespace(nsid).expect("namespace");
                for i in 0..each {
                    let at = (t * each + i) * 4096;
                    let data = pattern(at ^ u64::from(nsid), 4096);
                    ns.write_at(at, &data).expect("a held write completes");
                    let mut back = vec![0u8; 4096];
                    ns.read_at(at, &mut back).expect("a held read completes");
                    assert_eq!(back, data, "namespace {nsid} at {at}");
                }
            });
        }
    });
    threads * each * 2
}

fn io_of(t: &Target, nsid: u32) -> rdmablk_target::metrics::NamespaceIo {
    namespace_io(&t.handle())
        .into_iter()
        .find(|n| n.nsid == nsid)
        .expect("namespace counters")
}

#[test]
fn commands_over_the_limit_are_held_not_failed() {
    init_tracing();
    let port = free_port();
    let t = Target::start(cfg(port, "qos = { iops = 100 }")).expect("target starts");
    let ctrl = connect(&t);
    let start = Instant::now();
    let sent = drive(&ctrl, 1, 4, 8);
    let took = start.elapsed();
    // 64 commands at 100 per second, after a burst of one: no faster than 0.63 s (a
    // property of the limiter, so a lower bound only; the rate itself is benchmarked).
    assert!(
        took >= Duration::from_millis(600),
        "{sent} commands in {took:?} under a limit of 100 per second"
    );
    let io = io_of(&t, 1);
    assert!(io.qos_held > 0, "nothing counted as held");
    assert!(io.qos_held_seconds > 0.0);
    assert_eq!(io.qos_queued, 0, "held commands left over");
    assert_eq!(io.errors.values().sum::<u64>(), 0);
    // The unlimited neighbour holds nothing.
    drive(&ctrl, 2, 4, 8);
    assert_eq!(io_of(&t, 2).qos_held, 0);
    drop(ctrl);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn lifting_the_limit_by_reload_lets_held_commands_go() {
    init_tracing();
    let port = free_port();
    let t = Target::start(cfg(port, "qos = { iops = 100, bandwidth = \"1MiB\" }"))
        .expect("target starts");
    let ctrl = connect(&t);
    let handle = t.handle();
    let io = std::thread::spawn({
        let ctrl = ctrl.clone();
        // 4 x 50 x 2 commands: 4 s at the limit.
        move || drive(&ctrl, 1, 4, 50)
    });
    let deadline = Instant::now() + HANG_GUARD;
    while io_of(&t, 1).qos_queued == 0 {
        assert!(Instant::now() < deadline, "no command was ever held");
        std::thread::sleep(Duration::from_millis(5));
    }
    let changes = handle.apply(cfg(port, "")).expect("reload");
    assert!(
        changes
            .iter()
            .any(|c| c.contains("namespace 1 qos no limits")),
        "{changes:?}"
    );
    assert!(
        !changes.iter().any(|c| c.contains("replaced")),
        "{changes:?}"
    );
    io.join().expect("every command completes");
    let after = io_of(&t, 1);
    assert_eq!(after.qos_queued, 0);
    assert_eq!(after.errors.values().sum::<u64>(), 0);
    drop(ctrl);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn a_host_over_its_own_limit_waits_while_another_host_goes_on() {
    init_tracing();
    let port = free_port();
    let t = Target::start(cfg(port, "host_qos = { iops = 100 }")).expect("target starts");
    let a = connect_as(&t, HOSTNQN);
    let b = connect_as(&t, OTHER_HOSTNQN);
    // Host A: 4 x 50 x 2 commands at its limit of 100 per second: 4 s at least.
    let heavy = std::thread::spawn({
        let a = a.clone();
        move || drive(&a, 1, 4, 50)
    });
    let deadline = Instant::now() + HANG_GUARD;
    while io_of(&t, 1).qos_queued == 0 {
        assert!(Instant::now() < deadline, "host A was never held");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Host B, on the same namespace and workers, stays under its own limit (one command
    // every 25 ms or more, 40 per second at most): none of its commands is held, however
    // many of A's are (a queue shared in arrival order would hold B's behind A's).
    let nb = b.namespace(1).expect("namespace");
    for i in 0..10u64 {
        let data = pattern(i, 4096);
        nb.write_at((1 << 20) + i * 4096, &data)
            .expect("B's write completes");
        std::thread::sleep(Duration::from_millis(25));
    }
    let hosts = io_of(&t, 1).host_qos;
    let of = |h: &str| hosts.iter().find(|x| x.0 == h).map(|x| x.1);
    assert_eq!(
        of(OTHER_HOSTNQN),
        Some(0),
        "host B's commands were held: {hosts:?}"
    );
    assert!(of(HOSTNQN) > Some(0), "host A was not held: {hosts:?}");
    // Per-host limits change live too: lifted, A's held commands go.
    let changes = t.handle().apply(cfg(port, "")).expect("reload");
    assert!(
        changes.iter().any(|c| c.contains("per host no limits")),
        "{changes:?}"
    );
    heavy.join().expect("every command of A completes");
    let io = io_of(&t, 1);
    assert!(io.qos_held > 0);
    assert_eq!(io.qos_queued, 0);
    assert_eq!(io.errors.values().sum::<u64>(), 0);
    drop((nb, a, b));
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn limits_too_low_are_refused_naming_the_key() {
    for (qos, key) in [
        ("qos = { iops = 10 }", "subsystem[0].namespace[0].qos.iops"),
        (
            "qos = { read_bandwidth = \"64KiB\" }",
            "subsystem[0].namespace[0].qos.read_bandwidth",
        ),
        (
            "host_qos = { iops = 50 }",
            "subsystem[0].namespace[0].host_qos.iops",
        ),
    ] {
        let text = format!(
            "[[subsystem]]\nnqn = \"{SUBNQN}\"\nallow_any_host = true\n\
             [[subsystem.namespace]]\nnsid = 1\n{qos}\nbackend = {{ kind = \"null\", size = \"1MiB\" }}\n"
        );
        let e = Config::from_str(&text).expect_err("refused").to_string();
        assert!(e.contains(key), "{e}");
    }
}
