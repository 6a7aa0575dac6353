//! Load and access control against the real `rdmablk-target`, in-process, on the soft
//! provider by default (`RDMABLK_E2E_PROVIDER=verbs RDMABLK_E2E_ADDR=10.0.2.15` over verbs):
//!
//! - many connections (32 controllers x 2 I/O queues + their admin queues = 96 queues) doing
//!   mixed, verified I/O for a sustained run, with no error, no memory growth after warm-up
//!   and the target's arena back to idle at the end;
//! - the allow-list as the initiator reports it.
//!
//! The tests of this binary run one at a time (the load test samples the process's RSS).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdmablk_initiator::{ConnectOptions, Controller, Error, IoQueue, Op, SubmitError};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

const NQN: &str = "nqn.2026-11.io.rdmablk:load";
const CLOSED_NQN: &str = "nqn.2026-11.io.rdmablk:closed";
const ALLOWED_HOST: &str = "nqn.2026-11.io.rdmablk:allowed-host";
const STRANGER: &str = "nqn.2026-11.io.rdmablk:stranger";

const CONTROLLERS: usize = 32;
const IO_QUEUES: usize = 2;
const QUEUE_DEPTH: u32 = 16;
const MAX_IO: u32 = 16 << 10;
/// 4 KiB cells: the unit of the shadow copy; an I/O covers 1..=4 cells.
const CELL: u64 = 4096;
const NS_BYTES: u64 = 64 << 20;
/// Mixed I/O after every queue has written its whole region once, before RSS is sampled.
const WARM_UP: Duration = Duration::from_secs(2);
/// Mixed I/O after the sample.
const RUN: Duration = Duration::from_secs(10);
/// RSS growth allowed between the end of warm-up and the end of the run. Memory touched
/// lazily is touched in warm-up: each queue first writes its whole region with full-size
/// transfers (every page of the RAM namespace, of every data slot in the arena and of the
/// buffer pools). Everything else the target and the initiator use per I/O is preallocated
/// (parcels, request tables); what remains is the allocator's per-thread caches settling:
/// measured 0.4-3 MiB on the soft provider (64 driver threads, 2 cores).
const RSS_TOLERANCE_BYTES: u64 = 8 << 20;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

use rdmablk_testkit::e2e_fabric;

fn free_port() -> u16 {
    rdmablk_testkit::free_port(&e2e_fabric().1)
}

/// A target sized for 96+ small queues: 16 KiB transfers, and the hosts ask for 16-entry I/O
/// queues, so an I/O parcel is about 330 KiB and an admin parcel (32 entries) about 650 KiB:
/// 64 MiB of arena holds them all.
fn start_target() -> Target {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    let (provider, address) = e2e_fabric();
    let port = free_port();
    let toml = format!(
        r#"
[[listener]]
provider = "{provider}"
address = "{address}"
port = {port}

[target]
worker_threads = 2
poll_mode = "interrupt"

[arena]
bytes = "64MiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = {MAX_IO}
in_capsule_data_size = 4096
max_queues_per_controller = {queues}
max_connections = 128

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = {{ kind = "ram", size = "{NS_BYTES}" }}

[[subsystem]]
nqn = "{CLOSED_NQN}"
hosts = ["{ALLOWED_HOST}"]

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = {{ kind = "ram", size = "1MiB" }}
"#,
        queues = IO_QUEUES + 1,
    );
    Target::start(Config::from_str(&toml).expect("config")).expect("target starts")
}

fn url(t: &Target, nqn: &str) -> String {
    let scheme = if e2e_fabric().0 == "verbs" {
        "rdma"
    } else {
        "soft"
    };
    format!("{scheme}://{}/{nqn}", t.local_addrs()[0])
}

fn opts(push: bool) -> ConnectOptions {
    ConnectOptions {
        hostnqn: ALLOWED_HOST.into(),
        io_queues: IO_QUEUES as u16,
        queue_size: QUEUE_DEPTH as u16,
        kato_ms: 5_000,
        io_timeout_ms: 20_000,
        connect_timeout_ms: 10_000,
        push_writes: push,
        max_io_bytes: MAX_IO,
        // Two queues x 16 requests x 16 KiB, with room to spare.
        buffer_pool_bytes: 1 << 20,
        reconnect_attempts: 0,
        ..ConnectOptions::default()
    }
}

/// Resident set size of this process (target and initiator together).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    pages * page
}

