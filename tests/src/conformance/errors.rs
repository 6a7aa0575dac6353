//! Error completions and the error state: local protection and length errors, flush of
//! outstanding and new WRs on both queues, and the post-time checks.

use rdmablk::fabric::{Access, FabricError, RecvWr, SendFlags, SendWr, Sge, WcStatus, WrOp};

use super::{case, post1, post_recv1, recv_mr, send_mr};
use crate::check::{fail, CaseResult};
use crate::endpoint::{expect_wc, rw_access, wait_wc_for, Endpoint, EpOpts, OP_TIMEOUT};
use crate::harness::{Case, Side};
use crate::{ensure, ensure_eq};

pub const CASES: &[Case] = &[
    case!("send_bad_lkey", bad_lkey_client, recv_one_server),
    case!("recv_buffer_too_small", too_small_client, too_small_server),
    case!("flush_on_error", flush_client, flush_server),
    case!(
        "post_send_local_checks",
        post_checks_client,
        recv_one_server
    ),
    case!(
        "post_recv_local_checks",
        post_recv_checks_client,
        idle_accept_server
    ),
];

fn recv_one_server(side: &mut Side<'_>) -> CaseResult {
    let ep = Endpoint::create(side.request()?, &EpOpts::default())?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    post_recv1(&ep.qp, 1, &[mr.sge(0, 4096)])?;
    ep.accept(&Default::default())?;
    side.ctl.send("ready", &[])?;
    side.ctl.recv("done").map(drop)
}

fn idle_accept_server(side: &mut Side<'_>) -> CaseResult {
    let _ep = side.accept(&EpOpts::default())?;
    side.ctl.recv("done").map(drop)
}

fn bad_lkey_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    side.ctl.recv("ready")?;
    let sge = [Sge {
        lkey: !mr.lkey(),
        ..mr.sge(0, 64)
    }];
    post1(&ep.qp, 1, WrOp::Send, &sge, SendFlags::SIGNALED)?;
    expect_wc(
        &ep.send_cq,
        "SEND with a wrong lkey",
        1,
        WcStatus::LocProtErr,
    )?;
    side.ctl.send("done", &[])
}

fn too_small_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    side.ctl.recv("ready")?;
    post1(&ep.qp, 1, WrOp::Send, &[mr.sge(0, 64)], SendFlags::SIGNALED)?;
    let wc = wait_wc_for(&ep.send_cq, OP_TIMEOUT, "a SEND into a too-small receive")?;
    ensure_eq!(wc.wr_id, 1, "wr_id");
    ensure!(
        !wc.status.is_success(),
        "a SEND of 64 B into a 16-B receive completed successfully at the requester"
    );
    side.ctl.send("done", &[])?;
    side.ctl.recv("checked").map(drop)
}

fn too_small_server(side: &mut Side<'_>) -> CaseResult {
    let ep = Endpoint::create(side.request()?, &EpOpts::default())?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    post_recv1(&ep.qp, 1, &[mr.sge(0, 16)])?;
    ep.accept(&Default::default())?;
    side.ctl.send("ready", &[])?;
    expect_wc(
        &ep.recv_cq,
        "16-B receive of a 64-B SEND",
        1,
        WcStatus::LocLenErr,
    )?;
    side.ctl.recv("done")?;
    side.ctl.send("checked", &[])
}

fn flush_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    let remote = recv_mr(&mut side.ctl, "mr")?;
    for i in 0..4 {
        post_recv1(&ep.qp, 100 + i, &[mr.sge(1024 * i as usize, 1024)])?;
    }
    let s = [mr.sge(0, 16)];
    let bad = WrOp::RdmaWrite {
        remote_addr: remote.addr,
        rkey: !remote.rkey,
    };
    let good = WrOp::RdmaWrite {
        remote_addr: remote.addr,
        rkey: remote.rkey,
    };
    let wr = |wr_id, op, flags| SendWr {
        wr_id,
        op,
        sgl: &s,
        flags,
    };
    let chain = [
        wr(1, bad, SendFlags::SIGNALED),
        wr(2, WrOp::Send, SendFlags::SIGNALED),
        wr(3, good, SendFlags::empty()),
        wr(4, good, SendFlags::SIGNALED),
    ];
    ep.qp
        .post_send(&chain)
        .map_err(|e| fail(format!("post_send: {e}")))?;
    expect_wc(
        &ep.send_cq,
        "WRITE with a bad rkey",
        1,
        WcStatus::RemAccessErr,
    )?;
    for id in 2..=4 {
        let what = format!(
            "send WR {id} outstanding behind the error (unsignalled: {})",
            id == 3
        );
        expect_wc(&ep.send_cq, &what, id, WcStatus::WrFlushErr)?;
    }
    for id in 100..104 {
        expect_wc(
            &ep.recv_cq,
            &format!("receive {id} outstanding at the error"),
            id,
            WcStatus::WrFlushErr,
        )?;
    }
    post1(&ep.qp, 5, WrOp::Send, &s, SendFlags::SIGNALED).map_err(|e| {
        fail(format!(
            "posting a send to a QP in error must succeed and flush: {e}"
        ))
    })?;
    expect_wc(
        &ep.send_cq,
        "send posted after the error",
        5,
        WcStatus::WrFlushErr,
    )?;
    post_recv1(&ep.qp, 105, &[mr.sge(0, 16)]).map_err(|e| {
        fail(format!(
            "posting a receive to a QP in error must succeed and flush: {e}"
        ))
    })?;
    expect_wc(
        &ep.recv_cq,
        "receive posted after the error",
        105,
        WcStatus::WrFlushErr,
    )?;
    side.ctl.send("done", &[])
}

