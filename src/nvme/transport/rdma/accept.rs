//! The CM accept record ([`CmAccept`]), target to host, with the push-write answer in its
//! reserved bytes.

use super::{
    PushAnswer, PushWindow, ACC_EXT_OFF, CM_ACCEPT_LEN, PUSH_EXT_MAGIC, PUSH_EXT_VERSION,
    PUSH_FLAG_WRITES, RECFMT_1_0,
};
use crate::nvme::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::nvme::WireError;

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
