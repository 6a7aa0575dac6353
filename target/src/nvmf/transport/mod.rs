//! The seam between the NVMe-oF core and the transports that carry it (SPDK's
//! `spdk_nvmf_transport_ops`, nvmet's `nvmet_fabrics_ops`).
//!
//! The transports the target can serve are the lines of one table, [`TRANSPORTS`] (nvmet's
//! `nvmet_register_transport`, SPDK's `SPDK_NVMF_TRANSPORT_REGISTER`): each is a
//! [`TransportKind`], which gives its name in the configuration, checks the listener keys that
//! are its own, gives its discovery log entries' fields and opens it. Configuration,
//! discovery and [`crate::nvmf::Target::start`] read the table, so a transport is its folder
//! here, its trait implementations and its line in the table.
//!
//! Four traits, and nothing else of a transport is named by the core:
//! - [`TransportKind`]: a transport before it runs: its line in [`TRANSPORTS`].
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
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdmablk::nvme::discovery::adrfam;
use rdmablk::nvme::identify::sgls;
use rdmablk::nvme::{IdentifyController, Sqe, Status, SQE_LEN};

use super::commands::data_phase::{Next, SglFit};
use super::queue::Queue;
use super::request::{DataDir, Tag};
use super::request_flow::Ctx;
use super::{Shared, TargetError};
use crate::arena::pool::DataBuf;
use crate::arena::{Arena, Region};
use crate::backend::Completion;
use crate::config::{self, Config, ListenerConfig};

pub mod handoff;
pub mod loopback;
pub mod rdma;
pub mod tcp;

/// Every transport the target can serve, one line each: what `[[listener]] transport`
/// accepts, in the order the target opens them (and so the order of each worker's poll
/// groups). RDMA comes first: its poll group has no wake descriptor
/// ([`PollGroup::wake_fd`]), so it must be the one a worker sleeps in.
pub static TRANSPORTS: &[&dyn TransportKind] = &[&rdma::Rdma, &tcp::Tcp, &loopback::Loop];

/// A transport before it runs: its line in [`TRANSPORTS`]. Every method is required, so a
/// transport that leaves one out does not compile.
pub trait TransportKind: Sync {
    /// Its name: the `[[listener]] transport` and `[[referral]] transport` value ("rdma").
    fn name(&self) -> &'static str;

    /// Checks the keys of listener `l` (one of this transport's) that only some transports
    /// have (`provider` is RDMA's): the key and what is wrong with it, naming the fix.
    fn check_listener(&self, l: &ListenerConfig) -> Result<(), (&'static str, String)>;

    /// Whether a `[[referral]]` may name this transport (another target's discovery service
    /// reached over it); the error says why not and what to use instead.
    fn check_referral(&self) -> Result<(), String>;

    /// The variant of this transport listener `l` speaks (RDMA: its provider).
    fn variant(&self, l: &ListenerConfig) -> Variant;

    /// The transport's fields of a Discovery Log Page entry (a port or a referral) at
    /// address `addr`.
    fn discovery_fields(&self, addr: IpAddr) -> DiscoveryFields;

    /// Opens the transport for configuration `cfg`, which has listeners of it (RDMA: the
    /// device, with `arena` registered on it); gives back the arena, registered or as it
    /// came.
    fn open(&self, cfg: &Config, arena: Arena) -> Result<(Arc<dyn Transport>, Arena), TargetError>;
}

/// How a host reaches a listener within its transport: the transport's own word for it (the
/// RDMA provider, "verbs" or "soft"; "" where a transport has one way), and whether only
/// rdmablk's own hosts speak it (the soft provider). `rdmablk-ctl status` reports it per
/// controller; discovery shows a host that came in on an rdmablk-only variant the listeners
/// of that variant only, and any other host every other listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub name: &'static str,
    pub rdmablk_only: bool,
}

impl Variant {
    /// The variant of a transport that has one way in, spoken by every host.
    pub const ONE: Variant = Variant {
        name: "",
        rdmablk_only: false,
    };

