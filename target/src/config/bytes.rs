//! Byte sizes in the configuration: an integer (bytes) or a string with a binary suffix.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A size in bytes, written in TOML either as an integer (`268435456`, bytes) or as a string
/// with an optional binary suffix: `"256MiB"`, `"1 GiB"`, `"4096"`, `"512KiB"`. Accepted
/// suffixes: `B`, `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024; also `K`/`M`/`G`/`T`).
/// Decimal suffixes (`MB`, `GB`) are refused rather than guessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// Parses the string form (see the type's documentation).
    pub fn parse(s: &str) -> Result<ByteSize, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !c.is_ascii_digit() && c != '_')
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let num: String = num.chars().filter(|&c| c != '_').collect();
        if num.is_empty() {
            return Err(format!(
                "{s:?} is not a size (write e.g. 1073741824, \"1GiB\" or \"512MiB\")"
            ));
        }
        let n: u64 = num
            .parse()
            .map_err(|_| format!("{s:?}: number too large"))?;
        let shift = match unit.trim() {
            "" | "B" => 0,
            "K" | "KiB" => 10,
            "M" | "MiB" => 20,
            "G" | "GiB" => 30,
            "T" | "TiB" => 40,
            other => {
                return Err(format!(
                    "{s:?}: unknown unit {other:?} (use B, KiB, MiB, GiB or TiB; sizes are binary)"
                ))
            }
        };
        n.checked_mul(1u64 << shift)
            .map(ByteSize)
            .ok_or_else(|| format!("{s:?}: size overflows 64 bits"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
        for (name, shift) in UNITS {
            let unit = 1u64 << shift;
            if self.0 >= unit && self.0 % unit == 0 {
                return write!(f, "{} {name}", self.0 / unit);
            }
        }
        write!(f, "{} B", self.0)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ByteSize;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size: an integer number of bytes or a string like \"256MiB\"")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSize, E> {
                u64::try_from(v)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("size {v} is negative")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSize, E> {
                ByteSize::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_suffixes_and_refuses_decimal_ones() {
        assert_eq!(ByteSize::parse("4096").unwrap().0, 4096);
        assert_eq!(ByteSize::parse("1GiB").unwrap().0, 1 << 30);
        assert_eq!(ByteSize::parse("256 MiB").unwrap().0, 256 << 20);
        assert_eq!(ByteSize::parse("1_024KiB").unwrap().0, 1 << 20);
        assert!(ByteSize::parse("1GB").is_err());
        assert!(ByteSize::parse("MiB").is_err());
        assert!(ByteSize::parse("99999999999TiB").is_err());
        assert_eq!(ByteSize(256 << 20).to_string(), "256 MiB");
        assert_eq!(ByteSize(1000).to_string(), "1000 B");
    }
}
