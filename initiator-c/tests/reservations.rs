//! The reservation calls of the C API (`rdmablk_resv_*`): `tests/c/resv_two_hosts.c`,
//! compiled against `include/rdmablk.h` and run against a target over NVMe/TCP, with two hosts
//! fencing each other (Write Exclusive, a conflict, a preempt, the report, a clear).

mod support;

use std::process::Command;

use support::{lib_dir, out_dir, repo_root, require, run, SoftTarget};

#[test]
fn two_hosts_fence_each_other_through_the_c_api() {
    require("cc", "gcc");
    let exe = out_dir("resv").join("resv_two_hosts");
    let root = repo_root();
    run(
        Command::new("cc")
            .args(["-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g", "-O1"])
            .arg(format!("-I{}", root.join("initiator-c/include").display()))
            .arg(root.join("initiator-c/tests/c/resv_two_hosts.c"))
            .arg("-o")
            .arg(&exe)
            .arg(format!("-L{}", lib_dir().display()))
            .arg("-lrdmablk_c")
            .arg(format!("-Wl,-rpath,{}", lib_dir().display())),
        "cc (resv_two_hosts.c)",
    );
    let target = SoftTarget::start_tcp(16);
    let out = run(Command::new(&exe).arg(target.url()), "resv_two_hosts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("resv_two_hosts: ok"), "{stdout}");
    drop(target);
}
