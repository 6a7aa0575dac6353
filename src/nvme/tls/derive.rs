//! The derivations (HKDF-Expand-Label of RFC 8446 7.1): the retained PSK a configured one
//! becomes for a host, the PSK digest of identity version 1, and the TLS PSK a handshake takes
//! under an identity; the stages are types ([`RetainedPsk`], [`TlsPsk`]).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hkdf::Hkdf;
use sha2::{Sha256, Sha384};
use zeroize::Zeroizing;

use super::{debug_redacted, IdentityVersion, PskHash, PskIdentity, PskKind};
use crate::nvme::auth::dhchap;

/// The HMAC message's closing part in the PSK digest (as in DH-HMAC-CHAP's key transform).
const DIGEST_SEED: &str = "NVMe-over-Fabrics";
/// RFC 8446's HkdfLabel holds its label and context in vectors of at most 255 bytes.
pub const MAX_HKDF_CONTEXT_BYTES: usize = 255;

/// Why a derivation or an identity could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PskDeriveError {
    #[error("{what} is {bytes} bytes, over the 255 an HKDF label's context holds ({fix})")]
    ContextTooLong {
        what: &'static str,
        bytes: usize,
        fix: &'static str,
    },
    #[error(
        "NQN {0:?} has a space or is empty; a TLS PSK identity separates its fields by spaces"
    )]
    Nqn(String),
    #[error("identity's hash {identity:02} is not the key's {key:02}")]
    HashMismatch { identity: u8, key: u8 },
    #[error("identity names a generated PSK (NVMe<v>G..); a retained PSK has R identities")]
    NotRetained,
}

/// A PSK of the cipher suite's hash, at one stage of the derivation (`S`): [`RetainedPsk`],
/// [`TlsPsk`]. The stages are types, so that one cannot stand where the other is meant.
#[derive(Clone)]
pub struct Psk<S: Stage> {
    key: Zeroizing<Vec<u8>>,
    hash: PskHash,
    stage: std::marker::PhantomData<S>,
}

/// A stage of the derivation, named in `Debug`.
pub trait Stage: Clone {
    const NAME: &'static str;
}

/// Stage: the PSK an NVMe/TCP entity keeps for a host (TP 8011's retained PSK), the input of
/// the identities' digest and of the TLS PSK.
#[derive(Clone, Copy, Debug)]
pub enum Retained {}
/// Stage: the key a TLS 1.3 handshake takes as its external PSK.
#[derive(Clone, Copy, Debug)]
pub enum Tls {}

impl Stage for Retained {
    const NAME: &'static str = "RetainedPsk";
}
impl Stage for Tls {
    const NAME: &'static str = "TlsPsk";
}

/// The retained PSK.
pub type RetainedPsk = Psk<Retained>;
/// The TLS PSK.
pub type TlsPsk = Psk<Tls>;

impl<S: Stage> Psk<S> {
    pub(super) fn new(key: Zeroizing<Vec<u8>>, hash: PskHash) -> Psk<S> {
        debug_assert_eq!(key.len(), hash.digest_len());
        Psk {
            key,
            hash,
            stage: std::marker::PhantomData,
        }
    }

    /// The cipher suite's hash (the identity's `<hh>`).
    pub fn hash(&self) -> PskHash {
        self.hash
    }

    /// The key bytes (a secret).
    pub fn as_bytes(&self) -> &[u8] {
        &self.key
    }
}

impl<S: Stage> std::fmt::Debug for Psk<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        debug_redacted(f, S::NAME, &self.key, ("hash", &self.hash))
    }
}

impl RetainedPsk {
    /// The PSK digest of identity version 1 (TP 8018): Base64 (RFC 4648, padded: 44
    /// characters for SHA-256, 64 for SHA-384) of HMAC(retained PSK,
    /// NQNh || " " || NQNc || " " || "NVMe-over-Fabrics").
    pub fn digest(&self, host_nqn: &str, subsys_nqn: &str) -> String {
        let mac = dhchap::hmac(
            self.hash.hash_id(),
            &self.key,
            &[
                host_nqn.as_bytes(),
                b" ",
                subsys_nqn.as_bytes(),
                b" ",
                DIGEST_SEED.as_bytes(),
            ],
        );
        BASE64.encode(&*mac)
    }

