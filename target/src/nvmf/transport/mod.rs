//! The seam between the NVMe-oF core and the transports that carry it (SPDK's
//! `spdk_nvmf_transport_ops`, nvmet's `nvmet_fabrics_ops`).
//!
//! Three traits, and nothing else of a transport is named by the core:
//! - [`Transport`]: one per transport the target serves: starts listeners, makes each
//!   worker's poll group.
//! - [`PollGroup`]: one transport's queues on one worker: the worker hands it new
//!   connections, polls it for events, routes backend completions to it, runs its timers,
//!   and sleeps on it.
//! - [`QueueTransport`]: the transport's state of one queue. The core
//!   ([`super::request_flow`], the command sets, controllers, subsystems) drives every queue
//!   through it: it reads a command capsule, gives the capsule's buffer back, has the
//!   transport map a command's data pointer and fetch host data, posts responses (with any
//!   controller-to-host data), and tears the queue down.
//!
//! A transport is a folder here: [`rdma`], [`tcp`], and [`loopback`] (hosts in the target's
//! own process).

use std::any::Any;
use std::fmt::Display;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdmablk::nvme::identify::sgls;
use rdmablk::nvme::{IdentifyController, Sqe, Status, SQE_LEN};

use super::commands::data_phase::{Next, SglFit};
use super::queue::Queue;
use super::request::{DataDir, Tag};
use super::request_flow::Ctx;
use super::{Shared, TargetError};
use crate::backend::Completion;
use crate::config::{self, ListenerConfig};

pub mod handoff;
pub mod loopback;
pub mod rdma;
pub mod tcp;

/// What a transport does for one queue. Each function takes the whole queue (the core's
/// state and the transport's own, `q.xport`), so the transport can use the queue's window and
/// request contexts; the core calls them and nothing else of the transport.
pub trait QueueTransport: Sized {
    /// Why an operation could not be started (the core closes the queue and logs it).
    type Error: Display;
    /// What [`QueueTransport::outstanding`] reports (for log lines).
    type Outstanding: Display;

    /// How long a target-initiated teardown waits for [`QueueTransport::revoke`] to finish
    /// before it disconnects anyway.
    const REVOKE_TIMEOUT: Duration;
    /// How long a disconnected queue waits for the transport's operations to finish
    /// ([`QueueTransport::drained`]) before it is dropped anyway (backend I/O is always
    /// waited for).
    const DRAIN_TIMEOUT: Duration;

    /// Whether the host's data is reached by keyed SGLs (NVMe/RDMA, loop) rather than moved
    /// in the transport's own PDUs (NVMe/TCP).
    const KEYED_SGLS: bool;

    /// Sets the transport's fields of Identify Controller (SGLS, IOCCSZ, IORCSZ, ICDOFF,
    /// MSDBD) for I/O queues that take `icd_bytes` of in-capsule data: keyed SGLs if the
    /// transport has them, in-capsule data at offset 0 when there is any, one descriptor,
    /// the capsule's data right after the SQE, responses of one CQE.
    fn controller_fields(id: &mut IdentifyController, icd_bytes: u32) {
        id.sgls = sgls::SUPPORTED;
        if Self::KEYED_SGLS {
            id.sgls |= sgls::KEYED;
        }
        if icd_bytes > 0 {
            id.sgls |= sgls::OFFSET;
        }
        id.ioccsz = (SQE_LEN as u32 + icd_bytes) / 16;
        id.iorcsz = 1;
        id.icdoff = 0;
        id.msdbd = 1;
    }

    /// The command of the capsule `len` bytes long in receive slot `recv` (at least an SQE:
    /// the core checked), or None if it cannot be read (the core closes the queue).
    fn read_capsule(q: &Queue<Self>, recv: u32, len: u32) -> Option<Sqe> {
        q.capsule_sqe(recv, len)
    }

    /// The capsule in receive slot `recv` is consumed (command and in-capsule data copied):
    /// the transport may reuse the buffer.
    fn release_capsule(q: &mut Queue<Self>, recv: u32) -> Result<(), Self::Error>;

    /// Whether the capsule in receive slot `recv` arrived intact: an error is the status its
    /// command completes with at once, before it is checked, and nothing of it runs (NVMe/TCP:
    /// a capsule whose data digest did not match completes with Transient Transport Error).
    /// By default capsules arrive intact.
    fn capsule_status(_q: &mut Queue<Self>, _recv: u32) -> Result<(), Status> {
        Ok(())
    }

    /// The data slot of request `slot`, which carries command `cid` (transports whose host
    /// places data by command ID, like RDMA push writes, tie the two; by default the
    /// request's own).
    fn data_slot(_q: &Queue<Self>, slot: u32, _cid: u16) -> u32 {
        slot
    }

    /// Claims request `slot`'s data slot for its command; an error is the status the
    /// command completes with (another command in flight holds the slot). By default every
    /// request has its own.
    fn claim_data_slot(_q: &mut Queue<Self>, _slot: u32) -> Result<(), Status> {
        Ok(())
    }

