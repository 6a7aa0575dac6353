//! The CM reject record ([`CmReject`]) and its status values ([`CmRejectStatus`]).

use std::fmt;

use super::{CM_REJECT_LEN, RECFMT_1_0};
use crate::nvme::le::{put_u16, u16_at};
use crate::nvme::WireError;

/// Reject status (`sts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmRejectStatus {
    /// 1: private data too short.
    InvalidLength,
    /// 2: record format not 0.
    InvalidRecordFormat,
    /// 3: queue ID out of range or in use.
    InvalidQid,
    /// 4: host send queue size out of range.
    InvalidHsqsize,
    /// 5: host receive queue size out of range.
    InvalidHrqsize,
    /// 6: no resources.
    NoResources,
    /// 7: invalid IRD (responder resources).
    InvalidIrd,
    /// 8: invalid ORD (initiator depth).
    InvalidOrd,
    /// Any other value, kept for exact roundtrips.
    Unknown(u16),
}

impl CmRejectStatus {
    /// From the wire value.
    pub fn from_u16(v: u16) -> CmRejectStatus {
        use CmRejectStatus::*;
        match v {
            1 => InvalidLength,
            2 => InvalidRecordFormat,
            3 => InvalidQid,
            4 => InvalidHsqsize,
            5 => InvalidHrqsize,
            6 => NoResources,
            7 => InvalidIrd,
            8 => InvalidOrd,
            other => Unknown(other),
        }
    }

    /// The wire value.
    pub fn to_u16(self) -> u16 {
        use CmRejectStatus::*;
        match self {
            InvalidLength => 1,
            InvalidRecordFormat => 2,
            InvalidQid => 3,
            InvalidHsqsize => 4,
            InvalidHrqsize => 5,
            NoResources => 6,
            InvalidIrd => 7,
            InvalidOrd => 8,
            Unknown(v) => v,
        }
    }
}

impl fmt::Display for CmRejectStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use CmRejectStatus::*;
        let s = match self {
            InvalidLength => "invalid private data length",
            InvalidRecordFormat => "invalid record format",
            InvalidQid => "invalid queue ID",
            InvalidHsqsize => "invalid host SQ size",
            InvalidHrqsize => "invalid host RQ size",
            NoResources => "no resources",
            InvalidIrd => "invalid IRD",
            InvalidOrd => "invalid ORD",
            Unknown(v) => return write!(f, "unrecognized reject status {v}"),
        };
        f.write_str(s)
    }
}

/// The CM reject private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReject {
    /// Why.
    pub status: CmRejectStatus,
}

impl CmReject {
    /// Decodes received private data (at least 4 bytes).
    pub fn decode(b: &[u8]) -> Result<CmReject, WireError> {
        let b: &[u8; CM_REJECT_LEN] = b
            .get(..CM_REJECT_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(WireError::Length {
                what: "RDMA CM reject private data",
                len: b.len(),
                expected: CM_REJECT_LEN,
            })?;
        let recfmt = u16_at(b, 0);
        if recfmt != RECFMT_1_0 {
            return Err(WireError::RecordFormat {
                what: "RDMA CM reject",
                found: recfmt,
            });
        }
        Ok(CmReject {
            status: CmRejectStatus::from_u16(u16_at(b, 2)),
        })
    }

    /// Encodes the record.
    pub fn encode(&self) -> [u8; CM_REJECT_LEN] {
        let mut b = [0u8; CM_REJECT_LEN];
        put_u16(&mut b, 0, RECFMT_1_0);
        put_u16(&mut b, 2, self.status.to_u16());
        b
    }
}
