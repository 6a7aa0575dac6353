//! NVMe completion status: Status Code Type, Status Code, CRD, More and DNR.
//!
//! The 15-bit status field sits in CQE bits 127:113 (CQE bytes 14..16, above the phase bit):
//!
//! ```text
//!  15   14   13 12   11  9   8        1   0
//! +---+----+-------+-------+------------+---+
//! |DNR|More|  CRD  |  SCT  |     SC     | P |   (P, the phase tag, belongs to the CQE)
//! +---+----+-------+-------+------------+---+
//! ```
//!
//! Command-specific codes mean different things for different commands (SCT 1, SC 0x80 is
//! "Connect Incompatible Format" for a Fabrics Connect and "Conflicting Attributes" for an I/O
//! command), so naming a status takes the [`CommandKind`] when the caller knows it.

use std::fmt;

/// Status Code Type (3 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Sct {
    /// 0: generic command status.
    Generic,
    /// 1: command specific status.
    CommandSpecific,
    /// 2: media and data integrity errors.
    MediaError,
    /// 3: path related status.
    Path,
    /// 7: vendor specific.
    Vendor,
    /// 4..=6: reserved; kept so that a decode/encode roundtrip is exact.
    Reserved(u8),
}

impl Sct {
    /// The type from its 3-bit value (bits above 3 are ignored).
    pub const fn from_bits(v: u8) -> Sct {
        match v & 0x7 {
            0 => Sct::Generic,
            1 => Sct::CommandSpecific,
            2 => Sct::MediaError,
            3 => Sct::Path,
            7 => Sct::Vendor,
            other => Sct::Reserved(other),
        }
    }

    /// The 3-bit value.
    pub const fn bits(self) -> u8 {
        match self {
            Sct::Generic => 0,
            Sct::CommandSpecific => 1,
            Sct::MediaError => 2,
            Sct::Path => 3,
            Sct::Vendor => 7,
            Sct::Reserved(v) => v & 0x7,
        }
    }
}

/// What kind of command a status answers; picks the meaning of command-specific codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    /// An admin command other than a Fabrics command.
    Admin,
    /// A Fabrics command (opcode 0x7F): Connect, Property Get/Set, Disconnect.
    Fabrics,
    /// An NVM command set I/O command.
    Io,
    /// Unknown: ambiguous command-specific codes are named with every meaning.
    Unknown,
}

/// An NVMe completion status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status {
    /// Status Code Type.
    pub sct: Sct,
    /// Status Code.
    pub sc: u8,
    /// Command Retry Delay index (2 bits; 0 = retry at once).
    pub crd: u8,
    /// More: further information in the Error Information log page.
    pub more: bool,
    /// Do Not Retry.
    pub dnr: bool,
}

const fn st(sct: Sct, sc: u8) -> Status {
    Status {
        sct,
        sc,
        crd: 0,
        more: false,
        dnr: false,
    }
}

