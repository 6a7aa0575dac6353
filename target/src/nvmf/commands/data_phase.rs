//! A command's data phase: how many bytes move which way, described by which SGL, checked
//! against the queue's limits before anything executes; and [`Next`], what the worker does
//! with a checked request. Used by every command set ([`super::admin`], [`super::fabrics`],
//! [`super::auth`], [`super::io_commands`]); the data pointer itself is the transport's to
//! map ([`QueueTransport::map_data`]), with the helpers here.

use rdmablk::nvme::{InCapsuleSgl, Sgl, SglLimits, Status, SQE_LEN};

use crate::arena::Region;
use crate::nvmf::queue::Queue;
use crate::nvmf::request::DataDir;
use crate::nvmf::transport::QueueTransport;
use crate::nvmf::Shared;

/// What the worker does with a checked request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Complete now with the request's status (and any data already in its data slot).
    Respond,
    /// Have the transport fetch host data, then execute.
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

impl SglFit {
    /// Whether an SGL describing `described` bytes fits a command that moves `len`.
    pub fn fits(self, described: u32, len: u32) -> bool {
        match self {
            SglFit::Exact => described == len,
            SglFit::AtLeast => described >= len,
        }
    }
}

/// Sets up the data phase of request `slot`: `len` bytes moving `dir`, described by the
/// command's data pointer, whose length must fit `len` as `fit` says. The transport maps the
/// pointer: data it must fetch from the host is [`Next::Fetch`]; in-capsule data is copied into
/// the data slot; pushed data is already there.
pub fn data_phase<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    dir: DataDir,
    len: u32,
    fit: SglFit,
    shared: &Shared,
) -> Result<Next, Status> {
    let r = &mut q.reqs[slot as usize];
    // The data phase is recorded only once the descriptor passed every check: a response
    // never moves data for a command whose pointer was refused.
    r.dir = DataDir::None;
    r.data_len = 0;
    let next = X::map_data(q, slot, dir, len, fit, shared)?;
    // The buffer was taken for the length the SGL describes, which the checks above made at
    // least `len`: a data phase never reaches past it.
    let r = &q.reqs[slot as usize];
    if r.data_len > r.data.len {
        return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
    }
    Ok(next)
}

/// The checks every transport makes of request `slot`'s data pointer, `len` bytes moving
/// `dir`: the SGL decoded; `foreign` (another transport's kind: a keyed SGL over NVMe/TCP, a
/// transport data block over NVMe/RDMA) refused as an invalid SGL type; the SGL checked against
/// `limits` and its length against `len` as `fit` says; in-capsule data copied into the data
/// slot. The SGL, for the transport to move the rest of the data as it does.
pub fn check_sgl<X: QueueTransport>(
    q: &mut Queue<X>,
    slot: u32,
    dir: DataDir,
    len: u32,
    fit: SglFit,
    limits: &SglLimits,
    foreign: fn(&Sgl) -> bool,
) -> Result<Sgl, Status> {
    let sgl = Sgl::decode(&q.reqs[slot as usize].sqe.dptr)?;
    if foreign(&sgl) {
        return Err(Status::SGL_INVALID_TYPE.with_dnr());
    }
    sgl.check(limits, dir == DataDir::HostToController)?;
    if !fit.fits(sgl.len(), len) {
        return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
    }
    if let Sgl::InCapsule(c) = sgl {
        let capsule = X::capsule_region(q, q.reqs[slot as usize].recv_slot);
        copy_in_capsule(q, slot, capsule, c, len)?;
    }
    Ok(sgl)
}

/// Copies the first `len` bytes of in-capsule data from `capsule` (the whole capsule, SQE
/// first, as received) into request `slot`'s data slot, after checking that the capsule holds
/// what the SGL `c` describes. (Backends may use O_DIRECT, which needs block-aligned buffers;
/// data after a 64-byte SQE never is.)
pub fn copy_in_capsule<X>(
    q: &mut Queue<X>,
    slot: u32,
    capsule: Region,
    c: InCapsuleSgl,
    len: u32,
) -> Result<(), Status> {
    debug_assert!(len <= c.len);
    let r = &q.reqs[slot as usize];
    let received = (r.capsule_len as usize).saturating_sub(SQE_LEN);
    let off = c.offset as usize;
    if off
        .checked_add(c.len as usize)
        .map_or(true, |end| end > received)
    {
        return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
    }
    let dst = r.data.region();
    if SQE_LEN + off + c.len as usize > capsule.len || len as usize > dst.len {
        return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
    }
    // SAFETY: both ranges lie inside this queue's parcel (checked against the capsule and data
    // slot sizes above), which the arena keeps mapped while the queue lives. Neither is in use
    // by any other operation right now: the capsule's buffer is given back to the transport
    // only once this request is prepared, and the data slot belongs to this request alone,
    // which has no transport or backend operation in flight yet. They do not overlap (the
    // capsule and data areas of a parcel are disjoint).
    unsafe {
        std::ptr::copy_nonoverlapping(
            capsule.as_ptr().add(SQE_LEN + off),
            dst.as_ptr(),
            len as usize,
        );
    }
    Ok(())
}
