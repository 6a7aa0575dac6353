//! The DH-HMAC-CHAP computations both sides make (NVMe base spec 8.13.5), with the byte
//! order Linux uses (drivers/nvme/host/auth.c, drivers/nvme/target/auth.c):
//!
//! ```text
//! Ca  = C                       (null DH group)
//!     = HMAC(H(Ks), C)          (FFDHE: Ks the shared secret, big-endian, the prime's size)
//! R1  = HMAC(Kh', Ca1 || S1 (LE32) || T_ID (LE16) || 0x00 || "HostHost"   || NQNh || 0x00 || NQNc)
//! R2  = HMAC(Kc', Ca2 || S2 (LE32) || T_ID (LE16) || 0x00 || "Controller" || NQNc || 0x00 || NQNh)
//! ```
//! `Kh'` is the host key transformed with the host NQN, `Kc'` the controller key transformed
//! with the subsystem NQN ([`super::key::DhchapKey::transformed`]); H and HMAC use the hash
//! negotiated for the transaction.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

use super::HashId;

/// HMAC-`h` of the concatenation of `parts`, keyed with `key`.
pub fn hmac(h: HashId, key: &[u8], parts: &[&[u8]]) -> Zeroizing<Vec<u8>> {
    fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key)
            .expect("HMAC takes keys of any length");
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    Zeroizing::new(match h {
        HashId::Sha256 => run::<Hmac<Sha256>>(key, parts),
        HashId::Sha384 => run::<Hmac<Sha384>>(key, parts),
        HashId::Sha512 => run::<Hmac<Sha512>>(key, parts),
    })
}

/// Hash-`h` of `data`.
pub fn hash(h: HashId, data: &[u8]) -> Zeroizing<Vec<u8>> {
    Zeroizing::new(match h {
        HashId::Sha256 => Sha256::digest(data).to_vec(),
        HashId::Sha384 => Sha384::digest(data).to_vec(),
        HashId::Sha512 => Sha512::digest(data).to_vec(),
    })
}

/// The challenge as it enters a response: itself for the null group, else HMAC(H(Ks), C).
pub fn augmented_challenge(h: HashId, session_key: Option<&[u8]>, c: &[u8]) -> Vec<u8> {
    match session_key {
        None => c.to_vec(),
        Some(ks) => hmac(h, &hash(h, ks), &[c]).to_vec(),
    }
}

/// What a response covers besides the key.
pub struct ResponseInput<'a> {
    pub hash: HashId,
    /// The challenge (already augmented when a DH group is in use).
    pub challenge: &'a [u8],
    pub seqnum: u32,
    pub t_id: u16,
    pub host_nqn: &'a str,
    pub subsys_nqn: &'a str,
}

/// R1, the host's response to C1, keyed with the transformed host key.
pub fn host_response(transformed_host_key: &[u8], i: &ResponseInput<'_>) -> Vec<u8> {
    hmac(
        i.hash,
        transformed_host_key,
        &[
            i.challenge,
            &i.seqnum.to_le_bytes(),
            &i.t_id.to_le_bytes(),
            &[0],
            b"HostHost",
            i.host_nqn.as_bytes(),
            &[0],
            i.subsys_nqn.as_bytes(),
        ],
    )
    .to_vec()
}

/// R2, the controller's response to C2, keyed with the transformed controller key.
pub fn controller_response(transformed_ctrl_key: &[u8], i: &ResponseInput<'_>) -> Vec<u8> {
    hmac(
        i.hash,
        transformed_ctrl_key,
        &[
            i.challenge,
            &i.seqnum.to_le_bytes(),
            &i.t_id.to_le_bytes(),
            &[0],
            b"Controller",
            i.subsys_nqn.as_bytes(),
            &[0],
            i.host_nqn.as_bytes(),
        ],
    )
    .to_vec()
}

/// Constant-time equality of two responses.
pub fn responses_match(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// `n` random bytes from the operating system.
pub fn random_bytes(n: usize) -> Result<Vec<u8>, getrandom::Error> {
    let mut v = vec![0u8; n];
    getrandom::getrandom(&mut v)?;
    Ok(v)
}

/// A random non-zero sequence number (0 means "no bidirectional authentication" in a Reply).
pub fn random_seqnum() -> Result<u32, getrandom::Error> {
    loop {
        let mut b = [0u8; 4];
        getrandom::getrandom(&mut b)?;
        let v = u32::from_le_bytes(b);
        if v != 0 {
            return Ok(v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
    const SUBSYS: &str = "nqn.2024-01.io.rdmablk:auth";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // Vectors computed independently with Python's hmac/hashlib from the formula in the module
    // documentation (key = bytes 0..HL, challenge = bytes 0x40.., S = 0x01020304, T_ID 0x0506).
    #[test]
    fn responses_match_independent_vectors() {
        let c: Vec<u8> = (0x40..0x40 + 32).collect();
        let key: Vec<u8> = (0..32).collect();
        let i = ResponseInput {
            hash: HashId::Sha256,
            challenge: &c,
            seqnum: 0x0102_0304,
            t_id: 0x0506,
            host_nqn: HOST,
            subsys_nqn: SUBSYS,
        };
        assert_eq!(host_response(&key, &i), hex(R1_SHA256));
        assert_eq!(controller_response(&key, &i), hex(R2_SHA256));
        let ks: Vec<u8> = (0..=255).collect();
        assert_eq!(
            augmented_challenge(HashId::Sha256, Some(&ks), &c),
            hex(AUG_SHA256)
        );
        assert_eq!(augmented_challenge(HashId::Sha256, None, &c), c);
        let c48: Vec<u8> = (0x40..0x40 + 48).collect();
        let key48: Vec<u8> = (0..48).collect();
        let i = ResponseInput {
            hash: HashId::Sha384,
            challenge: &c48,
            ..i
        };
        assert_eq!(host_response(&key48, &i), hex(R1_SHA384));
    }

    const R1_SHA256: &str = "c639594e81042b5c65b3153f803f71bbe3fdfe14fd5c5a1f01b28512254c7321";
    const R2_SHA256: &str = "08bbf67b58d24d6742ebc579f559c107632e3c1f3575185169c1b67fcd67a1af";
    const AUG_SHA256: &str = "ee33acef1402d9ce81ddd89b5c3b67fc765868286bc2cf444bf133d5e59cd370";
    const R1_SHA384: &str = "8a234b22c9adcd17f088649218d93a0d72ecf770b4a7a37ab797c002b1813e65a7dd87e86fcc565ab063d5899ad8f985";

    #[test]
    fn constant_time_compare() {
        assert!(responses_match(&[1, 2, 3], &[1, 2, 3]));
        assert!(!responses_match(&[1, 2, 3], &[1, 2, 4]));
        assert!(!responses_match(&[1, 2], &[1, 2, 3]));
        assert_ne!(random_seqnum().unwrap(), 0);
    }
}
