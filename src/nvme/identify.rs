//! Identify (admin opcode 0x06): the command, and the 4096-byte data structures it returns:
//! controller (CNS 1), namespace (CNS 0), active namespace list (CNS 2), namespace
//! identification descriptors (CNS 3).
//!
//! ```text
//! Identify command: nsid (bytes 4..8); cdw10 bits 7:0 CNS, 31:16 CNTID; cdw11 bits 31:24 CSI.
//! ```
//!
//! Each structure is a file, its byte layout in its module doc: `controller.rs` (with its
//! fields' bits in `controller_bits.rs`), `namespace.rs`, `ns_lists.rs` (the active namespace
//! list and the identification descriptors).

mod controller;
mod controller_bits;
mod namespace;
mod ns_lists;

use super::opcodes::admin;
use super::sqe::Sqe;

pub use controller::{IdentifyController, PowerState, SglNeed};
pub use controller_bits::{
    anacap, cmic, lpa, oaes, oncs, sgls, CNTRLTYPE_DISCOVERY, CNTRLTYPE_IO, CQES_16,
    CTRATT_HOST_ID_128, SQES_64, VWC_PRESENT,
};
pub use namespace::{IdentifyNamespace, Lbaf, LBAF_COUNT};
pub use ns_lists::{
    decode_ns_descriptors, decode_ns_list, encode_ns_descriptors, encode_ns_list, nidt,
    NsDescriptor, NS_LIST_MAX,
};

/// Size of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;
const _: () = assert!(IDENTIFY_LEN == 4096);

/// CNS values.
pub mod cns {
    /// Identify Namespace (NVM command set).
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace identification descriptor list.
    pub const NS_DESC_LIST: u8 = 0x03;
    /// NVM set list.
    pub const NVM_SET_LIST: u8 = 0x04;
    /// I/O command set specific Identify Namespace.
    pub const CSI_NAMESPACE: u8 = 0x05;
    /// I/O command set specific Identify Controller.
    pub const CSI_CONTROLLER: u8 = 0x06;
    /// I/O command set specific active namespace ID list.
    pub const CSI_ACTIVE_NS_LIST: u8 = 0x07;
    /// I/O command set independent Identify Namespace.
    pub const CS_INDEPENDENT_NAMESPACE: u8 = 0x08;
    /// I/O command set data structure.
    pub const COMMAND_SET: u8 = 0x1C;
}

/// The Identify command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentifyCmd {
    /// Controller or namespace structure (see [`cns`]).
    pub cns: u8,
    /// Controller identifier (CNS 0x12/0x13 only).
    pub cntid: u16,
    /// Command set identifier (CNS 0x05.. only).
    pub csi: u8,
    /// Namespace (CNS 0, 3: the namespace; CNS 2: list NSIDs greater than this).
    pub nsid: u32,
}

impl IdentifyCmd {
    /// Reads the fields of an Identify SQE.
    pub fn from_sqe(sqe: &Sqe) -> IdentifyCmd {
        IdentifyCmd {
            cns: sqe.cdw10 as u8,
            cntid: (sqe.cdw10 >> 16) as u16,
            csi: (sqe.cdw11 >> 24) as u8,
            nsid: sqe.nsid,
        }
    }

    /// The SQE (data pointer left for the caller to set).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(admin::IDENTIFY, cid);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.cns) | u32::from(self.cntid) << 16;
        sqe.cdw11 = u32::from(self.csi) << 24;
        sqe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_command_fields() {
        let c = IdentifyCmd {
            cns: cns::NS_DESC_LIST,
            cntid: 0,
            csi: 0,
            nsid: 1,
        };
        let s = c.to_sqe(4);
        assert_eq!((s.opcode, s.nsid, s.cdw10), (0x06, 1, 3));
        assert_eq!(IdentifyCmd::from_sqe(&s), c);
        let s = Sqe {
            cdw10: 0x0007_0005,
            cdw11: 0x0200_0000,
            ..Sqe::default()
        };
        let c = IdentifyCmd::from_sqe(&s);
        assert_eq!((c.cns, c.cntid, c.csi), (5, 7, 2));
    }
}
