//! Helpers for tests that run `rdmablk-target` as a process (to SIGKILL or SIGTERM it) and
//! drive it with the initiator: spawning on a config, signals, bounded waits, and a block
//! model that knows which versions of each block may legally be on the media.

#![allow(dead_code)]

pub mod ceph;
pub mod crash;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rdmablk_initiator::{ConnectOptions, Controller};

pub const NQN: &str = "nqn.2026-11.io.rdmablk:faults";
/// Logical block size of the test namespace, and the unit the model tracks.
pub const BLOCK: usize = 4096;

/// A fresh temporary directory for one test.
pub fn tmp_dir(name: &str) -> PathBuf {
    rdmablk_testkit::tmp_dir(name)
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    rdmablk_testkit::free_port("127.0.0.1")
}

/// The fabric the target processes listen on: `RDMABLK_E2E_PROVIDER` (`soft`, the default, or
/// `verbs`) at `RDMABLK_E2E_ADDR` (default 127.0.0.1; in the Soft-RoCE VM, rxe0's 10.0.2.15).
pub fn fabric() -> (&'static str, String) {
    let (kind, addr) = rdmablk_testkit::e2e_fabric();
    (if kind == "verbs" { "verbs" } else { "soft" }, addr)
}

/// Whether the target processes serve NVMe/TCP (`RDMABLK_E2E_TRANSPORT=tcp`) instead of RDMA
/// on [`fabric`]'s provider.
pub fn over_tcp() -> bool {
    std::env::var("RDMABLK_E2E_TRANSPORT").is_ok_and(|t| t == "tcp")
}

/// A target on [`fabric`]'s address and `port` serving namespace 1 from `backend` (a TOML
/// inline table) with 4 KiB blocks.
pub fn config_text(port: u16, workers: u32, backend: &str) -> String {
    let (provider, address) = fabric();
    let listener = if over_tcp() {
        "transport = \"tcp\"".to_string()
    } else {
        format!("provider = \"{provider}\"")
    };
    format!(
        r#"
[[listener]]
{listener}
address = "{address}"
port = {port}

[target]
worker_threads = {workers}
poll_mode = "interrupt"

[control]
socket = ""   # parallel tests: no shared default socket

[arena]
bytes = "48MiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = 131072
max_queues_per_controller = 4
max_connections = 8

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = {BLOCK}
backend = {backend}
"#
    )
}

/// A file backend table for `img` (created with `size` if missing).
pub fn file_backend(img: &Path, size: &str, direct: bool) -> String {
    format!(
        r#"{{ kind = "file", path = "{}", create_size = "{size}", direct = {direct} }}"#,
        img.display()
    )
}

/// A running `rdmablk-target` process.
pub struct TargetProc {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
    /// Kept open: the target prints to stdout only at start, but a closed pipe would turn a
    /// later print into an error.
    _stdout: BufReader<ChildStdout>,
}

