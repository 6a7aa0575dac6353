//! Finite-field Diffie-Hellman over the RFC 7919 groups (ffdhe2048 .. ffdhe8192), generator 2,
//! as DH-HMAC-CHAP uses them: public values and shared secrets are big-endian and exactly the
//! prime's size (leading zeros kept), as Linux's `dh` KPP writes them.
//!
//! Arithmetic is crypto-bigint's constant-time Montgomery exponentiation. Private exponents
//! are 512 random bits for every group (RFC 7919 section 5.2 asks for at least twice the
//! group's security strength: at most 2 x 200 bits for ffdhe8192); they are zeroized when
//! dropped. A peer's public value must lie in 2 ..= p - 2.

use crypto_bigint::modular::runtime_mod::{DynResidue, DynResidueParams};
use crypto_bigint::{Uint, U512};
use zeroize::Zeroizing;

use super::DhGroup;

/// Bits of a private exponent.
pub const EXPONENT_BITS: usize = 512;

/// Why a DH computation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DhError {
    #[error("the null DH group has no exponentials")]
    NullGroup,
    #[error("peer's DH value is {got} bytes, more than the {group} prime's {max}")]
    ValueLength {
        group: &'static str,
        got: usize,
        max: usize,
    },
    #[error("peer's DH value is out of range (must be 2 ..= p - 2)")]
    ValueRange,
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

/// An ephemeral key pair in one group.
pub struct KeyPair {
    group: DhGroup,
    exponent: Zeroizing<[u8; EXPONENT_BITS / 8]>,
    public: Vec<u8>,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("group", &self.group)
            .field("exponent", &"<redacted>")
            .finish()
    }
}

impl KeyPair {
    /// A fresh key pair: a random exponent x and g^x mod p.
    pub fn generate(group: DhGroup) -> Result<KeyPair, DhError> {
        let mut exponent = Zeroizing::new([0u8; EXPONENT_BITS / 8]);
        getrandom::getrandom(&mut exponent[..]).map_err(|e| DhError::Random(e.to_string()))?;
        KeyPair::from_exponent(group, *exponent)
    }

    /// The key pair of a given exponent (big-endian; tests and vectors).
    pub fn from_exponent(
        group: DhGroup,
        exponent: [u8; EXPONENT_BITS / 8],
    ) -> Result<KeyPair, DhError> {
        let exponent = Zeroizing::new(exponent);
        let public = modpow(group, &[2], &exponent)?;
        Ok(KeyPair {
            group,
            exponent,
            public: public.to_vec(),
        })
    }

    pub fn group(&self) -> DhGroup {
        self.group
    }

    /// g^x mod p, big-endian, the prime's size.
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret peer^x mod p, big-endian, the prime's size.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Zeroizing<Vec<u8>>, DhError> {
        let max = self.group.value_len();
        if peer.len() > max {
            return Err(DhError::ValueLength {
                group: self.group.name(),
                got: peer.len(),
                max,
            });
        }
        modpow(self.group, peer, &self.exponent)
    }
}

fn modpow(group: DhGroup, base: &[u8], exp: &[u8; 64]) -> Result<Zeroizing<Vec<u8>>, DhError> {
    let x = Zeroizing::new(U512::from_be_slice(exp));
    match group {
        DhGroup::Null => Err(DhError::NullGroup),
        DhGroup::Ffdhe2048 => pow_in::<32>(P2048, base, &x),
        DhGroup::Ffdhe3072 => pow_in::<48>(P3072, base, &x),
        DhGroup::Ffdhe4096 => pow_in::<64>(P4096, base, &x),
        DhGroup::Ffdhe6144 => pow_in::<96>(P6144, base, &x),
        DhGroup::Ffdhe8192 => pow_in::<128>(P8192, base, &x),
    }
}

