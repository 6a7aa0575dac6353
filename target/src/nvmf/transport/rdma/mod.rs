//! NVMe/RDMA: the transport over the fabric layer (`rdmablk::fabric`: libibverbs/librdmacm,
//! or the userspace soft provider). A queue is a reliable-connected QP whose receives take
//! command capsules into the queue's parcel; data moves by RDMA READ and WRITE against the
//! host's keyed SGLs, in the capsule, or by the host's push writes into a memory window.
//!
//! - this file: [`RdmaTransport`]: the device every RDMA listener is on, its protection
//!   domain (the arena is registered on it), each worker's completion queue.
//! - [`listener`]: connection requests: CM private data checks, queue sizing, the QP on a
//!   worker's CQ, CM rejects.
//! - [`group`]: a worker's RDMA queues: work completions, CM events, sleeping on the CQ.
//! - [`admit`]: a new queue on its worker: receives, push window, accept, bind.
//! - [`queue`]: the per-queue state ([`queue::RdmaXport`]) and its
//!   [`super::QueueTransport`] implementation: receives, reads, responses, teardown.
//! - [`data`]: mapping a command's data pointer (keyed, in-capsule, pushed).
//! - [`srq`]: a worker's shared receive queue and its capsule buffers.
//! - [`cm_watch`]: which queues have connection-manager events (one epoll set per worker).
//! - [`cqs`]: each worker's completion queues (more made as queues arrive) and the entries
//!   its queues reserve in them.
//! - [`wr_id`]: work-request IDs.

pub mod admit;
pub mod cm_watch;
pub mod cqs;
pub mod data;
pub mod group;
pub mod listener;
pub mod queue;
pub mod srq;
pub mod wr_id;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use rdmablk::fabric::{Cq, Device, DeviceAttr, FabricError, Pd, ProviderKind};
use rdmablk::nvme::discovery::{trtype, DiscoveryLogEntry};

use super::{
    CompletionQueues, DiscoveryFields, PollGroup, ReceiveBuffers, Transport, TransportKind, Variant,
};
use crate::arena::Arena;
use crate::config::{self, Config, ConfigError, ListenerConfig, Provider};
use crate::nvmf::{Shared, TargetError};

/// Send work requests one request may have outstanding (RDMA WRITE + response SEND).
pub const SEND_WRS_PER_REQUEST: u32 = 2;

/// Why the RDMA transport could not start.
#[derive(Debug, thiserror::Error)]
pub enum RdmaError {
    #[error("listener[{index}] ({provider} {addr}): cannot open the RDMA device: {source}")]
    OpenDevice {
        index: usize,
        provider: ProviderKind,
        addr: std::net::IpAddr,
        #[source]
        source: FabricError,
    },
    #[error(
        "listener[{index}] is on device {device} but listener[0] is on {first}: one target \
         serves one RDMA device (run a target per device)"
    )]
    SecondDevice {
        index: usize,
        device: String,
        first: String,
    },
    #[error("device {device}: {op}: {source}")]
    Device {
        device: String,
        op: &'static str,
        #[source]
        source: FabricError,
    },
    #[error("listener[{index}]: cannot listen on {addr}: {source}")]
    Listen {
        index: usize,
        addr: SocketAddr,
        #[source]
        source: FabricError,
    },
}

impl From<RdmaError> for TargetError {
    fn from(e: RdmaError) -> TargetError {
        TargetError::Transport(Box::new(e))
    }
}

/// What the RDMA listeners and poll groups share.
#[derive(Debug)]
pub struct RdmaDevice {
    pub device: Device,
    pub pd: Pd,
    pub attr: DeviceAttr,
    /// Whether the device has type-2 memory windows (else push-write connections get a
    /// per-connection memory region).
    pub has_mw: bool,
    /// The arena region's local key.
    pub lkey: u32,
    /// Each worker's completion queues and the entries reserved in them.
    pub cqs: cqs::WorkerCqs,
    /// Capsule buffers of each worker's shared receive queue; 0: a receive queue per
    /// connection (`arena.receive_buffers` 0, or a device without SRQs).
    pub receive_buffers: u32,
    /// Bytes of one capsule buffer.
    pub capsule_slot_bytes: usize,
    /// Per worker: its SRQ, made when its first queue connects (None: it could not be made,
    /// the worker's queues get receive queues of their own).
    pub srqs: Vec<OnceLock<Option<Arc<srq::SrqWorker>>>>,
}

impl RdmaDevice {
    /// Worker `w`'s shared receive queue, made (buffers carved from `arena` and posted) on
    /// first use; None in per-connection mode or if it cannot be made (logged once).
    pub fn srq(&self, w: usize, arena: &Arc<Arena>) -> Option<Arc<srq::SrqWorker>> {
        if self.receive_buffers == 0 {
            return None;
        }
        self.srqs[w]
            .get_or_init(|| {
                let made = srq::SrqWorker::new(
                    &self.pd,
                    arena,
                    self.lkey,
                    self.receive_buffers,
                    self.capsule_slot_bytes,
                );
                match made {
                    Ok(s) => {
                        tracing::info!(
                            worker = w,
                            buffers = self.receive_buffers,
                            bytes = self.receive_buffers as usize * self.capsule_slot_bytes,
                            "shared receive queue ready"
                        );
                        Some(Arc::new(s))
                    }
                    Err(e) => {
                        tracing::warn!(worker = w, error = %e,
                            "no shared receive queue: this worker's RDMA queues get receive \
                             queues of their own");
                        None
                    }
                }
            })
            .clone()
    }

