//! The target's configuration: a TOML file, parsed strictly and validated at load.
//!
//! Every table refuses unknown keys (a misspelt knob is an error, never silently ignored), and
//! [`Config::validate`] refuses impossible limits with a message naming the key and the fix.
//! `config/rdmablk-target.toml` documents every knob; `config/quickstart.toml` is the smallest
//! useful file.
//!
//! Sizes ([`ByteSize`]) are an integer number of bytes or a string with a binary suffix
//! (`"256MiB"`). Times carry their unit in the key name (`_ms`, `_us`).

mod auth;
mod bytes;
mod cpu_list;
mod nqn;
mod tls;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use rdmablk::fabric::ProviderKind;

use crate::nvmf::transport::{TransportKind, Variant, TRANSPORTS};

pub use auth::{warn_if_readable_by_others, HostAuth, HostConfig, HostEntry, SecretString};
pub use bytes::ByteSize;
pub use cpu_list::{allowed_cpus, pin_current_thread, CpuList};
pub use nqn::{
    nqn_form_warning, parse_uuid, validate_nqn, validate_uuid, DISCOVERY_NQN, MAX_NQN_BYTES,
};
pub use tls::{add_tls_psk, generate_psk, TlsMode, TlsRecordLayer};
pub use validate::{ana_state_names, parse_ana_group, Problem};

use crate::arena::{ParcelLayout, PAGE_BYTES};

/// The NVMe-oF well-known port (IANA): the default port of every listener and referral,
/// whatever its transport.
pub const DEFAULT_PORT: u16 = 4420;
/// Upper bound of `limits.max_queue_depth`.
pub const MAX_QUEUE_DEPTH: u32 = 1024;
/// Lower bound of `limits.max_queue_depth`: the NVMe-oF minimum admin queue size (hosts open
/// the admin queue with 32 entries, and it is carved from the arena like any queue).
pub const MIN_QUEUE_DEPTH: u32 = 32;
/// Upper bound of `limits.max_io_size`: the largest power of two a keyed SGL's 24-bit length
/// can carry.
pub const MAX_IO_SIZE: u32 = 8 << 20;
/// Upper bound of `limits.in_capsule_data_size` (the Linux target's limit as well).
pub const MAX_IN_CAPSULE_DATA_SIZE: u32 = 16 << 10;
/// Upper bound of `target.worker_threads`.
pub const MAX_WORKER_THREADS: u32 = 256;
/// Namespaces a subsystem may hold.
pub const MAX_NAMESPACES_PER_SUBSYSTEM: usize = 1024;

/// An error loading the configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax error, wrong type, unknown key, missing key.
    #[error("{}{}{message}", origin(path), line.map(|l| format!("line {l}: ")).unwrap_or_default())]
    Parse {
        path: Option<PathBuf>,
        /// 1-based line of the offending text, when toml knows it.
        line: Option<usize>,
        message: String,
    },
    /// The file parsed but describes an impossible target; every problem found is listed.
    #[error("{}invalid configuration:\n{}", origin(path), list(problems))]
    Invalid {
        path: Option<PathBuf>,
        problems: Vec<Problem>,
    },
}

fn origin(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!("{}: ", p.display()))
        .unwrap_or_default()
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("  - {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl ConfigError {
    /// The problems of an [`ConfigError::Invalid`] (empty for other errors).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid { problems, .. } => problems,
            _ => &[],
        }
    }
}

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[[listener]]`: where hosts connect. At least one.
    #[serde(rename = "listener", default)]
    pub listeners: Vec<ListenerConfig>,
    /// `[target]`: threads and polling.
    #[serde(default)]
    pub target: TargetConfig,
    /// `[arena]`: the pinned buffer all connections' parcels are carved from. Optional: without
    /// `bytes` it is sized from the limits ([`ArenaConfig::bytes_for`]).
    #[serde(default)]
    pub arena: ArenaConfig,
    /// `[limits]`: per-connection and per-controller limits advertised to hosts.
    #[serde(default)]
    pub limits: Limits,
    /// `[[subsystem]]`: what hosts can connect to. At least one.
    #[serde(rename = "subsystem", default)]
    pub subsystems: Vec<SubsystemConfig>,
    /// `[[referral]]`: other discovery services the discovery log points hosts to.
    #[serde(rename = "referral", default)]
    pub referrals: Vec<ReferralConfig>,
    /// `[control]`: the control socket.
    #[serde(default)]
    pub control: ControlConfig,
    /// `[metrics]`: the Prometheus endpoint (none without the table).
    #[serde(default)]
    pub metrics: Option<MetricsConfig>,
}

/// `[metrics]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Where `GET /metrics` is served, e.g. "127.0.0.1:9464".
    pub address: std::net::SocketAddr,
}

