//! NVMe/RDMA CM private data: the connect request, accept and reject records, and rdmablk's
//! opt-in "push writes" extension carried in their reserved bytes.
//!
//! ```text
//! Request (host -> target, 32 bytes)
//!  0      2     4        6        8        10          20                               32
//! +------+-----+--------+--------+--------+-----------+--------------------------------+
//! |recfmt| qid |hrqsize |hsqsize | cntlid | rsvd (0)  | rsvd / rdmablk push request    |
//! +------+-----+--------+--------+--------+-----------+--------------------------------+
//!                                                      20    24  25    26     28        32
//!                                                     +-----+---+-----+------+----------+
//!                                                     |magic|ver|flags|slots |slot_bytes|
//!                                                     +-----+---+-----+------+----------+
//! Accept (target -> host, 32 bytes)
//!  0      2        4      8   9     10     12         16          24        28        32
//! +------+--------+------+---+-----+------+----------+-----------+---------+---------+
//! |recfmt|crqsize |magic |ver|flags|slots |slot_bytes| win addr  | win len | win rkey|
//! +------+--------+------+---+-----+------+----------+-----------+---------+---------+
//!                  `-------------- rdmablk push answer (reserved, zero, on standard targets)
//! Reject (target -> host, 4 bytes)
//! +------+------+
//! |recfmt| sts  |   sts 1..8, see CmRejectStatus
//! +------+------+
//! magic = 0x4B424452 little-endian, i.e. the bytes "RDBK"; ver = 1; flags bit 0 = push writes.
//! ```
//!
//! Push-write negotiation rules (see `docs/wire-format.md`):
//! - Opt-in: the host writes the extension only when configured to. The Linux host zero-fills
//!   bytes 8..32, so the magic is absent and the target runs the standard protocol.
//! - The target honours it only if magic, version (exactly 1) and flag bit 0 are all present;
//!   anything else is treated as reserved bytes and ignored, never rejected.
//! - The target writes an answer into the accept only when the request carried a valid
//!   extension: `flags` bit 0 set with the window, or clear with all window fields zero
//!   ("rdmablk target, declined", e.g. no memory windows on this device or the admin queue).
//!   A standard target zero-fills the accept's reserved bytes: no magic, no push writes.
//! - The host honours an answer only if it sent a request; a grant whose window length is not
//!   `slots * slot_bytes` is a protocol error.
//! - Bytes 8..20 of the request (cntlid in newer specs, then reserved) are never used.
//! - The extension never changes the standard fields' meaning: a request with the extension is
//!   a valid standard request, so a standard target connects it normally.
//!
//! The received private data may be longer than the record (InfiniBand CM pads it); only the
//! record's bytes are looked at.

mod accept;
mod push;
mod pushed_sgl;
mod reject;
mod request;

pub use accept::CmAccept;
pub use push::{PushAnswer, PushRequest, PushWindow};
pub use pushed_sgl::{PushedSgl, TYPE_RDMABLK_PUSHED};
pub use reject::{CmReject, CmRejectStatus};
pub use request::CmRequest;

/// Size of the CM connect request record.
pub const CM_REQUEST_LEN: usize = 32;
/// Size of the CM accept record.
pub const CM_ACCEPT_LEN: usize = 32;
/// Size of the CM reject record.
pub const CM_REJECT_LEN: usize = 4;
const _: () = assert!(CM_REQUEST_LEN == 32 && CM_ACCEPT_LEN == 32 && CM_REJECT_LEN == 4);

/// The only record format (NVMe/RDMA 1.0).
pub const RECFMT_1_0: u16 = 0;

/// Extension magic: the bytes "RDBK" read as a little-endian u32.
pub const PUSH_EXT_MAGIC: u32 = u32::from_le_bytes(*b"RDBK");
/// Extension version this code speaks.
pub const PUSH_EXT_VERSION: u8 = 1;
/// Extension flag: push writes (request: asked; accept: granted).
pub const PUSH_FLAG_WRITES: u8 = 0x01;

const REQ_EXT_OFF: usize = 20;
const ACC_EXT_OFF: usize = 4;
const _: () = assert!(REQ_EXT_OFF + 12 == CM_REQUEST_LEN);
const _: () = assert!(ACC_EXT_OFF + 28 == CM_ACCEPT_LEN);

#[cfg(test)]
mod tests;
