//! rdmablk's pushed-data SGL descriptor ([`PushedSgl`]): the data of a write already placed
//! in a slot of the granted push window.

use super::PushWindow;
use crate::nvme::le::{put_u32, put_u64, u32_at, u64_at};
use crate::nvme::Status;

/// Descriptor type byte of rdmablk's pushed data (SGL descriptor type 0xF, vendor specific,
/// subtype 0) in SQE DPTR.
pub const TYPE_RDMABLK_PUSHED: u8 = 0xF0;

/// rdmablk push writes: "the data of this write is already in slot `slot` of the push window
/// the target granted on this queue", in SQE DPTR. The one decoder both sides use.
///
/// ```text
///  0                   8           12         15   16
/// +-------------------+-----------+----------+----+
/// | slot u64          | len u32   | rsvd[3]  |0xF0|
/// +-------------------+-----------+----------+----+
/// ```
/// Rules both sides follow:
/// - Only for host-to-controller data (Write), only on a queue whose accept granted a window.
///   On any other queue the target answers SGL Descriptor Type Invalid (DNR).
/// - The slot is the command's CID modulo the granted slots, below the granted slots; the
///   target answers any other slot with SGL Offset Invalid (DNR) (a slot is then busy exactly
///   while its command is). `len` <= granted slot bytes, else Data SGL Length Invalid (DNR);
///   the target never touches the window outside the slot.
/// - The host RDMA WRITEs the data to the slot on the same QP before it SENDs the capsule (RC
///   ordering makes the data visible before the capsule arrives) and reuses the slot only after
///   that command's response has arrived; the target reads the slot only between the two.
/// - Reserved bytes are sent as zero and ignored on receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushedSgl {
    /// Slot index in the granted window (bytes 0..8; a host sends a value below 65536).
    pub slot: u64,
    /// Bytes of data in the slot, from its start.
    pub len: u32,
}

impl PushedSgl {
    /// The descriptor, if `b` is one (type byte 0xF0); `None` for every other type.
    pub fn decode(b: &[u8; crate::nvme::sgl::SGL_DESC_LEN]) -> Option<PushedSgl> {
        (b[15] == TYPE_RDMABLK_PUSHED).then(|| PushedSgl {
            slot: u64_at(b, 0),
            len: u32_at(b, 8),
        })
    }

    /// The 16 descriptor bytes (put them in SQE DPTR).
    pub fn encode(&self) -> [u8; crate::nvme::sgl::SGL_DESC_LEN] {
        let mut b = [0u8; crate::nvme::sgl::SGL_DESC_LEN];
        put_u64(&mut b, 0, self.slot);
        put_u32(&mut b, 8, self.len);
        b[15] = TYPE_RDMABLK_PUSHED;
        b
    }

    /// Checks the descriptor against the window `w` granted on this queue and the slot its
    /// command owns (`owned_slot`: CID modulo the slots): `Err` is the status to answer with.
    pub fn check(&self, w: &PushWindow, owned_slot: u64) -> Result<(), Status> {
        if self.slot >= u64::from(w.slots) || self.slot != owned_slot {
            return Err(Status::SGL_INVALID_OFFSET.with_dnr());
        }
        if self.len > w.slot_bytes {
            return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
        }
        Ok(())
    }
}