/// `[control]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// Unix socket `rdmablk-ctl` talks to (mode 0600); empty disables it. Used by the
    /// `rdmablk-target` daemon (an embedded target starts none).
    pub socket: PathBuf,
}

/// Where `rdmablk-target` and `rdmablk-ctl` meet by default.
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/rdmablk/ctl.sock";

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            socket: PathBuf::from(DEFAULT_CONTROL_SOCKET),
        }
    }
}

/// `[[referral]]`: a discovery service elsewhere (another target), listed in every host's
/// discovery log as a referral entry.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReferralConfig {
    /// Its IP address.
    pub address: IpAddr,
    /// Its port.
    #[serde(default = "default_port")]
    pub port: u16,
    /// Its transport: `rdma` (default) or `tcp`.
    #[serde(default)]
    pub transport: Transport,
}

/// The transport of a listener or referral that names none.
pub const DEFAULT_TRANSPORT: &str = "rdma";

/// An NVMe-oF transport, as `[[listener]] transport` and `[[referral]] transport` name it: a
/// line of the target's transport table ([`TRANSPORTS`]), whose [`TransportKind`] checks
/// the listener keys that are the transport's own. Two are equal when their names are.
#[derive(Clone, Copy)]
pub struct Transport(&'static dyn TransportKind);

impl Transport {
    /// The transport of table line `kind`.
    pub const fn of(kind: &'static dyn TransportKind) -> Transport {
        Transport(kind)
    }

    /// The transport of the table named `name`, if there is one.
    pub fn named(name: &str) -> Option<Transport> {
        TRANSPORTS
            .iter()
            .find(|k| k.name() == name)
            .map(|&k| Transport(k))
    }

    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        self.0.name()
    }

    /// Its line in the transport table.
    pub fn kind(self) -> &'static dyn TransportKind {
        self.0
    }
}

impl Default for Transport {
    fn default() -> Transport {
        Transport::named(DEFAULT_TRANSPORT).expect("the default transport is in the table")
    }
}

impl PartialEq for Transport {
    fn eq(&self, other: &Transport) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Transport {}

impl std::hash::Hash for Transport {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Transport {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Transport, D::Error> {
        let name = String::deserialize(d)?;
        Transport::named(&name).ok_or_else(|| {
            let known: Vec<String> = TRANSPORTS
                .iter()
                .map(|k| format!("`{}`", k.name()))
                .collect();
            serde::de::Error::custom(format!(
                "unknown variant `{name}`, expected one of {}",
                known.join(", ")
            ))
        })
    }
}

/// `[[listener]]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// The NVMe-oF transport hosts use: `rdma` (the default), `tcp` (NVMe/TCP) or `loop`
    /// (hosts in the target's own process: `rdmablk-perf --embedded`, tests).
    #[serde(default)]
    pub transport: Transport,
    /// Under `rdma` (and required there): `verbs` (an RNIC or rxe/siw) or `soft` (the
    /// userspace provider over TCP). Not set under `tcp`.
    #[serde(default)]
    pub provider: Option<Provider>,
    /// Local IP address to listen on (`0.0.0.0` listens on all of the provider's devices).
    pub address: IpAddr,
    /// TCP/RDMA CM port.
    #[serde(default = "default_port")]
    pub port: u16,
    /// ANA state of each ANA group through this listener (`ana = { 1 = "optimized",
    /// 2 = "inaccessible" }`); a group not listed is optimized. Changes apply on reload.
    #[serde(default)]
    pub ana: BTreeMap<String, String>,
    /// Under `tcp`: TLS 1.3 with a PSK, `none` (default), `allowed` or `required`
    /// (`config/tls.rs`). Changes apply to new connections on reload.
    #[serde(default)]
    pub tls: TlsMode,
}

fn default_port() -> u16 {
    DEFAULT_PORT
}

/// A fabric provider name as written in the file.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Verbs,
    Soft,
}

impl ListenerConfig {
    /// What tells two listeners apart (and a reload's kept listener from a new one).
    pub fn key(&self) -> (Transport, Option<Provider>, IpAddr, u16) {
        (self.transport, self.provider, self.address, self.port)
    }

