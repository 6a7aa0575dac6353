//! The initiator's transports: the table of every transport it speaks ([`TRANSPORTS`]), and
//! the seam between its NVMe-oF queue ([`crate::queue::Queue`]: command IDs, deadlines, held
//! commands, failure) and the transport that carries its capsules.
//!
//! A transport is a file or folder here ([`rdma`], [`tcp`], [`loopback`]) and one line in
//! [`TRANSPORTS`], with three trait impls, every method of which is required unless it has a
//! default:
//! - [`TransportOps`], its row of the table: the URL schemes that name it, the TRTYPE of its
//!   discovery log entries, and its constructor ([`TransportOps::open`]);
//! - [`Fabric`], the transport opened for one controller and kept across its reconnects
//!   (RDMA: the provider and protection domain, the push request; TCP: the digests; loop: the
//!   buffer pool the target reaches): it connects the controller's queues;
//! - [`QueueTransport`], one connected queue.
//!
//! Nothing outside this folder names a transport: URLs, discovery, controllers and multipath
//! sets reach them through [`Transport`], the public name of a row and one of its schemes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rdmablk::fabric::ProviderKind;
use rdmablk::nvme::{Cqe, SglNeed, Sqe};

use crate::buf::{BufPool, IoBuf};
use crate::error::{Error, Result};
use crate::options::ConnectOptions;
use crate::stats::Stats;

pub(crate) mod loopback;
pub(crate) mod rdma;
pub(crate) mod tcp;
pub(crate) mod tcp_tls;

/// Every transport this initiator speaks, one line each. A URL scheme that no row claims is
/// refused; a discovery log entry of a TRTYPE that none claims has no transport.
static TRANSPORTS: &[&dyn TransportOps] = &[&rdma::Rdma, &tcp::Tcp, &loopback::Loop];

/// One transport: its row of [`TRANSPORTS`].
pub(crate) trait TransportOps: Sync {
    /// The URL schemes that name it (unique across the table), each a [`Transport`].
    fn schemes(&self) -> &'static [&'static str];

    /// The TRTYPE of the discovery log entries it serves.
    fn trtype(&self) -> u8;

    /// The scheme of an entry of it in the discovery log of a controller reached over `via`
    /// (NVMe/RDMA: over the provider the discovery ran on).
    fn discovered_scheme(&self, via: Transport) -> &'static str {
        let _ = via;
        self.schemes()[0]
    }

    /// The fabric provider `scheme` names (NVMe/RDMA only).
    fn provider(&self, scheme: &str) -> Option<ProviderKind> {
        let _ = scheme;
        None
    }

    /// How long a waiting queue of it polls after its last progress before it sleeps when
    /// [`ConnectOptions::poll_spin_us`] does not say (us; 0: only its 64 polls).
    fn default_poll_spin_us(&self) -> u32 {
        0
    }

    /// A buffer pool of `bytes` that queues of `t` to `addr` can reach: NVMe/RDMA registers
    /// it on a protection domain of the device that reaches `addr`; plain memory by default.
    fn open_pool(
        &self,
        t: Transport,
        addr: SocketAddr,
        opts: &ConnectOptions,
        bytes: usize,
    ) -> Result<BufPool> {
        let _ = (t, addr, opts);
        BufPool::new(None, bytes)
    }

    /// Opens `t` for one controller with `opts`, its queues' data in `pool` (one that
    /// [`TransportOps::open_pool`] of `t`'s row made, or, on a multipath set, of the set's
    /// first path that registers its pool).
    fn open(
        &self,
        t: Transport,
        subnqn: &str,
        opts: &ConnectOptions,
        pool: &BufPool,
    ) -> Result<Arc<dyn Fabric>>;
}

/// An NVMe-oF transport this initiator speaks, as a URL scheme names it: `rdma` (NVMe/RDMA
/// through the verbs provider: an RNIC, Soft-RoCE), `soft` (NVMe/RDMA through rdmablk's
/// userspace provider over TCP, which only rdmablk-target speaks), `tcp` (NVMe/TCP), `loop` (a
/// target in this same process, its `[[listener]] transport = "loop"` at that address).
#[derive(Clone, Copy)]
pub struct Transport {
    ops: &'static dyn TransportOps,
    scheme: &'static str,
}

impl Transport {
    /// The transport `scheme` names (`None`: none that this initiator speaks).
    pub fn from_scheme(scheme: &str) -> Option<Transport> {
        TRANSPORTS.iter().find_map(|&ops| {
            let scheme = ops.schemes().iter().find(|s| **s == scheme)?;
            Some(Transport { ops, scheme })
        })
    }