#[rustfmt::skip]
impl Status {
    // Generic command status (SCT 0).
    pub const SUCCESS: Status = st(Sct::Generic, 0x00);
    pub const INVALID_OPCODE: Status = st(Sct::Generic, 0x01);
    pub const INVALID_FIELD: Status = st(Sct::Generic, 0x02);
    pub const CID_CONFLICT: Status = st(Sct::Generic, 0x03);
    pub const DATA_TRANSFER_ERROR: Status = st(Sct::Generic, 0x04);
    pub const POWER_LOSS_ABORT: Status = st(Sct::Generic, 0x05);
    pub const INTERNAL: Status = st(Sct::Generic, 0x06);
    pub const ABORT_REQUESTED: Status = st(Sct::Generic, 0x07);
    pub const ABORT_SQ_DELETED: Status = st(Sct::Generic, 0x08);
    pub const FUSED_FAIL: Status = st(Sct::Generic, 0x09);
    pub const FUSED_MISSING: Status = st(Sct::Generic, 0x0A);
    pub const INVALID_NAMESPACE: Status = st(Sct::Generic, 0x0B);
    pub const COMMAND_SEQUENCE_ERROR: Status = st(Sct::Generic, 0x0C);
    pub const SGL_INVALID_LAST_SEGMENT: Status = st(Sct::Generic, 0x0D);
    pub const SGL_INVALID_COUNT: Status = st(Sct::Generic, 0x0E);
    pub const SGL_INVALID_DATA_LENGTH: Status = st(Sct::Generic, 0x0F);
    pub const SGL_INVALID_METADATA_LENGTH: Status = st(Sct::Generic, 0x10);
    pub const SGL_INVALID_TYPE: Status = st(Sct::Generic, 0x11);
    pub const INVALID_CMB_USE: Status = st(Sct::Generic, 0x12);
    pub const PRP_INVALID_OFFSET: Status = st(Sct::Generic, 0x13);
    pub const ATOMIC_WRITE_UNIT_EXCEEDED: Status = st(Sct::Generic, 0x14);
    pub const OPERATION_DENIED: Status = st(Sct::Generic, 0x15);
    pub const SGL_INVALID_OFFSET: Status = st(Sct::Generic, 0x16);
    pub const HOST_ID_INCONSISTENT_FORMAT: Status = st(Sct::Generic, 0x18);
    pub const KEEP_ALIVE_EXPIRED: Status = st(Sct::Generic, 0x19);
    pub const KEEP_ALIVE_INVALID: Status = st(Sct::Generic, 0x1A);
    pub const ABORT_PREEMPT: Status = st(Sct::Generic, 0x1B);
    pub const SANITIZE_FAILED: Status = st(Sct::Generic, 0x1C);
    pub const SANITIZE_IN_PROGRESS: Status = st(Sct::Generic, 0x1D);
    pub const SGL_INVALID_GRANULARITY: Status = st(Sct::Generic, 0x1E);
    pub const NS_WRITE_PROTECTED: Status = st(Sct::Generic, 0x20);
    pub const COMMAND_INTERRUPTED: Status = st(Sct::Generic, 0x21);
    pub const TRANSIENT_TRANSPORT_ERROR: Status = st(Sct::Generic, 0x22);
    // Generic status, NVM command set (SCT 0, SC 0x80..).
    pub const LBA_OUT_OF_RANGE: Status = st(Sct::Generic, 0x80);
    pub const CAPACITY_EXCEEDED: Status = st(Sct::Generic, 0x81);
    pub const NS_NOT_READY: Status = st(Sct::Generic, 0x82);
    pub const RESERVATION_CONFLICT: Status = st(Sct::Generic, 0x83);
    pub const FORMAT_IN_PROGRESS: Status = st(Sct::Generic, 0x84);

    // Command specific status (SCT 1).
    pub const INVALID_CQ: Status = st(Sct::CommandSpecific, 0x00);
    pub const INVALID_QUEUE_IDENTIFIER: Status = st(Sct::CommandSpecific, 0x01);
    pub const MAX_QUEUE_SIZE_EXCEEDED: Status = st(Sct::CommandSpecific, 0x02);
    pub const ABORT_LIMIT_EXCEEDED: Status = st(Sct::CommandSpecific, 0x03);
    pub const ASYNC_EVENT_LIMIT_EXCEEDED: Status = st(Sct::CommandSpecific, 0x05);
    pub const INVALID_FIRMWARE_SLOT: Status = st(Sct::CommandSpecific, 0x06);
    pub const INVALID_FIRMWARE_IMAGE: Status = st(Sct::CommandSpecific, 0x07);
    pub const INVALID_INTERRUPT_VECTOR: Status = st(Sct::CommandSpecific, 0x08);
    pub const INVALID_LOG_PAGE: Status = st(Sct::CommandSpecific, 0x09);
    pub const INVALID_FORMAT: Status = st(Sct::CommandSpecific, 0x0A);
    pub const INVALID_QUEUE_DELETION: Status = st(Sct::CommandSpecific, 0x0C);
    pub const FEATURE_NOT_SAVEABLE: Status = st(Sct::CommandSpecific, 0x0D);
    pub const FEATURE_NOT_CHANGEABLE: Status = st(Sct::CommandSpecific, 0x0E);
    pub const FEATURE_NOT_PER_NS: Status = st(Sct::CommandSpecific, 0x0F);
    // Fabrics Connect (SCT 1, SC 0x80..).
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = st(Sct::CommandSpecific, 0x80);
    pub const CONNECT_CONTROLLER_BUSY: Status = st(Sct::CommandSpecific, 0x81);
    pub const CONNECT_INVALID_PARAMETERS: Status = st(Sct::CommandSpecific, 0x82);
    pub const CONNECT_RESTART_DISCOVERY: Status = st(Sct::CommandSpecific, 0x83);
    pub const CONNECT_INVALID_HOST: Status = st(Sct::CommandSpecific, 0x84);
    pub const INVALID_QUEUE_TYPE: Status = st(Sct::CommandSpecific, 0x90);
    pub const AUTH_REQUIRED: Status = st(Sct::CommandSpecific, 0x91);
    // NVM I/O command specific (SCT 1, SC 0x80.., same codes as Connect's).
    pub const CONFLICTING_ATTRIBUTES: Status = st(Sct::CommandSpecific, 0x80);
    pub const INVALID_PROTECTION_INFO: Status = st(Sct::CommandSpecific, 0x81);
    pub const WRITE_TO_READ_ONLY_RANGE: Status = st(Sct::CommandSpecific, 0x82);

