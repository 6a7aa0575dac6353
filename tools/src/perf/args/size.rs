//! Sizes as fio writes them: [`ByteSize`] (`4k`, `1MiB`, 1024-based), `--bs`'s [`BsRange`]
//! (`4k-128k`), their errors and [`format_size`].

use std::fmt;
use std::str::FromStr;

/// A byte count parsed from `4096`, `4k`, `1M`, `1GiB`, ... (1024-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

/// An error in a size or range argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Empty or no digits.
    #[error("'{0}': expected a size like 4096, 4k, 128KiB, 1m or 1GiB")]
    Malformed(String),
    /// A suffix we do not know.
    #[error("'{input}': unknown size suffix '{suffix}' (use k, m, g, t, optionally KiB or KB)")]
    Suffix {
        /// The whole argument.
        input: String,
        /// The part after the digits.
        suffix: String,
    },
    /// Does not fit in 64 bits.
    #[error("'{0}': too large")]
    Overflow(String),
    /// `lo-hi` with lo > hi.
    #[error("'{0}': the low end of the range is above the high end")]
    InvertedRange(String),
}

impl FromStr for ByteSize {
    type Err = SizeError;

    fn from_str(s: &str) -> Result<Self, SizeError> {
        let t = s.trim();
        let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
        if digits_end == 0 {
            return Err(SizeError::Malformed(s.to_string()));
        }
        let n: u64 = t[..digits_end]
            .parse()
            .map_err(|_| SizeError::Overflow(s.to_string()))?;
        let suffix = &t[digits_end..];
        let shift = match suffix.to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => {
                return Err(SizeError::Suffix {
                    input: s.to_string(),
                    suffix: suffix.to_string(),
                })
            }
        };
        n.checked_mul(1u64 << shift)
            .map(ByteSize)
            .ok_or_else(|| SizeError::Overflow(s.to_string()))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

/// Formats bytes the way fio prints a block size: `4096` -> `4KiB`, `1000` -> `1000B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
    for (unit, shift) in UNITS {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

/// `--bs`: one size, or `lo-hi` (also `lo:hi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BsRange {
    /// Smallest I/O; every offset and length is a multiple of it.
    pub min: u64,
    /// Largest I/O.
    pub max: u64,
}

impl FromStr for BsRange {
    type Err = SizeError;

    fn from_str(s: &str) -> Result<Self, SizeError> {
        match s.split_once(['-', ':']) {
            None => {
                let b = s.parse::<ByteSize>()?.0;
                Ok(Self { min: b, max: b })
            }
            Some((lo, hi)) => {
                let (min, max) = (lo.parse::<ByteSize>()?.0, hi.parse::<ByteSize>()?.0);
                if min > max {
                    return Err(SizeError::InvertedRange(s.to_string()));
                }
                Ok(Self { min, max })
            }
        }
    }
}

impl fmt::Display for BsRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", format_size(self.min))
        } else {
            write!(f, "{}-{}", format_size(self.min), format_size(self.max))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_fio_suffixes_base_1024() {
        let cases = [
            ("4096", 4096),
            ("4k", 4096),
            ("4K", 4096),
            ("4KiB", 4096),
            ("4KB", 4096),
            ("128k", 128 << 10),
            ("1M", 1 << 20),
            ("1m", 1 << 20),
            ("1MiB", 1 << 20),
            ("1GiB", 1 << 30),
            ("2g", 2 << 30),
            ("1t", 1 << 40),
            ("512b", 512),
        ];
        for (s, want) in cases {
            assert_eq!(s.parse::<ByteSize>(), Ok(ByteSize(want)), "{s}");
        }
    }

    #[test]
    fn bad_sizes_are_rejected_with_the_reason() {
        assert!(matches!(
            "".parse::<ByteSize>(),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            "k".parse::<ByteSize>(),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            "-4k".parse::<ByteSize>(),
            Err(SizeError::Malformed(_))
        ));
        assert!(matches!(
            "4x".parse::<ByteSize>(),
            Err(SizeError::Suffix { .. })
        ));
        assert!(matches!(
            "4kk".parse::<ByteSize>(),
            Err(SizeError::Suffix { .. })
        ));
        assert!(matches!(
            "1.5k".parse::<ByteSize>(),
            Err(SizeError::Suffix { .. })
        ));
        assert!(matches!(
            "99999999999999999999".parse::<ByteSize>(),
            Err(SizeError::Overflow(_))
        ));
        assert!(matches!(
            "100000000t".parse::<ByteSize>(),
            Err(SizeError::Overflow(_))
        ));
    }

    #[test]
    fn bs_ranges() {
        assert_eq!(
            "4k".parse(),
            Ok(BsRange {
                min: 4096,
                max: 4096
            })
        );
        assert_eq!(
            "4k-128k".parse(),
            Ok(BsRange {
                min: 4096,
                max: 128 << 10
            })
        );
        assert_eq!(
            "4k:1m".parse(),
            Ok(BsRange {
                min: 4096,
                max: 1 << 20
            })
        );
        assert!(matches!(
            "128k-4k".parse::<BsRange>(),
            Err(SizeError::InvertedRange(_))
        ));
        assert!("4k-".parse::<BsRange>().is_err());
        assert_eq!(
            BsRange {
                min: 4096,
                max: 1 << 20
            }
            .to_string(),
            "4KiB-1MiB"
        );
    }
}
