//! What the C API's end-to-end tests share: a soft-provider `rdmablk-target` started
//! in-process with a RAM namespace, and where cargo put `librdmablk_c`.

#![allow(dead_code)] // each test binary uses part of this

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rdmablk_target::Target;

pub const NQN: &str = "nqn.2026-11.io.rdmablk:c-api";

/// A target on 127.0.0.1 (a free port) with one RAM namespace, on the soft RDMA provider or
/// NVMe/TCP; shut down on drop.
pub struct SoftTarget(Option<Target>, &'static str);

impl SoftTarget {
    /// `ram_mib` MiB of 4 KiB blocks.
    pub fn start(ram_mib: u32) -> SoftTarget {
        Self::start_with(ram_mib, 4096)
    }

    /// The same over an NVMe/TCP listener (`tcp://` URLs).
    pub fn start_tcp(ram_mib: u32) -> SoftTarget {
        Self::start_on("tcp", ram_mib, 4096)
    }

    pub fn start_with(ram_mib: u32, block_size: u32) -> SoftTarget {
        Self::start_on("soft", ram_mib, block_size)
    }

    fn start_on(scheme: &'static str, ram_mib: u32, block_size: u32) -> SoftTarget {
        let listener = match scheme {
            "tcp" => "transport = \"tcp\"",
            _ => "provider = \"soft\"",
        };
        let toml = |port: u16| {
            format!(
                r#"
[[listener]]
{listener}
address = "127.0.0.1"
port = {port}

[target]
worker_threads = 1
poll_mode = "interrupt"

[arena]
bytes = "160MiB"
lock = false

[[subsystem]]
nqn = "{NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = {block_size}
backend = {{ kind = "ram", size = "{ram_mib}MiB" }}
"#
            )
        };
        let target = Target::start_on_picked_port(toml, || rdmablk_testkit::free_port("127.0.0.1"))
            .expect("rdmablk-target starts");
        SoftTarget(Some(target), scheme)
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.0.as_ref().unwrap().local_addrs()[0]
    }

    /// `soft://127.0.0.1:PORT/NQN` (or `tcp://`)
    pub fn url(&self) -> String {
        format!("{}://{}/{NQN}", self.1, self.addr())
    }
}

impl Drop for SoftTarget {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            t.shutdown();
        }
    }
}

/// The checkout's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The directory of this test's executable (`<target-dir>/debug/deps`): cargo builds
/// `librdmablk_c.so` and `librdmablk_c.a` there before it runs the package's tests (it
/// copies them up to `<target-dir>/debug` only for `cargo build`).
pub fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().to_path_buf();
    for f in ["librdmablk_c.so", "librdmablk_c.a"] {
        assert!(
            dir.join(f).exists(),
            "{} is missing: build the C library first (cargo build -p rdmablk-initiator-c)",
            dir.join(f).display()
        );
    }
    dir
}

/// A scratch directory under the target dir for compiled C programs.
pub fn out_dir(name: &str) -> PathBuf {
    let d = lib_dir().parent().unwrap().join("c-tests").join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `cmd`, failing the test with its output when it fails or cannot start (`what`
/// names the missing tool).
pub fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what} ({cmd:?}): {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {cmd:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Fails with a clear message when `tool` is not on PATH (tests install nothing).
pub fn require(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "{tool} is not installed: `apt-get install {package}` (tools/lib/install-deps.sh \
         installs it with the build dependencies)"
    );
}