    // Media and data integrity errors (SCT 2).
    pub const WRITE_FAULT: Status = st(Sct::MediaError, 0x80);
    pub const UNRECOVERED_READ_ERROR: Status = st(Sct::MediaError, 0x81);
    pub const GUARD_CHECK_ERROR: Status = st(Sct::MediaError, 0x82);
    pub const APPLICATION_TAG_CHECK_ERROR: Status = st(Sct::MediaError, 0x83);
    pub const REFERENCE_TAG_CHECK_ERROR: Status = st(Sct::MediaError, 0x84);
    pub const COMPARE_FAILURE: Status = st(Sct::MediaError, 0x85);
    pub const ACCESS_DENIED: Status = st(Sct::MediaError, 0x86);
    pub const DEALLOCATED_OR_UNWRITTEN: Status = st(Sct::MediaError, 0x87);

    // Path related status (SCT 3).
    pub const INTERNAL_PATH_ERROR: Status = st(Sct::Path, 0x00);
    pub const ANA_PERSISTENT_LOSS: Status = st(Sct::Path, 0x01);
    pub const ANA_INACCESSIBLE: Status = st(Sct::Path, 0x02);
    pub const ANA_TRANSITION: Status = st(Sct::Path, 0x03);
    pub const CONTROLLER_PATH_ERROR: Status = st(Sct::Path, 0x60);
    pub const HOST_PATH_ERROR: Status = st(Sct::Path, 0x70);
    pub const HOST_ABORTED: Status = st(Sct::Path, 0x71);
}

impl Status {
    /// A status from its type and code, with CRD, More and DNR clear.
    pub const fn new(sct: Sct, sc: u8) -> Status {
        st(sct, sc)
    }

    /// The same status with Do Not Retry set.
    pub const fn with_dnr(mut self) -> Status {
        self.dnr = true;
        self
    }

    /// The same status with More set.
    pub const fn with_more(mut self) -> Status {
        self.more = true;
        self
    }

    /// The same status with the Command Retry Delay index (`crd & 3`).
    pub const fn with_crd(mut self, crd: u8) -> Status {
        self.crd = crd & 0x3;
        self
    }

    /// True for SCT 0 / SC 0 (CRD, More and DNR are ignored).
    pub const fn is_success(&self) -> bool {
        matches!(self.sct, Sct::Generic) && self.sc == 0
    }

    /// True when type and code are the same as `other`'s, whatever CRD, More and DNR are.
    pub fn same_code(&self, other: &Status) -> bool {
        self.sct == other.sct && self.sc == other.sc
    }

    /// Decodes the 15-bit status field (CQE bytes 14..16 shifted right by one, i.e. without the
    /// phase tag). Bit 15 of `field` is ignored.
    pub const fn from_field(field: u16) -> Status {
        Status {
            sc: (field & 0xFF) as u8,
            sct: Sct::from_bits(((field >> 8) & 0x7) as u8),
            crd: ((field >> 11) & 0x3) as u8,
            more: field & (1 << 13) != 0,
            dnr: field & (1 << 14) != 0,
        }
    }

    /// The 15-bit status field, phase tag not included.
    pub const fn to_field(&self) -> u16 {
        (self.sc as u16)
            | ((self.sct.bits() as u16) << 8)
            | (((self.crd & 0x3) as u16) << 11)
            | ((self.more as u16) << 13)
            | ((self.dnr as u16) << 14)
    }

