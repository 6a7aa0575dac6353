//! Posting: `SendWr` / `RecvWr` slices become `ibv_send_wr` / `ibv_recv_wr` chains in stack
//! arrays of [`CHUNK`] entries (longer lists are posted chunk by chunk), so the hot path does
//! not allocate. SGE slices are handed to the provider as they are: `fabric::Sge` is
//! `repr(C)` with `ibv_sge`'s layout (checked below).
//!
//! Partial posts keep the fabric contract: the WRs before the failing index were posted.

use std::mem::{align_of, offset_of, size_of};

use super::mw::Mw;
use super::pd::Regions;
use super::{rc_err, sys};
use crate::fabric::{FabricError, QpCaps, RecvWr, Result, SendFlags, SendWr, Sge, WrOp};

/// Work requests converted and posted per provider call.
pub const CHUNK: usize = 16;

const _: () = assert!(size_of::<Sge>() == size_of::<sys::ibv_sge>());
const _: () = assert!(align_of::<Sge>() == align_of::<sys::ibv_sge>());
const _: () = assert!(offset_of!(Sge, addr) == offset_of!(sys::ibv_sge, addr));
const _: () = assert!(offset_of!(Sge, length) == offset_of!(sys::ibv_sge, length));
const _: () = assert!(offset_of!(Sge, lkey) == offset_of!(sys::ibv_sge, lkey));

/// The error for the provider refusing WR `index` with `rc`.
fn post_err(op: &'static str, index: usize, rc: i32) -> FabricError {
    match rc.abs() {
        libc::ENOMEM => FabricError::QueueFull { index },
        libc::EINVAL => FabricError::BadWr {
            index,
            reason: format!("{op}: the provider refused it (EINVAL: opcode, SGE count, inline size or QP state)"),
        },
        e => FabricError::BadWr {
            index,
            reason: rc_err(op, e).to_string(),
        },
    }
}

fn bad(index: usize, reason: String) -> FabricError {
    FabricError::BadWr { index, reason }
}

/// The SGE list as the provider's pointer. The provider only reads it (`ibv_post_*` take a
/// mutable pointer for historical reasons).
fn sg_ptr(sgl: &[Sge]) -> *mut sys::ibv_sge {
    if sgl.is_empty() {
        std::ptr::null_mut()
    } else {
        sgl.as_ptr().cast_mut().cast()
    }
}

/// What the QP needs to know to check and post.
pub struct PostTarget {
    pub qp: *mut sys::ibv_qp,
    /// The QP's protection domain object (its region table checks inline SGEs).
    pub pd_obj: super::pd::Pd,
    /// The QP's protection domain (type-2 windows bind only within it).
    pub pd: *mut sys::ibv_pd,
    pub caps: QpCaps,
}

