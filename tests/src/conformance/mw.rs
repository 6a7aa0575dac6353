//! Type-2 memory windows: bind over part of a region that grants no remote access itself,
//! remote use within and outside the window, invalidation (LOCAL_INV, the peer's
//! SEND_WITH_INV), use after invalidation, use through another QP.
//!
//! The server owns the region and the window; the client is the remote user. Cases skip, with
//! the reason, when the server's device has no type-2 windows.

use rdmablk::fabric::{Access, FabricError, Mr, Mw, SendFlags, WcOpcode, WcStatus, WrOp};

use super::{case, post1, post_recv1};
use crate::check::{fail, CaseError, CaseResult, OrFail};
use crate::endpoint::{check_mr, expect_wc, mr_bytes, pattern, Endpoint, EpOpts};
use crate::harness::{Case, Side};
use crate::{ensure, ensure_eq};

pub const CASES: &[Case] = &[
    case!("mw_bind_remote_access", access_client, |s| server(
        s,
        Sc::Access
    )),
    case!("mw_write_past_window_end", past_end_client, |s| server(
        s,
        Sc::Outside
    )),
    case!("mw_read_before_window_start", before_start_client, |s| {
        server(s, Sc::Outside)
    }),
    case!("mw_mr_rkey_grants_nothing", mr_rkey_client, |s| server(
        s,
        Sc::Outside
    )),
    case!("mw_local_inv", local_inv_client, |s| server(
        s,
        Sc::LocalInv
    )),
    case!("mw_send_with_inv", send_inv_client, |s| server(
        s,
        Sc::SendInv
    )),
    case!("mw_other_qp", other_qp_client, |s| server(s, Sc::OtherQp)),
    case!("mw_rebind_new_rkey", rebind_client, |s| server(
        s,
        Sc::Rebind
    )),
];

const REGION: usize = 64 * 1024;
const WIN_OFF: usize = 16 * 1024;
const WIN_LEN: usize = 8 * 1024;
const SEED: u64 = 77;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Sc {
    Access,
    Outside,
    LocalInv,
    SendInv,
    OtherQp,
    Rebind,
}

/// The window as the client sees it.
struct Window {
    addr: u64,
    len: u64,
    rkey: u32,
    mr_rkey: u32,
}

fn recv_window(side: &mut Side<'_>) -> CaseResult<Window> {
    match side.ctl.recv("window")?[..] {
        [addr, len, rkey, mr_rkey] => Ok(Window {
            addr,
            len,
            rkey: rkey as u32,
            mr_rkey: mr_rkey as u32,
        }),
        ref v => Err(fail(format!("protocol: window carried {v:?}"))),
    }
}

fn alloc_mw(ep: &Endpoint) -> CaseResult<Mw> {
    match ep.pd.alloc_mw() {
        Ok(mw) => Ok(mw),
        Err(FabricError::Unsupported { what }) => Err(CaseError::Skip(format!(
            "Pd::alloc_mw: {what} is not supported by device {}",
            ep.device.name()
        ))),
        Err(e) => Err(fail(format!("Pd::alloc_mw: {e}"))),
    }
}

fn bind(ep: &Endpoint, mw: &Mw, mr: &Mr) -> CaseResult {
    let op = WrOp::BindMw {
        mw,
        mr,
        addr: mr.addr() + WIN_OFF as u64,
        length: WIN_LEN as u64,
        access: Access::REMOTE_READ | Access::REMOTE_WRITE,
    };
    post1(&ep.qp, 50, op, &[], SendFlags::SIGNALED)?;
    let wc = expect_wc(&ep.send_cq, "BindMw", 50, WcStatus::Success)?;
    ensure_eq!(wc.opcode, WcOpcode::BindMw, "bind wc opcode");
    Ok(())
}

