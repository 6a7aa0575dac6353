//! NVMe/RDMA: the transport over the fabric layer (`rdmablk::fabric`: libibverbs/librdmacm,
//! or the userspace soft provider). A queue is a reliable-connected QP whose receives take
//! command capsules into the queue's window; data moves by RDMA READ and WRITE against the
//! host's keyed SGLs, in the capsule, or by the host's push writes into a memory window.
//!
//! - [`queue`]: the per-queue state ([`queue::RdmaQueue`]) and its
//!   [`super::QueueTransport`] implementation: receives, reads, responses, teardown.
//! - [`data`]: mapping a command's data pointer (keyed, in-capsule, pushed).
//! - [`wr_id`]: work-request IDs.

pub mod data;
pub mod queue;
pub mod wr_id;
