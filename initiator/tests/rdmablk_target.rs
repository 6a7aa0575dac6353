//! End-to-end tests against the real `rdmablk-target`, started in-process through its library
//! API on the soft provider (127.0.0.1), with a namespace backed by a file in a temporary
//! directory so data survives a target restart; and the same over NVMe/TCP (a tcp listener
//! on the same address): the sync and async APIs verified without and with digests,
//! discovery over tcp://, a target restart.

use std::time::{Duration, Instant};

use rdmablk_initiator::{
    discover_with, Completion, ConnectOptions, Controller, IoQueue, Op, Transport,
};
use rdmablk_target::config::Config;
use rdmablk_target::metrics::namespace_io;
use rdmablk_target::nvmf::worker::queues::SHUTDOWN_GRACE;
use rdmablk_target::Target;

const NQN: &str = "nqn.2026-11.io.rdmablk:initiator-e2e";

use rdmablk_testkit::tmp_dir;

fn e2e_fabric() -> (String, String) {
    rdmablk_testkit::e2e_fabric()
}

/// A port nobody listens on right now (the target refuses port 0 in its config).
fn free_port() -> u16 {
    rdmablk_testkit::free_port(&e2e_fabric().1)
}

/// How long a target may take to shut down before the test calls it a hang: teardown is
/// bounded (drain <= 5 s, shutdown grace 2 s), so anything near this is a blocked worker.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(30);

/// A running target that is shut down, within [`SHUTDOWN_LIMIT`], when the test ends or
/// fails: a hang in teardown becomes a clear failure instead of a stuck test.
struct Running(Option<Target>);

impl std::ops::Deref for Running {
    type Target = Target;
    fn deref(&self) -> &Target {
        self.0.as_ref().expect("target running")
    }
}

impl Running {
    fn shutdown(mut self) {
        stop_within(self.0.take().expect("target running"));
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            stop_within(t);
        }
    }
}

fn stop_within(t: Target) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        t.shutdown();
        let _ = tx.send(());
    });
    if rx.recv_timeout(SHUTDOWN_LIMIT).is_err() {
        let msg = format!(
            "rdmablk-target did not shut down within {SHUTDOWN_LIMIT:?}: a worker is blocked \
             in a queue teardown (see the target log and dmesg)"
        );
        if std::thread::panicking() {
            eprintln!("{msg}"); // already failing: report, leave the thread behind
        } else {
            panic!("{msg}");
        }
    }
}

fn start(port: u16, block_size: u32, img: &std::path::Path) -> Running {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let toml = format!(
        r#"
[[listener]]
provider = "{provider}"
address = "{address}"
port = {port}

[target]
worker_threads = 1
poll_mode = "interrupt"

[arena]
bytes = "96MiB"
lock = false

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = {block_size}
backend = {{ kind = "file", path = "{}", create_size = "32MiB", direct = false }}
"#,
        img.display(),
        provider = e2e_fabric().0,
        address = e2e_fabric().1,
    );
    let cfg: Config = Config::from_str(&toml).expect("config");
    Running(Some(Target::start(cfg).expect("target starts")))
}

fn url(t: &Target, query: &str) -> String {
    let scheme = if e2e_fabric().0 == "verbs" {
        "rdma"
    } else {
        "soft"
    };
    format!("{scheme}://{}/{NQN}{query}", t.local_addrs()[0])
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        queue_size: 32,
        io_queues: 2,
        // The Linux host's default. 1 s (sent every 500 ms) left no room for the stalls of a
        // Soft-RoCE VM under TCG on a loaded machine: a controller torn down by keep-alive in
        // mid-test fails the test with "the target disconnected".
        kato_ms: 5_000,
        io_timeout_ms: 5_000,
        connect_timeout_ms: 2_000,
        reconnect_delay_ms: 50,
        reconnect_attempts: 60,
        ..ConnectOptions::default()
    }
}

use rdmablk_testkit::block_pattern as pattern;

