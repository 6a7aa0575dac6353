//! NVM command set I/O commands: Read (0x02), Write (0x01), Flush (0x00), Write Zeroes
//! (0x08), Dataset Management (0x09) and its 16-byte range entries.
//!
//! ```text
//! Read / Write:  nsid; cdw10-11 SLBA u64; cdw12 bits 15:0 NLB (0-based), 30 FUA, 31 LR;
//!                cdw13 bits 7:0 DSM hints
//! Write Zeroes:  nsid; cdw10-11 SLBA; cdw12 bits 15:0 NLB (0-based), 25 DEAC, 30 FUA, 31 LR
//! Flush:         nsid
//! DSM:           nsid; cdw10 bits 7:0 NR (ranges - 1); cdw11 bit 0 IDR, 1 IDW, 2 AD (deallocate)
//! DSM range (16 bytes): context attributes u32 @0 | NLB u32 @4 (a count, not 0-based) |
//!                SLBA u64 @8
//! ```

use super::le::{put_u32, put_u64, u32_at, u64_at};
use super::opcodes::io;
use super::sqe::Sqe;
use super::status::Status;

const FUA: u32 = 1 << 30;
const LR: u32 = 1 << 31;
const DEAC: u32 = 1 << 25;

/// Checks that `blocks` blocks from `slba` lie within a namespace of `nsze` blocks.
pub fn check_lba_range(slba: u64, blocks: u64, nsze: u64) -> Result<(), Status> {
    match slba.checked_add(blocks) {
        Some(end) if end <= nsze => Ok(()),
        _ => Err(Status::LBA_OUT_OF_RANGE.with_dnr()),
    }
}

/// Read or Write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadWrite {
    /// Namespace.
    pub nsid: u32,
    /// Starting LBA.
    pub slba: u64,
    /// Number of blocks, 0-based.
    pub nlb: u16,
    /// Force unit access.
    pub fua: bool,
    /// Limited retry.
    pub lr: bool,
    /// Dataset management hints (cdw13 bits 7:0).
    pub dsm: u8,
}

impl ReadWrite {
    /// Reads the fields of a Read or Write SQE.
    pub fn from_sqe(sqe: &Sqe) -> ReadWrite {
        ReadWrite {
            nsid: sqe.nsid,
            slba: u64::from(sqe.cdw10) | u64::from(sqe.cdw11) << 32,
            nlb: sqe.cdw12 as u16,
            fua: sqe.cdw12 & FUA != 0,
            lr: sqe.cdw12 & LR != 0,
            dsm: sqe.cdw13 as u8,
        }
    }

    /// The SQE with `opcode` ([`io::READ`] or [`io::WRITE`]); data pointer left to set.
    pub fn to_sqe(&self, opcode: u8, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(opcode, cid);
        sqe.nsid = self.nsid;
        sqe.cdw10 = self.slba as u32;
        sqe.cdw11 = (self.slba >> 32) as u32;
        sqe.cdw12 =
            u32::from(self.nlb) | if self.fua { FUA } else { 0 } | if self.lr { LR } else { 0 };
        sqe.cdw13 = u32::from(self.dsm);
        sqe
    }

    /// Number of blocks (NLB + 1).
    pub fn blocks(&self) -> u32 {
        u32::from(self.nlb) + 1
    }

    /// Transfer length for blocks of `block_bytes`.
    pub fn byte_len(&self, block_bytes: u32) -> u64 {
        u64::from(self.blocks()) * u64::from(block_bytes)
    }

    /// Checks the range against a namespace of `nsze` blocks (LBA Out of Range).
    pub fn check_range(&self, nsze: u64) -> Result<(), Status> {
        check_lba_range(self.slba, u64::from(self.blocks()), nsze)
    }
}

/// Write Zeroes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteZeroes {
    /// Namespace.
    pub nsid: u32,
    /// Starting LBA.
    pub slba: u64,
    /// Number of blocks, 0-based.
    pub nlb: u16,
    /// Deallocate the blocks (reads return zeroes afterwards).
    pub deallocate: bool,
    /// Force unit access.
    pub fua: bool,
}

