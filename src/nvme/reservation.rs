//! NVMe reservations on the wire (NVMe Base 2.0, 7.2-7.5 and 8.19): the four commands'
//! fields, their data, and the Reservation Report (extended data structure, 128-bit host
//! identifiers, as fabrics hosts need).

use super::sqe::Sqe;

/// I/O command opcodes.
pub mod op {
    pub const REGISTER: u8 = 0x0D;
    pub const REPORT: u8 = 0x0E;
    pub const ACQUIRE: u8 = 0x11;
    pub const RELEASE: u8 = 0x15;
}

/// Reservation types (RTYPE).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ResvType {
    WriteExclusive = 1,
    ExclusiveAccess = 2,
    WriteExclusiveRegistrantsOnly = 3,
    ExclusiveAccessRegistrantsOnly = 4,
    WriteExclusiveAllRegistrants = 5,
    ExclusiveAccessAllRegistrants = 6,
}

impl ResvType {
    pub fn from_u8(v: u8) -> Option<ResvType> {
        Some(match v {
            1 => ResvType::WriteExclusive,
            2 => ResvType::ExclusiveAccess,
            3 => ResvType::WriteExclusiveRegistrantsOnly,
            4 => ResvType::ExclusiveAccessRegistrantsOnly,
            5 => ResvType::WriteExclusiveAllRegistrants,
            6 => ResvType::ExclusiveAccessAllRegistrants,
            _ => return None,
        })
    }

    /// Every registrant holds it (types 5 and 6).
    pub fn all_registrants(self) -> bool {
        matches!(
            self,
            ResvType::WriteExclusiveAllRegistrants | ResvType::ExclusiveAccessAllRegistrants
        )
    }

    /// Registrants (not only the holder) may write (types 3 to 6).
    pub fn registrants_write(self) -> bool {
        !matches!(self, ResvType::WriteExclusive | ResvType::ExclusiveAccess)
    }

    /// Reads are restricted too (Exclusive Access types 2, 4, 6).
    pub fn excludes_reads(self) -> bool {
        matches!(
            self,
            ResvType::ExclusiveAccess
                | ResvType::ExclusiveAccessRegistrantsOnly
                | ResvType::ExclusiveAccessAllRegistrants
        )
    }
}

/// Identify Namespace RESCAP: every type, and IEKEY as NVMe 1.3 defines it (bit 7); bit 0
/// (Persist Through Power Loss) is the caller's.
pub const RESCAP_TYPES_AND_IEKEY: u8 = 0xFE;
/// RESCAP bit 0: Persist Through Power Loss supported.
pub const RESCAP_PTPL: u8 = 0x01;

/// The fields of CDW10 the three key-carrying commands share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResvCdw10 {
    /// RREGA / RACQA / RRELA (bits 2:0).
    pub action: u8,
    /// Ignore Existing Key (bit 3).
    pub iekey: bool,
    /// RTYPE (bits 15:8; Acquire and Release).
    pub rtype: u8,
    /// CPTPL (bits 31:30; Register).
    pub cptpl: u8,
}

impl ResvCdw10 {
    pub fn from_sqe(sqe: &Sqe) -> ResvCdw10 {
        let c = sqe.cdw10;
        ResvCdw10 {
            action: (c & 0x7) as u8,
            iekey: c & (1 << 3) != 0,
            rtype: (c >> 8) as u8,
            cptpl: (c >> 30) as u8,
        }
    }

    pub fn to_cdw10(self) -> u32 {
        u32::from(self.action & 0x7)
            | u32::from(self.iekey) << 3
            | u32::from(self.rtype) << 8
            | u32::from(self.cptpl & 0x3) << 30
    }
}

/// Register actions (RREGA).
pub mod rrega {
    pub const REGISTER: u8 = 0;
    pub const UNREGISTER: u8 = 1;
    pub const REPLACE: u8 = 2;
}

/// Acquire actions (RACQA).
pub mod racqa {
    pub const ACQUIRE: u8 = 0;
    pub const PREEMPT: u8 = 1;
    pub const PREEMPT_AND_ABORT: u8 = 2;
}

/// Release actions (RRELA).
pub mod rrela {
    pub const RELEASE: u8 = 0;
    pub const CLEAR: u8 = 1;
}

/// Data bytes of Register and Acquire (two keys); Release carries one.
pub const TWO_KEYS: u32 = 16;
pub const ONE_KEY: u32 = 8;

/// The two 8-byte keys of a Register (CRKEY, NRKEY) or Acquire (CRKEY, PRKEY); Release's data
/// is the first only.
pub fn keys(data: &[u8]) -> (u64, u64) {
    let k = |o: usize| {
        data.get(o..o + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    (k(0), k(8))
}

/// The data of a Register or Acquire: `a` then `b`.
pub fn encode_keys(a: u64, b: u64) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&a.to_le_bytes());
    d[8..].copy_from_slice(&b.to_le_bytes());
    d
}

