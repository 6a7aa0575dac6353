//! SEND/RECV: sizes, scatter/gather, inline data, CQ events.

use std::time::Duration;

use rdmablk::fabric::{Access, SendFlags, WcOpcode, WcStatus, WrOp};

use super::{case, post1, post_recv1};
use crate::check::{CaseResult, OrFail};
use crate::endpoint::{
    check_bytes, check_mr, expect_wc, mr_bytes, pattern, poll_one, EpOpts, OP_TIMEOUT,
};
use crate::harness::{Case, Side};
use crate::{ensure, ensure_eq};

pub const CASES: &[Case] = &[
    case!("send_recv_sizes", sizes_client, sizes_server),
    case!("send_recv_zero_length", zero_client, zero_server),
    case!("send_recv_multi_sge", multi_sge_client, multi_sge_server),
    case!("send_inline", inline_client, inline_server),
    case!("cq_arm_wait", arm_client, arm_server),
];

const SIZES: &[usize] = &[1, 7, 64, 1000, 4096, 4097, 65536, 1 << 20];
/// Receive buffers are this much larger than the message, so byte_len is really checked.
const SLACK: usize = 64;

fn offsets() -> Vec<usize> {
    SIZES
        .iter()
        .scan(0, |off, s| {
            let o = *off;
            *off += s + SLACK;
            Some(o)
        })
        .collect()
}

fn sizes_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let offs = offsets();
    let mr = ep.register(
        offs[offs.len() - 1] + (1 << 20) + SLACK,
        Access::LOCAL_WRITE,
    )?;
    for (i, (&size, &off)) in SIZES.iter().zip(&offs).enumerate() {
        mr.write_at(off, &pattern(i as u64, size)).or_fail("fill")?;
    }
    side.ctl.recv("ready")?;
    for (i, (&size, &off)) in SIZES.iter().zip(&offs).enumerate() {
        let sge = [mr.sge(off, size as u32)];
        post1(&ep.qp, i as u64, WrOp::Send, &sge, SendFlags::SIGNALED)?;
    }
    for (i, size) in SIZES.iter().enumerate() {
        let wc = expect_wc(
            &ep.send_cq,
            &format!("send of {size} B"),
            i as u64,
            WcStatus::Success,
        )?;
        ensure_eq!(wc.opcode, WcOpcode::Send, "send wc opcode");
        ensure_eq!(wc.qp_num, ep.qp.qp_num(), "send wc qp_num");
    }
    side.ctl.recv("checked").map(drop)
}

fn sizes_server(side: &mut Side<'_>) -> CaseResult {
    let req = side.request()?;
    let ep = crate::endpoint::Endpoint::create(req, &EpOpts::default())?;
    let offs = offsets();
    let mr = ep.register(
        offs[offs.len() - 1] + (1 << 20) + SLACK,
        Access::LOCAL_WRITE,
    )?;
    for (i, (&size, &off)) in SIZES.iter().zip(&offs).enumerate() {
        post_recv1(&ep.qp, i as u64, &[mr.sge(off, (size + SLACK) as u32)])?;
    }
    ep.accept(&Default::default())?;
    side.ctl.send("ready", &[])?;
    for (i, (&size, &off)) in SIZES.iter().zip(&offs).enumerate() {
        let what = format!("receive of {size} B");
        let wc = expect_wc(&ep.recv_cq, &what, i as u64, WcStatus::Success)?;
        ensure_eq!(wc.opcode, WcOpcode::Recv, "{what}: opcode");
        ensure_eq!(wc.byte_len as usize, size, "{what}: byte_len");
        ensure_eq!(wc.qp_num, ep.qp.qp_num(), "{what}: qp_num");
        ensure_eq!(wc.invalidated_rkey, None, "{what}: invalidated_rkey");
        check_mr(&what, &mr, off, &pattern(i as u64, size))?;
    }
    side.ctl.send("checked", &[])
}

fn zero_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    side.ctl.recv("ready")?;
    post1(&ep.qp, 5, WrOp::Send, &[], SendFlags::SIGNALED)?;
    expect_wc(&ep.send_cq, "0-byte send", 5, WcStatus::Success)?;
    side.ctl.recv("checked").map(drop)
}

fn zero_server(side: &mut Side<'_>) -> CaseResult {
    let ep = side.accept(&EpOpts::default())?;
    let mr = ep.register(64, Access::LOCAL_WRITE)?;
    post_recv1(&ep.qp, 9, &[mr.sge(0, 64)])?;
    side.ctl.send("ready", &[])?;
    let wc = expect_wc(
        &ep.recv_cq,
        "receive of a 0-byte send",
        9,
        WcStatus::Success,
    )?;
    ensure_eq!(wc.byte_len, 0, "byte_len of a 0-byte send");
    side.ctl.send("checked", &[])
}

/// Gather from three SGEs in two regions; scatter into two SGEs at other offsets.
const GATHER: &[(usize, usize, u32)] = &[(0, 0, 100), (1, 50, 3000), (0, 4096, 1)];
const SCATTER: &[(usize, u32)] = &[(0, 1000), (8192, 4096)];