impl WriteZeroes {
    /// Reads the SQE.
    pub fn from_sqe(sqe: &Sqe) -> WriteZeroes {
        WriteZeroes {
            nsid: sqe.nsid,
            slba: u64::from(sqe.cdw10) | u64::from(sqe.cdw11) << 32,
            nlb: sqe.cdw12 as u16,
            deallocate: sqe.cdw12 & DEAC != 0,
            fua: sqe.cdw12 & FUA != 0,
        }
    }

    /// The SQE.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(io::WRITE_ZEROES, cid);
        sqe.nsid = self.nsid;
        sqe.cdw10 = self.slba as u32;
        sqe.cdw11 = (self.slba >> 32) as u32;
        sqe.cdw12 = u32::from(self.nlb)
            | if self.deallocate { DEAC } else { 0 }
            | if self.fua { FUA } else { 0 };
        sqe
    }

    /// Number of blocks (NLB + 1).
    pub fn blocks(&self) -> u32 {
        u32::from(self.nlb) + 1
    }

    /// Checks the range against a namespace of `nsze` blocks (LBA Out of Range).
    pub fn check_range(&self, nsze: u64) -> Result<(), Status> {
        check_lba_range(self.slba, u64::from(self.blocks()), nsze)
    }
}

/// A Flush SQE for namespace `nsid` (0xFFFFFFFF: all).
pub fn flush_sqe(nsid: u32, cid: u16) -> Sqe {
    let mut sqe = Sqe::new(io::FLUSH, cid);
    sqe.nsid = nsid;
    sqe
}

/// Dataset Management.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dsm {
    /// Namespace.
    pub nsid: u32,
    /// Number of ranges, 0-based (1..=256 ranges).
    pub nr: u8,
    /// Integral dataset for read.
    pub idr: bool,
    /// Integral dataset for write.
    pub idw: bool,
    /// Deallocate the ranges.
    pub deallocate: bool,
}

/// Size of one DSM range entry.
pub const DSM_RANGE_LEN: usize = 16;
const _: () = assert!(DSM_RANGE_LEN == 16);

/// Most ranges one DSM command carries.
pub const DSM_MAX_RANGES: usize = 256;

impl Dsm {
    /// Reads the SQE.
    pub fn from_sqe(sqe: &Sqe) -> Dsm {
        Dsm {
            nsid: sqe.nsid,
            nr: sqe.cdw10 as u8,
            idr: sqe.cdw11 & 1 != 0,
            idw: sqe.cdw11 & 2 != 0,
            deallocate: sqe.cdw11 & 4 != 0,
        }
    }

    /// The SQE; data pointer left to set (to the range list).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(io::DATASET_MANAGEMENT, cid);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.nr);
        sqe.cdw11 =
            u32::from(self.idr) | u32::from(self.idw) << 1 | u32::from(self.deallocate) << 2;
        sqe
    }

    /// Number of ranges (NR + 1).
    pub fn ranges(&self) -> usize {
        usize::from(self.nr) + 1
    }

    /// Bytes of range entries the command's data carries.
    pub fn data_len(&self) -> u32 {
        (self.ranges() * DSM_RANGE_LEN) as u32
    }
}

/// One DSM range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DsmRange {
    /// Context attributes.
    pub cattr: u32,
    /// Length in blocks (a count; 0 is an empty range).
    pub nlb: u32,
    /// Starting LBA.
    pub slba: u64,
}

impl DsmRange {
    /// Encodes the 16 bytes.
    pub fn encode(&self) -> [u8; DSM_RANGE_LEN] {
        let mut b = [0u8; DSM_RANGE_LEN];
        put_u32(&mut b, 0, self.cattr);
        put_u32(&mut b, 4, self.nlb);
        put_u64(&mut b, 8, self.slba);
        b
    }

    /// Decodes 16 bytes.
    pub fn decode(b: &[u8; DSM_RANGE_LEN]) -> DsmRange {
        DsmRange {
            cattr: u32_at(b, 0),
            nlb: u32_at(b, 4),
            slba: u64_at(b, 8),
        }
    }

    /// Checks the range against a namespace of `nsze` blocks (LBA Out of Range).
    pub fn check_range(&self, nsze: u64) -> Result<(), Status> {
        check_lba_range(self.slba, u64::from(self.nlb), nsze)
    }
}

