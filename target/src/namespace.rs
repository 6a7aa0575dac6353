//! A namespace: a backend with its NVMe identity and its durability state.
//!
//! The namespace is where "never pretend data is durable" is enforced. When a flush, or a
//! write with FUA, fails, the namespace is *fenced*: from then on writes, write zeroes,
//! deallocates and flushes are refused with [`IoErrorKind::WritesFenced`] on every worker,
//! until the namespace is reopened (a new [`Namespace`] from its configuration, i.e. a target
//! restart or an explicit re-attach by an operator). Otherwise a later flush could succeed
//! after the page cache silently dropped the data the failed one was about (the Linux
//! writeback-error semantics), and the host would take lost data for durable. Reads continue.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::backend::{
    self, check_request, Backend, BackendError, BackendQueue, Completion, IoError, IoErrorKind,
    IoRequest, SubmitError,
};
use crate::config::{parse_uuid, NamespaceConfig};
use crate::ring::WorkerIo;

pub mod qos;
pub mod reservation;
pub mod visibility;

use qos::{HostQos, Qos};
use visibility::{Visibility, VisibilityCell};

/// One namespace of a subsystem. Share it between workers (`Arc<Namespace>`); each worker
/// opens its own [`NamespaceQueue`].
#[derive(Debug)]
pub struct Namespace {
    nsid: u32,
    /// Index of this namespace in the target's namespace table, and of each worker's queue to
    /// it ([`crate::nvmf::subsystems::ns_table::NamespaceTable`]).
    slot: usize,
    backend: Arc<dyn Backend>,
    read_only: bool,
    uuid: Option<[u8; 16]>,
    /// ANA group (1 unless configured).
    ana_group: u32,
    fenced: Arc<AtomicBool>,
    /// Capacity in blocks, shared with every worker's queue (grows on reload).
    capacity: Arc<AtomicU64>,
    /// The hosts that see it (changes on reload without reopening).
    visibility: VisibilityCell,
    /// Its QoS limits (the same), shared with every worker's queue.
    qos: Arc<Qos>,
    /// Its per-host limits.
    host_qos: Arc<HostQos>,
    /// Its reservations (kept while the namespace is open; a replaced namespace starts
    /// without).
    reservations: reservation::Reservations,
}

impl Namespace {
    /// Opens the namespace's backend as configured (the configuration was validated).
    pub fn open(cfg: &NamespaceConfig) -> Result<Namespace, BackendError> {
        let backend = backend::open(&cfg.backend, cfg.block_size, cfg.read_only)?;
        let mut ns = Namespace::new(cfg.nsid, backend, cfg.read_only);
        ns.uuid = cfg.uuid.as_deref().and_then(|u| parse_uuid(u).ok());
        ns.ana_group = cfg.ana_group;
        ns.visibility = VisibilityCell::new(Visibility::of(cfg.hosts.as_deref()));
        ns.qos.set(&cfg.qos);
        ns.host_qos.set(&cfg.host_qos);
        Ok(ns)
    }

    /// A namespace over an already opened backend.
    pub fn new(nsid: u32, backend: Arc<dyn Backend>, read_only: bool) -> Namespace {
        assert!(nsid != 0 && nsid != u32::MAX, "invalid NSID {nsid:#x}");
        let capacity = Arc::new(AtomicU64::new(backend.num_blocks()));
        Namespace {
            nsid,
            slot: 0,
            read_only: read_only || backend.read_only(),
            backend,
            uuid: None,
            ana_group: 1,
            fenced: Arc::new(AtomicBool::new(false)),
            capacity,
            visibility: VisibilityCell::default(),
            qos: Arc::default(),
            host_qos: Arc::default(),
            reservations: reservation::Reservations::default(),
        }
    }

    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// This namespace with table slot `slot`.
    pub fn with_slot(mut self, slot: usize) -> Namespace {
        self.slot = slot;
        self
    }

    pub fn slot(&self) -> usize {
        self.slot
    }

    pub fn block_size(&self) -> u32 {
        self.backend.block_size()
    }

