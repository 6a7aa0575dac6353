//! Crash consistency: `rdmablk-target` as a process with a file-backed namespace, written by
//! the initiator (async API, 16 in flight, writes of 1..8 blocks, a flush every so often),
//! killed with SIGKILL at a seeded-random point while writes are in flight, restarted on the
//! same file, and read back, 20 times over on the same file.
//!
//! After each restart every block must be exactly one version (per-block header and a
//! payload derived from it: no torn, misdirected or corrupt block); the version must be the
//! one acknowledged before the last completed flush or one sent after it; and, because a
//! process kill leaves the kernel's page cache intact, no older than the newest version the
//! initiator reported as written. That last check is what proves the initiator never reports
//! an unacknowledged write as a success (and that the target acknowledges nothing it has not
//! handed to the kernel). What a power loss would add (data not yet fdatasync'ed) cannot be
//! produced by killing a process; the flush path's honesty is covered by `faults.rs`.
//!
//! Iterations alternate O_DIRECT and buffered I/O on the backing file.

mod process;

use std::time::Duration;

use process::*;
use rdmablk_initiator::{Controller, ErrorKind, Op, SubmitError};

const ITERATIONS: u32 = 20;
const BLOCKS: u64 = 256;
const MAX_WRITE_BLOCKS: u64 = 8;
const QD: usize = 16;
const SEED: u64 = 0x00C0_FFEE_2026;
/// A flush after every this many write completions.
const FLUSH_EVERY: u64 = 12;

/// Reads the whole region, checks every block against the model, flushes, and makes what
/// was found the new durable baseline.
fn verify_and_rebase(ctrl: &Controller, model: &mut Model, iteration: u32) {
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
    assert!(
        errors.is_empty(),
        "after kill {iteration}: {} bad blocks:\n{}",
        errors.len(),
        errors.join("\n")
    );
    ns.flush().unwrap();
    for (b, g) in found.into_iter().enumerate() {
        model.rebase(b as u64, g);
    }
}

/// What one in-flight request is.
enum InFlight {
    Write { first: u64, n: u64, gen: u64 },
    Flush { snapshot: Vec<u64> },
}

struct Run {
    next_gen: u64,
    write_ok: u64,
    write_failed: u64,
    flushes_ok: u64,
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

#[test]
fn acknowledged_and_flushed_writes_survive_sigkill_and_no_block_is_torn() {
    let dir = tmp_dir("crash");
    let img = dir.join("ns.img");
    let port = free_port();
    let mut rng = Rng(SEED);
    let mut model = Model::new(0, BLOCKS as usize);
    let mut run = Run {
        next_gen: 1,
        write_ok: 0,
        write_failed: 0,
        flushes_ok: 0,
    };
    for i in 0..=ITERATIONS {
        let direct = i % 2 == 0;
        let cfg = config_text(port, 1, &file_backend(&img, "4MiB", direct));
        let mut target = TargetProc::spawn(&dir, &cfg, i);
        // One attempt: a killed target stays dead until the next iteration starts it.
        let ctrl = connect(&target.url(), opts(1, 0));
        verify_and_rebase(&ctrl, &mut model, i);
        if i == ITERATIONS {
            drop(ctrl);
            target.signal(libc::SIGTERM);
            let st = target.wait_exit(Duration::from_secs(20));
            assert!(st.success(), "exit {st:?}:\n{}", target.log_text());
            break;
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
        drop(ctrl);
    }
    eprintln!(
        "{ITERATIONS} kills: {} writes acknowledged, {} failed by the kill, {} flushes",
        run.write_ok, run.write_failed, run.flushes_ok
    );
    assert!(
        run.flushes_ok > 0,
        "no flush completed: nothing was proven durable"
    );
    assert!(
        run.write_failed > 0,
        "no write was in flight at any kill: the kills proved nothing"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
