//! End-to-end tests of the `rdmablk-perf` binary on the local io_uring engine: files under
//! /tmp (O_DIRECT) and /dev/shm (buffered). No timing assertions: runs are 1-2 s at most.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rdmablk-perf");

/// A file that is removed when the test ends.
struct TempFile(PathBuf);

impl TempFile {
    fn new(dir: &str, name: &str) -> Self {
        let p = Path::new(dir).join(format!("rdmablk-perf-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        Self(p)
    }

    fn target(&self) -> String {
        format!("file:{}", self.0.display())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn perf(target: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg(target)
        .args(args)
        .output()
        .expect("run rdmablk-perf")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

const WRITE_4M: &[&str] = &[
    "--rw",
    "write",
    "--bs",
    "4k-16k",
    "--size",
    "4m",
    "--iodepth",
    "8",
    "--verify",
    "crc32c",
    "-q",
];

#[test]
fn write_with_verify_then_verify_only_passes() {
    let f = TempFile::new("/tmp", "roundtrip");
    let w = perf(&f.target(), WRITE_4M);
    assert_exit(&w, 0);
    let out = text(&w.stdout);
    assert!(out.contains("write: IOPS="), "{out}");
    assert!(
        out.contains("blocks checked=1024, failures=0"),
        "read-back pass checks all: {out}"
    );

    let r = perf(
        &f.target(),
        &["--verify-only", "--bs", "4k", "--iodepth", "4", "-q"],
    );
    assert_exit(&r, 0);
    assert!(
        text(&r.stdout).contains("blocks checked=1024, failures=0"),
        "{}",
        text(&r.stdout)
    );
}

#[test]
fn one_corrupt_block_fails_verify_only_with_exit_2_naming_its_offset() {
    let f = TempFile::new("/tmp", "corrupt");
    assert_exit(&perf(&f.target(), WRITE_4M), 0);
    let mut data = std::fs::read(&f.0).unwrap();
    let block = 37 * 4096;
    data[block + 1000] ^= 0xff;
    std::fs::write(&f.0, &data).unwrap();

    // Sequential (the default --rw read): one pass reads every block.
    let r = perf(&f.target(), &["--verify-only", "-q"]);
    assert_exit(&r, 2);
    let err = text(&r.stderr);
    assert!(
        err.contains("offset 151552 (0x25000): crc32c mismatch"),
        "{err}"
    );
    assert!(
        err.contains("expected: magic=0x46564252 offset=151552"),
        "{err}"
    );
    assert!(
        err.contains("found:    magic=0x46564252 block_len=4096 offset=151552"),
        "{err}"
    );
    assert!(err.contains("verify FAILED: 1 of 1024"), "{err}");
}

#[test]
fn verify_only_with_another_seed_fails() {
    let f = TempFile::new("/tmp", "seed");
    assert_exit(&perf(&f.target(), WRITE_4M), 0);
    let r = perf(&f.target(), &["--verify-only", "--seed", "5", "-q"]);
    assert_exit(&r, 2);
    assert!(
        text(&r.stderr).contains("seed differs"),
        "{}",
        text(&r.stderr)
    );
}

#[test]
fn json_parses_and_holds_iops_and_percentiles() {
    let f = TempFile::new("/tmp", "json");
    let r = perf(
        &f.target(),
        &[
            "--rw",
            "randrw",
            "--size",
            "4m",
            "--iodepth",
            "4",
            "--runtime",
            "1",
            "--json",
            "-q",
        ],
    );
    assert_exit(&r, 0);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).expect("stdout is JSON alone");
    let job = &v["jobs"][0];
    for op in ["read", "write"] {
        assert!(job[op]["iops"].as_f64().unwrap() > 0.0, "{op}: {job}");
        assert!(job[op]["total_ios"].as_u64().unwrap() > 0);
        let pct = job[op]["clat_ns"]["percentile"].as_object().unwrap();
        assert_eq!(pct.len(), 17);
        let (p50, p99) = (
            pct["50.000000"].as_u64().unwrap(),
            pct["99.000000"].as_u64().unwrap(),
        );
        assert!(p50 > 0 && p50 <= p99, "{pct:?}");
        assert!(job[op]["clat_ns"]["max"].as_u64().unwrap() >= p99);
    }
    assert_eq!(v["total"]["read"]["total_ios"], job["read"]["total_ios"]);
    assert_eq!(v["global options"]["rw"], "randrw");
    assert_eq!(v["exit_code"], 0);
}

#[test]
fn dev_shm_buffered_randrw_verify_with_two_jobs() {
    let f = TempFile::new("/dev/shm", "shm");
    let args = [
        "--rw",
        "randrw",
        "--bs",
        "4k-32k",
        "--size",
        "2m",
        "--numjobs",
        "2",
        "--iodepth",
        "8",
        "--verify",
        "crc32c",
        "--runtime",
        "1",
        "--direct",
        "0",
        "-q",
    ];
    let r = perf(&f.target(), &args);
    assert_exit(&r, 0);
    let out = text(&r.stdout);
    assert!(out.contains("engine=io_uring (buffered)"), "{out}");
    assert!(
        out.contains("job0:") && out.contains("job1:") && out.contains("All jobs:"),
        "{out}"
    );
    assert_eq!(
        out.matches("failures=0").count(),
        3,
        "two jobs and the total: {out}"
    );

    // With O_DIRECT asked for, tmpfs either takes it (Linux >= 6.6) or the engine falls back
    // to buffered with a warning; the run works either way.
    let r = perf(&f.target(), &["--rw", "randread", "--runtime", "1", "-q"]);
    assert_exit(&r, 0);
    let (out, err) = (text(&r.stdout), text(&r.stderr));
    assert!(
        out.contains("engine=io_uring ") || err.contains("O_DIRECT refused"),
        "{out}\n{err}"
    );
}

#[test]
fn jobs_write_disjoint_slices_that_one_verify_only_job_covers() {
    let f = TempFile::new("/tmp", "slices");
    let w = perf(
        &f.target(),
        &[
            "--rw",
            "write",
            "--size",
            "1m",
            "--numjobs",
            "3",
            "--iodepth",
            "4",
            "--verify",
            "crc32c",
            "-q",
        ],
    );
    assert_exit(&w, 0);
    let r = perf(&f.target(), &["--verify-only", "--iodepth", "8", "-q"]);
    assert_exit(&r, 0);
    assert!(
        text(&r.stdout).contains("blocks checked=768, failures=0"),
        "{}",
        text(&r.stdout)
    );
}

#[test]
fn progress_line_on_stderr() {
    let f = TempFile::new("/tmp", "progress");
    let r = perf(
        &f.target(),
        &["--rw", "randread", "--size", "1m", "--runtime", "1.3"],
    );
    assert_exit(&r, 0);
    let err = text(&r.stderr);
    assert!(
        err.contains("[1s] read ") && err.contains(" IOPS "),
        "{err}"
    );
    assert!(
        !text(&r.stdout).contains("[1s]"),
        "progress stays off stdout"
    );
}

#[test]
fn setup_and_usage_errors_exit_1_with_a_clear_message() {
    let f = TempFile::new("/tmp", "usage");
    for (target, args, needle) in [
        // Nobody serves these (and this machine may have no RDMA device): a setup error that
        // names the target, not a hang.
        ("rdma://127.0.0.1:1/nqn.x", &[][..], "127.0.0.1:1"),
        ("soft://127.0.0.1:1/nqn.x", &[][..], "127.0.0.1:1"),
        (
            "file:/nonexistent-dir/x",
            &[][..],
            "give --size to create it",
        ),
        (&f.target()[..], &["--bs", "4q"][..], "unknown size suffix"),
        (
            &f.target()[..],
            &["--verify-only", "--rw", "write"][..],
            "--verify-only reads only",
        ),
        ("/tmp/no-scheme", &[][..], "unknown kind"),
    ] {
        let r = perf(target, args);
        assert_exit(&r, 1);
        assert!(
            text(&r.stderr).contains(needle),
            "{target} {args:?}: {}",
            text(&r.stderr)
        );
    }
}

/// `--plot`: the SVG holds the run's own numbers: each direction's legend line is the JSON
/// report's IOPS and p50 / p99 / p99.9 as the text report formats them, and each per-second
/// curve has one point per progress line the run printed.
#[test]
fn plot_draws_the_runs_numbers_and_every_second() {
    use rdmablk_tools::perf::report::{format_count, sig_us};
    let f = TempFile::new("/tmp", "plot");
    let svg = TempFile::new("/tmp", "plot-svg");
    let r = perf(
        &f.target(),
        &[
            "--rw",
            "randrw",
            "--size",
            "4m",
            "--iodepth",
            "4",
            "--runtime",
            "3.5",
            "--json",
            "--plot",
            svg.0.to_str().unwrap(),
        ],
    );
    assert_exit(&r, 0);
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).expect("stdout is JSON alone");
    let doc = std::fs::read_to_string(&svg.0).expect("the plot was written");
    assert!(
        doc.trim_start().starts_with("<svg") && doc.trim_end().ends_with("</svg>"),
        "not an SVG document: {}",
        &doc[..doc.len().min(200)]
    );
    for op in ["read", "write"] {
        let o = &v["total"][op];
        let pct = |k: &str| sig_us(o["clat_ns"]["percentile"][k].as_u64().unwrap() as f64 / 1000.0);
        let line = format!(
            "{op}: {} IOPS, p50 {} µs, p99 {} µs, p99.9 {} µs",
            format_count(o["iops"].as_f64().unwrap()),
            pct("50.000000"),
            pct("99.000000"),
            pct("99.900000")
        );
        assert!(doc.contains(&line), "the plot lacks {line:?}");
    }
    // One curve point per second of the run: IOPS and latency, read (#1F77B4) and write
    // (#D62728). Legend swatches are 2-point polylines of the same colours.
    let seconds = text(&r.stderr)
        .lines()
        .filter(|l| l.starts_with('[') && l.contains("s] read "))
        .count();
    assert!(seconds >= 3, "{}", text(&r.stderr));
    for color in ["#1F77B4", "#D62728"] {
        let curves: Vec<usize> = doc
            .split("<polyline")
            .skip(1)
            .filter(|p| p[..p.find("/>").unwrap_or(p.len())].contains(color))
            .map(|p| {
                let pts = &p[p.find("points=\"").expect("points") + 8..];
                pts[..pts.find('"').unwrap()].split_whitespace().count()
            })
            .filter(|&n| n != 2)
            .collect();
        assert_eq!(curves, [seconds, seconds], "{color}: points of its curves");
    }
}

#[test]
fn plot_to_an_unwritable_file_is_a_usage_error_before_the_run() {
    let f = TempFile::new("/tmp", "plot-bad");
    let r = perf(
        &f.target(),
        &["--size", "1m", "--plot", "/nonexistent-dir/x.svg", "-q"],
    );
    assert_exit(&r, 1);
    let err = text(&r.stderr);
    assert!(err.contains("--plot /nonexistent-dir/x.svg"), "{err}");
    assert!(!text(&r.stdout).contains("IOPS"), "no run happened");
}
