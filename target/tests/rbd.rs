//! The RBD backend against a real Ceph cluster (`tools/ceph-dev`, started or reused; each test
//! has an image of its own): `rdmablk-target` as a process over the soft provider, driven by
//! the initiator. Skipped, loudly, where Ceph is not installed (`tools/test` installs it).
//!
//! `rdmablk-perf --verify crc32c` against an RBD namespace is in
//! `tools/tests/perf_rbd.rs`.

#![cfg(feature = "rbd")]

mod process;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use process::ceph::{ceph_installed, CephImage};
use process::crash::{assert_meaningful, crash_trials, report};
use process::*;

/// How long a test waits for something that normally takes seconds before it calls it a
/// hang: never what a slow machine (a loaded 2-core host, a TCG VM) runs into.
const HANG_GUARD: Duration = Duration::from_secs(120);

/// The tests share one cluster, and one of them stops its OSD: they run one at a time.
static CLUSTER: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    CLUSTER.lock().unwrap_or_else(|e| e.into_inner())
}

/// SIGTERM, and a clean exit: the image is closed (a killed gateway's watch would keep the
/// image from being removed until it times out).
fn stop(mut target: TargetProc) {
    target.signal(libc::SIGTERM);
    let st = target.wait_exit(HANG_GUARD);
    assert!(st.success(), "exit {st:?}:\n{}", target.log_text());
}