fn sync_sizes(ctrl: &Controller, pass: u8) {
    let ns = ctrl.namespace(1).unwrap();
    let bs = ns.block_size() as usize;
    let (mut off, mut size) = (0u64, bs);
    while size <= 1 << 20 {
        let data = pattern(off, size, pass);
        ns.write_at(off, &data).unwrap();
        let mut back = vec![0u8; size];
        ns.read_at(off, &mut back).unwrap();
        assert!(back == data, "{size} B at {off}: data differs");
        off += size as u64;
        size *= 2;
    }
    ns.flush().unwrap();
}

fn async_round(ctrl: &Controller, pass: u8) {
    let mut q = ctrl.io_queue(1).unwrap();
    let mut done = Vec::new();
    for op in [Op::Write, Op::Read] {
        let mut next = 0u64;
        while next < 256 || q.in_flight() > 0 {
            while next < 256 {
                let off = (4 << 20) + next * 8192;
                let mut b = ctrl.alloc(8192).unwrap();
                if op == Op::Write {
                    b.as_mut_slice().copy_from_slice(&pattern(off, 8192, pass));
                }
                match q.submit(op, off, 8192, b, next) {
                    Ok(()) => next += 1,
                    Err(rdmablk_initiator::SubmitError::QueueFull(_)) => break,
                    Err(e) => panic!("{:?}", e.into_error()),
                }
            }
            q.wait(&mut done, 1).unwrap();
            for c in done.drain(..) {
                c.result.unwrap();
                if op == Op::Read {
                    assert!(c.buf.as_slice() == &pattern(c.offset, 8192, pass)[..]);
                }
            }
        }
    }
}

/// Push asked for: whatever the target answers, data is verified and the counters agree
/// with the answer (granted: every write pushed; declined: standard paths, none pushed).
#[test]
fn sync_and_async_verified_push_asked_512b_blocks() {
    let dir = tmp_dir("push");
    let t = start(free_port(), 512, &dir.join("ns.img"));
    let ctrl = Controller::connect_with(&url(&t, ""), opts()).unwrap();
    let info = ctrl.info();
    assert_eq!(ctrl.namespace(1).unwrap().block_size(), 512);
    sync_sizes(&ctrl, 1);
    async_round(&ctrl, 2);
    let s = ctrl.stats();
    if let Some((_, slot_bytes)) = info.push_window {
        assert!(s.pushed_writes > 0, "{s:?}");
        pushed_up_to_a_slot(&info, slot_bytes, &s);
    } else {
        eprintln!("NOTE: rdmablk-target declined push writes; standard paths verified instead");
        assert_eq!(s.pushed_writes, 0, "{s:?}");
    }
    drop(ctrl);
    t.shutdown();
}

#[test]
fn push_writes_granted_and_used_by_rdmablk_target() {
    let dir = tmp_dir("push-granted");
    let t = start(free_port(), 512, &dir.join("ns.img"));
    let ctrl = Controller::connect_with(&url(&t, ""), opts()).unwrap();
    let info = ctrl.info();
    let (_, slot_bytes) = info.push_window.expect("push granted");
    sync_sizes(&ctrl, 8);
    let s = ctrl.stats();
    assert!(s.pushed_writes > 0, "{s:?}");
    pushed_up_to_a_slot(&info, slot_bytes, &s);
    drop(ctrl);
    t.shutdown();
}

/// Writes up to a push slot (the target's push budget over the queue's depth) were pushed;
/// longer ones, if the slot is shorter than the largest transfer, took the keyed path.
fn pushed_up_to_a_slot(
    info: &rdmablk_initiator::ControllerInfo,
    slot_bytes: u32,
    s: &rdmablk_initiator::StatsSnapshot,
) {
    if slot_bytes >= info.max_transfer_bytes {
        assert_eq!(
            s.keyed_writes, 0,
            "every write fits a {slot_bytes}-byte slot: {s:?}"
        );
    } else {
        assert!(
            s.keyed_writes > 0,
            "writes over {slot_bytes} bytes go keyed: {s:?}"
        );
    }
}

