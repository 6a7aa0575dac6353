//! Live reconfiguration end to end: a running target takes a new configuration while a raw
//! host (for the asynchronous events and logs) and rdmablk's initiator (for verified I/O)
//! stay connected.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use rdmablk::nvme::admin::AsyncEvent;
use rdmablk::nvme::opcodes::admin;
use rdmablk::nvme::Sqe;
use rdmablk_initiator::{ConnectOptions, Controller};
use rdmablk_target::config::Config;
use rdmablk_target::nvmf::runtime::reload::ReloadError;
use rdmablk_target::Target;

/// A configuration on `port` whose subsystem has the namespaces `nsids` (16 MiB of RAM each)
/// and allows `hosts`; `extra` is appended (more subsystems, listeners ...).
fn cfg(port: u16, nsids: &[u32], hosts: &[&str], extra: &str) -> Config {
    let (kind, address) = e2e_fabric();
    let provider = kind.as_str();
    let hosts: Vec<String> = hosts.iter().map(|h| format!("\"{h}\"")).collect();
    let mut text = format!(
        r#"
[[listener]]
provider = "{provider}"
address = "{address}"
port = {port}

[target]
worker_threads = 2
keep_alive_granularity_ms = 100

[arena]
bytes = "48MiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = 131072

[[subsystem]]
nqn = "{SUBNQN}"
hosts = [{}]
"#,
        hosts.join(", ")
    );
    for n in nsids {
        text.push_str(&format!(
            "\n[[subsystem.namespace]]\nnsid = {n}\nblock_size = 512\n\
             backend = {{ kind = \"ram\", size = \"16MiB\" }}\n"
        ));
    }
    text.push_str(extra);
    Config::from_str(&text).expect("test config")
}

fn url(t: &Target) -> String {
    let scheme = if e2e_fabric().0 == rdmablk::fabric::ProviderKind::Verbs {
        "rdma"
    } else {
        "soft"
    };
    format!("{scheme}://{}/{SUBNQN}", t.local_addrs()[0])
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        hostnqn: HOSTNQN.into(),
        io_queues: 2,
        queue_size: 16,
        kato_ms: 5_000,
        reconnect_attempts: 0,
        ..ConnectOptions::default()
    }
}

/// Writes and reads back 64 KiB at `at` of namespace `nsid` through the initiator.
fn verify(ctrl: &Controller, nsid: u32, at: u64, seed: u64) -> Result<(), String> {
    let ns = ctrl.namespace(nsid).map_err(|e| e.to_string())?;
    let data = pattern(seed, 64 << 10);
    ns.write_at(at, &data).map_err(|e| e.to_string())?;
    let mut back = vec![0u8; data.len()];
    ns.read_at(at, &mut back).map_err(|e| e.to_string())?;
    if back != data {
        return Err(format!("namespace {nsid}: data read back differs"));
    }
    Ok(())
}

