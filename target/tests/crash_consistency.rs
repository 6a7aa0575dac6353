//! Crash consistency: `rdmablk-target` as a process with a file-backed namespace, written by
//! the initiator (async API, 16 in flight, writes of 1..8 blocks, a flush every so often),
//! killed with SIGKILL at a seeded-random point while writes are in flight, restarted on the
//! same file, and read back, 20 times over on the same file.
//!
//! After each restart every block must be exactly one version (per-block header and a
//! payload derived from it: no torn, misdirected or corrupt block); the version must be the
//! one acknowledged before the last completed flush or one sent after it; and, because a
//! process kill leaves the kernel's page cache intact, no older than the newest version the
//! initiator reported as written. That last check is what proves the initiator never reports
//! an unacknowledged write as a success (and that the target acknowledges nothing it has not
//! handed to the kernel). What a power loss would add (data not yet fdatasync'ed) cannot be
//! produced by killing a process; the flush path's honesty is covered by `faults.rs`.
//!
//! Iterations rotate over three backends on the same bytes: the file with O_DIRECT, the file
//! buffered, and `kind = "block"` on a loop device over that file (`losetup`: needs root, as
//! the rest of `tools/test`).
//!
//! `crash_soak` (ignored) runs the same trials `RDMABLK_CRASH_SOAK_TRIALS` times from seed
//! `RDMABLK_CRASH_SOAK_SEED`; `tools/crash-soak COUNT [SEED]` runs it and `docs/reliability.md`
//! has figures.

mod process;

use std::path::Path;

use process::crash::{assert_meaningful, crash_trials, report};
use process::{file_backend, opts};

const ITERATIONS: u32 = 20;
const SEED: u64 = 0x00C0_FFEE_2026;
const WHAT: &str = "in turn O_DIRECT file, buffered file, block device (loop)";

/// A loop device over a file, detached when dropped.
struct LoopDevice {
    dev: String,
}

impl LoopDevice {
    fn over(file: &Path, size: u64) -> LoopDevice {
        std::fs::File::create(file)
            .and_then(|f| f.set_len(size))
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let out = std::process::Command::new("losetup")
            .args(["-f", "--show"])
            .arg(file)
            .output()
            .expect("losetup (util-linux) runs");
        assert!(
            out.status.success(),
            "losetup -f --show {}: {} (the block-backend trials need root and loop devices)",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        LoopDevice {
            dev: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = std::process::Command::new("losetup")
            .args(["-d", &self.dev])
            .status();
    }
}

/// Runs `trials` trials from `seed`, the namespace of trial `i` on backend `i % 3`: the file
/// with O_DIRECT, the file buffered, the loop device over the same file.
fn trials_on_three_backends(trials: u32, seed: u64) -> process::crash::Run {
    let dir = std::env::temp_dir().join(format!("rdmablk-crash-loop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // One file under all three, so each trial checks what the one before it left.
    let lo = LoopDevice::over(&dir.join("ns.img"), 4 << 20);
    let img = dir.join("ns.img");
    let backend = |i: u32, _: &Path| match i % 3 {
        0 | 1 => file_backend(&img, "4MiB", i % 3 == 0),
        _ => format!(r#"{{ kind = "block", path = "{}" }}"#, lo.dev),
    };
    let run = crash_trials(trials, seed, WHAT, &opts(1, 0), backend);
    drop(lo);
    let _ = std::fs::remove_dir_all(&dir);
    run
}

#[test]
fn acknowledged_and_flushed_writes_survive_sigkill_and_no_block_is_torn() {
    let run = trials_on_three_backends(ITERATIONS, SEED);
    report(&run, SEED, WHAT);
    assert_meaningful(&run);
}

/// `RDMABLK_CRASH_SOAK_TRIALS=N [RDMABLK_CRASH_SOAK_SEED=S] cargo test -p rdmablk-target
/// --test crash_consistency -- --ignored --nocapture crash_soak` (or `tools/crash-soak N`).
#[test]
#[ignore = "soak: set RDMABLK_CRASH_SOAK_TRIALS (tools/crash-soak COUNT)"]
fn crash_soak() {
    let trials: u32 = std::env::var("RDMABLK_CRASH_SOAK_TRIALS")
        .expect("RDMABLK_CRASH_SOAK_TRIALS: how many kill trials to run (tools/crash-soak COUNT)")
        .parse()
        .expect("RDMABLK_CRASH_SOAK_TRIALS: a whole number of trials");
    assert!(trials > 0, "RDMABLK_CRASH_SOAK_TRIALS: at least 1");
    let seed = match std::env::var("RDMABLK_CRASH_SOAK_SEED") {
        Ok(s) => parse_seed(&s),
        Err(_) => SEED,
    };
    let run = trials_on_three_backends(trials, seed);
    report(&run, seed, WHAT);
    assert_meaningful(&run);
}

/// A seed in decimal or `0x` hexadecimal.
fn parse_seed(s: &str) -> u64 {
    let r = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    r.unwrap_or_else(|e| panic!("RDMABLK_CRASH_SOAK_SEED {s:?}: {e}"))
}
