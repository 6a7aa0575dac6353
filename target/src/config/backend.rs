//! `[subsystem.namespace.backend]`: where a namespace's blocks live, one table per backend kind
//! (file, block, nvme, null, ram, error, rbd), with the error backend's faults.

use std::path::PathBuf;

use serde::Deserialize;

use super::ByteSize;

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
    #[serde(default = "super::yes")]
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
