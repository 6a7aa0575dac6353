//! Get Log Page (admin 0x02): the command and the log pages a fabrics controller serves.
//!
//! ```text
//! cdw10: bits 7:0 LID, 14:8 LSP, 15 RAE, 31:16 NUMDL     (NUMD = dwords - 1, 32 bits)
//! cdw11: bits 15:0 NUMDU, 31:16 LSI
//! cdw12/cdw13: LPO, byte offset into the page (dword aligned)
//! cdw14: bits 31:24 CSI
//!
//! Error information entry (64 bytes): error_count u64 @0, sqid u16 @8, cid u16 @10,
//!   status u16 @12 (status field << 1 | phase), param location u16 @14, lba u64 @16,
//!   nsid u32 @24, vs u8 @28, trtype u8 @29, cs u64 @32, trtype info u16 @40
//! SMART / health (512): critical_warning @0, temperature u16 (K) @1, avail_spare @3,
//!   spare_thresh @4, percent_used @5, data_units_read u128 @32, data_units_written @48,
//!   host_reads @64, host_writes @80, ctrl_busy_time @96, power_cycles @112,
//!   power_on_hours @128, unsafe_shutdowns @144, media_errors @160, error_entries @176,
//!   warning_temp_time u32 @192, critical_temp_time u32 @196, temp_sensor u16[8] @200
//! Firmware slot (512): afi @0, frs[7] (8 ASCII bytes each) @8
//! Changed namespace list (4096): u32[1024], zero-terminated; 0xFFFFFFFF first = more than 1024
//! Commands supported and effects (4096): acs u32[256] @0 (admin), iocs u32[256] @1024 (I/O)
//! ```

use super::le::{array_at, put_u128, put_u16, put_u32, put_u64, u128_at, u16_at, u32_at, u64_at};
use super::opcodes::admin;
use super::sqe::Sqe;
use super::status::Status;

/// Log page identifiers.
pub mod lid {
    pub const ERROR: u8 = 0x01;
    pub const SMART: u8 = 0x02;
    pub const FW_SLOT: u8 = 0x03;
    pub const CHANGED_NS_LIST: u8 = 0x04;
    pub const CMD_EFFECTS: u8 = 0x05;
    pub const DEVICE_SELF_TEST: u8 = 0x06;
    pub const TELEMETRY_HOST: u8 = 0x07;
    pub const ANA: u8 = 0x0C;
    pub const DISCOVERY: u8 = 0x70;
    pub const RESERVATION_NOTIFICATION: u8 = 0x80;
}

/// Get Log Page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetLogPage {
    /// Log page identifier.
    pub lid: u8,
    /// Log specific field (7 bits).
    pub lsp: u8,
    /// Retain asynchronous event.
    pub rae: bool,
    /// Number of dwords to return, 0-based.
    pub numd: u32,
    /// Log specific identifier.
    pub lsi: u16,
    /// Byte offset into the page.
    pub offset: u64,
    /// Command set identifier.
    pub csi: u8,
    /// Namespace (0xFFFFFFFF or 0: controller-wide).
    pub nsid: u32,
}