impl TargetProc {
    /// Starts the binary on `cfg` (written to `dir/target.toml`); stderr goes to
    /// `dir/target-N.log`. Returns once it prints `ready` (its first
    /// listener's address is `addr`).
    pub fn spawn(dir: &Path, cfg: &str, n: u32) -> TargetProc {
        let cfg_path = dir.join("target.toml");
        std::fs::write(&cfg_path, cfg).unwrap();
        let log = dir.join(format!("target-{n}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_rdmablk-target"))
            .arg("--config")
            .arg(&cfg_path)
            .env(
                "RUST_LOG",
                std::env::var("RDMABLK_TARGET_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::from(File::create(&log).unwrap()))
            .spawn()
            .expect("start rdmablk-target");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        // `listening ADDR` per listener, then `ready` once everything accepts (docs/target.md).
        let mut addr = None;
        let mut line = String::new();
        loop {
            line.clear();
            let n = out.read_line(&mut line).unwrap_or(0);
            let l = line.trim();
            if n > 0 && l == "ready" && addr.is_some() {
                break;
            }
            match l.strip_prefix("listening ") {
                Some(a) if n > 0 && addr.is_none() => addr = Some(a.parse().unwrap()),
                Some(_) if n > 0 => {}
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "target did not start: stdout {line:?}\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
            }
        }
        let addr: SocketAddr = addr.unwrap();
        TargetProc {
            addr,
            child,
            log,
            _stdout: out,
        }
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our child, not reaped
        // yet (we hold its `Child`), so it cannot name another process.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({sig}): {}", std::io::Error::last_os_error());
    }

    /// Waits for the process to end, at most `limit` (then kills it and fails: a hang).
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "rdmablk-target did not exit within {limit:?}; its log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn url(&self) -> String {
        let scheme = if over_tcp() {
            "tcp"
        } else if fabric().0 == "verbs" {
            "rdma"
        } else {
            "soft"
        };
        format!("{scheme}://{}/{NQN}", self.addr)
    }
}

impl Drop for TargetProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Initiator options for these tests: bounded timeouts, `attempts` reconnects.
pub fn opts(io_queues: u16, attempts: u32) -> ConnectOptions {
    ConnectOptions {
        io_queues,
        queue_size: 32,
        kato_ms: 2_000,
        io_timeout_ms: 10_000,
        connect_timeout_ms: 2_000,
        reconnect_attempts: attempts,
        reconnect_delay_ms: 50,
        reconnect_max_delay_ms: 400,
        ..ConnectOptions::default()
    }
}

pub fn connect(url: &str, o: ConnectOptions) -> Controller {
    Controller::connect_with(url, o).unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// SplitMix64: the seeded generator of workloads, kill points and payloads.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

const MAGIC: &[u8; 4] = b"RBCC";

/// The content of block `block` at version `gen` (gen 0: never written, zeroes). Header:
/// magic, block index (u32 LE), generation (u64 LE); then a payload derived from both, so a
/// torn, misdirected or stale block never matches what its header claims.
pub fn block_content(block: u64, gen: u64, out: &mut [u8]) {
    assert_eq!(out.len(), BLOCK);
    if gen == 0 {
        out.fill(0);
        return;
    }
    out[..4].copy_from_slice(MAGIC);
    out[4..8].copy_from_slice(&(block as u32).to_le_bytes());
    out[8..16].copy_from_slice(&gen.to_le_bytes());
    let mut r = Rng(block << 40 ^ gen ^ 0x5EED);
    for chunk in out[16..].chunks_mut(8) {
        chunk.copy_from_slice(&r.next().to_le_bytes()[..chunk.len()]);
    }
}

/// The version a block holds, or why it is no version at all.
pub fn block_version(block: u64, data: &[u8]) -> Result<u64, String> {
    if data.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    if &data[..4] != MAGIC {
        return Err(format!(
            "block {block}: no header (magic {:02x?})",
            &data[..4]
        ));
    }
    let at = u32::from_le_bytes(data[4..8].try_into().unwrap());
    if u64::from(at) != block {
        return Err(format!(
            "block {block}: holds block {at}'s data (misdirected)"
        ));
    }
    let gen = u64::from_le_bytes(data[8..16].try_into().unwrap());
    let mut want = vec![0u8; BLOCK];
    block_content(block, gen, &mut want);
    if data != &want[..] {
        let first = data.iter().zip(&want).position(|(a, b)| a != b).unwrap();
        return Err(format!(
            "block {block}: torn or corrupt version {gen} (first bad byte {first})"
        ));
    }
    Ok(gen)
}

/// What the host knows about each block of a region: the version guaranteed durable (acked
/// before a flush that completed), the newest acknowledged, and every version sent since the
/// durable one (any of which may be on the media).
#[derive(Clone, Debug, Default)]
pub struct BlockState {
    pub durable: u64,
    pub acked: u64,
    pub sent: Vec<u64>,
}

#[derive(Clone, Debug)]
pub struct Model {
    pub first_block: u64,
    pub blocks: Vec<BlockState>,
}

impl Model {
    pub fn new(first_block: u64, n: usize) -> Model {
        Model {
            first_block,
            blocks: vec![BlockState::default(); n],
        }
    }

    fn state(&mut self, block: u64) -> &mut BlockState {
        &mut self.blocks[(block - self.first_block) as usize]
    }

    pub fn sent(&mut self, block: u64, gen: u64) {
        self.state(block).sent.push(gen);
    }

    pub fn acked(&mut self, block: u64, gen: u64) {
        let s = self.state(block);
        s.acked = s.acked.max(gen);
    }

    /// What a flush submitted now would make durable: the acked versions.
    pub fn snapshot(&self) -> Vec<u64> {
        self.blocks.iter().map(|s| s.acked).collect()
    }

    /// A flush submitted at `snapshot` completed successfully.
    pub fn flushed(&mut self, snapshot: &[u64]) {
        for (s, &g) in self.blocks.iter_mut().zip(snapshot) {
            s.durable = s.durable.max(g);
        }
    }

    /// Checks one block read back after a crash or restart. `page_cache_kept`: the kernel
    /// survived (a process kill, not a power loss), so even acknowledged-but-unflushed
    /// versions must be there. Returns the version found.
    pub fn check(&self, block: u64, data: &[u8], page_cache_kept: bool) -> Result<u64, String> {
        let s = &self.blocks[(block - self.first_block) as usize];
        let found = block_version(block, data)?;
        let legal = found == s.durable || (found > s.durable && s.sent.contains(&found));
        if !legal {
            return Err(format!(
                "block {block}: version {found} found, durable version {} (flushed) and sent \
                 since {:?}: acknowledged-and-flushed data lost or a version from nowhere",
                s.durable, s.sent
            ));
        }
        if page_cache_kept && found < s.acked {
            return Err(format!(
                "block {block}: version {found} found but {} was acknowledged: the target \
                 acknowledged a write it had not handed to the kernel (or the host reported \
                 success for an unacknowledged write)",
                s.acked
            ));
        }
        Ok(found)
    }

    /// After a successful check and flush: what was found is now the durable baseline.
    pub fn rebase(&mut self, block: u64, found: u64) {
        let s = self.state(block);
        *s = BlockState {
            durable: found,
            acked: found,
            sent: Vec::new(),
        };
    }
}
