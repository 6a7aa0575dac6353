//! fio (Debian's 3.33 binary) through `librdmablk_fio.so`, the external ioengine built by
//! `initiator-c/fio/Makefile` against fio 3.33's headers, against a soft-provider target:
//! fio's own crc32c verify with two jobs (processes, then threads), latency percentiles and
//! JSON, and a random read that verifies what a first job wrote. What is asserted is fio's own
//! accounting (every I/O done, no verify error), never a speed. fio, make and the fio source
//! tarball must be present: missing ones fail the test with what to install.

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use support::{lib_dir, repo_root, require, run, SoftTarget};

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
    format!("{}/1", t.url()).replace(':', "\\:")
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
            // No local-JOB-N-verify.state files left in the working directory.
            .arg("--verify_state_save=0")
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

/// Asserts that `dir` ("read" or "write") of job `j` moved `bytes` in `bs`-byte I/Os, all
/// of them done (fio ends a job at its first error or verify failure, with `error` set).
fn all_done(j: &Value, dir: &str, bytes: u64, bs: u64) {
    assert_eq!(j["error"], 0, "{j:#}");
    assert_eq!(j[dir]["io_bytes"], bytes, "{dir} bytes: {j:#}");
    assert_eq!(j[dir]["total_ios"], bytes / bs, "{dir} I/Os: {j:#}");
    assert_eq!(j[dir]["short_ios"], 0, "{dir} short I/Os: {j:#}");
}

/// Two jobs write 8 MiB each (disjoint ranges) in `bs`-KiB blocks and verify it with crc32c.
fn verify_two_jobs(bs_kib: u64, extra: &[&str]) {
    verify_two_jobs_on(SoftTarget::start(64), bs_kib, extra);
}

fn verify_two_jobs_on(t: SoftTarget, bs_kib: u64, extra: &[&str]) {
    let bs = format!("--bs={bs_kib}k");
    let mut args = vec![
        "--name=verify",
        "--rw=randwrite",
        &bs,
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
        all_done(j, "write", 8 << 20, bs_kib << 10);
        // The verify pass reads everything back.
        all_done(j, "read", 8 << 20, bs_kib << 10);
        let p99 = &j["write"]["lat_ns"]["percentile"]["99.000000"];
        assert!(p99.as_u64().unwrap_or(0) > 0, "latency percentiles: {j:#}");
    }
}

#[test]
fn fio_verify_crc32c_two_jobs_as_processes() {
    verify_two_jobs(4, &[]);
}

#[test]
fn fio_verify_crc32c_two_jobs_over_nvme_tcp() {
    verify_two_jobs_on(SoftTarget::start_tcp(64), 4, &[]);
    verify_two_jobs_on(SoftTarget::start_tcp(64), 128, &["--thread", "--iodepth=4"]);
}

#[test]
fn fio_verify_crc32c_two_jobs_as_threads_with_128k_blocks() {
    verify_two_jobs(128, &["--thread", "--iodepth=4"]);
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
    all_done(j, "write", 3 << 20, 1536);
    all_done(j, "read", 3 << 20, 1536);
}

/// A random read at queue depth 32 of 16 MiB a first job wrote with crc32c verify headers:
/// every block read once (fio's random map) and verified (fio checks the header and crc of
/// what a read-only job reads), and the report has IOPS and latency percentiles.
#[test]
fn fio_random_read_verifies_every_block_and_reports_iops_and_percentiles() {
    let t = SoftTarget::start(64);
    let report = fio(
        &t,
        &[
            "--bs=4k",
            "--size=16m",
            "--verify=crc32c",
            "--name=fill",
            "--rw=write",
            "--iodepth=16",
            "--do_verify=0",
            "--name=randread",
            "--stonewall",
            "--rw=randread",
            "--iodepth=32",
        ],
    );
    let jobs = jobs(&report);
    assert_eq!(jobs.len(), 2, "{report:#}");
    let (fill, j) = (&jobs[0], &jobs[1]);
    assert_eq!(
        (fill["jobname"].as_str(), j["jobname"].as_str()),
        (Some("fill"), Some("randread"))
    );
    all_done(fill, "write", 16 << 20, 4096);
    all_done(j, "read", 16 << 20, 4096);
    assert_eq!(j["write"]["total_ios"], 0, "{j:#}");
    assert!(
        j["read"]["iops"].as_f64().unwrap_or(0.0) > 0.0,
        "IOPS: {j:#}"
    );
    assert!(
        j["read"]["clat_ns"]["percentile"]["50.000000"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "latency percentiles: {j:#}"
    );
}
