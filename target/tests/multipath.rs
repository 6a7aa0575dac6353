//! Multipath with the initiator: two `rdmablk-target` processes ("gateways") export one
//! subsystem NQN with one namespace on a shared file (the same `uuid` in both configs); the
//! initiator's `MultipathController` writes through both, one gateway is SIGKILLed with writes
//! in flight, and the application must see no error and read every acknowledged write back
//! through the survivor. The killed gateway is restarted and the initiator returns to it.
//! With ANA states in the gateways' configs, I/O goes to the optimized path, and follows a
//! change made live (config edited, SIGHUP) without the application seeing an error.

mod process;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use process::*;
use rdmablk::nvme::ana::AnaState;
use rdmablk_initiator::{Completion, Error, MultipathController, Namespace, Op};

const UUID_A: &str = "6f1c1a52-2d0e-4b51-9a8e-3b8f0f5c6a01";
const UUID_B: &str = "6f1c1a52-2d0e-4b51-9a8e-3b8f0f5c6a02";
/// Blocks of the shared namespace the tests write.
const BLOCKS: u64 = 1024;
/// How long a test waits for an event (a path lost or back, an ANA state, writers making
/// progress) before it calls it a hang: never what a slow machine runs into.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// Polls `done` until it holds; fails with `what()` after [`HANG_GUARD`].
fn wait_until(mut done: impl FnMut() -> bool, what: impl Fn() -> String) {
    let deadline = Instant::now() + HANG_GUARD;
    while !done() {
        assert!(Instant::now() < deadline, "{} ({HANG_GUARD:?})", what());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A gateway on the test fabric's address and `port` exporting [`NQN`] namespace 1 (ANA group 1, in state
/// `ana` through the listener) from `backend` with `uuid`, controller IDs from `cntlid_min`.
fn gateway_config(port: u16, backend: &str, uuid: &str, ana: AnaState, cntlid_min: u16) -> String {
    config_text(port, 2, backend)
        .replace(
            "nsid = 1\n",
            &format!("nsid = 1\nuuid = \"{uuid}\"\nana_group = 1\n"),
        )
        .replace(
            &format!("port = {port}\n"),
            &format!("port = {port}\nana = {{ 1 = \"{ana}\" }}\n"),
        )
        .replace(
            "allow_any_host = true\n",
            &format!(
                "allow_any_host = true\ncntlid_min = {cntlid_min}\ncntlid_max = {}\n",
                cntlid_min + 99
            ),
        )
}

struct Gateway {
    dir: std::path::PathBuf,
    cfg: String,
    proc: TargetProc,
}

impl Gateway {
    fn start(name: &str, img: &Path, uuid: &str) -> Gateway {
        Self::start_in(name, img, uuid, AnaState::Optimized, 1)
    }

    fn start_in(name: &str, img: &Path, uuid: &str, ana: AnaState, cntlid_min: u16) -> Gateway {
        Self::start_on(
            name,
            &file_backend(img, "16MiB", false),
            uuid,
            ana,
            cntlid_min,
        )
    }

    /// A gateway over any backend table (a shared file, an RBD image).
    fn start_on(name: &str, backend: &str, uuid: &str, ana: AnaState, cntlid_min: u16) -> Gateway {
        let dir = tmp_dir(&format!("mp-{name}"));
        let cfg = gateway_config(free_port(), backend, uuid, ana, cntlid_min);
        let proc = TargetProc::spawn(&dir, &cfg, 0);
        Gateway { dir, cfg, proc }
    }

    fn restart(&mut self, n: u32) {
        self.proc = TargetProc::spawn(&self.dir, &self.cfg, n);
    }

    /// Edits the listener's ANA state in the config file and reloads it (SIGHUP).
    fn set_ana(&mut self, from: AnaState, to: AnaState) {
        let old = format!("ana = {{ 1 = \"{from}\" }}");
        assert!(self.cfg.contains(&old), "state {from} not in the config");
        self.cfg = self.cfg.replace(&old, &format!("ana = {{ 1 = \"{to}\" }}"));
        std::fs::write(self.dir.join("target.toml"), &self.cfg).unwrap();
        self.proc.signal(libc::SIGHUP);
    }
}

fn connect(urls: &[String]) -> MultipathController {
    MultipathController::connect_with(urls, opts(2, 3))
        .unwrap_or_else(|e| panic!("multipath connect {urls:?}: {e}"))
}

/// What the application saw: the newest acknowledged version of each block, errors, and
/// the longest wait for a completion.
#[derive(Default)]
struct Seen {
    acked: Vec<u64>,
    /// Writes acknowledged so far.
    acks: u64,
    errors: Vec<String>,
    max_latency: Duration,
}

impl Seen {
    /// Asserts that the application saw no error; prints the longest wait (the stall).
    fn no_errors(&self, what: &str) {
        assert!(
            self.errors.is_empty(),
            "{what}: the application saw errors: {:?}",
            self.errors
        );
        eprintln!("{what}: longest write {:?}", self.max_latency);
    }
}

/// Sync writers, each on its own blocks (`first..first + n`), verifying nothing yet: every
/// acknowledged version is recorded.
fn sync_writer(ns: Namespace, first: u64, n: u64, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let mut rng = Rng(first + 1);
    let mut gen = 0;
    let mut data = vec![0u8; BLOCK];
    while !stop.load(Ordering::Relaxed) {
        gen += 1;
        let block = first + rng.range(0, n);
        block_content(block, gen, &mut data);
        let t = Instant::now();
        let r = ns.write_at(block * BLOCK as u64, &data);
        let took = t.elapsed();
        let mut s = seen.lock().unwrap();
        s.max_latency = s.max_latency.max(took);
        match r {
            Ok(()) => {
                s.acked[block as usize] = gen;
                s.acks += 1;
            }
            Err(e) => s.errors.push(format!("sync write of block {block}: {e}")),
        }
    }
}

/// Four sync writers on blocks `first..first + 256` (64 each), until [`Writers::stop`].
struct Writers {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    fn start(ns: &Namespace, first: u64) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen {
            acked: vec![0; BLOCKS as usize],
            ..Seen::default()
        }));
        let threads = (0..4)
            .map(|i| {
                let (ns, stop, seen) = (ns.clone(), stop.clone(), seen.clone());
                std::thread::spawn(move || sync_writer(ns, first + i * 64, 64, stop, seen))
            })
            .collect();
        Writers {
            stop,
            seen,
            threads,
        }
    }

    /// Writes acknowledged so far.
    fn acks(&self) -> u64 {
        self.seen.lock().unwrap().acks
    }

    /// Waits until the writers have had `n` more writes acknowledged (they are running), or
    /// fails naming the errors they saw.
    fn wait_for_more(&self, n: u64) {
        let want = self.acks() + n;
        wait_until(
            || self.acks() >= want,
            || {
                let s = self.seen.lock().unwrap();
                format!(
                    "{} of {want} writes acknowledged, errors {:?}",
                    s.acks, s.errors
                )
            },
        );
    }

    fn stop(self) -> Arc<Mutex<Seen>> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        self.seen
    }
}