    /// Whether discovery lists a listener of this variant to a host that came in on `host`.
    pub fn shown_to(self, host: Variant) -> bool {
        if self.rdmablk_only || host.rdmablk_only {
            self == host
        } else {
            true
        }
    }
}

/// A transport's fields of a Discovery Log Page entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscoveryFields {
    /// TRTYPE.
    pub trtype: u8,
    /// ADRFAM.
    pub adrfam: u8,
    /// The transport-specific address subtype.
    pub tsas: [u8; 16],
}

impl DiscoveryFields {
    /// An entry of transport type `trtype` at IP address `addr` (ADRFAM from it).
    pub fn ip(trtype: u8, addr: IpAddr, tsas: [u8; 16]) -> DiscoveryFields {
        let adrfam = match addr {
            IpAddr::V4(_) => adrfam::IPV4,
            IpAddr::V6(_) => adrfam::IPV6,
        };
        DiscoveryFields {
            trtype,
            adrfam,
            tsas,
        }
    }
}

/// [`TransportKind::check_listener`] of a transport with no keys of its own: `provider`
/// belongs to RDMA.
pub fn check_no_provider(l: &ListenerConfig) -> Result<(), (&'static str, String)> {
    match l.provider {
        Some(_) => Err((
            "provider",
            format!(
                "provider is meaningful only under transport = \"rdma\" (remove it from \
                 this {} listener)",
                l.transport.as_str()
            ),
        )),
        None => Ok(()),
    }
}

/// For the listener checks of transports other than NVMe/TCP: TLS is NVMe/TCP's only.
pub fn check_no_tls(l: &ListenerConfig) -> Result<(), (&'static str, String)> {
    match l.tls {
        crate::config::TlsMode::None => Ok(()),
        _ => Err((
            "tls",
            format!(
                "tls is meaningful only under transport = \"tcp\" (remove it from this {} \
                 listener)",
                l.transport.as_str()
            ),
        )),
    }
}

/// Opens every transport of [`TRANSPORTS`] that `cfg` has listeners of, in the table's
/// order; gives back the arena (registered if a transport registered it).
pub fn open_served(
    cfg: &Config,
    mut arena: Arena,
) -> Result<(Vec<Arc<dyn Transport>>, Arena), TargetError> {
    let mut opened = Vec::new();
    for &kind in TRANSPORTS {
        if cfg
            .listeners
            .iter()
            .any(|l| l.transport.as_str() == kind.name())
        {
            let (transport, back) = kind.open(cfg, arena)?;
            arena = back;
            opened.push(transport);
        }
    }
    Ok((opened, arena))
}

/// What a transport does for one queue. Each function takes the whole queue (the core's
/// state and the transport's own, `q.xport`), so the transport can use the queue's parcel and
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
        q.capsule_sqe(Self::capsule_region(q, recv), len)
    }

    /// The buffer the capsule of receive `recv` arrived in: by default receive slot `recv` of
    /// the queue's parcel (NVMe/RDMA with a shared receive queue: buffer `recv` of the
    /// worker's SRQ).
    fn capsule_region(q: &Queue<Self>, recv: u32) -> Region {
        q.parcel.recv_slot(recv)
    }

    /// Whether a command whose data is not in its capsule gives the capsule back before it
    /// waits for a data-pool buffer (its SQE is in the request by then). NVMe/RDMA does (with
    /// a shared receive queue the worker's other hosts would wait on such buffers); NVMe/TCP
    /// does not, as [`QueueTransport::capsule_status`] reads the receive slot after the wait.
    const RELEASE_BEFORE_POOL_WAIT: bool = false;

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

    /// The queue's own data slot that command `cid` uses, where the host places data by
    /// command ID (RDMA push writes); by default None: the command's data buffer comes from
    /// the worker's data pool.
    fn push_slot(_q: &Queue<Self>, _cid: u16) -> Option<u32> {
        None
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

    /// Per worker, the receive buffers it shares between its queues (NVMe/RDMA's shared
    /// receive queues); empty for a transport without (the default).
    fn receive_buffers(&self) -> Vec<ReceiveBuffers> {
        Vec::new()
    }

    /// Per worker, the completion queues its queues share (NVMe/RDMA); empty for a transport
    /// without (the default).
    fn completion_queues(&self) -> Vec<CompletionQueues> {
        Vec::new()
    }

    /// Per worker, the data it read from the wire straight into command buffers rather than
    /// through a receive buffer (NVMe/TCP's placed H2CData); empty for a transport without
    /// (the default).
    fn data_placed(&self) -> Vec<DataPlaced> {
        Vec::new()
    }
}