#[test]
fn without_push_uses_in_capsule_and_keyed_writes() {
    let dir = tmp_dir("nopush");
    let t = start(free_port(), 4096, &dir.join("ns.img"));
    let ctrl = Controller::connect_with(&url(&t, "?push=0"), opts()).unwrap();
    assert_eq!(ctrl.info().push_window, None);
    sync_sizes(&ctrl, 3);
    async_round(&ctrl, 4);
    let s = ctrl.stats();
    assert_eq!(s.pushed_writes, 0);
    assert!(s.in_capsule_writes > 0 && s.keyed_writes > 0, "{s:?}");
    drop(ctrl);
    t.shutdown();
}

#[test]
fn reconnects_after_target_restart_and_io_resumes() {
    let dir = tmp_dir("restart");
    let img = dir.join("ns.img");
    let t = start(free_port(), 512, &img);
    let port = t.local_addrs()[0].port();
    let ctrl = Controller::connect_with(&url(&t, ""), opts()).unwrap();
    let ns = ctrl.namespace(1).unwrap();
    let data = pattern(0, 256 << 10, 5);
    ns.write_at(0, &data).unwrap();
    ns.flush().unwrap();
    t.shutdown();
    let img2 = img.clone();
    let (reading, go) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        go.recv().expect("the test reads");
        start(port, 512, &img2)
    });
    // Issued while the target is down (it starts once the read is on its way, and starting
    // takes far longer than that way): completes once the controller has reconnected.
    let mut back = vec![0u8; 256 << 10];
    reading.send(()).unwrap();
    ns.read_at(0, &mut back).unwrap();
    assert!(back == data, "data after restart differs");
    let t2 = h.join().unwrap();
    assert!(ctrl.stats().reconnects >= 1, "{:?}", ctrl.stats());
    sync_sizes(&ctrl, 6);
    async_round(&ctrl, 7);
    drop((ns, ctrl));
    t2.shutdown();
}

/// Cost of slice I/O (bounce through the pool) against zero-copy `IoBuf` I/O, 128 KiB writes
/// and reads. Prints MB/s; run with `--ignored --nocapture` (a measurement, not a check).
#[test]
#[ignore = "measurement: run with --ignored --nocapture"]
fn bounce_vs_zero_copy_cost() {
    let dir = tmp_dir("bench");
    let t = start(free_port(), 4096, &dir.join("ns.img"));
    let ctrl = Controller::connect_with(&url(&t, "?push=0"), opts()).unwrap();
    let ns = ctrl.namespace(1).unwrap();
    const LEN: usize = 128 << 10;
    const N: usize = 200;
    let data = pattern(0, LEN, 9);
    let mut back = vec![0u8; LEN];
    let mut buf = ctrl.alloc(LEN).unwrap();
    buf.as_mut_slice().copy_from_slice(&data);
    let mb = (N * LEN) as f64 / 1e6;
    for round in 0..2 {
        let t0 = std::time::Instant::now();
        for i in 0..N {
            let off = (i % 64 * LEN) as u64;
            ns.write_at(off, &data).unwrap();
            ns.read_at(off, &mut back).unwrap();
        }
        let slice = t0.elapsed();
        let t0 = std::time::Instant::now();
        for i in 0..N {
            let off = (i % 64 * LEN) as u64;
            ns.write_buf(off, &buf).unwrap();
            ns.read_buf(off, &mut buf).unwrap();
        }
        let zc = t0.elapsed();
        eprintln!(
            "round {round}: slices {:.0} MB/s, IoBuf {:.0} MB/s (write+read of {N} x 128 KiB)",
            2.0 * mb / slice.as_secs_f64(),
            2.0 * mb / zc.as_secs_f64()
        );
    }
    drop((ns, ctrl));
    t.shutdown();
}