/// One async queue keeping `depth` writes in flight on blocks `first..first + n` (a block is
/// not written again while a write of it is in flight). Kills `victim` once, right after
/// submitting a full queue, when `kill_after` has passed.
struct AsyncWriter {
    first: u64,
    n: u64,
    busy: Vec<bool>,
    gen: u64,
    rng: Rng,
    submitted_at: Vec<(Instant, u64, u64)>,
    /// Writes acknowledged.
    acks: u64,
}

impl AsyncWriter {
    fn submit_one(&mut self, q: &mut rdmablk_initiator::IoQueue, mp: &MultipathController) {
        let block = loop {
            let b = self.first + self.rng.range(0, self.n);
            if !self.busy[(b - self.first) as usize] {
                break b;
            }
        };
        self.gen += 1;
        let mut buf = mp.alloc(BLOCK).unwrap();
        block_content(block, self.gen, &mut buf.as_mut_slice()[..BLOCK]);
        self.busy[(block - self.first) as usize] = true;
        let tag = self.submitted_at.len() as u64;
        self.submitted_at.push((Instant::now(), block, self.gen));
        q.submit(Op::Write, block * BLOCK as u64, BLOCK as u32, buf, tag)
            .map_err(|e| e.into_error())
            .expect("submit");
    }

    fn complete(&mut self, c: Completion, seen: &Mutex<Seen>) {
        let (at, block, gen) = self.submitted_at[c.tag as usize];
        self.busy[(block - self.first) as usize] = false;
        self.acks += u64::from(c.result.is_ok());
        let mut s = seen.lock().unwrap();
        s.max_latency = s.max_latency.max(at.elapsed());
        match c.result {
            Ok(()) => {
                s.acked[block as usize] = s.acked[block as usize].max(gen);
                s.acks += 1;
            }
            Err(e) => s.errors.push(format!("async write of block {block}: {e}")),
        }
    }
}

