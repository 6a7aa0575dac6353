//! Checks of `[subsystem.namespace.backend]`: each kind's paths, sizes and names, the error
//! backend's faults (and what it wraps).

use std::path::Path;

use super::Checker;
use crate::config::{BackendConfig, FaultConfig, RbdBackendConfig};

pub(super) fn check_backend(b: &BackendConfig, block_size: u32, key: &str, c: &mut Checker) {
    let size_ok = |c: &mut Checker, size: u64| {
        if size == 0 || size % u64::from(block_size) != 0 {
            c.fail(
                format!("{key}.size"),
                format!(
                    "{size} is not a non-zero multiple of the block size {block_size} \
                     (use e.g. \"256MiB\")"
                ),
            );
        }
    };
    match b {
        BackendConfig::File(f) => {
            check_path(&f.path, key, c);
            if let Some(s) = f.create_size {
                if s.bytes() == 0 || s.bytes() % u64::from(block_size) != 0 {
                    c.fail(
                        format!("{key}.create_size"),
                        format!("{s} is not a non-zero multiple of the block size {block_size}"),
                    );
                }
            }
        }
        BackendConfig::Block(d) => {
            check_path(&d.path, key, c);
            if !d.path.starts_with("/dev/") {
                c.fail(
                    format!("{key}.path"),
                    format!(
                        "{} is not under /dev (use kind = \"file\" for regular files)",
                        d.path.display()
                    ),
                );
            }
        }
        BackendConfig::Nvme(d) => {
            check_path(&d.path, key, c);
            let name = d.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !d.path.starts_with("/dev/") || !name.starts_with("ng") {
                c.fail(
                    format!("{key}.path"),
                    format!(
                        "{} is not an NVMe generic character device /dev/ngXnY (`nvme list -v` \
                         names them; a block device /dev/nvmeXnY is kind = \"block\")",
                        d.path.display()
                    ),
                );
            }
        }
        BackendConfig::Null(s) | BackendConfig::Ram(s) => size_ok(c, s.size.bytes()),
        BackendConfig::Rbd(r) => check_rbd(r, key, c),
        BackendConfig::Error(e) => {
            for (name, f) in [
                ("fail_reads", &e.fail_reads),
                ("fail_writes", &e.fail_writes),
                ("fail_flushes", &e.fail_flushes),
            ] {
                check_fault(f, &format!("{key}.{name}"), c);
            }
            if e.latency_us > 10_000_000 {
                c.fail(
                    format!("{key}.latency_us"),
                    "is above 10 s, longer than any host waits (lower it)",
                );
            }
            if matches!(e.inner, BackendConfig::Error(_)) {
                c.fail(
                    format!("{key}.inner"),
                    "is another error backend (put all faults in one)",
                );
            }
            check_backend(&e.inner, block_size, &format!("{key}.inner"), c);
        }
    }
}

fn check_rbd(r: &RbdBackendConfig, key: &str, c: &mut Checker) {
    if !cfg!(feature = "rbd") {
        c.fail(
            format!("{key}.kind"),
            "\"rbd\": this rdmablk-target was built without RBD support (build it with the \
             default features, which need librbd-dev and librados-dev)",
        );
    }
    let names = [
        ("pool", Some(r.pool.as_str())),
        ("image", Some(r.image.as_str())),
        ("namespace", r.namespace.as_deref()),
        ("user", Some(r.user.as_str())),
    ];
    for (name, value) in names {
        let Some(v) = value else { continue };
        if v.is_empty() || v.contains('\0') || v.contains('/') || v.contains('@') {
            c.fail(
                format!("{key}.{name}"),
                format!("{v:?} is not a valid Ceph name (non-empty, no '/', '@' or NUL)"),
            );
        }
    }
    if r.user.starts_with("client.") {
        c.fail(
            format!("{key}.user"),
            format!(
                "{:?}: give the name without \"client.\" (user = {:?})",
                r.user,
                &r.user["client.".len()..]
            ),
        );
    }
    for (name, path) in [
        ("ceph_conf", Some(&r.ceph_conf)),
        ("keyring", r.keyring.as_ref()),
    ] {
        if path.is_some_and(|p| !p.is_absolute()) {
            c.fail(
                format!("{key}.{name}"),
                "is a relative path (use an absolute path)",
            );
        }
    }
    if !(1..=300).contains(&r.connect_timeout_s) {
        c.fail(
            format!("{key}.connect_timeout_s"),
            format!("{} is not in 1..=300", r.connect_timeout_s),
        );
    }
    if r.op_timeout_s > 3600 {
        c.fail(
            format!("{key}.op_timeout_s"),
            format!(
                "{} is above an hour (use 0 to wait for ever)",
                r.op_timeout_s
            ),
        );
    }
}

fn check_fault(f: &FaultConfig, key: &str, c: &mut Checker) {
    if !(0.0..=1.0).contains(&f.rate) {
        c.fail(
            format!("{key}.rate"),
            format!("{} is not a probability (use 0.0..=1.0)", f.rate),
        );
    }
    if f.nth == Some(0) {
        c.fail(
            format!("{key}.nth"),
            "counts from 1 (use 1 for the first operation)",
        );
    }
    if f.sticky && f.nth.is_none() {
        c.fail(
            format!("{key}.sticky"),
            "needs nth (the operation it starts from)",
        );
    }
}

fn check_path(p: &Path, key: &str, c: &mut Checker) {
    if !p.is_absolute() {
        c.fail(
            format!("{key}.path"),
            format!("{} is relative (use an absolute path)", p.display()),
        );
    }
}
