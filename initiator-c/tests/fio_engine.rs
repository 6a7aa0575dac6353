//! fio (Debian's 3.33 binary) through `librdmablk_fio.so`, the external ioengine built by
//! `initiator-c/fio/Makefile` against fio 3.33's headers, against a soft-provider target:
//! fio's own crc32c verify with two jobs (processes, then threads), latency percentiles and
//! JSON, and a timed random read. fio, make and the fio source tarball must be present:
//! missing ones fail the test with what to install.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use support::{lib_dir, repo_root, require, run, SoftTarget, NQN};

/// Builds the engine once per test binary; returns its path.
fn engine() -> &'static PathBuf {
    static ENGINE: OnceLock<PathBuf> = OnceLock::new();
    ENGINE.get_or_init(|| {
        require("make", "make");
        require("cc", "gcc");
        let out = lib_dir().parent().unwrap().join("fio-engine");
        run(
            Command::new("make")
                .arg("-s")
                .arg("-C")
                .arg(repo_root().join("initiator-c/fio"))
                .arg(format!("O={}", out.display()))
                .arg(format!("LIBDIR={}", lib_dir().display())),
            "make (the fio engine)",
        );
        out.join("librdmablk_fio.so")
    })
}

/// fio's file name for namespace 1 of `t` (colons escaped as fio wants).
fn filename(t: &SoftTarget) -> String {
    format!("soft://{}/{NQN}/1", t.addr()).replace(':', "\\:")
}

/// Runs fio with `args` and the engine against `t`; returns its JSON report.
fn fio(t: &SoftTarget, args: &[&str]) -> Value {
    require("fio", "fio");
    let engine = engine();
    let out = run(
        Command::new("fio")
            .arg(format!("--ioengine=external:{}", engine.display()))
            .arg(format!("--filename={}", filename(t)))
            .args(["--output-format=json", "--lat_percentiles=1"])
            .args(args),
        "fio",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // fio may print notes before the JSON document.
    let json = &text[text.find('{').expect("fio printed JSON")..];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("fio JSON: {e}\n{text}"))
}

fn jobs(report: &Value) -> &Vec<Value> {
    report["jobs"].as_array().expect("jobs in fio's JSON")
}

/// Two jobs write 8 MiB each (disjoint ranges) and verify it with crc32c.
fn verify_two_jobs(extra: &[&str]) {
    let t = SoftTarget::start(64);
    let mut args = vec![
        "--name=verify",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=16",
        "--size=8m",
        "--numjobs=2",
        "--offset_increment=8m",
        "--verify=crc32c",
        "--do_verify=1",
    ];
    args.extend_from_slice(extra);
    let report = fio(&t, &args);
    let jobs = jobs(&report);
    assert_eq!(jobs.len(), 2, "{report:#}");
    for j in jobs {
        assert_eq!(j["error"], 0, "{j:#}");
        assert_eq!(j["write"]["io_bytes"], 8 << 20, "{j:#}");
        // The verify pass reads everything back.
        assert_eq!(j["read"]["io_bytes"], 8 << 20, "{j:#}");
        let p99 = &j["write"]["lat_ns"]["percentile"]["99.000000"];
        assert!(p99.as_u64().unwrap_or(0) > 0, "latency percentiles: {j:#}");
    }
}

#[test]
fn fio_verify_crc32c_two_jobs_as_processes() {
    verify_two_jobs(&[]);
}

#[test]
fn fio_verify_crc32c_two_jobs_as_threads_with_128k_blocks() {
    verify_two_jobs(&["--thread", "--bs=128k", "--iodepth=4"]);
}

#[test]
fn fio_verify_with_1536_byte_blocks_bounces_and_still_verifies() {
    // A block size that is not a multiple of 4 KiB (a 512-byte namespace, 1536-byte I/O):
    // the io_u buffers cannot be split out of one registered region, so the engine bounces.
    let t = SoftTarget::start_with(64, 512);
    let report = fio(
        &t,
        &[
            "--name=bounce",
            "--rw=randwrite",
            "--bs=1536",
            "--iodepth=8",
            "--size=3m",
            "--verify=crc32c",
        ],
    );
    let j = &jobs(&report)[0];
    assert_eq!(j["error"], 0, "{j:#}");
    assert_eq!(j["read"]["io_bytes"], 3 << 20, "{j:#}");
}

#[test]
fn fio_timed_random_read_reports_iops_and_percentiles() {
    let t = SoftTarget::start(64);
    let report = fio(
        &t,
        &[
            "--name=randread",
            "--rw=randread",
            "--bs=4k",
            "--iodepth=32",
            "--time_based",
            "--runtime=2",
            "--size=32m",
        ],
    );
    let j = &jobs(&report)[0];
    assert_eq!(j["error"], 0, "{j:#}");
    assert!(j["read"]["iops"].as_f64().unwrap() > 100.0, "{j:#}");
    assert!(
        j["read"]["clat_ns"]["percentile"]["50.000000"]
            .as_u64()
            .unwrap()
            > 0
    );
}
