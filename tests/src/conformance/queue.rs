//! A full send or receive queue is an error value, `FabricError::QueueFull` naming the first
//! WR not posted, and the queue takes WRs again once completions free room.

use rdmablk::fabric::{Access, FabricError, RecvWr, SendFlags, SendWr, WcStatus, WrOp};

use super::{case, post1, post_recv1};
use crate::check::{fail, CaseResult};
use crate::endpoint::{expect_wc, EpOpts};
use crate::ensure;
use crate::harness::{Case, Side};

pub const CASES: &[Case] = &[
    case!("queue_full_recv", full_recv_client, full_recv_server),
    case!("queue_full_send", full_send_client, full_send_server),
];

const DEPTH: u32 = 8;

fn small_queues() -> EpOpts {
    let mut o = EpOpts::default();
    o.caps.max_send_wr = DEPTH;
    o.caps.max_recv_wr = DEPTH;
    o
}

fn queue_full_index(r: Result<(), FabricError>, what: &str) -> CaseResult<usize> {
    match r {
        Err(FabricError::QueueFull { index }) => Ok(index),
        other => Err(fail(format!(
            "{what}: expected Err(QueueFull), got {other:?}"
        ))),
    }
}

fn full_recv_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&small_queues())?;
    let depth = ep.qp.caps().max_recv_wr as usize;
    ensure!(
        depth >= DEPTH as usize,
        "max_recv_wr {depth} < requested {DEPTH}"
    );
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    let sge = [mr.sge(0, 64)];
    let n = depth * 2 + 8;
    let wrs: Vec<_> = (0..n as u64)
        .map(|wr_id| RecvWr { wr_id, sgl: &sge })
        .collect();
    let what = format!("posting {n} receives on a queue of {depth}");
    let index = queue_full_index(ep.qp.post_recv(&wrs), &what)?;
    ensure!(
        index >= depth,
        "{what}: QueueFull at index {index}, below the reported max_recv_wr {depth}"
    );
    let again = RecvWr {
        wr_id: 999,
        sgl: &sge,
    };
    let i = queue_full_index(
        ep.qp.post_recv(&[again]),
        "one more receive on a full queue",
    )?;
    ensure!(
        i == 0,
        "one more receive on a full queue: QueueFull index {i}, expected 0"
    );
    side.ctl.send("full", &[])?;
    // The peer's SEND consumes receive 0; its completion makes room for one more.
    expect_wc(&ep.recv_cq, "receive 0", 0, WcStatus::Success)?;
    ep.qp
        .post_recv(&[again])
        .map_err(|e| fail(format!("post_recv after a completion freed a slot: {e}")))?;
    side.ctl.send("done", &[])
}

fn full_recv_server(side: &mut Side<'_>) -> CaseResult {
    let ep = side.accept(&small_queues())?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    side.ctl.recv("full")?;
    post1(&ep.qp, 1, WrOp::Send, &[mr.sge(0, 64)], SendFlags::SIGNALED)?;
    expect_wc(
        &ep.send_cq,
        "SEND into the full receive queue",
        1,
        WcStatus::Success,
    )?;
    side.ctl.recv("done").map(drop)
}

/// SENDs to a peer with no receive posted stay queued (RNR retried forever), so the send
/// queue fills.
fn full_send_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&small_queues())?;
    let depth = ep.qp.caps().max_send_wr as usize;
    ensure!(
        depth >= DEPTH as usize,
        "max_send_wr {depth} < requested {DEPTH}"
    );
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    let sge = [mr.sge(0, 64)];
    side.ctl.recv("ready")?;
    let wr = |wr_id| SendWr {
        wr_id,
        op: WrOp::Send,
        sgl: &sge,
        flags: SendFlags::SIGNALED,
    };
    let mut posted = 0u64;
    let limit = depth as u64 * 2 + 8;
    let err = loop {
        match ep.qp.post_send(&[wr(posted)]) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
        ensure!(
            posted < limit,
            "posted {posted} SENDs (none can complete) on a send queue of {depth}: no QueueFull"
        );
    };
    let i = queue_full_index(Err(err), "SEND on a full send queue")?;
    ensure!(
        i == 0,
        "single SEND on a full queue: QueueFull index {i}, expected 0"
    );
    ensure!(
        posted >= depth as u64,
        "send queue full after {posted} WRs, below the reported max_send_wr {depth}"
    );
    let i = queue_full_index(
        ep.qp.post_send(&[wr(500), wr(501)]),
        "chain on a full queue",
    )?;
    ensure!(
        i == 0,
        "chain on a full queue: QueueFull index {i}, expected 0"
    );
    side.ctl.send("full", &[posted])?;
    for id in 0..posted {
        expect_wc(
            &ep.send_cq,
            "queued SEND once receives are posted",
            id,
            WcStatus::Success,
        )?;
    }
    ep.qp
        .post_send(&[wr(posted)])
        .map_err(|e| fail(format!("post_send after the queue drained: {e}")))?;
    expect_wc(
        &ep.send_cq,
        "SEND after the queue drained",
        posted,
        WcStatus::Success,
    )?;
    side.ctl.send("done", &[])
}

fn full_send_server(side: &mut Side<'_>) -> CaseResult {
    let mut opts = EpOpts::default();
    opts.caps.max_recv_wr = 256;
    let ep = side.accept(&opts)?;
    // One buffer for every SEND the client may queue: the data is not checked here.
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    side.ctl.send("ready", &[])?;
    let posted = side.ctl.recv("full")?[0];
    ensure!(
        posted < u64::from(ep.qp.caps().max_recv_wr),
        "the client queued {posted} SENDs, more than this side's receive queue holds"
    );
    for id in 0..=posted {
        post_recv1(&ep.qp, id, &[mr.sge(0, 4096)])?;
    }
    side.ctl.recv("done").map(drop)
}
