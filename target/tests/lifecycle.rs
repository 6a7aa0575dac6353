//! Connection lifecycle under failure: hosts that vanish mid-I/O (RDMA READs in flight, backend
//! I/O in flight, the whole host process killed), silent hosts and keep-alive, the subsystem
//! allow-list. After each, the target must be back to idle: no arena bytes or parcels, no
//! connections, no controllers; and over many cycles no threads, fds or arena high water may
//! grow.
//!
//! Runs on the soft provider by default, or over verbs like e2e_soft
//! (`RDMABLK_E2E_PROVIDER=verbs RDMABLK_E2E_ADDR=10.0.2.15`). The tests of this binary run one
//! at a time (they count the process's threads and fds).

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;
use rdmablk::fabric::Wc;
use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::{InCapsuleSgl, Sgl, Status};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

static SERIAL: Mutex<()> = Mutex::new(());

/// Tests of this binary run one at a time: the resource counts are per process.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Namespace 2: every completion held `HOLD_MS` by the error backend (backend I/O in flight).
const HOLD_MS: u64 = 1000;

fn slow_namespace() -> String {
    format!(
        r#"
[[subsystem.namespace]]
nsid = 2
block_size = {BLOCK}
[subsystem.namespace.backend]
kind = "error"
latency_us = {}
inner = {{ kind = "ram", size = "4MiB" }}
"#,
        HOLD_MS * 1000
    )
}

/// A second subsystem open to any host.
const OPEN_SUBNQN: &str = "nqn.2026-11.io.rdmablk:open";

fn open_subsystem() -> String {
    format!(
        r#"
[[subsystem]]
nqn = "{OPEN_SUBNQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = {BLOCK}
backend = {{ kind = "ram", size = "1MiB" }}
"#
    )
}

/// Starts a target from common's configuration with `more` appended (namespaces of the
/// test subsystem, or further subsystems).
fn start_with(arena: &str, extra_target: &str, more: &str) -> (Target, SocketAddr) {
    init_tracing();
    let text = config_text(free_port(), arena, extra_target) + more;
    let cfg = Config::from_str(&text).expect("config");
    let t = Target::start(cfg).expect("target starts");
    let addr = t.local_addrs()[0];
    (t, addr)
}

/// What a leak would make grow: threads of the target and of the soft provider (named
/// `rdmablk-*` and `soft-*`; test-harness threads are not counted) and open fds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resources {
    threads: usize,
    fds: usize,
}

fn resources() -> Resources {
    let threads = std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("rdmablk-") || name.starts_with("soft-"))
        .count();
    let fds = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count();
    Resources { threads, fds }
}