/// Reads every block through `ns` and compares it with the newest acknowledged version.
fn verify_all(ns: &Namespace, acked: &[u64]) {
    let mut data = vec![0u8; BLOCK];
    for block in 0..BLOCKS {
        ns.read_at(block * BLOCK as u64, &mut data)
            .unwrap_or_else(|e| panic!("read of block {block}: {e}"));
        let found = block_version(block, &data).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            found, acked[block as usize],
            "block {block}: version {found} read back, {} was the newest acknowledged",
            acked[block as usize]
        );
    }
}

#[test]
fn a_gateway_killed_with_writes_in_flight_costs_the_application_nothing() {
    let img_dir = tmp_dir("mp-img");
    let img = img_dir.join("shared.img");
    let a = Gateway::start("a", &img, UUID_A);
    let b = Gateway::start("b", &img, UUID_A);
    kill_one_of_two(a, b);
}

/// The same with both gateways in front of one Ceph RBD image (the data lives in the
/// cluster). The image has no exclusive-lock feature, as docs/rbd.md says gateways sharing an
/// image need: with it, the survivor's writes would wait out the dead owner's lock (librbd's
/// lock request timeout, 30 s), and the lock would bounce between live gateways.
#[cfg(feature = "rbd")]
#[test]
fn a_gateway_of_an_rbd_image_killed_with_writes_in_flight_costs_the_application_nothing() {
    if !process::ceph::ceph_installed(
        "a_gateway_of_an_rbd_image_killed_with_writes_in_flight_costs_the_application_nothing",
    ) {
        return;
    }
    let img = process::ceph::CephImage::create_with(
        "rdmablk-mp",
        "16M",
        &["--image-feature", "layering"],
    );
    let a = Gateway::start_on("rbd-a", &img.backend(), UUID_A, AnaState::Optimized, 1);
    let b = Gateway::start_on("rbd-b", &img.backend(), UUID_A, AnaState::Optimized, 200);
    kill_one_of_two(a, b);
}