    /// The RDMA provider of an `rdma` listener (validation requires one; `verbs` if unset).
    pub fn rdma_provider(&self) -> Provider {
        self.provider.unwrap_or(Provider::Verbs)
    }

    /// Its transport's variant (the RDMA provider), as its transport says.
    pub fn variant(&self) -> Variant {
        self.transport.kind().variant(self)
    }

    /// How the listener names itself in logs and errors: `soft 127.0.0.1:4420`,
    /// `tcp [::1]:4420`.
    pub fn describe(&self) -> String {
        let what = match self.variant().name {
            "" => self.transport.as_str(),
            variant => variant,
        };
        format!(
            "{what} {}",
            std::net::SocketAddr::new(self.address, self.port)
        )
    }
}

impl Provider {
    /// The name as written in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Verbs => "verbs",
            Provider::Soft => "soft",
        }
    }
}

impl From<Provider> for ProviderKind {
    fn from(p: Provider) -> ProviderKind {
        match p {
            Provider::Verbs => ProviderKind::Verbs,
            Provider::Soft => ProviderKind::Soft,
        }
    }
}

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

/// `[arena]`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ArenaConfig {
    /// Total bytes, pinned at start: the workers' data pools (`data_bytes`) and the RDMA
    /// queues' parcels (receive and response slots). Absent (or 0): sized from the limits
    /// when the file is read ([`ArenaConfig::bytes_for`]).
    #[serde(default)]
    pub bytes: ByteSize,
    /// Bytes of the arena the workers' data pools take, split evenly between the workers:
    /// what bounds the data in flight (a command takes a buffer of its length when it
    /// arrives and gives it back when its response has left; one that finds none waits).
    /// Absent (or 0): [`ArenaConfig::DEFAULT_DATA_BYTES`] (or more, for large `max_io_size`)
    /// when `bytes` is absent too, half of `bytes` otherwise.
    #[serde(default)]
    pub data_bytes: ByteSize,
    /// Back the arena with 2 MiB huge pages (reserve them first in /proc/sys/vm/nr_hugepages).
    #[serde(default)]
    pub hugepages: bool,
    /// `mlock` the arena at start (registration pins it anyway; locking makes a too-low
    /// RLIMIT_MEMLOCK fail at start with the limit named, not at the first connection).
    #[serde(default = "yes")]
    pub lock: bool,
    /// `bytes` was not given and [`ArenaConfig::bytes_for`] chose it (said in the log).
    #[serde(skip)]
    pub sized_from_limits: bool,
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig {
            bytes: ByteSize(0),
            data_bytes: ByteSize(0),
            hugepages: false,
            lock: true,
            sized_from_limits: false,
        }
    }
}

impl ArenaConfig {
    /// RDMA queues at `limits.max_queue_depth` whose parcels (receive and response slots) a
    /// default arena holds beside its data pools (fewer if `limits.max_connections` is lower).
    /// NVMe/TCP queues take no arena space of their own.
    pub const DEFAULT_CONNECTIONS: u32 = 64;
    /// The data pools of a default arena: data in flight, whatever the number of queues.
    pub const DEFAULT_DATA_BYTES: u64 = 128 << 20;
    /// Buffers of `max_io_size` a worker's pool holds at least, by default.
    const MIN_LARGEST_PER_WORKER: u64 = 8;

    /// The data pools' bytes an absent `data_bytes` means beside an absent `bytes`:
    /// [`Self::DEFAULT_DATA_BYTES`], or [`Self::MIN_LARGEST_PER_WORKER`] of the largest
    /// transfers per worker if that is more.
    pub fn default_data_bytes(limits: &Limits, workers: u32) -> u64 {
        let largest = u64::from(limits.max_io_size).next_multiple_of(PAGE_BYTES as u64);
        Self::DEFAULT_DATA_BYTES
            .max(largest * Self::MIN_LARGEST_PER_WORKER * u64::from(workers.max(1)))
    }

