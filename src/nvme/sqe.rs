//! The 64-byte submission queue entry, the head of every command capsule.
//!
//! ```text
//!  0      1      2      4            8        12       16              24
//! +------+------+------+------------+--------+--------+---------------+
//! |opcode|flags | cid  | nsid       | cdw2   | cdw3   | mptr u64      |
//! +------+------+------+------------+--------+--------+---------------+
//! 24                             40      44      48      52      56      60     64
//! +------------------------------+-------+-------+-------+-------+-------+-------+
//! | dptr: SGL descriptor (16)    | cdw10 | cdw11 | cdw12 | cdw13 | cdw14 | cdw15 |
//! +------------------------------+-------+-------+-------+-------+-------+-------+
//! flags: bits 1:0 FUSE, bits 7:6 PSDT (01: SGL, metadata in one buffer; NVMe/RDMA uses 01)
//! Fabrics commands (opcode 0x7F) put fctype at byte 4, the low byte of nsid.
//! ```

use super::le::{array_at, put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use super::sgl::Sgl;
use super::status::Status;
use super::WireError;

/// Size of a submission queue entry.
pub const SQE_LEN: usize = 64;
const _: () = assert!(SQE_LEN == 64);
const _: () = assert!(std::mem::size_of::<[u8; SQE_LEN]>() == 64);

/// `flags` PSDT = 01: data pointer is an SGL (the value every NVMe/RDMA command carries).
pub const FLAGS_PSDT_SGL: u8 = 0x40;
/// `flags` PSDT mask (bits 7:6).
pub const FLAGS_PSDT_MASK: u8 = 0xC0;
/// `flags` FUSE mask (bits 1:0).
pub const FLAGS_FUSE_MASK: u8 = 0x03;

/// A submission queue entry with every field by name. Any 64 bytes decode to one; the meaning
/// of the command dwords is given by the command views ([`super::fabrics`], [`super::admin`],
/// [`super::io`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sqe {
    /// Command opcode (byte 0).
    pub opcode: u8,
    /// FUSE and PSDT (byte 1).
    pub flags: u8,
    /// Command identifier (bytes 2..4).
    pub cid: u16,
    /// Namespace identifier (bytes 4..8); byte 4 is fctype for Fabrics commands.
    pub nsid: u32,
    /// Command dword 2 (bytes 8..12).
    pub cdw2: u32,
    /// Command dword 3 (bytes 12..16).
    pub cdw3: u32,
    /// Metadata pointer (bytes 16..24).
    pub mptr: u64,
    /// Data pointer: one SGL descriptor (bytes 24..40).
    pub dptr: [u8; 16],
    /// Command dword 10 (bytes 40..44).
    pub cdw10: u32,
    /// Command dword 11 (bytes 44..48).
    pub cdw11: u32,
    /// Command dword 12 (bytes 48..52).
    pub cdw12: u32,
    /// Command dword 13 (bytes 52..56).
    pub cdw13: u32,
    /// Command dword 14 (bytes 56..60).
    pub cdw14: u32,
    /// Command dword 15 (bytes 60..64).
    pub cdw15: u32,
}

impl Sqe {
    /// A command with `opcode`, `cid`, PSDT = SGL and everything else zero.
    pub fn new(opcode: u8, cid: u16) -> Sqe {
        Sqe {
            opcode,
            cid,
            flags: FLAGS_PSDT_SGL,
            ..Sqe::default()
        }
    }

    /// Decodes 64 bytes. Never fails: field checks belong to the command views.
    pub fn decode(b: &[u8; SQE_LEN]) -> Sqe {
        Sqe {
            opcode: b[0],
            flags: b[1],
            cid: u16_at(b, 2),
            nsid: u32_at(b, 4),
            cdw2: u32_at(b, 8),
            cdw3: u32_at(b, 12),
            mptr: u64_at(b, 16),
            dptr: array_at(b, 24),
            cdw10: u32_at(b, 40),
            cdw11: u32_at(b, 44),
            cdw12: u32_at(b, 48),
            cdw13: u32_at(b, 52),
            cdw14: u32_at(b, 56),
            cdw15: u32_at(b, 60),
        }
    }

    /// Encodes into `b`, every byte written.
    pub fn encode(&self, b: &mut [u8; SQE_LEN]) {
        b[0] = self.opcode;
        b[1] = self.flags;
        put_u16(b, 2, self.cid);
        put_u32(b, 4, self.nsid);
        put_u32(b, 8, self.cdw2);
        put_u32(b, 12, self.cdw3);
        put_u64(b, 16, self.mptr);
        b[24..40].copy_from_slice(&self.dptr);
        for (i, dw) in self.cdws().into_iter().enumerate() {
            put_u32(b, 40 + 4 * i, dw);
        }
    }

