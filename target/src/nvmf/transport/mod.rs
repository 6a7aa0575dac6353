//! The seam between the NVMe-oF core and the transports that carry it (SPDK's
//! `spdk_nvmf_transport_ops`, nvmet's `nvmet_fabrics_ops`).
//!
//! The core ([`super::request_flow`], the command sets, controllers, subsystems) drives every
//! queue through [`QueueTransport`]: it reads a command capsule, gives the capsule's buffer
//! back, has the transport map a command's data pointer and fetch host data, posts responses
//! (with any controller-to-host data), and tears the queue down. A transport is a folder here
//! ([`rdma`]) that implements it for its per-queue state, and nothing of it is named by the
//! core.

use std::fmt::Display;

use rdmablk::nvme::{Sqe, Status};

use super::data_phase::{Next, SglFit};
use super::queue::Queue;
use super::request::DataDir;
use super::Shared;

pub mod rdma;

/// What a transport does for one queue. Each function takes the whole queue (the core's
/// state and the transport's own, `q.xport`), so the transport can use the queue's window and
/// request contexts; the core calls them and nothing else of the transport.
pub trait QueueTransport: Sized {
    /// Why an operation could not be started (the core closes the queue and logs it).
    type Error: Display;

    /// The command of the capsule `len` bytes long in receive slot `recv` (at least an SQE:
    /// the core checked), or None if it cannot be read (the core closes the queue).
    fn read_capsule(q: &Queue<Self>, recv: u32, len: u32) -> Option<Sqe>;

    /// The capsule in receive slot `recv` is consumed (command and in-capsule data copied):
    /// the transport may reuse the buffer.
    fn release_capsule(q: &mut Queue<Self>, recv: u32) -> Result<(), Self::Error>;

    /// The data slot of request `slot`, which carries command `cid` (transports whose host
    /// places data by command ID, like RDMA push writes, tie the two).
    fn data_slot(q: &Queue<Self>, slot: u32, cid: u16) -> u32;

    /// Claims request `slot`'s data slot for its command; an error is the status the
    /// command completes with (another command in flight holds the slot).
    fn claim_data_slot(q: &mut Queue<Self>, slot: u32) -> Result<(), Status>;

    /// Gives back request `slot`'s data slot, if it holds one: once its response is posted
    /// or it is freed without one.
    fn release_data_slot(q: &mut Queue<Self>, slot: u32);

    /// Maps request `slot`'s data pointer for `len` bytes moving `dir`, whose length must fit
    /// `len` as `fit` says, and records the data phase in the request (`dir`, `data_len`,
    /// `sgl`) once every check passed. Data the transport has at hand (in-capsule) is copied
    /// into the data slot; [`Next::Fetch`] asks for [`QueueTransport::fetch`].
    fn map_data(
        q: &mut Queue<Self>,
        slot: u32,
        dir: DataDir,
        len: u32,
        fit: SglFit,
        shared: &Shared,
    ) -> Result<Next, Status>;

    /// Starts fetching request `slot`'s host data into its data slot (the request is in
    /// `AwaitingData`); the transport calls back into the core's `execute` when it is there.
    fn fetch(q: &mut Queue<Self>, slot: u32, shared: &Shared);

    /// Posts request `slot`'s completion (status, dw0, dw1 in the request) with its
    /// controller-to-host data, if any. The core calls `on_sent` once the transport reports
    /// it sent.
    fn post_response(q: &mut Queue<Self>, slot: u32) -> Result<(), Self::Error>;

    /// Target-initiated teardown of a live queue: revokes what the host may still reach
    /// before it is told. True if that is under way (the transport disconnects when done).
    fn revoke(q: &mut Queue<Self>) -> bool;

    /// Disconnects: from here every operation of the transport completes or is flushed.
    fn disconnect(q: &mut Queue<Self>);

    /// Whether every operation of the transport on this queue has finished.
    fn drained(q: &Queue<Self>) -> bool;
}
