//! A thousand hosts' controllers on a default target (issue 46): the `rdmablk-target` daemon,
//! started with no `[arena]` and no `[limits]` (what the README's quickstart invites), takes
//! 1,000 NVMe/TCP controllers (an admin queue and one 128-deep I/O queue each) from this
//! process, then serves a new host's verified I/O. Memory follows data in flight, not
//! connections: the daemon's locked (pinned) memory does not grow at all, and its resident
//! memory grows by at most 128 KiB per idle controller.
//!
//! The daemon runs as its own process so that its memory is its own to measure
//! (`/proc/<pid>/status`: VmRSS, VmLck). `RDMABLK_SCALE_CONTROLLERS` lowers the count for a
//! quick local run (`tools/test` runs the full 1,000).

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::tcp_wire::{rw_cmd, TcpWire};
use common::{pattern, BLOCK, HANG_GUARD, SUBNQN};

const CONTROLLERS: usize = 1000;
/// What an idle controller may add to the daemon's resident memory.
const RSS_PER_CONTROLLER: u64 = 128 << 10;
/// The Linux host's I/O queue size.
const IO_DEPTH: u16 = 128;

struct Daemon {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `rdmablk-target` with a default configuration: a tcp listener and one subsystem; no
/// `[arena]`, no `[limits]`, no `[target]`.
fn start_default_daemon() -> Daemon {
    let dir = rdmablk_testkit::tmp_dir("tcp-scale");
    let port = rdmablk_testkit::free_port("127.0.0.1");
    let cfg = dir.join("target.toml");
    let text = format!(
        r#"
[[listener]]
transport = "tcp"
address = "127.0.0.1"
port = {port}

[control]
socket = ""

[[subsystem]]
nqn = "{SUBNQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = {BLOCK}
backend = {{ kind = "ram", size = "16MiB" }}
"#
    );
    std::fs::File::create(&cfg)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .expect("config written");
    let child = Command::new(env!("CARGO_BIN_EXE_rdmablk-target"))
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("rdmablk-target starts");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + HANG_GUARD;
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "the daemon never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    Daemon { child, addr }
}

/// A field of `/proc/<pid>/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = s
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a number of kB");
    kib << 10
}

/// Room for `n` more sockets in this process (the default soft limit is 1,024).
fn raise_open_files(n: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write the struct they are given.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < n {
            r.rlim_cur = n.min(r.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        }
    }
    assert!(r.rlim_cur >= n, "the hard open-file limit is below {n}");
}

/// A controller: its admin queue (a long KATO: these hosts stay idle) and one I/O queue.
fn controller(addr: SocketAddr) -> (TcpWire, TcpWire) {
    let (a, cntlid) = TcpWire::admin_kato(addr, false, false, 600_000);
    let q = TcpWire::io_queue(addr, false, 1, cntlid, IO_DEPTH);
    (a, q)
}

/// Writes then reads back `len` bytes at `lba` through `q`.
fn verified_io(q: &mut TcpWire, lba: u64, len: usize, seed: u64) {
    let data = pattern(seed, len);
    let blocks = (len / BLOCK as usize) as u32;
    let (c, _) = q.exec(rw_cmd(true, lba, blocks), &data, 0, false);
    assert!(c.status.is_success(), "write: {}", c.status);
    let (c, back) = q.exec(rw_cmd(false, lba, blocks), &[], len as u32, false);
    assert!(c.status.is_success(), "read: {}", c.status);
    assert!(back == data, "data read back differs");
}

#[test]
fn a_thousand_controllers_fit_a_default_target_and_a_new_host_is_served() {
    let n = std::env::var("RDMABLK_SCALE_CONTROLLERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CONTROLLERS);
    raise_open_files(2 * n as u64 + 256);
    let d = start_default_daemon();
    let pid = d.child.id();
    // A first controller with I/O: what is created once (the pool's pages, the ring) exists.
    let (_a0, mut q0) = controller(d.addr);
    verified_io(&mut q0, 0, 4096, 1);
    let (rss0, lck0) = (status_bytes(pid, "VmRSS:"), status_bytes(pid, "VmLck:"));
    let start = Instant::now();
    let held: Vec<(TcpWire, TcpWire)> = (0..n).map(|_| controller(d.addr)).collect();
    let took = start.elapsed();
    let (rss1, lck1) = (status_bytes(pid, "VmRSS:"), status_bytes(pid, "VmLck:"));
    let per = rss1.saturating_sub(rss0) / n as u64;
    println!(
        "{n} controllers (admin + one {IO_DEPTH}-deep I/O queue) connected in {took:.1?}: \
         target RSS {rss0} -> {rss1} bytes ({per} per controller), locked {lck0} -> {lck1}"
    );
    assert_eq!(lck1, lck0, "pinned memory grew with idle controllers");
    assert!(
        per <= RSS_PER_CONTROLLER,
        "each idle controller costs the target {per} resident bytes (at most {RSS_PER_CONTROLLER})"
    );
    // A new host is still served: a large write (R2T, H2CData) and read, verified.
    let (_a, mut q) = controller(d.addr);
    verified_io(&mut q, 64, 128 << 10, 2);
    drop(held);
}