/// Decodes `count` ranges from the command's data. Data shorter than `count * 16` bytes fails
/// with Data SGL Length Invalid; a count above 256 with Invalid Field. Bytes past the ranges
/// are ignored.
pub fn decode_dsm_ranges(data: &[u8], count: usize) -> Result<Vec<DsmRange>, Status> {
    if count == 0 || count > DSM_MAX_RANGES {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    let need = count * DSM_RANGE_LEN;
    let data = data
        .get(..need)
        .ok_or(Status::SGL_INVALID_DATA_LENGTH.with_dnr())?;
    Ok(data
        .chunks_exact(DSM_RANGE_LEN)
        .filter_map(|c| <&[u8; DSM_RANGE_LEN]>::try_from(c).ok())
        .map(DsmRange::decode)
        .collect())
}

/// Encodes ranges as a DSM command's data.
pub fn encode_dsm_ranges(ranges: &[DsmRange]) -> Vec<u8> {
    ranges.iter().flat_map(|r| r.encode()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::sqe::SQE_LEN;

    #[test]
    fn decodes_linux_read() {
        // nvme_setup_rw: Read of 8 blocks at LBA 0x1_0000_0010, FUA clear.
        let mut b = [0u8; SQE_LEN];
        b[0] = 0x02;
        b[1] = 0x40;
        b[2] = 0x21;
        b[4] = 1;
        b[40..48].copy_from_slice(&0x1_0000_0010u64.to_le_bytes());
        b[48..50].copy_from_slice(&7u16.to_le_bytes());
        let sqe = Sqe::decode(&b);
        let rw = ReadWrite::from_sqe(&sqe);
        assert_eq!(rw.slba, 0x1_0000_0010);
        assert_eq!(rw.blocks(), 8);
        assert_eq!(rw.byte_len(512), 4096);
        assert!(!rw.fua);
        assert_eq!(rw.to_sqe(io::READ, 0x21).to_bytes(), b);
        assert!(rw.check_range(0x1_0000_0018).is_ok());
        assert_eq!(
            rw.check_range(0x1_0000_0017),
            Err(Status::LBA_OUT_OF_RANGE.with_dnr())
        );
    }

    #[test]
    fn write_flags_and_overflow() {
        let w = ReadWrite {
            nsid: 1,
            slba: u64::MAX,
            nlb: 0xFFFF,
            fua: true,
            lr: true,
            dsm: 7,
        };
        let s = w.to_sqe(io::WRITE, 1);
        assert_eq!(s.cdw12, 0xC000_FFFF);
        assert_eq!(ReadWrite::from_sqe(&s), w);
        assert_eq!(w.blocks(), 65536);
        assert!(w.check_range(u64::MAX).is_err(), "slba + blocks overflows");
        let z = WriteZeroes {
            nsid: 1,
            slba: 8,
            nlb: 7,
            deallocate: true,
            fua: false,
        };
        let s = z.to_sqe(2);
        assert_eq!((s.opcode, s.cdw12), (0x08, 0x0200_0007));
        assert_eq!(WriteZeroes::from_sqe(&s), z);
        assert!(z.check_range(16).is_ok());
        assert_eq!(flush_sqe(1, 3).opcode, 0x00);
    }

    #[test]
    fn dsm_ranges() {
        let d = Dsm {
            nsid: 1,
            nr: 1,
            idr: false,
            idw: false,
            deallocate: true,
        };
        let s = d.to_sqe(4);
        assert_eq!((s.opcode, s.cdw10, s.cdw11), (0x09, 1, 4));
        assert_eq!(Dsm::from_sqe(&s), d);
        assert_eq!(d.data_len(), 32);
        let ranges = [
            DsmRange {
                cattr: 0,
                nlb: 8,
                slba: 0,
            },
            DsmRange {
                cattr: 0,
                nlb: 16,
                slba: 1 << 33,
            },
        ];
        let data = encode_dsm_ranges(&ranges);
        assert_eq!(&data[4..8], &8u32.to_le_bytes());
        assert_eq!(&data[24..32], &(1u64 << 33).to_le_bytes());
        assert_eq!(decode_dsm_ranges(&data, d.ranges()).unwrap(), ranges);
        assert_eq!(
            decode_dsm_ranges(&data[..31], 2),
            Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr())
        );
        assert!(decode_dsm_ranges(&data, 0).is_err());
        assert!(decode_dsm_ranges(&data, 257).is_err());
        assert!(ranges[1].check_range(1 << 33).is_err());
        assert!(ranges[0].check_range(8).is_ok());
    }
}
