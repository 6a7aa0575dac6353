//! The CM connect request record ([`CmRequest`]), host to target, with the push-write
//! request in its reserved bytes.

use super::{
    CmRejectStatus, PushRequest, CM_REQUEST_LEN, PUSH_EXT_MAGIC, PUSH_EXT_VERSION,
    PUSH_FLAG_WRITES, RECFMT_1_0, REQ_EXT_OFF,
};
use crate::nvme::le::{put_u16, put_u32, u16_at, u32_at};

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
