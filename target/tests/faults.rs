//! Fault injection end to end: the `error` backend on namespace 1, the soft provider, and the
//! host on the other side seeing each injected fault as the NVMe status it stands for, both in
//! the raw completion (the test host of `common`) and through the initiator's API.
//!
//! - a failed read is Unrecovered Read Error (media error), the data of the next read is right;
//! - a failed write is Write Fault and changes nothing;
//! - a failed flush is Write Fault and fences the namespace: writes are refused (Write Fault,
//!   DNR; the initiator names the failed flush), reads still work, until the target restarts;
//! - injected latency holds completions back (a lower bound only: no upper timing limits);
//! - `nth`, `sticky` and `rate` faults fire on the same operations for the same seed.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use rdmablk::nvme::io::flush_sqe;
use rdmablk::nvme::{Sct, Status};
use rdmablk_initiator::{ConnectOptions, Controller, ErrorKind, Op};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

/// Starts an in-process target whose namespace 1 (512-byte blocks) is `backend`, on `port`
/// (0: a free one).
fn start_with(backend: &str, port: u16) -> (Target, SocketAddr) {
    init_tracing();
    let port = if port == 0 { free_port() } else { port };
    let text = config_text(port, "64MiB", "");
    assert!(
        text.contains(RAM_BACKEND),
        "common::config_text changed its backend line"
    );
    let cfg = Config::from_str(&text.replace(RAM_BACKEND, &format!("backend = {backend}")))
        .expect("config");
    let t = Target::start(cfg).expect("target starts");
    let addr = t.local_addrs()[0];
    (t, addr)
}

