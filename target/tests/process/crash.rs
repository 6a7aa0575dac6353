//! The SIGKILL trials of `crash_consistency.rs` (file namespaces) and `rbd.rs` (RBD images):
//! the initiator writes (async API, 16 in flight, writes of 1..8 blocks, a flush every so
//! often), the target is killed with SIGKILL at a seeded-random point while writes are in
//! flight, restarted on the same storage, and everything is read back and checked against the
//! [`Model`]: every block exactly one version, none older than the newest acknowledged.

use std::path::Path;
use std::time::Duration;

use super::*;
use rdmablk_initiator::{Controller, ErrorKind, Op, SubmitError};

const BLOCKS: u64 = 256;
const MAX_WRITE_BLOCKS: u64 = 8;
const QD: usize = 16;
/// A flush after every this many write completions.
const FLUSH_EVERY: u64 = 12;

/// Reads the whole region, checks every block against the model, flushes, and makes what
/// was found the new durable baseline. Returns the bad blocks, each with why.
fn verify_and_rebase(ctrl: &Controller, model: &mut Model) -> Vec<String> {
    let ns = ctrl.namespace(1).unwrap();
    let mut data = vec![0u8; BLOCKS as usize * BLOCK];
    ns.read_at(0, &mut data).unwrap();
    let mut found = Vec::with_capacity(BLOCKS as usize);
    let mut errors = Vec::new();
    for b in 0..BLOCKS {
        let block = &data[b as usize * BLOCK..(b as usize + 1) * BLOCK];
        match model.check(b, block, true) {
            Ok(g) => found.push(g),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return errors;
    }
    ns.flush().unwrap();
    for (b, g) in found.into_iter().enumerate() {
        model.rebase(b as u64, g);
    }
    errors
}

/// What one in-flight request is.
enum InFlight {
    Write { first: u64, n: u64, gen: u64 },
    Flush { snapshot: Vec<u64> },
}

#[derive(Default)]
pub struct Run {
    pub next_gen: u64,
    /// Writes acknowledged before a kill; each is checked at the next read back.
    pub write_ok: u64,
    pub write_failed: u64,
    pub flushes_ok: u64,
    pub kills: u32,
    /// Blocks read back and checked against the model.
    pub blocks_checked: u64,
    /// Bad blocks found (each an acknowledged or flushed write lost, or a torn block).
    pub losses: usize,
}

/// Writes until `kill_after` write completions, then SIGKILLs the target with the queue
/// full and collects every outstanding completion.
fn load_then_kill(
    ctrl: &Controller,
    target: &mut TargetProc,
    model: &mut Model,
    rng: &mut Rng,
    kill_after: u64,
    run: &mut Run,
) {
    let mut q = ctrl.io_queue(1).unwrap();
    let mut inflight: Vec<Option<InFlight>> = (0..QD).map(|_| None).collect();
    let mut busy = vec![false; BLOCKS as usize];
    let mut done = Vec::new();
    let mut completions = 0u64;
    let mut killed = false;
    let mut since_flush = 0u64;
    loop {
        // Keep the queue full until the kill; nothing is submitted after it.
        while !killed && inflight.iter().any(Option::is_none) {
            let tag = inflight.iter().position(Option::is_none).unwrap();
            if since_flush >= FLUSH_EVERY {
                since_flush = 0;
                let buf = ctrl.alloc(BLOCK).unwrap();
                submit(&mut q, Op::Flush, 0, 0, buf, tag);
                inflight[tag] = Some(InFlight::Flush {
                    snapshot: model.snapshot(),
                });
                continue;
            }
            let n = rng.range(1, MAX_WRITE_BLOCKS + 1);
            let first = rng.range(0, BLOCKS - n + 1);
            if (first..first + n).any(|b| busy[b as usize]) {
                continue; // overlapping an in-flight write: pick again
            }
            let gen = run.next_gen;
            run.next_gen += 1;
            let mut buf = ctrl.alloc(n as usize * BLOCK).unwrap();
            for (i, chunk) in buf.as_mut_slice().chunks_mut(BLOCK).enumerate() {
                block_content(first + i as u64, gen, chunk);
            }
            for b in first..first + n {
                busy[b as usize] = true;
                model.sent(b, gen);
            }
            let len = (n as usize * BLOCK) as u32;
            submit(&mut q, Op::Write, first * BLOCK as u64, len, buf, tag);
            inflight[tag] = Some(InFlight::Write { first, n, gen });
        }
        if killed && q.in_flight() == 0 {
            break;
        }
        q.wait(&mut done, 1).unwrap();
        for c in done.drain(..) {
            let what = inflight[c.tag as usize].take().expect("a known tag");
            if killed {
                if let Err(e) = &c.result {
                    // The target died under the command: only a transport failure is honest.
                    assert_eq!(e.kind(), ErrorKind::Transport, "after SIGKILL: {e}");
                }
            } else if let Err(e) = &c.result {
                panic!("before the kill: {e}");
            }
            match what {
                InFlight::Write { first, n, gen } => {
                    for b in first..first + n {
                        busy[b as usize] = false;
                        if c.result.is_ok() {
                            model.acked(b, gen);
                        }
                    }
                    if c.result.is_ok() {
                        run.write_ok += 1;
                        since_flush += 1;
                    } else {
                        run.write_failed += 1;
                    }
                    completions += 1;
                }
                InFlight::Flush { snapshot } => {
                    if c.result.is_ok() {
                        model.flushed(&snapshot);
                        run.flushes_ok += 1;
                    }
                }
            }
        }
        if !killed && completions >= kill_after {
            // The queue is full of writes (and maybe a flush) right now.
            target.signal(libc::SIGKILL);
            killed = true;
        }
    }
    let st = target.wait_exit(Duration::from_secs(10));
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&st),
        Some(libc::SIGKILL)
    );
}