#[test]
fn discover_lists_the_subsystem_and_its_url_connects() {
    let dir = tmp_dir("discover");
    let t = start(free_port(), 4096, &dir.join("ns.img"));
    let base = url(&t, "");
    let base = base.rsplit_once('/').expect("URL with a path").0;
    let entries = rdmablk_initiator::discover_with(base, opts()).expect("discover");
    assert_eq!(entries.len(), 1, "{entries:?}");
    let e = &entries[0];
    assert_eq!(e.kind, rdmablk_initiator::EntryKind::Subsystem);
    assert_eq!(e.subnqn, NQN);
    assert_eq!(e.addr, Some(t.local_addrs()[0]));
    // The entry's URL is what connect takes.
    let url = e.url().expect("a URL for an RDMA entry");
    assert_eq!(url, self::url(&t, ""));
    let ctrl = Controller::connect_with(&url, opts()).expect("connect to the discovered URL");
    sync_sizes(&ctrl, 9);
    drop(ctrl);
    t.shutdown();
}

// ----------------------------------------------------------------- NVMe/TCP

/// A target with one NVMe/TCP listener on the e2e address.
fn start_tcp(port: u16, img: &std::path::Path) -> Target {
    start_on("tcp", port, img)
}

/// A target with one listener of `transport` (`tcp` or `loop`) on the e2e address.
fn start_on(transport: &str, port: u16, img: &std::path::Path) -> Target {
    let file = format!(
        r#"{{ kind = "file", path = "{}", create_size = "32MiB", direct = false }}"#,
        img.display()
    );
    start_with(transport, port, &file)
}

/// As [`start_on`], with the namespace's backend table given.
fn start_with(transport: &str, port: u16, backend: &str) -> Target {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let toml = format!(
        r#"
[[listener]]
transport = "{transport}"
address = "{address}"
port = {port}

[target]
worker_threads = 1
poll_mode = "interrupt"

[control]
socket = ""

[arena]
bytes = "96MiB"
lock = false

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = {backend}
"#,
        address = e2e_fabric().1,
    );
    Target::start(Config::from_str(&toml).expect("config")).expect("target starts")
}

#[test]
fn sync_and_async_verified_over_tcp_without_and_with_digests() {
    let dir = rdmablk_testkit::tmp_dir("tcp");
    let t = start_tcp(free_port(), &dir.join("ns.img"));
    let base = format!("tcp://{}/{NQN}", t.local_addrs()[0]);
    for (pass, query) in [
        (1u8, ""),
        (2, "?hdr_digest=1&data_digest=1"),
        (3, "?hdr_digest=1"),
    ] {
        let ctrl = Controller::connect_with(&format!("{base}{query}"), opts()).unwrap();
        let info = ctrl.info();
        assert_eq!(info.push_window, None, "no push writes over TCP");
        assert!(
            info.in_capsule_bytes > 0,
            "the tcp listener offers in-capsule data"
        );
        sync_sizes(&ctrl, pass);
        async_round(&ctrl, pass);
        let s = ctrl.stats();
        assert!(s.in_capsule_writes > 0 && s.keyed_writes > 0, "{s:?}");
        // The 1 MiB read's C2HData cannot have arrived whole in one receive (256 KiB):
        // some of it was received straight into its buffer, and read back right.
        assert!(s.placed_bytes > 0, "{s:?}");
        drop(ctrl);
    }
    t.shutdown();
}

#[test]
fn discovery_over_tcp_lists_a_tcp_url_that_connects() {
    let dir = rdmablk_testkit::tmp_dir("tcp-disc");
    let t = start_tcp(free_port(), &dir.join("ns.img"));
    let addr = t.local_addrs()[0];
    let entries = discover_with(&format!("tcp://{addr}"), opts()).unwrap();
    let e = entries
        .iter()
        .find(|e| e.subnqn == NQN)
        .expect("the subsystem is listed");
    assert_eq!(e.transport.map(Transport::scheme), Some("tcp"));
    let url = e.url().expect("a URL for a tcp entry");
    assert_eq!(url, format!("tcp://{addr}/{NQN}"));
    let ctrl = Controller::connect_with(&url, opts()).unwrap();
    sync_sizes(&ctrl, 4);
    drop(ctrl);
    t.shutdown();
}

