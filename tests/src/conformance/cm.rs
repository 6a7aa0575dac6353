//! Connection management: private data on connect, accept and reject, the limits on it, the
//! Established event, and disconnect seen on both sides with outstanding WRs flushed.

use std::time::Instant;

use rdmablk::fabric::{
    Access, CmEvent, ConnParam, FabricError, Qp, WcStatus, MAX_ACCEPT_PRIVATE_DATA,
    MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};

use super::{case, post_recv1};
use crate::check::{fail, CaseResult};
use crate::endpoint::{check_bytes, expect_wc, pattern, Endpoint, EpOpts, OP_TIMEOUT};
use crate::ensure;
use crate::harness::{Case, Side};

pub const CASES: &[Case] = &[
    case!("cm_private_data_connect_accept", pd_client, pd_server),
    case!("cm_reject_private_data", reject_client, reject_server),
    case!("cm_private_data_over_limit", limit_client, limit_server),
    case!("cm_disconnect_by_client", |s| disc(s, true), |s| disc(
        s, false
    )),
    case!("cm_disconnect_by_server", |s| disc(s, false), |s| disc(
        s, true
    )),
];

/// Checks that `got` starts with `sent` and that anything after it is zero padding (an IB CM
/// delivers the whole fixed-size private-data field).
fn check_private_data(what: &str, got: &[u8], sent: &[u8]) -> CaseResult {
    ensure!(
        got.len() >= sent.len(),
        "{what}: {} bytes sent, {} received",
        sent.len(),
        got.len()
    );
    check_bytes(what, &got[..sent.len()], sent)?;
    ensure!(
        got[sent.len()..].iter().all(|&b| b == 0),
        "{what}: non-zero bytes after the {} sent",
        sent.len()
    );
    Ok(())
}

/// Waits for a CM event other than `Established` (or `Established` itself if asked for).
fn wait_event(qp: &Qp, want: &CmEvent, what: &str) -> CaseResult {
    let deadline = Instant::now() + OP_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match qp.cm_event(Some(left)) {
            Ok(Some(ev)) if ev == *want => return Ok(()),
            Ok(Some(CmEvent::Established)) => continue,
            Ok(Some(ev)) => return Err(fail(format!("{what}: expected {want:?}, got {ev:?}"))),
            Ok(None) => {
                return Err(fail(format!(
                    "{what}: no {want:?} event within {} ms",
                    OP_TIMEOUT.as_millis()
                )))
            }
            Err(e) => return Err(fail(format!("{what}: Qp::cm_event: {e}"))),
        }
    }
}

fn pd_client(side: &mut Side<'_>) -> CaseResult {
    let sent = pattern(1, MAX_CONNECT_PRIVATE_DATA);
    let ep = side.connect(&EpOpts::with_private_data(&sent))?;
    let expect = pattern(2, MAX_ACCEPT_PRIVATE_DATA);
    check_private_data(
        "accept private data at the client",
        &ep.peer_private_data,
        &expect,
    )?;
    side.ctl.recv("checked").map(drop)
}

fn pd_server(side: &mut Side<'_>) -> CaseResult {
    let req = side.request()?;
    let sent = pattern(1, MAX_CONNECT_PRIVATE_DATA);
    check_private_data(
        "connect private data at the server",
        req.private_data(),
        &sent,
    )?;
    let ep = Endpoint::create(req, &EpOpts::default())?;
    ep.accept(&ConnParam {
        private_data: pattern(2, MAX_ACCEPT_PRIVATE_DATA),
        ..ConnParam::default()
    })?;
    wait_event(&ep.qp, &CmEvent::Established, "after accept")?;
    side.ctl.send("checked", &[])
}

fn reject_client(side: &mut Side<'_>) -> CaseResult {
    match side.try_connect(&EpOpts::with_private_data(b"please reject me")) {
        Err(FabricError::Rejected { private_data, .. }) => check_private_data(
            "reject private data at the client",
            &private_data,
            &pattern(3, MAX_REJECT_PRIVATE_DATA),
        )?,
        Err(e) => {
            return Err(fail(format!(
                "connect: expected Err(Rejected), got Err({e:?})"
            )))
        }
        Ok(_) => {
            return Err(fail(
                "connect: expected Err(Rejected), the connection was made",
            ))
        }
    }
    side.ctl.recv("checked").map(drop)
}

fn reject_server(side: &mut Side<'_>) -> CaseResult {
    let req = side.request()?;
    check_private_data(
        "connect private data",
        req.private_data(),
        b"please reject me",
    )?;
    req.reject(&pattern(3, MAX_REJECT_PRIVATE_DATA))
        .map_err(|e| fail(format!("ConnRequest::reject: {e}")))?;
    side.ctl.send("checked", &[])
}

fn limit_client(side: &mut Side<'_>) -> CaseResult {
    let too_long = EpOpts::with_private_data(&[7; MAX_CONNECT_PRIVATE_DATA + 1]);
    match side.try_connect(&too_long) {
        Err(FabricError::InvalidArgument { .. }) => {}
        other => {
            return Err(fail(format!(
                "connect with {} B of private data: expected Err(InvalidArgument), got {:?}",
                MAX_CONNECT_PRIVATE_DATA + 1,
                other.map(|_| "a connection")
            )))
        }
    }
    let ep = side.connect(&EpOpts::with_private_data(b"ok"))?;
    check_private_data("accept private data", &ep.peer_private_data, b"second try")?;
    side.ctl.recv("checked").map(drop)
}

fn limit_server(side: &mut Side<'_>) -> CaseResult {
    let req = side.request()?;
    check_private_data(
        "private data of the first request (the over-limit connect must not reach the server)",
        req.private_data(),
        b"ok",
    )?;
    let ep = Endpoint::create(req, &EpOpts::default())?;
    let too_long = ConnParam {
        private_data: vec![7; MAX_ACCEPT_PRIVATE_DATA + 1],
        ..ConnParam::default()
    };
    match ep.qp.accept(&too_long) {
        Err(FabricError::InvalidArgument { .. }) => {}
        other => {
            return Err(fail(format!(
                "accept with {} B of private data: expected Err(InvalidArgument), got {other:?}",
                MAX_ACCEPT_PRIVATE_DATA + 1
            )))
        }
    }
    ep.accept(&ConnParam {
        private_data: b"second try".to_vec(),
        ..ConnParam::default()
    })?;
    side.ctl.send("checked", &[])
}

/// Both sides post two receives; `initiator` disconnects once both are ready. Both get
/// `Disconnected`, and both receives flush.
fn disc(side: &mut Side<'_>, initiator: bool) -> CaseResult {
    let ep = if side.is_client() {
        side.connect(&EpOpts::default())?
    } else {
        side.accept(&EpOpts::default())?
    };
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    post_recv1(&ep.qp, 1, &[mr.sge(0, 64)])?;
    post_recv1(&ep.qp, 2, &[mr.sge(64, 64)])?;
    side.ctl.barrier("ready")?;
    if initiator {
        ep.qp
            .disconnect()
            .map_err(|e| fail(format!("Qp::disconnect: {e}")))?;
    }
    let who = if initiator { "initiator" } else { "peer" };
    wait_event(
        &ep.qp,
        &CmEvent::Disconnected,
        &format!("disconnect at the {who}"),
    )?;
    for id in 1..=2 {
        let what = format!("receive {id} outstanding at the disconnect ({who})");
        expect_wc(&ep.recv_cq, &what, id, WcStatus::WrFlushErr)?;
    }
    side.ctl.barrier("done")
}
