//! A test's own RBD image on the development Ceph cluster (`tools/ceph-dev`): started (or
//! reused) on first use, the image created for the test and removed when it is dropped.
//! Shared by the target's and the tools' RBD tests (`#[path]`-included there).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// One test's image in pool `rbd`.
pub struct CephImage {
    pub conf: PathBuf,
    pub keyring: PathBuf,
    pub pool: String,
    pub image: String,
}

fn repo_root() -> PathBuf {
    // CARGO_MANIFEST_DIR is target/ or tools/: the repository is its parent.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate sits in the repository")
        .to_owned()
}

/// Whether Ceph's daemons are installed; if not, says loudly that `test` is skipped.
pub fn ceph_installed(test: &str) -> bool {
    let ok = ["ceph-mon", "ceph-osd", "ceph-mgr", "rbd"].iter().all(|b| {
        Command::new("sh")
            .args(["-c", &format!("command -v {b}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !ok {
        eprintln!(
            "\n!!! SKIPPED {test}: Ceph is not installed (apt-get install ceph-mon ceph-mgr \
             ceph-osd ceph-common; tools/test installs them) !!!\n"
        );
    }
    ok
}

impl CephImage {
    /// Starts `tools/ceph-dev` (or reuses the running cluster) and creates image `name` of
    /// `size` (e.g. "256M"), replacing a leftover of an earlier run.
    pub fn create(name: &str, size: &str) -> CephImage {
        Self::create_with(name, size, &[])
    }

    /// [`CephImage::create`] with more `rbd create` arguments (`--image-feature layering`).
    pub fn create_with(name: &str, size: &str, extra: &[&str]) -> CephImage {
        let root = repo_root();
        let out = Command::new(root.join("tools/ceph-dev"))
            .arg("start")
            .output()
            .expect("run tools/ceph-dev");
        assert!(
            out.status.success(),
            "tools/ceph-dev start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env = String::from_utf8_lossy(&out.stdout);
        let var = |k: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("export {k}=")))
                .unwrap_or_else(|| panic!("tools/ceph-dev printed no {k}:\n{env}"))
                .to_owned()
        };
        let img = CephImage {
            conf: PathBuf::from(var("CEPH_CONF")),
            keyring: PathBuf::from(var("CEPH_KEYRING")),
            pool: var("RDMABLK_RBD_POOL"),
            image: format!("{name}-{}", std::process::id()),
        };
        img.rbd(&["rm", "--no-progress", &img.spec()]).ok();
        let spec = img.spec();
        let mut args = vec!["create", spec.as_str(), "--size", size];
        args.extend_from_slice(extra);
        img.rbd(&args)
            .unwrap_or_else(|e| panic!("rbd create {}: {e}", img.spec()));
        img
    }

    /// `pool/image`.
    pub fn spec(&self) -> String {
        format!("{}/{}", self.pool, self.image)
    }

    /// Runs the `rbd` command against this cluster.
    pub fn rbd(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("timeout")
            .arg("60")
            .arg("rbd")
            .arg("-c")
            .arg(&self.conf)
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The backend table for a target's configuration.
    pub fn backend(&self) -> String {
        self.backend_with("")
    }

    /// The backend table with `extra` keys (`", op_timeout_s = 3"`).
    pub fn backend_with(&self, extra: &str) -> String {
        format!(
            r#"{{ kind = "rbd", pool = "{}", image = "{}", ceph_conf = "{}", keyring = "{}"{extra} }}"#,
            self.pool,
            self.image,
            self.conf.display(),
            self.keyring.display()
        )
    }

    /// The cluster's only OSD process (tools/ceph-dev's pid file).
    pub fn osd_pid(&self) -> libc::pid_t {
        let dir = self
            .conf
            .parent()
            .expect("ceph.conf sits in the cluster's directory");
        let pid = std::fs::read_to_string(dir.join("run/osd.0.pid")).expect("osd.0.pid");
        pid.trim().parse().expect("a pid")
    }
}

impl Drop for CephImage {
    fn drop(&mut self) {
        if let Err(e) = self.rbd(&["rm", "--no-progress", &self.spec()]) {
            eprintln!("rbd rm {}: {e}", self.spec());
        }
    }
}
