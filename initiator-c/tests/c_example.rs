//! `initiator/examples/c/rdmablk_example.c` compiled against `include/rdmablk.h` (flags from
//! `rdmablk.pc`) and run against a soft-provider target: linked to the shared library,
//! to the static library, and once under AddressSanitizer (leak checking on).

mod support;

use std::path::Path;
use std::process::Command;

use support::{lib_dir, out_dir, repo_root, require, run, SoftTarget};

/// `pkg-config --cflags --libs rdmablk` with the checked-in `.pc`, `libdir` pointed at
/// this build.
fn pkg_config_flags(static_link: bool) -> Vec<String> {
    require("pkg-config", "pkg-config");
    let mut cmd = Command::new("pkg-config");
    cmd.env("PKG_CONFIG_PATH", repo_root().join("initiator-c"))
        .arg(format!("--define-variable=libdir={}", lib_dir().display()))
        .args(["--cflags", "--libs", "rdmablk"]);
    if static_link {
        cmd.arg("--static");
    }
    let out = run(&mut cmd, "pkg-config");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Compiles the example to `exe` with `extra` flags.
fn compile(exe: &Path, extra: &[&str], static_link: bool) {
    require("cc", "gcc");
    let src = repo_root().join("initiator/examples/c/rdmablk_example.c");
    let mut cmd = Command::new("cc");
    cmd.args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
        .args(extra)
        .arg(&src)
        .arg("-o")
        .arg(exe);
    let flags = pkg_config_flags(static_link);
    if static_link {
        // Link the archive itself, so the shared library beside it cannot be picked.
        let archive = lib_dir().join("librdmablk_c.a");
        cmd.args(flags.iter().filter(|f| f.as_str() != "-lrdmablk_c"))
            .arg(archive);
        cmd.args(
            flags
                .iter()
                .filter(|f| f.starts_with("-l") && *f != "-lrdmablk_c"),
        );
    } else {
        cmd.args(&flags)
            .arg(format!("-Wl,-rpath,{}", lib_dir().display()));
    }
    run(&mut cmd, "cc (the C example)");
}

fn run_example(exe: &Path, env: &[(&str, &str)]) {
    run_example_on(SoftTarget::start(64), exe, env);
}

fn run_example_on(target: SoftTarget, exe: &Path, env: &[(&str, &str)]) {
    let out = run(
        Command::new(exe)
            .arg(target.url())
            .envs(env.iter().copied()),
        "the C example",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("rdmablk_example: ok"), "{stdout}");
    drop(target);
}

#[test]
fn c_example_against_soft_target_shared_library() {
    let exe = out_dir("shared").join("rdmablk_example");
    compile(&exe, &[], false);
    run_example(&exe, &[]);
}

#[test]
fn c_example_over_nvme_tcp() {
    let exe = out_dir("tcp").join("rdmablk_example");
    compile(&exe, &[], false);
    run_example_on(SoftTarget::start_tcp(64), &exe, &[]);
}

#[test]
fn c_example_against_soft_target_static_library() {
    let exe = out_dir("static").join("rdmablk_example");
    compile(&exe, &[], true);
    run_example(&exe, &[]);
}

#[test]
fn c_example_under_address_sanitizer() {
    let exe = out_dir("asan").join("rdmablk_example");
    compile(
        &exe,
        &["-fsanitize=address", "-fno-omit-frame-pointer"],
        false,
    );
    run_example(
        &exe,
        &[(
            "ASAN_OPTIONS",
            "detect_leaks=1:abort_on_error=0:exitcode=23",
        )],
    );
}
