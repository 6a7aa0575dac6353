//! One command's life, as an explicit state machine, and the tag that ties backend
//! completions back to it. The states are the core's; what a transport does inside one (an
//! RDMA READ waiting for a read credit, an RDMA WRITE chained before the response SEND) is
//! the transport's.
//!
//! ```text
//!            capsule received
//!   Free ───────────────────────▶ New ──(bad command / sync admin)──────────────┐
//!    ▲                             │                                            │
//!    │                             ├─(host->controller data to fetch)           │
//!    │                             │                 ▼                          │
//!    │                             │           AwaitingData                     │
//!    │                             │                 │ data in the data slot    │
//!    │                             ▼ (in-capsule,    ▼                          │
//!    │                         Executing ◀── pushed, no data)                   │
//!    │                             │ backend completions                        │
//!    │                             ▼                                            ▼
//!    └─── response sent ───── Responding (with any controller-to-host data) ◀───┘
//!                                  ▲
//!                         Held ────┘ (Async Event Request: completed by an event, or
//!                                     aborted at shutdown; a reservation command whose
//!                                     fence or other gateways it waits for, from New,
//!                                     AwaitingData or Executing once its keys are in)
//! ```
//! Data that arrives damaged (an NVMe/TCP data digest that does not match) never executes:
//! a damaged capsule's command goes from New, and a command whose H2C data was damaged from
//! AwaitingData once its data phase ends, straight to Responding with Transient Transport
//! Error, which the host retries.
//!
//! A request context is taken from the queue's free list when a capsule arrives; the
//! capsule's buffer is given back to the transport as soon as the command is prepared (the SQE
//! decoded into the request, in-capsule data copied to the data slot), before any response
//! can be posted. A host that sends its next command the moment it sees a response therefore
//! always finds a receive posted (no RNR on RDMA), even while the previous request still waits
//! for its response to be sent.

use crate::arena::pool::DataBuf;
use rdmablk::nvme::{Sgl, Sqe, Status};

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReqState {
    /// Its receive buffer is posted; no command.
    Free,
    /// A capsule arrived and is being checked.
    New,
    /// Host data is being fetched by the transport (an RDMA READ, waiting for a read credit or
    /// posted; later an NVMe/TCP R2T and its H2C data).
    AwaitingData,
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
    /// Reservation Register / Acquire / Release on namespace index `ns` (its keys are in the
    /// data slot).
    Reservation { ns: usize },
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
    /// Where the command's data lies: a buffer of the worker's data pool, taken when the
    /// capsule arrived, or (RDMA push queues) the push slot its command ID names.
    pub data: DataBuf,
    /// The push slot (RDMA push queues: the command ID modulo the depth).
    pub push_slot: u32,
    /// The command waits for a buffer of the worker's data pool (its capsule unconsumed,
    /// unless `capsule_released`).
    pub awaits_buffer: bool,
    /// The capsule's receive was given back before the command was prepared (its data is
    /// not in the capsule, and it waited for a pool buffer): not to be given back again.
    pub capsule_released: bool,
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
    /// The request claimed its data slot from its transport (RDMA push connections, where
    /// the slot follows the command ID).
    pub holds_data_slot: bool,
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
            data: DataBuf::NONE,
            push_slot: 0,
            awaits_buffer: false,
            capsule_released: false,
            action: Action::Respond,
            status: Status::SUCCESS,
            dw0: 0,
            dw1: 0,
            ops_in_flight: 0,
            ops_next: 0,
            ops_total: 0,
            close_after: None,
            holds_data_slot: false,
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
                | (New, AwaitingData | Executing | Responding | Held)
                | (AwaitingData, Executing | Responding | Held)
                | (Executing, Responding | Held)
                | (Held, Responding)
                | (Responding, Free)
        );
        debug_assert!(ok, "request transition {:?} -> {to:?}", self.state);
        tracing::trace!(qid, slot, cid = self.sqe.cid, from = ?self.state, ?to, "request");
        self.state = to;
    }

    /// Resets per-command fields for a new capsule.
    pub fn reset(&mut self, sqe: Sqe, capsule_len: u32, recv_slot: u32, push_slot: u32) {
        *self = Request {
            state: self.state,
            sqe,
            capsule_len,
            recv_slot,
            push_slot,
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

/// A request's tag on its backend operations: the worker's poll group (transport) of its
/// queue, the queue's key in it (slab index and generation), and the request slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub group: u8,
    /// The queue's key in its poll group's `Queues`.
    pub queue: u32,
    pub slot: u32,
}

impl Tag {
    pub fn new(group: u8, queue: u32, slot: u32) -> Tag {
        debug_assert!(
            slot < 1 << 24,
            "request slots are fewer than a queue's 65536 entries"
        );
        Tag { group, queue, slot }
    }

    pub fn encode(self) -> u64 {
        u64::from(self.queue) << 32 | u64::from(self.group) << 24 | u64::from(self.slot & 0xFF_FFFF)
    }

    pub fn decode(v: u64) -> Tag {
        Tag {
            group: (v >> 24) as u8,
            queue: (v >> 32) as u32,
            slot: (v & 0xFF_FFFF) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        let t = Tag::new(3, 0xABCD_0012, 0xFF_FFFF);
        assert_eq!(Tag::decode(t.encode()), t);
    }

    #[test]
    fn transitions_follow_the_machine() {
        let mut r = Request::new();
        for s in [
            ReqState::New,
            ReqState::AwaitingData,
            ReqState::Executing,
            ReqState::Responding,
            ReqState::Free,
        ] {
            r.enter(s, 1, 0);
        }
        assert_eq!(r.state, ReqState::Free);
    }
}