/// Waits until the I/O thread `io` has done `n` rounds; fails if it stopped (an I/O of it
/// failed) or hangs.
fn wait_rounds(rounds: &AtomicU64, n: u64, io: &std::thread::JoinHandle<Result<(), String>>) {
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while rounds.load(Ordering::Relaxed) < n {
        assert!(!io.is_finished(), "the I/O thread stopped: an I/O failed");
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {n} I/O rounds",
            rounds.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn namespaces_come_and_go_while_hosts_stay_connected() {
    init_tracing();
    let port = free_port();
    let t = Target::start(cfg(port, &[1], &[HOSTNQN], "")).expect("target starts");
    let handle = t.handle();
    let (mut admin, _) = admin_queue(t.local_addrs()[0], 0);
    arm_ns_events(&mut admin, 0x7000);
    let ctrl = Controller::connect_with(&url(&t), opts()).expect("initiator connects");
    verify(&ctrl, 1, 0, 1).unwrap();

    // Add namespace 2: the held AER completes with "namespace attribute changed", the log
    // names NSID 2, and the initiator finds and uses it.
    let changes = handle
        .apply(cfg(port, &[1, 2], &[HOSTNQN], ""))
        .expect("reload");
    assert!(
        changes.iter().any(|c| c.contains("namespace 2 added")),
        "{changes:?}"
    );
    let aen = admin.wait_response().expect("the AER completes");
    assert_eq!(aen.cid, 0x7000);
    assert_eq!(AsyncEvent::from_dw0(aen.dw0), AsyncEvent::ns_changed());
    assert_eq!(changed_namespaces(&mut admin), vec![2]);
    assert_eq!(
        changed_namespaces(&mut admin),
        Vec::<u32>::new(),
        "the read cleared it"
    );
    verify(&ctrl, 2, 4096, 2).unwrap();

    // Remove namespace 2 while I/O runs on namespace 1: that I/O never fails.
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let io = {
        let (ctrl, stop, rounds) = (ctrl.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            let mut seed = 100;
            while !stop.load(Ordering::Relaxed) {
                verify(&ctrl, 1, (seed % 64) * 65536, seed)?;
                rounds.fetch_add(1, Ordering::Relaxed);
                seed += 1;
            }
            Ok::<(), String>(())
        })
    };
    wait_rounds(&rounds, 3, &io);
    let mut aer = Sqe::new(admin::ASYNC_EVENT_REQUEST, 0);
    aer.cid = 0x7001;
    admin.send_capsule(&aer.to_bytes());
    let changes = handle
        .apply(cfg(port, &[1], &[HOSTNQN], ""))
        .expect("reload");
    assert!(
        changes.iter().any(|c| c.contains("namespace 2 removed")),
        "{changes:?}"
    );
    let before = rounds.load(Ordering::Relaxed);
    wait_rounds(&rounds, before + 3, &io);
    stop.store(true, Ordering::Relaxed);
    io.join()
        .unwrap()
        .expect("I/O on namespace 1 across the removal");
    let aen = admin.wait_response().expect("the second AER completes");
    assert_eq!(aen.cid, 0x7001);
    assert_eq!(changed_namespaces(&mut admin), vec![2]);
    let ns2 = Controller::connect_with(&url(&t), opts())
        .unwrap()
        .namespace(2)
        .map(|_| ());
    assert!(ns2.is_err(), "namespace 2 is gone");

    // A broken configuration changes nothing: namespace 1 keeps serving.
    let mut broken = cfg(port, &[1], &[HOSTNQN], "");
    broken.subsystems[0].namespaces[0].block_size = 1000;
    match handle.apply(broken) {
        Err(ReloadError::Config(e)) => {
            assert!(e.to_string().contains("block_size"), "{e}")
        }
        other => panic!("a broken configuration was not refused: {other:?}"),
    }
    // A setting that needs a restart: refused, naming it.
    let mut arena = cfg(port, &[1], &[HOSTNQN], "");
    arena.arena.bytes = rdmablk_target::config::ByteSize::parse("64MiB").unwrap();
    match handle.apply(arena) {
        Err(e @ ReloadError::RestartNeeded { .. }) => {
            assert!(e.to_string().contains("[arena]"), "{e}")
        }
        other => panic!("an arena change was not refused: {other:?}"),
    }
    // The workers read poll_spin_us once, at start.
    let mut spin = cfg(port, &[1], &[HOSTNQN], "");
    spin.target.poll_spin_us += 10;
    match handle.apply(spin) {
        Err(e @ ReloadError::RestartNeeded { .. }) => {
            assert!(e.to_string().contains("target.poll_spin_us"), "{e}")
        }
        other => panic!("a poll_spin_us change was not refused: {other:?}"),
    }
    verify(&ctrl, 1, 0, 7).unwrap();

    // The host is taken off the allow-list: its controllers go.
    let before = t.controllers();
    let changes = handle
        .apply(cfg(port, &[1], &[OTHER_HOSTNQN], ""))
        .expect("reload");
    assert!(
        changes.iter().any(|c| c.contains("disconnected")),
        "{changes:?}"
    );
    assert!(admin.wait_disconnected(HANG_GUARD));
    // Every controller of the host goes (each worker closes its queues at its next tick).
    let deadline = std::time::Instant::now() + HANG_GUARD;
    while t.controllers() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(t.controllers(), 0, "controllers before: {before}");
    assert!(
        verify(&ctrl, 1, 0, 8).is_err(),
        "a removed host's I/O fails"
    );
    drop(ctrl);
    drop(admin);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn subsystems_and_listeners_come_and_go() {
    init_tracing();
    let port = free_port();
    let port2 = free_port();
    let (kind, address) = e2e_fabric();
    let second = format!(
        "\n[[listener]]\nprovider = \"{}\"\naddress = \"{address}\"\nport = {port2}\n\
         \n[[subsystem]]\nnqn = \"nqn.2026-11.io.rdmablk:added\"\nallow_any_host = true\n\
         \n[[subsystem.namespace]]\nnsid = 1\nbackend = {{ kind = \"ram\", size = \"8MiB\" }}\n",
        kind.as_str()
    );
    let t = Target::start(cfg(port, &[1], &[HOSTNQN], "")).expect("target starts");
    let handle = t.handle();
    let changes = handle
        .apply(cfg(port, &[1], &[HOSTNQN], &second))
        .expect("reload");
    assert!(
        changes.iter().any(|c| c.contains("added:"))
            || changes
                .iter()
                .any(|c| c.contains("nqn.2026-11.io.rdmablk:added added")),
        "{changes:?}"
    );
    assert_eq!(t.local_addrs().len(), 2, "{changes:?}");
    // The new subsystem through the new listener.
    let scheme = if kind == rdmablk::fabric::ProviderKind::Verbs {
        "rdma"
    } else {
        "soft"
    };
    let url2 = format!(
        "{scheme}://{}/nqn.2026-11.io.rdmablk:added",
        t.local_addrs()[1]
    );
    let ctrl = Controller::connect_with(&url2, opts()).expect("connect to the added subsystem");
    verify(&ctrl, 1, 0, 3).unwrap();
    // Both go again: the connection through the removed listener is closed.
    let changes = handle
        .apply(cfg(port, &[1], &[HOSTNQN], ""))
        .expect("reload");
    assert!(
        changes.iter().any(|c| c.contains("listener")),
        "{changes:?}"
    );
    assert_eq!(t.local_addrs().len(), 1);
    assert!(verify(&ctrl, 1, 0, 4).is_err());
    drop(ctrl);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn a_file_grown_on_disk_grows_its_namespace_on_reload() {
    init_tracing();
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("rdmablk-grow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("grow.img");
    std::fs::write(&img, vec![0u8; 4 << 20]).unwrap();
    let extra = format!(
        "\n[[subsystem.namespace]]\nnsid = 2\nblock_size = 512\n\
         backend = {{ kind = \"file\", path = \"{}\", direct = false }}\n",
        img.display()
    );
    let t = Target::start(cfg(port, &[1], &[HOSTNQN], &extra)).expect("target starts");
    let (mut admin, _) = admin_queue(t.local_addrs()[0], 0);
    arm_ns_events(&mut admin, 0x7000);
    let ctrl = Controller::connect_with(&url(&t), opts()).expect("initiator connects");
    assert_eq!(ctrl.namespace(2).unwrap().capacity_bytes(), 4 << 20);

    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let changes = t
        .handle()
        .apply(cfg(port, &[1], &[HOSTNQN], &extra))
        .expect("reload");
    assert!(
        changes
            .iter()
            .any(|c| c.contains("namespace 2 grew to 16384 blocks")),
        "{changes:?}"
    );
    let aen = admin.wait_response().expect("the AER completes");
    assert_eq!(AsyncEvent::from_dw0(aen.dw0), AsyncEvent::ns_changed());
    assert_eq!(changed_namespaces(&mut admin), vec![2]);
    ctrl.rescan_namespaces().unwrap();
    let ns = ctrl.namespace(2).unwrap();
    assert_eq!(ns.capacity_bytes(), 8 << 20);
    // The blocks past the old end take I/O.
    let data = pattern(5, 4096);
    ns.write_at((6 << 20) as u64, &data).unwrap();
    let mut back = vec![0u8; 4096];
    ns.read_at((6 << 20) as u64, &mut back).unwrap();
    assert_eq!(back, data);
    drop(ns);
    drop(ctrl);
    drop(admin);
    wait_idle(&t);
    t.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// What one removal under reads saw: commands answered after the reload began, and whether
/// the last command was taken by the target's transport but never answered before the
/// queue closed (it reached the queue between the controller's teardown and the queue's
/// close, and was dropped: the race this test is about).
struct RemovalRace {
    answered_during: u64,
    dropped: bool,
}

/// Reads at queue depth 1 on a controller of the subsystem while a reload removes it; no
/// answer may carry DNR. The reload starts once some reads are answered (the queue is busy).
fn remove_under_reads(t: &Target, port: u16) -> RemovalRace {
    let addr = t.local_addrs()[0];
    let (admin, cntlid) = admin_queue(addr, 0);
    let mut q = io_queue(addr, 1, cntlid);
    assert!(q.rw(false, 1, 0, 1).status.is_success());
    let other = "\n[[subsystem]]\nnqn = \"nqn.2026-11.io.rdmablk:other\"\nallow_any_host = true\n\
                 \n[[subsystem.namespace]]\nnsid = 1\nbackend = { kind = \"ram\", size = \"4MiB\" }\n";
    let mut c = cfg(port, &[1], &[HOSTNQN], other);
    c.subsystems.remove(0);
    let answered = Arc::new(AtomicU64::new(0));
    let reloading = Arc::new(AtomicBool::new(false));
    let handle = t.handle();
    let reload = {
        let (answered, reloading) = (answered.clone(), reloading.clone());
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + HANG_GUARD;
            while answered.load(Ordering::SeqCst) < 16 {
                assert!(std::time::Instant::now() < deadline, "reads not answered");
                std::thread::sleep(Duration::from_millis(1));
            }
            reloading.store(true, Ordering::SeqCst);
            handle.apply(c)
        })
    };
    let mut answered_during = 0;
    let dropped = loop {
        let during = reloading.load(Ordering::SeqCst);
        let sgl = q.keyed(0, BLOCK);
        q.send_capsule(&rw_sqe(false, 1, 0, 1, &sgl).to_bytes());
        match q.wait_response() {
            Ok(cqe) => {
                assert!(
                    cqe.status.is_success() || !cqe.status.dnr,
                    "answered {} with DNR",
                    cqe.status
                );
                answered.fetch_add(1, Ordering::SeqCst);
                answered_during += u64::from(during);
            }
            // The queue closed: the host would reconnect and retry. If the last read was sent
            // after the reload began and its SEND completed successfully (seen before the
            // receives' flush), the target took it and dropped it.
            Err(_) => break during && q.all_sends_taken(),
        }
    };
    let changes = reload.join().unwrap().expect("reload");
    assert!(changes.iter().any(|c| c.contains("removed")), "{changes:?}");
    assert!(q.wait_disconnected(HANG_GUARD));
    drop(q);
    drop(admin);
    wait_idle(t);
    RemovalRace {
        answered_during,
        dropped,
    }
}

/// Commands that reach a controller torn down by a reload (its subsystem removed) are
/// dropped, so the host retries them after reconnecting: never answered with a DNR status
/// such as Invalid Namespace, which a host hands to the application (found by blktests).
/// The race is checked to have happened: a command taken by the target after the reload
/// began and never answered. A removal that missed it (the queue closed between two reads)
/// proves nothing and is tried again, with the subsystem back.
#[test]
fn io_on_a_removed_subsystem_is_never_answered_with_dnr() {
    const ATTEMPTS: u32 = 10;
    init_tracing();
    let port = free_port();
    let t = Target::start(cfg(port, &[1], &[HOSTNQN], "")).expect("target starts");
    let mut missed = Vec::new();
    for attempt in 1..=ATTEMPTS {
        if attempt > 1 {
            t.handle()
                .apply(cfg(port, &[1], &[HOSTNQN], ""))
                .expect("the subsystem back");
        }
        let race = remove_under_reads(&t, port);
        if race.dropped {
            eprintln!(
                "attempt {attempt}: {} reads answered after the reload began, then one \
                 taken and dropped",
                race.answered_during
            );
            t.shutdown();
            return;
        }
        missed.push(race.answered_during);
    }
    panic!(
        "no read reached the queue between the controller's teardown and the queue's close in \
         {ATTEMPTS} removals (reads answered after each reload began: {missed:?})"
    );
}