    /// The arena an absent `bytes` means: the data pools (`data_bytes`, or their default)
    /// and [`Self::DEFAULT_CONNECTIONS`] RDMA parcels at the largest queue depth, rounded up
    /// to 2 MiB (a huge page). `None` if the limits are out of range (validation names them).
    pub fn bytes_for(&self, limits: &Limits, workers: u32) -> Option<u64> {
        if !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&limits.max_queue_depth)
            || limits.max_io_size == 0
            || limits.max_io_size > MAX_IO_SIZE
        {
            return None;
        }
        let parcel = limits
            .queue_parcel_layout(limits.max_queue_depth)
            .total_bytes as u64;
        let n = u64::from(limits.max_connections.clamp(1, Self::DEFAULT_CONNECTIONS));
        let data = match self.data_bytes.bytes() {
            0 => Self::default_data_bytes(limits, workers),
            d => d,
        };
        Some((data + parcel * n).next_multiple_of(2 << 20))
    }
}

fn yes() -> bool {
    true
}

/// `[limits]`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest queue (entries) a host may open; also the admin queue's bound. 32..=1024.
    pub max_queue_depth: u32,
    /// Largest data transfer of one command, bytes (MDTS is derived from it). A multiple of
    /// 4096 and of every namespace's block size, at most 8 MiB.
    pub max_io_size: u32,
    /// Bytes of write data a command capsule may carry; 0 disables in-capsule data. A multiple
    /// of 16, at most `max_io_size` and 16 KiB.
    pub in_capsule_data_size: u32,
    /// Queues per controller, the admin queue included (so at least 2).
    pub max_queues_per_controller: u32,
    /// Connections (queues of all controllers) the target accepts at once. The target raises
    /// its soft open-file limit to fit them at start (up to the hard limit).
    pub max_connections: u32,
    /// The push budget: bytes of data slots an RDMA push queue (the rdmablk push-write
    /// extension) gets from the arena. Each of its `depth` slots is this divided by the
    /// depth, rounded down to a page (at least a page, at most `max_io_size`); a write longer
    /// than a slot takes the ordinary path (the target's RDMA READ). 0 declines push writes.
    /// At most 1 GiB.
    pub push_window_bytes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_queue_depth: 128,
            max_io_size: 128 << 10,
            in_capsule_data_size: 4 << 10,
            max_queues_per_controller: 128,
            max_connections: 4096,
            push_window_bytes: DEFAULT_PUSH_WINDOW_BYTES,
        }
    }
}

/// `limits.push_window_bytes`' default: 16 KiB slots at depth 128, 64 KiB at depth 32.
pub const DEFAULT_PUSH_WINDOW_BYTES: u32 = 2 << 20;
/// `limits.push_window_bytes`' bound.
pub const MAX_PUSH_WINDOW_BYTES: u32 = 1 << 30;

impl Limits {
    /// The parcel an RDMA push queue of `queue_depth` entries takes from the arena: receive,
    /// response and data slots of [`Limits::push_slot_bytes`]; None when push writes are
    /// off (`push_window_bytes = 0`).
    pub fn parcel_layout(&self, queue_depth: u32) -> Option<ParcelLayout> {
        let slot = self.push_slot_bytes(queue_depth)?;
        Some(ParcelLayout::new(
            queue_depth,
            self.in_capsule_data_size,
            slot,
        ))
    }

    /// One push slot of a queue of `queue_depth` entries: the push budget divided by the
    /// depth, rounded down to a page, at least a page and at most `max_io_size` (rounded up
    /// to a page, as the parcel's slots are).
    pub fn push_slot_bytes(&self, queue_depth: u32) -> Option<u32> {
        const PAGE: u32 = crate::arena::PAGE_BYTES as u32;
        if self.push_window_bytes == 0 {
            return None;
        }
        let even = self.push_window_bytes / queue_depth.max(1) / PAGE * PAGE;
        Some(even.clamp(PAGE, self.max_io_size.next_multiple_of(PAGE)))
    }

    /// The parcel any other RDMA queue of `queue_depth` entries takes from the arena: receive
    /// and response slots (its data takes buffers from its worker's pool).
    pub fn queue_parcel_layout(&self, queue_depth: u32) -> ParcelLayout {
        ParcelLayout::without_data(queue_depth, self.in_capsule_data_size)
    }
}

