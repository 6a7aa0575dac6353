//! Get Features (0x0A) and Set Features (0x09): feature identifiers, the commands, and the
//! typed values of the features a fabrics controller answers.
//!
//! ```text
//! Set Features:  cdw10 bits 7:0 FID, bit 31 SV (save); cdw11.. value
//! Get Features:  cdw10 bits 7:0 FID, bits 10:8 SEL (0 current, 1 default, 2 saved, 3 caps)
//! Result (CQE dw0): the feature's value (Number of Queues: NSQA | NCQA << 16, 0-based)
//! ```

use super::opcodes::admin;
use super::sqe::Sqe;
use super::status::Status;

/// Feature identifiers.
pub mod fid {
    pub const ARBITRATION: u8 = 0x01;
    pub const POWER_MGMT: u8 = 0x02;
    pub const LBA_RANGE: u8 = 0x03;
    pub const TEMP_THRESHOLD: u8 = 0x04;
    pub const ERROR_RECOVERY: u8 = 0x05;
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    pub const NUM_QUEUES: u8 = 0x07;
    pub const IRQ_COALESCING: u8 = 0x08;
    pub const IRQ_CONFIG: u8 = 0x09;
    pub const WRITE_ATOMICITY: u8 = 0x0A;
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    pub const AUTO_PST: u8 = 0x0C;
    pub const HOST_MEM_BUFFER: u8 = 0x0D;
    pub const TIMESTAMP: u8 = 0x0E;
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    pub const HOST_BEHAVIOR: u8 = 0x16;
    pub const HOST_ID: u8 = 0x81;
    pub const RESERVATION_MASK: u8 = 0x82;
    pub const RESERVATION_PERSIST: u8 = 0x83;
}

/// Get Features SEL values.
pub mod sel {
    pub const CURRENT: u8 = 0;
    pub const DEFAULT: u8 = 1;
    pub const SAVED: u8 = 2;
    pub const SUPPORTED_CAPABILITIES: u8 = 3;
}

/// Set Features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetFeatures {
    /// Feature identifier.
    pub fid: u8,
    /// SV: make the value persist across resets.
    pub save: bool,
    /// Namespace (for namespace-specific features).
    pub nsid: u32,
    /// cdw11: the value.
    pub value: u32,
}

impl SetFeatures {
    /// Reads the SQE.
    pub fn from_sqe(sqe: &Sqe) -> SetFeatures {
        SetFeatures {
            fid: sqe.cdw10 as u8,
            save: sqe.cdw10 >> 31 != 0,
            nsid: sqe.nsid,
            value: sqe.cdw11,
        }
    }

    /// The SQE.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(admin::SET_FEATURES, cid);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.fid) | u32::from(self.save) << 31;
        sqe.cdw11 = self.value;
        sqe
    }
}

/// Get Features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetFeatures {
    /// Feature identifier.
    pub fid: u8,
    /// SEL (see [`sel`]).
    pub select: u8,
    /// Namespace (for namespace-specific features).
    pub nsid: u32,
    /// cdw11 (feature specific, usually 0).
    pub cdw11: u32,
}

impl GetFeatures {
    /// Reads the SQE; SEL 4..7 are reserved (Invalid Field).
    pub fn from_sqe(sqe: &Sqe) -> Result<GetFeatures, Status> {
        let select = ((sqe.cdw10 >> 8) & 0x7) as u8;
        if select > sel::SUPPORTED_CAPABILITIES {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        Ok(GetFeatures {
            fid: sqe.cdw10 as u8,
            select,
            nsid: sqe.nsid,
            cdw11: sqe.cdw11,
        })
    }

    /// The SQE.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(admin::GET_FEATURES, cid);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.fid) | u32::from(self.select & 0x7) << 8;
        sqe.cdw11 = self.cdw11;
        sqe
    }
}

/// Number of Queues (FID 0x07): submission and completion queue counts, both 0-based.
/// The same layout is the command's cdw11 (requested) and the completion's dw0 (allocated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumQueues {
    /// I/O submission queues - 1.
    pub nsq: u16,
    /// I/O completion queues - 1.
    pub ncq: u16,
}

impl NumQueues {
    /// `n` queues of each kind (n >= 1).
    pub fn both(n: u16) -> NumQueues {
        let z = n.saturating_sub(1);
        NumQueues { nsq: z, ncq: z }
    }

    /// From cdw11 or dw0.
    pub fn from_dword(v: u32) -> NumQueues {
        NumQueues {
            nsq: v as u16,
            ncq: (v >> 16) as u16,
        }
    }

    /// To cdw11 or dw0.
    pub fn to_dword(self) -> u32 {
        u32::from(self.nsq) | u32::from(self.ncq) << 16
    }