fn multi_sge_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    ensure!(
        ep.qp.caps().max_send_sge >= 3,
        "QP has max_send_sge {} < 3 requested 4",
        ep.qp.caps().max_send_sge
    );
    let mrs = [
        ep.register(8192, Access::LOCAL_WRITE)?,
        ep.register(8192, Access::LOCAL_WRITE)?,
    ];
    let mut whole = Vec::new();
    for (i, &(m, off, len)) in GATHER.iter().enumerate() {
        let p = pattern(100 + i as u64, len as usize);
        mrs[m].write_at(off, &p).or_fail("fill")?;
        whole.extend_from_slice(&p);
    }
    let sgl: Vec<_> = GATHER
        .iter()
        .map(|&(m, off, len)| mrs[m].sge(off, len))
        .collect();
    side.ctl.recv("ready")?;
    post1(&ep.qp, 1, WrOp::Send, &sgl, SendFlags::SIGNALED)?;
    expect_wc(&ep.send_cq, "3-SGE send", 1, WcStatus::Success)?;
    side.ctl.send("sent", &[whole.len() as u64])?;
    side.ctl.recv("checked").map(drop)
}

fn multi_sge_server(side: &mut Side<'_>) -> CaseResult {
    let ep = side.accept(&EpOpts::default())?;
    ensure!(ep.qp.caps().max_recv_sge >= 2, "QP has max_recv_sge < 2");
    let mr = ep.register(16384, Access::LOCAL_WRITE)?;
    let sgl: Vec<_> = SCATTER.iter().map(|&(off, len)| mr.sge(off, len)).collect();
    post_recv1(&ep.qp, 3, &sgl)?;
    side.ctl.send("ready", &[])?;
    let wc = expect_wc(&ep.recv_cq, "2-SGE receive", 3, WcStatus::Success)?;
    let mut expected = Vec::new();
    for (i, &(_, _, len)) in GATHER.iter().enumerate() {
        expected.extend_from_slice(&pattern(100 + i as u64, len as usize));
    }
    side.ctl.recv("sent")?;
    ensure_eq!(wc.byte_len as usize, expected.len(), "byte_len");
    let first = SCATTER[0].1 as usize;
    let mut got = mr_bytes(&mr, SCATTER[0].0, first)?;
    got.extend(mr_bytes(&mr, SCATTER[1].0, expected.len() - first)?);
    check_bytes("data scattered over 2 SGEs", &got, &expected)?;
    side.ctl.send("checked", &[])
}

fn inline_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let max = ep.qp.caps().max_inline_data as usize;
    ensure!(
        max >= 1,
        "QP reports max_inline_data 0 though 64 was requested"
    );
    let len = max.min(64);
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    mr.write_at(0, &pattern(7, len)).or_fail("fill")?;
    side.ctl.recv("ready")?;
    // An inline payload is copied at post time: overwriting the buffer afterwards must not
    // change what arrives. (Its SGE still names registered memory: see
    // `post_send_local_checks` for the refusal of one that does not.)
    let sge = [mr.sge(0, len as u32)];
    post1(
        &ep.qp,
        1,
        WrOp::Send,
        &sge,
        SendFlags::SIGNALED | SendFlags::INLINE,
    )?;
    mr.write_at(0, &vec![0xEE; len]).or_fail("overwrite")?;
    expect_wc(&ep.send_cq, "inline send", 1, WcStatus::Success)?;
    side.ctl.send("sent", &[len as u64])?;
    side.ctl.recv("checked").map(drop)
}

fn inline_server(side: &mut Side<'_>) -> CaseResult {
    let ep = side.accept(&EpOpts::default())?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    post_recv1(&ep.qp, 1, &[mr.sge(0, 4096)])?;
    side.ctl.send("ready", &[])?;
    let wc = expect_wc(
        &ep.recv_cq,
        "receive of an inline send",
        1,
        WcStatus::Success,
    )?;
    let len = side.ctl.recv("sent")?[0] as usize;
    ensure_eq!(wc.byte_len as usize, len, "byte_len");
    check_mr(
        "inline payload (as it was at post time)",
        &mr,
        0,
        &pattern(7, len),
    )?;
    side.ctl.send("checked", &[])
}

fn arm_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    side.ctl.recv("ready")?;
    ep.send_cq.arm().or_fail("Cq::arm")?;
    let woke = ep
        .send_cq
        .wait(Some(Duration::from_millis(50)))
        .or_fail("Cq::wait")?;
    ensure!(
        !woke,
        "Cq::wait returned an event with no completion pending"
    );
    post1(&ep.qp, 1, WrOp::Send, &[mr.sge(0, 16)], SendFlags::SIGNALED)?;
    let woke = ep.send_cq.wait(Some(OP_TIMEOUT)).or_fail("Cq::wait")?;
    ensure!(
        woke,
        "armed CQ: no event within {} ms of a completion",
        OP_TIMEOUT.as_millis()
    );
    let wc = poll_one(&ep.send_cq)?;
    ensure!(
        wc.is_some_and(|w| w.wr_id == 1 && w.status == WcStatus::Success),
        "after the CQ event, poll gave {wc:?}, expected the send's completion"
    );
    side.ctl.recv("checked").map(drop)
}

fn arm_server(side: &mut Side<'_>) -> CaseResult {
    let ep = side.accept(&EpOpts::default())?;
    let mr = ep.register(4096, Access::LOCAL_WRITE)?;
    post_recv1(&ep.qp, 1, &[mr.sge(0, 64)])?;
    ep.recv_cq.arm().or_fail("Cq::arm")?;
    side.ctl.send("ready", &[])?;
    let woke = ep.recv_cq.wait(Some(OP_TIMEOUT)).or_fail("Cq::wait")?;
    ensure!(
        woke,
        "armed receive CQ: no event within {} ms",
        OP_TIMEOUT.as_millis()
    );
    expect_wc(
        &ep.recv_cq,
        "receive after the CQ event",
        1,
        WcStatus::Success,
    )?;
    side.ctl.send("checked", &[])
}
