//! The conformance cases, one module per area, and what they share.
//!
//! Every case is written against the public fabric API only, has a client half and a server
//! half (see [`crate::harness`]), and asserts what RC verbs guarantee, not what one provider
//! happens to do.

mod access;
mod cm;
mod device;
mod errors;
mod mw;
mod order;
mod queue;
mod rdma;
mod rnr;
mod scale;
mod send_recv;

use rdmablk::fabric::{Mr, Qp, RecvWr, SendFlags, SendWr, Sge, WrOp};

use crate::check::{fail, CaseResult, OrFail};
use crate::harness::Case;
use crate::peer::Ctl;

/// Every case, in the order they run.
pub fn cases() -> Vec<Case> {
    [
        device::CASES,
        send_recv::CASES,
        rdma::CASES,
        order::CASES,
        access::CASES,
        errors::CASES,
        rnr::CASES,
        queue::CASES,
        mw::CASES,
        cm::CASES,
        scale::CASES,
    ]
    .concat()
}

/// Builds a [`Case`] from a name and two half functions.
macro_rules! case {
    ($name:literal, $client:expr, $server:expr) => {
        $crate::harness::Case {
            name: $name,
            client: $client,
            server: $server,
        }
    };
}
pub(crate) use case;

/// A memory range of the peer, as its half announced it.
#[derive(Clone, Copy, Debug)]
pub struct RemoteMr {
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

/// Announces `mr` to the peer half under `label`.
pub fn send_mr(ctl: &mut Ctl, label: &str, mr: &Mr) -> CaseResult {
    ctl.send(label, &[mr.addr(), mr.rkey() as u64, mr.len() as u64])
}

/// Receives a memory range announced with [`send_mr`].
pub fn recv_mr(ctl: &mut Ctl, label: &str) -> CaseResult<RemoteMr> {
    match ctl.recv(label)?[..] {
        [addr, rkey, len] => Ok(RemoteMr {
            addr,
            rkey: rkey as u32,
            len,
        }),
        ref v => Err(fail(format!("protocol: {label} carried {v:?}"))),
    }
}

/// Posts one send work request.
pub fn post1(qp: &Qp, wr_id: u64, op: WrOp<'_>, sgl: &[Sge], flags: SendFlags) -> CaseResult {
    let wr = SendWr {
        wr_id,
        op,
        sgl,
        flags,
    };
    qp.post_send(&[wr])
        .or_fail(&format!("post_send of wr {wr_id} ({op:?})"))
}

/// Posts one receive work request.
pub fn post_recv1(qp: &Qp, wr_id: u64, sgl: &[Sge]) -> CaseResult {
    qp.post_recv(&[RecvWr { wr_id, sgl }])
        .or_fail(&format!("post_recv of wr {wr_id}"))
}
