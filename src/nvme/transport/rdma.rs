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

use std::fmt;

use crate::nvme::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::nvme::{Status, WireError};

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

/// Reject status (`sts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmRejectStatus {
    /// 1: private data too short.
    InvalidLength,
    /// 2: record format not 0.
    InvalidRecordFormat,
    /// 3: queue ID out of range or in use.
    InvalidQid,
    /// 4: host send queue size out of range.
    InvalidHsqsize,
    /// 5: host receive queue size out of range.
    InvalidHrqsize,
    /// 6: no resources.
    NoResources,
    /// 7: invalid IRD (responder resources).
    InvalidIrd,
    /// 8: invalid ORD (initiator depth).
    InvalidOrd,
    /// Any other value, kept for exact roundtrips.
    Unknown(u16),
}

impl CmRejectStatus {
    /// From the wire value.
    pub fn from_u16(v: u16) -> CmRejectStatus {
        use CmRejectStatus::*;
        match v {
            1 => InvalidLength,
            2 => InvalidRecordFormat,
            3 => InvalidQid,
            4 => InvalidHsqsize,
            5 => InvalidHrqsize,
            6 => NoResources,
            7 => InvalidIrd,
            8 => InvalidOrd,
            other => Unknown(other),
        }
    }

    /// The wire value.
    pub fn to_u16(self) -> u16 {
        use CmRejectStatus::*;
        match self {
            InvalidLength => 1,
            InvalidRecordFormat => 2,
            InvalidQid => 3,
            InvalidHsqsize => 4,
            InvalidHrqsize => 5,
            NoResources => 6,
            InvalidIrd => 7,
            InvalidOrd => 8,
            Unknown(v) => v,
        }
    }
}

impl fmt::Display for CmRejectStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use CmRejectStatus::*;
        let s = match self {
            InvalidLength => "invalid private data length",
            InvalidRecordFormat => "invalid record format",
            InvalidQid => "invalid queue ID",
            InvalidHsqsize => "invalid host SQ size",
            InvalidHrqsize => "invalid host RQ size",
            NoResources => "no resources",
            InvalidIrd => "invalid IRD",
            InvalidOrd => "invalid ORD",
            Unknown(v) => return write!(f, "unrecognized reject status {v}"),
        };
        f.write_str(s)
    }
}

/// What a host asks for in the push-write extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushRequest {
    /// Slots wanted (0: the target chooses).
    pub slots: u16,
    /// Bytes per slot wanted (0: the target chooses).
    pub slot_bytes: u32,
}

/// The per-connection window a target grants for push writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushWindow {
    /// Number of slots (at least 1).
    pub slots: u16,
    /// Bytes per slot (at least 1).
    pub slot_bytes: u32,
    /// Remote address of slot 0.
    pub addr: u64,
    /// Window length in bytes: `slots * slot_bytes`.
    pub len: u32,
    /// Remote key of the window (memory window or per-connection MR).
    pub rkey: u32,
}

impl PushWindow {
    /// A window of `slots` slots of `slot_bytes`, or `None` when empty or longer than 4 GiB.
    pub fn new(addr: u64, rkey: u32, slots: u16, slot_bytes: u32) -> Option<PushWindow> {
        let len = u32::try_from(u64::from(slots) * u64::from(slot_bytes)).ok()?;
        (slots > 0 && slot_bytes > 0).then_some(PushWindow {
            slots,
            slot_bytes,
            addr,
            len,
            rkey,
        })
    }

    /// Remote address of slot `i`, or `None` past the last slot.
    pub fn slot_addr(&self, i: u16) -> Option<u64> {
        (i < self.slots).then(|| {
            self.addr
                .wrapping_add(u64::from(i) * u64::from(self.slot_bytes))
        })
    }
}

/// The target's answer to a push-write request, as an accept carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushAnswer {
    /// No extension: a standard target, or no request was made. Reserved bytes are zero.
    Absent,
    /// An rdmablk target that understood the request and declined it.
    Declined,
    /// Granted.
    Granted(PushWindow),
}

