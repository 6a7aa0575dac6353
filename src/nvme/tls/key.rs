//! The PSK interchange format, `NVMeTLSkey-1:<hh>:<base64 of key || CRC-32>:`: a configured
//! PSK ([`ConfiguredPsk`]) parsed and written as nvme-cli, libnvme and SPDK do, its CRC checked,
//! and the refusals ([`PskFormatError`]), none of which echoes the key.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use zeroize::Zeroizing;

use super::derive::{check_context, expand_label};
use super::{debug_redacted, PskDeriveError, PskHash, RetainedPsk};

/// What starts every key in the interchange format (format version 1).
pub const INTERCHANGE_PREFIX: &str = "NVMeTLSkey-1:";

/// Why a PSK interchange string was refused. Never contains any part of the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PskFormatError {
    #[error(
        "not a TLS PSK in the interchange format (expected \"NVMeTLSkey-1:<hash>:<base64>:\", \
         as nvme gen-tls-key writes)"
    )]
    Prefix,
    #[error("TLS PSK does not end with ':' (copy the whole key, its final colon included)")]
    TrailingColon,
    #[error("TLS PSK hash {0:?} is not 00 (none), 01 (SHA-256) or 02 (SHA-384)")]
    Hash(String),
    #[error("TLS PSK is not valid base64")]
    Base64,
    #[error(
        "TLS PSK is {bytes} bytes with its CRC; hash {hash:02} wants {expected} \
         (a key of 32 bytes for 01, 48 for 02, either for 00)"
    )]
    Length {
        hash: u8,
        bytes: usize,
        expected: &'static str,
    },
    #[error("TLS PSK fails its CRC-32 check (the key was mistyped or truncated)")]
    Crc,
}

/// A configured PSK: the key an operator installs, in the interchange format.
#[derive(Clone)]
pub struct ConfiguredPsk {
    key: Zeroizing<Vec<u8>>,
    retained_hash: Option<PskHash>,
}

impl std::fmt::Debug for ConfiguredPsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        debug_redacted(
            f,
            "ConfiguredPsk",
            &self.key,
            ("retained_hash", &self.retained_hash),
        )
    }
}

impl ConfiguredPsk {
    /// A key from its bytes: 32 for SHA-256, 48 for SHA-384, either with no retained hash.
    pub fn new(key: &[u8], retained_hash: Option<PskHash>) -> Result<Self, PskFormatError> {
        let fits = match retained_hash {
            None => PskHash::for_key_len(key.len()).is_some(),
            Some(h) => key.len() == h.digest_len(),
        };
        if !fits {
            return Err(length_error(retained_hash, key.len() + 4));
        }
        Ok(ConfiguredPsk {
            key: Zeroizing::new(key.to_vec()),
            retained_hash,
        })
    }

    /// Parses `NVMeTLSkey-1:hh:base64:`. Surrounding white space (a key file's newline) is
    /// ignored; the final colon is required, as SPDK and libnvme require it.
    pub fn parse(s: &str) -> Result<Self, PskFormatError> {
        let rest = s.trim().strip_prefix(INTERCHANGE_PREFIX);
        let (hh, b64) = rest
            .and_then(|r| r.split_once(':'))
            .ok_or(PskFormatError::Prefix)?;
        let retained_hash = match hh {
            "00" => None,
            "01" => Some(PskHash::Sha256),
            "02" => Some(PskHash::Sha384),
            // Echoed only while too short to be a piece of a key (one left out, say).
            _ if hh.len() <= 3 => return Err(PskFormatError::Hash(hh.to_owned())),
            _ => return Err(PskFormatError::Hash(format!("<{} characters>", hh.len()))),
        };
        let b64 = b64.strip_suffix(':').ok_or(PskFormatError::TrailingColon)?;
        let bytes = Zeroizing::new(BASE64.decode(b64).map_err(|_| PskFormatError::Base64)?);
        let Some(key_len) = bytes.len().checked_sub(4) else {
            return Err(length_error(retained_hash, bytes.len()));
        };
        let (key, crc) = bytes.split_at(key_len);
        let psk = ConfiguredPsk::new(key, retained_hash)?;
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(PskFormatError::Crc);
        }
        Ok(psk)
    }

    /// The interchange form, `NVMeTLSkey-1:hh:base64:` with no newline (SPDK's file keyring
    /// reads a key file whole and wants it so). A secret: keep it out of logs.
    pub fn to_interchange(&self) -> Zeroizing<String> {
        let mut bytes = Zeroizing::new(self.key.to_vec());
        bytes.extend_from_slice(&crc32fast::hash(&self.key).to_le_bytes());
        let b64 = Zeroizing::new(BASE64.encode(&*bytes));
        let hh = self.retained_hash.map_or(0, PskHash::id);
        Zeroizing::new(format!("{INTERCHANGE_PREFIX}{hh:02}:{}:", &*b64))
    }

    /// The hash that turns this key into the retained PSK (None: `00`, used as it is).
    pub fn retained_hash(&self) -> Option<PskHash> {
        self.retained_hash
    }

    /// The cipher suite's hash, from the key's length.
    pub fn hash(&self) -> PskHash {
        PskHash::for_key_len(self.key.len()).expect("checked when made")
    }

    /// The retained PSK for the host `host_nqn`: the key itself for `00`, else
    /// HKDF-Expand-Label(HKDF-Extract(0, key), "HostNQN", host NQN, L).
    pub fn retained(&self, host_nqn: &str) -> Result<RetainedPsk, PskDeriveError> {
        let key = match self.retained_hash {
            None => self.key.clone(),
            Some(h) => {
                let fix = "an NVMe NQN has at most 223 bytes";
                check_context("the host NQN", host_nqn.len(), fix)?;
                expand_label(h, &self.key, "HostNQN", host_nqn.as_bytes())
            }
        };
        Ok(RetainedPsk::new(key, self.hash()))
    }
}