    /// The encoded bytes.
    pub fn to_bytes(&self) -> [u8; SQE_LEN] {
        let mut b = [0u8; SQE_LEN];
        self.encode(&mut b);
        b
    }

    /// Splits a received command capsule into its SQE and in-capsule data. A capsule shorter
    /// than 64 bytes is a transport error (the connection must be torn down).
    pub fn from_capsule(capsule: &[u8]) -> Result<(Sqe, &[u8]), WireError> {
        match capsule.split_first_chunk::<SQE_LEN>() {
            Some((head, data)) => Ok((Sqe::decode(head), data)),
            None => Err(WireError::Length {
                what: "command capsule",
                len: capsule.len(),
                expected: SQE_LEN,
            }),
        }
    }

    /// cdw10..cdw15 in order.
    pub fn cdws(&self) -> [u32; 6] {
        [
            self.cdw10, self.cdw11, self.cdw12, self.cdw13, self.cdw14, self.cdw15,
        ]
    }

    /// Fabrics command type (byte 4), meaningful when `opcode` is 0x7F.
    pub fn fctype(&self) -> u8 {
        self.nsid as u8
    }

    /// Sets the Fabrics command type (byte 4), leaving bytes 5..8 as they are.
    pub fn set_fctype(&mut self, fctype: u8) {
        self.nsid = (self.nsid & !0xFF) | u32::from(fctype);
    }

    /// FUSE (flags bits 1:0).
    pub fn fuse(&self) -> u8 {
        self.flags & FLAGS_FUSE_MASK
    }

    /// PSDT (flags bits 7:6).
    pub fn psdt(&self) -> u8 {
        (self.flags & FLAGS_PSDT_MASK) >> 6
    }

    /// Checks flags as an NVMe-oF controller must: no fused operations, PSDT = SGL.
    /// (nvmet fails either with Invalid Field, DNR.)
    pub fn check_fabrics_flags(&self) -> Result<(), Status> {
        if self.fuse() != 0 || self.flags & FLAGS_PSDT_MASK != FLAGS_PSDT_SGL {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        Ok(())
    }

    /// Decodes the data pointer's SGL descriptor.
    pub fn sgl(&self) -> Result<Sgl, Status> {
        Sgl::decode(&self.dptr)
    }

    /// Sets the data pointer to `sgl`.
    pub fn set_sgl(&mut self, sgl: &Sgl) {
        self.dptr = sgl.encode();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::sgl::KeyedSgl;

    #[test]
    fn field_offsets() {
        let mut b = [0u8; 64];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8;
        }
        let s = Sqe::decode(&b);
        assert_eq!(s.opcode, 0);
        assert_eq!(s.flags, 1);
        assert_eq!(s.cid, 0x0302);
        assert_eq!(s.nsid, 0x0706_0504);
        assert_eq!(s.fctype(), 4);
        assert_eq!(s.cdw2, 0x0B0A_0908);
        assert_eq!(s.cdw3, 0x0F0E_0D0C);
        assert_eq!(s.mptr, 0x1716_1514_1312_1110);
        assert_eq!(s.dptr[0], 24);
        assert_eq!(s.dptr[15], 39);
        assert_eq!(s.cdw10, 0x2B2A_2928);
        assert_eq!(s.cdw15, 0x3F3E_3D3C);
        assert_eq!(s.to_bytes(), b);
    }

    #[test]
    fn capsule_split_and_short_capsule() {
        let mut cap = [0u8; 80];
        cap[0] = 0x01;
        cap[64] = 0xAA;
        let (s, data) = Sqe::from_capsule(&cap).unwrap();
        assert_eq!(s.opcode, 1);
        assert_eq!(data, &cap[64..]);
        assert!(matches!(
            Sqe::from_capsule(&cap[..63]),
            Err(WireError::Length {
                len: 63,
                expected: 64,
                ..
            })
        ));
    }

    #[test]
    fn flags_and_sgl() {
        let mut s = Sqe::new(0x02, 7);
        assert_eq!(s.psdt(), 1);
        assert!(s.check_fabrics_flags().is_ok());
        let k = Sgl::Keyed(KeyedSgl {
            addr: 0x1000,
            len: 512,
            key: 9,
            invalidate: true,
        });
        s.set_sgl(&k);
        assert_eq!(s.sgl(), Ok(k));
        s.set_fctype(0x01);
        assert_eq!(s.fctype(), 1);
        s.flags = 0x41;
        assert_eq!(
            s.check_fabrics_flags(),
            Err(Status::INVALID_FIELD.with_dnr())
        );
        s.flags = 0x00;
        assert_eq!(
            s.check_fabrics_flags(),
            Err(Status::INVALID_FIELD.with_dnr())
        );
    }
}
