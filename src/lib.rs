//! rdmablk: NVMe over Fabrics on RDMA and TCP.
//!
//! This crate is the bottom layer that the target and the initiator share:
//! - [`fabric`]: a safe, verbs-shaped RDMA API with two providers chosen at run time,
//!   real verbs (libibverbs/librdmacm) and a userspace software provider over TCP.
//! - [`nvme`]: the NVMe and NVMe-oF wire format, with its transports' (RDMA, NVMe/TCP, loop).
pub mod fabric;
pub mod nvme;
