//! Receiver-not-ready: a SEND with no receive posted is retried, and fails with
//! RNR_RETRY_EXC_ERR once a finite retry count is used up.

use std::time::Duration;

use rdmablk::fabric::{Access, SendFlags, WcStatus, WrOp};

use super::{case, post1, post_recv1};
use crate::check::CaseResult;
use crate::endpoint::{check_mr, expect_wc, pattern, EpOpts};
use crate::ensure_eq;
use crate::harness::{Case, Side};

pub const CASES: &[Case] = &[
    case!("rnr_retry_exceeded", rnr_exc_client, rnr_exc_server),
    case!(
        "rnr_retry_until_recv_posted",
        rnr_wait_client,
        rnr_wait_server
    ),
];

/// RDMA CM's rnr_retry_count is documented as the retries of the *peer's* sends (it travels
/// in the CM REQ/REP), while a provider may apply it locally: set it on both sides so the
/// client's SENDs have a finite count either way.
fn rnr_opts(count: u8) -> EpOpts {
    let mut o = EpOpts::default();
    o.param.rnr_retry_count = count;
    o
}

fn rnr_exc_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&rnr_opts(1))?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    side.ctl.recv("ready")?;
    post1(&ep.qp, 1, WrOp::Send, &[mr.sge(0, 64)], SendFlags::SIGNALED)?;
    expect_wc(
        &ep.send_cq,
        "SEND to a QP with no receive posted (rnr_retry_count 1)",
        1,
        WcStatus::RnrRetryExcErr,
    )?;
    side.ctl.send("done", &[])
}

fn rnr_exc_server(side: &mut Side<'_>) -> CaseResult {
    let _ep = side.accept(&rnr_opts(1))?;
    side.ctl.send("ready", &[])?;
    side.ctl.recv("done").map(drop)
}

fn rnr_wait_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&rnr_opts(7))?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    mr.write_at(0, &pattern(3, 512))
        .map_err(|e| crate::check::fail(e.to_string()))?;
    side.ctl.recv("ready")?;
    post1(
        &ep.qp,
        1,
        WrOp::Send,
        &[mr.sge(0, 512)],
        SendFlags::SIGNALED,
    )?;
    side.ctl.send("sent", &[])?;
    expect_wc(
        &ep.send_cq,
        "SEND retried (rnr_retry_count 7) until the receive was posted",
        1,
        WcStatus::Success,
    )?;
    side.ctl.recv("checked").map(drop)
}

fn rnr_wait_server(side: &mut Side<'_>) -> CaseResult {
    let ep = side.accept(&rnr_opts(7))?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    side.ctl.send("ready", &[])?;
    side.ctl.recv("sent")?;
    std::thread::sleep(Duration::from_millis(200));
    post_recv1(&ep.qp, 1, &[mr.sge(0, 4096)])?;
    let wc = expect_wc(&ep.recv_cq, "late-posted receive", 1, WcStatus::Success)?;
    ensure_eq!(wc.byte_len, 512, "byte_len");
    check_mr("received data", &mr, 0, &pattern(3, 512))?;
    side.ctl.send("checked", &[])
}