#[test]
fn a_target_restart_costs_a_reconnect_not_an_error() {
    let dir = rdmablk_testkit::tmp_dir("tcp-restart");
    let img = dir.join("ns.img");
    let port = free_port();
    let t = start_tcp(port, &img);
    let ctrl =
        Controller::connect_with(&format!("tcp://{}/{NQN}", t.local_addrs()[0]), opts()).unwrap();
    let ns = ctrl.namespace(1).unwrap();
    let data = pattern(0, 65536, 9);
    ns.write_at(0, &data).unwrap();
    ns.flush().unwrap();
    // Shutdown returns once the listener and every queue are gone: the port is free.
    t.shutdown();
    let t = start_tcp(port, &img);
    let mut back = vec![0u8; data.len()];
    ns.read_at(0, &mut back).unwrap();
    assert!(back == data, "data read back after the restart");
    assert!(ctrl.stats().reconnects >= 1, "{:?}", ctrl.stats());
    drop(ns);
    drop(ctrl);
    t.shutdown();
}

/// One target serving both transports (an RDMA listener on the e2e fabric and a tcp one), one
/// worker in interrupt mode: both hosts' I/O is served, so the worker wakes for either
/// transport's events while it sleeps.
#[test]
fn one_worker_serves_rdma_and_tcp_hosts_at_once() {
    let dir = rdmablk_testkit::tmp_dir("both");
    let (rport, tport) = (free_port(), free_port());
    let toml = two_listeners(&dir.join("ns.img"), rport, tport, "", "");
    let t = Target::start(Config::from_str(&toml).expect("config")).expect("target starts");
    let addrs = t.local_addrs();
    let rdma = Controller::connect_with(&url(&t, ""), opts()).unwrap();
    let tcp = Controller::connect_with(&format!("tcp://{}/{NQN}", addrs[1]), opts()).unwrap();
    for pass in 0..3u8 {
        // Each host waits for its own I/O while the worker sleeps between them.
        sync_sizes(&rdma, 10 + pass);
        std::thread::sleep(Duration::from_millis(30));
        sync_sizes(&tcp, 20 + pass);
        std::thread::sleep(Duration::from_millis(30));
    }
    drop(rdma);
    drop(tcp);
    t.shutdown();
}

// ----------------------------------------------------------------- loop

/// The loop transport (a target in this process) runs the initiator's whole stack against
/// the target's core: sync and async I/O verified, discovery listing a loop URL that
/// connects, a restart costing a reconnect.
#[test]
fn sync_async_discovery_and_restart_over_loop() {
    let dir = rdmablk_testkit::tmp_dir("loop");
    let img = dir.join("ns.img");
    let port = free_port();
    let t = start_on("loop", port, &img);
    let addr = t.local_addrs()[0];
    let entries = discover_with(&format!("loop://{addr}"), opts()).unwrap();
    let e = entries
        .iter()
        .find(|e| e.subnqn == NQN)
        .expect("the subsystem is listed");
    assert_eq!(e.transport.map(Transport::scheme), Some("loop"));
    let url = e.url().expect("a URL for a loop entry");
    assert_eq!(url, format!("loop://{addr}/{NQN}"));
    let ctrl = Controller::connect_with(&url, opts()).unwrap();
    let info = ctrl.info();
    assert_eq!(info.push_window, None, "no push writes over loop");
    assert!(info.in_capsule_bytes > 0, "in-capsule data offered");
    sync_sizes(&ctrl, 1);
    async_round(&ctrl, 2);
    let s = ctrl.stats();
    // Over loop write data goes keyed: one copy, where in-capsule data would take three.
    assert!(s.in_capsule_writes == 0 && s.keyed_writes > 0, "{s:?}");
    let ns = ctrl.namespace(1).unwrap();
    let data = pattern(0, 65536, 3);
    ns.write_at(0, &data).unwrap();
    ns.flush().unwrap();
    t.shutdown();
    let t = start_on("loop", port, &img);
    let mut back = vec![0u8; data.len()];
    ns.read_at(0, &mut back).unwrap();
    assert!(back == data, "data read back after the restart");
    assert!(ctrl.stats().reconnects >= 1, "{:?}", ctrl.stats());
    drop(ns);
    drop(ctrl);
    t.shutdown();
}

