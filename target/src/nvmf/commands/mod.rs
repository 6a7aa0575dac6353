//! Checking a received command, before anything executes: the dispatcher. Fabrics commands go
//! to [`fabrics`], admin commands to [`admin`], I/O commands to
//! [`io_commands`]; each command set checks its own fields and sets up its data phase
//! with [`data_phase`] (which none of them reaches through this module, so the
//! dispatcher and the command sets depend one way only).
//!
//! Every field from the host is checked here or in the command-set modules, and each
//! failure is an NVMe status the request completes with: a malformed command never panics
//! and never reaches a backend. The one fatal case, a capsule shorter than an SQE, is the
//! worker's to handle (it tears the queue down).

pub mod admin;
pub mod auth;
pub mod data_phase;
pub mod discovery;
pub mod fabrics;
pub mod io_commands;

use rdmablk::nvme::opcodes;
use rdmablk::nvme::Status;

use super::queue::Queue;
use super::transport::QueueTransport;
use super::Shared;
use data_phase::Next;

/// Checks the command in request `slot` and decides its course. Fills `status` on failure.
pub fn prepare<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    shared: &Shared,
    now_ms: u64,
) -> Next {
    let r = &mut q.reqs[slot as usize];
    let sqe = r.sqe;
    if let Err(st) = sqe.check_fabrics_flags() {
        r.fail(st);
        return Next::Respond;
    }
    if sqe.opcode == opcodes::FABRICS {
        return fabrics::prepare(q, slot, shared);
    }
    let Some(ctrl) = q.ctrl.clone() else {
        // Nothing but Connect is valid on a queue that is not connected yet.
        r.fail(Status::COMMAND_SEQUENCE_ERROR.with_dnr());
        return Next::Respond;
    };
    ctrl.touch(now_ms);
    if !auth::admitted(&q.auth) {
        r.fail(Status::AUTH_REQUIRED.with_dnr());
        return Next::Respond;
    }
    // A queue about to close (target stopping, or its controller torn down by a reload that
    // removed its subsystem or its host's access): drop the command so the host retries it
    // after reconnecting, rather than answer Invalid Namespace with DNR, which the host would
    // hand to the application (blktests found it on subsystem removal).
    if q.qid != 0 && (shared.stopping() || ctrl.is_dead()) {
        return Next::Abandon;
    }
    if q.qid == 0 {
        admin::prepare(q, slot, shared, &ctrl)
    } else if !ctrl.is_ready() {
        r.fail(Status::COMMAND_SEQUENCE_ERROR.with_dnr());
        Next::Respond
    } else {
        io_commands::prepare(q, slot, shared, &ctrl)
    }
}