/// The CM connect request private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRequest {
    /// Queue: 0 admin, 1.. I/O.
    pub qid: u16,
    /// Host receive queue size (entries; the Linux host sends queue size).
    pub hrqsize: u16,
    /// Host send queue size, 0-based (the Linux host sends queue size - 1).
    pub hsqsize: u16,
    /// Controller ID (newer specs, for I/O queues; the Linux host sends 0). Informational.
    pub cntlid: u16,
    /// rdmablk push-write request, when present and valid.
    pub push: Option<PushRequest>,
}

impl CmRequest {
    /// Decodes received private data, or the reject status to answer with. Data longer than
    /// 32 bytes is accepted (transport padding). Reserved bytes are ignored unless they hold a
    /// valid push-write request.
    pub fn decode(b: &[u8]) -> Result<CmRequest, CmRejectStatus> {
        let b: &[u8; CM_REQUEST_LEN] = b
            .get(..CM_REQUEST_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(CmRejectStatus::InvalidLength)?;
        if u16_at(b, 0) != RECFMT_1_0 {
            return Err(CmRejectStatus::InvalidRecordFormat);
        }
        let e = REQ_EXT_OFF;
        let push = (u32_at(b, e) == PUSH_EXT_MAGIC
            && b[e + 4] == PUSH_EXT_VERSION
            && b[e + 5] & PUSH_FLAG_WRITES != 0)
            .then(|| PushRequest {
                slots: u16_at(b, e + 6),
                slot_bytes: u32_at(b, e + 8),
            });
        Ok(CmRequest {
            qid: u16_at(b, 2),
            hrqsize: u16_at(b, 4),
            hsqsize: u16_at(b, 6),
            cntlid: u16_at(b, 8),
            push,
        })
    }

    /// Encodes the record; reserved bytes are zero unless `push` is set.
    pub fn encode(&self) -> [u8; CM_REQUEST_LEN] {
        let mut b = [0u8; CM_REQUEST_LEN];
        put_u16(&mut b, 0, RECFMT_1_0);
        put_u16(&mut b, 2, self.qid);
        put_u16(&mut b, 4, self.hrqsize);
        put_u16(&mut b, 6, self.hsqsize);
        put_u16(&mut b, 8, self.cntlid);
        if let Some(p) = self.push {
            let e = REQ_EXT_OFF;
            put_u32(&mut b, e, PUSH_EXT_MAGIC);
            b[e + 4] = PUSH_EXT_VERSION;
            b[e + 5] = PUSH_FLAG_WRITES;
            put_u16(&mut b, e + 6, p.slots);
            put_u32(&mut b, e + 8, p.slot_bytes);
        }
        b
    }

    /// Submission queue entries the host will use (HSQSIZE + 1).
    pub fn sq_entries(&self) -> u32 {
        u32::from(self.hsqsize) + 1
    }

    /// Checks the sizes against the most entries a queue may have (`max_entries`, e.g. 32 on
    /// the admin queue, 128 on I/O queues): HSQSIZE + 1 and HRQSIZE within 1..=max.
    pub fn check_queue_sizes(&self, max_entries: u16) -> Result<(), CmRejectStatus> {
        if self.sq_entries() > u32::from(max_entries) {
            return Err(CmRejectStatus::InvalidHsqsize);
        }
        if self.hrqsize == 0 || self.hrqsize > max_entries {
            return Err(CmRejectStatus::InvalidHrqsize);
        }
        Ok(())
    }
}

/// The CM accept private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmAccept {
    /// Controller receive queue size (nvmet: HSQSIZE + 1).
    pub crqsize: u16,
    /// Push-write answer; [`PushAnswer::Absent`] unless the request carried the extension.
    pub push: PushAnswer,
}