    /// Gives back request `slot`'s data slot, if it holds one: once its response is posted
    /// or it is freed without one.
    fn release_data_slot(_q: &mut Queue<Self>, _slot: u32) {}

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
    /// before it is told. True if that is under way (the transport disconnects when done);
    /// by default there is nothing to revoke.
    fn revoke(_q: &mut Queue<Self>) -> bool {
        false
    }

    /// Disconnects: from here every operation of the transport completes or is flushed.
    fn disconnect(q: &mut Queue<Self>);

    /// Whether every operation of the transport on this queue has finished.
    fn drained(q: &Queue<Self>) -> bool;

    /// The transport's operations in flight, for log lines.
    fn outstanding(q: &Queue<Self>) -> Self::Outstanding;

    /// Called every housekeeping tick: whether responses have been waiting to leave with no
    /// progress for longer than `limit_ms` (0: never): the host takes nothing.
    fn send_stalled(q: &mut Queue<Self>, limit_ms: u32) -> bool;
}

/// A transport the target serves hosts over: it starts listeners and gives each worker a
/// poll group.
pub trait Transport: Send + Sync + std::fmt::Debug {
    /// Which `[[listener]] transport` it serves.
    fn kind(&self) -> config::Transport;

    /// Starts accepting connections for listener `cfg` (number `index` in the configuration;
    /// `id` for the target's life); its connections go to the workers' poll groups of this
    /// transport as [`super::worker::WorkerMsg::Handover`]. Accepting ends when `stop` is set or
    /// the target stops. Returns the bound address and the accepting thread.
    fn listen(
        &self,
        shared: &Arc<Shared>,
        cfg: &ListenerConfig,
        index: usize,
        id: u64,
        stop: Arc<AtomicBool>,
    ) -> Result<(SocketAddr, JoinHandle<()>), TargetError>;

    /// This transport's poll group on worker `worker` (made on the worker's thread, before
    /// the target reports itself started).
    fn poll_group(&self, worker: usize) -> Result<Box<dyn PollGroup>, TargetError>;
}

/// What a poll group's wait found ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// The transport has events (poll it).
    pub events: bool,
    /// The caller's other descriptor is readable.
    pub other: bool,
}

/// One transport's queues on one worker, and the worker's way into them. Implemented by a
/// transport with a [`super::worker::queues::Queues`] for what every transport shares.
pub trait PollGroup {
    /// Takes a queue on its way in (the transport's hand-over type: a socket, a connection
    /// request) that this transport's listener sent the worker.
    fn add(&mut self, handover: Box<dyn Any + Send>, ctx: &mut Ctx<'_>);

    /// Refuses a hand-over that arrives while the target stops (frees what it holds).
    fn refuse(&mut self, handover: Box<dyn Any + Send>, shared: &Shared);

    /// A pass of the worker's loop begins: what the group sends until
    /// [`PollGroup::end_pass`] may leave together then (one write for many responses).
    fn begin_pass(&mut self);

    /// The pass ends (before the worker sleeps or runs its timers): send what was held, and
    /// tell the core of responses that left (`on_sent`). True if that started more work (a
    /// capsule that waited for a free request).
    fn end_pass(&mut self, ctx: &mut Ctx<'_>) -> bool;

    /// Takes the transport's events (commands in, data in, responses sent, closes) and
    /// drives their requests. True if there were any.
    fn poll(&mut self, ctx: &mut Ctx<'_>) -> bool;

    /// A backend operation of one of its queues' requests finished.
    fn on_backend(&mut self, tag: Tag, c: &Completion, ctx: &mut Ctx<'_>);

    /// A request that waited for backend room may go on.
    fn resume(&mut self, tag: Tag, ctx: &mut Ctx<'_>);

    /// Every few milliseconds: held events, connection events, timers, drained queues.
    fn housekeeping(&mut self, ctx: &mut Ctx<'_>);

    /// Listener `id` was removed: close the queues that came through it.
    fn close_listener(&mut self, id: u64, shared: &Shared);

    /// One step of the target's shutdown; true once it holds no queue.
    fn shutdown_step(&mut self, first: bool, grace_over: bool, ctx: &mut Ctx<'_>) -> bool;

    /// Arms the transport's wake-up before the worker sleeps, then takes what arrived since
    /// the last poll (the race between the two). None if it cannot be armed (the worker
    /// naps instead); Some(true) if events were taken (the worker does not sleep).
    fn arm(&mut self, ctx: &mut Ctx<'_>) -> Option<bool>;

    /// Sleeps until the armed transport has events, `other` is readable, or `timeout`
    /// passes; the transport's event is consumed (the next poll takes its work). None if the
    /// wait failed.
    fn wait(&mut self, other: Option<RawFd>, timeout: Duration) -> Option<Ready>;

    /// A descriptor that is readable while the group has events (level-triggered), for a
    /// worker with several groups: it sleeps in the first group's `wait` with the others'
    /// descriptors in its `other`. None: this group can only be the one that waits.
    fn wake_fd(&self) -> Option<RawFd> {
        None
    }
}
