//! `rdmablk-perf --verify crc32c` through rdmablk-target (in this process, soft provider) to a
//! namespace on a Ceph RBD image (`tools/ceph-dev`'s cluster, started or reused; an image of
//! the test's own). Skipped, loudly, where Ceph is not installed (`tools/test` installs it).
//! The target's own RBD tests (SIGKILL, resize, errors) are in `target/tests/rbd.rs`.

#![cfg(feature = "rbd")]

#[path = "../../target/tests/process/ceph.rs"]
mod ceph;

use std::process::Command;

#[test]
fn rdmablk_perf_verifies_crc32c_through_the_target_on_an_rbd_image() {
    if !ceph::ceph_installed("rdmablk_perf_verifies_crc32c_through_the_target_on_an_rbd_image") {
        return;
    }
    let img = ceph::CephImage::create("rdmablk-perf", "64M");
    let nqn = "nqn.2026-11.io.rdmablk:perf-rbd";
    let toml = |port: u16| {
        format!(
            r#"
[[listener]]
provider = "soft"
address = "127.0.0.1"
port = {port}

[target]
worker_threads = 2

[arena]
bytes = "64MiB"
lock = false

[[subsystem]]
nqn = "{nqn}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
backend = {}
"#,
            img.backend()
        )
    };
    let target = rdmablk_target::Target::start_on_picked_port(toml, || {
        rdmablk_testkit::free_port("127.0.0.1")
    })
    .expect("target starts");
    let url = format!("soft://{}/{nqn}", target.local_addrs()[0]);
    let out = Command::new(env!("CARGO_BIN_EXE_rdmablk-perf"))
        .args([
            &url,
            "--rw",
            "randrw",
            "--bs",
            "4k-128k",
            "--size",
            "32m",
            "--iodepth",
            "16",
            "--numjobs",
            "2",
            "--runtime",
            "4",
            "--verify",
            "crc32c",
            "--json",
            "-q",
        ])
        .output()
        .expect("run rdmablk-perf");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    let verify = &v["total"]["verify"];
    assert!(verify["blocks_checked"].as_u64().unwrap() > 0, "{verify}");
    assert_eq!(verify["failures"], 0, "{verify}");
    for job in v["jobs"].as_array().unwrap() {
        for op in ["read", "write"] {
            assert!(job[op]["iops"].as_f64().unwrap() > 0.0, "{op}: {job}");
        }
    }
    target.shutdown();
}
