//! NVMe/TCP TLS settings (TP 8011, `docs/tcp.md`): a tcp listener's `tls`, and a host's TLS
//! PSK in the interchange format `nvme gen-tls-key` (and `rdmablk-ctl gen-tls-key`) writes:
//!
//! ```toml
//! [[listener]]
//! transport = "tcp"
//! address = "0.0.0.0"
//! tls = "required"          # "none" (default), "allowed" (either), "required"
//!
//! [[subsystem]]
//! hosts = [
//!   { nqn = "nqn...:uuid:...", tls_psk = "NVMeTLSkey-1:01:...:" },
//!   { nqn = "nqn...:uuid:...", tls_psk_file = "/etc/rdmablk/host1.psk" },
//! ]
//! ```
//! The key is per (host, subsystem): the identity a host offers names both. Keys are read
//! again at every reload (files too), so a rotated key applies to the next handshake.

use std::path::Path;

use serde::Deserialize;

use rdmablk::nvme::tls::ktls::RecordLayer;
use rdmablk::nvme::tls::ConfiguredPsk;

use super::auth::{HostEntry, SecretString};

/// A tcp listener's `tls`.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum TlsMode {
    /// Clear text only (a ClientHello is refused): discovery says TREQ "not required",
    /// TSAS "no security".
    #[default]
    None,
    /// Either: a connection that starts with a TLS record gets TLS, one that starts with an
    /// ICReq is served in clear text. Discovery: TREQ "not required", TSAS TLS 1.3.
    Allowed,
    /// TLS only: a connection whose first byte is not a TLS handshake record is closed
    /// before anything else is read. Discovery: TREQ "required", TSAS TLS 1.3.
    Required,
}

impl TlsMode {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::None => "none",
            TlsMode::Allowed => "allowed",
            TlsMode::Required => "required",
        }
    }
}

/// `target.tls_record_layer` (`rdmablk::nvme::tls::ktls`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "lowercase")]
pub enum TlsRecordLayer {
    /// The kernel's (kTLS) where it has one, else OpenSSL's in user space.
    #[default]
    Auto,
    /// The kernel's only: a connection whose keys the kernel does not take is closed.
    Kernel,
    /// OpenSSL's in user space.
    User,
}

impl From<TlsRecordLayer> for RecordLayer {
    fn from(l: TlsRecordLayer) -> RecordLayer {
        match l {
            TlsRecordLayer::Auto => RecordLayer::Auto,
            TlsRecordLayer::Kernel => RecordLayer::Kernel,
            TlsRecordLayer::User => RecordLayer::User,
        }
    }
}

impl HostEntry {
    /// The host's TLS PSK (reading its key file): `Ok(None)` for a host without one.
    pub fn tls_psk(&self) -> Result<Option<ConfiguredPsk>, String> {
        let HostEntry::Host(h) = self else {
            return Ok(None);
        };
        let parse = |text: &str, what: &str| {
            ConfiguredPsk::parse(text).map_err(|e| {
                format!(
                    "{what}: {e} (generate one with rdmablk-ctl gen-tls-key or nvme gen-tls-key)"
                )
            })
        };
        match (&h.tls_psk, &h.tls_psk_file) {
            (Some(_), Some(_)) => {
                Err("tls_psk and tls_psk_file are both set (keep one of them)".into())
            }
            (Some(s), None) => parse(s.expose(), "tls_psk").map(Some),
            (None, Some(p)) => {
                let text = read_key_file(p)?;
                parse(&text, &format!("tls_psk_file {}", p.display())).map(Some)
            }
            (None, None) => Ok(None),
        }
    }
}

fn read_key_file(p: &Path) -> Result<zeroize::Zeroizing<String>, String> {
    std::fs::read_to_string(p)
        .map(zeroize::Zeroizing::new)
        .map_err(|e| format!("tls_psk_file {}: {e}", p.display()))
}

/// Makes a new configured PSK (`rdmablk-ctl gen-tls-key`): `bytes` of 32 (SHA-256) or 48
/// (SHA-384) random bytes, with retained-PSK hash `hmac` (0 none, 1 SHA-256, 2 SHA-384).
pub fn generate_psk(hash_bytes: usize, hmac: u8) -> Result<SecretString, String> {
    let mut key = zeroize::Zeroizing::new(vec![0u8; hash_bytes]);
    getrandom::getrandom(&mut key).map_err(|e| format!("no random bytes: {e}"))?;
    let retained = match hmac {
        0 => None,
        h => Some(
            rdmablk::nvme::tls::PskHash::from_id(h)
                .ok_or_else(|| format!("hmac {h} is not 0 (none), 1 (SHA-256) or 2 (SHA-384)"))?,
        ),
    };
    let psk = ConfiguredPsk::new(&key, retained).map_err(|e| e.to_string())?;
    Ok(SecretString::new(&psk.to_interchange()))
}

/// Adds `tls_psk = key` to a `hosts` entry being written (`rdmablk-ctl host add --tls-psk`):
/// a bare NQN becomes a one-line table. The key is checked when the edited file is validated.
pub fn add_tls_psk(entry: &mut toml_edit::Value, host: &str, key: &str) {
    if let Some(t) = entry.as_inline_table_mut() {
        t.insert("tls_psk", key.into());
        return;
    }
    let mut t = toml_edit::InlineTable::new();
    t.insert("nqn", host.into());
    t.insert("tls_psk", key.into());
    *entry = toml_edit::Value::InlineTable(t);
}