fn pow_in<const L: usize>(
    prime_hex: &str,
    base: &[u8],
    x: &U512,
) -> Result<Zeroizing<Vec<u8>>, DhError> {
    let p = Uint::<L>::from_be_hex(prime_hex);
    let mut padded = vec![0u8; L * 8];
    padded[L * 8 - base.len()..].copy_from_slice(base);
    let b = Uint::<L>::from_be_slice(&padded);
    // 2 <= b <= p - 2: rejects 0, 1 and p - 1 (small-subgroup values) and anything >= p.
    let two = Uint::<L>::from_u8(2);
    if b < two || b > p.wrapping_sub(&two) {
        return Err(DhError::ValueRange);
    }
    let params = DynResidueParams::new(&p);
    let r = DynResidue::new(&b, params).pow_bounded_exp(x, EXPONENT_BITS);
    let v = Zeroizing::new(r.retrieve());
    let mut out = Zeroizing::new(vec![0u8; L * 8]);
    for (i, w) in v.as_words().iter().enumerate() {
        let at = (L - 1 - i) * 8;
        out[at..at + 8].copy_from_slice(&w.to_be_bytes());
    }
    Ok(out)
}

/// RFC 7919 ffdhe2048 prime, big-endian hex.
const P2048: &str = concat!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695",
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A",
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935",
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A",
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4",
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61",
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005",
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B423861285C97FFFFFFFFFFFFFFFF",
);

/// RFC 7919 ffdhe3072 prime, big-endian hex.
const P3072: &str = concat!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695",
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A",
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935",
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A",
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4",
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61",
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005",
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B4238611FCFDCDE355B3B6519035B",
    "BC34F4DEF99C023861B46FC9D6E6C9077AD91D2691F7F7EE598CB0FAC186D91C",
    "AEFE130985139270B4130C93BC437944F4FD4452E2D74DD364F2E21E71F54BFF",
    "5CAE82AB9C9DF69EE86D2BC522363A0DABC521979B0DEADA1DBF9A42D5C4484E",
    "0ABCD06BFA53DDEF3C1B20EE3FD59D7C25E41D2B66C62E37FFFFFFFFFFFFFFFF",
);

/// RFC 7919 ffdhe4096 prime, big-endian hex.
const P4096: &str = concat!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695",
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A",
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935",
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A",
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4",
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61",
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005",
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B4238611FCFDCDE355B3B6519035B",
    "BC34F4DEF99C023861B46FC9D6E6C9077AD91D2691F7F7EE598CB0FAC186D91C",
    "AEFE130985139270B4130C93BC437944F4FD4452E2D74DD364F2E21E71F54BFF",
    "5CAE82AB9C9DF69EE86D2BC522363A0DABC521979B0DEADA1DBF9A42D5C4484E",
    "0ABCD06BFA53DDEF3C1B20EE3FD59D7C25E41D2B669E1EF16E6F52C3164DF4FB",
    "7930E9E4E58857B6AC7D5F42D69F6D187763CF1D5503400487F55BA57E31CC7A",
    "7135C886EFB4318AED6A1E012D9E6832A907600A918130C46DC778F971AD0038",
    "092999A333CB8B7A1A1DB93D7140003C2A4ECEA9F98D0ACC0A8291CDCEC97DCF",
    "8EC9B55A7F88A46B4DB5A851F44182E1C68A007E5E655F6AFFFFFFFFFFFFFFFF",
);

/// RFC 7919 ffdhe6144 prime, big-endian hex.
const P6144: &str = concat!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695",
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A",
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935",
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A",
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4",
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61",
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005",
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B4238611FCFDCDE355B3B6519035B",
    "BC34F4DEF99C023861B46FC9D6E6C9077AD91D2691F7F7EE598CB0FAC186D91C",
    "AEFE130985139270B4130C93BC437944F4FD4452E2D74DD364F2E21E71F54BFF",
    "5CAE82AB9C9DF69EE86D2BC522363A0DABC521979B0DEADA1DBF9A42D5C4484E",
    "0ABCD06BFA53DDEF3C1B20EE3FD59D7C25E41D2B669E1EF16E6F52C3164DF4FB",
    "7930E9E4E58857B6AC7D5F42D69F6D187763CF1D5503400487F55BA57E31CC7A",
    "7135C886EFB4318AED6A1E012D9E6832A907600A918130C46DC778F971AD0038",
    "092999A333CB8B7A1A1DB93D7140003C2A4ECEA9F98D0ACC0A8291CDCEC97DCF",
    "8EC9B55A7F88A46B4DB5A851F44182E1C68A007E5E0DD9020BFD64B645036C7A",
    "4E677D2C38532A3A23BA4442CAF53EA63BB454329B7624C8917BDD64B1C0FD4C",
    "B38E8C334C701C3ACDAD0657FCCFEC719B1F5C3E4E46041F388147FB4CFDB477",
    "A52471F7A9A96910B855322EDB6340D8A00EF092350511E30ABEC1FFF9E3A26E",
    "7FB29F8C183023C3587E38DA0077D9B4763E4E4B94B2BBC194C6651E77CAF992",
    "EEAAC0232A281BF6B3A739C1226116820AE8DB5847A67CBEF9C9091B462D538C",
    "D72B03746AE77F5E62292C311562A846505DC82DB854338AE49F5235C95B9117",
    "8CCF2DD5CACEF403EC9D1810C6272B045B3B71F9DC6B80D63FDD4A8E9ADB1E69",
    "62A69526D43161C1A41D570D7938DAD4A40E329CD0E40E65FFFFFFFFFFFFFFFF",
);

