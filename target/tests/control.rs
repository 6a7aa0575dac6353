//! The control socket and `rdmablk-ctl` against the `rdmablk-target` binary: status, changes
//! written back to the configuration file, SIGHUP, and clients that misbehave.

mod process;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use process::*;
use serde_json::Value;

const CTL: &str = env!("CARGO_BIN_EXE_rdmablk-ctl");

/// A target process with a control socket in `dir`.
fn start(dir: &Path) -> (TargetProc, PathBuf) {
    let sock = dir.join("ctl.sock");
    let img = dir.join("ns1.img");
    let cfg = config_text(free_port(), 2, &file_backend(&img, "16MiB", false)).replace(
        "socket = \"\"   # parallel tests: no shared default socket",
        &format!("socket = \"{}\"", sock.display()),
    );
    let t = TargetProc::spawn(dir, &format!("# an operator's note\n{cfg}"), 0);
    (t, sock)
}

fn ctl(sock: &Path, args: &[&str]) -> (bool, Value) {
    let out = Command::new(CTL)
        .arg("--socket")
        .arg(sock)
        .arg("--json")
        .args(args)
        .output()
        .expect("run rdmablk-ctl");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rdmablk-ctl {args:?}: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), v)
}

fn namespaces(status: &Value) -> Vec<u64> {
    status["result"]["subsystems"][0]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["nsid"].as_u64().unwrap())
        .collect()
}

fn verify(ctrl: &rdmablk_initiator::Controller, nsid: u32, seed: u8) -> Result<(), String> {
    let ns = ctrl.namespace(nsid).map_err(|e| e.to_string())?;
    let data = vec![seed; 32 << 10];
    ns.write_at(0, &data).map_err(|e| e.to_string())?;
    let mut back = vec![0u8; data.len()];
    ns.read_at(0, &mut back).map_err(|e| e.to_string())?;
    (back == data)
        .then_some(())
        .ok_or_else(|| "data differs".into())
}

