//! rdmablk-powercut: the two halves of a power-cut trial (`tools/powercut` runs them in the
//! rxe VM and kills the VM between them; the journal format is in `rdmablk_tools::powercut`).
//!
//!   rdmablk-powercut write URL --journal FILE --trial T [--blocks N] [--seed S]
//!       writes until killed (QD 16, 1..8 blocks, a quarter with FUA, a flush every 8 writes),
//!       journaling each acknowledgement
//!   rdmablk-powercut check PATH --journal FILE
//!       reads PATH (the namespace's block device or file) and checks it against the journal

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use rdmablk_initiator as ini;
use rdmablk_tools::powercut::{self, Journal};

#[derive(Parser)]
#[command(about = "power-cut trials: a journaling writer and its checker")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write through NVMe-oF until killed, journaling every acknowledgement.
    Write {
        /// The namespace: rdma://ADDR:PORT/NQN or soft://ADDR:PORT/NQN (namespace 1).
        url: String,
        #[arg(long)]
        journal: PathBuf,
        /// The trial's number: its writes get newer generations than every earlier trial's.
        #[arg(long)]
        trial: u32,
        /// Blocks of the namespace written (from block 0).
        #[arg(long, default_value_t = 1024)]
        blocks: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Stop after this many acknowledged writes (0: run until killed).
        #[arg(long, default_value_t = 0)]
        count: u64,
    },
    /// Check a device or file against a journal.
    Check {
        path: PathBuf,
        #[arg(long)]
        journal: PathBuf,
    },
}

const QD: usize = 16;
const MAX_BLOCKS: u64 = 8;
const FLUSH_EVERY: u64 = 8;

fn main() -> ExitCode {
    if let Some(code) = rdmablk_target::cli_docs::generate_if_asked(Args::command, "1", || {
        vec![rdmablk_target::cli_docs::see_also()]
    }) {
        return code;
    }
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Write {
            url,
            journal,
            trial,
            blocks,
            seed,
            count,
        } => write(&url, &journal, trial, blocks, seed, count),
        Cmd::Check { path, journal } => check(&path, &journal),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rdmablk-powercut: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// What one in-flight request is.
enum Req {
    Write {
        first: u64,
        n: u64,
        gen: u64,
        fua: bool,
    },
    /// A flush, submitted when the journal held this many writes.
    Flush(u64),
}

fn write(
    url: &str,
    path: &std::path::Path,
    trial: u32,
    blocks: u64,
    seed: u64,
    count: u64,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let opts = ini::ConnectOptions {
        io_queues: 1,
        queue_size: QD as u16 + 1,
        ..ini::ConnectOptions::default()
    };
    let ctrl =
        ini::Controller::connect_with(url, opts).with_context(|| format!("connect {url}"))?;
    let ns = ctrl.namespace(1).context("namespace 1")?;
    let bs = u64::from(ns.block_size());
    anyhow::ensure!(
        blocks * bs <= ns.capacity_bytes(),
        "--blocks {blocks} x {bs} B is more than the namespace's {} B",
        ns.capacity_bytes()
    );
    let mut q = ctrl.io_queue(1).context("I/O queue")?;
    let mut journal = Journal::create(path, trial, blocks, bs as u32)
        .with_context(|| format!("journal {}", path.display()))?;
    let mut rng = seed ^ u64::from(trial).wrapping_mul(0xA24B_AED4_963E_E407) | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut inflight: Vec<Option<Req>> = (0..QD).map(|_| None).collect();
    let mut busy = vec![false; blocks as usize];
    let mut done = Vec::new();
    let (mut n_gen, mut since_flush) = (0u64, 0u64);
    loop {
        while let Some(tag) = inflight.iter().position(Option::is_none) {
            if count > 0 && journal.writes + q.in_flight() as u64 >= count {
                break;
            }
            let buf;
            let req = if since_flush >= FLUSH_EVERY {
                since_flush = 0;
                buf = ctrl.alloc(bs as usize)?;
                (ini::Op::Flush, 0, 0, Req::Flush(journal.writes))
            } else {
                let n = 1 + next() % MAX_BLOCKS.min(blocks);
                let first = next() % (blocks - n + 1);
                if (first..first + n).any(|b| busy[b as usize]) {
                    continue; // overlaps an in-flight write: pick again
                }
                n_gen += 1;
                let gen = powercut::generation(trial, n_gen);
                let fua = next() % 4 == 0;
                let mut b = ctrl.alloc((n * bs) as usize)?;
                for (i, chunk) in b.as_mut_slice()[..(n * bs) as usize]
                    .chunks_mut(bs as usize)
                    .enumerate()
                {
                    powercut::block_content(first + i as u64, gen, chunk);
                }
                buf = b;
                (first..first + n).for_each(|b| busy[b as usize] = true);
                let op = if fua {
                    ini::Op::WriteFua
                } else {
                    ini::Op::Write
                };
                (
                    op,
                    first * bs,
                    (n * bs) as u32,
                    Req::Write { first, n, gen, fua },
                )
            };
            let (op, off, len, what) = req;
            q.submit(op, off, len, buf, tag as u64)
                .map_err(|e| anyhow::anyhow!("submit {op:?}: {e:?}"))?;
            inflight[tag] = Some(what);
        }
        if q.in_flight() == 0 {
            eprintln!("rdmablk-powercut: {} writes acknowledged", journal.writes);
            return Ok(ExitCode::SUCCESS);
        }
        q.wait(&mut done, 1).context("wait")?;
        for c in done.drain(..) {
            let what = inflight[c.tag as usize].take().expect("a known tag");
            c.result
                .as_ref()
                .map_err(|e| anyhow::anyhow!("{:?} at {}: {e}", c.op, c.offset))?;
            match what {
                Req::Write { first, n, gen, fua } => {
                    journal.write_acked(first, n, gen, fua)?;
                    (first..first + n).for_each(|b| busy[b as usize] = false);
                    since_flush += 1;
                }
                Req::Flush(before) => journal.flush_acked(before)?,
            }
        }
    }
}

fn check(path: &std::path::Path, journal: &std::path::Path) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let text = std::fs::read_to_string(journal)
        .with_context(|| format!("journal {}", journal.display()))?;
    let d = powercut::read_journal(&text).map_err(anyhow::Error::msg)?;
    let len = d.blocks as usize * d.block_size as usize;
    let mut data = vec![0u8; len];
    {
        use std::io::Read;
        let mut f =
            std::fs::File::open(path).with_context(|| format!("open {}", path.display()))?;
        f.read_exact(&mut data)
            .with_context(|| format!("read {len} B of {}", path.display()))?;
    }
    let bad = powercut::check(&d, &data);
    println!(
        "trial {}: {} writes acknowledged, {} durable ({} flushes); {} blocks checked; losses {}",
        d.trial,
        d.acked,
        d.durable,
        d.flushes,
        d.blocks,
        bad.len()
    );
    for b in bad.iter().take(20) {
        println!("  {b}");
    }
    Ok(if bad.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
