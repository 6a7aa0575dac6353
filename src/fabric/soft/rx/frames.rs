//! What each received frame does: the responder's side of SEND, WRITE and READ requests
//! (checks against keys, ranges and posted receives; payloads copied straight between the
//! socket buffer and registered memory; the ACK or NAK queued), and the requester's side of
//! ACK, NAK and READ responses (completions). `mod.rs` decides who reads and when.

use std::sync::atomic::Ordering;

use crate::fabric::{Access, CmEvent, WcStatus};

use super::super::mr::{invalidate, resolve_local, resolve_remote, MrAccess};
use super::super::queue::{Resp, RespKind, TxKindOf};
use super::super::wire::{Header, Opcode, Syndrome, HEADER_LEN};
use super::{io, Closed, Rx};

impl Rx {
    /// Reads and handles one frame.
    pub(super) fn frame(&mut self) -> std::result::Result<(), Closed> {
        let mut hb = [0u8; HEADER_LEN];
        self.rd.read_exact(&mut hb).map_err(io)?;
        let h = match Header::decode(&hb) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(qpn = self.sh.qpn, error = %e, "soft QP: malformed frame");
                return Err(format!("malformed frame: {e}"));
            }
        };
        match h.op {
            Opcode::Send | Opcode::SendInv => self.on_send(&h),
            Opcode::Write => self.on_write(&h),
            Opcode::ReadReq => self.on_read_req(&h),
            Opcode::Ack | Opcode::Nak => self.on_ack(&h),
            Opcode::ReadResp => self.on_read_resp(&h),
            Opcode::Rtu => {
                self.sh.cm.push(CmEvent::Established);
                Ok(())
            }
            Opcode::Disconnect => Err("peer disconnected".into()),
            Opcode::ConnectReq | Opcode::Accept | Opcode::Reject => {
                Err(format!("unexpected {:?} on a connected QP", h.op))
            }
        }
    }

    fn discard(&mut self, mut len: usize) -> Result<(), Closed> {
        while len > 0 {
            let n = len.min(self.scratch.len());
            self.rd.read_exact(&mut self.scratch[..n]).map_err(io)?;
            len -= n;
        }
        Ok(())
    }

    /// Reads `len` payload bytes into the regions of `self.accs` / `self.sges`, in order.
    fn scatter(&mut self, len: u32) -> Result<(), Closed> {
        let mut left = len as usize;
        for (acc, s) in self.accs.iter().zip(&self.sges) {
            if left == 0 {
                break;
            }
            let n = left.min(s.length as usize);
            self.rd.read_exact(acc.slice_mut(s.addr, n)).map_err(io)?;
            left -= n;
        }
        debug_assert_eq!(left, 0);
        Ok(())
    }

    /// Resolves `self.sges` as destinations into `self.accs`; returns their total length.
    fn resolve_dest(&mut self) -> Result<u64, WcStatus> {
        self.accs.clear();
        let mut total = 0u64;
        for s in &self.sges {
            let acc = resolve_local(&self.sh.dev, s.lkey, s.addr, s.length, true, self.sh.pd_id)?;
            self.accs.push(acc);
            total += s.length as u64;
        }
        Ok(total)
    }

    fn respond(&mut self, psn: u32, kind: RespKind) -> Result<(), Closed> {
        let mut sq = self.sh.lock_sq();
        if sq.responses.len() >= sq.responses_max {
            return Err("peer exceeded its send queue depth (too many requests in flight)".into());
        }
        if sq.responses.is_empty() {
            // What was held before went out (with a frame of the application): a new hold.
            self.acks_since = None;
        }
        self.urgent |= !matches!(kind, RespKind::Ack);
        sq.responses.push_back(Resp { psn, kind });
        self.dirty = true;
        Ok(())
    }

    /// A request failed at the responder: NAK it and move this QP to the error state.
    ///
    /// The NAK is queued first (queued responses still go in the error state): the error
    /// flushes this QP's receives, and a disconnect the application starts on seeing such a
    /// flush then goes out after the NAK instead of overtaking it, so the requester learns the
    /// real cause (e.g. REMOTE_ACCESS_ERROR) rather than a flush.
    fn responder_error(&mut self, psn: u32, syn: Syndrome) -> Result<(), Closed> {
        let r = self.respond(psn, RespKind::Nak(syn));
        let mut sq = self.sh.lock_sq();
        self.sh.fail(&mut sq);
        r
    }

    /// Whether to execute request `h`; if not, its payload is consumed (and, in the error
    /// state, the request is NAKed).
    fn gate(&mut self, h: &Header) -> Result<bool, Closed> {
        if self.sh.error.load(Ordering::SeqCst) {
            self.discard(h.body_len() as usize)?;
            self.respond(h.psn, RespKind::Nak(Syndrome::ResponderError))?;
            return Ok(false);
        }
        if h.psn != self.expected_psn {
            self.discard(h.body_len() as usize)?;
            return Ok(false);
        }
        Ok(true)
    }

    /// The memory a one-sided request `h` names, if its rkey, range and `access` check out
    /// against this QP's PD (and, for a window, this QP).
    fn remote(&self, h: &Header, access: Access) -> Option<MrAccess> {
        let sh = &self.sh;
        let len = h.length as u64;
        resolve_remote(
            &sh.dev,
            h.rkey,
            h.remote_addr,
            len,
            access,
            sh.pd_id,
            sh.qpn,
        )
    }

    fn on_write(&mut self, h: &Header) -> Result<(), Closed> {
        if !self.gate(h)? {
            return Ok(());
        }
        if h.length > 0 {
            match self.remote(h, Access::REMOTE_WRITE) {
                Some(acc) => {
                    let dst = acc.slice_mut(h.remote_addr, h.length as usize);
                    self.rd.read_exact(dst).map_err(io)?;
                }
                None => {
                    self.discard(h.length as usize)?;
                    return self.responder_error(h.psn, Syndrome::RemoteAccess);
                }
            }
        }
        self.expected_psn = self.expected_psn.wrapping_add(1);
        self.respond(h.psn, RespKind::Ack)
    }

    fn on_read_req(&mut self, h: &Header) -> Result<(), Closed> {
        if !self.gate(h)? {
            return Ok(());
        }
        let acc = if h.length > 0 {
            match self.remote(h, Access::REMOTE_READ) {
                Some(acc) => Some(acc),
                None => return self.responder_error(h.psn, Syndrome::RemoteAccess),
            }
        } else {
            None
        };
        self.expected_psn = self.expected_psn.wrapping_add(1);
        let kind = RespKind::ReadResp {
            acc,
            addr: h.remote_addr,
            len: h.length,
        };
        self.respond(h.psn, kind)
    }

    fn on_send(&mut self, h: &Header) -> Result<(), Closed> {
        if !self.gate(h)? {
            return Ok(());
        }
        let len = h.length;
        if self
            .sh
            .rq
            .lock()
            .unwrap()
            .begin_head(&mut self.sges)
            .is_none()
        {
            // No receive posted: receiver not ready; the requester comes back to this PSN.
            self.discard(len as usize)?;
            return self.respond(h.psn, RespKind::Nak(Syndrome::Rnr));
        }
        let status = match self.resolve_dest() {
            Ok(cap) if cap < len as u64 => WcStatus::LocLenErr,
            Ok(_) => WcStatus::Success,
            Err(s) => s,
        };
        if status != WcStatus::Success {
            self.accs.clear();
            self.discard(len as usize)?;
            self.sh.rq.lock().unwrap().finish_head(status, 0, None);
            let syn = match status {
                WcStatus::LocLenErr => Syndrome::InvalidRequest,
                _ => Syndrome::RemoteOperation,
            };
            return self.responder_error(h.psn, syn);
        }
        let r = self.scatter(len);
        self.accs.clear();
        if let Err(e) = r {
            self.sh
                .rq
                .lock()
                .unwrap()
                .finish_head(WcStatus::WrFlushErr, 0, None);
            return Err(e);
        }
        let mut inv = None;
        if h.op == Opcode::SendInv {
            if !invalidate(&self.sh.dev, h.rkey, self.sh.pd_id, Some(self.sh.qpn)) {
                let mut rq = self.sh.rq.lock().unwrap();
                rq.finish_head(WcStatus::RemInvReqErr, len, None);
                drop(rq);
                return self.responder_error(h.psn, Syndrome::InvalidRequest);
            }
            inv = Some(h.rkey);
        }
        self.expected_psn = self.expected_psn.wrapping_add(1);
        // The ACK is queued before the receive completes, so a disconnect the application
        // starts on seeing that completion goes out after the ACK, not before it.
        let r = self.respond(h.psn, RespKind::Ack);
        let mut rq = self.sh.rq.lock().unwrap();
        rq.finish_head(WcStatus::Success, len, inv);
        r
    }

    fn on_ack(&mut self, h: &Header) -> Result<(), Closed> {
        let mut sq = self.sh.lock_sq();
        if sq.error {
            return Ok(()); // everything outstanding was flushed; late answers are moot
        }
        let Some((idx, kind)) = sq.in_flight(h.psn) else {
            return Err(format!(
                "response for PSN {} that is not outstanding",
                h.psn
            ));
        };
        let status = match (h.op, h.syndrome, kind) {
            (Opcode::Ack, _, TxKindOf::AckedOp) => WcStatus::Success,
            (Opcode::Nak, Syndrome::Rnr, TxKindOf::AckedOp) => {
                sq.rnr_rewind(idx);
                self.sh.sync_error(&sq);
                self.dirty = true;
                self.urgent = true;
                return Ok(());
            }
            (Opcode::Nak, Syndrome::RemoteAccess, _) => WcStatus::RemAccessErr,
            (Opcode::Nak, Syndrome::InvalidRequest, _) => WcStatus::RemInvReqErr,
            (Opcode::Nak, Syndrome::RemoteOperation, _) => WcStatus::RemOpErr,
            (Opcode::Nak, Syndrome::ResponderError, _) => WcStatus::RetryExcErr,
            _ => {
                return Err(format!(
                    "{:?}/{:?} does not answer a {kind:?}",
                    h.op, h.syndrome
                ))
            }
        };
        sq.complete(idx, status, 0);
        self.sh.sync_error(&sq);
        self.dirty = true;
        // A completion may have let queued requests go (a fence, the READ window).
        self.urgent |= sq.has_unsent();
        Ok(())
    }

    fn on_read_resp(&mut self, h: &Header) -> Result<(), Closed> {
        let len = h.length;
        let idx = {
            let sq = self.sh.lock_sq();
            if sq.error {
                None
            } else {
                match sq.in_flight(h.psn) {
                    Some((idx, TxKindOf::Read)) => {
                        sq.sges_of(idx, &mut self.sges);
                        Some(idx)
                    }
                    _ => return Err(format!("READ response for PSN {} not outstanding", h.psn)),
                }
            }
        };
        let Some(idx) = idx else {
            return self.discard(len as usize);
        };
        let status = match self.resolve_dest() {
            Ok(want) if want != len as u64 => {
                return Err(format!(
                    "READ response of {len} bytes for a {want}-byte READ"
                ));
            }
            Ok(_) => {
                let r = self.scatter(len);
                self.accs.clear();
                r?;
                WcStatus::Success
            }
            Err(s) => {
                self.discard(len as usize)?;
                s
            }
        };
        let mut sq = self.sh.lock_sq();
        sq.complete(idx, status, len);
        self.sh.sync_error(&sq);
        self.dirty = true;
        self.urgent |= sq.has_unsent();
        Ok(())
    }
}