    /// The URL scheme.
    pub fn scheme(self) -> &'static str {
        self.scheme
    }

    /// The fabric provider of an NVMe/RDMA transport (`None` for the others).
    pub fn provider(self) -> Option<ProviderKind> {
        self.ops.provider(self.scheme)
    }

    /// Its waiting queues' spin when the options do not set one (us): NVMe/TCP
    /// [`crate::options::DEFAULT_POLL_SPIN_US`], the others 0.
    pub fn default_poll_spin_us(self) -> u32 {
        self.ops.default_poll_spin_us()
    }

    /// The transport of a discovery log entry of type `trtype`, listed by a controller
    /// reached over `via` (`None`: none that this initiator speaks).
    pub(crate) fn of_entry(trtype: u8, via: Transport) -> Option<Transport> {
        let ops = *TRANSPORTS.iter().find(|ops| ops.trtype() == trtype)?;
        Some(Transport {
            ops,
            scheme: ops.discovered_scheme(via),
        })
    }

    /// "rdma://, soft://, tcp:// or loop://": every scheme, for error messages.
    pub(crate) fn every_scheme() -> String {
        let all: Vec<String> = TRANSPORTS
            .iter()
            .flat_map(|ops| ops.schemes())
            .map(|s| format!("{s}://"))
            .collect();
        match all.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }

    /// A buffer pool of `bytes` that this transport's queues to `addr` can reach.
    pub(crate) fn open_pool(
        self,
        addr: SocketAddr,
        opts: &ConnectOptions,
        bytes: usize,
    ) -> Result<BufPool> {
        self.ops.open_pool(self, addr, opts, bytes)
    }

    /// Opens this transport for one controller of subsystem `subnqn` with `opts`, its data
    /// in `pool`.
    pub(crate) fn open(
        self,
        subnqn: &str,
        opts: &ConnectOptions,
        pool: &BufPool,
    ) -> Result<Arc<dyn Fabric>> {
        self.ops.open(self, subnqn, opts, pool)
    }
}

impl PartialEq for Transport {
    fn eq(&self, other: &Transport) -> bool {
        self.scheme == other.scheme
    }
}

impl Eq for Transport {}

impl std::hash::Hash for Transport {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.scheme.hash(state);
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Transport({})", self.scheme)
    }
}

/// A transport opened for one controller and kept across its reconnects: what its queues
/// connect over.
pub(crate) trait Fabric: Send + Sync {
    /// What Identify Controller must offer for this transport's data pointers (keyed SGLs
    /// where the target reaches the buffers itself; NVMe/TCP carries data in its own PDUs).
    fn sgl_need(&self) -> SglNeed;

    /// Connects queue `p.qid` (no NVMe command yet).
    fn connect(&self, p: &QueueParams, stats: Arc<Stats>) -> Result<Box<dyn QueueTransport>>;
}

/// One contiguous piece of registered memory a command's data lives in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
    pub rkey: u32,
}

impl Seg {
    pub fn of(buf: &IoBuf, at: usize, len: u32) -> Seg {
        debug_assert!(at + len as usize <= buf.len());
        Seg {
            addr: buf.addr(at),
            len,
            lkey: buf.lkey(),
            rkey: buf.rkey(),
        }
    }
}

/// Data direction of a command.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dir {
    None,
    /// Controller to host (Read, Identify): the target's data lands in `Seg`.
    ToHost(Seg),
    /// Host to controller (Write, Connect data, DSM ranges).
    ToCtrl(Seg),
}

/// What a queue is connected with.
pub(crate) struct QueueParams {
    pub addr: SocketAddr,
    pub qid: u16,
    /// Submission queue entries (the CM request's HRQSIZE; HSQSIZE is one less).
    pub entries: u16,
    /// In-capsule data bytes the controller takes on this queue (0 on the admin queue).
    pub in_capsule_bytes: u32,
    /// Largest data one command carries on this queue (0 on the admin queue, before
    /// Identify Controller told it).
    pub max_transfer_bytes: u32,
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

    /// Whether the last poll moved data (read or wrote bytes) even though nothing may have
    /// completed: a transfer under way, which [`crate::queue::Queue::wait`] spins for rather
    /// than sleeping.
    fn moved(&self) -> bool {
        false
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use rdmablk::nvme::discovery::trtype;

    #[test]
    fn every_scheme_names_one_transport_and_every_trtype_one_row() {
        let schemes: Vec<&str> = TRANSPORTS
            .iter()
            .flat_map(|t| t.schemes())
            .copied()
            .collect();
        for s in &schemes {
            assert_eq!(schemes.iter().filter(|x| *x == s).count(), 1, "{s} twice");
            assert_eq!(Transport::from_scheme(s).map(Transport::scheme), Some(*s));
        }
        for t in TRANSPORTS {
            let rows = TRANSPORTS
                .iter()
                .filter(|o| o.trtype() == t.trtype())
                .count();
            assert_eq!(rows, 1, "TRTYPE {} twice", t.trtype());
        }
        let every = Transport::every_scheme();
        assert!(
            schemes.iter().all(|s| every.contains(&format!("{s}://"))),
            "{every}"
        );
        assert!(every.starts_with("rdma://, soft://, tcp://"), "{every}");
        assert!(Transport::from_scheme("http").is_none());
    }

    #[test]
    fn discovery_entries_map_to_the_transport_and_provider_they_were_found_over() {
        let t = |s| Transport::from_scheme(s).unwrap();
        let entry = |trtype, via| Transport::of_entry(trtype, t(via)).map(Transport::scheme);
        assert_eq!(entry(trtype::RDMA, "soft"), Some("soft"));
        assert_eq!(entry(trtype::RDMA, "rdma"), Some("rdma"));
        assert_eq!(entry(trtype::RDMA, "tcp"), Some("rdma"));
        assert_eq!(entry(trtype::TCP, "soft"), Some("tcp"));
        assert_eq!(entry(trtype::LOOP, "loop"), Some("loop"));
        assert_eq!(entry(trtype::FC, "tcp"), None);
        assert_eq!(t("soft").provider(), Some(ProviderKind::Soft));
        assert_eq!(t("rdma").provider(), Some(ProviderKind::Verbs));
        assert_eq!(t("tcp").provider(), None);
    }
}
