//! Graceful shutdown under load: `rdmablk-target` as a process with a file namespace, two
//! initiator threads each keeping 16 writes (and verifying reads) in flight on their own I/O
//! queue, then SIGTERM.
//!
//! - every in-flight I/O ends, bounded: acknowledged, or failed cleanly (Command Interrupted
//!   from the draining target, or a transport error once it has closed the queue); no hang;
//! - the target flushes and exits 0, and every write the initiator saw acknowledged is in the
//!   file (read directly, with the target gone);
//! - a new target process on the same address and file: the initiator reconnects by its own
//!   policy (started while nothing listens), and I/O resumes: the whole region reads back as
//!   the model says, then a new round of writes is verified.

mod process;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use process::*;
use rdmablk_initiator::{Controller, Error, ErrorKind, IoBuf, IoQueue, Op, SubmitError};
use rdmablk_target::metrics::namespace_io;
use rdmablk_target::nvmf::worker::queues::SHUTDOWN_GRACE;

const QD: usize = 16;
const BLOCKS_PER_THREAD: u64 = 128;
const MAX_WRITE_BLOCKS: u64 = 8;
/// Completions (both threads) before SIGTERM.
const LOAD_BEFORE_SIGTERM: u64 = 300;

/// How the load loop ended.
#[derive(Debug, Default)]
struct Outcome {
    writes_ok: u64,
    reads_ok: u64,
    transport: u64,
}

enum Req {
    Write { first: u64, n: u64, gen: u64 },
    Read { first: u64, n: u64 },
}

/// One thread's queue, region and model.
struct Load {
    ctrl: Controller,
    q: IoQueue,
    model: Model,
    rng: Rng,
    next_gen: u64,
}

impl Load {
    fn region(&self) -> (u64, u64) {
        (self.model.first_block, self.model.blocks.len() as u64)
    }

    /// Keeps QD requests in flight (3 writes to 1 read of an idle block) until `writes`
    /// writes were sent, or, with `until_error`, until the first failed request; then lets
    /// everything in flight finish. Failures must be clean ones.
    ///
    /// Once `sigterm` is set, new requests go only while others are in flight: the draining
    /// target closes the queue the moment it has answered everything, and a submit after that
    /// would start the reconnect policy against a target that is gone (its attempts would run
    /// out before phase 2 brings a new one up).
    fn run(
        &mut self,
        writes: Option<u64>,
        until_error: bool,
        sigterm: &AtomicBool,
        done_ctr: &AtomicU64,
    ) -> Outcome {
        let (base, len) = self.region();
        let mut inflight: Vec<Option<Req>> = (0..QD).map(|_| None).collect();
        let mut busy = vec![false; len as usize];
        let mut out = Outcome::default();
        let mut sent = 0u64;
        let mut stop = false;
        let mut done = Vec::new();
        loop {
            while !stop && writes.map_or(true, |w| sent < w) {
                if sigterm.load(Ordering::SeqCst) && self.q.in_flight() == 0 {
                    stop = true;
                    break;
                }
                let Some(tag) = inflight.iter().position(Option::is_none) else {
                    break;
                };
                let n = self.rng.range(1, MAX_WRITE_BLOCKS + 1);
                let first = base + self.rng.range(0, len - n + 1);
                if (first..first + n).any(|b| busy[(b - base) as usize]) {
                    continue;
                }
                let bytes = n as usize * BLOCK;
                let mut buf = self.ctrl.alloc(bytes).unwrap();
                let req = if self.rng.range(0, 4) == 0 {
                    Req::Read { first, n }
                } else {
                    let gen = self.next_gen;
                    self.next_gen += 1;
                    for (i, chunk) in buf.as_mut_slice().chunks_mut(BLOCK).enumerate() {
                        block_content(first + i as u64, gen, chunk);
                    }
                    for b in first..first + n {
                        self.model.sent(b, gen);
                    }
                    sent += 1;
                    Req::Write { first, n, gen }
                };
                let op = match req {
                    Req::Read { .. } => Op::Read,
                    Req::Write { .. } => Op::Write,
                };
                let off = first * BLOCK as u64;
                if let Err(e) = submit_retrying(&mut self.q, op, off, bytes as u32, buf, tag as u64)
                {
                    // The queue failed with requests still in flight (they fail too). A write
                    // never sent stays "maybe written" in the model, which any content passes.
                    assert!(until_error, "submit {op:?} at {off}: {e}");
                    classify(&e, &mut out);
                    stop = true;
                    break;
                }
                for b in first..first + n {
                    busy[(b - base) as usize] = true;
                }
                inflight[tag] = Some(req);
            }
            if self.q.in_flight() == 0 {
                break;
            }
            self.q.wait(&mut done, 1).unwrap();
            for c in done.drain(..) {
                let req = inflight[c.tag as usize].take().expect("a known tag");
                done_ctr.fetch_add(1, Ordering::Relaxed);
                let (first, n) = match req {
                    Req::Read { first, n } | Req::Write { first, n, .. } => (first, n),
                };
                for b in first..first + n {
                    busy[(b - base) as usize] = false;
                }
                match (&c.result, req) {
                    (Ok(()), Req::Write { gen, .. }) => {
                        out.writes_ok += 1;
                        (first..first + n).for_each(|b| self.model.acked(b, gen));
                    }
                    (Ok(()), Req::Read { .. }) => {
                        out.reads_ok += 1;
                        self.check(first, &c.buf);
                    }
                    (Err(e), _) => {
                        assert!(until_error, "{:?} at block {first}: {e}", c.op);
                        classify(e, &mut out);
                        stop = true;
                    }
                }
            }
        }
        out
    }

