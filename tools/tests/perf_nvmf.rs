//! End-to-end tests of `rdmablk-perf` over NVMe-oF: `--embedded` starts rdmablk-target in the
//! process on the soft provider and drives it through the initiator library, so these cover
//! the whole stack (CM, capsules, RDMA READ/WRITE, the target's data path) with verification.

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rdmablk-perf");

fn perf(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run rdmablk-perf")
}

#[track_caller]
fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The issue's acceptance command, shortened: mixed random I/O with crc32c verification of
/// every read against the last acknowledged write, then a read-back of everything written.
#[test]
fn embedded_randrw_with_crc32c_verify_passes_and_json_holds_the_numbers() {
    let r = perf(&[
        "--embedded",
        "--rw",
        "randrw",
        "--bs",
        "4k-64k",
        "--size",
        "16m",
        "--iodepth",
        "8",
        "--runtime",
        "2",
        "--verify",
        "crc32c",
        "--json",
        "-q",
    ]);
    assert_exit(&r, 0);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).expect("stdout is JSON alone");
    let job = &v["jobs"][0];
    for op in ["read", "write"] {
        assert!(job[op]["iops"].as_f64().unwrap() > 0.0, "{op}: {job}");
        let pct = job[op]["clat_ns"]["percentile"].as_object().unwrap();
        assert!(pct["99.000000"].as_u64().unwrap() >= pct["50.000000"].as_u64().unwrap());
    }
    assert_eq!(v["exit_code"], 0);
}

/// Two jobs share one embedded target, each on its own controller and region.
#[test]
fn embedded_two_jobs_write_then_verify() {
    let r = perf(&[
        "--embedded",
        "--rw",
        "write",
        "--bs",
        "16k",
        "--size",
        "8m",
        "--numjobs",
        "2",
        "--iodepth",
        "4",
        "--verify",
        "crc32c",
        "-q",
    ]);
    assert_exit(&r, 0);
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(out.contains("job1"), "{out}");
    assert!(out.contains("failures=0"), "{out}");
}

/// A target nobody serves is a setup error (exit 1) naming it, not a hang.
#[test]
fn unreachable_soft_target_is_a_clear_setup_error() {
    let port = rdmablk_testkit::free_port("127.0.0.1");
    let url = format!("soft://127.0.0.1:{port}/nqn.2026-11.io.rdmablk:nobody");
    let r = perf(&[&url, "--rw", "read", "--runtime", "1"]);
    assert_exit(&r, 1);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
}

/// `soft://HOST:PORT` without an NQN: rdmablk-perf asks the target's discovery controller and
/// runs against the subsystem it lists.
#[test]
fn discovery_url_resolves_to_the_subsystem() {
    let (target, port) = soft_target("nqn.2026-11.io.rdmablk:perf-discovery", "");
    let url = format!("soft://127.0.0.1:{port}");
    let r = perf(&[
        &url,
        "--rw",
        "randrw",
        "--bs",
        "4k",
        "--iodepth",
        "4",
        "--runtime",
        "1",
        "--size",
        "4m",
        "--numjobs",
        "2",
        "--verify",
        "crc32c",
    ]);
    assert_exit(&r, 0);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("discovered soft://127.0.0.1")
            && err.contains("nqn.2026-11.io.rdmablk:perf-discovery"),
        "{err}"
    );
    // Discovered once, for every job, and the report names what it found.
    assert_eq!(err.matches("discovered").count(), 1, "{err}");
    let out = String::from_utf8_lossy(&r.stdout);
    assert!(
        out.contains("target=soft://127.0.0.1")
            && out.contains("/nqn.2026-11.io.rdmablk:perf-discovery "),
        "{out}"
    );
    target.shutdown();
}