    /// The status's name for a command of `kind`, e.g. "Invalid Field in Command".
    pub fn name_for(&self, kind: CommandKind) -> &'static str {
        match self.sct {
            Sct::Generic => generic_name(self.sc),
            Sct::CommandSpecific => command_specific_name(self.sc, kind),
            Sct::MediaError => media_name(self.sc),
            Sct::Path => path_name(self.sc),
            Sct::Vendor => "Vendor Specific",
            Sct::Reserved(_) => "Reserved Status Code Type",
        }
    }

    /// The status's name when the command is unknown (see [`Status::name_for`]).
    pub fn name(&self) -> &'static str {
        self.name_for(CommandKind::Unknown)
    }

    /// A displayable form that names command-specific codes for a command of `kind`.
    pub fn display_for(&self, kind: CommandKind) -> StatusDisplay {
        StatusDisplay {
            status: *self,
            kind,
        }
    }
}

impl Default for Status {
    fn default() -> Self {
        Status::SUCCESS
    }
}

/// Shows a [`Status`] named for a [`CommandKind`]: "Invalid Field in Command (sct 0 sc 0x02,
/// DNR)".
#[derive(Debug, Clone, Copy)]
pub struct StatusDisplay {
    status: Status,
    kind: CommandKind,
}

impl fmt::Display for StatusDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.status;
        write!(
            f,
            "{} (sct {} sc {:#04x}",
            s.name_for(self.kind),
            s.sct.bits(),
            s.sc
        )?;
        if s.crd != 0 {
            write!(f, ", CRD {}", s.crd)?;
        }
        if s.more {
            f.write_str(", More")?;
        }
        if s.dnr {
            f.write_str(", DNR")?;
        }
        f.write_str(")")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.display_for(CommandKind::Unknown).fmt(f)
    }
}

fn generic_name(sc: u8) -> &'static str {
    match sc {
        0x00 => "Successful Completion",
        0x01 => "Invalid Command Opcode",
        0x02 => "Invalid Field in Command",
        0x03 => "Command ID Conflict",
        0x04 => "Data Transfer Error",
        0x05 => "Commands Aborted due to Power Loss Notification",
        0x06 => "Internal Error",
        0x07 => "Command Abort Requested",
        0x08 => "Command Aborted due to SQ Deletion",
        0x09 => "Command Aborted due to Failed Fused Command",
        0x0A => "Command Aborted due to Missing Fused Command",
        0x0B => "Invalid Namespace or Format",
        0x0C => "Command Sequence Error",
        0x0D => "Invalid SGL Segment Descriptor",
        0x0E => "Invalid Number of SGL Descriptors",
        0x0F => "Data SGL Length Invalid",
        0x10 => "Metadata SGL Length Invalid",
        0x11 => "SGL Descriptor Type Invalid",
        0x12 => "Invalid Use of Controller Memory Buffer",
        0x13 => "PRP Offset Invalid",
        0x14 => "Atomic Write Unit Exceeded",
        0x15 => "Operation Denied",
        0x16 => "SGL Offset Invalid",
        0x18 => "Host Identifier Inconsistent Format",
        0x19 => "Keep Alive Timer Expired",
        0x1A => "Keep Alive Timeout Invalid",
        0x1B => "Command Aborted due to Preempt and Abort",
        0x1C => "Sanitize Failed",
        0x1D => "Sanitize In Progress",
        0x1E => "SGL Data Block Granularity Invalid",
        0x20 => "Namespace is Write Protected",
        0x21 => "Command Interrupted",
        0x22 => "Transient Transport Error",
        0x80 => "LBA Out of Range",
        0x81 => "Capacity Exceeded",
        0x82 => "Namespace Not Ready",
        0x83 => "Reservation Conflict",
        0x84 => "Format In Progress",
        _ => "Unknown Generic Status",
    }
}

