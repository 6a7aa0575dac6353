//! `[[subsystem.namespace]]`: a namespace's ID, block size, UUID, ANA group, visibility, QoS
//! limits and shared reservations (its storage is [`BackendConfig`]).

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

use super::{BackendConfig, ByteSize};

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
