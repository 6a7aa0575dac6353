//! Errors of decoding wire data that is not an NVMe command (those fail with a [`Status`]).
//!
//! [`Status`]: super::Status

/// A malformed structure received from a peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer is not the structure's size.
    #[error("{what}: {len} bytes, expected {expected} (peer sent a truncated or foreign record)")]
    Length {
        what: &'static str,
        len: usize,
        expected: usize,
    },
    /// A record format other than the one this code speaks.
    #[error("{what}: record format {found}, expected 0 (peer speaks a newer format)")]
    RecordFormat { what: &'static str, found: u16 },
    /// A field's value is out of range or inconsistent.
    #[error("{what}: {detail}")]
    Field { what: &'static str, detail: String },
}

impl WireError {
    pub(crate) fn field(what: &'static str, detail: impl Into<String>) -> WireError {
        WireError::Field {
            what,
            detail: detail.into(),
        }
    }
}
