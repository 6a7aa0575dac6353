//! One command's life, as an explicit state machine, and the work-request IDs that tie RDMA
//! and backend completions back to it.
//!
//! ```text
//!            capsule received
//!   Free ───────────────────────▶ New ──(bad command / sync admin)──────────────┐
//!    ▲                             │                                            │
//!    │                             ├─(keyed host->controller data)▶ NeedData    │
//!    │                             │                                  │ read    │
//!    │                             │                                  ▼ credit  │
//!    │                             │                          ReadingFromHost   │
//!    │                             │                                  │ READ    │
//!    │                             ▼ (in-capsule, push, no data)      ▼ done    │
//!    │                         Executing ◀─────────────────────────────┘        │
//!    │                             │ backend completions                        │
//!    │                             ▼                                            ▼
//!    └──── SEND completion ── Responding (RDMA WRITE chained before the SEND) ◀─┘
//!                                  ▲
//!                         Held ────┘ (Async Event Request: completed at teardown)
//! ```
//! A request context is taken from the connection's free list when a capsule arrives; the
//! capsule's receive buffer is reposted as soon as the command is prepared (the SQE decoded
//! into the request, in-capsule data copied to the data slot), before any response can be
//! posted. A host that sends its next command the moment it sees a response therefore always
//! finds a receive posted (no RNR), even while the previous request still waits for its
//! response SEND to complete.

use rdmablk::nvme::{Sgl, Sqe, Status};

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqState {
    /// Its receive buffer is posted; no command.
    Free,
    /// A capsule arrived and is being checked.
    New,
    /// Host data must be fetched by RDMA READ; waiting for a read credit.
    NeedData,
    /// The RDMA READ is posted.
    ReadingFromHost,
    /// Backend operations are queued or in flight.
    Executing,
    /// An Async Event Request, held until an event or teardown.
    Held,
    /// The response SEND (after any RDMA WRITE of data) is posted.
    Responding,
}

/// Which way a command's data moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDir {
    None,
    HostToController,
    ControllerToHost,
}

/// What executing a command means, decided when it is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing left to do: respond with `status` (and any controller-to-host data already in
    /// the data slot).
    Respond,
    /// Fabrics Connect: decode the Connect data in the data slot.
    Connect,
    /// Read or Write of `blocks` at `lba` on namespace index `ns`.
    ReadWrite {
        ns: usize,
        lba: u64,
        blocks: u32,
        write: bool,
        fua: bool,
    },
    /// Write Zeroes (or deallocate) on namespace index `ns`.
    WriteZeroes {
        ns: usize,
        lba: u64,
        blocks: u32,
        deallocate: bool,
    },
    /// Dataset Management deallocate of `ranges` ranges from the data slot.
    Deallocate { ns: usize, ranges: u32 },
    /// Flush of namespace index `ns`, or all of the subsystem's namespaces.
    Flush { ns: Option<usize> },
    /// Authentication Send / Receive: run the queue's DH-HMAC-CHAP step.
    Auth,
}

/// One request slot of a connection: receive slot, response slot and (usually) data slot `i`.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub state: ReqState,
    pub sqe: Sqe,
    /// Bytes of the received capsule.
    pub capsule_len: u32,
    /// Receive slot the capsule arrived in (readable until the request is prepared).
    pub recv_slot: u32,
    pub sgl: Option<Sgl>,
    pub dir: DataDir,
    /// Bytes of the data phase.
    pub data_len: u32,
    /// Data slot used (the request's own index, or the push slot).
    pub data_slot: u32,
    pub action: Action,
    pub status: Status,
    pub dw0: u32,
    pub dw1: u32,
    /// Backend operations in flight.
    pub ops_in_flight: u32,
    /// Backend operations still to submit (multi-range DSM, flush of all namespaces).
    pub ops_next: u32,
    pub ops_total: u32,
    /// Tear the connection down once the response is sent, and why (Fabrics Disconnect, a
    /// failed authentication).
    pub close_after: Option<&'static str>,
    /// The request reserved its push-write data slot (push connections).
    pub holds_push_slot: bool,
    /// When the capsule was taken up (latency metrics).
    pub received: Option<std::time::Instant>,
    /// Counted as started in its namespace's metrics (reached execution).
    pub counted: bool,
}