impl CmAccept {
    /// Decodes received private data (at least 32 bytes). A grant that does not add up is an
    /// error; a missing or foreign extension reads as [`PushAnswer::Absent`].
    pub fn decode(b: &[u8]) -> Result<CmAccept, WireError> {
        let b: &[u8; CM_ACCEPT_LEN] = b
            .get(..CM_ACCEPT_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(WireError::Length {
                what: "RDMA CM accept private data",
                len: b.len(),
                expected: CM_ACCEPT_LEN,
            })?;
        let recfmt = u16_at(b, 0);
        if recfmt != RECFMT_1_0 {
            return Err(WireError::RecordFormat {
                what: "RDMA CM accept",
                found: recfmt,
            });
        }
        Ok(CmAccept {
            crqsize: u16_at(b, 2),
            push: decode_answer(b)?,
        })
    }

    /// Encodes the record.
    pub fn encode(&self) -> [u8; CM_ACCEPT_LEN] {
        let mut b = [0u8; CM_ACCEPT_LEN];
        put_u16(&mut b, 0, RECFMT_1_0);
        put_u16(&mut b, 2, self.crqsize);
        let e = ACC_EXT_OFF;
        match self.push {
            PushAnswer::Absent => {}
            PushAnswer::Declined => {
                put_u32(&mut b, e, PUSH_EXT_MAGIC);
                b[e + 4] = PUSH_EXT_VERSION;
            }
            PushAnswer::Granted(w) => {
                assert_eq!(
                    u64::from(w.len),
                    u64::from(w.slots) * u64::from(w.slot_bytes),
                    "push window length must be slots * slot_bytes"
                );
                put_u32(&mut b, e, PUSH_EXT_MAGIC);
                b[e + 4] = PUSH_EXT_VERSION;
                b[e + 5] = PUSH_FLAG_WRITES;
                put_u16(&mut b, e + 6, w.slots);
                put_u32(&mut b, e + 8, w.slot_bytes);
                put_u64(&mut b, e + 12, w.addr);
                put_u32(&mut b, e + 20, w.len);
                put_u32(&mut b, e + 24, w.rkey);
            }
        }
        b
    }
}

fn decode_answer(b: &[u8; CM_ACCEPT_LEN]) -> Result<PushAnswer, WireError> {
    let e = ACC_EXT_OFF;
    if u32_at(b, e) != PUSH_EXT_MAGIC || b[e + 4] != PUSH_EXT_VERSION {
        return Ok(PushAnswer::Absent);
    }
    if b[e + 5] & PUSH_FLAG_WRITES == 0 {
        return Ok(PushAnswer::Declined);
    }
    let (slots, slot_bytes) = (u16_at(b, e + 6), u32_at(b, e + 8));
    let (addr, len, rkey) = (u64_at(b, e + 12), u32_at(b, e + 20), u32_at(b, e + 24));
    match PushWindow::new(addr, rkey, slots, slot_bytes) {
        Some(w) if w.len == len => Ok(PushAnswer::Granted(w)),
        _ => Err(WireError::field(
            "RDMA CM accept push window",
            format!("{slots} slots of {slot_bytes} bytes do not make a window of {len} bytes"),
        )),
    }
}

/// The CM reject private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReject {
    /// Why.
    pub status: CmRejectStatus,
}