/// Gateway `a` is SIGKILLed under sync and async writers through both; the application sees
/// no error, every acknowledged write reads back, and `a` restarted carries I/O again.
fn kill_one_of_two(mut a: Gateway, b: Gateway) {
    let mp = connect(&[a.proc.url(), b.proc.url()]);
    let ns = mp.namespace(1).unwrap();

    // Sync writers on blocks 0..256, async on 256..1024.
    let writers = Writers::start(&ns, 0);
    let seen = writers.seen.clone();
    let mut q = mp.io_queue(1).unwrap();
    assert!(q.depth() >= 32, "queue depth {}", q.depth());
    let mut w = AsyncWriter {
        first: 256,
        n: BLOCKS - 256,
        busy: vec![false; (BLOCKS - 256) as usize],
        gen: 0,
        rng: Rng(99),
        submitted_at: Vec::new(),
        acks: 0,
    };
    let mut done = Vec::new();
    let mut in_flight_at_kill = 0;
    // Phases, each ended by an event: both paths carry writes (async and sync); gateway A is
    // killed with a full queue in flight; A's path is seen lost; then the writes go on
    // (async and sync) through B.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Phase {
        BothPaths,
        Killed,
        Failover { acks: u64, sync_acks: u64 },
    }
    let mut phase = Phase::BothPaths;
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        while q.in_flight() < 32 {
            w.submit_one(&mut q, &mp);
        }
        let acks = seen.lock().unwrap().acks;
        let async_acks = w.acks;
        match phase {
            Phase::BothPaths => {
                let p = mp.paths();
                if p[0].commands >= 100 && p[1].commands >= 100 && acks - async_acks >= 20 {
                    // 32 writes submitted and not completed, plus the sync writers' calls.
                    in_flight_at_kill = q.in_flight();
                    a.proc.signal(libc::SIGKILL);
                    phase = Phase::Killed;
                }
            }
            Phase::Killed if !mp.paths()[0].live => {
                phase = Phase::Failover {
                    acks: async_acks,
                    sync_acks: acks - async_acks,
                };
            }
            Phase::Killed => {}
            Phase::Failover {
                acks: a0,
                sync_acks: s0,
            } => {
                if async_acks >= a0 + 256 && acks - async_acks >= s0 + 20 {
                    break;
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "stuck in {phase:?} for {HANG_GUARD:?}: paths {:?}, errors {:?}",
            mp.paths(),
            seen.lock().unwrap().errors
        );
        q.wait(&mut done, 1).unwrap();
        for c in done.drain(..) {
            w.complete(c, &seen);
        }
    }
    while q.in_flight() > 0 {
        q.wait(&mut done, 1).unwrap();
        for c in done.drain(..) {
            w.complete(c, &seen);
        }
    }
    writers.stop();
    assert!(
        in_flight_at_kill >= 32,
        "{in_flight_at_kill} in flight at the kill"
    );
    let s = seen.lock().unwrap();
    s.no_errors("SIGKILL failover");
    let paths = mp.paths();
    eprintln!(
        "paths {:?}; re-issued {}",
        paths
            .iter()
            .map(|p| (p.url.as_str(), p.live, p.commands, p.failures))
            .collect::<Vec<_>>(),
        mp.stats().retried_ios
    );
    assert!(!paths[0].live && paths[0].failures > 0, "{:?}", paths[0]);
    assert!(
        paths[0].commands > 0 && paths[1].commands > 0,
        "both paths carried I/O"
    );
    verify_all(&ns, &s.acked);
    drop(s);

    // The gateway comes back: the path reconnects in the background and carries I/O again.
    a.proc.wait_exit(HANG_GUARD);
    a.restart(1);
    wait_until(
        || mp.paths()[0].live,
        || format!("path A did not come back: {:?}", mp.paths()[0]),
    );
    let before = mp.paths()[0].commands;
    let data = vec![0u8; BLOCK];
    for i in 0..16 {
        ns.write_at(i * BLOCK as u64, &data).unwrap();
    }
    assert!(
        mp.paths()[0].commands > before,
        "no I/O went back to path A"
    );
}

#[test]
fn paths_to_different_volumes_are_refused() {
    let img_dir = tmp_dir("mp-img2");
    let a = Gateway::start("a2", &img_dir.join("a.img"), UUID_A);
    let b = Gateway::start("b2", &img_dir.join("b.img"), UUID_B);
    let e = MultipathController::connect_with(&[a.proc.url(), b.proc.url()], opts(1, 1))
        .err()
        .expect("two volumes refused");
    assert!(matches!(e, Error::PathMismatch { .. }), "{e}");
    assert!(e.to_string().contains("not the same volume"), "{e}");
}

/// Waits until the paths report `want` (one state per path) for namespace 1.
fn wait_for_states(mp: &MultipathController, want: &[AnaState]) {
    let states = || -> Vec<_> { mp.paths().iter().map(|p| p.ana_state(1)).collect() };
    wait_until(
        || states().iter().zip(want).all(|(g, w)| *g == Some(*w)),
        || format!("ANA states {:?}, want {want:?}", states()),
    );
}

/// Writes `n` blocks through `ns`; returns the commands each path carried meanwhile.
fn commands_for(mp: &MultipathController, ns: &Namespace, n: u64) -> Vec<u64> {
    let before: Vec<u64> = mp.paths().iter().map(|p| p.commands).collect();
    let mut data = vec![0u8; BLOCK];
    for block in 0..n {
        block_content(block, 1, &mut data);
        ns.write_at(block * BLOCK as u64, &data).unwrap();
    }
    mp.paths()
        .iter()
        .zip(before)
        .map(|(p, b)| p.commands - b)
        .collect()
}