/// Fills `raw` for `wr` (index `index` of the posted list). Returns the window whose rkey
/// changes when this WR is posted.
fn fill_send<'a>(
    raw: &mut sys::ibv_send_wr,
    wr: &SendWr<'a>,
    index: usize,
    target: &PostTarget,
    regions: Option<&Regions>,
) -> Result<Option<(&'a Mw, u32)>> {
    use sys::ibv_wr_opcode as op;
    if wr.sgl.len() > target.caps.max_send_sge as usize {
        return Err(bad(
            index,
            format!(
                "{} SGEs, the QP allows {}",
                wr.sgl.len(),
                target.caps.max_send_sge
            ),
        ));
    }
    if wr.flags.contains(SendFlags::INLINE) {
        let total: u64 = wr.sgl.iter().map(|s| u64::from(s.length)).sum();
        if total > u64::from(target.caps.max_inline_data) {
            return Err(bad(
                index,
                format!(
                    "{total} inline bytes, the QP allows {}",
                    target.caps.max_inline_data
                ),
            ));
        }
        // The CPU reads inline payloads during ibv_post_send: only registered memory of this
        // PD may be named (the caller holds the table's read lock across the post).
        let regions = regions.expect("post_send read-locks the region table for inline WRs");
        for s in wr.sgl {
            let inside = regions.get(&s.lkey).is_some_and(|&(addr, len)| {
                s.addr >= addr && s.addr - addr + u64::from(s.length) <= len as u64
            });
            if !inside {
                return Err(bad(
                    index,
                    format!(
                        "inline SGE {:#x}+{} (lkey {:#x}) is not inside a registered memory \
                         region of this QP's protection domain",
                        s.addr, s.length, s.lkey
                    ),
                ));
            }
        }
    }
    raw.wr_id = wr.wr_id;
    raw.sg_list = sg_ptr(wr.sgl);
    raw.num_sge = wr.sgl.len() as i32;
    raw.send_flags = wr.flags.bits();
    let mut rekey = None;
    match wr.op {
        WrOp::Send => raw.opcode = op::IBV_WR_SEND,
        WrOp::SendWithInv { rkey } => {
            raw.opcode = op::IBV_WR_SEND_WITH_INV;
            raw.__bindgen_anon_1.invalidate_rkey = rkey;
        }
        WrOp::RdmaWrite { remote_addr, rkey } | WrOp::RdmaRead { remote_addr, rkey } => {
            raw.opcode = if matches!(wr.op, WrOp::RdmaWrite { .. }) {
                op::IBV_WR_RDMA_WRITE
            } else {
                op::IBV_WR_RDMA_READ
            };
            raw.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
        }
        WrOp::BindMw {
            mw,
            mr,
            addr,
            length,
            access,
        } => {
            if !wr.sgl.is_empty() {
                return Err(bad(index, "a memory-window bind takes no SGEs".into()));
            }
            let mw = mw.as_verbs().ok_or(FabricError::ProviderMismatch {
                what: "memory window",
            })?;
            let mr = mr.as_verbs().ok_or(FabricError::ProviderMismatch {
                what: "memory region",
            })?;
            if mw.pd().raw() != target.pd || mr.pd().raw() != target.pd {
                return Err(bad(
                    index,
                    "the window, the region and the QP must share one protection domain".into(),
                ));
            }
            let new_rkey = mw.next_rkey();
            raw.opcode = op::IBV_WR_BIND_MW;
            raw.__bindgen_anon_2.bind_mw = sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 {
                mw: mw.raw(),
                rkey: new_rkey,
                bind_info: sys::ibv_mw_bind_info {
                    mr: mr.raw(),
                    addr,
                    length,
                    mw_access_flags: access.bits(),
                },
            };
            rekey = Some((mw, new_rkey));
        }
        WrOp::LocalInv { rkey } => {
            if !wr.sgl.is_empty() {
                return Err(bad(index, "a local invalidate takes no SGEs".into()));
            }
            raw.opcode = op::IBV_WR_LOCAL_INV;
            raw.__bindgen_anon_1.invalidate_rkey = rkey;
        }
    }
    Ok(rekey)
}

