//! The target's configuration: a TOML file, parsed strictly and validated at load.
//!
//! Every table refuses unknown keys (a misspelt knob is an error, never silently ignored), and
//! [`Config::validate`] refuses impossible limits with a message naming the key and the fix.
//! `config/rdmablk-target.toml` documents every knob; `config/quickstart.toml` is the smallest
//! useful file.
//!
//! Sizes ([`ByteSize`]) are an integer number of bytes or a string with a binary suffix
//! (`"256MiB"`). Times carry their unit in the key name (`_ms`, `_us`).
//!
//! Each table's types live in a file named after it (`listener.rs` with `[[referral]]`,
//! `target.rs`, `arena.rs`, `limits.rs`, `subsystem.rs`, `namespace.rs`, `backend.rs`, `auth.rs`
//! for hosts, `tls.rs`); this file holds the whole ([`Config`], `[control]`, `[metrics]`) and its
//! loading, `validate.rs` the checks and `error.rs` how a load fails.

mod arena;
mod auth;
mod backend;
mod bytes;
mod cpu_list;
mod error;
mod limits;
mod listener;
mod namespace;
mod nqn;
mod subsystem;
mod target;
mod tls;
mod validate;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use arena::ArenaConfig;
pub use auth::{warn_if_readable_by_others, HostAuth, HostConfig, HostEntry, SecretString};
pub use backend::{
    BackendConfig, BlockBackendConfig, ErrorBackendConfig, FaultConfig, FileBackendConfig,
    NvmeBackendConfig, NvmeCompletions, RbdBackendConfig, SizedBackendConfig,
};
pub use bytes::ByteSize;
pub use cpu_list::{allowed_cpus, pin_current_thread, CpuList};
pub use error::ConfigError;
pub use limits::{
    Limits, DEFAULT_PUSH_WINDOW_BYTES, MAX_IN_CAPSULE_DATA_SIZE, MAX_IO_SIZE,
    MAX_PUSH_WINDOW_BYTES, MAX_QUEUE_DEPTH, MIN_QUEUE_DEPTH,
};
pub use listener::{
    ListenerConfig, Provider, ReferralConfig, Transport, DEFAULT_PORT, DEFAULT_TRANSPORT,
};
pub use namespace::{NamespaceConfig, QosConfig, ANA_GROUP_MAX, QOS_MIN_BANDWIDTH, QOS_MIN_IOPS};
pub use nqn::{
    nqn_form_warning, parse_uuid, validate_nqn, validate_uuid, DISCOVERY_NQN, MAX_NQN_BYTES,
};
pub use subsystem::{SubsystemConfig, CNTLID_MAX, CNTLID_MIN, MAX_NAMESPACES_PER_SUBSYSTEM};
pub use target::{PollMode, TargetConfig, MAX_WORKER_THREADS};
pub use tls::{add_tls_psk, generate_psk, TlsMode, TlsRecordLayer};
pub use validate::{ana_state_names, parse_ana_group, Problem};

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
                    |a| error::in_context(text, a, e.message()),
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
}

impl std::str::FromStr for Config {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, None)
    }
}

/// `serde(default)` of the boolean keys that are on unless the file says otherwise.
fn yes() -> bool {
    true
}

#[cfg(test)]
mod tests;