#[test]
fn io_follows_the_optimized_path_and_a_live_ana_change() {
    use AnaState::*;
    let img_dir = tmp_dir("mp-img-ana");
    let img = img_dir.join("shared.img");
    let mut a = Gateway::start_in("ana-a", &img, UUID_A, Optimized, 1);
    let mut b = Gateway::start_in("ana-b", &img, UUID_A, NonOptimized, 101);
    let mp = connect(&[a.proc.url(), b.proc.url()]);
    let ns = mp.namespace(1).unwrap();
    wait_for_states(&mp, &[Optimized, NonOptimized]);
    assert_eq!(
        commands_for(&mp, &ns, 200),
        [200, 0],
        "A is optimized: all I/O there"
    );

    // Change the states while writers run: A becomes inaccessible (commands in flight there
    // get the ANA path status and go to B), then B optimized.
    // Each state change comes with the writers running, and they go on in each new state.
    let writers = Writers::start(&ns, 256);
    writers.wait_for_more(64);
    a.set_ana(Optimized, Inaccessible);
    wait_for_states(&mp, &[Inaccessible, NonOptimized]);
    writers.wait_for_more(64);
    b.set_ana(NonOptimized, Optimized);
    wait_for_states(&mp, &[Inaccessible, Optimized]);
    writers.wait_for_more(64);
    let seen = writers.stop();
    let s = seen.lock().unwrap();
    s.no_errors("ANA change");
    assert_eq!(
        commands_for(&mp, &ns, 200),
        [0, 200],
        "B is optimized: all I/O there"
    );

    // Back: A optimized again, B non-optimized.
    a.set_ana(Inaccessible, Optimized);
    b.set_ana(Optimized, NonOptimized);
    wait_for_states(&mp, &[Optimized, NonOptimized]);
    assert_eq!(
        commands_for(&mp, &ns, 200),
        [200, 0],
        "A is optimized again"
    );
    verify_all(&ns, &{
        let mut acked = s.acked.clone();
        acked[..200].fill(1);
        acked
    });
}

/// A gateway that hangs (SIGSTOP: connections open, nothing answered) is left once its
/// keep-alive fails: the commands in flight there are re-issued on the other path, and the
/// application sees no error. Nothing else can find the hang first: the commands' own
/// timeout is longer than the hang guard, so a keep-alive that did not act would fail the
/// test by its hang guard. The stall is printed, not asserted (a measure, and a slow machine's
/// to make longer).
#[test]
fn a_hung_gateway_is_left_after_the_keep_alive_timeout() {
    let img_dir = tmp_dir("mp-img-hang");
    let img = img_dir.join("shared.img");
    let a = Gateway::start("hang-a", &img, UUID_A);
    let b = Gateway::start("hang-b", &img, UUID_A);
    let o = rdmablk_initiator::ConnectOptions {
        kato_ms: 2_000,
        io_timeout_ms: 2 * HANG_GUARD.as_millis() as u32,
        ..opts(2, 3)
    };
    let kato = Duration::from_millis(u64::from(o.kato_ms));
    let mp = MultipathController::connect_with(&[a.proc.url(), b.proc.url()], o).unwrap();
    let ns = mp.namespace(1).unwrap();
    let writers = Writers::start(&ns, 0);
    // Writes go through both paths before A hangs.
    wait_until(
        || {
            let p = mp.paths();
            p[0].commands >= 64 && p[1].commands >= 64
        },
        || format!("writes through both paths: {:?}", mp.paths()),
    );
    a.proc.signal(libc::SIGSTOP);
    wait_until(
        || !mp.paths()[0].live,
        || {
            format!(
                "the hung gateway's path is still live (KATO {kato:?}): {:?}",
                mp.paths()
            )
        },
    );
    // The writers go on through B.
    writers.wait_for_more(256);
    let seen = writers.stop();
    let s = seen.lock().unwrap();
    s.no_errors(&format!("hung gateway (KATO {kato:?})"));
    let paths = mp.paths();
    assert!(!paths[0].live && paths[1].live, "{paths:?}");
    // Checked before A could run again (it is killed, never continued): what it still holds
    // must not land after the writes re-issued on B.
    verify_all(&ns, &s.acked);
}