fn server(side: &mut Side<'_>, sc: Sc) -> CaseResult {
    side.require_mw()?;
    side.ctl.send("mw", &[])?;
    let opts = EpOpts::default();
    let ep = Endpoint::create(side.request()?, &opts)?;
    // The region itself grants no remote access: only the window does.
    let mr = ep.register(REGION, Access::LOCAL_WRITE | Access::MW_BIND)?;
    mr.write_at(0, &pattern(SEED, REGION)).or_fail("fill")?;
    let rmr = ep.register(4096, Access::LOCAL_WRITE)?;
    if sc == Sc::SendInv {
        post_recv1(&ep.qp, 7, &[rmr.sge(0, 4096)])?;
    }
    ep.accept(&opts.param)?;
    // The second connection shares the PD, so only the QP differs.
    let other = if sc == Sc::OtherQp {
        let o = EpOpts {
            pd: Some(ep.pd.clone()),
            ..EpOpts::default()
        };
        Some(side.accept(&o)?)
    } else {
        None
    };
    let mw = alloc_mw(&ep)?;
    bind(&ep, &mw, &mr)?;
    let win = mr.addr() + WIN_OFF as u64;
    side.ctl.send(
        "window",
        &[win, WIN_LEN as u64, mw.rkey() as u64, mr.rkey() as u64],
    )?;
    match sc {
        Sc::LocalInv => {
            side.ctl.recv("used")?;
            post1(
                &ep.qp,
                51,
                WrOp::LocalInv { rkey: mw.rkey() },
                &[],
                SendFlags::SIGNALED,
            )?;
            let wc = expect_wc(&ep.send_cq, "LocalInv of the window", 51, WcStatus::Success)?;
            ensure_eq!(wc.opcode, WcOpcode::LocalInv, "LocalInv wc opcode");
            side.ctl.send("invalidated", &[])?;
        }
        Sc::Rebind => {
            side.ctl.recv("used")?;
            let old = mw.rkey();
            post1(
                &ep.qp,
                51,
                WrOp::LocalInv { rkey: old },
                &[],
                SendFlags::SIGNALED,
            )?;
            expect_wc(
                &ep.send_cq,
                "LocalInv before the rebind",
                51,
                WcStatus::Success,
            )?;
            bind(&ep, &mw, &mr)?;
            ensure!(mw.rkey() != old, "rebinding kept the rkey {old:#x}");
            side.ctl.send("rebound", &[mw.rkey() as u64])?;
        }
        Sc::SendInv => {
            let wc = expect_wc(
                &ep.recv_cq,
                "receive of SEND_WITH_INV",
                7,
                WcStatus::Success,
            )?;
            ensure_eq!(
                wc.invalidated_rkey,
                Some(mw.rkey()),
                "receive wc invalidated_rkey"
            );
            side.ctl.send("invalidated", &[])?;
        }
        _ => {}
    }
    let written = side.ctl.recv("done")?;
    // Everything outside the bytes the client wrote through the window is as filled.
    let mut expected = pattern(SEED, REGION);
    if let [off, len, seed] = written[..] {
        let (off, len) = (off as usize, len as usize);
        expected[WIN_OFF + off..WIN_OFF + off + len].copy_from_slice(&pattern(seed, len));
    }
    check_mr("region after the case", &mr, 0, &expected)?;
    drop(other);
    side.ctl.send("checked", &[])
}

/// Writes `len` bytes of pattern `seed` at window offset `off` through `ep`.
fn write(ep: &Endpoint, lmr: &Mr, w: &Window, rkey: u32, off: i64, len: u32) -> CaseResult {
    lmr.write_at(0, &pattern(5, len as usize)).or_fail("fill")?;
    let op = WrOp::RdmaWrite {
        remote_addr: w.addr.wrapping_add_signed(off),
        rkey,
    };
    post1(&ep.qp, 1, op, &[lmr.sge(0, len)], SendFlags::SIGNALED)
}

fn read(ep: &Endpoint, lmr: &Mr, w: &Window, rkey: u32, off: i64, len: u32) -> CaseResult {
    let op = WrOp::RdmaRead {
        remote_addr: w.addr.wrapping_add_signed(off),
        rkey,
    };
    post1(&ep.qp, 2, op, &[lmr.sge(0, len)], SendFlags::SIGNALED)
}

fn setup(side: &mut Side<'_>) -> CaseResult<(Endpoint, Mr, Window)> {
    side.ctl.recv("mw")?;
    let ep = side.connect(&EpOpts::default())?;
    let lmr = ep.register(REGION, Access::LOCAL_WRITE)?;
    let w = recv_window(side)?;
    ensure_eq!(w.len, WIN_LEN as u64, "window length");
    ensure!(
        w.rkey != w.mr_rkey,
        "the window's rkey equals its region's rkey {:#x}",
        w.rkey
    );
    Ok((ep, lmr, w))
}

fn finish(side: &mut Side<'_>, written: &[u64]) -> CaseResult {
    side.ctl.send("done", written)?;
    side.ctl.recv("checked").map(drop)
}

fn access_client(side: &mut Side<'_>) -> CaseResult {
    let (ep, lmr, w) = setup(side)?;
    read(&ep, &lmr, &w, w.rkey, 0, WIN_LEN as u32)?;
    expect_wc(
        &ep.send_cq,
        "READ of the whole window",
        2,
        WcStatus::Success,
    )?;
    let whole = pattern(SEED, REGION);
    check_mr(
        "window contents",
        &lmr,
        0,
        &whole[WIN_OFF..WIN_OFF + WIN_LEN],
    )?;
    write(&ep, &lmr, &w, w.rkey, 100, 512)?;
    expect_wc(&ep.send_cq, "WRITE within the window", 1, WcStatus::Success)?;
    read(&ep, &lmr, &w, w.rkey, 100, 512)?;
    expect_wc(
        &ep.send_cq,
        "READ back within the window",
        2,
        WcStatus::Success,
    )?;
    let got = mr_bytes(&lmr, 0, 512)?;
    crate::endpoint::check_bytes("data read back through the window", &got, &pattern(5, 512))?;
    finish(side, &[100, 512, 5])
}

