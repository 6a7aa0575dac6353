//! The 16-byte completion queue entry: the whole of a response capsule on NVMe/RDMA.
//!
//! ```text
//!  0            4            8         10        12        14              16
//! +------------+------------+---------+---------+---------+---------------+
//! | dw0 result | dw1        | sq_head | sq_id   | cid     | status | P    |
//! +------------+------------+---------+---------+---------+---------------+
//! status (bytes 14..16, little-endian u16): bit 0 phase tag P, bits 15:1 the status field
//! (see [`super::status`]).
//! ```
//!
//! The Linux host posts 16-byte receives and treats a shorter response as fatal; the phase tag
//! means nothing on a fabric (there is no shared ring) and is sent as 0.

use super::le::{put_u16, put_u32, u16_at, u32_at};
use super::status::Status;
use super::WireError;

/// Size of a completion queue entry.
pub const CQE_LEN: usize = 16;
const _: () = assert!(CQE_LEN == 16);

/// A completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cqe {
    /// Command specific result, dword 0 (Connect: cntlid; Property Get: value low half).
    pub dw0: u32,
    /// Command specific result, dword 1 (Property Get of an 8-byte property: high half).
    pub dw1: u32,
    /// Submission queue head pointer.
    pub sq_head: u16,
    /// Submission queue the command came from.
    pub sq_id: u16,
    /// The command's identifier.
    pub cid: u16,
    /// Completion status.
    pub status: Status,
    /// Phase tag.
    pub phase: bool,
}

impl Cqe {
    /// A successful completion of `cid` with result `dw0`.
    pub fn success(cid: u16, sq_id: u16, sq_head: u16, dw0: u32) -> Cqe {
        Cqe {
            dw0,
            sq_id,
            sq_head,
            cid,
            ..Cqe::default()
        }
    }

    /// A failed completion of `cid`.
    pub fn error(cid: u16, sq_id: u16, sq_head: u16, status: Status) -> Cqe {
        Cqe {
            sq_id,
            sq_head,
            cid,
            status,
            ..Cqe::default()
        }
    }

    /// The 64-bit result (dw1:dw0), e.g. an 8-byte Property Get value such as CAP.
    pub fn result64(&self) -> u64 {
        u64::from(self.dw1) << 32 | u64::from(self.dw0)
    }

    /// Sets dw0 and dw1 from a 64-bit result.
    pub fn set_result64(&mut self, v: u64) {
        self.dw0 = v as u32;
        self.dw1 = (v >> 32) as u32;
    }

    /// Decodes 16 bytes. Never fails: every bit pattern is a completion.
    pub fn decode(b: &[u8; CQE_LEN]) -> Cqe {
        let sf = u16_at(b, 14);
        Cqe {
            dw0: u32_at(b, 0),
            dw1: u32_at(b, 4),
            sq_head: u16_at(b, 8),
            sq_id: u16_at(b, 10),
            cid: u16_at(b, 12),
            status: Status::from_field(sf >> 1),
            phase: sf & 1 != 0,
        }
    }

    /// Decodes a received response capsule, which must be exactly 16 bytes.
    pub fn from_capsule(b: &[u8]) -> Result<Cqe, WireError> {
        let arr: &[u8; CQE_LEN] = b.try_into().map_err(|_| WireError::Length {
            what: "response capsule",
            len: b.len(),
            expected: CQE_LEN,
        })?;
        Ok(Cqe::decode(arr))
    }

    /// Encodes into `b`, every byte written.
    pub fn encode(&self, b: &mut [u8; CQE_LEN]) {
        put_u32(b, 0, self.dw0);
        put_u32(b, 4, self.dw1);
        put_u16(b, 8, self.sq_head);
        put_u16(b, 10, self.sq_id);
        put_u16(b, 12, self.cid);
        put_u16(b, 14, self.status.to_field() << 1 | u16::from(self.phase));
    }

    /// The encoded bytes.
    pub fn to_bytes(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        self.encode(&mut b);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::status::Sct;

    #[test]
    fn connect_success_bytes() {
        // Admin Connect answered with cntlid 1 in dw0, cid 0, sq_id 0, sq_head 1.
        let c = Cqe::success(0, 0, 1, 1);
        assert_eq!(
            c.to_bytes(),
            [1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn status_bits_and_phase() {
        // Status field 0x4182 (Connect Invalid Parameters, DNR) shifted above the phase bit.
        let b = [0, 2, 1, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0x34, 0x12, 0x05, 0x83];
        let c = Cqe::decode(&b);
        assert_eq!(c.dw0, 0x0001_0200);
        assert_eq!(c.sq_head, 5);
        assert_eq!(c.cid, 0x1234);
        assert!(c.phase);
        assert_eq!(c.status.sct, Sct::CommandSpecific);
        assert_eq!(c.status.sc, 0x82);
        assert!(c.status.dnr && !c.status.more);
        assert_eq!(c.to_bytes(), b);
    }

    #[test]
    fn result64_and_capsule_length() {
        let mut c = Cqe::default();
        c.set_result64(0x0000_0020_1E01_007F);
        assert_eq!(c.dw0, 0x1E01_007F);
        assert_eq!(c.dw1, 0x20);
        assert_eq!(c.result64(), 0x0000_0020_1E01_007F);
        assert!(Cqe::from_capsule(&[0u8; 15]).is_err());
        assert!(Cqe::from_capsule(&[0u8; 17]).is_err());
        assert_eq!(Cqe::from_capsule(&[0u8; 16]).unwrap(), Cqe::default());
    }
}