    fn check(&self, first: u64, buf: &IoBuf) {
        for (i, block) in buf.as_slice().chunks(BLOCK).enumerate() {
            let b = first + i as u64;
            if let Err(e) = self.model.check(b, block, true) {
                panic!("read back: {e}");
            }
        }
    }

    /// Reads the whole region (after the reconnect) and checks every block. The first
    /// request after the old target went away may find its queue dead: the async API
    /// reports that as a transport error and reconnects at the next submit, so such a read
    /// is sent again.
    fn verify_region(&mut self) -> u32 {
        let (base, len) = self.region();
        let chunk = 32u64;
        let mut resent = 0;
        let mut done = Vec::new();
        for first in (base..base + len).step_by(chunk as usize) {
            let bytes = (chunk as usize * BLOCK) as u32;
            loop {
                let buf = self.ctrl.alloc(bytes as usize).unwrap();
                submit_retrying(&mut self.q, Op::Read, first * BLOCK as u64, bytes, buf, 0)
                    .unwrap_or_else(|e| panic!("read after the restart: {e}"));
                self.q.wait(&mut done, 1).unwrap();
                let c = done.pop().expect("one completion");
                match c.result {
                    Ok(()) => {
                        self.check(first, &c.buf);
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::Transport && resent < 3 => resent += 1,
                    Err(e) => panic!("read after the restart: {e}"),
                }
            }
        }
        resent
    }
}

/// Submits; a full queue cannot be (there is a free tag); any other refusal is returned.
fn submit_retrying(
    q: &mut IoQueue,
    op: Op,
    off: u64,
    len: u32,
    buf: IoBuf,
    tag: u64,
) -> Result<(), Error> {
    match q.submit(op, off, len, buf, tag) {
        Ok(()) => Ok(()),
        Err(SubmitError::QueueFull(_)) => panic!("queue full with a free tag"),
        Err(SubmitError::Failed(e, _)) => Err(e),
    }
}

/// The one clean failure while the target shuts down: the connection goes (a transport
/// error), so a host retries after reconnecting. An NVMe status (Command Interrupted was
/// answered until the Linux 6.1 host was seen handing it to fio as an I/O error) is not
/// retried by every host, so the target must never answer in-flight I/O with one.
fn classify(e: &Error, out: &mut Outcome) {
    match e.kind() {
        ErrorKind::Transport => out.transport += 1,
        _ => panic!("unclean failure during shutdown (only a transport error is): {e}"),
    }
}

#[test]
fn sigterm_under_load_drains_flushes_exits_zero_and_the_host_reconnects() {
    let dir = tmp_dir("shutdown");
    let img = dir.join("ns.img");
    let port = free_port();
    let cfg = config_text(port, 2, &file_backend(&img, "4MiB", false));
    let mut target = TargetProc::spawn(&dir, &cfg, 0);
    // The load of phase 1 ends with the target's exit: its requests cut off must fail at
    // once (the host's own retry is what phase 2 checks), not wait for the next target.
    let ctrl = connect(
        &target.url(),
        rdmablk_initiator::ConnectOptions {
            requeue: false,
            ..opts(2, 60)
        },
    );
    assert_eq!(ctrl.info().io_queues, 2, "{:?}", ctrl.info());

    let completions = Arc::new(AtomicU64::new(0));
    let sigterm = Arc::new(AtomicBool::new(false));
    // Phase 2's threads that are about to issue their first request (to a target not there).
    let issuing = Arc::new(AtomicU64::new(0));
    let spawn_load = |i: u64, load: Option<Load>, phase: u8| {
        let ctrl = ctrl.clone();
        let ctr = Arc::clone(&completions);
        let sigterm = Arc::clone(&sigterm);
        let issuing = Arc::clone(&issuing);
        std::thread::spawn(move || {
            let mut load = load.unwrap_or_else(|| Load {
                q: ctrl.io_queue(1).unwrap(),
                ctrl: ctrl.clone(),
                model: Model::new(i * BLOCKS_PER_THREAD, BLOCKS_PER_THREAD as usize),
                rng: Rng(0x5157_0000 + i),
                next_gen: 1,
            });
            let out = if phase == 0 {
                load.run(None, true, &sigterm, &ctr)
            } else {
                issuing.fetch_add(1, Ordering::SeqCst);
                let resent = load.verify_region();
                let out = load.run(Some(64), false, &sigterm, &ctr);
                assert_eq!(
                    load.verify_region(),
                    0,
                    "no transport error on a healthy queue"
                );
                eprintln!("thread {i}: {resent} read(s) re-sent after the reconnect");
                out
            };
            (load, out)
        })
    };

    // Phase 1: load on both queues, SIGTERM in the middle of it.
    let threads: Vec<_> = (0..2).map(|i| spawn_load(i, None, 0)).collect();
    while completions.load(Ordering::Relaxed) < LOAD_BEFORE_SIGTERM {
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            !threads.iter().any(|t| t.is_finished()),
            "a load thread ended before SIGTERM"
        );
    }
    target.signal(libc::SIGTERM);
    sigterm.store(true, Ordering::SeqCst);
    let mut loads = Vec::new();
    for t in threads {
        // The load ends by a transport failure (the queue closed under requests in flight)
        // or by its last requests answered before the close: both are clean.
        let (load, out) = t.join().expect("load thread");
        eprintln!("before/at SIGTERM: {out:?}");
        assert!(out.writes_ok > 0, "{out:?}");
        loads.push(load);
    }
    sigterm.store(false, Ordering::SeqCst);
    let st = target.wait_exit(Duration::from_secs(30));
    let log = target.log_text();
    assert!(st.success(), "exit {st:?}:\n{log}");