    /// This key's identity for the pair (`R`: a retained PSK).
    pub fn identity(
        &self,
        version: IdentityVersion,
        host_nqn: &str,
        subsys_nqn: &str,
    ) -> Result<PskIdentity, PskDeriveError> {
        for nqn in [host_nqn, subsys_nqn] {
            if nqn.is_empty() || nqn.contains(' ') {
                return Err(PskDeriveError::Nqn(nqn.chars().take(256).collect()));
            }
        }
        Ok(PskIdentity {
            kind: PskKind::Retained,
            hash: self.hash,
            host_nqn: host_nqn.to_owned(),
            subsys_nqn: subsys_nqn.to_owned(),
            digest: match version {
                IdentityVersion::V0 => None,
                IdentityVersion::V1 => Some(self.digest(host_nqn, subsys_nqn)),
            },
        })
    }

    /// The TLS PSK the handshake uses under `identity`:
    /// HKDF-Expand-Label(HKDF-Extract(0, retained), "nvme-tls-psk", context, L), the context
    /// being the identity (version 0) or `"<hh> <PSK digest>"` (version 1). The NQNs and digest
    /// are taken from `identity` as they are: a target first checks that the identity a host
    /// offered is the one [`RetainedPsk::identity`] makes for that host and subsystem.
    pub fn tls_psk(&self, identity: &PskIdentity) -> Result<TlsPsk, PskDeriveError> {
        if identity.kind != PskKind::Retained {
            return Err(PskDeriveError::NotRetained);
        }
        if identity.hash != self.hash {
            return Err(PskDeriveError::HashMismatch {
                identity: identity.hash.id(),
                key: self.hash.id(),
            });
        }
        let context = match &identity.digest {
            None => identity.to_string(),
            Some(digest) => format!("{:02} {digest}", self.hash.id()),
        };
        let fix = "use identity version 1, or NQNs of at most 245 bytes together";
        check_context("the version 0 identity", context.len(), fix)?;
        let key = expand_label(self.hash, &self.key, "nvme-tls-psk", context.as_bytes());
        Ok(TlsPsk::new(key, self.hash))
    }
}

pub(super) fn check_context(
    what: &'static str,
    bytes: usize,
    fix: &'static str,
) -> Result<(), PskDeriveError> {
    if bytes > MAX_HKDF_CONTEXT_BYTES {
        return Err(PskDeriveError::ContextTooLong { what, bytes, fix });
    }
    Ok(())
}

/// HKDF-Expand-Label(HKDF-Extract(0, ikm), label, context, L) with L = `h`'s length (RFC 8446
/// 7.1; the zero salt is RFC 5869's default, which SPDK's empty salt equals under HMAC).
pub(super) fn expand_label(
    h: PskHash,
    ikm: &[u8],
    label: &str,
    context: &[u8],
) -> Zeroizing<Vec<u8>> {
    let info = hkdf_label(h.digest_len(), label, context);
    let mut out = Zeroizing::new(vec![0u8; h.digest_len()]);
    let expanded = match h {
        PskHash::Sha256 => Hkdf::<Sha256>::new(None, ikm).expand(&info, &mut out),
        PskHash::Sha384 => Hkdf::<Sha384>::new(None, ikm).expand(&info, &mut out),
    };
    expanded.expect("one hash length is within HKDF's 255 blocks");
    out
}

/// HKDF-Expand-Label(secret, label, context, `out.len()`) under `h` (RFC 8446 7.1), `secret`
/// being already a pseudorandom key (a traffic secret): no extract step. Panics if `secret`
/// is shorter than the hash (a caller's bug: traffic secrets are the hash's length).
pub(crate) fn expand_label_from_secret(
    h: PskHash,
    secret: &[u8],
    label: &str,
    context: &[u8],
    out: &mut [u8],
) {
    let info = hkdf_label(out.len(), label, context);
    let expanded = match h {
        PskHash::Sha256 => Hkdf::<Sha256>::from_prk(secret)
            .expect("a SHA-256 traffic secret")
            .expand(&info, out),
        PskHash::Sha384 => Hkdf::<Sha384>::from_prk(secret)
            .expect("a SHA-384 traffic secret")
            .expand(&info, out),
    };
    expanded.expect("a key or IV is within HKDF's 255 blocks");
}

/// RFC 8446's HkdfLabel: `out_len` (2 bytes, big-endian) | len | "tls13 " label | len |
/// context.
fn hkdf_label(out_len: usize, label: &str, context: &[u8]) -> Vec<u8> {
    const TLS13: &str = "tls13 ";
    let label_len = u8::try_from(TLS13.len() + label.len()).expect("labels are constants");
    let context_len = u8::try_from(context.len()).expect("checked by the callers");
    let out_len = u16::try_from(out_len).expect("a digest, key or IV length");
    let mut info = Vec::with_capacity(4 + usize::from(label_len) + context.len());
    info.extend_from_slice(&out_len.to_be_bytes());
    info.push(label_len);
    info.extend_from_slice(TLS13.as_bytes());
    info.extend_from_slice(label.as_bytes());
    info.push(context_len);
    info.extend_from_slice(context);
    info
}