/// `[[subsystem]]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubsystemConfig {
    /// The subsystem's NQN (see [`validate_nqn`]).
    pub nqn: String,
    /// Let any host connect. Exclusive with `hosts`.
    #[serde(default)]
    pub allow_any_host: bool,
    /// Hosts allowed to connect (when `allow_any_host` is false): host NQNs, or tables with
    /// DH-HMAC-CHAP keys ([`HostEntry`]).
    #[serde(default)]
    pub hosts: Vec<HostEntry>,
    /// Serial number reported in Identify Controller (ASCII, at most 20 bytes); derived from
    /// the NQN when absent.
    #[serde(default)]
    pub serial: Option<String>,
    /// Lowest controller ID this target hands out for the subsystem. Gateways that export one
    /// subsystem together need disjoint ranges (the host refuses a duplicate).
    #[serde(default = "default_cntlid_min")]
    pub cntlid_min: u16,
    /// Highest controller ID (at most 0xFFEF).
    #[serde(default = "default_cntlid_max")]
    pub cntlid_max: u16,
    /// `[[subsystem.namespace]]`.
    #[serde(rename = "namespace", default)]
    pub namespaces: Vec<NamespaceConfig>,
}

/// Lowest dynamic controller ID (nvmet's default range, 1..=0xFFEF).
pub const CNTLID_MIN: u16 = 1;
/// Highest dynamic controller ID (0xFFF0.. are reserved; 0xFFFF means "dynamic").
pub const CNTLID_MAX: u16 = 0xFFEF;

fn default_cntlid_min() -> u16 {
    CNTLID_MIN
}

fn default_cntlid_max() -> u16 {
    CNTLID_MAX
}

/// `[[subsystem.namespace]]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NamespaceConfig {
    /// Namespace ID, 1..=0xFFFFFFFE, unique within the subsystem.
    pub nsid: u32,
    /// Logical block size: 512 or 4096.
    #[serde(default = "default_block_size")]
    pub block_size: u32,
    /// Refuse writes, write zeroes and deallocate (reported as write protected).
    #[serde(default)]
    pub read_only: bool,
    /// Namespace UUID (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`), reported in the namespace
    /// identification descriptors.
    #[serde(default)]
    pub uuid: Option<String>,
    /// ANA group (1..=128): each listener gives a state per group (`[[listener]] ana`).
    #[serde(default = "default_ana_group")]
    pub ana_group: u32,
    /// Hosts that see the namespace (host NQNs the subsystem admits); absent: every host the
    /// subsystem admits; empty: none. Changes apply live, without reopening the namespace.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
    /// QoS limits (`[subsystem.namespace.qos]`), for every host together; changed live.
    #[serde(default)]
    pub qos: QosConfig,
    /// The same limits for each host on its own (`[subsystem.namespace.host_qos]`): a host
    /// over them waits, the other hosts do not; changed live.
    #[serde(default)]
    pub host_qos: QosConfig,
    /// A directory the gateways serving this namespace's storage share its reservations in
    /// (two targets on one machine serving one file or device): a reservation taken through
    /// one is enforced by every other before the command completes (`docs/reservations.md`).
    /// Absent: the reservations are this target's own.
    #[serde(default)]
    pub shared_reservations: Option<PathBuf>,
    /// Where the blocks live.
    pub backend: BackendConfig,
}

/// `[subsystem.namespace.qos]`: limits shared by every host and worker; absent keys: no
/// limit. Commands over a limit are held, never failed.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct QosConfig {
    /// Commands per second (reads, writes, flushes, write zeroes, deallocates), at least
    /// [`QOS_MIN_IOPS`].
    pub iops: Option<u64>,
    /// Read plus written bytes per second, at least [`QOS_MIN_BANDWIDTH`].
    pub bandwidth: Option<ByteSize>,
    /// Read bytes per second.
    pub read_bandwidth: Option<ByteSize>,
    /// Written bytes per second.
    pub write_bandwidth: Option<ByteSize>,
}