impl GetLogPage {
    /// Reads the SQE; an offset that is not dword aligned fails with Invalid Field.
    pub fn from_sqe(sqe: &Sqe) -> Result<GetLogPage, Status> {
        let offset = u64::from(sqe.cdw12) | u64::from(sqe.cdw13) << 32;
        if offset & 0x3 != 0 {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        Ok(GetLogPage {
            lid: sqe.cdw10 as u8,
            lsp: ((sqe.cdw10 >> 8) & 0x7F) as u8,
            rae: sqe.cdw10 & (1 << 15) != 0,
            numd: sqe.cdw10 >> 16 | (sqe.cdw11 & 0xFFFF) << 16,
            lsi: (sqe.cdw11 >> 16) as u16,
            offset,
            csi: (sqe.cdw14 >> 24) as u8,
            nsid: sqe.nsid,
        })
    }

    /// A request for `len_bytes` (a non-zero multiple of 4) of page `lid` from `offset`.
    pub fn new(lid: u8, nsid: u32, offset: u64, len_bytes: u64) -> GetLogPage {
        assert!(
            len_bytes >= 4 && len_bytes % 4 == 0 && len_bytes <= 1 << 34,
            "bad log length"
        );
        GetLogPage {
            lid,
            lsp: 0,
            rae: false,
            numd: (len_bytes / 4 - 1) as u32,
            lsi: 0,
            offset,
            csi: 0,
            nsid,
        }
    }

    /// The SQE (data pointer left for the caller to set).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(admin::GET_LOG_PAGE, cid);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.lid)
            | u32::from(self.lsp & 0x7F) << 8
            | u32::from(self.rae) << 15
            | (self.numd & 0xFFFF) << 16;
        sqe.cdw11 = self.numd >> 16 | u32::from(self.lsi) << 16;
        sqe.cdw12 = self.offset as u32;
        sqe.cdw13 = (self.offset >> 32) as u32;
        sqe.cdw14 = u32::from(self.csi) << 24;
        sqe
    }

    /// Bytes requested ((NUMD + 1) * 4).
    pub fn len_bytes(&self) -> u64 {
        (u64::from(self.numd) + 1) * 4
    }

    /// The part of `page` this request reads: from the offset, at most `len_bytes`. The
    /// caller zero-fills the rest of the transfer. An offset past the page fails with Invalid
    /// Field.
    pub fn window<'a>(&self, page: &'a [u8]) -> Result<&'a [u8], Status> {
        let start = usize::try_from(self.offset)
            .ok()
            .filter(|&s| s <= page.len())
            .ok_or(Status::INVALID_FIELD.with_dnr())?;
        let rest = &page[start..];
        let n = usize::try_from(self.len_bytes())
            .unwrap_or(usize::MAX)
            .min(rest.len());
        Ok(&rest[..n])
    }
}

/// Size of one error information entry.
pub const ERROR_ENTRY_LEN: usize = 64;
const _: () = assert!(ERROR_ENTRY_LEN == 64);

/// An error information log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorLogEntry {
    /// Unique, incrementing error count (0: entry invalid).
    pub error_count: u64,
    pub sqid: u16,
    pub cid: u16,
    /// Status field as in the CQE's bytes 14..16 (status << 1 | phase).
    pub status: u16,
    /// Byte (bits 7:0) and bit (10:8) of the command parameter in error.
    pub param_location: u16,
    pub lba: u64,
    pub nsid: u32,
    pub vs: u8,
    pub trtype: u8,
    pub cs: u64,
    pub trtype_info: u16,
}

impl ErrorLogEntry {
    /// Encodes the 64 bytes.
    pub fn encode(&self) -> [u8; ERROR_ENTRY_LEN] {
        let mut b = [0u8; ERROR_ENTRY_LEN];
        put_u64(&mut b, 0, self.error_count);
        put_u16(&mut b, 8, self.sqid);
        put_u16(&mut b, 10, self.cid);
        put_u16(&mut b, 12, self.status);
        put_u16(&mut b, 14, self.param_location);
        put_u64(&mut b, 16, self.lba);
        put_u32(&mut b, 24, self.nsid);
        b[28] = self.vs;
        b[29] = self.trtype;
        put_u64(&mut b, 32, self.cs);
        put_u16(&mut b, 40, self.trtype_info);
        b
    }

    /// Decodes 64 bytes.
    pub fn decode(b: &[u8; ERROR_ENTRY_LEN]) -> ErrorLogEntry {
        ErrorLogEntry {
            error_count: u64_at(b, 0),
            sqid: u16_at(b, 8),
            cid: u16_at(b, 10),
            status: u16_at(b, 12),
            param_location: u16_at(b, 14),
            lba: u64_at(b, 16),
            nsid: u32_at(b, 24),
            vs: b[28],
            trtype: b[29],
            cs: u64_at(b, 32),
            trtype_info: u16_at(b, 40),
        }
    }
}