fn flush_server(side: &mut Side<'_>) -> CaseResult {
    let ep = side.accept(&EpOpts::default())?;
    let mr = ep.register(4096, rw_access())?;
    send_mr(&mut side.ctl, "mr", &mr)?;
    side.ctl.recv("done").map(drop)
}

fn expect_bad_wr(r: Result<(), FabricError>, index: usize, what: &str) -> CaseResult {
    match r {
        Err(FabricError::BadWr { index: i, .. }) if i == index => Ok(()),
        other => Err(fail(format!(
            "{what}: expected Err(BadWr {{ index: {index}, .. }}), got {other:?}"
        ))),
    }
}

/// A chain [good SEND, bad WR] is refused at index 1; the good one is posted and completes.
fn post_checks_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let caps = ep.qp.caps();
    let mr = ep.register(1 << 16, Access::LOCAL_WRITE)?;
    side.ctl.recv("ready")?;
    let one = [mr.sge(0, 8)];
    let many: Vec<_> = (0..caps.max_send_sge as usize + 1)
        .map(|i| mr.sge(i * 8, 8))
        .collect();
    let big = [mr.sge(0, caps.max_inline_data + 1)];
    let good = SendWr {
        wr_id: 1,
        op: WrOp::Send,
        sgl: &one,
        flags: SendFlags::SIGNALED,
    };
    let too_many = SendWr {
        wr_id: 2,
        sgl: &many,
        ..good
    };
    expect_bad_wr(
        ep.qp.post_send(&[good, too_many]),
        1,
        &format!("chain [SEND, SEND with {} SGEs > max_send_sge]", many.len()),
    )?;
    expect_wc(
        &ep.send_cq,
        "the good SEND before the refused WR",
        1,
        WcStatus::Success,
    )?;
    let inline = SendWr {
        wr_id: 3,
        sgl: &big,
        flags: SendFlags::SIGNALED | SendFlags::INLINE,
        ..good
    };
    expect_bad_wr(
        ep.qp.post_send(&[inline]),
        0,
        &format!("INLINE SEND of {} B > max_inline_data", big[0].length),
    )?;
    // An inline SGE is read at post time, so it must name registered memory: a bogus lkey
    // (or an address outside the region) is refused instead of reading arbitrary memory.
    let bogus_key = [Sge {
        lkey: !mr.lkey(),
        ..mr.sge(0, 8)
    }];
    let bogus_addr = [Sge {
        addr: mr.addr() + mr.len() as u64,
        ..mr.sge(0, 8)
    }];
    for (what, sgl) in [
        ("a bogus lkey", &bogus_key),
        ("an address past the region", &bogus_addr),
    ] {
        let wr = SendWr {
            wr_id: 5,
            sgl,
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
            ..good
        };
        expect_bad_wr(
            ep.qp.post_send(&[wr]),
            0,
            &format!("INLINE SEND naming {what}"),
        )?;
    }
    let inv = SendWr {
        wr_id: 4,
        op: WrOp::LocalInv { rkey: 0x1234 },
        sgl: &one,
        flags: SendFlags::SIGNALED,
    };
    expect_bad_wr(ep.qp.post_send(&[inv]), 0, "LocalInv with a non-empty SGL")?;
    side.ctl.send("done", &[])
}

fn post_recv_checks_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let caps = ep.qp.caps();
    let mr = ep.register(1 << 16, Access::LOCAL_WRITE)?;
    let one = [mr.sge(0, 8)];
    let many: Vec<_> = (0..caps.max_recv_sge as usize + 1)
        .map(|i| mr.sge(i * 8, 8))
        .collect();
    let r = ep.qp.post_recv(&[
        RecvWr {
            wr_id: 1,
            sgl: &one,
        },
        RecvWr {
            wr_id: 2,
            sgl: &many,
        },
    ]);
    expect_bad_wr(
        r,
        1,
        &format!("chain [RECV, RECV with {} SGEs > max_recv_sge]", many.len()),
    )?;
    side.ctl.send("done", &[])
}
