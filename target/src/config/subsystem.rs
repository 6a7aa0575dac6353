//! `[[subsystem]]`: what hosts connect to: its NQN, the hosts it admits, its serial number,
//! controller ID range and namespaces.

use serde::Deserialize;

use super::{HostEntry, NamespaceConfig};

/// Namespaces a subsystem may hold.
pub const MAX_NAMESPACES_PER_SUBSYSTEM: usize = 1024;

/// `[[subsystem]]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SubsystemConfig {
    /// The subsystem's NQN (see [`validate_nqn`](super::validate_nqn)).
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
