//! Both poll modes serve a file namespace through the worker's io_uring, end to end over the
//! soft provider, with O_DIRECT where the filesystem allows it (then completions come from
//! the block layer, not inline at submit).
//!
//! - `busy` never sleeps. The ring uses cooperative task work (`target/src/ring/uring.rs`): a
//!   completion waits as task work until the worker enters the kernel, and `reap` enters when
//!   the ring flags it. (Without that, answers would wait for the worker's next system call
//!   of its own, at the latest its housekeeping tick: slower, not wrong, so this test cannot
//!   tell; the benchmarks measure it.)
//! - `interrupt` sleeps on the CQ channel and the ring's eventfd between commands, and after
//!   an idle pause.
//! - `adaptive` polls on for `poll_spin_us` after each command (the next one of this test
//!   comes within it), then sleeps as `interrupt` during the idle pause and wakes for the
//!   command after it.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use common::*;
use rdmablk_target::config::Config;
use rdmablk_target::Target;

fn start(poll: &str, img: &Path) -> (Target, SocketAddr) {
    init_tracing();
    let text = config_text(free_port(), "32MiB", "");
    assert!(
        text.contains(RAM_BACKEND) && text.contains(r#"poll_mode = "interrupt""#),
        "common::config_text changed its backend or poll_mode line"
    );
    let backend = format!(
        r#"backend = {{ kind = "file", path = "{}", create_size = "16MiB", direct = true }}"#,
        img.display()
    );
    let text = text.replace(RAM_BACKEND, &backend).replace(
        r#"poll_mode = "interrupt""#,
        &format!(r#"poll_mode = "{poll}""#),
    );
    let cfg = Config::from_str(&text).expect("config");
    let t = Target::start(cfg).expect("target starts");
    let addr = t.local_addrs()[0];
    (t, addr)
}

/// Writes, reads back and compares every power-of-two size up to the largest I/O, then
/// reads the first block again (after the worker has been idle between commands).
fn write_read_verify(poll: &str) {
    let dir = tmp_dir(&format!("poll-{poll}"));
    let (t, addr) = start(poll, &dir.join("ns1.img"));
    let (admin, cntlid) = admin_queue(addr, 0);
    let mut q = io_queue(addr, 1, cntlid);
    let (lba, data) = write_read_each_size(&mut q, poll);
    std::thread::sleep(std::time::Duration::from_millis(50));
    q.write_data(0, &vec![0u8; data.len()]);
    let c = q.rw(false, 1, lba, data.len() as u32 / BLOCK);
    assert!(
        c.status.is_success(),
        "{poll}: read after idle: {}",
        c.status
    );
    assert_eq!(
        q.read_data(0, data.len()),
        data,
        "{poll}: after an idle wait"
    );
    drop(q);
    drop(admin);
    t.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn busy_polling_serves_a_file_namespace() {
    write_read_verify("busy");
}

#[test]
fn interrupt_mode_serves_a_file_namespace() {
    write_read_verify("interrupt");
}

#[test]
fn adaptive_polling_serves_a_file_namespace() {
    write_read_verify("adaptive");
}