impl CmReject {
    /// Decodes received private data (at least 4 bytes).
    pub fn decode(b: &[u8]) -> Result<CmReject, WireError> {
        let b: &[u8; CM_REJECT_LEN] = b
            .get(..CM_REJECT_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(WireError::Length {
                what: "RDMA CM reject private data",
                len: b.len(),
                expected: CM_REJECT_LEN,
            })?;
        let recfmt = u16_at(b, 0);
        if recfmt != RECFMT_1_0 {
            return Err(WireError::RecordFormat {
                what: "RDMA CM reject",
                found: recfmt,
            });
        }
        Ok(CmReject {
            status: CmRejectStatus::from_u16(u16_at(b, 2)),
        })
    }

    /// Encodes the record.
    pub fn encode(&self) -> [u8; CM_REJECT_LEN] {
        let mut b = [0u8; CM_REJECT_LEN];
        put_u16(&mut b, 0, RECFMT_1_0);
        put_u16(&mut b, 2, self.status.to_u16());
        b
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The Linux host's admin queue request: qid 0, hrqsize 32, hsqsize 31, rest zero.
    const LINUX_ADMIN_REQ: [u8; 32] = {
        let mut b = [0u8; 32];
        b[4] = 32;
        b[6] = 31;
        b
    };

    #[test]
    fn decodes_linux_request_without_extension() {
        let r = CmRequest::decode(&LINUX_ADMIN_REQ).unwrap();
        assert_eq!(
            r,
            CmRequest {
                qid: 0,
                hrqsize: 32,
                hsqsize: 31,
                cntlid: 0,
                push: None
            }
        );
        assert_eq!(r.encode(), LINUX_ADMIN_REQ);
        assert!(r.check_queue_sizes(32).is_ok());
        assert_eq!(r.check_queue_sizes(16), Err(CmRejectStatus::InvalidHsqsize));
        // IB CM pads private data: longer is fine.
        let mut padded = [0u8; 56];
        padded[..32].copy_from_slice(&LINUX_ADMIN_REQ);
        assert_eq!(CmRequest::decode(&padded).unwrap(), r);
    }

    #[test]
    fn request_errors() {
        assert_eq!(
            CmRequest::decode(&[0u8; 31]),
            Err(CmRejectStatus::InvalidLength)
        );
        let mut b = LINUX_ADMIN_REQ;
        b[0] = 1;
        assert_eq!(
            CmRequest::decode(&b),
            Err(CmRejectStatus::InvalidRecordFormat)
        );
        let r = CmRequest {
            qid: 1,
            hrqsize: 0,
            hsqsize: 7,
            cntlid: 0,
            push: None,
        };
        assert_eq!(
            r.check_queue_sizes(128),
            Err(CmRejectStatus::InvalidHrqsize)
        );
    }

    #[test]
    fn push_request_layout_and_roundtrip() {
        let p = PushRequest {
            slots: 64,
            slot_bytes: 8192,
        };
        let r = CmRequest {
            qid: 2,
            hrqsize: 128,
            hsqsize: 127,
            cntlid: 0,
            push: Some(p),
        };
        let b = r.encode();
        assert_eq!(
            &b[8..20],
            &[0u8; 12],
            "cntlid and the bytes after it stay zero"
        );
        assert_eq!(&b[20..24], b"RDBK");
        assert_eq!((b[24], b[25]), (1, 1));
        assert_eq!(&b[26..28], &64u16.to_le_bytes());
        assert_eq!(&b[28..32], &8192u32.to_le_bytes());
        assert_eq!(CmRequest::decode(&b).unwrap(), r);
    }

    #[test]
    fn push_request_needs_magic_version_and_flag() {
        let r = CmRequest {
            qid: 1,
            hrqsize: 4,
            hsqsize: 3,
            cntlid: 0,
            push: Some(PushRequest {
                slots: 0,
                slot_bytes: 0,
            }),
        };
        for (i, v) in [(20usize, b'X'), (24, 2), (24, 0), (25, 0)] {
            let mut b = r.encode();
            b[i] = v;
            let d = CmRequest::decode(&b).unwrap();
            assert_eq!(d.push, None, "byte {i} = {v}");
            assert_eq!(
                (d.qid, d.hrqsize, d.hsqsize),
                (1, 4, 3),
                "standard fields intact"
            );
        }
        // Junk in reserved bytes without the magic is ignored, not rejected.
        let mut b = LINUX_ADMIN_REQ;
        b[10..32].fill(0xA5);
        assert_eq!(CmRequest::decode(&b).unwrap().push, None);
    }

    #[test]
    fn accept_standard_declined_granted() {
        // nvmet: crqsize = hsqsize + 1, reserved zero.
        let std_acc = CmAccept {
            crqsize: 32,
            push: PushAnswer::Absent,
        };
        let b = std_acc.encode();
        assert_eq!(b[..4], [0, 0, 32, 0]);
        assert_eq!(&b[4..], &[0u8; 28]);
        assert_eq!(CmAccept::decode(&b).unwrap(), std_acc);

        let dec = CmAccept {
            crqsize: 128,
            push: PushAnswer::Declined,
        };
        let b = dec.encode();
        assert_eq!(&b[4..8], b"RDBK");
        assert_eq!(&b[9..], &[0u8; 23]);
        assert_eq!(CmAccept::decode(&b).unwrap(), dec);

        let w = PushWindow::new(0x7F00_0000_1000, 0xABCD, 64, 8192).unwrap();
        assert_eq!(w.len, 512 * 1024);
        assert_eq!(w.slot_addr(1), Some(0x7F00_0000_3000));
        assert_eq!(w.slot_addr(64), None);
        let acc = CmAccept {
            crqsize: 128,
            push: PushAnswer::Granted(w),
        };
        let b = acc.encode();
        assert_eq!((b[8], b[9]), (1, 1));
        assert_eq!(&b[16..24], &0x7F00_0000_1000u64.to_le_bytes());
        assert_eq!(&b[24..28], &(512u32 * 1024).to_le_bytes());
        assert_eq!(&b[28..32], &0xABCDu32.to_le_bytes());
        assert_eq!(CmAccept::decode(&b).unwrap(), acc);

        let mut bad = b;
        bad[24] ^= 1;
        assert!(
            CmAccept::decode(&bad).is_err(),
            "length must be slots * slot_bytes"
        );
        let mut zero_slots = b;
        zero_slots[10..12].fill(0);
        assert!(CmAccept::decode(&zero_slots).is_err());
        assert!(PushWindow::new(0, 0, u16::MAX, u32::MAX).is_none());
        assert!(CmAccept::decode(&b[..31]).is_err());
        let mut f = b;
        f[0] = 1;
        assert!(matches!(
            CmAccept::decode(&f),
            Err(WireError::RecordFormat { found: 1, .. })
        ));
    }

    #[test]
    fn reject_roundtrip() {
        for v in 1..=9u16 {
            let r = CmReject {
                status: CmRejectStatus::from_u16(v),
            };
            let b = r.encode();
            assert_eq!(b, [0, 0, v as u8, 0]);
            assert_eq!(CmReject::decode(&b).unwrap(), r);
            assert_eq!(r.status.to_u16(), v);
        }
        assert_eq!(
            CmRejectStatus::InvalidHsqsize.to_string(),
            "invalid host SQ size"
        );
        assert!(CmReject::decode(&[0, 0, 1]).is_err());
    }

    #[test]
    fn pushed_descriptor_layout_and_checks() {
        let p = PushedSgl {
            slot: 0x0102,
            len: 4096,
        };
        let b = p.encode();
        assert_eq!(b, [2, 1, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0xF0]);
        assert_eq!(PushedSgl::decode(&b), Some(p));
        assert_eq!(
            crate::nvme::Sgl::decode(&b),
            Err(Status::SGL_INVALID_TYPE.with_dnr())
        );
        let other = crate::nvme::Sgl::InCapsule(crate::nvme::InCapsuleSgl { offset: 0, len: 8 });
        assert_eq!(PushedSgl::decode(&other.encode()), None);
        let w = |slots, slot_bytes| PushWindow {
            slots,
            slot_bytes,
            addr: 0,
            len: u32::from(slots) * slot_bytes,
            rkey: 1,
        };
        assert!(p.check(&w(0x0103, 4096), 0x0102).is_ok());
        let offset = Err(Status::SGL_INVALID_OFFSET.with_dnr());
        assert_eq!(p.check(&w(0x0102, 4096), 0x0102), offset);
        assert_eq!(p.check(&w(0x0103, 4096), 0x0101), offset);
        let mut high = b;
        high[7] = 1; // bytes 2..8 are part of the slot index
        assert_eq!(
            PushedSgl::decode(&high)
                .unwrap()
                .check(&w(0x0103, 4096), 0x0102),
            offset
        );
        assert_eq!(
            p.check(&w(0x0103, 4095), 0x0102),
            Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr())
        );
    }
}