/// Posts `wrs` on `target.qp`.
pub fn post_send(target: &PostTarget, wrs: &[SendWr<'_>]) -> Result<()> {
    // Held across the posts when any WR is inline: a region cannot be deregistered (and its
    // memory unmapped) while the provider copies from it.
    let regions = wrs
        .iter()
        .any(|w| w.flags.contains(SendFlags::INLINE))
        .then(|| target.pd_obj.regions());
    let mut start = 0;
    while start < wrs.len() {
        let mut raw = [sys::ibv_send_wr::default(); CHUNK];
        let mut rekeys: [Option<(&Mw, u32)>; CHUNK] = [None; CHUNK];
        let mut n = 0;
        let mut fill_error = None;
        while n < CHUNK && start + n < wrs.len() {
            let wr = &wrs[start + n];
            // A second bind of one window must see the first one's key: post what we have.
            if let WrOp::BindMw { mw, .. } = wr.op {
                let again = rekeys[..n]
                    .iter()
                    .flatten()
                    .any(|(m, _)| mw.as_verbs().is_some_and(|v| std::ptr::eq(*m, v)));
                if again {
                    break;
                }
            }
            match fill_send(&mut raw[n], wr, start + n, target, regions.as_deref()) {
                Ok(r) => rekeys[n] = r,
                Err(e) => {
                    fill_error = Some(e);
                    break;
                }
            }
            n += 1;
        }
        if n > 0 {
            for i in 0..n - 1 {
                raw[i].next = &mut raw[i + 1];
            }
            let mut bad_wr: *mut sys::ibv_send_wr = std::ptr::null_mut();
            // SAFETY: the QP is live (the caller holds it); `raw[..n]` is a well-formed chain
            // whose SGE lists and MR/MW pointers outlive the call (borrowed from `wrs`).
            let rc =
                unsafe { sys::rdmablk_shim_post_send(target.qp, raw.as_mut_ptr(), &mut bad_wr) };
            let posted = if rc == 0 {
                n
            } else {
                chain_index(raw.as_ptr(), bad_wr, n)
            };
            for (mw, rkey) in rekeys[..posted].iter().flatten() {
                mw.set_rkey(*rkey);
            }
            if rc != 0 {
                return Err(post_err("ibv_post_send", start + posted, rc));
            }
        }
        if let Some(e) = fill_error {
            return Err(e);
        }
        start += n;
    }
    Ok(())
}

/// Index of `bad` in the chain starting at `first` (`0` if the provider did not say).
fn chain_index<T>(first: *const T, bad: *const T, n: usize) -> usize {
    if bad.is_null() {
        return 0;
    }
    let off = (bad as usize).wrapping_sub(first as usize) / size_of::<T>();
    off.min(n)
}

/// Where receive WRs go.
#[derive(Clone, Copy)]
pub enum RecvTarget {
    Qp(*mut sys::ibv_qp),
    Srq(*mut sys::ibv_srq),
}

/// Posts receive WRs of at most `max_sge` SGEs on `to` (which the caller keeps alive).
pub fn post_recv(to: RecvTarget, max_sge: u32, wrs: &[RecvWr<'_>]) -> Result<()> {
    for (c, chunk) in wrs.chunks(CHUNK).enumerate() {
        let base = c * CHUNK;
        let mut raw = [sys::ibv_recv_wr::default(); CHUNK];
        let mut n = 0;
        let mut fill_error = None;
        for wr in chunk {
            if wr.sgl.len() > max_sge as usize {
                fill_error = Some(bad(
                    base + n,
                    format!("{} SGEs, the queue allows {max_sge}", wr.sgl.len()),
                ));
                break;
            }
            raw[n].wr_id = wr.wr_id;
            raw[n].sg_list = sg_ptr(wr.sgl);
            raw[n].num_sge = wr.sgl.len() as i32;
            n += 1;
        }
        if n > 0 {
            for i in 0..n - 1 {
                raw[i].next = &mut raw[i + 1];
            }
            let mut bad_wr: *mut sys::ibv_recv_wr = std::ptr::null_mut();
            let (op, rc) = match to {
                // SAFETY: the QP is live; `raw[..n]` is a well-formed chain whose SGE lists
                // are borrowed from `wrs` for the duration of the call.
                RecvTarget::Qp(qp) => ("ibv_post_recv", unsafe {
                    sys::rdmablk_shim_post_recv(qp, raw.as_mut_ptr(), &mut bad_wr)
                }),
                // SAFETY: as above, with a live SRQ.
                RecvTarget::Srq(srq) => ("ibv_post_srq_recv", unsafe {
                    sys::rdmablk_shim_post_srq_recv(srq, raw.as_mut_ptr(), &mut bad_wr)
                }),
            };
            if rc != 0 {
                let i = chain_index(raw.as_ptr(), bad_wr, n);
                return Err(post_err(op, base + i, rc));
            }
        }
        if let Some(e) = fill_error {
            return Err(e);
        }
    }
    Ok(())
}
