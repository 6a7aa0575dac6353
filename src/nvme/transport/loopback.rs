//! The loop transport's "wire": a target and its hosts in one process, commands and data
//! passed through memory, as the kernel's nvme-loop does. It exists to prove that the
//! NVMe-oF core of the target and of the initiator knows no transport, to test that core end
//! to end without a network, and to measure what the core costs per I/O.
//!
//! One queue is one [`Channel`]:
//! - **Capsules** (an SQE and up to [`CAPSULE_DATA`] bytes of in-capsule data) are written by
//!   the host into one of the channel's capsule slots and announced in a batch; the target
//!   copies each out and hands the slot back ([`ToHost::Taken`]).
//! - **Responses** go back in a batch ([`ToHost::Response`]).
//! - **Data** moves by keyed SGLs, as over RDMA: the host connects with one memory
//!   [`Region`] (its buffer pool), whose [`HostEnd::key`] its SGLs carry; the target copies
//!   to and from it ([`TargetEnd::read_host`], [`TargetEnd::write_host`]) after checking the
//!   key and the range. The channel keeps the region alive, so a target can never reach freed
//!   memory, and [`HostEnd::close`] returns only once no copy is under way: from then on the
//!   target reaches none of the host's memory (the loop's equivalent of a QP in error).
//! - **Wake-ups**: either side may sleep on an eventfd ([`Wake`]) that the other writes only
//!   when the sleeper armed it, so a polling peer costs no system call per batch.
//!
//! A listener is a name in a process-wide table ([`listen`]): an IP address and port, which
//! nothing binds.

use std::net::SocketAddr;

use crate::nvme::{Cqe, SQE_LEN};

mod channel;
mod host;
mod listener;
mod region;
mod target;
mod wake;

pub use channel::Channel;
pub use host::{connect, HostEnd};
pub use listener::{listen, Listener};
pub use region::Region;
pub use target::TargetEnd;
pub use wake::{spin_ns, Side, Wake, Woke, SPIN};

/// In-capsule data bytes a capsule slot holds (as NVMe/TCP's admin capsules: the Connect
/// data of every queue, and I/O commands' in-capsule data up to the controller's IOCCSZ).
pub const CAPSULE_DATA: usize = 8192;
/// Bytes of one capsule slot.
pub const CAPSULE_BYTES: usize = SQE_LEN + CAPSULE_DATA;
/// The most capsule slots a channel may have (a queue's entries).
pub const MAX_ENTRIES: u32 = 4096;

/// Why a loop operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoopError {
    #[error("loop address {0} is already listened on")]
    InUse(SocketAddr),
    #[error("no loop listener at {0}")]
    Refused(SocketAddr),
    #[error("a loop queue needs 1..={MAX_ENTRIES} entries, not {0}")]
    Entries(u32),
    #[error("cannot make an eventfd: {0}")]
    EventFd(String),
    #[error("the loop queue is closed")]
    Closed,
    #[error("keyed SGL key {key:#x} is not the queue's")]
    Key { key: u32 },
    #[error("keyed SGL {addr:#x}+{len} lies outside the host's memory region")]
    Range { addr: u64, len: usize },
}

/// What the target sends the host.
#[derive(Clone, Copy, Debug)]
pub enum ToHost {
    /// The capsule in slot `.0` was taken: the slot is the host's again.
    Taken(u32),
    /// A response capsule.
    Response(Cqe),
}

#[cfg(test)]
mod tests;