    /// Worker `w`'s SRQ if it has one already.
    pub fn srq_made(&self, w: usize) -> Option<Arc<srq::SrqWorker>> {
        self.srqs[w].get().cloned().flatten()
    }

    /// Reserves `cqes` entries in one of worker `w`'s CQs (made if none has room); None if
    /// the worker may have no more CQs.
    pub fn reserve_cq(&self, w: usize, cqes: u32) -> Option<(cqs::CqShare, Cq)> {
        self.cqs.reserve(&self.device, w, cqes)
    }

    /// Gives back what `share` reserved of worker `w`'s CQs.
    pub fn release_cq(&self, w: usize, share: cqs::CqShare) {
        self.cqs.release(w, share);
    }
}

/// The RDMA transport of a target.
#[derive(Debug)]
pub struct RdmaTransport(Arc<RdmaDevice>);

impl RdmaTransport {
    /// Opens the device the listeners are on, checks the configuration against it, and
    /// registers `arena` on it (one memory region, no remote access).
    pub fn open(cfg: &Config, arena: Arena) -> Result<(RdmaTransport, Arena), TargetError> {
        let device = open_device(cfg)?;
        let dev_err = |op, source| RdmaError::Device {
            device: device.name(),
            op,
            source,
        };
        let attr = device.attr().map_err(|e| dev_err("query attributes", e))?;
        cfg.check_device(&attr, SEND_WRS_PER_REQUEST)?;
        let pd = device
            .alloc_pd()
            .map_err(|e| dev_err("allocate a protection domain", e))?;
        let arena = arena.register(&pd)?;
        let has_mw = match pd.alloc_mw() {
            Ok(_) => true,
            Err(FabricError::Unsupported { .. }) => {
                tracing::warn!(
                    device = %device.name(),
                    "device has no memory windows: push-write connections get a \
                     per-connection memory region instead"
                );
                false
            }
            Err(e) => return Err(dev_err("allocate a memory window", e).into()),
        };
        let workers = cfg.target.worker_threads.max(1) as usize;
        let receive_buffers = receive_buffers(cfg, &attr, workers);
        let (cq_capacity, cq_count) = cq_sizes(cfg, &attr, workers, receive_buffers);
        let cqs = cqs::WorkerCqs::new(&device, workers, cq_capacity, receive_buffers, cq_count)
            .map_err(|e| dev_err("create a completion queue", e))?;
        let lkey = arena.lkey().expect("the arena was just registered");
        let dev = RdmaDevice {
            device,
            pd,
            attr,
            has_mw,
            lkey,
            cqs,
            receive_buffers,
            capsule_slot_bytes: cfg.max_parcel_layout().capsule_slot_bytes,
            srqs: (0..workers).map(|_| OnceLock::new()).collect(),
        };
        Ok((RdmaTransport(Arc::new(dev)), arena))
    }
}

/// NVMe/RDMA in the transport table ([`super::TRANSPORTS`]).
pub struct Rdma;

impl TransportKind for Rdma {
    fn name(&self) -> &'static str {
        "rdma"
    }

    fn check_listener(&self, l: &ListenerConfig) -> Result<(), (&'static str, String)> {
        match l.provider {
            None => Err((
                "provider",
                "an rdma listener needs a provider: \"verbs\" (an RNIC, rxe or siw) or \
                 \"soft\" (rdmablk's userspace provider)"
                    .to_owned(),
            )),
            Some(_) => super::check_no_tls(l),
        }
    }

    fn check_referral(&self) -> Result<(), String> {
        Ok(())
    }

    /// The listener's provider; soft is rdmablk's own.
    fn variant(&self, l: &ListenerConfig) -> Variant {
        Variant {
            name: l.provider.map_or("", Provider::as_str),
            rdmablk_only: l.provider == Some(Provider::Soft),
        }
    }

    /// RDMA's TRTYPE and TSAS (reliable connected, no provider type, RDMA CM).
    fn discovery_fields(&self, addr: IpAddr) -> DiscoveryFields {
        DiscoveryFields::ip(trtype::RDMA, addr, DiscoveryLogEntry::rdma_tsas())
    }

    fn open(&self, cfg: &Config, arena: Arena) -> Result<(Arc<dyn Transport>, Arena), TargetError> {
        let (rdma, registered) = RdmaTransport::open(cfg, arena)?;
        Ok((Arc::new(rdma), registered))
    }
}

impl Transport for RdmaTransport {
    fn kind(&self) -> config::Transport {
        config::Transport::of(&Rdma)
    }

    fn listen(
        &self,
        shared: &Arc<Shared>,
        cfg: &ListenerConfig,
        index: usize,
        id: u64,
        stop: Arc<AtomicBool>,
    ) -> Result<(SocketAddr, JoinHandle<()>), TargetError> {
        listener::start(&self.0, shared, cfg, index, id, stop)
    }