#[cfg(test)]
mod tests {
    use super::super::test_vectors::{hex, HOST, SUBSYS, VECTORS};
    use super::super::ConfiguredPsk;
    use super::*;

    #[test]
    fn spdk_vectors_derive() {
        for v in &VECTORS {
            let psk = ConfiguredPsk::parse(v.interchange).unwrap();
            let retained = psk.retained(HOST).unwrap();
            assert_eq!(hex(retained.as_bytes()), v.retained, "{}", v.interchange);
            assert_eq!(retained.digest(HOST, SUBSYS), v.digest, "{}", v.interchange);
            let hh = psk.hash().id();
            let id0 = retained
                .identity(IdentityVersion::V0, HOST, SUBSYS)
                .unwrap();
            assert_eq!(id0.to_string(), format!("NVMe0R{hh:02} {HOST} {SUBSYS}"));
            let id1 = retained
                .identity(IdentityVersion::V1, HOST, SUBSYS)
                .unwrap();
            assert_eq!(
                id1.to_string(),
                format!("NVMe1R{hh:02} {HOST} {SUBSYS} {}", v.digest)
            );
            for (id, expected) in [(&id0, v.tls_psk_v0), (&id1, v.tls_psk_v1)] {
                let tls = retained.tls_psk(id).unwrap();
                assert_eq!(hex(tls.as_bytes()), expected, "{id}");
                assert_eq!(tls.hash(), psk.hash());
                assert_eq!(PskIdentity::parse(&id.to_string()).as_ref(), Ok(id));
            }
        }
    }

    #[test]
    fn derivation_limits() {
        let retained = ConfiguredPsk::parse(VECTORS[1].interchange)
            .unwrap()
            .retained(HOST)
            .unwrap();
        // Version 0's context is the whole identity: 9 + host + 1 + subsystem bytes <= 255.
        let host = format!("nqn.2014-08.org.example:{}", "h".repeat(100));
        let subsys = format!("nqn.2014-08.org.example:{}", "s".repeat(98));
        assert_eq!(9 + host.len() + 1 + subsys.len(), 256);
        let id0 = retained
            .identity(IdentityVersion::V0, &host, &subsys)
            .unwrap();
        assert!(matches!(
            retained.tls_psk(&id0),
            Err(PskDeriveError::ContextTooLong { bytes: 256, .. })
        ));
        let id0 = retained
            .identity(IdentityVersion::V0, &host, &subsys[1..])
            .unwrap();
        assert!(retained.tls_psk(&id0).is_ok());
        // Version 1's context is the hash and digest only: any NQNs.
        let id1 = retained
            .identity(IdentityVersion::V1, &host, &subsys)
            .unwrap();
        assert!(retained.tls_psk(&id1).is_ok());
        // The retained PSK's context is the host NQN.
        let long_host = format!("nqn.2014-08.org.example:{}", "h".repeat(232));
        assert_eq!(long_host.len(), 256);
        let k01 = ConfiguredPsk::parse(VECTORS[1].interchange).unwrap();
        assert!(matches!(
            k01.retained(&long_host),
            Err(PskDeriveError::ContextTooLong { bytes: 256, .. })
        ));
        // Spaces would make the identity ambiguous.
        assert!(matches!(
            retained.identity(IdentityVersion::V0, "nqn.a b", SUBSYS),
            Err(PskDeriveError::Nqn(_))
        ));
        assert!(matches!(
            retained.identity(IdentityVersion::V1, HOST, ""),
            Err(PskDeriveError::Nqn(_))
        ));
        // A generated PSK's identity (G) is not a retained key's.
        let g = PskIdentity::parse(&id0.to_string().replacen("NVMe0R", "NVMe0G", 1)).unwrap();
        assert_eq!(
            retained.tls_psk(&g).unwrap_err(),
            PskDeriveError::NotRetained
        );
        // A SHA-384 identity cannot take a SHA-256 key.
        let other = ConfiguredPsk::parse(VECTORS[3].interchange)
            .unwrap()
            .retained(HOST);
        let id384 = other
            .unwrap()
            .identity(IdentityVersion::V0, HOST, SUBSYS)
            .unwrap();
        assert_eq!(
            retained.tls_psk(&id384).unwrap_err(),
            PskDeriveError::HashMismatch {
                identity: 2,
                key: 1
            }
        );
    }
}
