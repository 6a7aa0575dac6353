//! The seam between the initiator's NVMe-oF queue ([`crate::queue::Queue`]: command IDs,
//! deadlines, held commands, failure) and the transport that carries its capsules.
//! A transport is a file or folder here ([`rdma`], [`tcp`], [`loopback`]) with a type that
//! implements [`QueueTransport`] for one connected queue.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rdmablk::fabric::{Pd, ProviderKind};
use rdmablk::nvme::transport::rdma::PushRequest;
use rdmablk::nvme::{Cqe, SglNeed, Sqe};

use crate::buf::BufPool;
use crate::error::{Error, Result};
use crate::queue::Dir;
use crate::stats::Stats;

pub(crate) mod loopback;
pub(crate) mod rdma;
pub(crate) mod tcp;
pub(crate) mod tcp_tls;

/// What a controller's queues are opened over, kept across reconnects (and the buffer pool
/// registered on it, for RDMA).
#[derive(Clone)]
pub(crate) enum Fabric {
    /// NVMe/RDMA: the provider and the protection domain the buffer pool is registered on.
    Rdma { kind: ProviderKind, pd: Pd },
    /// NVMe/TCP, with the digests to ask for, and TLS if a key is given.
    Tcp {
        hdr_digest: bool,
        data_digest: bool,
        tls: Option<tcp_tls::TlsOffer>,
    },
    /// The loop transport (a target in this process), through which the target reaches the
    /// buffer pool (set by [`Fabric::with_pool`]).
    Loop { pool: Option<BufPool> },
}

impl Fabric {
    /// The protection domain buffers are registered on (RDMA only).
    pub fn pd(&self) -> Option<&Pd> {
        match self {
            Fabric::Rdma { pd, .. } => Some(pd),
            Fabric::Tcp { .. } | Fabric::Loop { .. } => None,
        }
    }

    /// The fabric with the controller's buffer pool: the loop transport lets the target
    /// reach it (RDMA registered it on the PD already).
    pub fn with_pool(self, pool: &BufPool) -> Fabric {
        match self {
            Fabric::Loop { .. } => Fabric::Loop {
                pool: Some(pool.clone()),
            },
            f => f,
        }
    }

    /// What Identify Controller must offer for this transport's data pointers: keyed SGLs
    /// over RDMA; NVMe/TCP carries data in its own PDUs.
    pub fn sgl_need(&self) -> SglNeed {
        match self {
            Fabric::Rdma { .. } | Fabric::Loop { .. } => SglNeed::Keyed,
            Fabric::Tcp { .. } => SglNeed::None,
        }
    }

    /// Connects queue `p.qid` over this fabric (no NVMe command yet).
    pub fn connect(&self, p: &QueueParams, stats: Arc<Stats>) -> Result<Box<dyn QueueTransport>> {
        Ok(match self {
            Fabric::Rdma { kind, pd } => Box::new(rdma::RdmaLink::connect(*kind, pd, p, stats)?),
            Fabric::Tcp {
                hdr_digest,
                data_digest,
                tls,
            } => Box::new(tcp::TcpLink::connect(
                p,
                *hdr_digest,
                *data_digest,
                tls.as_ref(),
                stats,
            )?),
            Fabric::Loop { pool } => {
                let pool = pool.as_ref().ok_or_else(|| {
                    Error::protocol("loop transport opened without a buffer pool".to_string())
                })?;
                Box::new(loopback::LoopLink::connect(p, pool, stats)?)
            }
        })
    }
}

/// What a queue is connected with.
pub(crate) struct QueueParams {
    pub addr: SocketAddr,
    pub qid: u16,
    /// Submission queue entries (the CM request's HRQSIZE; HSQSIZE is one less).
    pub entries: u16,
    /// In-capsule data bytes the controller takes on this queue (0 on the admin queue).
    pub in_capsule_bytes: u32,
    /// The push-write request (RDMA only; NVMe/TCP ignores it).
    pub push: Option<PushRequest>,
    pub connect_timeout: Duration,
}

/// What a transport reports of its queue.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    /// The capsule of command `cid` left: its buffers are the transport's no more, once its
    /// response is in too.
    Sent(u16),
    /// A response arrived (its command ID is unchecked: the queue checks it).
    Response(Cqe),
}

/// One connected queue's transport.
pub(crate) trait QueueTransport: Send {
    /// Sends command `sqe` (its command ID set) with the data `dir` describes: the transport
    /// fills in the data pointer. Err: the queue fails with it.
    fn send(&mut self, sqe: Sqe, dir: Dir) -> Result<(), Error>;

    /// Appends what happened since the last poll to `events`, without blocking. Err(why):
    /// the transport failed (the events before it stand).
    fn poll(&mut self, events: &mut Vec<Event>) -> Result<(), String>;

    /// Every few milliseconds while the queue is used: the connection's own events (the
    /// target disconnected). Err(why): it failed.
    fn check(&mut self) -> Result<(), String>;

    /// Prepares to sleep: after this, an arrival wakes [`QueueTransport::wait`]. False if it
    /// cannot (the queue spins instead). Poll once more after it: what came in before is
    /// not signalled.
    fn arm(&mut self) -> bool;

    /// Sleeps until something arrived or `timeout` passed. `bulk`: large data is in flight,
    /// which a transport may leave to its own threads to copy.
    fn wait(&mut self, timeout: Duration, bulk: bool);

    /// Stops the connection: from here the target can reach no buffer of the queue's.
    fn disconnect(&mut self);

    /// In-capsule data bytes the controller takes on this queue from now on (set once its
    /// Connect is done and Identify Controller said so).
    fn set_in_capsule_bytes(&mut self, n: u32);

    /// The data slots the target granted for the host to place write data in (RDMA push
    /// writes): how many, and how large each is.
    fn push_slots(&self) -> Option<(u16, u32)> {
        None
    }
}
