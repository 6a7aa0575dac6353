//! Wire formats that belong to one NVMe-oF transport, not to NVMe-oF itself: what crosses
//! the wire beside the capsules (connection set-up, transport PDUs) and what only that
//! transport's queues carry. The transport-neutral formats (SQE, CQE, SGL descriptors, Connect,
//! log pages) stay in the modules of [`super`].
//!
//! - [`rdma`]: NVMe/RDMA's RDMA CM private data (request, accept, reject) and rdmablk's
//!   push-write extension negotiated in it.
//! - [`tcp`]: NVMe/TCP's PDUs, their digests and the checks of a received PDU header;
//!   [`tcp::host_rx`] checks a controller's PDU stream against the host's commands.
//! - [`loopback`]: the loop transport's in-memory channel (target and host in one process).

pub mod loopback;
pub mod rdma;
pub mod tcp;
