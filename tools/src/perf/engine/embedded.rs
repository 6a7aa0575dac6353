//! `--embedded`: an rdmablk-target started in this process on the soft provider at 127.0.0.1,
//! with one RAM namespace, shared by every job of the run and stopped when the last job's
//! engine is gone. The whole NVMe-oF path runs (CM, capsules, RDMA READ/WRITE emulation, the
//! target's request state machine), only the network is loopback.

use std::sync::{Arc, Mutex, Weak};

use rdmablk_target::config::Config;
use rdmablk_target::Target;

use super::{EngineError, OpenOptions};

/// The subsystem the embedded target serves.
pub const EMBEDDED_NQN: &str = "nqn.2026-11.io.rdmablk:embedded";
/// Namespace size when the run does not ask for more.
const DEFAULT_NS_BYTES: u64 = 256 << 20;
/// Arena per job: the admin queue's window (~4.2 MiB) and one I/O queue's (~16.5 MiB at the
/// default 128 entries x 128 KiB), rounded up.
const ARENA_BYTES_PER_JOB: u64 = 24 << 20;

static RUNNING: Mutex<Weak<EmbeddedTarget>> = Mutex::new(Weak::new());

/// The running embedded target.
pub struct EmbeddedTarget {
    target: Mutex<Option<Target>>,
    url: String,
}

impl EmbeddedTarget {
    /// The running embedded target, started on first use.
    pub fn get(opts: &OpenOptions) -> Result<Arc<EmbeddedTarget>, EngineError> {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = running.upgrade() {
            return Ok(t);
        }
        let t = Arc::new(Self::start(opts)?);
        *running = Arc::downgrade(&t);
        Ok(t)
    }

    fn start(opts: &OpenOptions) -> Result<EmbeddedTarget, EngineError> {
        let fail = |err: Box<dyn std::error::Error + Send + Sync>| EngineError::Connect {
            target: "--embedded".into(),
            err,
        };
        // A free port on loopback (the target's config wants a fixed one).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| fail(Box::new(e)))?
            .port();
        let ns_bytes = opts
            .min_file_len
            .unwrap_or(0)
            .max(DEFAULT_NS_BYTES)
            .next_multiple_of(1 << 20);
        let arena_bytes = (16 << 20) + u64::from(opts.numjobs.max(1)) * ARENA_BYTES_PER_JOB;
        let toml = format!(
            r#"
[[listener]]
provider = "soft"
address = "127.0.0.1"
port = {port}

[target]
worker_threads = 1

[arena]
bytes = {arena_bytes}
lock = false

[[subsystem]]
nqn = "{EMBEDDED_NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = {{ kind = "ram", size = {ns_bytes} }}
"#
        );
        let cfg = Config::from_str(&toml).map_err(|e| fail(Box::new(e)))?;
        let target = Target::start(cfg).map_err(|e| fail(Box::new(e)))?;
        let addr = target.local_addrs()[0];
        Ok(EmbeddedTarget {
            target: Mutex::new(Some(target)),
            url: format!("soft://{addr}/{EMBEDDED_NQN}"),
        })
    }

    /// Where the initiator connects.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for EmbeddedTarget {
    fn drop(&mut self) {
        let target = self
            .target
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(t) = target {
            t.shutdown();
        }
    }
}