/// A worker's data placed straight into command buffers (NVMe/TCP: H2CData of
/// `target.tcp_place_from` or more), for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataPlaced {
    pub worker: usize,
    /// Bytes read straight into a data buffer.
    pub bytes: u64,
    /// Data PDUs whose data was placed (counted once all of it is in).
    pub pdus: u64,
}

/// A worker's completion queues (NVMe/RDMA: more are made where the device's are small), for
/// metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletionQueues {
    pub worker: usize,
    /// CQs the worker has.
    pub count: usize,
    /// Entries of each.
    pub entries: u32,
    /// Entries its queues have reserved, over all its CQs.
    pub reserved: u64,
}

/// A worker's shared receive buffers (NVMe/RDMA: its SRQ), for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveBuffers {
    pub worker: usize,
    /// Buffers the worker has.
    pub count: u32,
    /// Buffers posted (ready for a host's command) now; the rest are held by queues.
    pub posted: u32,
    /// Receives that left fewer than `count / 8` posted (hosts may meet RNR waits).
    pub low_total: u64,
    /// Receives for a queue already closed (the buffer was reposted at once).
    pub stale_total: u64,
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

    /// Request `slot` of queue `key` waited for a data buffer of the worker's pool: here it
    /// is (`Queues::on_buffer`).
    fn on_buffer(&mut self, key: u32, slot: u32, data: DataBuf, ctx: &mut Ctx<'_>);

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

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(transport: &str, provider: Option<config::Provider>) -> ListenerConfig {
        ListenerConfig {
            transport: config::Transport::named(transport).expect(transport),
            provider,
            address: "127.0.0.1".parse().unwrap(),
            port: 4420,
            ana: Default::default(),
            tls: Default::default(),
        }
    }

    fn variant(transport: &str, provider: Option<config::Provider>) -> Variant {
        listener(transport, provider).variant()
    }

    /// The configuration finds a line by its name: no two lines share one.
    #[test]
    fn table_names_are_unique() {
        let mut names: Vec<&str> = TRANSPORTS.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TRANSPORTS.len(), "{names:?}");
    }

    /// Discovery: a host on the soft provider (rdmablk's own) is shown soft listeners only,
    /// and every other host every other listener.
    #[test]
    fn soft_listeners_are_shown_to_soft_hosts_only() {
        use config::Provider::{Soft, Verbs};
        let soft = variant("rdma", Some(Soft));
        let verbs = variant("rdma", Some(Verbs));
        let tcp = variant("tcp", None);
        let lp = variant("loop", None);
        assert_eq!((soft.name, verbs.name, tcp.name), ("soft", "verbs", ""));
        assert!(soft.shown_to(soft));
        for other in [verbs, tcp, lp] {
            assert!(!soft.shown_to(other) && !other.shown_to(soft), "{other:?}");
            for another in [verbs, tcp, lp] {
                assert!(other.shown_to(another), "{other:?} {another:?}");
            }
        }
    }

    /// `provider` is RDMA's key: required there, refused elsewhere.
    #[test]
    fn provider_belongs_to_rdma() {
        let check = |t, p| {
            let l = listener(t, p);
            l.transport
                .kind()
                .check_listener(&l)
                .map_err(|(key, _)| key)
        };
        assert_eq!(check("rdma", Some(config::Provider::Soft)), Ok(()));
        assert_eq!(check("rdma", None), Err("provider"));
        for t in ["tcp", "loop"] {
            assert_eq!(check(t, None), Ok(()));
            assert_eq!(check(t, Some(config::Provider::Verbs)), Err("provider"));
        }
    }
}