/// The bytes of cell `cell` at version `v` (0: never written, reads as zeroes).
fn cell_bytes(cell: u64, v: u32, out: &mut [u8]) {
    if v == 0 {
        out.fill(0);
        return;
    }
    let mut x = (cell << 32 | u64::from(v)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// What one queue's driver did.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    reads: u64,
    writes: u64,
    flushes: u64,
    bytes: u64,
}

/// When the drivers stop, and how many have written their region once.
struct Run {
    stop: AtomicBool,
    filled: AtomicUsize,
}

/// Drives one I/O queue over its own region of the namespace until `run.stop`: first one
/// sequential pass of full-size writes over the region, then random writes and reads of
/// 1..=4 cells (never two in flight on one cell), a flush now and then; every read is checked
/// against the versions written.
fn drive(ctrl: &Controller, mut q: IoQueue, region: (u64, u64), seed: u64, run: &Run) -> Counts {
    let (first_cell, cells) = region;
    let mut version = vec![0u32; cells as usize];
    let mut fill = Some(0u64);
    let mut busy = vec![false; cells as usize];
    let mut rng = seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut counts = Counts::default();
    let mut done = Vec::with_capacity(q.depth());
    let mut expect = vec![0u8; CELL as usize];
    let cells_per_io = u64::from(MAX_IO) / CELL;
    loop {
        if fill.is_some_and(|f| f >= cells) && q.in_flight() == 0 {
            fill = None;
            run.filled.fetch_add(1, Ordering::AcqRel);
        }
        let stop = fill.is_none() && run.stop.load(Ordering::Acquire);
        while !stop && q.in_flight() < q.depth() {
            let r = next();
            let (op, start, n) = match &mut fill {
                Some(f) if *f >= cells => break,
                Some(f) => {
                    let start = *f;
                    *f += cells_per_io.min(cells - start);
                    (Op::Write, start, *f - start)
                }
                None => {
                    let n = 1 + r % cells_per_io;
                    let op = match (r >> 40) % 64 {
                        0 => Op::Flush,
                        x if x < 32 => Op::Write,
                        _ => Op::Read,
                    };
                    (op, (r >> 8) % (cells - n + 1), n)
                }
            };
            let span = start..start + n;
            if span.clone().any(|c| busy[c as usize]) {
                break;
            }
            let len = (n * CELL) as u32;
            let off = (first_cell + start) * CELL;
            let mut buf = ctrl.alloc(len as usize).expect("buffer");
            if op == Op::Write {
                for (i, c) in span.clone().enumerate() {
                    let v = version[c as usize] + 1;
                    let cell = &mut buf.as_mut_slice()[i * CELL as usize..(i + 1) * CELL as usize];
                    cell_bytes(first_cell + c, v, cell);
                }
            }
            // The tag is the first cell and the count.
            match q.submit(op, off, len, buf, start << 8 | n) {
                Ok(()) => {
                    for c in span.clone() {
                        busy[c as usize] = true;
                    }
                }
                Err(SubmitError::QueueFull(_)) => break,
                Err(e) => panic!("submit: {}", e.into_error()),
            }
        }
        if stop && q.in_flight() == 0 {
            return counts;
        }
        q.wait(&mut done, 1).expect("wait");
        for c in done.drain(..) {
            if let Err(e) = &c.result {
                panic!("{:?} of {} B at {}: {e}", c.op, c.len, c.offset);
            }
            let (start, n) = (c.tag >> 8, c.tag & 0xFF);
            for (i, cell) in (start..start + n).enumerate() {
                busy[cell as usize] = false;
                let v = &mut version[cell as usize];
                match c.op {
                    Op::Write | Op::WriteFua => *v += 1,
                    Op::Read => {
                        cell_bytes(first_cell + cell, *v, &mut expect);
                        let got = &c.buf.as_slice()[i * CELL as usize..(i + 1) * CELL as usize];
                        assert!(
                            got == &expect[..],
                            "cell {} (byte {}) differs from version {v}",
                            first_cell + cell,
                            (first_cell + cell) * CELL
                        );
                    }
                    Op::Flush => {}
                }
            }
            match c.op {
                Op::Write | Op::WriteFua => counts.writes += 1,
                Op::Read => counts.reads += 1,
                Op::Flush => counts.flushes += 1,
            }
            counts.bytes += u64::from(c.len);
        }
    }
}

/// 32 controllers x 2 I/O queues (half with push writes, half with in-capsule and keyed
/// writes), each queue driven by its own thread with verified mixed I/O for `RUN`: no
/// error, RSS after warm-up stable within `RSS_TOLERANCE_BYTES`, the target's arena back
/// to idle at the end.
#[test]
fn many_connections_sustained_verified_io_without_growth() {
    let _g = serial();
    let t = start_target();
    let ctrls: Vec<Controller> = (0..CONTROLLERS)
        .map(|i| {
            Controller::connect_with(&url(&t, NQN), opts(i % 2 == 0))
                .unwrap_or_else(|e| panic!("controller {i}: {e}"))
        })
        .collect();
    assert_eq!(t.controllers(), CONTROLLERS);
    let queues = CONTROLLERS * IO_QUEUES;
    let cells_per_queue = NS_BYTES / CELL / queues as u64;
    let run = Run {
        stop: AtomicBool::new(false),
        filled: AtomicUsize::new(0),
    };
    let start = Instant::now();
    let rss_warm = std::sync::OnceLock::new();
    let totals = std::thread::scope(|s| {
        let mut drivers = Vec::new();
        for (i, ctrl) in ctrls.iter().enumerate() {
            for j in 0..IO_QUEUES {
                let q = ctrl.io_queue(1).expect("an I/O queue");
                let k = (i * IO_QUEUES + j) as u64;
                let region = (k * cells_per_queue, cells_per_queue);
                let run = &run;
                drivers.push(s.spawn(move || drive(ctrl, q, region, k + 1, run)));
            }
        }
        assert_eq!(
            t.queues_open(),
            queues + CONTROLLERS,
            "every queue connected"
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while run.filled.load(Ordering::Acquire) < queues {
            assert!(
                Instant::now() < deadline,
                "the regions were not written in time"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(WARM_UP);
        rss_warm.set(rss_bytes()).unwrap();
        std::thread::sleep(RUN);
        run.stop.store(true, Ordering::Release);
        drivers
            .into_iter()
            .map(|d| d.join().expect("driver"))
            .fold(Counts::default(), |a, c| Counts {
                reads: a.reads + c.reads,
                writes: a.writes + c.writes,
                flushes: a.flushes + c.flushes,
                bytes: a.bytes + c.bytes,
            })
    });
    let rss_end = rss_bytes();
    let rss_warm = *rss_warm.get().unwrap();
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "load: {queues} I/O queues, {:.1} s: {} reads, {} writes, {} flushes, {:.1} MB/s; \
         RSS after warm-up {} KiB, at the end {} KiB; arena {:?}",
        secs,
        totals.reads,
        totals.writes,
        totals.flushes,
        totals.bytes as f64 / secs / 1e6,
        rss_warm >> 10,
        rss_end >> 10,
        t.arena_stats()
    );
    assert!(totals.reads > 0 && totals.writes > 0, "{totals:?}");
    assert!(
        rss_end <= rss_warm + RSS_TOLERANCE_BYTES,
        "RSS grew from {} KiB to {} KiB",
        rss_warm >> 10,
        rss_end >> 10
    );
    let pushed: u64 = ctrls.iter().map(|c| c.stats().pushed_writes).sum();
    assert!(pushed > 0, "the push-write half pushed nothing");
    assert_eq!(t.arena_stats().refused, 0);
    drop(ctrls);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = t.arena_stats();
        if s.bytes_in_use == 0 && s.parcels == 0 && t.queues_open() == 0 && t.controllers() == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not idle: {s:?}, {} connections, {} controllers",
            t.queues_open(),
            t.controllers()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    t.shutdown();
}

fn refused(r: Result<Controller, Error>) -> String {
    match r {
        Ok(_) => panic!("connected, expected a refusal"),
        Err(e) => {
            assert!(
                matches!(e, Error::ConnectRefused { .. }),
                "expected a Connect refusal, got {e:?}"
            );
            e.to_string()
        }
    }
}

/// The allow-list as an application sees it: a host not on the list gets an error that says
/// so (and names the host), an unknown subsystem NQN is named as such, a listed host and any
/// host of an `allow_any_host` subsystem connect; refusals leave nothing on the target.
#[test]
fn allow_list_refusals_say_why() {
    let _g = serial();
    let t = start_target();
    let stranger = ConnectOptions {
        hostnqn: STRANGER.into(),
        ..opts(true)
    };
    let e = refused(Controller::connect_with(
        &url(&t, CLOSED_NQN),
        stranger.clone(),
    ));
    assert!(e.contains("not allowed") && e.contains(STRANGER), "{e}");
    let e = refused(Controller::connect_with(
        &url(&t, "nqn.2026-11.io.rdmablk:nope"),
        opts(true),
    ));
    assert!(e.contains("unknown subsystem NQN"), "{e}");

    let listed = Controller::connect_with(&url(&t, CLOSED_NQN), opts(true)).expect("listed host");
    let any = Controller::connect_with(&url(&t, NQN), stranger).expect("allow_any_host");
    for c in [&listed, &any] {
        let ns = c.namespace(1).unwrap();
        ns.write_at(0, &[7u8; 4096]).unwrap();
        let mut back = [0u8; 4096];
        ns.read_at(0, &mut back).unwrap();
        assert_eq!(back, [7u8; 4096]);
    }
    assert_eq!(t.controllers(), 2, "no controller left by the refusals");
    drop(listed);
    drop(any);
    let deadline = Instant::now() + Duration::from_secs(10);
    while t.queues_open() != 0 || t.arena_stats().parcels != 0 {
        assert!(Instant::now() < deadline, "not idle: {:?}", t.arena_stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    t.shutdown();
}
