//! Command opcodes: admin, NVM I/O, and the Fabrics command types (fctype, SQE byte 4).

/// Admin command set opcodes (SQE byte 0 on queue 0).
pub mod admin {
    pub const DELETE_IO_SQ: u8 = 0x00;
    pub const CREATE_IO_SQ: u8 = 0x01;
    pub const GET_LOG_PAGE: u8 = 0x02;
    pub const DELETE_IO_CQ: u8 = 0x04;
    pub const CREATE_IO_CQ: u8 = 0x05;
    pub const IDENTIFY: u8 = 0x06;
    pub const ABORT: u8 = 0x08;
    pub const SET_FEATURES: u8 = 0x09;
    pub const GET_FEATURES: u8 = 0x0A;
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    pub const NS_MANAGEMENT: u8 = 0x0D;
    pub const FIRMWARE_COMMIT: u8 = 0x10;
    pub const FIRMWARE_DOWNLOAD: u8 = 0x11;
    pub const NS_ATTACHMENT: u8 = 0x15;
    pub const KEEP_ALIVE: u8 = 0x18;
    pub const DIRECTIVE_SEND: u8 = 0x19;
    pub const DIRECTIVE_RECEIVE: u8 = 0x1A;
    pub const FORMAT_NVM: u8 = 0x80;
    pub const SANITIZE: u8 = 0x84;

    /// The opcode's name for logs ("Unknown" for anything else).
    pub fn name(op: u8) -> &'static str {
        match op {
            DELETE_IO_SQ => "Delete I/O SQ",
            CREATE_IO_SQ => "Create I/O SQ",
            GET_LOG_PAGE => "Get Log Page",
            DELETE_IO_CQ => "Delete I/O CQ",
            CREATE_IO_CQ => "Create I/O CQ",
            IDENTIFY => "Identify",
            ABORT => "Abort",
            SET_FEATURES => "Set Features",
            GET_FEATURES => "Get Features",
            ASYNC_EVENT_REQUEST => "Asynchronous Event Request",
            NS_MANAGEMENT => "Namespace Management",
            FIRMWARE_COMMIT => "Firmware Commit",
            FIRMWARE_DOWNLOAD => "Firmware Image Download",
            NS_ATTACHMENT => "Namespace Attachment",
            KEEP_ALIVE => "Keep Alive",
            DIRECTIVE_SEND => "Directive Send",
            DIRECTIVE_RECEIVE => "Directive Receive",
            FORMAT_NVM => "Format NVM",
            SANITIZE => "Sanitize",
            super::FABRICS => "Fabrics",
            _ => "Unknown",
        }
    }
}

/// NVM command set I/O opcodes (SQE byte 0 on queues 1..).
pub mod io {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const WRITE_UNCORRECTABLE: u8 = 0x04;
    pub const COMPARE: u8 = 0x05;
    pub const WRITE_ZEROES: u8 = 0x08;
    pub const DATASET_MANAGEMENT: u8 = 0x09;

    /// The opcode's name for logs ("Unknown" for anything else).
    pub fn name(op: u8) -> &'static str {
        match op {
            FLUSH => "Flush",
            WRITE => "Write",
            READ => "Read",
            WRITE_UNCORRECTABLE => "Write Uncorrectable",
            COMPARE => "Compare",
            WRITE_ZEROES => "Write Zeroes",
            DATASET_MANAGEMENT => "Dataset Management",
            super::FABRICS => "Fabrics",
            _ => "Unknown",
        }
    }
}

/// The Fabrics command opcode; the command type is `fctype` at SQE byte 4.
pub const FABRICS: u8 = 0x7F;

/// Fabrics command types (SQE byte 4 when the opcode is [`FABRICS`]).
pub mod fctype {
    pub const PROPERTY_SET: u8 = 0x00;
    pub const CONNECT: u8 = 0x01;
    pub const PROPERTY_GET: u8 = 0x04;
    pub const AUTH_SEND: u8 = 0x05;
    pub const AUTH_RECEIVE: u8 = 0x06;
    pub const DISCONNECT: u8 = 0x08;

    /// The command type's name for logs ("Unknown" for anything else).
    pub fn name(fctype: u8) -> &'static str {
        match fctype {
            PROPERTY_SET => "Property Set",
            CONNECT => "Connect",
            PROPERTY_GET => "Property Get",
            AUTH_SEND => "Authentication Send",
            AUTH_RECEIVE => "Authentication Receive",
            DISCONNECT => "Disconnect",
            _ => "Unknown",
        }
    }
}

/// True when the command transfers data host to controller. NVMe encodes the direction in the
/// opcode's two low bits (01 write, 10 read, 11 both); Fabrics commands use fctype the same way.
pub const fn is_host_to_controller(opcode: u8) -> bool {
    opcode & 0x1 != 0
}

/// True when the command transfers data controller to host (see [`is_host_to_controller`]).
pub const fn is_controller_to_host(opcode: u8) -> bool {
    opcode & 0x2 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_direction_follows_opcode_bits() {
        assert!(is_host_to_controller(io::WRITE));
        assert!(!is_controller_to_host(io::WRITE));
        assert!(is_controller_to_host(io::READ));
        assert!(is_controller_to_host(admin::IDENTIFY));
        assert!(is_host_to_controller(fctype::CONNECT));
        assert!(!is_host_to_controller(io::FLUSH) && !is_controller_to_host(io::FLUSH));
        assert_eq!(admin::name(admin::KEEP_ALIVE), "Keep Alive");
        assert_eq!(io::name(0x09), "Dataset Management");
        assert_eq!(fctype::name(0x04), "Property Get");
    }
}