/// Size of the SMART / health log and the firmware slot log.
pub const SMART_LOG_LEN: usize = 512;
/// Size of the firmware slot log.
pub const FW_SLOT_LOG_LEN: usize = 512;
/// Size of the changed namespace list and the command effects log.
pub const PAGE_4K_LEN: usize = 4096;
const _: () = assert!(SMART_LOG_LEN == 512 && FW_SLOT_LOG_LEN == 512 && PAGE_4K_LEN == 4096);

/// SMART / Health Information (LID 0x02).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmartLog {
    pub critical_warning: u8,
    /// Composite temperature, kelvin.
    pub temperature_k: u16,
    pub avail_spare: u8,
    pub spare_thresh: u8,
    pub percent_used: u8,
    pub endurance_group_warning: u8,
    /// In thousands of 512-byte units.
    pub data_units_read: u128,
    pub data_units_written: u128,
    pub host_reads: u128,
    pub host_writes: u128,
    /// Minutes.
    pub ctrl_busy_time: u128,
    pub power_cycles: u128,
    pub power_on_hours: u128,
    pub unsafe_shutdowns: u128,
    pub media_errors: u128,
    pub error_log_entries: u128,
    /// Minutes.
    pub warning_temp_time: u32,
    /// Minutes.
    pub critical_temp_time: u32,
    pub temp_sensor_k: [u16; 8],
}

impl SmartLog {
    /// Encodes the 512 bytes.
    pub fn encode(&self) -> [u8; SMART_LOG_LEN] {
        let mut b = [0u8; SMART_LOG_LEN];
        b[0] = self.critical_warning;
        put_u16(&mut b, 1, self.temperature_k);
        b[3] = self.avail_spare;
        b[4] = self.spare_thresh;
        b[5] = self.percent_used;
        b[6] = self.endurance_group_warning;
        for (i, v) in self.counters().into_iter().enumerate() {
            put_u128(&mut b, 32 + 16 * i, v);
        }
        put_u32(&mut b, 192, self.warning_temp_time);
        put_u32(&mut b, 196, self.critical_temp_time);
        for (i, &t) in self.temp_sensor_k.iter().enumerate() {
            put_u16(&mut b, 200 + 2 * i, t);
        }
        b
    }

    fn counters(&self) -> [u128; 10] {
        [
            self.data_units_read,
            self.data_units_written,
            self.host_reads,
            self.host_writes,
            self.ctrl_busy_time,
            self.power_cycles,
            self.power_on_hours,
            self.unsafe_shutdowns,
            self.media_errors,
            self.error_log_entries,
        ]
    }

    /// Decodes 512 bytes.
    pub fn decode(b: &[u8; SMART_LOG_LEN]) -> SmartLog {
        let c = |i: usize| u128_at(b, 32 + 16 * i);
        let mut temp_sensor_k = [0u16; 8];
        for (i, t) in temp_sensor_k.iter_mut().enumerate() {
            *t = u16_at(b, 200 + 2 * i);
        }
        SmartLog {
            critical_warning: b[0],
            temperature_k: u16_at(b, 1),
            avail_spare: b[3],
            spare_thresh: b[4],
            percent_used: b[5],
            endurance_group_warning: b[6],
            data_units_read: c(0),
            data_units_written: c(1),
            host_reads: c(2),
            host_writes: c(3),
            ctrl_busy_time: c(4),
            power_cycles: c(5),
            power_on_hours: c(6),
            unsafe_shutdowns: c(7),
            media_errors: c(8),
            error_log_entries: c(9),
            warning_temp_time: u32_at(b, 192),
            critical_temp_time: u32_at(b, 196),
            temp_sensor_k,
        }
    }
}

/// Firmware Slot Information (LID 0x03).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FwSlotLog {
    /// Active firmware info: bits 2:0 active slot, bits 6:4 slot at next reset.
    pub afi: u8,
    /// Revision in slots 1..=7, ASCII, space padded (all zero: slot empty).
    pub frs: [[u8; 8]; 7],
}

