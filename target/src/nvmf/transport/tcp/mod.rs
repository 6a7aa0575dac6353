//! NVMe/TCP (NVMe/TCP Transport Specification 1.0): what every Linux, VMware and Windows host
//! speaks without an RDMA NIC. A queue is one TCP connection: the host initializes it (ICReq,
//! ICResp), its first command is the Fabrics Connect that says which queue it is and how deep,
//! and from then on commands arrive as CapsuleCmd PDUs (with up to 8 KiB of in-capsule data
//! for admin and fabrics commands, IOCCSZ's worth for I/O), write data is asked for with R2T
//! and comes in H2CData, read data goes out in C2HData straight from the arena, and responses
//! in CapsuleResp. Wire formats: `rdmablk::nvme::transport::tcp`.
//!
//! - this file: [`TcpTransport`]: the listener threads (accept, hand the socket to a worker).
//! - [`group`]: a worker's connections: epoll, initialization, the Connect, every PDU.
//! - [`receive`]: what a queue's socket brings: each PDU checked and acted on (capsules,
//!   H2CData, the host's TermReq).
//! - [`queue`]: the per-queue state and its [`super::QueueTransport`] implementation.
//! - [`socket`]: a socket's receive buffer and its queue of PDUs to send.
//! - [`placed`]: a worker's counts of H2CData placed straight into data slots (metrics).
//! - [`fuzz`]: the fuzz target `tcp_queue`'s entry point: a poll group the harness drives.

#[doc(hidden)]
pub mod fuzz;
pub mod group;
pub mod placed;
pub mod queue;
pub mod receive;
pub mod socket;
pub mod tls;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rdmablk::nvme::discovery::trtype;

use super::handoff::Handoff;
use super::{
    check_no_provider, DataPlaced, DiscoveryFields, PollGroup, Transport, TransportKind, Variant,
};
use crate::arena::Arena;
use crate::config::{self, Config, ListenerConfig};
use crate::nvmf::{Shared, TargetError};
use placed::PlacedCounters;

/// In-capsule data bytes admin and fabrics commands may carry (the Linux host's
/// NVME_TCP_ADMIN_CCSZ; it sends the Connect data in the capsule on every queue).
pub const ADMIN_CAPSULE_DATA: u32 = 8192;
/// The most data the host may put in one H2CData PDU (ICResp MAXH2CDATA).
pub const MAXH2CDATA: u32 = 128 * 1024;
/// How often a listener looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// Why the NVMe/TCP transport could not start a listener.
#[derive(Debug, thiserror::Error)]
#[error("listener[{index}]: cannot listen on tcp {addr}: {source}")]
pub struct ListenError {
    index: usize,
    addr: SocketAddr,
    #[source]
    source: std::io::Error,
}

/// An accepted connection on its way to a worker.
pub struct TcpPending {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    /// The listener it came in through ([`crate::nvmf::runtime::port::Port::id`]).
    pub listener: u64,
    /// Over `limits.max_connections`: its Connect is answered Controller Busy (it counts in
    /// `Shared::refusing`, not `queues_open`).
    pub over_limit: bool,
    /// The listener's TLS (None: clear text only).
    pub tls: Option<tls::ListenTls>,
}

/// The NVMe/TCP transport of a target.
#[derive(Debug)]
pub struct TcpTransport {
    /// The deepest queue a host may connect (sizes each connection's queue of PDUs to send).
    pub max_queue_depth: u32,
    /// Each worker's placement counters, by worker (its poll group writes them).
    placed: Mutex<Vec<(usize, Arc<PlacedCounters>)>>,
}

/// NVMe/TCP in the transport table ([`super::TRANSPORTS`]).
pub struct Tcp;

impl TransportKind for Tcp {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn check_listener(&self, l: &ListenerConfig) -> Result<(), (&'static str, String)> {
        check_no_provider(l)
    }

    fn check_referral(&self) -> Result<(), String> {
        Ok(())
    }

    fn variant(&self, _l: &ListenerConfig) -> Variant {
        Variant::ONE
    }