/// Reservation Report, CDW10 NUMD (0-based dwords) and CDW11 bit 0 EDS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportCmd {
    pub numd: u32,
    pub eds: bool,
}

impl ReportCmd {
    pub fn from_sqe(sqe: &Sqe) -> ReportCmd {
        ReportCmd {
            numd: sqe.cdw10,
            eds: sqe.cdw11 & 1 != 0,
        }
    }

    /// Bytes the host asked for.
    pub fn bytes(&self) -> u64 {
        (u64::from(self.numd) + 1) * 4
    }
}

/// The extended report's header and each registrant entry are 64 bytes.
pub const REPORT_HEADER_LEN: usize = 64;
pub const REPORT_ENTRY_LEN: usize = 64;

/// One registrant as the report shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registrant {
    /// 0xFFFF: the registrant is a host (every controller of it), not one controller.
    pub cntlid: u16,
    /// Holds the reservation (RCSTS bit 0).
    pub holds: bool,
    pub rkey: u64,
    pub hostid: [u8; 16],
}

/// The extended Reservation Status data structure, `len` bytes: the header and the entries
/// that fit whole (REGCTL counts them all).
pub fn encode_report(
    generation: u32,
    rtype: u8,
    ptpls: bool,
    regs: &[Registrant],
    len: usize,
) -> Vec<u8> {
    let mut b = vec![0u8; len.max(REPORT_HEADER_LEN)];
    b[0..4].copy_from_slice(&generation.to_le_bytes());
    b[4] = rtype;
    b[5..7].copy_from_slice(&(regs.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
    b[9] = u8::from(ptpls);
    for (i, r) in regs.iter().enumerate() {
        let o = REPORT_HEADER_LEN + i * REPORT_ENTRY_LEN;
        if o + REPORT_ENTRY_LEN > len {
            break;
        }
        b[o..o + 2].copy_from_slice(&r.cntlid.to_le_bytes());
        b[o + 2] = u8::from(r.holds);
        b[o + 8..o + 16].copy_from_slice(&r.rkey.to_le_bytes());
        b[o + 16..o + 32].copy_from_slice(&r.hostid);
    }
    b.truncate(len);
    b
}

/// A decoded extended report: (generation, rtype, ptpls, registrants).
pub fn decode_report(b: &[u8]) -> Option<(u32, u8, bool, Vec<Registrant>)> {
    if b.len() < REPORT_HEADER_LEN {
        return None;
    }
    let generation = u32::from_le_bytes(b[0..4].try_into().ok()?);
    let n = usize::from(u16::from_le_bytes(b[5..7].try_into().ok()?));
    let mut regs = Vec::new();
    for i in 0..n {
        let o = REPORT_HEADER_LEN + i * REPORT_ENTRY_LEN;
        let Some(e) = b.get(o..o + REPORT_ENTRY_LEN) else {
            break;
        };
        regs.push(Registrant {
            cntlid: u16::from_le_bytes([e[0], e[1]]),
            holds: e[2] & 1 != 0,
            rkey: u64::from_le_bytes(e[8..16].try_into().ok()?),
            hostid: e[16..32].try_into().ok()?,
        });
    }
    Some((generation, b[4], b[9] & 1 != 0, regs))
}

/// Reservation Notification log page types.
pub mod notice {
    pub const REGISTRATION_PREEMPTED: u8 = 1;
    pub const RESERVATION_RELEASED: u8 = 2;
    pub const RESERVATION_PREEMPTED: u8 = 3;
}

/// One Reservation Notification log page (64 bytes): its count, type, how many more are
/// available, and the namespace.
pub fn encode_notice(count: u64, kind: u8, available: u8, nsid: u32) -> [u8; 64] {
    let mut b = [0u8; 64];
    b[0..8].copy_from_slice(&count.to_le_bytes());
    b[8] = kind;
    b[9] = available;
    b[12..16].copy_from_slice(&nsid.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdw10_and_report_round_trip() {
        let c = ResvCdw10 {
            action: racqa::PREEMPT,
            iekey: true,
            rtype: 2,
            cptpl: 3,
        };
        let mut sqe = Sqe::new(op::ACQUIRE, 1);
        sqe.cdw10 = c.to_cdw10();
        assert_eq!(ResvCdw10::from_sqe(&sqe), c);
        assert_eq!(keys(&encode_keys(4, 5)), (4, 5));
        let r = Registrant {
            cntlid: 0xFFFF,
            holds: true,
            rkey: 4,
            hostid: [7; 16],
        };
        let b = encode_report(5, 2, false, &[r, r], 4096);
        assert_eq!(decode_report(&b), Some((5, 2, false, vec![r, r])));
        // Truncated: the header still counts both, one entry fits.
        let b = encode_report(5, 2, false, &[r, r], 128);
        assert_eq!(b.len(), 128);
        assert_eq!(u16::from_le_bytes([b[5], b[6]]), 2);
        assert_eq!(decode_report(&b).unwrap().3.len(), 1);
    }
}