fn submit(
    q: &mut rdmablk_initiator::IoQueue,
    op: Op,
    off: u64,
    len: u32,
    buf: rdmablk_initiator::IoBuf,
    tag: usize,
) {
    match q.submit(op, off, len, buf, tag as u64) {
        Ok(()) => {}
        Err(SubmitError::QueueFull(_)) => panic!("queue full with a free tag"),
        Err(SubmitError::Failed(e, _)) => panic!("submit {op:?}: {e}"),
    }
}

/// Runs `trials` kill-and-restart trials from `seed` on the namespace whose backend table
/// `backend(trial, dir)` gives (the same storage each time; `dir` is the test's temporary
/// directory); stops at the first trial that finds a bad block (its report is in the panic
/// message after the figures). `what` describes the backend in the report.
pub fn crash_trials(
    trials: u32,
    seed: u64,
    what: &str,
    o: &ConnectOptions,
    backend: impl Fn(u32, &Path) -> String,
) -> Run {
    let dir = tmp_dir("crash");
    let port = free_port();
    let mut rng = Rng(seed);
    let mut model = Model::new(0, BLOCKS as usize);
    let mut run = Run {
        next_gen: 1,
        ..Run::default()
    };
    for i in 0..=trials {
        let cfg = config_text(port, 1, &backend(i, &dir));
        let mut target = TargetProc::spawn(&dir, &cfg, i);
        // One attempt: a killed target stays dead until the next iteration starts it.
        let ctrl = connect(&target.url(), o.clone());
        let errors = verify_and_rebase(&ctrl, &mut model);
        run.blocks_checked += BLOCKS;
        run.losses += errors.len();
        if !errors.is_empty() {
            report(&run, seed, what);
            panic!(
                "after kill {i} (seed {seed:#x}): {} bad blocks:\n{}",
                errors.len(),
                errors.join("\n")
            );
        }
        if i == trials {
            drop(ctrl);
            target.signal(libc::SIGTERM);
            let st = target.wait_exit(Duration::from_secs(20));
            assert!(st.success(), "exit {st:?}:\n{}", target.log_text());
            break;
        }
        // Keep only the running target's log: a soak of thousands of trials would fill /tmp.
        if i > 0 {
            let _ = std::fs::remove_file(dir.join(format!("target-{}.log", i - 1)));
        }
        let kill_after = rng.range(8, 80);
        load_then_kill(
            &ctrl,
            &mut target,
            &mut model,
            &mut rng,
            kill_after,
            &mut run,
        );
        run.kills += 1;
        drop(ctrl);
    }
    let _ = std::fs::remove_dir_all(&dir);
    run
}

pub fn report(run: &Run, seed: u64, what: &str) {
    eprintln!(
        "crash trials (seed {seed:#x}): {} kills ({what}); {} writes acknowledged and checked \
         after the kill, {} failed by the kill, {} flushes; {} blocks read back and checked; \
         losses: {}",
        run.kills, run.write_ok, run.write_failed, run.flushes_ok, run.blocks_checked, run.losses
    );
}

/// A run that proved something: data was flushed, and writes were in flight at kills.
pub fn assert_meaningful(run: &Run) {
    assert!(
        run.flushes_ok > 0,
        "no flush completed: nothing was proven durable"
    );
    assert!(
        run.write_failed > 0,
        "no write was in flight at any kill: the kills proved nothing"
    );
}