    /// TCP's TRTYPE; TSAS all zero (no TLS).
    fn discovery_fields(&self, addr: IpAddr) -> DiscoveryFields {
        DiscoveryFields::ip(trtype::TCP, addr, [0; 16])
    }

    fn open(&self, cfg: &Config, arena: Arena) -> Result<(Arc<dyn Transport>, Arena), TargetError> {
        let tcp = TcpTransport {
            max_queue_depth: cfg.limits.max_queue_depth,
            placed: Mutex::default(),
        };
        Ok((Arc::new(tcp), arena))
    }
}

impl Transport for TcpTransport {
    fn kind(&self) -> config::Transport {
        config::Transport::of(&Tcp)
    }

    fn listen(
        &self,
        shared: &Arc<Shared>,
        cfg: &ListenerConfig,
        index: usize,
        id: u64,
        stop: Arc<AtomicBool>,
    ) -> Result<(SocketAddr, JoinHandle<()>), TargetError> {
        let addr = SocketAddr::new(cfg.address, cfg.port);
        let err = |source| {
            TargetError::Transport(Box::new(ListenError {
                index,
                addr,
                source,
            }))
        };
        let listener = TcpListener::bind(addr).map_err(err)?;
        listener.set_nonblocking(true).map_err(err)?;
        let local = listener.local_addr().map_err(err)?;
        tracing::info!(transport = "tcp", %local, "listening");
        let tls = tls::ListenTls {
            mode: cfg.tls,
            lookup: tls::lookup(shared),
            record_layer: shared.fixed.target.tls_record_layer.into(),
        };
        let shared = Arc::clone(shared);
        let thread = std::thread::Builder::new()
            .name(format!("rdmablk-l{id}"))
            .spawn(move || accept_loop(&listener, &shared, id, &stop, tls))
            .map_err(TargetError::Thread)?;
        Ok((local, thread))
    }

    fn poll_group(&self, worker: usize) -> Result<Box<dyn PollGroup>, TargetError> {
        let placed = Arc::new(PlacedCounters::default());
        match group::TcpGroup::new(self.max_queue_depth, Arc::clone(&placed)) {
            Ok(g) => {
                let mut all = self.placed.lock().unwrap_or_else(|e| e.into_inner());
                all.push((worker, placed));
                Ok(Box::new(g))
            }
            Err(e) => Err(TargetError::Transport(
                format!("worker {worker}: no epoll set for NVMe/TCP: {e}").into(),
            )),
        }
    }

    fn data_placed(&self) -> Vec<DataPlaced> {
        let all = self.placed.lock().unwrap_or_else(|e| e.into_inner());
        all.iter().map(|(worker, p)| p.snapshot(*worker)).collect()
    }
}

fn accept_loop(
    listener: &TcpListener,
    shared: &Shared,
    id: u64,
    stop: &AtomicBool,
    tls: tls::ListenTls,
) {
    let mut handoff = Handoff::new(shared, config::Transport::of(&Tcp));
    let mut tls_mode = tls.mode;
    while handoff.running(stop) {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, POLL.as_millis() as i32) };
        loop {
            let (stream, peer) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors, or the peer gave up: refuse this one, keep going.
                    tracing::warn!(error = %e, "accept failed");
                    break;
                }
            };
            if shared.stopping() {
                break;
            }
            let over_limit = handoff.full();
            let mode = tls::mode_of(shared, id, &mut tls_mode);
            let conn = Box::new(TcpPending {
                stream,
                peer,
                listener: id,
                over_limit,
                tls: Some(tls::ListenTls {
                    mode,
                    lookup: Arc::clone(&tls.lookup),
                    // The configuration now: a reload applies it to the next connections.
                    record_layer: shared.live.load().target.tls_record_layer.into(),
                }),
            });
            if over_limit {
                handoff.hand_over_refusal(peer, conn);
            } else {
                handoff.hand_over(peer, conn);
            }
        }
    }
    tracing::info!(addr = ?listener.local_addr().ok(), "listener stopped");
}
