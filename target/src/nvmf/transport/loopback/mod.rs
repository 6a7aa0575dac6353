//! The loop transport: hosts in the target's own process (the kernel's nvme-loop). It
//! proves the seam (a folder behind the three traits, nothing in the core), lets the core be
//! tested end to end without a network, and measures what the core costs per I/O with no
//! network and no disk (`tools/bench/core-loop`).
//!
//! A queue is one in-memory channel (`rdmablk::nvme::transport::loopback`): capsules in
//! batches, responses in batches, data by keyed SGLs copied from and to the host's
//! registered memory region. `[[listener]] transport = "loop"` names the listener by its
//! address and port; nothing is bound.
//!
//! - this file: [`LoopTransport`]: the listener threads (accept, hand the channel to a
//!   worker).
//! - [`group`]: a worker's channels: the first capsule (the Connect), then every capsule and
//!   response, and the worker's sleep.
//! - [`queue`]: the per-queue state and its [`super::QueueTransport`] implementation.

pub mod group;
pub mod queue;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rdmablk::nvme::discovery::trtype;
use rdmablk::nvme::transport::loopback::{self, Listener, TargetEnd};

use super::handoff::Handoff;
use super::{check_no_provider, DiscoveryFields, PollGroup, Transport, TransportKind, Variant};
use crate::arena::Arena;
use crate::config::{self, Config, ListenerConfig};
use crate::nvmf::{Shared, TargetError};

/// How often a listener looks at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// A channel on its way to a worker.
pub struct LoopPending {
    pub end: TargetEnd,
    /// The listener's address (a loop host has none of its own).
    pub peer: SocketAddr,
    /// The listener it came in through ([`crate::nvmf::runtime::port::Port::id`]).
    pub listener: u64,
}

/// The loop transport of a target.
#[derive(Debug)]
pub struct LoopTransport;

/// The loop transport in the transport table ([`super::TRANSPORTS`]).
pub struct Loop;

impl TransportKind for Loop {
    fn name(&self) -> &'static str {
        "loop"
    }

    fn check_listener(&self, l: &ListenerConfig) -> Result<(), (&'static str, String)> {
        check_no_provider(l)?;
        super::check_no_tls(l)
    }

    fn check_referral(&self) -> Result<(), String> {
        Err(
            "a loop target lives in its own process and cannot be referred to (use \"rdma\" \
             or \"tcp\")"
                .to_owned(),
        )
    }

    fn variant(&self, _l: &ListenerConfig) -> Variant {
        Variant::ONE
    }

    /// Loop's TRTYPE; TSAS all zero.
    fn discovery_fields(&self, addr: IpAddr) -> DiscoveryFields {
        DiscoveryFields::ip(trtype::LOOP, addr, [0; 16])
    }

    fn open(
        &self,
        _cfg: &Config,
        arena: Arena,
    ) -> Result<(Arc<dyn Transport>, Arena), TargetError> {
        Ok((Arc::new(LoopTransport), arena))
    }
}

impl Transport for LoopTransport {
    fn kind(&self) -> config::Transport {
        config::Transport::of(&Loop)
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
        let listener = loopback::listen(addr).map_err(|e| {
            TargetError::Transport(format!("listener[{index}]: cannot listen: {e}").into())
        })?;
        let local = listener.local_addr();
        tracing::info!(transport = "loop", %local, "listening");
        let shared = Arc::clone(shared);
        let thread = std::thread::Builder::new()
            .name(format!("rdmablk-l{id}"))
            .spawn(move || accept_loop(&listener, &shared, id, &stop))
            .map_err(TargetError::Thread)?;
        Ok((local, thread))
    }

    fn poll_group(&self, worker: usize) -> Result<Box<dyn PollGroup>, TargetError> {
        match group::LoopGroup::new() {
            Ok(g) => Ok(Box::new(g)),
            Err(e) => Err(TargetError::Transport(
                format!("worker {worker}: loop transport: {e}").into(),
            )),
        }
    }
}

fn accept_loop(listener: &Listener, shared: &Shared, id: u64, stop: &AtomicBool) {
    let mut handoff = Handoff::new(shared, config::Transport::of(&Loop));
    let peer = listener.local_addr();
    while handoff.running(stop) {
        let Some(end) = listener.accept(POLL) else {
            continue;
        };
        let conn = LoopPending {
            end,
            peer,
            listener: id,
        };
        handoff.hand_over(peer, Box::new(conn));
    }
    tracing::info!(addr = %peer, "listener stopped");
}