/// Metrics scraped over HTTP before and after an rdmablk-perf run: the namespace's operation
/// counters grew by exactly what the tool reports.
#[test]
fn metrics_count_exactly_what_rdmablk_perf_did() {
    let (target, port) = soft_target(
        "nqn.2026-11.io.rdmablk:metrics",
        "[metrics]\naddress = \"127.0.0.1:0\"\n",
    );
    let (server, url) = metrics_endpoint(&target);
    let scrape = |op: &str| -> u64 {
        scrape_ops(&url, "nqn.2026-11.io.rdmablk:metrics", op)
            .unwrap_or_else(|| panic!("no {op} counter at {url}"))
    };
    let (r0, w0) = (scrape("read"), scrape("write"));
    let target_url = format!("soft://127.0.0.1:{port}/nqn.2026-11.io.rdmablk:metrics");
    let out = perf(&[
        &target_url,
        "--rw",
        "randrw",
        "--bs",
        "4k",
        "--iodepth",
        "8",
        "--runtime",
        "1",
        "--size",
        "8m",
        "--json",
    ]);
    assert_exit(&out, 0);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("perf JSON");
    let job = &j["jobs"][0];
    let (reads, writes) = (
        job["read"]["total_ios"].as_u64().expect("read.total_ios"),
        job["write"]["total_ios"].as_u64().expect("write.total_ios"),
    );
    assert!(reads > 0 && writes > 0, "{job}");
    assert_eq!(scrape("read") - r0, reads, "reads counted by the target");
    assert_eq!(scrape("write") - w0, writes, "writes counted by the target");
    // The latency histogram is one: its `le` buckets never decrease and the +Inf one is the
    // count (they were summed twice once, every quantile far too high), and it counted the run.
    let body = ureq::get(&url)
        .call()
        .expect("GET /metrics")
        .body_mut()
        .read_to_string()
        .unwrap();
    for op in ["read", "write"] {
        let labels = format!("subsystem=\"nqn.2026-11.io.rdmablk:metrics\",nsid=\"1\",op=\"{op}\"");
        let series = |name: &str| -> Vec<(String, u64)> {
            body.lines()
                .filter(|l| l.starts_with(name) && l.contains(&labels))
                .map(|l| {
                    let (k, v) = l.rsplit_once(' ').unwrap();
                    (k.to_owned(), v.parse().unwrap())
                })
                .collect()
        };
        let buckets = series("rdmablk_namespace_latency_seconds_bucket{");
        let count = series("rdmablk_namespace_latency_seconds_count{");
        assert_eq!(buckets.len(), 17, "{op}: {buckets:?}");
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{op}: {buckets:?}"
        );
        let inf = buckets
            .iter()
            .find(|(k, _)| k.contains("le=\"+Inf\""))
            .unwrap()
            .1;
        assert_eq!(inf, count[0].1, "{op}: +Inf bucket against _count");
        let done = if op == "read" { reads } else { writes };
        assert!(
            count[0].1 >= done,
            "{op}: {} of {done} I/Os in the histogram",
            count[0].1
        );
    }
    drop(server);
    target.shutdown();
}

/// With `target.io_statistics = false` the I/O is served and nothing is counted.
#[test]
fn io_statistics_off_serves_io_and_counts_none() {
    let nqn = "nqn.2026-11.io.rdmablk:nostats";
    let (target, port) = soft_target(
        nqn,
        "[target]\nio_statistics = false\n[metrics]\naddress = \"127.0.0.1:0\"\n",
    );
    let (server, url) = metrics_endpoint(&target);
    let target_url = format!("soft://127.0.0.1:{port}/{nqn}");
    let mut args = vec![target_url.as_str()];
    args.extend("--rw randrw --bs 4k --iodepth 4 --runtime 1 --size 8m --json".split(' '));
    let out = perf(&args);
    assert_exit(&out, 0);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).expect("perf JSON");
    assert!(
        j["jobs"][0]["read"]["total_ios"].as_u64().unwrap() > 0,
        "{j}"
    );
    for op in ["read", "write"] {
        assert_eq!(scrape_ops(&url, nqn, op).unwrap_or(0), 0, "{op} counted");
    }
    drop(server);
    target.shutdown();
}

