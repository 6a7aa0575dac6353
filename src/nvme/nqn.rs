//! NVMe Qualified Names as they sit in 256-byte wire fields (Connect data, Identify
//! Controller SUBNQN): UTF-8, NUL-terminated, at most 223 bytes before the NUL.

use std::fmt;

use super::WireError;

/// Size of an NQN field on the wire.
pub const NQN_FIELD_LEN: usize = 256;
/// Longest NQN in bytes, terminating NUL excluded.
pub const NQN_MAX_LEN: usize = 223;

/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// A validated NQN: 1..=223 bytes of UTF-8 without control characters or NUL.
///
/// No `nqn.` prefix is required: nvmet lets an administrator name a subsystem anything
/// (`testnqn` is common), and rejecting such names would break interoperability.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nqn(String);

impl Nqn {
    /// Validates `s`.
    pub fn new(s: &str) -> Result<Nqn, WireError> {
        if s.is_empty() {
            return Err(WireError::field("NQN", "empty"));
        }
        if s.len() > NQN_MAX_LEN {
            return Err(WireError::field(
                "NQN",
                format!("{} bytes, the limit is {NQN_MAX_LEN}", s.len()),
            ));
        }
        if let Some(c) = s.chars().find(|c| c.is_control()) {
            return Err(WireError::field(
                "NQN",
                format!("contains control character {:#x}", u32::from(c)),
            ));
        }
        Ok(Nqn(s.to_owned()))
    }

    /// Parses a 256-byte wire field: the NQN ends at the first NUL, which must come within
    /// the first 224 bytes. Bytes after the NUL are not looked at (nvmet does not either).
    pub fn from_field(field: &[u8; NQN_FIELD_LEN]) -> Result<Nqn, WireError> {
        let len = field
            .iter()
            .position(|&c| c == 0)
            .ok_or_else(|| WireError::field("NQN", "not NUL-terminated"))?;
        if len > NQN_MAX_LEN {
            return Err(WireError::field(
                "NQN",
                format!("{len} bytes, the limit is {NQN_MAX_LEN}"),
            ));
        }
        let s = std::str::from_utf8(&field[..len])
            .map_err(|e| WireError::field("NQN", format!("not UTF-8: {e}")))?;
        Nqn::new(s)
    }

    /// The 256-byte wire field: the name, then NULs.
    pub fn to_field(&self) -> [u8; NQN_FIELD_LEN] {
        let mut f = [0u8; NQN_FIELD_LEN];
        f[..self.0.len()].copy_from_slice(self.0.as_bytes());
        f
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Nqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Nqn {
    type Err = WireError;
    fn from_str(s: &str) -> Result<Nqn, WireError> {
        Nqn::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_roundtrip() {
        let n = Nqn::new("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001")
            .unwrap();
        let f = n.to_field();
        assert_eq!(f[n.as_str().len()], 0);
        assert_eq!(Nqn::from_field(&f).unwrap(), n);
        assert!(Nqn::new("testnqn").is_ok());
    }

    #[test]
    fn limits() {
        assert!(Nqn::new(&"a".repeat(223)).is_ok());
        assert!(Nqn::new(&"a".repeat(224)).is_err());
        assert!(Nqn::new("").is_err());
        assert!(Nqn::new("a\nb").is_err());
        let mut f = [b'a'; NQN_FIELD_LEN];
        assert!(Nqn::from_field(&f).is_err(), "unterminated");
        f[224] = 0;
        assert!(Nqn::from_field(&f).is_err(), "224 bytes");
        f[223] = 0;
        assert!(Nqn::from_field(&f).is_ok());
        f[0] = 0;
        assert!(Nqn::from_field(&f).is_err(), "empty");
        let mut g = [0u8; NQN_FIELD_LEN];
        g[..2].copy_from_slice(&[0xC3, 0x28]);
        assert!(Nqn::from_field(&g).is_err(), "bad UTF-8");
    }
}