    fn poll_group(&self, worker: usize) -> Result<Box<dyn PollGroup>, TargetError> {
        Ok(Box::new(group::RdmaGroup::new(worker, Arc::clone(&self.0))))
    }

    fn receive_buffers(&self) -> Vec<ReceiveBuffers> {
        (0..self.0.srqs.len())
            .filter_map(|w| self.0.srq_made(w).map(|s| (w, s)))
            .map(|(worker, s)| ReceiveBuffers {
                worker,
                count: s.count(),
                posted: s.posted(),
                low_total: s.low_total(),
                stale_total: s.stale_total(),
            })
            .collect()
    }

    fn completion_queues(&self) -> Vec<CompletionQueues> {
        let cqs = &self.0.cqs;
        (0..cqs.workers())
            .map(|worker| {
                let reserved = cqs.reserved(worker);
                CompletionQueues {
                    worker,
                    count: reserved.len(),
                    entries: cqs.capacity(),
                    reserved: reserved.iter().map(|&r| u64::from(r)).sum(),
                }
            })
            .collect()
    }
}

/// The fabric provider of listener `l`.
pub fn provider_kind(l: &ListenerConfig) -> ProviderKind {
    l.rdma_provider().into()
}

fn open_device(cfg: &Config) -> Result<Device, TargetError> {
    let mut first: Option<Device> = None;
    let rdma = cfg
        .listeners
        .iter()
        .enumerate()
        .filter(|(_, l)| l.transport == config::Transport::of(&Rdma));
    for (index, l) in rdma {
        let provider = provider_kind(l);
        let d =
            Device::open_for_addr(provider, l.address).map_err(|source| RdmaError::OpenDevice {
                index,
                provider,
                addr: l.address,
                source,
            })?;
        match &first {
            None => first = Some(d),
            Some(f) if f.provider() == d.provider() && f.name() == d.name() => {}
            Some(f) => {
                return Err(RdmaError::SecondDevice {
                    index,
                    device: format!("{}:{}", d.provider(), d.name()),
                    first: format!("{}:{}", f.provider(), f.name()),
                }
                .into())
            }
        }
    }
    // Opened only when an rdma listener is configured.
    first.ok_or_else(|| {
        TargetError::Config(ConfigError::Invalid {
            path: None,
            problems: vec![crate::config::Problem {
                key: "listener".into(),
                message: "no rdma listener is configured".into(),
            }],
        })
    })
}

/// CQ entries one connection of `depth` may need: its receives, and per request at most a
/// signalled READ or a WRITE + SEND pair, plus the bind and invalidate of its memory window.
pub fn cqes_per_connection(depth: u32) -> u32 {
    depth + SEND_WRS_PER_REQUEST * depth + 2
}

/// `arena.receive_buffers` as the device allows: 0 (receive queues per connection) without
/// enough SRQs, clamped to its SRQ depth.
fn receive_buffers(cfg: &Config, attr: &DeviceAttr, workers: usize) -> u32 {
    let want = cfg.arena.receive_buffers;
    if want == 0 {
        return 0;
    }
    if (attr.max_srq as usize) < workers || attr.max_srq_wr == 0 || attr.max_srq_sge == 0 {
        tracing::info!(device = %attr.name, max_srq = attr.max_srq, workers,
            "the device has no shared receive queue for every worker: each RDMA connection \
             gets a receive queue of its own");
        return 0;
    }
    if want > attr.max_srq_wr {
        tracing::warn!(device = %attr.name, receive_buffers = want, max_srq_wr = attr.max_srq_wr,
            "arena.receive_buffers is over the device's SRQ depth: clamped");
        return attr.max_srq_wr;
    }
    want
}

/// Per worker: the entries of each CQ and how many CQs it may have. Its CQs together fit
/// every connection's share (which still counts its receives, so they also fit a fall back to
/// per-connection receives), each CQ keeping room for all of the SRQ's receives (they complete
/// on the CQ of the QP that took them); one CQ where the device's `max_cqe` allows, more (made
/// as queues arrive, up to the device's `max_cq` over the workers) where it does not.
fn cq_sizes(cfg: &Config, attr: &DeviceAttr, workers: usize, receive_buffers: u32) -> (u32, usize) {
    let per_worker = cfg.limits.max_connections.div_ceil(workers as u32).max(1);
    let want = u64::from(per_worker) * u64::from(cqes_per_connection(cfg.limits.max_queue_depth))
        + u64::from(receive_buffers);
    let max = if attr.max_cqe == 0 {
        u32::MAX
    } else {
        attr.max_cqe
    };
    let capacity = want.min(u64::from(max)).min(1 << 20) as u32;
    let reservable = u64::from(capacity.saturating_sub(receive_buffers)).max(1);
    let connections = want - u64::from(receive_buffers);
    let mut count = connections.div_ceil(reservable).max(1) as usize;
    if attr.max_cq > 0 {
        count = count.min((attr.max_cq as usize / workers).max(1));
    }
    (capacity, count)
}