/// The target's Prometheus endpoint (its `[metrics] address`), started, and its URL.
fn metrics_endpoint(
    target: &rdmablk_target::nvmf::Target,
) -> (rdmablk_target::metrics::MetricsServer, String) {
    let handle = target.handle();
    let server = rdmablk_target::metrics::MetricsServer::start(
        handle.clone(),
        handle.metrics_address().unwrap(),
    )
    .expect("metrics endpoint");
    let url = format!("http://{}/metrics", server.addr());
    (server, url)
}

/// The `rdmablk_namespace_ops_total` counter of `op` for namespace 1 of `nqn`, if shown.
fn scrape_ops(url: &str, nqn: &str, op: &str) -> Option<u64> {
    let body = ureq::get(url)
        .call()
        .expect("GET /metrics")
        .body_mut()
        .read_to_string()
        .unwrap();
    let key = format!("rdmablk_namespace_ops_total{{subsystem=\"{nqn}\",nsid=\"1\",op=\"{op}\"}}");
    body.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map(|v| v.trim().parse().unwrap())
}

/// Two targets export one subsystem from one file; rdmablk-perf drives both paths as one
/// multipath controller with crc32c verification, and one target shuts down mid-run: no I/O
/// error, no verify failure, the report says what each path carried and the longest stall.
#[test]
fn multipath_run_survives_a_target_going_away() {
    let dir = std::env::temp_dir().join(format!("rdmablk-perf-mp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("shared.img");
    let nqn = "nqn.2026-11.io.rdmablk:perf-mp";
    let backend = format!(
        r#"{{ kind = "file", path = "{}", create_size = "16MiB", direct = false }}"#,
        img.display()
    );
    let gateway = |cntlid_min: u16| {
        soft_target_with(
            nqn,
            &format!(
                "cntlid_min = {cntlid_min}\ncntlid_max = {}",
                cntlid_min + 99
            ),
            &backend,
        )
    };
    let (a, port_a) = gateway(1);
    let (b, port_b) = gateway(101);
    let urls = format!("soft://127.0.0.1:{port_a}/{nqn},soft://127.0.0.1:{port_b}/{nqn}");
    let child = Command::new(BIN)
        .args([
            &urls,
            "--rw",
            "randwrite",
            "--bs",
            "4k",
            "--iodepth",
            "32",
            "--runtime",
            "3",
            "--size",
            "8m",
            "--verify",
            "crc32c",
            "--json",
            "-q",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run rdmablk-perf");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    a.shutdown();
    let r = child.wait_with_output().unwrap();
    assert_exit(&r, 0);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).expect("stdout is JSON alone");
    let total = &v["total"];
    assert_eq!(total["verify"]["failures"], 0, "{total}");
    assert_eq!(total["error"], 0, "{total}");
    let paths = total["paths"].as_array().expect("per-path counts");
    assert_eq!(paths.len(), 2, "{total}");
    assert!(paths[0]["ios"].as_u64().unwrap() > 0, "{total}");
    assert!(paths[1]["ios"].as_u64().unwrap() > 0, "{total}");
    assert_eq!(paths[0]["live"], false, "{total}");
    assert_eq!(paths[1]["live"], true, "{total}");
    eprintln!(
        "multipath failover: longest gap without a completion {} ms, max write clat {} ms",
        total["max_gap_ns"].as_u64().unwrap() as f64 / 1e6,
        total["write"]["clat_ns"]["max"].as_u64().unwrap() as f64 / 1e6
    );
    b.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
}

/// An in-process soft target on a free port with one 16 MiB RAM namespace in subsystem `nqn`;
/// `extra` is TOML added before the subsystem.
fn soft_target(nqn: &str, extra: &str) -> (rdmablk_target::nvmf::Target, u16) {
    let toml = format!(
        r#"{extra}
[[subsystem]]
nqn = "{nqn}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
backend = {{ kind = "ram", size = "16MiB" }}
"#
    );
    soft_target_toml(&toml)
}

/// An in-process soft target on a free port exporting `nqn` (with `subsys_extra` in its
/// table) with namespace 1 on `backend`.
fn soft_target_with(
    nqn: &str,
    subsys_extra: &str,
    backend: &str,
) -> (rdmablk_target::nvmf::Target, u16) {
    let toml = format!(
        r#"
[[subsystem]]
nqn = "{nqn}"
allow_any_host = true
{subsys_extra}

[[subsystem.namespace]]
nsid = 1
backend = {backend}
"#
    );
    soft_target_toml(&toml)
}

/// An in-process soft target on a free port with `rest` (subsystems) after the common part.
fn soft_target_toml(rest: &str) -> (rdmablk_target::nvmf::Target, u16) {
    let toml = |port: u16| {
        format!(
            r#"
[[listener]]
provider = "soft"
address = "127.0.0.1"
port = {port}

[arena]
bytes = "64MiB"
lock = false

{rest}"#
        )
    };
    let target = rdmablk_target::Target::start_on_picked_port(toml, || {
        rdmablk_testkit::free_port("127.0.0.1")
    })
    .expect("target starts");
    let port = target.local_addrs()[0].port();
    (target, port)
}

/// `--embedded=loop` and `--embedded=tcp`: the same verified mixed workload over the loop
/// transport (no network) and NVMe/TCP on loopback; the report carries the target's CPU per
/// I/O, and over loop the time each side spent watching for the other.
#[test]
fn embedded_loop_and_tcp_verify_and_report_the_target_cpu() {
    for transport in ["loop", "tcp"] {
        let r = perf(&[
            &format!("--embedded={transport}"),
            "--rw",
            "randrw",
            "--bs",
            "4k-64k",
            "--size",
            "16m",
            "--iodepth",
            "8",
            "--numjobs",
            "2",
            "--runtime",
            "1",
            "--verify",
            "crc32c",
            "--json",
            "-q",
        ]);
        assert_exit(&r, 0);
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).expect("JSON");
        assert!(
            v["global options"]["target"]
                .as_str()
                .unwrap()
                .contains(transport),
            "{v}"
        );
        assert!(v["total"]["verify"]["blocks_checked"].as_u64().unwrap() > 0);
        let per_io = v["target_cpu_us_per_io"]
            .as_f64()
            .expect("target CPU per I/O");
        assert!(per_io > 0.0, "{transport}: the target worked: {per_io}");
        let spin = &v["loop_spin_ns"];
        assert_eq!(spin.is_object(), transport == "loop", "{transport}: {spin}");
    }
    // A null namespace keeps no data: no verify, but I/O flows.
    let r = perf(&[
        "--embedded=loop",
        "--embedded-ns",
        "null",
        "--rw",
        "randread",
        "--size",
        "4m",
        "--json",
        "-q",
    ]);
    assert_exit(&r, 0);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).expect("JSON");
    assert_eq!(v["total"]["read"]["total_ios"], 1024);
    // The embedded target's poll mode goes into its config (a value the target refused
    // would fail its start) and is named in the report.
    for mode in ["interrupt", "busy"] {
        let r = perf(&[
            "--embedded=loop",
            "--embedded-ns",
            "null",
            "--embedded-poll-mode",
            mode,
            "--rw",
            "randwrite",
            "--size",
            "4m",
            "--json",
            "-q",
        ]);
        assert_exit(&r, 0);
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).expect("JSON");
        assert_eq!(v["total"]["write"]["total_ios"], 1024, "{mode}");
        let target = v["global options"]["target"].as_str().unwrap();
        assert!(target.contains(&format!("poll_mode {mode}")), "{target}");
    }
}
