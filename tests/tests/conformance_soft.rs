//! The conformance suite on the soft provider, in one process and between two processes, and
//! on verbs when an RDMA device is configured for the test.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdmablk::fabric::{Device, ProviderKind};
use rdmablk_tests::{cases, run, Env, Mode};

const BIN: &str = env!("CARGO_BIN_EXE_rdmablk-conformance");
/// The whole suite takes well under a minute; anything near this is a hang.
const RUN_TIMEOUT: Duration = Duration::from_secs(900);

/// Every case reported, none failed, and none skipped beyond `may_skip` (the soft provider has
/// everything the suite asks of a device, type-2 memory windows included: nothing may skip).
fn assert_clean(passed: usize, failed: usize, skipped: usize, may_skip: usize, what: &str) {
    assert_eq!(
        failed, 0,
        "{what}: {failed} conformance case(s) failed (see the lines above)"
    );
    assert!(passed > 0, "{what}: no conformance case ran");
    assert_eq!(
        passed + skipped,
        cases().len(),
        "{what}: not every case was reported"
    );
    assert!(
        skipped <= may_skip,
        "{what}: {skipped} case(s) skipped, at most {may_skip} may (see the lines above)"
    );
}

#[test]
fn conformance_soft_in_process() {
    let env = Env {
        kind: ProviderKind::Soft,
        listen_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        mode: Mode::InProcess,
    };
    let r = run(&env, None);
    assert_clean(r.passed(), r.failed(), r.skipped(), 0, "soft, in-process");
}

/// Kills a child process when dropped (a failing test must not leave a server behind).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Waits for `child` with a deadline, killing it on timeout.
fn wait_with_timeout(child: &mut Child, timeout: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!(
                "conformance process still running after {} s: killed",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Parses `N passed, N failed, N skipped`.
fn parse_summary(line: &str) -> Option<(usize, usize, usize)> {
    let n: Vec<usize> = line
        .split(", ")
        .map(|p| p.split_once(' ').and_then(|(n, _)| n.parse().ok()))
        .collect::<Option<_>>()?;
    let words: Vec<&str> = line
        .split(", ")
        .filter_map(|p| p.split(' ').nth(1))
        .collect();
    (words == ["passed", "failed", "skipped"]).then(|| (n[0], n[1], n[2]))
}

#[test]
fn conformance_soft_two_processes() {
    let mut server = Reaped(
        Command::new(BIN)
            .args(["--provider", "soft", "--serve", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the conformance server"),
    );
    let stdout = server.0.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the server printed no address within 30 s");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("server did not start: {line:?}"))
        .to_string();

    let client = Command::new(BIN)
        .args([
            "--provider",
            "soft",
            "--connect",
            &addr,
            "--shutdown-server",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the conformance client");
    let mut client = Reaped(client);
    let out = client.0.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{l}");
            lines.push(l);
        }
        lines
    });
    let status = wait_with_timeout(&mut client.0, RUN_TIMEOUT);
    let lines = reader.join().expect("stdout reader");
    let summary = lines.iter().rev().find_map(|l| parse_summary(l));
    let (passed, failed, skipped) =
        summary.unwrap_or_else(|| panic!("client printed no summary line; status {status}"));
    assert_clean(passed, failed, skipped, 0, "soft, two processes");
    assert!(
        status.success(),
        "client exited with {status} despite a clean summary"
    );
    let st = wait_with_timeout(&mut server.0, Duration::from_secs(30));
    assert!(st.success(), "server exited with {st}");
}

/// On verbs, where an RDMA device exists and RDMABLK_TEST_VERBS_ADDR names its IP: ignored
/// (counted as skipped) by default; `cargo test -p rdmablk-tests --test conformance_soft --
/// --ignored conformance_verbs` runs it, and fails if no device or no address is there.
/// (`tools/test-rxe` runs the same suite on rxe through the rdmablk-conformance binary.)
/// No case may skip unless RDMABLK_TEST_VERBS_MAY_SKIP says how many (a device without type-2
/// memory windows skips those cases); the rxe run allows none.
#[test]
#[ignore = "needs an RDMA device and RDMABLK_TEST_VERBS_ADDR (tools/test-rxe covers rxe)"]
fn conformance_verbs() {
    let devices = match Device::list(ProviderKind::Verbs) {
        Ok(d) if !d.is_empty() => d,
        Ok(_) => {
            panic!("no RDMA device (Device::list(Verbs) is empty; load rdma_rxe and add rxe0)")
        }
        Err(e) => panic!("cannot list RDMA devices: {e}"),
    };
    let addr = std::env::var("RDMABLK_TEST_VERBS_ADDR").unwrap_or_else(|_| {
        panic!(
            "RDMABLK_TEST_VERBS_ADDR is not set (devices {devices:?}; set it to an IP of one, \
             e.g. 10.0.2.15)"
        )
    });
    let ip: IpAddr = addr
        .parse()
        .unwrap_or_else(|e| panic!("RDMABLK_TEST_VERBS_ADDR={addr:?}: {e}"));
    let env = Env {
        kind: ProviderKind::Verbs,
        listen_addr: SocketAddr::new(ip, 0),
        mode: Mode::InProcess,
    };
    let r = run(&env, None);
    // A device without type-2 memory windows skips the memory-window cases (each skip is
    // printed with its reason above); say how many may skip there, else none may.
    let may_skip = std::env::var("RDMABLK_TEST_VERBS_MAY_SKIP")
        .map(|n| n.parse().expect("RDMABLK_TEST_VERBS_MAY_SKIP: a count"))
        .unwrap_or(0);
    assert_clean(
        r.passed(),
        r.failed(),
        r.skipped(),
        may_skip,
        "verbs, in-process",
    );
}

#[test]
fn summary_line_parses() {
    assert_eq!(
        parse_summary("40 passed, 1 failed, 4 skipped"),
        Some((40, 1, 4))
    );
    assert_eq!(parse_summary("ok send_recv_sizes (3 ms)"), None);
}