impl fmt::Display for QosConfig {
    /// `iops 1000, bandwidth 100 MiB/s` (the limits set), or `no limits`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(n) = self.iops {
            parts.push(format!("iops {n}"));
        }
        for (name, b) in [
            ("bandwidth", self.bandwidth),
            ("read_bandwidth", self.read_bandwidth),
            ("write_bandwidth", self.write_bandwidth),
        ] {
            if let Some(b) = b {
                parts.push(format!("{name} {b}/s"));
            }
        }
        if parts.is_empty() {
            f.write_str("no limits")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// The lowest IOPS limit: below it a host's queue full of held commands would outlast its
/// I/O timeout (30 s on Linux) and the host would reset the controller.
pub const QOS_MIN_IOPS: u64 = 100;
/// The lowest bandwidth limit, bytes per second (SPDK's minimum too).
pub const QOS_MIN_BANDWIDTH: u64 = 1 << 20;

fn default_ana_group() -> u32 {
    1
}

/// ANA groups a target supports (nvmet's NVMET_MAX_ANAGRPS): IDs 1..=ANA_GROUP_MAX.
pub const ANA_GROUP_MAX: u32 = 128;

fn default_block_size() -> u32 {
    4096
}

/// `[subsystem.namespace.backend]`: a table with `kind` and that kind's keys.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum BackendConfig {
    /// A regular file, through io_uring (O_DIRECT when the filesystem allows it).
    File(FileBackendConfig),
    /// A block device under /dev, through io_uring with O_DIRECT.
    Block(BlockBackendConfig),
    /// An NVMe namespace's generic character device (`/dev/ngXnY`): NVMe commands passed
    /// through io_uring (`IORING_OP_URING_CMD`), polled where the drive has poll queues.
    Nvme(NvmeBackendConfig),
    /// No storage: writes are discarded, reads complete without touching the buffer.
    Null(SizedBackendConfig),
    /// Memory (not persistent).
    Ram(SizedBackendConfig),
    /// Wraps another backend and injects faults and latency.
    Error(Box<ErrorBackendConfig>),
    /// A Ceph RBD image, through librbd (`docs/rbd.md`; cargo feature `rbd`).
    Rbd(RbdBackendConfig),
}

impl BackendConfig {
    /// The kind's name as written in the file.
    pub fn kind(&self) -> &'static str {
        match self {
            BackendConfig::File(_) => "file",
            BackendConfig::Block(_) => "block",
            BackendConfig::Nvme(_) => "nvme",
            BackendConfig::Null(_) => "null",
            BackendConfig::Ram(_) => "ram",
            BackendConfig::Error(_) => "error",
            BackendConfig::Rbd(_) => "rbd",
        }
    }
}

/// `kind = "file"`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileBackendConfig {
    pub path: PathBuf,
    /// Create the file with this size when it does not exist (never resizes an existing file).
    #[serde(default)]
    pub create_size: Option<ByteSize>,
    /// Use O_DIRECT (falls back to buffered I/O with a warning where the filesystem refuses
    /// it). Buffered I/O still honours flushes (fdatasync) and FUA (RWF_DSYNC).
    #[serde(default = "yes")]
    pub direct: bool,
}

/// `kind = "block"`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BlockBackendConfig {
    /// A block device, `/dev/...`.
    pub path: PathBuf,
    /// Reads and writes on a polled ring (`IORING_SETUP_IOPOLL`), the worker polling for
    /// their completions instead of waiting for interrupts; the device's queue must poll
    /// (`queue/io_poll`: NVMe with `nvme.poll_queues`), checked at start.
    #[serde(default)]
    pub poll: bool,
}

/// `kind = "nvme"`: the namespace of a local NVMe drive, its commands passed through.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NvmeBackendConfig {
    /// The namespace's generic character device, `/dev/ngXnY` (not the block device
    /// `/dev/nvmeXnY`: that is `kind = "block"`).
    pub path: PathBuf,
    /// Completions: `"auto"` (polled where the drive has poll queues, `nvme.poll_queues`;
    /// interrupts otherwise, logged), `"poll"` (refused at start without poll queues) or
    /// `"interrupt"`.
    #[serde(default)]
    pub completions: NvmeCompletions,
}

/// How an nvme backend learns that its commands completed.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NvmeCompletions {
    #[default]
    Auto,
    Poll,
    Interrupt,
}

/// `kind = "rbd"`: an image in a Ceph cluster; its size is the namespace's capacity.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RbdBackendConfig {
    /// The RADOS pool holding the image.
    pub pool: String,
    /// The image's name.
    pub image: String,
    /// The RADOS namespace inside the pool (`rbd --namespace`); none by default.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The cluster's configuration file (monitors, and usually the keyring's location).
    #[serde(default = "default_ceph_conf")]
    pub ceph_conf: PathBuf,
    /// The cephx user, without `client.` (`admin` is `client.admin`).
    #[serde(default = "default_ceph_user")]
    pub user: String,
    /// The keyring holding that user's key, if `ceph_conf` does not say where it is.
    #[serde(default)]
    pub keyring: Option<PathBuf>,
    /// How long connecting to the monitors may take at start or reload (librados'
    /// `client_mount_timeout` and `rados_mon_op_timeout`), seconds.
    #[serde(default = "default_rbd_connect_timeout_s")]
    pub connect_timeout_s: u32,
    /// How long one I/O may wait for the cluster before it fails with a path error, so that
    /// hosts retry or move to another path (librados' `rados_osd_op_timeout`), seconds; 0
    /// waits for ever.
    #[serde(default = "default_rbd_op_timeout_s")]
    pub op_timeout_s: u32,
}

