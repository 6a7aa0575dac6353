//! The `rdmablk-target` binary: starts from a config file, serves a host, exits 0 on SIGTERM
//! after the host has gone, refuses a bad configuration with the key named, and pins its
//! workers to the CPUs `target.worker_cpus` gives them.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use common::*;

/// Starts `rdmablk-target --config CFG` and reads its stdout up to the readiness line: the
/// child, its stdout (kept open, so that it can still print), and the lines before `ready`.
fn start_until_ready(cfg: &Path) -> (Child, BufReader<ChildStdout>, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdmablk-target"))
        .arg("--config")
        .arg(cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start rdmablk-target");
    let mut out = child.stdout.take().map(BufReader::new);
    let mut lines = Vec::new();
    while let Some(o) = out.as_mut() {
        let mut line = String::new();
        match o.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if line == "ready\n" => return (child, out.unwrap(), lines),
            Ok(_) => lines.push(line),
        }
    }
    let status = child.wait();
    panic!("stdout ended before `ready`, after {lines:?}; the target: {status:?}");
}

#[test]
fn serves_then_exits_zero_on_sigterm() {
    let dir = std::env::temp_dir().join(format!("rdmablk-daemon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    let cfg = dir.join("target.toml");
    std::fs::write(&cfg, config_text(port, "32MiB", "")).unwrap();
    let (mut child, _out, lines) = start_until_ready(&cfg);
    // The readiness line comes last (second), once the listener and the control socket accept.
    assert_eq!(lines.len(), 1, "lines before `ready`: {lines:?}");
    let line = &lines[0];
    assert!(
        line.starts_with("listening 127.0.0.1:"),
        "first line: {line:?}"
    );
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .unwrap()
        .parse()
        .unwrap();

    let (admin, cntlid) = admin_queue(addr, 0);
    let mut q = io_queue(addr, 1, cntlid);
    let data = pattern(3, 8192);
    q.write_data(0, &data);
    assert!(q.rw(true, 1, 8, 16).status.is_success());
    q.write_data(0, &[0u8; 8192]);
    assert!(q.rw(false, 1, 8, 16).status.is_success());
    assert_eq!(q.read_data(0, 8192), data);
    drop(q);
    drop(admin);
    std::thread::sleep(Duration::from_millis(200));

    // SAFETY: kill has no memory-safety preconditions; the pid is our live child.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_config_names_the_key() {
    let dir = std::env::temp_dir().join(format!("rdmablk-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.toml");
    let text =
        config_text(free_port(), "32MiB", "").replace("max_io_size = 131072", "max_io_size = 1000");
    std::fs::write(&cfg, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rdmablk-target"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limits.max_io_size"), "stderr: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A namespace whose file cannot be opened is one line on stderr that names the namespace, the
/// path, the cause and the fix, each once (it was three `Caused by:` lines repeating each
/// other).
#[test]
fn an_unopenable_namespace_is_one_line_naming_it() {
    let dir = std::env::temp_dir().join(format!("rdmablk-nsopen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("target.toml");
    let missing = dir.join("no-such-dir/ns1.img");
    let backend = format!(r#"{{ kind = "file", path = "{}" }}"#, missing.display());
    let text =
        config_text(free_port(), "32MiB", "").replace(RAM_BACKEND, &format!("backend = {backend}"));
    assert!(text.contains(&backend), "config_text changed: {text}");
    std::fs::write(&cfg, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rdmablk-target"))
        .arg("--config")
        .arg(&cfg)
        .env("RUST_LOG", "off")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "stderr: {err}");
    let path = missing.display().to_string();
    assert_eq!(lines[0].matches(&path).count(), 1, "stderr: {err}");
    assert_eq!(lines[0].matches("No such file").count(), 1, "stderr: {err}");
    assert!(
        lines[0].starts_with("rdmablk-target: error: ")
            && lines[0].contains("namespace 1")
            && lines[0].contains("check the path"),
        "stderr: {err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A worker thread that vanishes without unwinding (as when the kernel kills it in an oops:
/// Linux 6.1's hardened-usercopy BUG in TCP receive, docs/tcp.md) leaves its connections and
/// queues dead; the target notices within seconds and exits 70 for the service manager to
/// restart it. The debug build's hook ends worker 0 by the `exit` system call.
#[test]
fn a_worker_thread_killed_without_unwinding_makes_the_target_exit_70() {
    if !cfg!(debug_assertions) {
        eprintln!("SKIP: the worker exit hook exists in debug builds only");
        return;
    }
    let dir = std::env::temp_dir().join(format!("rdmablk-lostw-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("target.toml");
    let sock = dir.join("ctl.sock");
    let text = config_text(free_port(), "32MiB", "")
        .replace("socket = \"\"", &format!("socket = \"{}\"", sock.display()));
    assert!(
        text.contains(&*sock.to_string_lossy()),
        "no socket in:\n{text}"
    );
    std::fs::write(&cfg, text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rdmablk-target"))
        .arg("--config")
        .arg(&cfg)
        .env(rdmablk_target::nvmf::worker::EXIT_WORKER_ENV, "0")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rdmablk-target");
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the target kept running 20 s without its worker");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(
        status.code(),
        Some(70),
        "exit status {status:?}; stderr:\n{err}"
    );
    assert!(
        err.contains("rdmablk-w0 was killed by the kernel without unwinding"),
        "stderr:\n{err}"
    );
    assert!(
        !sock.exists(),
        "the control socket's file outlived the exit: {}",
        sock.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn worker_cpus_pins_each_worker_to_its_cpu() {
    use rdmablk_target::config::{allowed_cpus, CpuList};
    let allowed = allowed_cpus().expect("sched_getaffinity");
    // Two workers on the last two CPUs the test may use (one CPU: both on it).
    let cpus: Vec<usize> = allowed.cpus().iter().rev().take(2).rev().copied().collect();
    let list = cpus
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let dir = std::env::temp_dir().join(format!("rdmablk-pin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("target.toml");
    let text = config_text(free_port(), "32MiB", &format!("worker_cpus = \"{list}\""))
        .replace("worker_threads = 1", "worker_threads = 2");
    assert!(text.contains("worker_threads = 2"), "{text}");
    std::fs::write(&cfg, text).unwrap();
    let (mut child, _out, _) = start_until_ready(&cfg);
    // Each thread's affinity as the kernel reports it.
    let mut seen = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", child.id())).unwrap() {
        let task = task.unwrap().path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(task.join("status")).unwrap_or_default();
        let Some(mask) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        else {
            continue;
        };
        let mask = CpuList::parse(mask.trim()).unwrap();
        seen.push((comm.trim().to_owned(), mask));
    }
    // SAFETY: kill has no memory-safety preconditions; the pid is our live child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let status = child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    for (w, want) in [
        ("rdmablk-w0", cpus[0]),
        ("rdmablk-w1", cpus[1 % cpus.len()]),
    ] {
        let mask = seen
            .iter()
            .find(|(c, _)| c == w)
            .map(|(_, m)| m.cpus().to_vec());
        assert_eq!(mask, Some(vec![want]), "{w}: threads {seen:?}");
    }
    // The other threads keep the mask the process started with (this test's, as the kernel
    // reports it: offline CPUs included, as in theirs).
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    let ours = ours
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|m| CpuList::parse(m.trim()).unwrap())
        .unwrap();
    for (comm, mask) in seen.iter().filter(|(c, _)| !c.starts_with("rdmablk-w")) {
        assert_eq!(mask, &ours, "{comm} was pinned too: {seen:?}");
    }
    assert!(status.success(), "exit status {status:?}");
}