/// An error backend over 16 MiB of RAM with the given fault keys.
fn over_ram(faults: &str) -> String {
    format!(r#"{{ kind = "error", {faults}, inner = {{ kind = "ram", size = "16MiB" }} }}"#)
}

/// An error backend over a file (survives a restart of the target).
fn over_file(faults: &str, img: &Path) -> String {
    format!(
        r#"{{ kind = "error", {faults}, inner = {{ kind = "file", path = "{}", create_size = "16MiB", direct = false }} }}"#,
        img.display()
    )
}

fn initiator_opts() -> ConnectOptions {
    ConnectOptions {
        hostnqn: HOSTNQN.into(),
        hostid: HOSTID,
        io_queues: 1,
        queue_size: DEPTH as u16,
        kato_ms: 0,
        io_timeout_ms: 10_000,
        connect_timeout_ms: 5_000,
        reconnect_attempts: 3,
        reconnect_delay_ms: 50,
        ..ConnectOptions::default()
    }
}

fn initiator_with(addr: SocketAddr, opts: ConnectOptions) -> Controller {
    Controller::connect_with(&format!("soft://{addr}/{SUBNQN}"), opts).expect("initiator connects")
}

fn initiator(addr: SocketAddr) -> Controller {
    initiator_with(addr, initiator_opts())
}

/// A raw admin + I/O queue pair (the controller lives while the admin queue does).
fn raw_host(addr: SocketAddr) -> (Host, Host) {
    let (admin, cntlid) = admin_queue(addr, 0);
    let io = io_queue(addr, 1, cntlid);
    (admin, io)
}

fn flush(h: &mut Host) -> rdmablk::nvme::Cqe {
    h.submit(flush_sqe(1, 0), &[])
}

fn assert_nvme(e: &rdmablk_initiator::Error, want: Status) {
    assert_eq!(e.kind(), ErrorKind::Nvme, "{e}");
    let got = e.status().expect("an NVMe status");
    assert!(got.same_code(&want), "got {e}, wanted {want}");
}

#[test]
fn read_fault_is_unrecovered_read_error_in_the_cqe_and_the_initiator() {
    // Reads 2 (raw host) and 4, 5 (initiator: sync, then async) fail.
    let (t, addr) = start_with(&over_ram("fail_reads = { nth = 2 }"), 0);
    let (_admin, mut q) = raw_host(addr);
    let data = pattern(11, 4096);
    q.write_data(0, &data);
    assert!(q.rw(true, 1, 64, 8).status.is_success());
    assert!(q.rw(false, 1, 64, 8).status.is_success(), "read 1");
    let c = q.rw(false, 1, 64, 8);
    assert_status(&c, Status::UNRECOVERED_READ_ERROR);
    assert_eq!(c.status.sct, Sct::MediaError);
    q.write_data(0, &[0u8; 4096]);
    assert!(q.rw(false, 1, 64, 8).status.is_success(), "read 3");
    assert_eq!(
        q.read_data(0, 4096),
        data,
        "the read after the fault returns the data"
    );
    drop((q, _admin));
    t.shutdown();

    let (t, addr) = start_with(&over_ram("fail_reads = { nth = 2 }"), 0);
    let ctrl = initiator(addr);
    let ns = ctrl.namespace(1).unwrap();
    ns.write_at(0, &data).unwrap();
    let mut back = vec![0u8; 4096];
    ns.read_at(0, &mut back).unwrap();
    let e = ns.read_at(0, &mut back).expect_err("read 2 is injected");
    assert_nvme(&e, Status::UNRECOVERED_READ_ERROR);
    assert!(e.is_media(), "{e}");
    assert!(e.to_string().contains("media error"), "{e}");
    ns.read_at(0, &mut back).unwrap();
    assert_eq!(back, data);
    drop(ns);
    // The async API reports the same status in the request's completion (read 4 is fine,
    // there is no fault left).
    let mut io = ctrl.io_queue(1).unwrap();
    io.submit(Op::Read, 0, 4096, ctrl.alloc(4096).unwrap(), 7)
        .map_err(|e| e.into_error())
        .unwrap();
    let mut done = Vec::new();
    io.wait(&mut done, 1).unwrap();
    assert_eq!(done[0].tag, 7);
    done.pop().unwrap().result.unwrap();
    drop((io, ctrl));
    t.shutdown();
}

#[test]
fn write_fault_is_write_fault_and_changes_nothing() {
    // Raw host: writes 1 and 3 succeed, 2 fails. Initiator: its write 2 fails, in the async
    // completion; the sync API reports write 3's fault.
    let (t, addr) = start_with(&over_ram("fail_writes = { nth = 2 }"), 0);
    let (_admin, mut q) = raw_host(addr);
    let old = pattern(21, 4096);
    q.write_data(0, &old);
    assert!(q.rw(true, 1, 8, 8).status.is_success(), "write 1");
    q.write_data(0, &pattern(22, 4096));
    let c = q.rw(true, 1, 8, 8);
    assert_status(&c, Status::WRITE_FAULT);
    assert_eq!(c.status.sct, Sct::MediaError);
    q.write_data(0, &[0u8; 4096]);
    assert!(q.rw(false, 1, 8, 8).status.is_success());
    assert_eq!(
        q.read_data(0, 4096),
        old,
        "a failed write must not change the blocks"
    );
    drop((q, _admin));
    t.shutdown();

    let (t, addr) = start_with(&over_ram("fail_writes = { nth = 2, sticky = true }"), 0);
    let ctrl = initiator(addr);
    let ns = ctrl.namespace(1).unwrap();
    ns.write_at(0, &old).unwrap();
    let mut io = ctrl.io_queue(1).unwrap();
    let mut b = ctrl.alloc(4096).unwrap();
    b.as_mut_slice().copy_from_slice(&pattern(23, 4096));
    io.submit(Op::Write, 0, 4096, b, 1)
        .map_err(|e| e.into_error())
        .unwrap();
    let mut done = Vec::new();
    io.wait(&mut done, 1).unwrap();
    let e = done.pop().unwrap().result.expect_err("write 2 is injected");
    assert_nvme(&e, Status::WRITE_FAULT);
    assert!(e.is_media(), "{e}");
    drop(io);
    // Sticky: every later write fails too, the sync API says so.
    let e = ns.write_at(4096, &old).expect_err("sticky write fault");
    assert_nvme(&e, Status::WRITE_FAULT);
    let mut back = vec![0u8; 4096];
    ns.read_at(0, &mut back).unwrap();
    assert_eq!(back, old, "the failed write changed nothing");
    drop((ns, ctrl));
    t.shutdown();
}

#[test]
fn failed_flush_fences_writes_until_restart_reads_still_work() {
    let dir = tmp_dir("faults-fence");
    let img = dir.join("ns.img");
    let backend = over_file("fail_flushes = { nth = 1 }", &img);
    let (t, addr) = start_with(&backend, 0);
    let port = addr.port();
    let before = pattern(31, 4096);

    // Raw host: the flush fails, then writes are refused with Write Fault + DNR, reads work.
    let (admin, mut q) = raw_host(addr);
    q.write_data(0, &before);
    assert!(q.rw(true, 1, 0, 8).status.is_success());
    let c = flush(&mut q);
    assert_status(&c, Status::WRITE_FAULT);
    q.write_data(0, &pattern(32, 4096));
    let c = q.rw(true, 1, 0, 8);
    assert_status(&c, Status::WRITE_FAULT);
    assert!(c.status.dnr, "a fenced namespace refuses for good: DNR");
    let c = flush(&mut q);
    assert_status(&c, Status::WRITE_FAULT);
    q.write_data(0, &[0u8; 4096]);
    assert!(q.rw(false, 1, 0, 8).status.is_success(), "reads still work");
    assert_eq!(q.read_data(0, 4096), before);
    drop((q, admin));

    // The initiator: a handle whose flush failed names that flush when asked to write; a
    // fresh handle gets the target's refusal; reads work through both.
    let ctrl = initiator(addr);
    let ns = ctrl.namespace(1).unwrap();
    let e = ns.flush().expect_err("fenced: the flush fails");
    assert_nvme(&e, Status::WRITE_FAULT);
    let e = ns.write_at(0, &pattern(33, 4096)).expect_err("fenced");
    assert!(
        matches!(e, rdmablk_initiator::Error::FlushFailed { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("flush failed"), "{e}");
    let fresh = ctrl.namespace(1).unwrap();
    let e = fresh
        .write_at(0, &pattern(34, 4096))
        .expect_err("target refuses");
    assert_nvme(&e, Status::WRITE_FAULT);
    assert!(e.status().unwrap().dnr, "{e}");
    let mut back = vec![0u8; 4096];
    fresh.read_at(0, &mut back).unwrap();
    assert_eq!(back, before, "refused writes changed nothing");
    drop((ns, fresh, ctrl));
    t.shutdown();

    // Restart on the same file: the fence is gone, the data is there, writes work again.
    let (t, addr) = start_with(&backend, port);
    let ctrl = initiator(addr);
    let ns = ctrl.namespace(1).unwrap();
    ns.read_at(0, &mut back).unwrap();
    assert_eq!(back, before);
    let after = pattern(35, 4096);
    ns.write_at(0, &after).unwrap();
    ns.read_at(0, &mut back).unwrap();
    assert_eq!(back, after);
    drop((ns, ctrl));
    t.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn injected_latency_holds_completions_back() {
    const LATENCY: Duration = Duration::from_millis(40);
    let (t, addr) = start_with(
        &over_ram(&format!("latency_us = {}", LATENCY.as_micros())),
        0,
    );
    let (_admin, mut q) = raw_host(addr);
    q.write_data(0, &pattern(41, 512));
    // Lower bounds only: a loaded machine can make an operation slower, never faster.
    for (write, what) in [(true, "write"), (false, "read")] {
        let start = Instant::now();
        assert!(q.rw(write, 1, 3, 1).status.is_success());
        let took = start.elapsed();
        assert!(
            took >= LATENCY,
            "{what} took {took:?}, less than the injected {LATENCY:?}"
        );
    }
    let start = Instant::now();
    assert!(flush(&mut q).status.is_success());
    assert!(
        start.elapsed() >= LATENCY,
        "flush took {:?}",
        start.elapsed()
    );
    assert_eq!(q.read_data(0, 512), pattern(41, 512));
    drop((q, _admin));
    t.shutdown();
}

/// Which of `n` single-block reads, one at a time, fail on a fresh target with `faults`.
fn read_fault_pattern(faults: &str, n: u32) -> Vec<u32> {
    let (t, addr) = start_with(&over_ram(faults), 0);
    let (admin, mut q) = raw_host(addr);
    let mut failed = Vec::new();
    for i in 1..=n {
        let c = q.rw(false, 1, u64::from(i), 1);
        if !c.status.is_success() {
            assert_status(&c, Status::UNRECOVERED_READ_ERROR);
            failed.push(i);
        }
    }
    drop((q, admin));
    t.shutdown();
    failed
}

#[test]
fn nth_sticky_and_rate_faults_are_deterministic() {
    assert_eq!(read_fault_pattern("fail_reads = { nth = 5 }", 12), vec![5]);
    assert_eq!(
        read_fault_pattern("fail_reads = { nth = 9, sticky = true }", 12),
        vec![9, 10, 11, 12]
    );
    let rate = "seed = 7, fail_reads = { rate = 0.3 }";
    let first = read_fault_pattern(rate, 40);
    assert!(
        !first.is_empty() && first.len() < 40,
        "a 30% rate over 40 reads fails some, not all: {first:?}"
    );
    assert_eq!(
        read_fault_pattern(rate, 40),
        first,
        "same seed, same faults"
    );
    let other = read_fault_pattern("seed = 8, fail_reads = { rate = 0.3 }", 40);
    assert_ne!(other, first, "another seed, other faults");
}

/// An I/O command has `io_timeout_ms` for its answer, not the shorter `connect_timeout_ms`
/// of the setup: 2.5 s of backend latency against a 1 s connect timeout is served, without a
/// reconnect.
#[test]
fn io_commands_wait_io_timeout_not_connect_timeout() {
    let (t, addr) = start_with(&over_ram("latency_us = 2500000"), 0);
    let opts = ConnectOptions {
        connect_timeout_ms: 1_000,
        reconnect_attempts: 0,
        ..initiator_opts()
    };
    let ctrl = initiator_with(addr, opts);
    let ns = ctrl.namespace(1).unwrap();
    let data = pattern(21, 4096);
    ns.write_at(8192, &data)
        .expect("a write slower than connect_timeout_ms");
    let mut back = vec![0u8; 4096];
    ns.read_at(8192, &mut back)
        .expect("a read slower than connect_timeout_ms");
    assert_eq!(back, data);
    assert_eq!(ctrl.stats().reconnects, 0, "{:?}", ctrl.stats());
    drop(ns);
    drop(ctrl);
    t.shutdown();
}
