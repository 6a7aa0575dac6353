//! `[target]`: the workers (how many, on which CPUs, how they wait for work), timeouts, the
//! discovery NQN, statistics, the state directory and the TLS record layer.

use std::path::PathBuf;

use serde::Deserialize;

use super::{CpuList, TlsRecordLayer};

/// Upper bound of `target.worker_threads`.
pub const MAX_WORKER_THREADS: u32 = 256;

/// `[target]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TargetConfig {
    /// Worker threads; each owns its connections, its io_uring and its completion queues.
    pub worker_threads: u32,
    /// The CPUs the workers run on, in Linux's list form (`"2-5,8"`): worker `i` is pinned to
    /// the list's `i`-th CPU (wrapping around when there are more workers than CPUs).
    /// `None`: the scheduler places them.
    pub worker_cpus: Option<CpuList>,
    /// How workers wait for work.
    pub poll_mode: PollMode,
    /// In `adaptive` poll mode: how long (µs) a worker keeps polling after the last pass that
    /// found work before it sleeps. Long enough for a host's next command at queue depth 1
    /// (a loopback or LAN round trip); each idle spell costs at most this much CPU.
    pub poll_spin_us: u32,
    /// Keep Alive granularity advertised in Identify Controller (KAS, in 100 ms units on the
    /// wire); the keep-alive timer is checked this often.
    pub keep_alive_granularity_ms: u32,
    /// Keep-alive timeout used when a host's admin Connect asks for none (KATO 0);
    /// 0 keeps keep-alive off for such hosts (then a dead host is only noticed through RDMA).
    pub default_keep_alive_timeout_ms: u32,
    /// A queue that has not completed its Fabrics Connect this long after it was accepted
    /// is torn down (it has no controller, so no keep-alive covers it); 0 never.
    pub connect_timeout_ms: u32,
    /// A queue whose send queue makes no progress this long (a response SEND, RDMA READ or
    /// WRITE the host never takes: it stopped posting receives, or stopped altogether) is torn
    /// down, so it holds no memory or worker time forever; 0 never. The Linux host's own I/O
    /// timeout is 30 s.
    pub response_timeout_ms: u32,
    /// The target's unique discovery NQN, accepted besides the well-known
    /// `nqn.2014-08.org.nvmexpress.discovery` and reported in the discovery controller's
    /// Identify; `None`: the well-known NQN only.
    pub discovery_nqn: Option<String>,
    /// Count every I/O command (ops, bytes, a latency histogram, errors by status) for
    /// `rdmablk-ctl stats` and the Prometheus endpoint. `false` skips the counting (the
    /// clock is read per worker pass either way); those views then show no I/O (connections, arena and
    /// keep-alive figures stay).
    pub io_statistics: bool,
    /// A directory for state that must outlive the process: reservations a host asked to
    /// persist through power loss (one file per namespace, written and synced before the
    /// command completes). Absent: reservations are not persisted and hosts are told so
    /// (Identify Namespace RESCAP bit 0 clear).
    pub state_dir: Option<PathBuf>,
    /// Which record layer carries an NVMe/TCP TLS connection's records after its handshake:
    /// the kernel's (kTLS) where it has one, else OpenSSL's in user space (`auto`); the
    /// kernel's or none (`kernel`: a connection the kernel cannot take is closed); OpenSSL's
    /// (`user`).
    pub tls_record_layer: TlsRecordLayer,
    /// NVMe/TCP: H2CData of at least this many bytes whose data has not all arrived with its
    /// header is read from the socket straight into the command's data slot ("placed"),
    /// instead of into the connection's receive buffer and then copied; 0 never places.
    /// Default 16 KiB (measured: `docs/benchmarks.md`). Not under TLS in user space (OpenSSL
    /// decrypts into the receive buffer).
    pub tcp_place_from: u32,
    /// NVMe/TCP: how much a worker reads from one host's connections in one pass of its loop
    /// before it turns to other hosts' (bytes; 0 = no limit; a visit that began reads on to
    /// the end of a placed PDU or of one receive-buffer fill): a host streaming into many
    /// deep queues cannot keep another host's commands waiting for the pass to end. Default
    /// 128 KiB (`tools/bench/fairness`, `docs/benchmarks.md`). Not under TLS in user space.
    pub tcp_pass_bytes_per_host: u32,
}

impl Default for TargetConfig {
    fn default() -> Self {
        TargetConfig {
            worker_threads: 1,
            worker_cpus: None,
            poll_mode: PollMode::Adaptive,
            poll_spin_us: 50,
            keep_alive_granularity_ms: 1000,
            default_keep_alive_timeout_ms: 0,
            connect_timeout_ms: 10_000,
            response_timeout_ms: 30_000,
            discovery_nqn: None,
            io_statistics: true,
            state_dir: None,
            tls_record_layer: TlsRecordLayer::Auto,
            tcp_place_from: 16 * 1024,
            tcp_pass_bytes_per_host: 128 * 1024,
        }
    }
}

/// How a worker waits for completions.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PollMode {
    /// Spin on the completion queues: lowest latency, one core per worker at 100 %.
    Busy,
    /// Arm the completion queues and sleep until an event: for shared machines.
    Interrupt,
    /// Keep polling for `poll_spin_us` after the last work, then sleep as `Interrupt`: the
    /// next command of a busy host is found without a wake-up, an idle worker sleeps (the
    /// default).
    Adaptive,
}
