//! `--embedded[=soft|tcp|loop]`: an rdmablk-target started in this process at 127.0.0.1, with
//! one RAM namespace, shared by every job of the run and stopped when the last job's engine
//! is gone. Over `soft` (the default) the whole NVMe/RDMA path runs (CM, capsules, RDMA
//! READ/WRITE emulation) on loopback TCP; over `tcp` NVMe/TCP on loopback; over `loop` no
//! network at all: what remains is the NVMe-oF code of the initiator and the target.
//!
//! [`target_cpu_ns`] is the CPU time the target's worker threads have used, for the report's
//! target CPU per I/O.

use std::sync::{Arc, Mutex, Weak};

use rdmablk_target::Target;

use super::{EngineError, OpenOptions};
use crate::perf::args::{EmbeddedNs, EmbeddedPoll, EmbeddedTransport};

/// The name prefix of the target's worker threads.
const WORKER_THREAD: &str = "rdmablk-w";

/// What the embedded target (and the loop transport) had used at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// CPU time of the target's worker threads (ns).
    pub target_cpu_ns: u64,
    /// How many worker threads there are.
    pub workers: usize,
    /// The loop transport's spin time so far: (initiators, target), ns.
    pub loop_spin_ns: (u64, u64),
}

impl Sample {
    pub fn now() -> Sample {
        let (target_cpu_ns, workers) = target_cpu_ns();
        Sample {
            target_cpu_ns,
            workers,
            loop_spin_ns: rdmablk::nvme::transport::loopback::spin_ns(),
        }
    }
}

/// CPU time (user + system, ns) used so far by this process's target worker threads, and how
/// many there are.
fn target_cpu_ns() -> (u64, usize) {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return (0, 0);
    };
    let mut total = (0u64, 0usize);
    for e in dir.flatten() {
        let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) else {
            continue;
        };
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if !comm.starts_with(WORKER_THREAD) {
            continue;
        }
        // The kernel's CPU clock of another thread of ours: MAKE_THREAD_CPUCLOCK(tid,
        // CPUCLOCK_SCHED), as glibc's pthread_getcpuclockid builds it.
        let clock = (!tid << 3) | 6;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a live timespec the call writes.
        if unsafe { libc::clock_gettime(clock, &mut ts) } == 0 {
            total.0 += ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            total.1 += 1;
        }
    }
    total
}

/// The subsystem the embedded target serves.
pub const EMBEDDED_NQN: &str = "nqn.2026-11.io.rdmablk:embedded";
/// Namespace size when the run does not ask for more.
const DEFAULT_NS_BYTES: u64 = 256 << 20;
/// Arena per job: half of it goes to the data pools (a given `arena.bytes` is split so), the
/// rest holds the job's RDMA parcels (the admin queue's ~132 KiB, an I/O queue's 524 KiB, or
/// ~2.6 MiB with push slots at the default push budget) with room to spare.
const ARENA_BYTES_PER_JOB: u64 = 24 << 20;

static RUNNING: Mutex<Weak<EmbeddedTarget>> = Mutex::new(Weak::new());

/// The running embedded target.
pub struct EmbeddedTarget {
    target: Mutex<Option<Target>>,
    url: String,
}

impl EmbeddedTarget {
    /// The running embedded target, started on first use.
    pub fn get(
        transport: EmbeddedTransport,
        ns: EmbeddedNs,
        poll: EmbeddedPoll,
        opts: &OpenOptions,
    ) -> Result<Arc<EmbeddedTarget>, EngineError> {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(t) = running.upgrade() {
            return Ok(t);
        }
        let t = Arc::new(Self::start(transport, ns, poll, opts)?);
        *running = Arc::downgrade(&t);
        Ok(t)
    }

    fn start(
        transport: EmbeddedTransport,
        ns: EmbeddedNs,
        poll: EmbeddedPoll,
        opts: &OpenOptions,
    ) -> Result<EmbeddedTarget, EngineError> {
        let fail = |err: Box<dyn std::error::Error + Send + Sync>| EngineError::Connect {
            target: "--embedded".into(),
            err,
        };
        let ns_bytes = opts
            .min_file_len
            .unwrap_or(0)
            .max(DEFAULT_NS_BYTES)
            .next_multiple_of(1 << 20);
        let arena_bytes = (16 << 20) + u64::from(opts.numjobs.max(1)) * ARENA_BYTES_PER_JOB;
        let listener = match transport {
            EmbeddedTransport::Soft => "provider = \"soft\"",
            EmbeddedTransport::Tcp => "transport = \"tcp\"",
            EmbeddedTransport::Loop => "transport = \"loop\"",
        };
        let kind = match ns {
            EmbeddedNs::Ram => "ram",
            EmbeddedNs::Null => "null",
        };
        let poll_mode = poll.as_config();
        let toml = |port: u16| {
            format!(
                r#"
[[listener]]
{listener}
address = "127.0.0.1"
port = {port}

[target]
worker_threads = 1
poll_mode = "{poll_mode}"

[arena]
bytes = {arena_bytes}
lock = false

[[subsystem]]
nqn = "{EMBEDDED_NQN}"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = {{ kind = "{kind}", size = {ns_bytes} }}
"#
            )
        };
        // A free port on loopback (the target's config wants a fixed one); another if a
        // process binds it before the target does.
        let pick = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_or(0, |a| a.port())
        };
        let target = Target::start_on_picked_port(toml, pick).map_err(|e| fail(Box::new(e)))?;
        let addr = target.local_addrs()[0];
        Ok(EmbeddedTarget {
            target: Mutex::new(Some(target)),
            url: format!("{}://{addr}/{EMBEDDED_NQN}", transport.scheme()),
        })
    }

    /// The running embedded target, if any (keeps it up while held).
    pub fn running() -> Option<Arc<EmbeddedTarget>> {
        RUNNING.lock().unwrap_or_else(|e| e.into_inner()).upgrade()
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