impl FwSlotLog {
    /// Encodes the 512 bytes.
    pub fn encode(&self) -> [u8; FW_SLOT_LOG_LEN] {
        let mut b = [0u8; FW_SLOT_LOG_LEN];
        b[0] = self.afi;
        for (i, r) in self.frs.iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(r);
        }
        b
    }

    /// Decodes 512 bytes.
    pub fn decode(b: &[u8; FW_SLOT_LOG_LEN]) -> FwSlotLog {
        let mut frs = [[0u8; 8]; 7];
        for (i, r) in frs.iter_mut().enumerate() {
            *r = array_at(b, 8 + 8 * i);
        }
        FwSlotLog { afi: b[0], frs }
    }
}

/// Changed Namespace List entry meaning "more than 1024 namespaces changed".
pub const CHANGED_NS_OVERFLOW: u32 = 0xFFFF_FFFF;

/// Encodes a changed namespace list; more than 1024 NSIDs encode as the overflow marker.
pub fn encode_changed_ns(nsids: &[u32]) -> [u8; PAGE_4K_LEN] {
    let mut b = [0u8; PAGE_4K_LEN];
    if nsids.len() > PAGE_4K_LEN / 4 {
        put_u32(&mut b, 0, CHANGED_NS_OVERFLOW);
    } else {
        for (i, &id) in nsids.iter().enumerate() {
            put_u32(&mut b, 4 * i, id);
        }
    }
    b
}

/// Decodes a changed namespace list up to the first zero. `None` means the overflow marker:
/// rescan every namespace.
pub fn decode_changed_ns(b: &[u8; PAGE_4K_LEN]) -> Option<Vec<u32>> {
    if u32_at(b, 0) == CHANGED_NS_OVERFLOW {
        return None;
    }
    Some(
        (0..PAGE_4K_LEN / 4)
            .map(|i| u32_at(b, 4 * i))
            .take_while(|&id| id != 0)
            .collect(),
    )
}

/// Command effects bits.
pub mod effects {
    /// Command supported.
    pub const CSUPP: u32 = 1 << 0;
    /// Logical block content change.
    pub const LBCC: u32 = 1 << 1;
    /// Namespace capability change.
    pub const NCC: u32 = 1 << 2;
    /// Namespace inventory change.
    pub const NIC: u32 = 1 << 3;
    /// Controller capability change.
    pub const CCC: u32 = 1 << 4;
}

/// Commands Supported and Effects (LID 0x05), one dword per opcode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandEffects {
    /// Admin commands, indexed by opcode.
    pub admin: [u32; 256],
    /// I/O commands, indexed by opcode.
    pub io: [u32; 256],
}

impl Default for CommandEffects {
    fn default() -> Self {
        CommandEffects {
            admin: [0; 256],
            io: [0; 256],
        }
    }
}

impl CommandEffects {
    /// Encodes the 4096 bytes.
    pub fn encode(&self) -> [u8; PAGE_4K_LEN] {
        let mut b = [0u8; PAGE_4K_LEN];
        for i in 0..256 {
            put_u32(&mut b, 4 * i, self.admin[i]);
            put_u32(&mut b, 1024 + 4 * i, self.io[i]);
        }
        b
    }