fn length_error(hash: Option<PskHash>, bytes: usize) -> PskFormatError {
    PskFormatError::Length {
        hash: hash.map_or(0, PskHash::id),
        bytes,
        expected: match hash {
            None => "36 or 52",
            Some(PskHash::Sha256) => "36",
            Some(PskHash::Sha384) => "52",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_vectors::{hex, HOST, SUBSYS, VECTORS};
    use super::super::IdentityVersion;
    use super::*;

    #[test]
    fn spdk_vectors_parse_and_format() {
        for v in &VECTORS {
            let psk = ConfiguredPsk::parse(v.interchange).unwrap();
            assert_eq!(hex(&psk.key), v.configured, "{}", v.interchange);
            assert_eq!(&**psk.to_interchange(), v.interchange);
            let hh = &v.interchange[13..15];
            assert_eq!(
                psk.retained_hash().map_or(0, PskHash::id),
                hh.parse::<u8>().unwrap()
            );
        }
    }

    // libnvme's own test vectors (test/psk.c, libnvme 1.16): the export of a 48-byte key
    // under hash 02, and identities of version 1 for its test NQNs.
    #[test]
    fn libnvme_vectors() {
        let key32 = "5512dbb6737d0106f65975b773dfb011ffc344bcf442e2dd6d8bc4870b5d5b03";
        let key48 = format!("{key32}ffc344bcf442e2dd6d8bc4870b5d5b03");
        let bytes = |h: &str| -> Vec<u8> {
            (0..h.len() / 2)
                .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
                .collect()
        };
        let k00 = ConfiguredPsk::new(&bytes(key32), None).unwrap();
        assert_eq!(
            &**k00.to_interchange(),
            "NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:"
        );
        let k02 = ConfiguredPsk::new(&bytes(&key48), Some(PskHash::Sha384)).unwrap();
        assert_eq!(
            &**k02.to_interchange(),
            "NVMeTLSkey-1:02:\
             VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:"
        );
        let k01 = ConfiguredPsk::new(&bytes(key32), Some(PskHash::Sha256)).unwrap();
        let (host, subsys) = ("nqn.psk-test-host", "nqn.psk-test-subsys");
        for (k, expected) in [
            (
                &k01,
                "NVMe1R01 nqn.psk-test-host nqn.psk-test-subsys \
                 iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=",
            ),
            (
                &k02,
                "NVMe1R02 nqn.psk-test-host nqn.psk-test-subsys \
                 QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a",
            ),
        ] {
            let id = k
                .retained(host)
                .unwrap()
                .identity(IdentityVersion::V1, host, subsys);
            assert_eq!(id.unwrap().to_string(), expected);
        }
    }

    #[test]
    fn bad_keys_are_refused_without_echoing_them() {
        let good = VECTORS[4].interchange; // NVMeTLSkey-1:01:VRLb...LrZ:
        let parse = ConfiguredPsk::parse;
        assert!(parse(good).is_ok());
        assert_eq!(
            parse("DHHC-1:01:AAAA:").unwrap_err(),
            PskFormatError::Prefix
        );
        let v2 = good.replace("NVMeTLSkey-1:", "NVMeTLSkey-2:");
        assert_eq!(parse(&v2).unwrap_err(), PskFormatError::Prefix);
        assert_eq!(
            parse("NVMeTLSkey-1:01").unwrap_err(),
            PskFormatError::Prefix
        );
        assert_eq!(
            parse(good.trim_end_matches(':')).unwrap_err(),
            PskFormatError::TrailingColon
        );
        for hh in ["03", "1", "0x", "001"] {
            let bad = good.replace(":01:", &format!(":{hh}:"));
            assert_eq!(
                parse(&bad).unwrap_err(),
                PskFormatError::Hash(hh.into()),
                "{hh}"
            );
        }
        // The hash left out: what stands in its place is the key, and is not echoed.
        assert_eq!(
            parse(&good.replace(":01:", ":")).unwrap_err(),
            PskFormatError::Hash("<48 characters>".into())
        );
        // A 32-byte key under SHA-384, a 48-byte one under SHA-256: the length for the hash.
        assert_eq!(
            parse(&good.replace(":01:", ":02:")).unwrap_err(),
            PskFormatError::Length {
                hash: 2,
                bytes: 36,
                expected: "52"
            }
        );
        assert_eq!(
            parse(&VECTORS[3].interchange.replace(":02:", ":01:")).unwrap_err(),
            PskFormatError::Length {
                hash: 1,
                bytes: 52,
                expected: "36"
            }
        );
        assert_eq!(
            parse("NVMeTLSkey-1:00:AAECAwQF:").unwrap_err(),
            PskFormatError::Length {
                hash: 0,
                bytes: 6,
                expected: "36 or 52"
            }
        );
        assert!(matches!(
            parse("NVMeTLSkey-1:00::"),
            Err(PskFormatError::Length { .. })
        ));
        assert_eq!(
            parse("NVMeTLSkey-1:01:!!!!:").unwrap_err(),
            PskFormatError::Base64
        );
        assert_eq!(
            parse("NVMeTLSkey-1:01:AAA:BBB:").unwrap_err(),
            PskFormatError::Base64
        );
        assert_eq!(
            parse(&good.replace("LrZ:", "LrY:")).unwrap_err(),
            PskFormatError::Crc
        );
        // White space around the key (a key file's newline) is not part of it.
        assert!(parse(&format!("  {good}\n")).is_ok());

        let psk = parse(good).unwrap();
        let retained = psk.retained(HOST).unwrap();
        let id = retained
            .identity(IdentityVersion::V0, HOST, SUBSYS)
            .unwrap();
        let tls = retained.tls_psk(&id).unwrap();
        let names = ["ConfiguredPsk {", "RetainedPsk {", "TlsPsk {"];
        let dbgs = [
            format!("{psk:?}"),
            format!("{retained:?}"),
            format!("{tls:?}"),
        ];
        for (dbg, name) in dbgs.iter().zip(names) {
            assert!(dbg.starts_with(name), "{dbg}");
            assert!(dbg.contains("<32 bytes redacted>"), "{dbg}");
            for secret in [
                &hex(&psk.key),
                &hex(retained.as_bytes()),
                &hex(tls.as_bytes()),
            ] {
                assert!(!dbg.contains(secret.as_str()), "{dbg}");
            }
            assert!(!dbg.contains("VRLb") && !dbg.contains("5512") && !dbg.contains("[85"));
        }
    }

    #[test]
    fn new_checks_the_length_for_the_hash() {
        assert!(ConfiguredPsk::new(&[7; 32], None).is_ok());
        assert!(ConfiguredPsk::new(&[7; 48], None).is_ok());
        assert!(ConfiguredPsk::new(&[7; 64], None).is_err());
        assert!(ConfiguredPsk::new(&[7; 48], Some(PskHash::Sha256)).is_err());
        assert!(ConfiguredPsk::new(&[7; 32], Some(PskHash::Sha384)).is_err());
        assert_eq!(
            ConfiguredPsk::new(&[7; 48], None).unwrap().hash(),
            PskHash::Sha384
        );
        assert_eq!(PskHash::Sha256.cipher_suite(), "TLS_AES_128_GCM_SHA256");
        assert_eq!(PskHash::Sha384.cipher_suite(), "TLS_AES_256_GCM_SHA384");
    }
}