fn past_end_client(side: &mut Side<'_>) -> CaseResult {
    let (ep, lmr, w) = setup(side)?;
    write(&ep, &lmr, &w, w.rkey, WIN_LEN as i64 - 8, 16)?;
    expect_wc(
        &ep.send_cq,
        "WRITE straddling the window's end",
        1,
        WcStatus::RemAccessErr,
    )?;
    finish(side, &[])
}

fn before_start_client(side: &mut Side<'_>) -> CaseResult {
    let (ep, lmr, w) = setup(side)?;
    read(&ep, &lmr, &w, w.rkey, -8, 16)?;
    expect_wc(
        &ep.send_cq,
        "READ straddling the window's start",
        2,
        WcStatus::RemAccessErr,
    )?;
    finish(side, &[])
}

fn mr_rkey_client(side: &mut Side<'_>) -> CaseResult {
    let (ep, lmr, w) = setup(side)?;
    write(&ep, &lmr, &w, w.mr_rkey, 0, 16)?;
    expect_wc(
        &ep.send_cq,
        "WRITE inside the window with the region's own rkey",
        1,
        WcStatus::RemAccessErr,
    )?;
    finish(side, &[])
}

fn local_inv_client(side: &mut Side<'_>) -> CaseResult {
    let (ep, lmr, w) = setup(side)?;
    write(&ep, &lmr, &w, w.rkey, 0, 64)?;
    expect_wc(
        &ep.send_cq,
        "WRITE before the invalidation",
        1,
        WcStatus::Success,
    )?;
    side.ctl.send("used", &[])?;
    side.ctl.recv("invalidated")?;
    read(&ep, &lmr, &w, w.rkey, 0, 64)?;
    expect_wc(
        &ep.send_cq,
        "READ after LocalInv",
        2,
        WcStatus::RemAccessErr,
    )?;
    finish(side, &[0, 64, 5])
}

fn send_inv_client(side: &mut Side<'_>) -> CaseResult {
    let (ep, lmr, w) = setup(side)?;
    write(&ep, &lmr, &w, w.rkey, 0, 64)?;
    expect_wc(
        &ep.send_cq,
        "WRITE before the invalidation",
        1,
        WcStatus::Success,
    )?;
    let op = WrOp::SendWithInv { rkey: w.rkey };
    post1(&ep.qp, 3, op, &[lmr.sge(0, 16)], SendFlags::SIGNALED)?;
    let wc = expect_wc(&ep.send_cq, "SEND_WITH_INV", 3, WcStatus::Success)?;
    ensure_eq!(wc.opcode, WcOpcode::Send, "SEND_WITH_INV wc opcode");
    side.ctl.recv("invalidated")?;
    write(&ep, &lmr, &w, w.rkey, 64, 64)?;
    expect_wc(
        &ep.send_cq,
        "WRITE after SEND_WITH_INV",
        1,
        WcStatus::RemAccessErr,
    )?;
    finish(side, &[0, 64, 5])
}

/// The window is bound on the server's first QP; the client's second connection reaches a QP
/// of the same PD and must be refused.
fn other_qp_client(side: &mut Side<'_>) -> CaseResult {
    side.ctl.recv("mw")?;
    let a = side.connect(&EpOpts::default())?;
    let b = side.connect(&EpOpts::default())?;
    let lmr = a.register(REGION, Access::LOCAL_WRITE)?;
    let lmr_b = b.register(REGION, Access::LOCAL_WRITE)?;
    let w = recv_window(side)?;
    write(&b, &lmr_b, &w, w.rkey, 0, 64)?;
    expect_wc(
        &b.send_cq,
        "WRITE through a QP the window is not bound to",
        1,
        WcStatus::RemAccessErr,
    )?;
    write(&a, &lmr, &w, w.rkey, 0, 64)?;
    expect_wc(
        &a.send_cq,
        "WRITE through the QP the window is bound to",
        1,
        WcStatus::Success,
    )?;
    finish(side, &[0, 64, 5])
}

/// After LocalInv and a second bind the window has a new rkey: the new one works, the old one
/// is refused.
fn rebind_client(side: &mut Side<'_>) -> CaseResult {
    let (ep, lmr, w) = setup(side)?;
    write(&ep, &lmr, &w, w.rkey, 0, 64)?;
    expect_wc(
        &ep.send_cq,
        "WRITE with the first binding",
        1,
        WcStatus::Success,
    )?;
    side.ctl.send("used", &[])?;
    let new = side.ctl.recv("rebound")?[0] as u32;
    read(&ep, &lmr, &w, new, 0, 64)?;
    expect_wc(&ep.send_cq, "READ with the new rkey", 2, WcStatus::Success)?;
    read(&ep, &lmr, &w, w.rkey, 0, 64)?;
    expect_wc(
        &ep.send_cq,
        "READ with the rkey of the first binding",
        2,
        WcStatus::RemAccessErr,
    )?;
    finish(side, &[0, 64, 5])
}