    /// Decodes 4096 bytes.
    pub fn decode(b: &[u8; PAGE_4K_LEN]) -> CommandEffects {
        let mut e = CommandEffects::default();
        for i in 0..256 {
            e.admin[i] = u32_at(b, 4 * i);
            e.io[i] = u32_at(b, 1024 + 4 * i);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::opcodes::io;

    #[test]
    fn get_log_page_fields() {
        // Linux nvme_get_log(ctrl, NSID_ALL, NVME_LOG_CMD_EFFECTS, 0, csi, buf, 4096, 0).
        let g = GetLogPage::new(lid::CMD_EFFECTS, 0xFFFF_FFFF, 0, 4096);
        let s = g.to_sqe(1);
        assert_eq!((s.opcode, s.cdw10, s.cdw11), (0x02, 0x03FF_0005, 0));
        assert_eq!(GetLogPage::from_sqe(&s), Ok(g));
        assert_eq!(g.len_bytes(), 4096);
        let mut big = GetLogPage::new(lid::ERROR, 0, 8, 1 << 20);
        big.rae = true;
        let s = big.to_sqe(2);
        assert_eq!(s.cdw10, 0xFFFF_8001);
        assert_eq!(s.cdw11, 0x0003);
        assert_eq!(s.cdw12, 8);
        assert_eq!(GetLogPage::from_sqe(&s), Ok(big));
        let mut odd = s;
        odd.cdw12 = 2;
        assert_eq!(
            GetLogPage::from_sqe(&odd),
            Err(Status::INVALID_FIELD.with_dnr())
        );
        let mut max = s;
        max.cdw10 = 0xFFFF_0002;
        max.cdw11 = 0xFFFF;
        assert_eq!(GetLogPage::from_sqe(&max).unwrap().len_bytes(), 1 << 34);
    }

    #[test]
    fn window_clamps_to_page() {
        let page = [7u8; 512];
        let g = GetLogPage::new(lid::SMART, 0, 0, 4096);
        assert_eq!(g.window(&page).unwrap().len(), 512);
        let g = GetLogPage::new(lid::SMART, 0, 508, 16);
        assert_eq!(g.window(&page).unwrap().len(), 4);
        let g = GetLogPage::new(lid::SMART, 0, 512, 4);
        assert_eq!(g.window(&page).unwrap().len(), 0);
        let g = GetLogPage::new(lid::SMART, 0, 516, 4);
        assert!(g.window(&page).is_err());
        let g = GetLogPage { offset: !3u64, ..g };
        assert!(g.window(&page).is_err());
    }

    #[test]
    fn layouts_roundtrip() {
        let e = ErrorLogEntry {
            error_count: 3,
            sqid: 1,
            cid: 9,
            status: 0x4002 << 1,
            param_location: 40,
            lba: 77,
            nsid: 1,
            trtype: 1,
            ..Default::default()
        };
        let b = e.encode();
        assert_eq!(&b[12..14], &0x8004u16.to_le_bytes());
        assert_eq!(b[29], 1);
        assert_eq!(ErrorLogEntry::decode(&b), e);

        let s = SmartLog {
            temperature_k: 310,
            avail_spare: 100,
            host_writes: 1 << 70,
            power_on_hours: 5,
            temp_sensor_k: [300; 8],
            ..Default::default()
        };
        let b = s.encode();
        assert_eq!(&b[1..3], &310u16.to_le_bytes());
        assert_eq!(b[3], 100);
        assert_eq!(&b[80..96], &(1u128 << 70).to_le_bytes());
        assert_eq!(&b[128..130], &[5, 0]);
        assert_eq!(&b[214..216], &300u16.to_le_bytes());
        assert_eq!(SmartLog::decode(&b), s);

        let f = FwSlotLog {
            afi: 1,
            frs: [*b"0.1.0   ", [0; 8], [0; 8], [0; 8], [0; 8], [0; 8], [0; 8]],
        };
        let b = f.encode();
        assert_eq!(&b[8..16], b"0.1.0   ");
        assert_eq!(FwSlotLog::decode(&b), f);

        let mut ce = CommandEffects::default();
        ce.admin[usize::from(admin::IDENTIFY)] = effects::CSUPP;
        ce.io[usize::from(io::WRITE)] = effects::CSUPP | effects::LBCC;
        let b = ce.encode();
        assert_eq!(&b[24..28], &1u32.to_le_bytes());
        assert_eq!(&b[1028..1032], &3u32.to_le_bytes());
        assert_eq!(CommandEffects::decode(&b), ce);
    }

    #[test]
    fn changed_ns_list() {
        let b = encode_changed_ns(&[1, 3]);
        assert_eq!(decode_changed_ns(&b), Some(vec![1, 3]));
        let many: Vec<u32> = (1..=1025).collect();
        assert_eq!(decode_changed_ns(&encode_changed_ns(&many)), None);
        assert_eq!(decode_changed_ns(&[0; PAGE_4K_LEN]), Some(vec![]));
    }
}