fn default_ceph_conf() -> PathBuf {
    PathBuf::from("/etc/ceph/ceph.conf")
}

fn default_ceph_user() -> String {
    "admin".to_string()
}

fn default_rbd_connect_timeout_s() -> u32 {
    10
}

fn default_rbd_op_timeout_s() -> u32 {
    30
}

/// `kind = "null"` and `kind = "ram"`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SizedBackendConfig {
    /// Capacity; a multiple of the block size.
    pub size: ByteSize,
}

/// `kind = "error"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ErrorBackendConfig {
    /// The backend whose I/O is passed through when no fault fires.
    pub inner: BackendConfig,
    /// Seed of the deterministic fault generator (same seed, same faults).
    #[serde(default)]
    pub seed: u64,
    /// Latency added to every completion, microseconds.
    #[serde(default)]
    pub latency_us: u64,
    /// Faults of reads (reported as unrecovered read errors).
    #[serde(default)]
    pub fail_reads: FaultConfig,
    /// Faults of writes, write zeroes and deallocate (reported as write faults).
    #[serde(default)]
    pub fail_writes: FaultConfig,
    /// Faults of flushes (write faults; the namespace then refuses writes until reopened).
    #[serde(default)]
    pub fail_flushes: FaultConfig,
}

/// When an operation kind fails. Both triggers may be set.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// Probability (0.0..=1.0) that one operation fails.
    #[serde(default)]
    pub rate: f64,
    /// Fail the Nth operation of this kind (1-based, counted over the namespace).
    #[serde(default)]
    pub nth: Option<u64>,
    /// With `nth`: also fail every later operation of this kind (a device that died).
    #[serde(default)]
    pub sticky: bool,
}

impl FaultConfig {
    /// Whether this can ever fire.
    pub fn is_active(&self) -> bool {
        self.rate > 0.0 || self.nth.is_some()
    }
}

impl Config {
    /// Reads, parses and validates `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let cfg = Config::parse(&text, Some(path))?;
        cfg.warn_secret_permissions(path);
        cfg.warn_nonstandard_nqns();
        Ok(cfg)
    }

    /// Warns about NQNs outside the specification's two forms (accepted, as nvmet does).
    fn warn_nonstandard_nqns(&self) {
        let subsystems = self.subsystems.iter().map(|s| s.nqn.as_str());
        let hosts = self
            .subsystems
            .iter()
            .flat_map(|s| &s.hosts)
            .map(HostEntry::nqn);
        let discovery = self.target.discovery_nqn.as_deref();
        for nqn in subsystems.chain(hosts).chain(discovery) {
            if let Some(why) = nqn_form_warning(nqn) {
                tracing::warn!(
                    "NQN outside the NVMe naming forms (accepted, as Linux does): {why}"
                );
            }
        }
    }

    /// Warns about the config file and key files that others can read while they hold
    /// DH-HMAC-CHAP secrets.
    fn warn_secret_permissions(&self, path: &Path) {
        let hosts = self.subsystems.iter().flat_map(|s| &s.hosts);
        if hosts.clone().any(HostEntry::has_inline_secret) {
            warn_if_readable_by_others(path, "the config file");
        }
        for f in hosts.flat_map(HostEntry::key_files) {
            warn_if_readable_by_others(f, "a key file");
        }
    }

    /// Parses and validates TOML text (errors carry no file name).
    #[allow(clippy::should_implement_trait)]
    pub fn from_str(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, None)
    }

    fn parse(text: &str, path: Option<&Path>) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| {
            let at = e.span().map(|s| s.start.min(text.len()));
            ConfigError::Parse {
                path: path.map(Path::to_owned),
                line: at.map(|a| text[..a].matches('\n').count() + 1),
                message: at.map_or_else(
                    || e.message().to_owned(),
                    |a| in_context(text, a, e.message()),
                ),
            }
        })?;
        let mut cfg = cfg;
        if cfg.arena.bytes.bytes() == 0 {
            if let Some(bytes) = cfg.arena.bytes_for(&cfg.limits, cfg.target.worker_threads) {
                cfg.arena.bytes = ByteSize(bytes);
                cfg.arena.sized_from_limits = true;
            }
        }
        let problems = cfg.problems();
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError::Invalid {
                path: path.map(Path::to_owned),
                problems,
            })
        }
    }

    /// Checks every limit and cross-reference; lists all problems found. (Loading already
    /// validates; call this after changing a `Config` in code.)
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                path: None,
                problems,
            })
        }
    }

    /// The problems [`Config::validate`] reports (empty when the configuration is valid).
    pub fn problems(&self) -> Vec<Problem> {
        validate::check(self)
    }

    /// Re-checks the limits against the RDMA device a listener opened, at start.
    ///
    /// `send_wrs_per_request` is how many send work requests the protocol engine may post per
    /// command (e.g. MW bind + RDMA WRITE + response SEND = 3).
    pub fn check_device(
        &self,
        attr: &rdmablk::fabric::DeviceAttr,
        send_wrs_per_request: u32,
    ) -> Result<(), ConfigError> {
        let problems = validate::check_device(self, attr, send_wrs_per_request);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid {
                path: None,
                problems,
            })
        }
    }

    /// The parcel of an RDMA queue (no push) at the largest queue depth hosts may ask for.
    pub fn max_parcel_layout(&self) -> ParcelLayout {
        self.limits.queue_parcel_layout(self.limits.max_queue_depth)
    }

    /// Bytes of the arena the workers' data pools take together (`arena.data_bytes`, or
    /// what its absence means).
    pub fn data_pool_bytes(&self) -> u64 {
        match self.arena.data_bytes.bytes() {
            0 if self.arena.sized_from_limits => {
                ArenaConfig::default_data_bytes(&self.limits, self.target.worker_threads)
            }
            0 => self.arena.bytes.bytes() / 2,
            d => d,
        }
    }

    /// Bytes of one worker's data pool (whole pages).
    pub fn data_pool_bytes_per_worker(&self) -> usize {
        let per = self.data_pool_bytes() / u64::from(self.target.worker_threads.max(1));
        (per as usize) / PAGE_BYTES * PAGE_BYTES
    }
}

