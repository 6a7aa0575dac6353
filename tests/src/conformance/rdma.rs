//! RDMA WRITE and READ with data checks, and an unsignalled WRITE ordered before a SEND.

use std::time::Duration;

use rdmablk::fabric::{Access, SendFlags, SendWr, WcOpcode, WcStatus, WrOp};

use super::{case, post1, post_recv1, recv_mr, send_mr};
use crate::check::{CaseResult, OrFail};
use crate::endpoint::{check_mr, expect_no_wc, expect_wc, pattern, rw_access, Endpoint, EpOpts};
use crate::ensure_eq;
use crate::harness::{Case, Side};

pub const CASES: &[Case] = &[
    case!("rdma_write_1b", |s| write_client(s, 1), |s| write_server(
        s, 1
    )),
    case!(
        "rdma_write_4k",
        |s| write_client(s, 4096),
        |s| write_server(s, 4096)
    ),
    case!("rdma_write_1m", |s| write_client(s, 1 << 20), |s| {
        write_server(s, 1 << 20)
    }),
    case!("rdma_read_1b", |s| read_client(s, 1), |s| read_server(s, 1)),
    case!("rdma_read_4k", |s| read_client(s, 4096), |s| read_server(
        s, 4096
    )),
    case!(
        "rdma_read_1m",
        |s| read_client(s, 1 << 20),
        |s| read_server(s, 1 << 20)
    ),
    case!(
        "unsignaled_write_then_send",
        write_send_client,
        write_send_server
    ),
];

/// The remote data sits at this unaligned offset, between guard bytes that must stay zero.
const REMOTE_OFF: usize = 4096 + 3;
const LOCAL_OFF: usize = 11;
const GUARD: usize = 64;

fn write_client(side: &mut Side<'_>, len: usize) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let mr = ep.register(len + LOCAL_OFF, Access::LOCAL_WRITE)?;
    mr.write_at(LOCAL_OFF, &pattern(len as u64, len))
        .or_fail("fill")?;
    let remote = recv_mr(&mut side.ctl, "mr")?;
    let op = WrOp::RdmaWrite {
        remote_addr: remote.addr + REMOTE_OFF as u64,
        rkey: remote.rkey,
    };
    post1(
        &ep.qp,
        1,
        op,
        &[mr.sge(LOCAL_OFF, len as u32)],
        SendFlags::SIGNALED,
    )?;
    let wc = expect_wc(
        &ep.send_cq,
        &format!("RDMA WRITE of {len} B"),
        1,
        WcStatus::Success,
    )?;
    ensure_eq!(wc.opcode, WcOpcode::RdmaWrite, "wc opcode");
    side.ctl.send("written", &[])?;
    side.ctl.recv("checked").map(drop)
}

fn write_server(side: &mut Side<'_>, len: usize) -> CaseResult {
    let ep = side.accept(&EpOpts::default())?;
    let mr = ep.register(REMOTE_OFF + len + GUARD, rw_access())?;
    send_mr(&mut side.ctl, "mr", &mr)?;
    side.ctl.recv("written")?;
    check_mr("written data", &mr, REMOTE_OFF, &pattern(len as u64, len))?;
    check_mr(
        "bytes before the write",
        &mr,
        REMOTE_OFF - GUARD,
        &[0; GUARD],
    )?;
    check_mr("bytes after the write", &mr, REMOTE_OFF + len, &[0; GUARD])?;
    side.ctl.send("checked", &[])
}

fn read_client(side: &mut Side<'_>, len: usize) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let mr = ep.register(LOCAL_OFF + len + GUARD, Access::LOCAL_WRITE)?;
    let remote = recv_mr(&mut side.ctl, "mr")?;
    let op = WrOp::RdmaRead {
        remote_addr: remote.addr + REMOTE_OFF as u64,
        rkey: remote.rkey,
    };
    post1(
        &ep.qp,
        1,
        op,
        &[mr.sge(LOCAL_OFF, len as u32)],
        SendFlags::SIGNALED,
    )?;
    let wc = expect_wc(
        &ep.send_cq,
        &format!("RDMA READ of {len} B"),
        1,
        WcStatus::Success,
    )?;
    ensure_eq!(wc.opcode, WcOpcode::RdmaRead, "wc opcode");
    check_mr("data read", &mr, LOCAL_OFF, &pattern(len as u64 + 1, len))?;
    check_mr("local bytes before the read", &mr, 0, &[0; LOCAL_OFF])?;
    check_mr(
        "local bytes after the read",
        &mr,
        LOCAL_OFF + len,
        &[0; GUARD],
    )?;
    side.ctl.send("done", &[])
}

fn read_server(side: &mut Side<'_>, len: usize) -> CaseResult {
    let ep = side.accept(&EpOpts::default())?;
    let mr = ep.register(REMOTE_OFF + len + GUARD, rw_access())?;
    mr.write_at(REMOTE_OFF, &pattern(len as u64 + 1, len))
        .or_fail("fill")?;
    mr.write_at(REMOTE_OFF - GUARD, &[0xAB; GUARD])
        .or_fail("fill")?;
    mr.write_at(REMOTE_OFF + len, &[0xCD; GUARD])
        .or_fail("fill")?;
    send_mr(&mut side.ctl, "mr", &mr)?;
    side.ctl.recv("done").map(drop)
}

const CHAINED_LEN: usize = 256 * 1024;

/// An unsignalled WRITE then a signalled SEND in one chain: when the peer's receive completes,
/// the write has landed (RC executes a queue's WRs in order).
fn write_send_client(side: &mut Side<'_>) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let mr = ep.register(CHAINED_LEN + 64, Access::LOCAL_WRITE)?;
    mr.write_at(0, &pattern(42, CHAINED_LEN)).or_fail("fill")?;
    let remote = recv_mr(&mut side.ctl, "mr")?;
    let w = [mr.sge(0, CHAINED_LEN as u32)];
    let s = [mr.sge(CHAINED_LEN, 64)];
    let chain = [
        SendWr {
            wr_id: 1,
            op: WrOp::RdmaWrite {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            },
            sgl: &w,
            flags: SendFlags::empty(),
        },
        SendWr {
            wr_id: 2,
            op: WrOp::Send,
            sgl: &s,
            flags: SendFlags::SIGNALED,
        },
    ];
    ep.qp.post_send(&chain).or_fail("post_send [WRITE, SEND]")?;
    expect_wc(
        &ep.send_cq,
        "signalled SEND after an unsignalled WRITE",
        2,
        WcStatus::Success,
    )?;
    expect_no_wc(
        &ep.send_cq,
        Duration::from_millis(50),
        "after the SEND (the WRITE is unsignalled)",
    )?;
    side.ctl.recv("checked").map(drop)
}

fn write_send_server(side: &mut Side<'_>) -> CaseResult {
    let req = side.request()?;
    let ep = Endpoint::create(req, &EpOpts::default())?;
    let mr = ep.register(CHAINED_LEN, rw_access())?;
    let rmr = ep.register(64, Access::LOCAL_WRITE)?;
    post_recv1(&ep.qp, 7, &[rmr.sge(0, 64)])?;
    ep.accept(&Default::default())?;
    send_mr(&mut side.ctl, "mr", &mr)?;
    expect_wc(&ep.recv_cq, "receive of the SEND", 7, WcStatus::Success)?;
    check_mr(
        "WRITE data when the following SEND's receive completed",
        &mr,
        0,
        &pattern(42, CHAINED_LEN),
    )?;
    side.ctl.send("checked", &[])
}