    /// Checks a request: 65535 (65536 queues) is invalid (Invalid Field).
    pub fn check_request(self) -> Result<(), Status> {
        if self.nsq == u16::MAX || self.ncq == u16::MAX {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        Ok(())
    }

    /// What to allocate for this request given at most `max_io_queues` (>= 1) I/O queues:
    /// each count clamped, 0-based.
    pub fn grant(self, max_io_queues: u16) -> NumQueues {
        let cap = max_io_queues.saturating_sub(1);
        NumQueues {
            nsq: self.nsq.min(cap),
            ncq: self.ncq.min(cap),
        }
    }
}

/// Asynchronous Event Configuration (FID 0x0B) bits.
pub mod async_event_config {
    /// SMART / health critical warnings to report (bits 7:0).
    pub const SMART_MASK: u32 = 0xFF;
    /// Namespace attribute notices.
    pub const NS_ATTR: u32 = 1 << 8;
    /// Firmware activation notices.
    pub const FW_ACTIVATION: u32 = 1 << 9;
    /// Telemetry log notices.
    pub const TELEMETRY: u32 = 1 << 10;
    /// ANA change notices.
    pub const ANA_CHANGE: u32 = 1 << 11;
    /// Discovery log page change notices (discovery controllers).
    pub const DISCOVERY_CHANGE: u32 = 1 << 31;
}

/// Volatile Write Cache (FID 0x06) bit 0: write cache enabled.
pub const VWC_ENABLE: u32 = 1 << 0;

/// Arbitration (FID 0x01).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Arbitration {
    /// Arbitration burst, log2 (bits 2:0; 7 = no limit).
    pub burst: u8,
    /// Low priority weight.
    pub low: u8,
    /// Medium priority weight.
    pub medium: u8,
    /// High priority weight.
    pub high: u8,
}

impl Arbitration {
    /// From the dword.
    pub fn from_dword(v: u32) -> Arbitration {
        Arbitration {
            burst: (v & 0x7) as u8,
            low: (v >> 8) as u8,
            medium: (v >> 16) as u8,
            high: (v >> 24) as u8,
        }
    }

    /// To the dword.
    pub fn to_dword(self) -> u32 {
        u32::from(self.burst & 0x7)
            | u32::from(self.low) << 8
            | u32::from(self.medium) << 16
            | u32::from(self.high) << 24
    }
}

/// Power Management (FID 0x02): power state (bits 4:0) and workload hint (bits 7:5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PowerMgmt {
    /// Power state.
    pub ps: u8,
    /// Workload hint.
    pub wh: u8,
}

impl PowerMgmt {
    /// From the dword.
    pub fn from_dword(v: u32) -> PowerMgmt {
        PowerMgmt {
            ps: (v & 0x1F) as u8,
            wh: ((v >> 5) & 0x7) as u8,
        }
    }

    /// To the dword.
    pub fn to_dword(self) -> u32 {
        u32::from(self.ps & 0x1F) | u32::from(self.wh & 0x7) << 5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_set_number_of_queues() {
        // nvme_set_queue_count(ctrl, 4): cdw10 FID 7, cdw11 (4-1) | (4-1) << 16.
        let s = SetFeatures {
            fid: fid::NUM_QUEUES,
            save: false,
            nsid: 0,
            value: 0x0003_0003,
        };
        let sqe = s.to_sqe(1);
        assert_eq!((sqe.opcode, sqe.cdw10, sqe.cdw11), (0x09, 7, 0x0003_0003));
        assert_eq!(SetFeatures::from_sqe(&sqe), s);
        let req = NumQueues::from_dword(sqe.cdw11);
        assert_eq!(req, NumQueues::both(4));
        assert!(req.check_request().is_ok());
        assert_eq!(req.grant(2).to_dword(), 0x0001_0001);
        assert!(NumQueues::from_dword(0xFFFF).check_request().is_err());
    }

    #[test]
    fn get_features_select_and_values() {
        let g = GetFeatures {
            fid: fid::KEEP_ALIVE_TIMER,
            select: sel::DEFAULT,
            nsid: 0,
            cdw11: 0,
        };
        let sqe = g.to_sqe(2);
        assert_eq!(sqe.cdw10, 0x10F);
        assert_eq!(GetFeatures::from_sqe(&sqe), Ok(g));
        let mut bad = sqe;
        bad.cdw10 = 0x40F;
        assert_eq!(
            GetFeatures::from_sqe(&bad),
            Err(Status::INVALID_FIELD.with_dnr())
        );
        let s = SetFeatures {
            fid: 6,
            save: true,
            nsid: 0,
            value: VWC_ENABLE,
        };
        assert_eq!(s.to_sqe(0).cdw10, 0x8000_0006);
        let a = Arbitration {
            burst: 7,
            low: 1,
            medium: 2,
            high: 3,
        };
        assert_eq!(a.to_dword(), 0x0302_0107);
        assert_eq!(Arbitration::from_dword(a.to_dword()), a);
        let p = PowerMgmt { ps: 2, wh: 1 };
        assert_eq!(PowerMgmt::from_dword(p.to_dword()), p);
    }
}