fn command_specific_name(sc: u8, kind: CommandKind) -> &'static str {
    use CommandKind::{Fabrics, Io, Unknown};
    match (sc, kind) {
        (0x80, Fabrics) => "Connect Incompatible Format",
        (0x81, Fabrics) => "Connect Controller Busy",
        (0x82, Fabrics) => "Connect Invalid Parameters",
        (0x83, Fabrics) => "Connect Restart Discovery",
        (0x84, Fabrics) => "Connect Invalid Host",
        (0x80, Io) => "Conflicting Attributes",
        (0x81, Io) => "Invalid Protection Information",
        (0x82, Io) => "Attempted Write to Read Only Range",
        (0x80, Unknown) => "Connect Incompatible Format / Conflicting Attributes",
        (0x81, Unknown) => "Connect Controller Busy / Invalid Protection Information",
        (0x82, Unknown) => "Connect Invalid Parameters / Attempted Write to Read Only Range",
        (0x83, Unknown) => "Connect Restart Discovery",
        (0x84, Unknown) => "Connect Invalid Host",
        (0x90, _) => "Invalid Queue Type",
        (0x91, _) => "Authentication Required",
        (0x00, _) => "Completion Queue Invalid",
        (0x01, _) => "Invalid Queue Identifier",
        (0x02, _) => "Invalid Queue Size",
        (0x03, _) => "Abort Command Limit Exceeded",
        (0x05, _) => "Asynchronous Event Request Limit Exceeded",
        (0x06, _) => "Invalid Firmware Slot",
        (0x07, _) => "Invalid Firmware Image",
        (0x08, _) => "Invalid Interrupt Vector",
        (0x09, _) => "Invalid Log Page",
        (0x0A, _) => "Invalid Format",
        (0x0C, _) => "Invalid Queue Deletion",
        (0x0D, _) => "Feature Identifier Not Saveable",
        (0x0E, _) => "Feature Not Changeable",
        (0x0F, _) => "Feature Not Namespace Specific",
        _ => "Unknown Command Specific Status",
    }
}

fn media_name(sc: u8) -> &'static str {
    match sc {
        0x80 => "Write Fault",
        0x81 => "Unrecovered Read Error",
        0x82 => "End-to-end Guard Check Error",
        0x83 => "End-to-end Application Tag Check Error",
        0x84 => "End-to-end Reference Tag Check Error",
        0x85 => "Compare Failure",
        0x86 => "Access Denied",
        0x87 => "Deallocated or Unwritten Logical Block",
        _ => "Unknown Media Error",
    }
}

fn path_name(sc: u8) -> &'static str {
    match sc {
        0x00 => "Internal Path Error",
        0x01 => "Asymmetric Access Persistent Loss",
        0x02 => "Asymmetric Access Inaccessible",
        0x03 => "Asymmetric Access Transition",
        0x60 => "Controller Pathing Error",
        0x70 => "Host Pathing Error",
        0x71 => "Command Aborted By Host",
        _ => "Unknown Path Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_matches_linux_status_values() {
        // Linux keeps status as (CQE status >> 1): NVME_SC_INVALID_FIELD 0x2, NVME_SC_DNR 0x4000,
        // NVME_SC_CONNECT_INVALID_PARAM 0x182, NVME_SC_WRITE_FAULT 0x280, NVME_SC_MORE 0x2000.
        assert_eq!(Status::INVALID_FIELD.with_dnr().to_field(), 0x4002);
        assert_eq!(Status::CONNECT_INVALID_PARAMETERS.to_field(), 0x182);
        assert_eq!(Status::WRITE_FAULT.with_more().to_field(), 0x2280);
        assert_eq!(Status::ANA_TRANSITION.to_field(), 0x303);
        assert_eq!(
            Status::from_field(0x4182),
            Status::CONNECT_INVALID_PARAMETERS.with_dnr()
        );
    }

    #[test]
    fn every_field_value_roundtrips() {
        for f in 0..0x8000u16 {
            assert_eq!(Status::from_field(f).to_field(), f);
        }
    }

    #[test]
    fn display_names_the_status() {
        let s = Status::LBA_OUT_OF_RANGE.with_dnr();
        assert_eq!(s.to_string(), "LBA Out of Range (sct 0 sc 0x80, DNR)");
        let c = Status::CONNECT_INVALID_HOST;
        assert_eq!(
            c.display_for(CommandKind::Fabrics).to_string(),
            "Connect Invalid Host (sct 1 sc 0x84)"
        );
        assert_eq!(
            Status::CONFLICTING_ATTRIBUTES.name_for(CommandKind::Io),
            "Conflicting Attributes"
        );
        assert!(Status::new(Sct::CommandSpecific, 0x80).name().contains('/'));
        assert_eq!(
            Status::UNRECOVERED_READ_ERROR.name(),
            "Unrecovered Read Error"
        );
        assert_eq!(Status::new(Sct::Reserved(5), 1).to_field(), 0x501);
        assert!(Status::SUCCESS.with_dnr().is_success());
        assert!(!Status::INTERNAL.is_success());
    }
}