// ----------------------------------------------------------------- a cut connection

/// Polls `q` (an NVMe/TCP queue sends what was submitted only when it is driven) until the
/// target counts `n` commands of namespace 1 executing, within 10 s; none may complete first.
fn until_executing(q: &mut IoQueue, done: &mut Vec<Completion>, t: &Target, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        q.poll(done).unwrap();
        let tags: Vec<_> = done.iter().map(|c| (c.tag, &c.result)).collect();
        assert!(
            tags.is_empty(),
            "completed before the target stopped: {tags:?}"
        );
        let in_flight = namespace_io(&t.handle())
            .iter()
            .find(|io| io.nsid == 1)
            .map_or(0, |io| io.in_flight);
        if in_flight == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{in_flight} of {n} commands executing in the target after 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Shuts `t` down on a thread of its own (a target waits for its backend's operations, held
/// here for seconds); joining gives the shutdown [`SHUTDOWN_LIMIT`].
fn stop_in_background(t: Target) -> std::thread::JoinHandle<()> {
    let addr = t.local_addrs()[0];
    let h = std::thread::spawn(move || stop_within(t));
    // The listener goes first: then the port is free, while the workers still wait.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpListener::bind(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "{addr} still listened on 10 s into the shutdown"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    h
}

/// Writes in flight on an asynchronous queue when the target goes away are held and sent
/// again once it is back: the application sees no error, and the data is there. With the
/// target gone for good, they fail once `ctrl_loss_tmo_ms` has passed, with the controller's
/// error.
#[test]
fn a_cut_connection_costs_the_async_queue_nothing_until_ctrl_loss_tmo() {
    let dir = rdmablk_testkit::tmp_dir("requeue");
    let img = dir.join("ns.img");
    let port = free_port();
    // A stopping target answers what executes for SHUTDOWN_GRACE, then closes the queues
    // unanswered. Every completion is held 3 s past that grace, so writes seen executing
    // (in the namespace's in-flight count) before the shutdown are cut off unanswered, unless
    // the machine stalls this test for those 3 s: then the target answers them and the test
    // fails (nothing sent again in phase 1, no error in phase 2), it does not pass untested.
    let hold_us = (SHUTDOWN_GRACE + Duration::from_secs(3)).as_micros();
    let slow = format!(
        r#"{{ kind = "error", latency_us = {hold_us}, inner = {{ kind = "file", path = "{}", create_size = "32MiB", direct = false }} }}"#,
        img.display()
    );
    let t = start_with("tcp", port, &slow);
    let url = format!("tcp://{}/{NQN}", t.local_addrs()[0]);
    let o = ConnectOptions {
        ctrl_loss_tmo_ms: 2_000,
        ..opts()
    };
    let ctrl = Controller::connect_with(&url, o).unwrap();
    let mut q = ctrl.io_queue(1).unwrap();
    const N: u64 = 16;
    for i in 0..N {
        let mut b = ctrl.alloc(4096).unwrap();
        b.as_mut_slice()
            .copy_from_slice(&pattern(i * 4096, 4096, 5));
        q.submit(Op::Write, i * 4096, 4096, b, i).unwrap();
    }
    let mut done = Vec::new();
    until_executing(&mut q, &mut done, &t, N);
    // The old target waits out its held completions; the new one takes the port meanwhile, so
    // the outage the host sees (from the close at the end of the grace) stays short.
    let first = stop_in_background(t);
    let t = start_on("tcp", port, &img);
    while (done.len() as u64) < N {
        q.wait(&mut done, 1).unwrap();
    }
    for c in &done {
        assert!(c.result.is_ok(), "write {} failed: {:?}", c.tag, c.result);
    }
    let s = ctrl.stats();
    assert!(
        s.reconnects >= 1 && s.retried_ios >= N,
        "requests were sent again: {s:?}"
    );
    let ns = ctrl.namespace(1).unwrap();
    let mut back = vec![0u8; (N * 4096) as usize];
    ns.read_at(0, &mut back).unwrap();
    for i in 0..N as usize {
        assert!(
            back[i * 4096..(i + 1) * 4096] == pattern(i as u64 * 4096, 4096, 5)[..],
            "block {i} after the resend"
        );
    }
    // Gone for good: what is in flight fails after ctrl_loss_tmo_ms, not before.
    drop(t);
    let t = start_with("tcp", port, &slow);
    let mut b = ctrl.alloc(4096).unwrap();
    b.as_mut_slice().fill(7);
    done.clear();
    q.submit(Op::Write, 0, 4096, b, 99).unwrap();
    // Executing in the new target: the controller is back before the cut, so the loss the
    // timeout counts from is the cut and not the restart before it.
    until_executing(&mut q, &mut done, &t, 1);
    // The connection cannot be lost before the shutdown starts.
    let cut = Instant::now();
    let second = stop_in_background(t);
    while done.is_empty() {
        q.wait(&mut done, 1).unwrap();
    }
    let e = done[0]
        .result
        .as_ref()
        .expect_err("the target never came back");
    assert!(e.to_string().contains("ctrl_loss_tmo_ms 2000"), "{e}");
    assert!(
        cut.elapsed() >= Duration::from_millis(2_000),
        "failed only once the loss timeout ran out, not at the cut ({:?})",
        cut.elapsed()
    );
    drop(q);
    drop(ns);
    drop(ctrl);
    first.join().expect("the first target shut down");
    second.join().expect("the last target shut down");
}

/// One multipath controller over two transports of one target: an RDMA path (optimized) and
/// an NVMe/TCP path (non-optimized, by the tcp listener's ANA state). Verified I/O goes
/// through the RDMA path only while it is usable; both paths are live.
#[test]
fn one_multipath_controller_over_an_rdma_path_and_a_tcp_path() {
    let dir = rdmablk_testkit::tmp_dir("mixed-paths");
    let (rport, tport) = (free_port(), free_port());
    let toml = two_listeners(
        &dir.join("ns.img"),
        rport,
        tport,
        "ana = { 1 = \"non-optimized\" }",
        "ana_group = 1",
    );
    let t = Target::start(Config::from_str(&toml).expect("config")).expect("target starts");
    let addrs = t.local_addrs();
    let urls = [url(&t, ""), format!("tcp://{}/{NQN}", addrs[1])];
    let mp = rdmablk_initiator::MultipathController::connect_with(&urls, opts()).unwrap();
    let ns = mp.namespace(1).unwrap();
    let data = pattern(4096, 65536, 21);
    ns.write_at(4096, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    ns.read_at(4096, &mut back).unwrap();
    assert!(
        back == data,
        "data read back through the multipath controller"
    );
    let paths = mp.paths();
    assert_eq!(paths.len(), 2);
    assert!(paths.iter().all(|p| p.live), "{paths:?}");
    assert!(paths[0].url.starts_with(&urls[0][..4]), "{paths:?}");
    assert!(
        paths[0].commands > 0,
        "the optimized RDMA path served: {paths:?}"
    );
    assert_eq!(
        paths[1].commands, 0,
        "the non-optimized TCP path stood by: {paths:?}"
    );
    drop(ns);
    drop(mp);
    t.shutdown();
}

/// A target configuration with an RDMA listener on the e2e fabric at `rport` and a tcp one
/// at `tport` (with `tcp_extra` lines), one worker in interrupt mode, and namespace 1 (with
/// `ns_extra` lines) on the file `img`.
fn two_listeners(
    img: &std::path::Path,
    rport: u16,
    tport: u16,
    tcp_extra: &str,
    ns_extra: &str,
) -> String {
    format!(
        r#"
[[listener]]
provider = "{provider}"
address = "{address}"
port = {rport}

[[listener]]
transport = "tcp"
address = "{address}"
port = {tport}
{tcp_extra}

[target]
worker_threads = 1
poll_mode = "interrupt"

[control]
socket = ""

[arena]
bytes = "96MiB"
lock = false

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 512
{ns_extra}
backend = {{ kind = "file", path = "{}", create_size = "32MiB", direct = false }}
"#,
        img.display(),
        provider = e2e_fabric().0,
        address = e2e_fabric().1,
    )
}

#[test]
fn reservations_fence_one_host_from_another_over_tcp() {
    use rdmablk::nvme::Status;
    use rdmablk_initiator::{AcquireAction, Error, Persist, RegisterAction, ResvType};
    let port = free_port();
    let t = start_with("tcp", port, r#"{ kind = "ram", size = "8MiB" }"#);
    let url = format!("tcp://{}/{NQN}", t.local_addrs()[0]);
    let host = |n: u8| ConnectOptions {
        hostnqn: format!(
            "nqn.2014-08.org.nvmexpress:uuid:72657376-0000-4000-8000-0000000000{n:02x}"
        ),
        hostid: [n; 16],
        ..opts()
    };
    let a = Controller::connect_with(&url, host(0xa)).expect("host A connects");
    let b = Controller::connect_with(&url, host(0xb)).expect("host B connects");
    let (na, nb) = (a.namespace(1).unwrap(), b.namespace(1).unwrap());
    let conflict = |r: rdmablk_initiator::Result<()>| match r {
        Err(Error::Nvme { status, .. }) if status.same_code(&Status::RESERVATION_CONFLICT) => {}
        other => panic!("expected a Reservation Conflict, got {other:?}"),
    };
    let block = vec![7u8; 512];

    na.resv_register(
        RegisterAction::Register { new_key: 1 },
        0,
        false,
        Persist::NoChange,
    )
    .unwrap();
    na.resv_acquire(1, ResvType::WriteExclusive, AcquireAction::Acquire)
        .unwrap();
    na.write_at(0, &block).unwrap();
    conflict(nb.write_at(0, &block));
    let mut back = vec![0u8; 512];
    nb.read_at(0, &mut back)
        .expect("Write Exclusive lets others read");
    assert_eq!(back, block);

    nb.resv_register(
        RegisterAction::Register { new_key: 2 },
        0,
        false,
        Persist::NoChange,
    )
    .unwrap();
    nb.resv_acquire(
        2,
        ResvType::WriteExclusive,
        AcquireAction::Preempt { victim_key: 1 },
    )
    .unwrap();
    let r = na.resv_report().unwrap();
    assert_eq!(r.rtype, Some(ResvType::WriteExclusive));
    assert_eq!(r.registrants.len(), 1);
    assert_eq!(
        (r.registrants[0].hostid, r.registrants[0].rkey),
        ([0xb; 16], 2)
    );
    assert!(r.registrants[0].holds && !r.persist);
    conflict(na.write_at(0, &block));
    nb.write_at(0, &block).unwrap();
    // No state directory on this target: persisting is refused, not pretended.
    match nb.resv_register(
        RegisterAction::Register { new_key: 2 },
        0,
        false,
        Persist::On,
    ) {
        Err(Error::Nvme { status, .. }) if status.same_code(&Status::INVALID_FIELD) => {}
        other => panic!("expected Invalid Field, got {other:?}"),
    }
    nb.resv_clear(2).unwrap();
    let r = na.resv_report().unwrap();
    assert_eq!((r.rtype, r.registrants.len()), (None, 0));
    na.write_at(0, &block).unwrap();
    drop((na, nb, a, b));
    stop_within(t);
}