/// RFC 7919 ffdhe8192 prime, big-endian hex.
const P8192: &str = concat!(
    "FFFFFFFFFFFFFFFFADF85458A2BB4A9AAFDC5620273D3CF1D8B9C583CE2D3695",
    "A9E13641146433FBCC939DCE249B3EF97D2FE363630C75D8F681B202AEC4617A",
    "D3DF1ED5D5FD65612433F51F5F066ED0856365553DED1AF3B557135E7F57C935",
    "984F0C70E0E68B77E2A689DAF3EFE8721DF158A136ADE73530ACCA4F483A797A",
    "BC0AB182B324FB61D108A94BB2C8E3FBB96ADAB760D7F4681D4F42A3DE394DF4",
    "AE56EDE76372BB190B07A7C8EE0A6D709E02FCE1CDF7E2ECC03404CD28342F61",
    "9172FE9CE98583FF8E4F1232EEF28183C3FE3B1B4C6FAD733BB5FCBC2EC22005",
    "C58EF1837D1683B2C6F34A26C1B2EFFA886B4238611FCFDCDE355B3B6519035B",
    "BC34F4DEF99C023861B46FC9D6E6C9077AD91D2691F7F7EE598CB0FAC186D91C",
    "AEFE130985139270B4130C93BC437944F4FD4452E2D74DD364F2E21E71F54BFF",
    "5CAE82AB9C9DF69EE86D2BC522363A0DABC521979B0DEADA1DBF9A42D5C4484E",
    "0ABCD06BFA53DDEF3C1B20EE3FD59D7C25E41D2B669E1EF16E6F52C3164DF4FB",
    "7930E9E4E58857B6AC7D5F42D69F6D187763CF1D5503400487F55BA57E31CC7A",
    "7135C886EFB4318AED6A1E012D9E6832A907600A918130C46DC778F971AD0038",
    "092999A333CB8B7A1A1DB93D7140003C2A4ECEA9F98D0ACC0A8291CDCEC97DCF",
    "8EC9B55A7F88A46B4DB5A851F44182E1C68A007E5E0DD9020BFD64B645036C7A",
    "4E677D2C38532A3A23BA4442CAF53EA63BB454329B7624C8917BDD64B1C0FD4C",
    "B38E8C334C701C3ACDAD0657FCCFEC719B1F5C3E4E46041F388147FB4CFDB477",
    "A52471F7A9A96910B855322EDB6340D8A00EF092350511E30ABEC1FFF9E3A26E",
    "7FB29F8C183023C3587E38DA0077D9B4763E4E4B94B2BBC194C6651E77CAF992",
    "EEAAC0232A281BF6B3A739C1226116820AE8DB5847A67CBEF9C9091B462D538C",
    "D72B03746AE77F5E62292C311562A846505DC82DB854338AE49F5235C95B9117",
    "8CCF2DD5CACEF403EC9D1810C6272B045B3B71F9DC6B80D63FDD4A8E9ADB1E69",
    "62A69526D43161C1A41D570D7938DAD4A40E329CCFF46AAA36AD004CF600C838",
    "1E425A31D951AE64FDB23FCEC9509D43687FEB69EDD1CC5E0B8CC3BDF64B10EF",
    "86B63142A3AB8829555B2F747C932665CB2C0F1CC01BD70229388839D2AF05E4",
    "54504AC78B7582822846C0BA35C35F5C59160CC046FD8251541FC68C9C86B022",
    "BB7099876A460E7451A8A93109703FEE1C217E6C3826E52C51AA691E0E423CFC",
    "99E9E31650C1217B624816CDAD9A95F9D5B8019488D9C0A0A1FE3075A577E231",
    "83F81D4A3F2FA4571EFC8CE0BA8A4FE8B6855DFE72B0A66EDED2FBABFBE58A30",
    "FAFABE1C5D71A87E2F741EF8C1FE86FEA6BBFDE530677F0D97D11D49F7A8443D",
    "0822E506A9F4614E011E2A94838FF88CD68C8BB7C5C6424CFFFFFFFFFFFFFFFF",
);

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(last: u8) -> [u8; 64] {
        let mut e = [0u8; 64];
        e[63] = last;
        e
    }

    #[test]
    fn small_exponent_matches_shifted_generator() {
        // 2^10 = 1024: the public value of exponent 10 in every group.
        for g in &DhGroup::ALL[1..] {
            let k = KeyPair::from_exponent(*g, exp(10)).unwrap();
            assert_eq!(k.public().len(), g.value_len());
            let n = k.public().len();
            assert!(k.public()[..n - 2].iter().all(|b| *b == 0));
            assert_eq!(&k.public()[n - 2..], &[4, 0]);
        }
    }

    #[test]
    fn both_sides_agree() {
        for g in [DhGroup::Ffdhe2048, DhGroup::Ffdhe8192] {
            let a = KeyPair::generate(g).unwrap();
            let b = KeyPair::generate(g).unwrap();
            let s1 = a.shared_secret(b.public()).unwrap();
            let s2 = b.shared_secret(a.public()).unwrap();
            assert_eq!(*s1, *s2);
            assert_eq!(s1.len(), g.value_len());
            assert_ne!(a.public(), b.public());
        }
    }

    #[test]
    fn known_vector_ffdhe2048() {
        // (2^0x1234 mod p)^0x77 mod p, computed with Python's pow() over the RFC 7919 prime.
        let a = KeyPair::from_exponent(DhGroup::Ffdhe2048, {
            let mut e = [0u8; 64];
            e[62] = 0x12;
            e[63] = 0x34;
            e
        })
        .unwrap();
        let b = KeyPair::from_exponent(DhGroup::Ffdhe2048, exp(0x77)).unwrap();
        let s = b.shared_secret(a.public()).unwrap();
        assert_eq!(hex(&s), VECTOR_2048);
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    const VECTOR_2048: &str = "60b69c9311934775927f2b42120c49e0f8c3bf38e3181af939d055794c0257483f080e33d3b2c0e8d70e26692b09e0efd7f86866272cd916a0e4e87728d2f79346a4fadffeb4f996e0ac328ae5180f3426bcf356b556bef679dd4b7e29ea806cc392bf8ff09bb16ae1c8fa18f646f8c666d8dd292c5d4e8442a460b8082526a715e2519bbe981cac1d46fc5b3b7b1f6498f370792aab8eab22f78f090b341845b1ae98dc8ee64ef8d061a7be150f04594fcaeed02590ffdda17ec2cc2ae0ac4f68d1185da586c2847174265f2ab19f7851efb3eba6be2a9d10131ac20b7e8757817455855692f5b069972faa6638f680033caa387d1b085cada1357402ad67b7";

    #[test]
    fn bad_peer_values_are_refused() {
        let k = KeyPair::generate(DhGroup::Ffdhe2048).unwrap();
        assert_eq!(k.shared_secret(&[1]), Err(DhError::ValueRange));
        assert_eq!(k.shared_secret(&[0; 256]), Err(DhError::ValueRange));
        assert_eq!(k.shared_secret(&[0xFF; 256]), Err(DhError::ValueRange));
        assert!(matches!(
            k.shared_secret(&[1; 257]),
            Err(DhError::ValueLength { .. })
        ));
        assert!(format!("{k:?}").contains("redacted"));
    }
}