impl std::str::FromStr for Config {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, None)
    }
}

/// The key of `key = ` at the end of `before` (the text before a value on its line).
fn key_before(before: &str) -> Option<&str> {
    let key_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    before
        .strip_suffix('=')
        .and_then(|b| b.trim_end().rsplit(|c| !key_char(c)).next())
        .filter(|k| !k.is_empty())
}

/// The value a serde "invalid type" / "invalid value" message quotes, as it would be written
/// in TOML: `string "yes"` gives `"yes"`, ``integer `1` `` gives `1`.
fn unexpected_value(message: &str) -> Option<String> {
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))?;
    if let Some(s) = rest.strip_prefix("string \"") {
        return Some(format!("\"{}\"", &s[..s.find('"')?]));
    }
    let s = &rest[rest.find('`')? + 1..];
    Some(s[..s.find('`')?].to_owned())
}

/// A TOML error's message with where it is: the key the offending value was given to (when
/// the text before it on its line says `key =`), and that line, so that a wrong type names
/// its key even inside an inline table (`backend = { kind = "block", poll = "yes" }`, whose
/// error serde reports for the whole table).
fn in_context(text: &str, at: usize, message: &str) -> String {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let line = text[start..end].trim();
    let before = text[start..at].trim_end();
    let key = key_before(before);
    // An inline table (serde reports a wrong type inside a tagged one for the whole table):
    // the key inside it whose value the message quotes, when exactly one has it.
    let inner = (text[at..end].trim_start().starts_with('{'))
        .then(|| unexpected_value(message))
        .flatten()
        .and_then(|v| {
            let table = &text[at..end];
            let mut keys = table
                .match_indices(v.as_str())
                .filter_map(|(i, _)| key_before(table[..i].trim_end()));
            let first = keys.next()?;
            keys.all(|k| k == first).then_some(first)
        });
    let key = match (key, inner) {
        (Some(k), Some(i)) => Some(format!("{k}.{i}")),
        (k, i) => k.or(i).map(str::to_owned),
    };
    let shown: String = if line.chars().count() > 100 {
        line.chars().take(97).chain("...".chars()).collect()
    } else {
        line.to_owned()
    };
    match key.as_deref() {
        Some(k) if shown.is_empty() => format!("{k}: {message}"),
        Some(k) => format!("{k}: {message} (in `{shown}`)"),
        None if shown.is_empty() => message.to_owned(),
        None => format!("{message} (in `{shown}`)"),
    }
}

#[cfg(test)]
mod tests;