    // Every acknowledged write is in the file the target flushed.
    let file = std::fs::read(&img).unwrap();
    for load in &loads {
        let (base, len) = load.region();
        for b in base..base + len {
            let block = &file[b as usize * BLOCK..(b as usize + 1) * BLOCK];
            if let Err(e) = load.model.check(b, block, true) {
                panic!("in the file after exit 0: {e}\n{log}");
            }
        }
    }

    // Phase 2: I/O is issued while nothing listens; a new target comes up on the same
    // address and file; the initiator reconnects and continues.
    let threads: Vec<_> = loads
        .into_iter()
        .enumerate()
        .map(|(i, l)| spawn_load(i as u64, Some(l), 1))
        .collect();
    // The target starts once both threads are issuing (a process start takes far longer than
    // the step from there to their first submit).
    wait_for("phase 2's threads issuing", || {
        issuing.load(Ordering::SeqCst) == 2
    });
    let mut target = TargetProc::spawn(&dir, &cfg, 1);
    for t in threads {
        let (_, out) = t.join().expect("load thread after restart");
        assert_eq!(out.writes_ok, 64, "{out:?}");
    }
    assert!(ctrl.stats().reconnects >= 1, "{:?}", ctrl.stats());
    drop(ctrl);
    target.signal(libc::SIGTERM);
    let st = target.wait_exit(Duration::from_secs(30));
    assert!(st.success(), "exit {st:?}:\n{}", target.log_text());
    // RDMABLK_KEEP_TEST_DIR=1 keeps the target logs (target-N.log) for a look.
    if std::env::var_os("RDMABLK_KEEP_TEST_DIR").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Regression: at shutdown the idle admin queue closed first, which tears its controller
/// down, and the controller's I/O queues followed at once with commands still executing:
/// writes the backend was completing were answered with a dropped connection instead of
/// their success. The I/O queues must drain first.
#[test]
fn shutdown_drains_io_in_flight_before_closing_the_admin_queue() {
    const WRITES: u64 = 8;
    // Held half the shutdown's grace: long enough to be executing once the target is stopping
    // (checked below), short enough to be answered within the grace with as much to spare.
    let hold_us = (SHUTDOWN_GRACE / 2).as_micros();
    let backend = format!(
        r#"{{ kind = "error", latency_us = {hold_us}, inner = {{ kind = "ram", size = "4MiB" }} }}"#
    );
    let cfg = rdmablk_target::config::Config::from_str(&config_text(free_port(), 1, &backend))
        .expect("config");
    let t = rdmablk_target::Target::start(cfg).expect("target starts");
    let addr = t.local_addrs()[0];
    let url = format!("soft://{addr}/{NQN}");
    let ctrl = connect(&url, opts(1, 0));
    let mut q = ctrl.io_queue(1).unwrap();
    for i in 0..WRITES {
        let mut b = ctrl.alloc(BLOCK).unwrap();
        block_content(i, 1, b.as_mut_slice());
        submit_retrying(&mut q, Op::Write, i * BLOCK as u64, BLOCK as u32, b, i)
            .unwrap_or_else(|e| panic!("submit write {i}: {e}"));
    }
    let handle = t.handle();
    let executing = || {
        namespace_io(&handle)
            .iter()
            .find(|io| io.nsid == 1)
            .map_or(0, |io| io.in_flight)
    };
    let mut done = Vec::new();
    wait_for("the writes executing in the target", || {
        q.poll(&mut done).unwrap();
        assert!(done.is_empty(), "a write completed before the shutdown");
        executing() == WRITES
    });
    let stopper = std::thread::spawn(move || t.shutdown());
    // The target stops its listener once it is stopping: the writes must still be executing
    // then, or this run tested nothing (the machine stalled for the whole hold).
    wait_for("the listener gone", || {
        std::net::TcpListener::bind(addr).is_ok()
    });
    assert_eq!(
        executing(),
        WRITES,
        "the writes finished before the target began to stop"
    );
    while q.in_flight() > 0 {
        q.wait(&mut done, 1).unwrap();
    }
    let failed: Vec<String> = done
        .iter()
        .filter_map(|c| {
            c.result
                .as_ref()
                .err()
                .map(|e| format!("write {}: {e}", c.tag))
        })
        .collect();
    assert!(
        failed.is_empty(),
        "executing writes were cut off:\n{}",
        failed.join("\n")
    );
    drop(q);
    drop(ctrl);
    stopper.join().unwrap();
}

/// Polls `cond` every millisecond until it holds, for 10 s at most.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Regression: a namespace whose final flush failed (or was refused, the namespace being
/// fenced by an earlier failed flush) still let the target exit 0, telling the service
/// manager all data was safe.
#[test]
fn exit_status_is_nonzero_when_the_final_flush_fails() {
    let dir = tmp_dir("final-flush");
    let img = dir.join("ns.img");
    let inner = file_backend(&img, "4MiB", false);

    // A host's flush fails: the namespace is fenced, so the final flush is refused.
    let backend = format!(r#"{{ kind = "error", fail_flushes = {{ nth = 1 }}, inner = {inner} }}"#);
    let mut target = TargetProc::spawn(&dir, &config_text(free_port(), 1, &backend), 0);
    let ctrl = connect(&target.url(), opts(1, 0));
    let ns = ctrl.namespace(1).unwrap();
    ns.write_at(0, &[7u8; BLOCK]).unwrap();
    assert!(ns.flush().is_err(), "flush 1 is injected");
    drop((ns, ctrl));
    target.signal(libc::SIGTERM);
    let st = target.wait_exit(Duration::from_secs(30));
    let log = target.log_text();
    assert_eq!(st.code(), Some(1), "exit {st:?}:\n{log}");
    assert!(log.contains("final flush failed for namespace 1"), "{log}");

    // No host at all: the final flush itself fails, on each of the two workers.
    let backend = format!(
        r#"{{ kind = "error", fail_flushes = {{ nth = 1, sticky = true }}, inner = {inner} }}"#
    );
    let cfg = rdmablk_target::config::Config::from_str(&config_text(free_port(), 2, &backend))
        .expect("config");
    let t = rdmablk_target::Target::start(cfg).expect("target starts");
    let e = t
        .shutdown_checked()
        .expect_err("the final flush is injected");
    assert!(
        matches!(&e, rdmablk_target::TargetError::FinalFlush { failed } if failed.len() == 2),
        "each worker flushes, each fails: {e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
