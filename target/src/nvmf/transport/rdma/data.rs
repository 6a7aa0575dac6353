//! How an NVMe/RDMA command's data pointer maps to its data: a keyed SGL (fetched by RDMA
//! READ, or written by RDMA WRITE before the response), in-capsule data (copied from the
//! receive slot), or a push-write slot the host already wrote. The Transport SGL Data Block
//! (0x5A) is NVMe/TCP's and refused here, as nvmet-rdma and SPDK's rdma.c do.

use rdmablk::nvme::transport::rdma::PushedSgl;
use rdmablk::nvme::{Sgl, SglLimits, Status};

use super::queue::RdmaQueue;
use crate::nvmf::commands::data_phase::{check_sgl, Next, SglFit};
use crate::nvmf::request::DataDir;
use crate::nvmf::Shared;

/// [`crate::nvmf::transport::QueueTransport::map_data`] for RDMA.
pub fn map_data(
    q: &mut RdmaQueue,
    slot: u32,
    dir: DataDir,
    len: u32,
    fit: SglFit,
    shared: &Shared,
) -> Result<Next, Status> {
    let max_transfer = shared.fixed.limits.max_io_size;
    let icd_bytes = q.icd_bytes;
    let push = q.xport.push;
    let r = &mut q.reqs[slot as usize];
    if dir == DataDir::None {
        // A keyed SGL of no length may still ask for its key to be invalidated.
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
        p.check(&w, u64::from(r.push_slot))?;
        if !fit.fits(p.len, len) || p.len > max_transfer {
            return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
        }
        (r.dir, r.data_len) = (dir, len);
        return Ok(Next::Execute);
    }
    let limits = SglLimits {
        in_capsule_bytes: icd_bytes,
        max_transfer_bytes: max_transfer,
    };
    // NVMe/RDMA moves data by keyed SGLs or in the capsule; the transport data block is
    // NVMe/TCP's (nvmet-rdma and SPDK's rdma.c answer it as an unknown type too).
    let foreign = |s: &Sgl| matches!(s, Sgl::Transport(_));
    let sgl = check_sgl(q, slot, dir, len, fit, &limits, foreign)?;
    let r = &mut q.reqs[slot as usize];
    (r.dir, r.data_len) = (dir, len);
    match sgl {
        Sgl::Keyed(_) => {
            r.sgl = Some(sgl);
            Ok(if h2c { Next::Fetch } else { Next::Execute })
        }
        _ => Ok(Next::Execute), // in-capsule data is in the data slot now
    }
}