/// Waits until the resource counts are back to `base` (cleanup may finish just after the
/// target reports idle); fails naming what grew.
fn wait_resources(base: Resources, what: &str) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let now = resources();
        if now.threads <= base.threads && now.fds <= base.fds {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: resources grew: {now:?}, baseline {base:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Idle and no controller left.
fn wait_all_gone(t: &Target) {
    wait_idle(t);
    let deadline = Instant::now() + HANG_GUARD;
    while t.controllers() != 0 {
        assert!(
            Instant::now() < deadline,
            "{} controllers left",
            t.controllers()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `n` commands made by `sqe_for(i)` (cids 0x100 + i) without waiting for responses. The
/// test host reuses 12 capsule buffers, so every 8 capsules the send completions are awaited
/// (responses seen meanwhile are dropped: the caller is about to vanish).
fn fire(q: &Host, n: u32, sqe_for: impl Fn(u32) -> (rdmablk::nvme::Sqe, Vec<u8>)) {
    let mut wcs = [Wc::default(); 16];
    let mut unsent = 0u32;
    for i in 0..n {
        let (mut sqe, data) = sqe_for(i);
        sqe.cid = 0x100 + i as u16;
        let mut capsule = sqe.to_bytes().to_vec();
        capsule.extend_from_slice(&data);
        q.send_capsule(&capsule);
        unsent += 1;
        let deadline = Instant::now() + HANG_GUARD;
        while unsent >= 8 {
            let got = q.rdma().cq.poll(&mut wcs).expect("poll");
            for wc in &wcs[..got] {
                if wc.wr_id == 1 << 40 {
                    assert!(wc.status.is_success(), "capsule send failed: {}", wc.status);
                    unsent -= 1;
                }
            }
            assert!(Instant::now() < deadline, "capsule sends not completing");
            if got == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

/// `DEPTH` writes of `MAX_IO` bytes behind keyed SGLs: the target RDMA READs them from this
/// host (read depth at a time, the rest waiting for read credits).
fn fire_large_writes(q: &Host) {
    fire(q, DEPTH, |i| {
        let blocks = MAX_IO / BLOCK;
        let lba = u64::from(i % 4) * u64::from(blocks);
        (
            rw_sqe(true, 1, lba, blocks, &q.keyed(0, MAX_IO)),
            Vec::new(),
        )
    });
}

/// An I/O queue that asked for (and got) a push window.
fn push_io_queue(addr: SocketAddr, cntlid: u16) -> Host {
    let mut cm = cm_request(1, DEPTH as u16);
    cm.push = Some(rdmablk::nvme::transport::rdma::PushRequest {
        slots: 0,
        slot_bytes: 0,
    });
    let mut q = Host::connect(addr, cm).expect("I/O CM connect");
    assert!(
        matches!(
            q.accept.push,
            rdmablk::nvme::transport::rdma::PushAnswer::Granted(_)
        ),
        "push not granted: {:?}",
        q.accept.push
    );
    let c = q.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
    assert!(c.status.is_success(), "I/O connect: {}", c.status);
    q
}

/// One host life: admin + I/O queue, a queue-full of large writes, then gone without a word.
/// `variant` (mod 5) picks what goes first (the I/O queue, the admin queue), whether reads
/// (target RDMA WRITEs) ride along, a push-write queue (a bound memory window), or queues
/// dropped right after the RDMA connect, before any Fabrics Connect.
fn connect_fire_and_vanish(addr: SocketAddr, variant: u32) {
    if variant % 5 == 4 {
        let admin = Host::connect(addr, cm_request(0, 32)).expect("admin CM connect");
        let mut cm = cm_request(1, DEPTH as u16);
        cm.push = Some(rdmablk::nvme::transport::rdma::PushRequest {
            slots: 0,
            slot_bytes: 0,
        });
        let q = Host::connect(addr, cm).expect("I/O CM connect");
        drop(q);
        drop(admin);
        return;
    }
    let (admin, cntlid) = admin_queue(addr, 0);
    let q = if variant % 5 == 3 {
        push_io_queue(addr, cntlid)
    } else {
        io_queue(addr, 1, cntlid)
    };
    if variant % 5 == 2 {
        fire(&q, DEPTH, |i| {
            let write = i % 2 == 0;
            let blocks = MAX_IO / BLOCK;
            (rw_sqe(write, 1, 0, blocks, &q.keyed(0, MAX_IO)), Vec::new())
        });
    } else {
        fire_large_writes(&q);
    }
    if variant % 5 == 1 {
        drop(admin);
        drop(q);
    } else {
        drop(q);
        drop(admin);
    }
}

/// Connect/abort cycles: 50 on the soft provider; 10 over verbs (the Soft-RoCE VM is slow,
/// and the verbs-specific part, a real RNIC flushing READs, shows in the first few).
fn abort_cycles() -> u32 {
    match e2e_fabric().0 {
        rdmablk::fabric::ProviderKind::Soft => 50,
        _ => 10,
    }
}

/// Hosts that vanish with RDMA READs (and WRITEs) in flight, many times: each time the target
/// returns to idle, and nothing grows from one cycle to the next.
#[test]
fn repeated_abort_mid_io_leaks_nothing() {
    let _g = serial();
    let (t, addr) = start_with("32MiB", "", "");
    // Warm-up: one cycle of each variant, so lazily created things (provider state, logging)
    // exist from here on and the arena's high water includes a push queue's parcel (data
    // slots) beside the others' (receive and response slots only).
    for variant in 0..5 {
        connect_fire_and_vanish(addr, variant);
        wait_all_gone(&t);
    }
    let base = resources();
    let high_water = t.arena_stats().high_water_bytes;
    for cycle in 5..abort_cycles() + 5 {
        connect_fire_and_vanish(addr, cycle);
        wait_all_gone(&t);
        assert_eq!(
            t.arena_stats().high_water_bytes,
            high_water,
            "cycle {cycle}: arena high water grew"
        );
        wait_resources(base, &format!("cycle {cycle}"));
    }
    let s = t.arena_stats();
    assert_eq!((s.bytes_in_use, s.parcels, s.refused), (0, 0, 0), "{s:?}");
    assert_eq!(
        s.largest_free_bytes + s.pool_bytes,
        s.total_bytes,
        "arena fragmented: {s:?}"
    );
    t.shutdown();
}

/// The environment variable that makes `child_host_killed_by_parent` act (it is the
/// host process `host_process_killed_mid_io_leaves_nothing` kills).
const CHILD_ENV: &str = "RDMABLK_LIFECYCLE_CHILD_TARGET";

/// Helper, not a test of its own: run by `host_process_killed_mid_io_leaves_nothing` in a
/// child process, which it then kills with SIGKILL.
#[test]
#[ignore = "helper process of host_process_killed_mid_io_leaves_nothing"]
fn child_host_killed_by_parent() {
    let Ok(addr) = std::env::var(CHILD_ENV) else {
        return;
    };
    let addr: SocketAddr = addr.parse().expect("target address");
    let (admin, cntlid) = admin_queue(addr, 0);
    let q = io_queue(addr, 1, cntlid);
    fire_large_writes(&q);
    println!("CHILD READY");
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let _ = (&admin, &q);
    }
}

/// Waits until only a bystander's queues (`conns`, one controller) are left, with exactly the
/// arena usage they had (`usage`).
fn wait_back_to(t: &Target, conns: usize, usage: rdmablk_target::arena::ArenaStats) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let s = t.arena_stats();
        let ok = s.bytes_in_use == usage.bytes_in_use && s.parcels == usage.parcels;
        if ok && t.queues_open() == conns && t.controllers() == 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not back to the bystander's usage {usage:?}: {s:?}, {} connections, {} controllers",
            t.queues_open(),
            t.controllers()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A verified write and read on `q` at `lba` (8 blocks).
fn verified_io(q: &mut Host, lba: u64, seed: u64) {
    let data = pattern(seed, 4096);
    q.write_data(0, &data);
    assert!(q.rw(true, 1, lba, 8).status.is_success());
    q.write_data(0, &[0u8; 4096]);
    assert!(q.rw(false, 1, lba, 8).status.is_success());
    assert_eq!(q.read_data(0, 4096), data);
}

/// The host process dies (SIGKILL) with a queue-full of large writes the target is reading
/// from its memory: the kernel closes its connections, the target tears them down and
/// releases everything; another host connected all along keeps working.
#[test]
fn host_process_killed_mid_io_leaves_nothing() {
    let _g = serial();
    let (t, addr) = start_with("32MiB", "", "");
    let (mut by_admin, by_cntlid) = admin_queue(addr, 0);
    let mut bystander = io_queue(addr, 2, by_cntlid);
    let usage = t.arena_stats();
    let exe = std::env::current_exe().expect("test binary");
    for round in 0..4u32 {
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "child_host_killed_by_parent",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, addr.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the host process");
        let out = BufReader::new(child.stdout.take().unwrap());
        let ready = out
            .lines()
            .map_while(Result::ok)
            .any(|l| l.ends_with("CHILD READY"));
        assert!(ready, "round {round}: the host process did not get going");
        assert_eq!(t.controllers(), 2);
        child.kill().expect("SIGKILL the host");
        child.wait().expect("reap the host");
        wait_back_to(&t, 2, usage);
        verified_io(
            &mut bystander,
            2048 + u64::from(round) * 8,
            u64::from(round),
        );
    }
    assert!(by_admin
        .submit(rdmablk::nvme::admin::keep_alive_sqe(0), &[])
        .status
        .is_success());
    drop(bystander);
    drop(by_admin);
    wait_all_gone(&t);
    // And the target still serves.
    let (mut admin, cntlid) = admin_queue(addr, 0);
    let mut q = io_queue(addr, 1, cntlid);
    verified_io(&mut q, 0, 5);
    assert!(admin
        .submit(rdmablk::nvme::admin::keep_alive_sqe(0), &[])
        .status
        .is_success());
    drop(q);
    drop(admin);
    wait_all_gone(&t);
    t.shutdown();
}

/// Commands to the slow namespace (in-capsule writes and reads), then a read of the fast one
/// whose response proves every earlier capsule was taken into the backend.
fn hold_backend_io(q: &mut Host) {
    let data = pattern(3, 4096);
    fire(q, 16, |i| {
        let sgl = Sgl::InCapsule(InCapsuleSgl {
            offset: 0,
            len: 4096,
        });
        if i % 2 == 0 {
            (rw_sqe(true, 2, u64::from(i) * 8, 8, &sgl), data.clone())
        } else {
            (rw_sqe(false, 2, 0, 8, &q.keyed(0, 4096)), Vec::new())
        }
    });
    let c = q.rw(false, 1, 0, 1);
    assert!(c.status.is_success(), "fast read: {}", c.status);
}

/// The host vanishes while the backend holds its I/O: the target keeps each parcel until the
/// backend is done with it, then releases everything.
#[test]
fn abort_with_backend_io_in_flight_releases_after_the_backend() {
    let _g = serial();
    let (t, addr) = start_with("32MiB", "", &slow_namespace());
    for variant in 0..2 {
        let (admin, cntlid) = admin_queue(addr, 0);
        let mut q = io_queue(addr, 1, cntlid);
        hold_backend_io(&mut q);
        if variant == 0 {
            drop(q);
            drop(admin);
        } else {
            // The controller goes first; its I/O queue follows with I/O still held.
            drop(admin);
            drop(q);
        }
        wait_all_gone(&t);
    }
    t.shutdown();
}

/// Keep-alive: a host that stops talking, with backend I/O held, is torn down after its KATO
/// (never before: its last command reset the timer) and everything is released.
#[test]
fn silent_host_with_io_held_is_torn_down_after_kato() {
    let _g = serial();
    let kato = Duration::from_millis(400);
    let (t, addr) = start_with("32MiB", "", &slow_namespace());
    let (mut admin, cntlid) = admin_queue(addr, kato.as_millis() as u32);
    let mut q = io_queue(addr, 1, cntlid);
    hold_backend_io(&mut q);
    let last_word = Instant::now();
    keep_alive(&mut admin).expect("Keep Alive");
    wait_keep_alive_cut(&admin, last_word, kato, "admin queue");
    assert!(q.wait_disconnected(HANG_GUARD), "I/O queue dropped");
    wait_all_gone(&t);
    t.shutdown();
}

/// Keep-alive is any command of the controller: a host doing only I/O on an I/O queue (no
/// Keep Alive on the admin queue), a write every tenth of its KATO, keeps its controller for
/// three KATOs; when it falls silent, both queues go, not before KATO after its last write.
/// A test thread starved for KATO (a loaded machine) makes an attempt inconclusive, and it is
/// tried again: only a controller dropped though its host was never silent that long fails.
#[test]
fn io_traffic_alone_keeps_the_controller_alive() {
    const ATTEMPTS: u32 = 3;
    let _g = serial();
    let kato = Duration::from_secs(2);
    let (t, addr) = start_with("32MiB", "", "");
    let mut starved = Vec::new();
    for _ in 0..ATTEMPTS {
        let since = Instant::now();
        let (admin, cntlid) = admin_queue(addr, kato.as_millis() as u32);
        let mut q = io_queue(addr, 1, cntlid);
        let mut lba = 0;
        let talk = keep_talking(since, 30, kato / 10, || {
            let sgl = q.keyed(0, 8 * BLOCK);
            let c = q.try_submit(rw_sqe(true, 1, lba, 8, &sgl), &[])?;
            assert!(c.status.is_success(), "write: {}", c.status);
            lba = (lba + 8) % 1024;
            Ok(())
        });
        if talk.lived(kato) {
            let (controllers, connections) = (t.controllers(), t.queues_open());
            if talk.last_sent.elapsed() < kato {
                assert_eq!(controllers, 1, "the controller was torn down");
                assert_eq!(connections, 2, "a queue was dropped");
            }
            // Now silent: both go.
            wait_keep_alive_cut(&admin, talk.last_sent, kato, "admin queue");
            assert!(q.wait_disconnected(HANG_GUARD), "I/O queue dropped");
            wait_all_gone(&t);
            t.shutdown();
            return;
        }
        starved.push(talk.longest_silence);
        drop((q, admin));
        wait_all_gone(&t);
    }
    panic!("the test host itself was silent for KATO {kato:?} in every attempt: {starved:?}");
}

/// Allow-list: a host not on `hosts` is refused with Connect Invalid Host and leaves nothing
/// behind; an unknown subsystem NQN is Invalid Parameters pointing at SUBNQN; a subsystem
/// with `allow_any_host` takes any host; an I/O queue cannot join a controller under another
/// host NQN. An empty host NQN (SPDK's `spdk_nvme_perf` sends one without `hostnqn:`) is a
/// host like any other: refused by an allow-list, admitted by `allow_any_host`.
#[test]
fn allow_list_refuses_unlisted_hosts_and_allow_any_host_admits() {
    let _g = serial();
    let (t, addr) = start_with("32MiB", "", &open_subsystem());
    for _ in 0..3 {
        let mut h = Host::connect(addr, cm_request(0, 32)).unwrap();
        let c = h.fabrics_connect(0, SUBNQN, OTHER_HOSTNQN, CNTLID_DYNAMIC, 0);
        assert_status(&c, Status::CONNECT_INVALID_HOST);
        let c = h.fabrics_connect(0, SUBNQN, "", CNTLID_DYNAMIC, 0);
        assert_status(&c, Status::CONNECT_INVALID_HOST);
        assert_eq!(c.dw0, 0x0001_0200, "IATTR 1, IPO 512: the HOSTNQN field");
        assert_eq!(t.controllers(), 0, "no controller for a refused host");
        let c = h.fabrics_connect(0, "nqn.2026-11.io.rdmablk:nope", HOSTNQN, CNTLID_DYNAMIC, 0);
        assert_status(&c, Status::CONNECT_INVALID_PARAMETERS);
        assert_eq!(c.dw0, 0x0001_0100, "IATTR 1, IPO 256: the SUBNQN field");
        drop(h);
        wait_all_gone(&t);
    }

    // allow_any_host: both host NQNs get a controller, and it serves I/O.
    for hostnqn in [HOSTNQN, OTHER_HOSTNQN, ""] {
        let mut a = Host::connect(addr, cm_request(0, 32)).unwrap();
        let c = a.fabrics_connect(0, OPEN_SUBNQN, hostnqn, CNTLID_DYNAMIC, 0);
        assert!(c.status.is_success(), "{hostnqn}: {}", c.status);
        let cntlid = c.dw0 as u16;
        assert!(a
            .property_set(rdmablk::nvme::properties::CC, 0x0046_0001)
            .status
            .is_success());
        let mut q = Host::connect(addr, cm_request(1, DEPTH as u16)).unwrap();
        // Another host cannot attach an I/O queue to this controller.
        let other = if hostnqn == HOSTNQN {
            OTHER_HOSTNQN
        } else {
            HOSTNQN
        };
        let c = q.fabrics_connect(1, OPEN_SUBNQN, other, cntlid, 0);
        assert_status(&c, Status::CONNECT_INVALID_PARAMETERS);
        let c = q.fabrics_connect(1, OPEN_SUBNQN, hostnqn, cntlid, 0);
        assert!(c.status.is_success(), "{}", c.status);
        assert!(q.rw(false, 1, 0, 1).status.is_success());
        drop(q);
        drop(a);
    }
    // The restricted subsystem's I/O queues cannot be joined through the open one's cntlid.
    let (admin, cntlid) = admin_queue(addr, 0);
    let mut q = Host::connect(addr, cm_request(1, DEPTH as u16)).unwrap();
    let c = q.fabrics_connect(1, OPEN_SUBNQN, HOSTNQN, cntlid, 0);
    assert_status(&c, Status::CONNECT_INVALID_PARAMETERS);
    drop(q);
    drop(admin);
    wait_all_gone(&t);
    t.shutdown();
}

/// `limits.max_connections`: one more queue is refused with NO_RESOURCES (nothing carved for
/// it); once a queue goes, a new one fits again.
#[test]
fn max_connections_refuses_with_no_resources() {
    let _g = serial();
    init_tracing();
    let text = config_text(free_port(), "32MiB", "")
        .replace("max_connections = 16", "max_connections = 2");
    let t = Target::start(Config::from_str(&text).expect("config")).expect("target starts");
    let addr = t.local_addrs()[0];
    let (admin, cntlid) = admin_queue(addr, 0);
    let q = io_queue(addr, 1, cntlid);
    let parcels = t.arena_stats().parcels;
    assert_eq!(
        reject_status(Host::connect(addr, cm_request(2, DEPTH as u16))),
        rdmablk::nvme::transport::rdma::CmRejectStatus::NoResources
    );
    assert_eq!(
        t.arena_stats().parcels,
        parcels,
        "nothing carved for the refused queue"
    );
    assert_eq!(t.queues_open(), 2);
    drop(q);
    let deadline = Instant::now() + HANG_GUARD;
    while t.queues_open() != 1 {
        assert!(Instant::now() < deadline, "the I/O queue did not go");
        std::thread::sleep(Duration::from_millis(20));
    }
    let q = io_queue(addr, 2, cntlid);
    drop(q);
    drop(admin);
    wait_all_gone(&t);
    t.shutdown();
}

/// A host that opens queues (RDMA CM) but never sends the Fabrics Connect: no controller, so
/// no keep-alive applies; the target drops such queues after
/// `target.connect_timeout_ms` instead of holding their parcels for ever.
#[test]
fn queue_without_fabrics_connect_is_dropped_after_connect_timeout() {
    let _g = serial();
    let connect_timeout = Duration::from_millis(300);
    let (t, addr) = start_with(
        "32MiB",
        &format!("connect_timeout_ms = {}", connect_timeout.as_millis()),
        "",
    );
    // Before the CM connects: the target's clock for each queue starts after this.
    let before_connect = Instant::now();
    let admin = Host::connect(addr, cm_request(0, 32)).expect("CM connect");
    let io = Host::connect(addr, cm_request(1, DEPTH as u16)).expect("CM connect");
    assert_eq!(t.queues_open(), 2);
    assert!(admin.wait_disconnected(HANG_GUARD), "admin queue kept");
    assert!(io.wait_disconnected(HANG_GUARD), "I/O queue kept");
    assert!(
        before_connect.elapsed() >= connect_timeout,
        "dropped {:?} after connecting, before connect_timeout_ms",
        before_connect.elapsed()
    );
    wait_all_gone(&t);
    // A host that does connect in time is not affected.
    let (mut admin, _) = admin_queue(addr, 0);
    std::thread::sleep(Duration::from_millis(600));
    assert!(admin
        .submit(rdmablk::nvme::admin::keep_alive_sqe(0), &[])
        .status
        .is_success());
    drop(admin);
    wait_all_gone(&t);
    t.shutdown();
}

/// A listener whose port is taken fails the start with an error `is_addr_in_use` recognises
/// (the callers that pick a port retry on it: testkit::on_free_port, rdmablk-perf
/// --embedded), on each transport that binds a TCP port here; a missing backing file is not
/// one.
#[test]
fn a_taken_port_is_told_apart_from_other_start_errors() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = holder.local_addr().unwrap().port();
    let text = |listener: &str, port: u16, ns: &str| {
        format!(
            "[[listener]]\n{listener}\naddress = \"127.0.0.1\"\nport = {port}\n\
             [control]\nsocket = \"\"\n[arena]\nbytes = \"32MiB\"\nlock = false\n\
             [[subsystem]]\nnqn = \"{SUBNQN}\"\nallow_any_host = true\n{ns}"
        )
    };
    for listener in ["provider = \"soft\"", "transport = \"tcp\""] {
        let cfg = Config::from_str(&text(listener, port, "")).expect("config");
        match Target::start(cfg) {
            Ok(_) => panic!("{listener}: the target started on a taken port"),
            Err(e) => assert!(e.is_addr_in_use(), "{listener}: {e} ({e:?})"),
        }
    }
    let free = rdmablk_testkit::free_port("127.0.0.1");
    let ns = "[[subsystem.namespace]]\nnsid = 1\n\
              backend = { kind = \"file\", path = \"/nonexistent/rdmablk-test\" }\n";
    let cfg = Config::from_str(&text("transport = \"tcp\"", free, ns)).expect("config");
    match Target::start(cfg) {
        Ok(_) => panic!("a namespace on a missing file started"),
        Err(e) => assert!(!e.is_addr_in_use(), "{e}"),
    }
}