impl Request {
    pub const fn new() -> Request {
        Request {
            state: ReqState::Free,
            sqe: Sqe {
                opcode: 0,
                flags: 0,
                cid: 0,
                nsid: 0,
                cdw2: 0,
                cdw3: 0,
                mptr: 0,
                dptr: [0; 16],
                cdw10: 0,
                cdw11: 0,
                cdw12: 0,
                cdw13: 0,
                cdw14: 0,
                cdw15: 0,
            },
            capsule_len: 0,
            recv_slot: 0,
            sgl: None,
            dir: DataDir::None,
            data_len: 0,
            data_slot: 0,
            action: Action::Respond,
            status: Status::SUCCESS,
            dw0: 0,
            dw1: 0,
            ops_in_flight: 0,
            ops_next: 0,
            ops_total: 0,
            close_after: None,
            holds_push_slot: false,
            received: None,
            counted: false,
        }
    }

    /// Moves to `to`, with a trace event. Panics in debug builds on a transition the
    /// machine does not have.
    pub fn enter(&mut self, to: ReqState, qid: u16, slot: u32) {
        use ReqState::*;
        let ok = matches!(
            (self.state, to),
            (Free, New)
                | (New, NeedData | Executing | Responding | Held)
                | (NeedData, ReadingFromHost | Responding)
                | (ReadingFromHost, Executing | Responding)
                | (Executing, Responding)
                | (Held, Responding)
                | (Responding, Free)
        );
        debug_assert!(ok, "request transition {:?} -> {to:?}", self.state);
        tracing::trace!(qid, slot, cid = self.sqe.cid, from = ?self.state, ?to, "request");
        self.state = to;
    }

    /// Resets per-command fields for a new capsule.
    pub fn reset(&mut self, sqe: Sqe, capsule_len: u32, recv_slot: u32, data_slot: u32) {
        *self = Request {
            state: self.state,
            sqe,
            capsule_len,
            recv_slot,
            data_slot,
            ..Request::new()
        };
    }

    /// Records the first failure; later ones keep the first status.
    pub fn fail(&mut self, status: Status) {
        if self.status.is_success() {
            self.status = status;
        }
    }
}

impl Default for Request {
    fn default() -> Self {
        Request::new()
    }
}

/// What a work request or backend operation was, encoded in its 64-bit ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrKind {
    Recv = 1,
    Send = 2,
    Read = 3,
    Write = 4,
    Bind = 5,
    Invalidate = 6,
    Backend = 7,
}

/// A decoded work-request ID: `conn` (worker slab index and generation), kind, slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrId {
    pub conn: u32,
    pub kind: WrKind,
    pub slot: u32,
}

impl WrId {
    pub fn new(conn: u32, kind: WrKind, slot: u32) -> WrId {
        WrId { conn, kind, slot }
    }

    pub fn encode(self) -> u64 {
        u64::from(self.conn) << 32 | (self.kind as u64) << 24 | u64::from(self.slot & 0xFF_FFFF)
    }

    pub fn decode(v: u64) -> Option<WrId> {
        let kind = match (v >> 24) as u8 {
            1 => WrKind::Recv,
            2 => WrKind::Send,
            3 => WrKind::Read,
            4 => WrKind::Write,
            5 => WrKind::Bind,
            6 => WrKind::Invalidate,
            7 => WrKind::Backend,
            _ => return None,
        };
        Some(WrId {
            conn: (v >> 32) as u32,
            kind,
            slot: (v & 0xFF_FFFF) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_round_trip() {
        for kind in [
            WrKind::Recv,
            WrKind::Send,
            WrKind::Backend,
            WrKind::Invalidate,
        ] {
            let id = WrId::new(0xABCD_0012, kind, 1023);
            assert_eq!(WrId::decode(id.encode()), Some(id));
        }
        assert_eq!(WrId::decode(0), None);
    }

    #[test]
    fn transitions_follow_the_machine() {
        let mut r = Request::new();
        for s in [
            ReqState::New,
            ReqState::NeedData,
            ReqState::ReadingFromHost,
            ReqState::Executing,
            ReqState::Responding,
            ReqState::Free,
        ] {
            r.enter(s, 1, 0);
        }
        assert_eq!(r.state, ReqState::Free);
    }
}