    /// Capacity in blocks (NSZE / NCAP).
    pub fn num_blocks(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    /// Picks up a grown file or device: the new capacity if it grew (queues see it at once).
    pub fn refresh_capacity(&self) -> Result<Option<u64>, String> {
        let grown = self.backend.refresh_capacity()?;
        if let Some(blocks) = grown {
            self.capacity.store(blocks, Ordering::Release);
        }
        Ok(grown)
    }

    /// Write-protected (by configuration or because the backend was opened read-only).
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Whether deallocated blocks read as zeroes (Identify Namespace DLFEAT).
    pub fn deallocated_reads_zeroes(&self) -> bool {
        self.backend.deallocated_reads_zeroes()
    }

    /// The ANA group (Identify Namespace ANAGRPID).
    pub fn ana_group(&self) -> u32 {
        self.ana_group
    }

    /// Whether `hostnqn`'s controllers see this namespace (else it is inactive for them).
    pub fn visible_to(&self, hostnqn: &str) -> bool {
        self.visibility.allows(hostnqn)
    }

    /// Its reservations.
    pub fn reservations(&self) -> &reservation::Reservations {
        &self.reservations
    }

    /// Gives it `r` (persisted ones, opened from the state directory).
    pub fn set_reservations(&mut self, r: reservation::Reservations) {
        self.reservations = r;
    }

    /// Its QoS limits and what they held back.
    pub fn qos(&self) -> &Arc<Qos> {
        &self.qos
    }

    /// Its per-host limits (`host_qos`).
    pub fn host_qos(&self) -> &Arc<HostQos> {
        &self.host_qos
    }

    /// Who sees it, and the cell that changes it.
    pub fn visibility(&self) -> &VisibilityCell {
        &self.visibility
    }

    pub fn uuid(&self) -> Option<[u8; 16]> {
        self.uuid
    }

    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Whether a failed flush fenced off writes.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// The calling worker's queue to this namespace, for at most `depth` requests.
    pub fn open_queue(&self, io: &WorkerIo, depth: u32) -> Result<NamespaceQueue, BackendError> {
        Ok(NamespaceQueue {
            inner: self.backend.open_queue(io, depth)?,
            nsid: self.nsid,
            fenced: Arc::clone(&self.fenced),
            fence_on_failed_flush: !self.backend.completed_writes_are_durable(),
            read_only: self.read_only,
            block_size: self.block_size(),
            num_blocks: Arc::clone(&self.capacity),
        })
    }
}

/// A worker's queue to a namespace: range and permission checks, then the backend; watches
/// completions for failed durability points.
pub struct NamespaceQueue {
    inner: Box<dyn BackendQueue>,
    nsid: u32,
    fenced: Arc<AtomicBool>,
    /// False where completed writes are durable on their own (RBD): a failed flush then
    /// loses nothing that was acknowledged.
    fence_on_failed_flush: bool,
    read_only: bool,
    block_size: u32,
    num_blocks: Arc<AtomicU64>,
}

impl NamespaceQueue {
    /// See [`BackendQueue::submit`]. Refuses modifications of a read-only namespace
    /// (`ReadOnly`) and, once fenced, modifications and flushes (`WritesFenced`).
    pub fn submit(&mut self, req: IoRequest) -> Result<(), SubmitError> {
        let kind = req.op.kind();
        if kind.modifies() && self.read_only {
            return Err(IoError::new(IoErrorKind::ReadOnly).into());
        }
        if (kind.modifies() || kind.is_durability_point()) && self.fenced.load(Ordering::Acquire) {
            return Err(IoError::new(IoErrorKind::WritesFenced).into());
        }
        check_request(
            &req.op,
            self.block_size,
            self.num_blocks.load(Ordering::Acquire),
        )?;
        self.inner.submit(req)
    }

    /// See [`BackendQueue::poll`]. A failed flush or FUA write fences the namespace.
    pub fn poll(&mut self, out: &mut [Completion]) -> usize {
        let n = self.inner.poll(out);
        for c in &out[..n] {
            let Err(e) = c.result else { continue };
            if !self.fence_on_failed_flush {
                continue;
            }
            if c.op.is_durability_point() && !self.fenced.swap(true, Ordering::AcqRel) {
                tracing::error!(
                    nsid = self.nsid,
                    op = ?c.op,
                    error = %e,
                    "a flush failed: namespace refuses writes until it is reopened"
                );
            }
        }
        n
    }

    pub fn in_flight(&self) -> u32 {
        self.inner.in_flight()
    }
}
