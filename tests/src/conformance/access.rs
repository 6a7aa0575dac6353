//! Remote access checks: a bad rkey, a range outside the region, a missing access flag, a
//! deregistered region and a region of another PD all fail the requester with REM_ACCESS_ERR,
//! and a refused WRITE changes nothing at the responder.

use rdmablk::fabric::{Access, SendFlags, WcStatus, WrOp};

use super::{case, post1, recv_mr, send_mr};
use crate::check::CaseResult;
use crate::endpoint::{check_mr, expect_wc, register, rw_access, EpOpts};
use crate::harness::{Case, Side};

pub const CASES: &[Case] = &[
    case!("write_bad_rkey", |s| client(s, Sc::BadRkey, W), |s| server(
        s,
        Sc::BadRkey
    )),
    case!("read_bad_rkey", |s| client(s, Sc::BadRkey, R), |s| server(
        s,
        Sc::BadRkey
    )),
    case!("write_out_of_range", |s| client(s, Sc::Range, W), |s| {
        server(s, Sc::Range)
    }),
    case!(
        "read_out_of_range",
        |s| client(s, Sc::Range, R),
        |s| server(s, Sc::Range)
    ),
    case!("write_before_start", |s| client(s, Sc::Before, W), |s| {
        server(s, Sc::Before)
    }),
    case!(
        "write_no_remote_write",
        |s| client(s, Sc::NoWrite, W),
        |s| server(s, Sc::NoWrite)
    ),
    case!("read_no_remote_read", |s| client(s, Sc::NoRead, R), |s| {
        server(s, Sc::NoRead)
    }),
    case!(
        "write_after_dereg",
        |s| client(s, Sc::Dereg, W),
        |s| server(s, Sc::Dereg)
    ),
    case!("write_other_pd", |s| client(s, Sc::OtherPd, W), |s| server(
        s,
        Sc::OtherPd
    )),
];

const W: bool = true;
const R: bool = false;
const LEN: usize = 4096;

/// What is wrong with the access.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sc {
    /// The rkey is not the region's.
    BadRkey,
    /// 16 bytes straddling the region's end.
    Range,
    /// 16 bytes straddling the region's start.
    Before,
    /// The region lacks REMOTE_WRITE.
    NoWrite,
    /// The region lacks REMOTE_READ.
    NoRead,
    /// The region was deregistered before the access.
    Dereg,
    /// The region is in another PD than the responder's QP.
    OtherPd,
}

fn client(side: &mut Side<'_>, sc: Sc, write: bool) -> CaseResult {
    let ep = side.connect(&EpOpts::default())?;
    let mr = ep.register(LEN, Access::LOCAL_WRITE)?;
    let remote = recv_mr(&mut side.ctl, "mr")?;
    let (addr, len, rkey) = match sc {
        Sc::BadRkey => (remote.addr, 16, !remote.rkey),
        Sc::Range => (remote.addr + remote.len - 8, 16, remote.rkey),
        Sc::Before => (remote.addr - 8, 16, remote.rkey),
        _ => (remote.addr, 16, remote.rkey),
    };
    if sc == Sc::Dereg {
        side.ctl.recv("deregistered")?;
    }
    let op = if write {
        WrOp::RdmaWrite {
            remote_addr: addr,
            rkey,
        }
    } else {
        WrOp::RdmaRead {
            remote_addr: addr,
            rkey,
        }
    };
    post1(&ep.qp, 1, op, &[mr.sge(0, len)], SendFlags::SIGNALED)?;
    expect_wc(&ep.send_cq, "the refused access", 1, WcStatus::RemAccessErr)?;
    side.ctl.send("done", &[])?;
    side.ctl.recv("checked").map(drop)
}

fn server(side: &mut Side<'_>, sc: Sc) -> CaseResult {
    let ep = side.accept(&EpOpts::default())?;
    let access = match sc {
        Sc::NoWrite => Access::LOCAL_WRITE | Access::REMOTE_READ,
        Sc::NoRead => Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        _ => rw_access(),
    };
    let pd = match sc {
        Sc::OtherPd => ep
            .device
            .alloc_pd()
            .map_err(|e| crate::check::fail(format!("alloc_pd: {e}")))?,
        _ => ep.pd.clone(),
    };
    // A page of padding on each side, so a straddling access cannot land in another region.
    let pad = register(&pd, LEN, rw_access())?;
    let mr = register(&pd, LEN, access)?;
    let pad2 = register(&pd, LEN, rw_access())?;
    send_mr(&mut side.ctl, "mr", &mr)?;
    // Dropping the region deregisters it.
    let mr = Some(mr).filter(|_| sc != Sc::Dereg);
    if sc == Sc::Dereg {
        side.ctl.send("deregistered", &[])?;
    }
    side.ctl.recv("done")?;
    if let Some(mr) = &mr {
        check_mr("region after a refused access", mr, 0, &[0; LEN])?;
    }
    check_mr("padding region", &pad, 0, &[0; LEN])?;
    check_mr("padding region", &pad2, 0, &[0; LEN])?;
    side.ctl.send("checked", &[])
}
