//! Connect to an NVMe-oF namespace, write patterns of several sizes, read them back, compare,
//! flush. Copy this to start an application on rdmablk-initiator.
//!
//! ```text
//! cargo run -p rdmablk-initiator --example verify -- rdma://10.0.2.15:4420/nqn.2024-01.io.rdmablk:test
//! cargo run -p rdmablk-initiator --example verify -- 'soft://127.0.0.1:4420/NQN?push=0' 1
//! ```
//! Arguments: URL [NSID (default: the first active one)]. Exit status 0 and "PASS" when every
//! byte read back matches.

use std::process::ExitCode;

use rdmablk_initiator::{Controller, Namespace, Op, Result};

fn main() -> ExitCode {
    // The library's log (RUST_LOG, default warnings) on stderr.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let args: Vec<String> = std::env::args().collect();
    let Some(url) = args.get(1) else {
        eprintln!(
            "usage: verify URL [NSID]   (URL: rdma://IP:PORT/SUBNQN or soft://HOST:PORT/SUBNQN)"
        );
        return ExitCode::from(2);
    };
    match run(url, args.get(2).and_then(|s| s.parse().ok())) {
        Ok(()) => {
            println!("PASS");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAIL: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(url: &str, nsid: Option<u32>) -> Result<()> {
    let ctrl = Controller::connect(url)?;
    let info = ctrl.info();
    println!(
        "connected: cntlid {} model {:?} {} I/O queues x {} entries, max transfer {} B, \
         in-capsule {} B, push window {:?}",
        info.cntlid,
        info.model,
        info.io_queues,
        info.queue_size,
        info.max_transfer_bytes,
        info.in_capsule_bytes,
        info.push_window
    );
    let nsid = nsid
        .or_else(|| ctrl.namespace_ids().first().copied())
        .unwrap_or(1);
    let ns = ctrl.namespace(nsid)?;
    let bs = ns.block_size() as usize;
    println!(
        "namespace {nsid}: {} B blocks, {} bytes",
        bs,
        ns.capacity_bytes()
    );

    // Sync API, slices (bounced through the registered pool): sizes from one block to 1 MiB.
    let mut offset = 0u64;
    let mut size = bs;
    while size <= 1 << 20 {
        if offset + size as u64 > ns.capacity_bytes() {
            offset = 0;
        }
        let data = pattern(offset, size, 1);
        ns.write_at(offset, &data)?;
        let mut back = vec![0u8; size];
        ns.read_at(offset, &mut back)?;
        check(&data, &back, offset)?;
        println!("  sync {size:>8} B at {offset:>10}: ok");
        offset += size as u64;
        size *= 2;
    }

    // Sync API, zero copy with registered buffers.
    let mut buf = ctrl.alloc(64 << 10)?;
    buf.as_mut_slice().copy_from_slice(&pattern(0, 64 << 10, 2));
    ns.write_buf(0, &buf)?;
    let mut back = ctrl.alloc(64 << 10)?;
    ns.read_buf(0, &mut back)?;
    check(buf.as_slice(), back.as_slice(), 0)?;
    println!("  zero-copy 64 KiB: ok");

    async_verify(&ctrl, &ns)?;

    ns.flush()?;
    println!("  flush: ok");
    let s = ctrl.stats();
    println!(
        "stats: pushed {} in-capsule {} keyed {} writes, {} bounce bytes, {} keep-alives",
        s.pushed_writes, s.in_capsule_writes, s.keyed_writes, s.bounce_bytes, s.keep_alives
    );
    Ok(())
}

/// Async API: 64 x 4 KiB writes in flight at once, then reads, each verified.
fn async_verify(ctrl: &Controller, ns: &Namespace) -> Result<()> {
    const N: u64 = 64;
    const LEN: usize = 4096;
    let mut q = ctrl.io_queue(ns.nsid())?;
    let mut done = Vec::new();
    for op in [Op::Write, Op::Read] {
        let mut next = 0u64;
        while next < N || q.in_flight() > 0 {
            while next < N {
                let mut buf = ctrl.alloc(LEN)?;
                let off = (1 << 20) + next * LEN as u64;
                if op == Op::Write {
                    buf.as_mut_slice().copy_from_slice(&pattern(off, LEN, 3));
                }
                match q.submit(op, off, LEN as u32, buf, next) {
                    Ok(()) => next += 1,
                    Err(rdmablk_initiator::SubmitError::QueueFull(_)) => break,
                    Err(e) => return Err(e.into_error()),
                }
            }
            q.wait(&mut done, 1)?;
            for c in done.drain(..) {
                c.result?;
                if c.op == Op::Read {
                    check(&pattern(c.offset, LEN, 3), c.buf.as_slice(), c.offset)?;
                }
            }
        }
    }
    println!("  async {N} x {LEN} B writes + reads: ok");
    Ok(())
}

use rdmablk_testkit::block_pattern as pattern;

fn check(want: &[u8], got: &[u8], offset: u64) -> Result<()> {
    match want.iter().zip(got).position(|(a, b)| a != b) {
        None => Ok(()),
        Some(i) => Err(rdmablk_initiator::Error::Protocol {
            what: format!(
                "data mismatch at byte {} (want {:#04x}, got {:#04x})",
                offset + i as u64,
                want[i],
                got[i]
            ),
        }),
    }
}
