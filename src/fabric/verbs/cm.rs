//! RDMA CM: ids on their own event channels, the listener, incoming connect requests and
//! active connects.
//!
//! Every id owns one event channel, so each connection's events (ESTABLISHED, DISCONNECTED)
//! reach only its own QP: an accepted id is moved off the listener's channel with
//! `rdma_migrate_id` as soon as its request is read. Events are copied and acknowledged at
//! once (`rdma_destroy_id` waits for unacknowledged events).
//!
//! Depths in CM events are already in the receiver's perspective (the IB CM swaps the REQ/REP
//! fields): `initiator_depth` is how many READs *we* may issue (the peer's responder
//! resources), `responder_resources` how many the peer wants to issue against us.
//!
//! # Modules
//! - `event`: the per-id event channel and the copied events read from it.
//! - `id`: the CM id's lifecycle (create or adopt, bind, create its QP, reject, disconnect,
//!   destroy).
//! - `sockaddr`: `SocketAddr` <-> the C socket addresses librdmacm takes and fills.
//! - `listen`: the passive side, [`Listener`] and [`ConnRequest`].
//! - `connect`: the active side, [`Resolved`] (resolve, then connect) and its errors.

mod connect;
mod event;
mod id;
mod listen;
mod sockaddr;

pub use connect::Resolved;
pub(crate) use event::Event;
pub(crate) use id::CmId;
pub use listen::{ConnRequest, Listener};

use super::{errno, rc_err, sys};
use crate::fabric::Result;

use sys::rdma_cm_event_type as ev;

/// `rdma_connect` / `rdma_accept` result check.
pub(crate) fn cm_call(op: &'static str, rc: i32) -> Result<()> {
    if rc != 0 {
        let e = errno();
        return Err(rc_err(op, if e != 0 { e } else { rc }));
    }
    Ok(())
}
