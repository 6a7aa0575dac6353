//! Small admin commands: Abort (0x08), Asynchronous Event Request (0x0C) completions, Keep
//! Alive (0x18). Identify, features and log pages have their own modules.
//!
//! ```text
//! Abort:  cdw10 bits 15:0 SQID, 31:16 CID.  Result dw0 bit 0: 1 = not aborted.
//! AER completion dw0: bits 2:0 event type, 15:8 event information, 23:16 log page to read.
//! Keep Alive: no fields.
//! ```

use super::opcodes::admin;
use super::sqe::Sqe;

/// Abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Abort {
    /// Submission queue of the command to abort.
    pub sqid: u16,
    /// Its command identifier.
    pub cid: u16,
}

/// Abort result dw0: the command was not aborted.
pub const ABORT_NOT_ABORTED: u32 = 1;

impl Abort {
    /// Reads the SQE.
    pub fn from_sqe(sqe: &Sqe) -> Abort {
        Abort {
            sqid: sqe.cdw10 as u16,
            cid: (sqe.cdw10 >> 16) as u16,
        }
    }

    /// The SQE.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(admin::ABORT, cid);
        sqe.cdw10 = u32::from(self.sqid) | u32::from(self.cid) << 16;
        sqe
    }
}

/// A Keep Alive SQE.
pub fn keep_alive_sqe(cid: u16) -> Sqe {
    Sqe::new(admin::KEEP_ALIVE, cid)
}

/// An Asynchronous Event Request SQE.
pub fn async_event_request_sqe(cid: u16) -> Sqe {
    Sqe::new(admin::ASYNC_EVENT_REQUEST, cid)
}

/// Asynchronous event types.
pub mod event_type {
    pub const ERROR: u8 = 0;
    pub const SMART: u8 = 1;
    pub const NOTICE: u8 = 2;
    pub const IO_COMMAND_SET: u8 = 6;
    pub const VENDOR: u8 = 7;
}

/// Notice event information values (event type 2).
pub mod notice {
    /// Namespace attribute changed: read the Changed Namespace List log (0x04).
    pub const NS_ATTR_CHANGED: u8 = 0x00;
    pub const FW_ACTIVATION_STARTING: u8 = 0x01;
    pub const TELEMETRY_LOG_CHANGED: u8 = 0x02;
    pub const ANA_CHANGE: u8 = 0x03;
    pub const DISCOVERY_LOG_CHANGED: u8 = 0xF0;
}

/// An asynchronous event, as an AER completion's dw0 carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// Event type (bits 2:0, see [`event_type`]).
    pub event_type: u8,
    /// Event information (bits 15:8).
    pub info: u8,
    /// Log page to read to clear the event (bits 23:16).
    pub log_page: u8,
}

impl AsyncEvent {
    /// "Namespace attribute changed; read the Changed Namespace List".
    pub fn ns_changed() -> AsyncEvent {
        AsyncEvent {
            event_type: event_type::NOTICE,
            info: notice::NS_ATTR_CHANGED,
            log_page: super::log_page::lid::CHANGED_NS_LIST,
        }
    }

    /// "The Discovery Log Page changed; read it again".
    pub fn discovery_changed() -> AsyncEvent {
        AsyncEvent {
            event_type: event_type::NOTICE,
            info: notice::DISCOVERY_LOG_CHANGED,
            log_page: super::log_page::lid::DISCOVERY,
        }
    }

    /// "An ANA group's state changed; read the ANA log".
    pub fn ana_changed() -> AsyncEvent {
        AsyncEvent {
            event_type: event_type::NOTICE,
            info: notice::ANA_CHANGE,
            log_page: super::log_page::lid::ANA,
        }
    }

    /// "A Reservation Notification log page is available; read it" (I/O command set event).
    pub fn reservation_log() -> AsyncEvent {
        AsyncEvent {
            event_type: event_type::IO_COMMAND_SET,
            info: 0,
            log_page: super::log_page::lid::RESERVATION_NOTIFICATION,
        }
    }

    /// To dw0.
    pub fn to_dw0(self) -> u32 {
        u32::from(self.event_type & 0x7)
            | u32::from(self.info) << 8
            | u32::from(self.log_page) << 16
    }

    /// From dw0.
    pub fn from_dw0(v: u32) -> AsyncEvent {
        AsyncEvent {
            event_type: (v & 0x7) as u8,
            info: (v >> 8) as u8,
            log_page: (v >> 16) as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_and_events() {
        let a = Abort { sqid: 2, cid: 0x55 };
        let s = a.to_sqe(9);
        assert_eq!((s.opcode, s.cdw10), (0x08, 0x0055_0002));
        assert_eq!(Abort::from_sqe(&s), a);
        assert_eq!(AsyncEvent::ns_changed().to_dw0(), 0x0004_0002);
        assert_eq!(AsyncEvent::from_dw0(0x0004_0002), AsyncEvent::ns_changed());
        assert_eq!(AsyncEvent::ana_changed().to_dw0(), 0x000C_0302);
        assert_eq!(keep_alive_sqe(3).to_bytes()[0], 0x18);
        assert_eq!(async_event_request_sqe(3).opcode, 0x0C);
    }
}
