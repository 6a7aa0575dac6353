//! A command's data phase: how many bytes move which way, described by which SGL, checked
//! against the queue's limits before anything executes; and [`Next`], what the worker does
//! with a checked request. Used by every command set ([`super::admin`], [`super::fabrics`],
//! [`super::auth`], [`super::io_commands`]).

use rdmablk::nvme::transport::rdma::PushedSgl;
use rdmablk::nvme::{InCapsuleSgl, Sgl, SglLimits, Status};

use super::connection::Connection;
use super::request::DataDir;
use super::Shared;

/// What the worker does with a checked request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Complete now with the request's status (and any data already in its data slot).
    Respond,
    /// Fetch host data by RDMA READ, then execute.
    Fetch,
    /// Data (if any) is in place: execute.
    Execute,
    /// Hold (Async Event Request).
    Hold,
    /// Drop without a response: the target is shutting down, or the controller was torn
    /// down, and the queue is about to be closed. The host's transport error recovery then retries the command after it
    /// reconnects, where a status would have been handed to the application as an I/O error
    /// (Linux 6.1 does so with Command Interrupted once its few retries run out).
    Abandon,
}

/// How the length an SGL describes must relate to the bytes the command moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SglFit {
    /// The SGL describes exactly the command's data (Read, Write, Identify, Connect, ...):
    /// any other length is `Data SGL Length Invalid`.
    Exact,
    /// The SGL may describe more than the command's data, whose length the command itself
    /// gives; only that much moves. Dataset Management: its data length is (NR + 1) * 16
    /// bytes, but Linux hosts (since about 5.7) always send a 4 KiB range buffer
    /// (`nvme_setup_discard`, 256 ranges' worth) whatever NR says. nvmet accepts it the same
    /// way (`nvmet_check_data_len_lte`).
    AtLeast,
}

/// Sets up the data phase of request `slot`: `len` bytes moving `dir`, described by the
/// command's SGL, whose length must fit `len` as `fit` says. Keyed host-to-controller data is
/// fetched ([`Next::Fetch`]); in-capsule data is copied into the data slot; push-write data is
/// already there.
pub fn data_phase(
    conn: &mut Connection,
    slot: u32,
    dir: DataDir,
    len: u32,
    fit: SglFit,
    shared: &Shared,
) -> Result<Next, Status> {
    let max_transfer = shared.cfg.limits.max_io_size;
    let icd_bytes = conn.icd_bytes;
    let push = conn.push;
    let r = &mut conn.reqs[slot as usize];
    // The data phase is recorded only once the descriptor passed every check: a response
    // never moves data for a command whose pointer was refused.
    r.dir = DataDir::None;
    r.data_len = 0;
    if dir == DataDir::None {
        if let Ok(sgl @ Sgl::Keyed(_)) = Sgl::decode(&r.sqe.dptr) {
            r.sgl = Some(sgl);
        }
        return Ok(Next::Execute);
    }
    let h2c = dir == DataDir::HostToController;
    if let Some(p) = PushedSgl::decode(&r.sqe.dptr) {
        let w = push.ok_or(Status::SGL_INVALID_TYPE.with_dnr())?;
        if !h2c {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        p.check(&w, u64::from(r.data_slot))?;
        let fits = match fit {
            SglFit::Exact => p.len == len,
            SglFit::AtLeast => p.len >= len,
        };
        if !fits || p.len > max_transfer {
            return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
        }
        (r.dir, r.data_len) = (dir, len);
        return Ok(Next::Execute);
    }
    let sgl = Sgl::decode(&r.sqe.dptr)?;
    if let Sgl::Transport(_) = sgl {
        // NVMe/RDMA moves data by keyed SGLs or in the capsule; the transport data block is
        // NVMe/TCP's (nvmet-rdma and SPDK's rdma.c answer it as an unknown type too).
        return Err(Status::SGL_INVALID_TYPE.with_dnr());
    }
    let limits = SglLimits {
        in_capsule_bytes: icd_bytes,
        max_transfer_bytes: max_transfer,
    };
    sgl.check(&limits, h2c)?;
    let fits = match fit {
        SglFit::Exact => sgl.len() == len,
        SglFit::AtLeast => sgl.len() >= len,
    };
    if !fits {
        return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
    }
    match sgl {
        Sgl::Keyed(_) => {
            r.sgl = Some(sgl);
            (r.dir, r.data_len) = (dir, len);
            Ok(if h2c { Next::Fetch } else { Next::Execute })
        }
        Sgl::InCapsule(c) => {
            copy_in_capsule(conn, slot, c, len)?;
            let r = &mut conn.reqs[slot as usize];
            (r.dir, r.data_len) = (dir, len);
            Ok(Next::Execute)
        }
        Sgl::Transport(_) => Err(Status::SGL_INVALID_TYPE.with_dnr()), // refused above
    }
}

/// Copies the first `len` bytes of in-capsule data from the receive slot into the request's
/// data slot. (Backends may use O_DIRECT, which needs block-aligned buffers; data after a
/// 64-byte SQE never is.)
fn copy_in_capsule(
    conn: &mut Connection,
    slot: u32,
    c: InCapsuleSgl,
    len: u32,
) -> Result<(), Status> {
    debug_assert!(len <= c.len);
    let r = &conn.reqs[slot as usize];
    let received = (r.capsule_len as usize).saturating_sub(rdmablk::nvme::SQE_LEN);
    let off = c.offset as usize;
    if off
        .checked_add(c.len as usize)
        .map_or(true, |end| end > received)
    {
        return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
    }
    let src = conn.window.recv_slot(r.recv_slot);
    let dst = conn.window.data_slot(r.data_slot);
    debug_assert!(rdmablk::nvme::SQE_LEN + off + c.len as usize <= src.len);
    debug_assert!(len as usize <= dst.len);
    // SAFETY: both ranges lie inside this connection's window (checked against the capsule
    // slot and data slot sizes above), which the arena keeps mapped while the connection
    // lives. Neither is a DMA target right now: the receive completed and is reposted only
    // once this request is prepared, and the data slot belongs to this request alone, which
    // has no RDMA or backend operation in flight yet. They do not overlap (the receive and
    // data areas of a window are disjoint).
    unsafe {
        std::ptr::copy_nonoverlapping(
            src.as_ptr().add(rdmablk::nvme::SQE_LEN + off),
            dst.as_ptr(),
            len as usize,
        );
    }
    Ok(())
}
