//! The algorithms a DH-HMAC-CHAP transaction negotiates: the hash function (HASHID, also the
//! `DHHC-1` transformation hash) and the Diffie-Hellman group (DHGID), with the names nvme-cli
//! and nvmet's configfs use for them.

/// Hash functions of DH-HMAC-CHAP (HASHID), also the DHHC-1 transformation hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashId {
    Sha256 = 1,
    Sha384 = 2,
    Sha512 = 3,
}

impl HashId {
    pub const ALL: [HashId; 3] = [HashId::Sha256, HashId::Sha384, HashId::Sha512];

    pub fn from_id(id: u8) -> Option<HashId> {
        match id {
            1 => Some(HashId::Sha256),
            2 => Some(HashId::Sha384),
            3 => Some(HashId::Sha512),
            _ => None,
        }
    }

    pub fn id(self) -> u8 {
        self as u8
    }

    /// Digest length in bytes (HL).
    pub fn digest_len(self) -> usize {
        match self {
            HashId::Sha256 => 32,
            HashId::Sha384 => 48,
            HashId::Sha512 => 64,
        }
    }

    /// Name as nvme-cli and nvmet's configfs spell it ("sha256", or "hmac(sha256)" there).
    pub fn name(self) -> &'static str {
        match self {
            HashId::Sha256 => "sha256",
            HashId::Sha384 => "sha384",
            HashId::Sha512 => "sha512",
        }
    }

    /// Parses "sha256", "hmac(sha256)", "SHA-256" and the like.
    pub fn from_name(s: &str) -> Option<HashId> {
        let s = s.trim().to_ascii_lowercase().replace('-', "");
        let s = s
            .strip_prefix("hmac(")
            .and_then(|r| r.strip_suffix(')'))
            .unwrap_or(&s);
        HashId::ALL.into_iter().find(|h| h.name() == s)
    }
}

/// Diffie-Hellman groups of DH-HMAC-CHAP (DHGID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DhGroup {
    Null = 0,
    Ffdhe2048 = 1,
    Ffdhe3072 = 2,
    Ffdhe4096 = 3,
    Ffdhe6144 = 4,
    Ffdhe8192 = 5,
}

impl DhGroup {
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    pub fn from_id(id: u8) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.id() == id)
    }

    pub fn id(self) -> u8 {
        self as u8
    }

    /// Bytes of a public value (DHVLEN): the prime's size; 0 for the null group.
    pub fn value_len(self) -> usize {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 384,
            DhGroup::Ffdhe4096 => 512,
            DhGroup::Ffdhe6144 => 768,
            DhGroup::Ffdhe8192 => 1024,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    pub fn from_name(s: &str) -> Option<DhGroup> {
        let s = s.trim().to_ascii_lowercase();
        DhGroup::ALL.into_iter().find(|g| g.name() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(HashId::from_name("hmac(sha384)"), Some(HashId::Sha384));
        assert_eq!(HashId::from_name("SHA-512"), Some(HashId::Sha512));
        assert_eq!(DhGroup::from_name("ffdhe6144"), Some(DhGroup::Ffdhe6144));
        assert_eq!(DhGroup::from_id(6), None);
    }
}
