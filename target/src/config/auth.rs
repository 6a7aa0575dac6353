//! `hosts` entries of a `[[subsystem]]`: a plain host NQN, or a table with the host's
//! DH-HMAC-CHAP secrets (in-band authentication, `docs/auth.md`):
//!
//! ```toml
//! hosts = [
//!   "nqn.2014-08.org.nvmexpress:uuid:...",                       # no authentication
//!   { nqn = "nqn...:uuid:...", dhchap_key = "DHHC-1:00:...:" },   # must authenticate
//!   { nqn = "nqn...:uuid:...", dhchap_key_file = "/etc/rdmablk/host.key",
//!     dhchap_ctrl_key_file = "/etc/rdmablk/ctrl.key", dhchap_dhgroup = "ffdhe2048" },
//! ]
//! ```
//! (TOML inline tables are one line each; the third entry is wrapped here only for reading.)
//! Secrets are kept out of `Debug` output and error messages.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use zeroize::Zeroizing;

use rdmablk::nvme::auth::key::DhchapKey;
use rdmablk::nvme::auth::{DhGroup, HashId};

/// A secret string from the config file: zeroized on drop, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(Zeroizing<String>);

impl<'de> Deserialize<'de> for SecretString {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SecretString, D::Error> {
        String::deserialize(d).map(|s| SecretString(Zeroizing::new(s)))
    }
}

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl SecretString {
    pub fn new(s: &str) -> SecretString {
        SecretString(Zeroizing::new(s.to_owned()))
    }

    /// The secret's text (to parse it; never to print it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// One `hosts` entry.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum HostEntry {
    /// A host NQN: the host connects without authenticating.
    Nqn(String),
    /// A host with DH-HMAC-CHAP settings.
    Host(HostConfig),
}

/// `{ nqn = ..., dhchap_key = ... }`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    pub nqn: String,
    /// The host's secret (`DHHC-1:..`, as `nvme gen-dhchap-key` writes it). Exclusive with
    /// `dhchap_key_file`. With either, the host must authenticate before anything else.
    #[serde(default)]
    pub dhchap_key: Option<SecretString>,
    /// A file holding the host's secret.
    #[serde(default)]
    pub dhchap_key_file: Option<PathBuf>,
    /// The controller's secret, for hosts that authenticate the controller too
    /// (bidirectional). Exclusive with `dhchap_ctrl_key_file`.
    #[serde(default)]
    pub dhchap_ctrl_key: Option<SecretString>,
    #[serde(default)]
    pub dhchap_ctrl_key_file: Option<PathBuf>,
    /// Hash of the transaction: sha256 (default), sha384, sha512.
    #[serde(default)]
    pub dhchap_hash: Option<String>,
    /// DH group: null (default, as nvmet), ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144,
    /// ffdhe8192.
    #[serde(default)]
    pub dhchap_dhgroup: Option<String>,
    /// The host's NVMe/TCP TLS PSK (`NVMeTLSkey-1:..`, as `nvme gen-tls-key` writes it),
    /// for this subsystem: `config/tls.rs`. Exclusive with `tls_psk_file`.
    #[serde(default)]
    pub tls_psk: Option<SecretString>,
    #[serde(default)]
    pub tls_psk_file: Option<PathBuf>,
}

/// A host's resolved DH-HMAC-CHAP settings.
#[derive(Debug)]
pub struct HostAuth {
    pub key: DhchapKey,
    pub ctrl_key: Option<DhchapKey>,
    pub hash: HashId,
    pub dhgroup: DhGroup,
}

impl HostEntry {
    /// Whether a key of this host comes from a file (read again at each reload).
    pub fn has_key_file(&self) -> bool {
        match self {
            HostEntry::Nqn(_) => false,
            HostEntry::Host(h) => {
                h.dhchap_key_file.is_some()
                    || h.dhchap_ctrl_key_file.is_some()
                    || h.tls_psk_file.is_some()
            }
        }
    }

    pub fn nqn(&self) -> &str {
        match self {
            HostEntry::Nqn(n) => n,
            HostEntry::Host(h) => &h.nqn,
        }
    }

    /// Parses the keys (reading key files): `Ok(None)` for a host without a key.
    pub fn resolve(&self) -> Result<Option<Arc<HostAuth>>, String> {
        let HostEntry::Host(h) = self else {
            return Ok(None);
        };
        let key = load(&h.dhchap_key, &h.dhchap_key_file, "dhchap_key")?;
        let ctrl_key = load(
            &h.dhchap_ctrl_key,
            &h.dhchap_ctrl_key_file,
            "dhchap_ctrl_key",
        )?;
        let hash = match &h.dhchap_hash {
            None => HashId::Sha256,
            Some(s) => HashId::from_name(s)
                .ok_or_else(|| format!("dhchap_hash {s:?} is not one of sha256, sha384, sha512"))?,
        };
        let dhgroup = match &h.dhchap_dhgroup {
            None => DhGroup::Null,
            Some(s) => DhGroup::from_name(s).ok_or_else(|| {
                format!(
                    "dhchap_dhgroup {s:?} is not one of null, ffdhe2048, ffdhe3072, \
                     ffdhe4096, ffdhe6144, ffdhe8192"
                )
            })?,
        };
        match key {
            Some(key) => Ok(Some(Arc::new(HostAuth {
                key,
                ctrl_key,
                hash,
                dhgroup,
            }))),
            None if ctrl_key.is_some() || h.dhchap_hash.is_some() || h.dhchap_dhgroup.is_some() => {
                Err(
                    "DH-HMAC-CHAP settings without dhchap_key or dhchap_key_file (a host \
                     authenticates with its own key first: set one)"
                        .into(),
                )
            }
            None => Ok(None),
        }
    }

    /// Key files this entry names.
    pub fn key_files(&self) -> Vec<&Path> {
        match self {
            HostEntry::Nqn(_) => Vec::new(),
            HostEntry::Host(h) => [&h.dhchap_key_file, &h.dhchap_ctrl_key_file, &h.tls_psk_file]
                .into_iter()
                .flatten()
                .map(PathBuf::as_path)
                .collect(),
        }
    }

    /// Whether the entry holds a secret inline (then the config file itself is secret).
    pub fn has_inline_secret(&self) -> bool {
        matches!(self, HostEntry::Host(h)
            if h.dhchap_key.is_some() || h.dhchap_ctrl_key.is_some() || h.tls_psk.is_some())
    }
}

fn load(
    inline: &Option<SecretString>,
    file: &Option<PathBuf>,
    what: &str,
) -> Result<Option<DhchapKey>, String> {
    match (inline, file) {
        (Some(_), Some(_)) => Err(format!(
            "{what} and {what}_file are both set (keep one of them)"
        )),
        (Some(s), None) => DhchapKey::parse(&s.0)
            .map(Some)
            .map_err(|e| format!("{what}: {e} (generate one with nvme gen-dhchap-key)")),
        (None, Some(p)) => DhchapKey::from_file(p)
            .map(Some)
            .map_err(|e| format!("{what}_file: {e}")),
        (None, None) => Ok(None),
    }
}

/// Warns when a file holding secrets can be read by users other than its owner.
pub fn warn_if_readable_by_others(path: &Path, what: &str) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path) {
        let mode = m.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(path = %path.display(), mode = format_args!("{:o}", mode & 0o777),
                "{what} holds DH-HMAC-CHAP secrets and is readable by group or others \
                 (chmod 600 it)");
        }
    }
}
