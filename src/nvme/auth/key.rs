//! The `DHHC-1` representation of a DH-HMAC-CHAP secret (NVMe base spec 8.13.5.8), as
//! `nvme gen-dhchap-key` writes it and Linux (`nvme connect --dhchap-secret`, nvmet's
//! configfs `dhchap_key`) reads it:
//!
//! ```text
//! DHHC-1:<hh>:<base64 of secret || CRC-32(secret) little-endian>:
//!   hh: transformation hash, 00 none, 01 SHA-256, 02 SHA-384, 03 SHA-512
//!   secret: 32, 48 or 64 bytes
//! ```
//! Before use a secret is transformed with the NQN of its owner (the host NQN for a host key,
//! the subsystem NQN for a controller key): `HMAC-hash(secret, NQN || "NVMe-over-Fabrics")`,
//! or the secret itself for hash 00.
//!
//! Secret bytes are zeroized when dropped and never printed: `Debug` shows the hash and length
//! only, and no error message carries key material.

use std::path::Path;

use base64::Engine as _;
use zeroize::Zeroizing;

use super::dhchap;
use super::HashId;

/// Why a `DHHC-1` string was refused. Never contains any part of the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(
        "not a DHHC-1 secret (expected \"DHHC-1:<hash>:<base64>:\", as nvme gen-dhchap-key writes)"
    )]
    Format,
    #[error("DHHC-1 transformation hash {0:?} is not 00, 01, 02 or 03")]
    Hash(String),
    #[error("DHHC-1 secret is not valid base64")]
    Base64,
    #[error("DHHC-1 secret is {0} bytes with its CRC; expected 36, 52 or 68 (a 32, 48 or 64-byte secret)")]
    Length(usize),
    #[error("DHHC-1 secret fails its CRC-32 check (the key was mistyped or truncated)")]
    Crc,
}

/// A DH-HMAC-CHAP secret with its transformation hash.
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapKey {
    secret: Zeroizing<Vec<u8>>,
    transform: Option<HashId>,
}

impl std::fmt::Debug for DhchapKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DhchapKey")
            .field(
                "secret",
                &format_args!("<{} bytes redacted>", self.secret.len()),
            )
            .field("transform", &self.transform)
            .finish()
    }
}

impl DhchapKey {
    /// A key from raw secret bytes (32, 48 or 64 of them).
    pub fn new(secret: &[u8], transform: Option<HashId>) -> Result<DhchapKey, KeyError> {
        if !matches!(secret.len(), 32 | 48 | 64) {
            return Err(KeyError::Length(secret.len() + 4));
        }
        Ok(DhchapKey {
            secret: Zeroizing::new(secret.to_vec()),
            transform,
        })
    }

    /// Parses a `DHHC-1:hh:base64:` string (surrounding white space and a missing final colon
    /// are accepted).
    pub fn parse(s: &str) -> Result<DhchapKey, KeyError> {
        let s = s.trim();
        let rest = s.strip_prefix("DHHC-1:").ok_or(KeyError::Format)?;
        let (hh, b64) = rest.split_once(':').ok_or(KeyError::Format)?;
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        let transform = match hh {
            "00" => None,
            "01" | "02" | "03" => HashId::from_id(hh.as_bytes()[1] - b'0'),
            _ => return Err(KeyError::Hash(hh.chars().take(4).collect())),
        };
        let bytes = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|_| KeyError::Base64)?,
        );
        if !matches!(bytes.len(), 36 | 52 | 68) {
            return Err(KeyError::Length(bytes.len()));
        }
        let (secret, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(secret).to_le_bytes() != crc {
            return Err(KeyError::Crc);
        }
        DhchapKey::new(secret, transform)
    }

    /// Reads a key file: one `DHHC-1` string (nvme gen-dhchap-key's output).
    pub fn from_file(path: &Path) -> Result<DhchapKey, KeyFileError> {
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| KeyFileError {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?);
        DhchapKey::parse(&text).map_err(|e| KeyFileError {
            path: path.display().to_string(),
            detail: e.to_string(),
        })
    }

    /// The `DHHC-1:hh:base64:` form (a secret: keep it out of logs).
    pub fn to_dhhc1(&self) -> Zeroizing<String> {
        let mut bytes = Zeroizing::new(self.secret.to_vec());
        bytes.extend_from_slice(&crc32fast::hash(&self.secret).to_le_bytes());
        let b64 = Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(&*bytes));
        Zeroizing::new(format!(
            "DHHC-1:{:02}:{}:",
            self.transform.map_or(0, HashId::id),
            &*b64
        ))
    }

    /// The transformation hash (None: 00).
    pub fn transform_hash(&self) -> Option<HashId> {
        self.transform
    }

    /// Secret length in bytes.
    pub fn len(&self) -> usize {
        self.secret.len()
    }

    /// Always false: a key has 32, 48 or 64 bytes.
    pub fn is_empty(&self) -> bool {
        self.secret.is_empty()
    }

    /// The transformed key for `nqn`: the HMAC key of the DH-HMAC-CHAP responses.
    pub fn transformed(&self, nqn: &str) -> Zeroizing<Vec<u8>> {
        match self.transform {
            None => self.secret.clone(),
            Some(h) => dhchap::hmac(h, &self.secret, &[nqn.as_bytes(), b"NVMe-over-Fabrics"]),
        }
    }
}