/// Data written through the target is in the image (read back with `rbd export`, i.e. not
/// through the gateway); Deallocate and Write Zeroes read back as zeroes and leave their
/// neighbours alone (the DLFEAT promise); flush works.
#[test]
fn rbd_namespace_stores_data_in_the_image_and_deallocate_reads_zeroes() {
    if !ceph_installed("rbd_namespace_stores_data_in_the_image_and_deallocate_reads_zeroes") {
        return;
    }
    let _serial = one_at_a_time();
    let img = CephImage::create("rdmablk-io", "16M");
    let dir = tmp_dir("rbd-io");
    let target = TargetProc::spawn(&dir, &config_text(free_port(), 1, &img.backend()), 0);
    let ctrl = connect(&target.url(), opts(1, 0));
    let ns = ctrl.namespace(1).unwrap();
    assert_eq!(
        ns.capacity_bytes(),
        16 << 20,
        "the image's size is the capacity"
    );

    let data: Vec<u8> = (0..256 * 1024u32)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    ns.write_at(1 << 20, &data).unwrap();
    ns.flush().unwrap();
    // Partial-object discards and zeroes (RBD objects are 4 MiB): one block each.
    ns.discard((1 << 20) + 8 * 4096, 4096).unwrap();
    ns.write_zeroes((1 << 20) + 20 * 4096, 4096).unwrap();
    let mut back = vec![0u8; data.len()];
    ns.read_at(1 << 20, &mut back).unwrap();
    let mut want = data.clone();
    want[8 * 4096..9 * 4096].fill(0);
    want[20 * 4096..21 * 4096].fill(0);
    assert!(
        back == want,
        "read back differs from what was written, discarded, zeroed"
    );
    drop(ns);
    drop(ctrl);
    stop(target);

    // The gateway holds nothing: the image itself has the data.
    let export = dir.join("export.img");
    img.rbd(&[
        "export",
        "--no-progress",
        &img.spec(),
        export.to_str().unwrap(),
    ])
    .unwrap();
    let raw = std::fs::read(&export).unwrap();
    assert!(raw[1 << 20..(1 << 20) + want.len()] == want[..]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A cluster that does not answer at start is a start error that names the key to fix, after
/// `connect_timeout_s`, not a hang.
#[test]
fn unreachable_cluster_at_start_is_a_clear_error_naming_the_key() {
    let dir = tmp_dir("rbd-unreachable");
    let conf = dir.join("ceph.conf");
    let port = free_port(); // nothing listens there
    std::fs::write(
        &conf,
        format!("[global]\nmon_host = [v2:127.0.0.1:{port}]\nauth_client_required = none\n"),
    )
    .unwrap();
    let backend = format!(
        r#"{{ kind = "rbd", pool = "rbd", image = "img1", ceph_conf = "{}", connect_timeout_s = 2 }}"#,
        conf.display()
    );
    let cfg_path = dir.join("target.toml");
    std::fs::write(&cfg_path, config_text(free_port(), 1, &backend)).unwrap();
    // Not a hang: the process ends on its own (a hang guard, not a measure of how soon).
    let t0 = Instant::now();
    let stderr_path = dir.join("stderr");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rdmablk-target"))
        .arg("--config")
        .arg(&cfg_path)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > HANG_GUARD {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still starting {HANG_GUARD:?} after the start, with no cluster (connect_timeout_s \
                 = 2): a hang\n{}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("refused after {:?}", t0.elapsed());
    let err = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(!status.success(), "started without a cluster:\n{err}");
    assert!(
        err.contains("backend.ceph_conf") && err.contains("no Ceph monitor"),
        "the error names the key and what happened:\n{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rbd resize` shows up on reload: the namespace grows, hosts see the new capacity.
#[test]
fn image_resize_shows_up_on_reload() {
    if !ceph_installed("image_resize_shows_up_on_reload") {
        return;
    }
    let _serial = one_at_a_time();
    let img = CephImage::create("rdmablk-resize", "8M");
    let dir = tmp_dir("rbd-resize");
    let target = TargetProc::spawn(&dir, &config_text(free_port(), 1, &img.backend()), 0);
    let url = target.url();
    assert_eq!(
        connect(&url, opts(1, 0))
            .namespace(1)
            .unwrap()
            .capacity_bytes(),
        8 << 20
    );
    img.rbd(&["resize", "--no-progress", &img.spec(), "--size", "24M"])
        .unwrap();
    target.signal(libc::SIGHUP);
    let deadline = Instant::now() + HANG_GUARD;
    while !target.log_text().contains("grew to") {
        assert!(
            Instant::now() < deadline,
            "no growth after reload:\n{}",
            target.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        connect(&url, opts(1, 0))
            .namespace(1)
            .unwrap()
            .capacity_bytes(),
        24 << 20
    );
    stop(target);
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGKILL of the gateway with writes in flight loses nothing acknowledged: after a restart
/// on the same image, every block holds a version at least as new as the newest acknowledged
/// (the data lives in Ceph, not in the gateway), and none is torn.
#[test]
fn acknowledged_writes_survive_sigkill_of_the_gateway() {
    if !ceph_installed("acknowledged_writes_survive_sigkill_of_the_gateway") {
        return;
    }
    let _serial = one_at_a_time();
    const TRIALS: u32 = 6;
    const SEED: u64 = 0x0C3F_2026;
    let img = CephImage::create("rdmablk-crash", "4M");
    let what = "RBD image";
    // After a kill the restarted gateway's first write waits until the cluster gives up on
    // the dead one's exclusive lock (its watch times out: osd_client_watch_timeout, 5 s on
    // tools/ceph-dev's cluster, 30 s by default). The initiator times I/O commands by
    // io_timeout_ms, so give that room.
    let o = rdmablk_initiator::ConnectOptions {
        io_timeout_ms: 60_000,
        ..opts(1, 0)
    };
    let t0 = Instant::now();
    let run = crash_trials(TRIALS, SEED, what, &o, |_, _| img.backend());
    eprintln!("{TRIALS} kills in {:?}", t0.elapsed());
    report(&run, SEED, what);
    assert_meaningful(&run);
}

/// Resumes a stopped process when dropped (also when the test fails half way).
struct Resume(libc::pid_t);

impl Drop for Resume {
    fn drop(&mut self) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// A cluster lost while serving (its OSD stopped) fails I/O after `op_timeout_s` with a path
/// error (SCT 3h: hosts retry or move to another path), not a media error, and fences
/// nothing: when the OSD is back, writes and reads succeed on the same connection.
#[test]
fn cluster_lost_while_serving_is_a_path_error_and_io_recovers() {
    if !ceph_installed("cluster_lost_while_serving_is_a_path_error_and_io_recovers") {
        return;
    }
    let _serial = one_at_a_time();
    let img = CephImage::create("rdmablk-lost", "8M");
    let dir = tmp_dir("rbd-lost");
    let backend = img.backend_with(", op_timeout_s = 3");
    let target = TargetProc::spawn(&dir, &config_text(free_port(), 1, &backend), 0);
    // The initiator times I/O commands by io_timeout_ms: longer than the op timeout.
    let o = rdmablk_initiator::ConnectOptions {
        io_timeout_ms: 20_000,
        ..opts(1, 0)
    };
    let ctrl = connect(&target.url(), o);
    let ns = ctrl.namespace(1).unwrap();
    let data = vec![0x5Au8; 8192];
    ns.write_at(0, &data).unwrap(); // takes the exclusive lock while the cluster is there

    let osd = img.osd_pid();
    // SAFETY: kill has no memory-safety preconditions; the pid is tools/ceph-dev's OSD.
    assert_eq!(unsafe { libc::kill(osd, libc::SIGSTOP) }, 0);
    let resume = Resume(osd);
    let t0 = Instant::now();
    let e = ns.write_at(8192, &data).expect_err("a write with no OSD");
    let took = t0.elapsed();
    let st = e
        .status()
        .unwrap_or_else(|| panic!("not an NVMe status: {e}"));
    assert_eq!(
        (st.sct, st.sc),
        (rdmablk::nvme::status::Sct::Path, 0x00),
        "Internal Path Error: {e}"
    );
    assert!(
        took >= Duration::from_secs(2),
        "failed after {took:?}, before op_timeout_s"
    );
    drop(resume);

    let deadline = Instant::now() + HANG_GUARD;
    loop {
        match ns.write_at(8192, &data) {
            Ok(()) => break,
            Err(e) if Instant::now() < deadline => {
                eprintln!("after the OSD resumed: {e}");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("I/O did not recover within {HANG_GUARD:?}: {e}"),
        }
    }
    let mut back = vec![0u8; 16384];
    ns.read_at(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0x5A));
    drop(ns);
    drop(ctrl);
    stop(target);
    let _ = std::fs::remove_dir_all(&dir);
}