/// Regression (a fresh CI machine lost this race): `ready` on stdout means the control socket
/// and the metrics endpoint accept too, not just the listeners. Each start is tried the moment
/// the line arrives, as an operator's script would.
#[test]
fn ready_means_the_control_socket_and_metrics_accept() {
    let dir = tmp_dir("control-ready");
    for n in 0..8 {
        let sock = dir.join(format!("ctl-{n}.sock"));
        let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        let cfg = config_text(free_port(), 2, r#"{ kind = "null", size = "16MiB" }"#).replace(
            "socket = \"\"   # parallel tests: no shared default socket",
            &format!(
                "socket = \"{}\"\n[metrics]\naddress = \"{metrics}\"",
                sock.display()
            ),
        );
        let mut t = TargetProc::spawn(&dir, &cfg, n);
        let control = UnixStream::connect(&sock);
        let http = std::net::TcpStream::connect(metrics);
        assert!(control.is_ok(), "start {n}: control socket: {control:?}");
        assert!(
            http.is_ok(),
            "start {n}: metrics endpoint {metrics}: {http:?}"
        );
        drop((control, http));
        t.signal(libc::SIGTERM);
        assert!(t.wait_exit(Duration::from_secs(30)).success(), "start {n}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn changes_through_the_socket_land_in_the_file_and_the_target() {
    let dir = tmp_dir("control");
    let (mut t, sock) = start(&dir);
    let cfg_path = dir.join("target.toml");
    let (ok, st) = ctl(&sock, &["status"]);
    assert!(ok, "{st}");
    assert_eq!(namespaces(&st), vec![1]);
    assert_eq!(
        st["result"]["subsystems"][0]["namespaces"][0]["backend"],
        "file"
    );
    let ctrl = connect(&t.url(), opts(1, 0));
    verify(&ctrl, 1, 1).unwrap();

    // Add a namespace with rdmablk-ctl: the file says so, the host uses it.
    let img2 = dir.join("ns2.img");
    let (ok, r) = ctl(
        &sock,
        &[
            "namespace",
            "add",
            NQN,
            "2",
            "--backend",
            "file",
            "--path",
            img2.to_str().unwrap(),
            "--size",
            "8MiB",
        ],
    );
    assert!(ok, "{r}");
    let text = std::fs::read_to_string(&cfg_path).unwrap();
    assert!(
        text.contains("nsid = 2") && text.contains("ns2.img"),
        "{text}"
    );
    assert!(
        text.contains("# an operator's note"),
        "comments survive the edit"
    );
    verify(&ctrl, 2, 2).unwrap();

    // Remove it while namespace 1 keeps working.
    let (ok, r) = ctl(&sock, &["namespace", "remove", NQN, "2"]);
    assert!(ok, "{r}");
    assert!(!std::fs::read_to_string(&cfg_path)
        .unwrap()
        .contains("nsid = 2"));
    verify(&ctrl, 1, 3).unwrap();
    assert_eq!(namespaces(&ctl(&sock, &["status"]).1), vec![1]);

    // An edit the target refuses leaves the file as it was.
    let before = std::fs::read_to_string(&cfg_path).unwrap();
    let (ok, r) = ctl(
        &sock,
        &[
            "namespace",
            "add",
            NQN,
            "3",
            "--backend",
            "file",
            "--path",
            "/nonexistent/dir/x.img",
        ],
    );
    assert!(!ok, "{r}");
    assert!(r["error"].as_str().unwrap().contains("x.img"), "{r}");
    assert_eq!(std::fs::read_to_string(&cfg_path).unwrap(), before);

    // SIGHUP: the file edited by hand.
    std::fs::write(
        &cfg_path,
        before.clone()
            + "\n[[subsystem.namespace]]\nnsid = 4\nbackend = { kind = \"ram\", size = \"4MiB\" }\n",
    )
    .unwrap();
    t.signal(libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while namespaces(&ctl(&sock, &["status"]).1) != vec![1, 4] {
        assert!(Instant::now() < deadline, "SIGHUP did not add namespace 4");
        std::thread::sleep(Duration::from_millis(50));
    }
    verify(&ctrl, 4, 4).unwrap();

    // An ANA group's state on the listener: written to the file, shown in status; back to
    // optimized, I/O goes on.
    let st = ctl(&sock, &["status"]).1;
    let l = &st["result"]["listeners"][0];
    let (provider, addr) = (
        l["provider"].as_str().unwrap(),
        l["address"].as_str().unwrap(),
    );
    let (ip, port) = addr.rsplit_once(':').unwrap();
    let (ok, r) = ctl(
        &sock,
        &["ana", "set", provider, ip, port, "1", "non-optimized"],
    );
    assert!(ok, "{r}");
    assert!(
        std::fs::read_to_string(&cfg_path)
            .unwrap()
            .contains(r#"ana = { 1 = "non-optimized" }"#),
        "the file records the state"
    );
    let st = ctl(&sock, &["status"]).1;
    assert_eq!(st["result"]["listeners"][0]["ana"]["1"], "non-optimized");
    verify(&ctrl, 1, 5).unwrap();
    let (ok, r) = ctl(&sock, &["ana", "set", provider, ip, port, "1", "sideways"]);
    assert!(!ok);
    assert!(
        r["error"].as_str().unwrap().contains("not an ANA state"),
        "{r}"
    );
    let (ok, r) = ctl(&sock, &["ana", "set", provider, ip, port, "1", "optimized"]);
    assert!(ok, "{r}");

    // A read-only file: changes are refused (the file and the target must agree).
    let mut perm = std::fs::metadata(&cfg_path).unwrap().permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(&cfg_path, perm.clone()).unwrap();
    let (ok, r) = ctl(&sock, &["host", "add", NQN, "nqn.2026-11.io.rdmablk:x"]);
    assert!(!ok);
    assert!(r["error"].as_str().unwrap().contains("read-only"), "{r}");
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    std::fs::set_permissions(&cfg_path, perm).unwrap();

    drop(ctrl);
    t.signal(libc::SIGTERM);
    assert!(t.wait_exit(Duration::from_secs(30)).success());
    assert!(!sock.exists(), "the socket file is removed at exit");
}

#[test]
fn misbehaving_clients_get_errors_and_stall_nothing() {
    let dir = tmp_dir("control-abuse");
    let (mut t, sock) = start(&dir);
    let ctrl = connect(&t.url(), opts(1, 0));
    let ask = |s: &mut UnixStream, line: &[u8]| -> Value {
        s.write_all(line).unwrap();
        let mut a = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut a)
            .unwrap();
        serde_json::from_str(&a).unwrap()
    };
    // Bad JSON, unknown and incomplete commands: error answers on the same connection.
    let mut s = UnixStream::connect(&sock).unwrap();
    for bad in [
        &b"{not json\n"[..],
        b"{\"cmd\": \"explode\"}\n",
        b"{\"nocmd\": 1}\n",
        b"{\"cmd\": \"namespace-add\"}\n",
        b"[1,2,3]\n",
    ] {
        let a = ask(&mut s, bad);
        assert_eq!(a["ok"], false, "{a}");
        assert!(a["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    assert_eq!(ask(&mut s, b"{\"cmd\":\"status\"}\n")["ok"], true);
    drop(s);

    // A 100 MB line: refused, the connection closed.
    let mut big = UnixStream::connect(&sock).unwrap();
    big.set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..100 {
        if big.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut a = String::new();
    let _ = BufReader::new(big).read_line(&mut a);
    assert!(a.contains("longer than"), "{a:?}");

    // A client that sends requests and never reads, and 100 clients at once: others still
    // get answers, I/O goes on.
    let mut mute = UnixStream::connect(&sock).unwrap();
    mute.set_nonblocking(true).unwrap();
    for _ in 0..20_000 {
        if mute.write_all(b"{\"cmd\":\"status\"}\n").is_err() {
            break;
        }
    }
    let crowd: Vec<_> = (0..100)
        .map(|_| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                let mut s = UnixStream::connect(&sock).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                s.write_all(b"{\"cmd\":\"status\"}\n").unwrap();
                let mut a = String::new();
                BufReader::new(s).read_line(&mut a).unwrap();
                let v: Value = serde_json::from_str(&a).unwrap();
                v["ok"] == true || v["error"].as_str().unwrap().contains("too many")
            })
        })
        .collect();
    verify(&ctrl, 1, 9).unwrap();
    for c in crowd {
        assert!(
            c.join().unwrap(),
            "an answer that is neither a status nor 'too many'"
        );
    }
    let (ok, _) = ctl(&sock, &["status"]);
    assert!(ok);
    drop(mute);
    drop(ctrl);
    t.signal(libc::SIGTERM);
    assert!(t.wait_exit(Duration::from_secs(30)).success());
}

/// Writes to namespace 1 of `url` until `stop` is set (the load `rdmablk-ctl top` shows).
fn keep_writing(url: String, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let ctrl = connect(&url, opts(1, 0));
    let ns = ctrl.namespace(1).unwrap();
    let data = vec![7u8; 4096];
    let mut lba = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        ns.write_at(lba * 4096, &data).unwrap();
        lba = (lba + 1) % 1024;
    }
}

/// `rdmablk-ctl top` without a terminal: plain refreshes, each with the namespace's row and
/// the connected host; the writes a host is doing show as w/s.
#[test]
fn top_prints_rates_and_hosts_as_plain_lines_without_a_terminal() {
    let dir = tmp_dir("control-top");
    let (mut t, sock) = start(&dir);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (url, stop) = (t.url(), stop.clone());
        std::thread::spawn(move || keep_writing(url, stop))
    };
    let out = Command::new(CTL)
        .args(["-s", sock.to_str().unwrap(), "top", "-i", "0.5", "-n", "4"])
        .output()
        .expect("run rdmablk-ctl top");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains('\x1b'),
        "escape sequences without a terminal: {text:?}"
    );
    assert_eq!(text.matches("rdmablk-target  ").count(), 4, "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with(NQN)).collect();
    assert!(rows.len() >= 4, "{text}");
    // SUBSYSTEM NSID r/s w/s ...: some refresh saw the writes.
    let wrote = rows.iter().any(|r| {
        let f: Vec<&str> = r.split_whitespace().collect();
        f.get(3)
            .and_then(|w| w.parse::<f64>().ok())
            .is_some_and(|w| w > 0.0)
    });
    assert!(wrote, "no refresh shows the writes: {text}");
    assert!(
        text.contains("HOSTS") && text.contains(" controller "),
        "{text}"
    );
    // Each host with its transport, provider and address.
    assert!(text.contains("  rdma/soft from 127.0.0.1:"), "{text}");
    // A target that is not there is a clear error, exit 2.
    let gone = Command::new(CTL)
        .args(["-s", "/nonexistent/ctl.sock", "top", "-n", "1"])
        .output()
        .unwrap();
    assert_eq!(gone.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("is rdmablk-target running"));
    t.signal(libc::SIGTERM);
    assert!(t.wait_exit(Duration::from_secs(30)).success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `rdmablk-ctl top` in a real terminal (tmux): the view is redrawn in place (one header on
/// the screen however many refreshes), shows the namespace and the host, and Ctrl-C ends it.
#[test]
fn top_redraws_in_place_in_a_terminal_and_ends_at_ctrl_c() {
    if Command::new("tmux").arg("-V").output().is_err() {
        panic!("tmux is missing (tools/lib/install-deps.sh installs it)");
    }
    let dir = tmp_dir("control-top-tty");
    let (mut t, sock) = start(&dir);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (url, stop) = (t.url(), stop.clone());
        std::thread::spawn(move || keep_writing(url, stop))
    };
    let session = format!("rdmablk-top-{}", std::process::id());
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &session])
            .args(args)
            .output()
            .expect("tmux")
    };
    let cmd = format!("{CTL} -s {} top -i 0.3", sock.display());
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "200",
        "-y",
        "40",
        &cmd,
    ]);
    assert!(started.status.success(), "{started:?}");
    // Wait (hang guard 60 s) until a few refreshes have been drawn with the host on them.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut screen = String::new();
    let mut seen = 0;
    while Instant::now() < deadline && seen < 3 {
        let shot = tmux(&["capture-pane", "-p", "-t", &session]);
        let now = String::from_utf8_lossy(&shot.stdout).to_string();
        if now != screen && now.contains(NQN) && now.contains(" controller ") {
            seen += 1;
            screen = now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        seen >= 3,
        "the view never showed the target's namespace and host:\n{screen}"
    );
    assert_eq!(
        screen.matches("SUBSYSTEM").count(),
        1,
        "not redrawn in place:\n{screen}"
    );
    tmux(&["send-keys", "-t", &session, "C-c"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while tmux(&["has-session", "-t", &session]).status.success() {
        assert!(Instant::now() < deadline, "top still running after Ctrl-C");
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = tmux(&["kill-server"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    t.signal(libc::SIGTERM);
    assert!(t.wait_exit(Duration::from_secs(30)).success());
    let _ = std::fs::remove_dir_all(&dir);
}