/// A key file that could not be read or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DH-HMAC-CHAP key file {path}: {detail}")]
pub struct KeyFileError {
    pub path: String,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:test";

    fn seq(n: u8) -> Vec<u8> {
        (0..n).collect()
    }

    // Vectors from nvme-cli 2.3: `nvme gen-dhchap-key -s <hex 00 01 .. > -m <h> [-n NQN]`.
    // With -m 1..3 it stores the secret already transformed with the NQN, which makes these
    // vectors of the transformation too.
    #[test]
    fn nvme_cli_untransformed_key() {
        let k = DhchapKey::parse("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:")
            .unwrap();
        assert_eq!(k.transform_hash(), None);
        assert_eq!(*k.transformed(NQN), seq(32));
        assert_eq!(
            &**k.to_dhhc1(),
            "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
        );
    }

    #[test]
    fn nvme_cli_transform_vectors() {
        for (h, len, out) in [
            (HashId::Sha256, 32, "DHHC-1:01:WulleCBkG4oCs0iIC3Cit9gBDCLWiZ9PNXuhqytWkBIZkvGy:"),
            (
                HashId::Sha384,
                48,
                "DHHC-1:02:JzC2BNNCN092uBY9oK1bbG/xrkLudbjqzPRjAtH00YqVJN1+2TpCZUPYxrwS09Qxpo/5Jw==:",
            ),
            (
                HashId::Sha512,
                64,
                "DHHC-1:03:d9FmVEvkZD5WUqUkzVMj3JFzwudZt1EtUNK4zK6+E9Dd42mroGA4ub4Yju0aNPtAr2w0xZFyCxz8d1Q12rImDko3x34=:",
            ),
        ] {
            let raw = DhchapKey::new(&seq(len), Some(h)).unwrap();
            let expected = DhchapKey::parse(out).unwrap();
            assert_eq!(expected.transform_hash(), Some(h));
            assert_eq!(*raw.transformed(NQN), *expected.secret, "{h:?}");
            assert_eq!(&**expected.to_dhhc1(), out);
        }
    }

    #[test]
    fn bad_keys_are_refused_without_echoing_them() {
        let good = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
        assert_eq!(DhchapKey::parse("DHHC-2:00:AAAA:"), Err(KeyError::Format));
        assert!(matches!(
            DhchapKey::parse(&good.replace(":00:", ":04:")),
            Err(KeyError::Hash(_))
        ));
        assert_eq!(
            DhchapKey::parse(&good.replace("KfiaR", "KfiaS")),
            Err(KeyError::Crc)
        );
        assert_eq!(
            DhchapKey::parse("DHHC-1:00:AAECAwQF:"),
            Err(KeyError::Length(6))
        );
        assert_eq!(DhchapKey::parse("DHHC-1:00:!!!!:"), Err(KeyError::Base64));
        // Without the final colon, with a newline (a key file): accepted.
        assert!(DhchapKey::parse(&format!("{}\n", good.trim_end_matches(':'))).is_ok());
        let k = DhchapKey::parse(good).unwrap();
        let dbg = format!("{k:?}");
        assert!(!dbg.contains("AAEC") && dbg.contains("redacted"), "{dbg}");
    }
}
