//! Errors of the initiator. Three families, told apart by [`Error::kind`]:
//! - **transport**: the connection failed under a command (QP error, disconnect, timeout).
//!   The controller reconnects; the sync API retries what is safe to retry.
//! - **NVMe status**: the controller completed a command with an error status ([`Error::Nvme`],
//!   which names the status and whether it is a media error).
//! - **usage / setup**: a bad URL or option, an unaligned or out-of-range I/O, a refused
//!   connection (each refusal says who refused and why).

use rdmablk::fabric::FabricError;
use rdmablk::nvme::transport::rdma::CmRejectStatus;
use rdmablk::nvme::{CommandKind, Sct, Status, WireError};

/// What family an [`Error`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The connection failed; reconnecting may help.
    Transport,
    /// The controller answered with an error status.
    Nvme,
    /// The caller's request or configuration is wrong, or the target refused us.
    Usage,
}

/// An initiator error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL does not parse.
    #[error("invalid target URL {url:?}: {reason} (expected rdma://IP:PORT/SUBNQN, soft://HOST:PORT/SUBNQN, tcp://HOST:PORT/SUBNQN or loop://IP:PORT/SUBNQN)")]
    Url { url: String, reason: String },
    /// An option value is out of range.
    #[error("invalid option {name}: {reason}")]
    Option { name: &'static str, reason: String },
    /// A fabric call failed while setting up or running a queue.
    #[error("queue {qid}: {op}: {source}")]
    Fabric {
        qid: u16,
        op: &'static str,
        #[source]
        source: FabricError,
    },
    /// The target rejected the RDMA CM connect of a queue.
    #[error("queue {qid}: the target rejected the connection: {status}{}", reject_hint(*status))]
    Rejected { qid: u16, status: CmRejectStatus },
    /// The target refused the connection: an RDMA CM reject without NVMe/RDMA reject data,
    /// or a TCP connect refused (nothing listens there); `hint` says which and what to check.
    #[error("queue {qid}: the target at {addr} refused the connection ({hint})")]
    Refused {
        qid: u16,
        addr: String,
        hint: &'static str,
    },
    /// Fabrics Connect failed with an NVMe status.
    #[error("queue {qid}: Connect to {subnqn} refused: {reason}")]
    ConnectRefused {
        qid: u16,
        subnqn: String,
        status: Status,
        reason: String,
    },
    /// The controller sent something malformed or inconsistent.
    #[error("protocol error from the target: {what}")]
    Protocol { what: String },
    /// The controller does not meet what a host requires (Identify checks, CSTS.CFS ...).
    #[error("unusable controller: {what}")]
    Controller { what: String },
    /// A command completed with an error status.
    #[error("{op} failed: {} ({}){}", status.display_for(CommandKind::Io), status_class(status), dnr(status))]
    Nvme { op: &'static str, status: Status },
    /// The queue failed under the command (QP error, disconnect, timeout). The command's
    /// outcome is unknown: a write reported this way may or may not be on the media.
    #[error("transport failure on queue {qid}: {what}")]
    Transport { qid: u16, what: String },
    /// The controller is gone and reconnecting gave up (or is disabled).
    #[error("controller is disconnected: {what} (reconnect attempts exhausted; open it again)")]
    Disconnected { what: String },
    /// Offset or length not a multiple of the block size.
    #[error("{what} {value} is not a multiple of the {block_size}-byte block size")]
    Unaligned {
        what: &'static str,
        value: u64,
        block_size: u32,
    },
    /// The range ends past the namespace.
    #[error("range {offset}+{len} is past the end of the namespace ({capacity} bytes)")]
    OutOfRange {
        offset: u64,
        len: u64,
        capacity: u64,
    },
    /// A request larger than one command may carry (async API; the sync API splits).
    #[error("{len} bytes exceed the {max} bytes one command may carry (split it, or use the Namespace API which does)")]
    TooLarge { len: u64, max: u64 },
    /// The buffer is shorter than the I/O.
    #[error("buffer of {buf} bytes is shorter than the {len}-byte I/O")]
    ShortBuffer { buf: usize, len: u64 },
    /// The registered buffer pool has no room.
    #[error("I/O buffer pool exhausted: {want} bytes wanted, pool is {pool_bytes} bytes (raise ConnectOptions::buffer_pool_bytes, or free IoBufs)")]
    PoolExhausted { want: usize, pool_bytes: usize },
    /// No namespace with that ID.
    #[error("namespace {nsid} is not active on the controller (active: {active:?})")]
    NoNamespace { nsid: u32, active: Vec<u32> },
    /// The controller does not support the command.
    #[error("{what} is not supported by the controller (Identify ONCS {oncs:#x})")]
    Unsupported { what: &'static str, oncs: u16 },
    /// In-band authentication (DH-HMAC-CHAP) failed or could not start.
    #[error("queue {qid}: authentication with {subnqn} failed: {what}")]
    Auth {
        qid: u16,
        subnqn: String,
        what: String,
    },
    /// The paths given to a multipath controller do not lead to one subsystem and the same
    /// namespaces (another NQN, another NGUID/EUI-64/UUID, another size), or cannot be told
    /// apart from different ones (no identifier).
    #[error("multipath: {url}: {what}")]
    PathMismatch { url: String, what: String },
    /// No path of a multipath controller could carry the command before the I/O timeout.
    #[error("multipath: no usable path ({what})")]
    NoPath { what: String },
    /// An earlier flush failed: the namespace refuses writes until it is reopened.
    #[error("an earlier flush failed ({first}); writes are refused until the namespace is reopened, because what was written before it may not be durable")]
    FlushFailed { first: String },
}

fn reject_hint(s: CmRejectStatus) -> &'static str {
    match s {
        CmRejectStatus::NoResources => {
            " (the target is out of queues or memory: use fewer or smaller queues)"
        }
        CmRejectStatus::InvalidHsqsize | CmRejectStatus::InvalidHrqsize => {
            " (lower ConnectOptions::queue_size)"
        }
        CmRejectStatus::InvalidQid => " (lower ConnectOptions::io_queues)",
        _ => "",
    }
}

fn status_class(s: &Status) -> &'static str {
    match s.sct {
        Sct::MediaError => "media error",
        Sct::Path => "path error",
        Sct::Generic | Sct::CommandSpecific => "command error",
        Sct::Vendor | Sct::Reserved(_) => "vendor status",
    }
}

fn dnr(s: &Status) -> &'static str {
    if s.dnr {
        ", do not retry"
    } else {
        ""
    }
}

impl Error {
    /// The family of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Fabric { .. }
            | Error::Transport { .. }
            | Error::Disconnected { .. }
            | Error::NoPath { .. } => ErrorKind::Transport,
            Error::Protocol { .. } => ErrorKind::Transport,
            Error::Nvme { .. } => ErrorKind::Nvme,
            _ => ErrorKind::Usage,
        }
    }

    /// A media or data-integrity error (SCT 2).
    pub fn is_media(&self) -> bool {
        matches!(self, Error::Nvme { status, .. } if status.sct == Sct::MediaError)
    }

    /// The NVMe status, for command errors.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Nvme { status, .. } | Error::ConnectRefused { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub(crate) fn fabric(qid: u16, op: &'static str) -> impl FnOnce(FabricError) -> Error {
        move |source| Error::Fabric { qid, op, source }
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Error {
        Error::Protocol { what: what.into() }
    }

    pub(crate) fn wire(e: WireError) -> Error {
        Error::Protocol {
            what: e.to_string(),
        }
    }

    /// Whether the controller connection itself failed (what recovery handles).
    pub(crate) fn needs_reconnect(&self) -> bool {
        matches!(
            self,
            Error::Fabric { .. } | Error::Transport { .. } | Error::Protocol { .. }
        )
    }
}

/// Result with the initiator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvme_errors_name_the_status_and_class() {
        let e = Error::Nvme {
            op: "read",
            status: Status::UNRECOVERED_READ_ERROR.with_dnr(),
        };
        let s = e.to_string();
        assert!(s.contains("read failed"), "{s}");
        assert!(s.contains("media error"), "{s}");
        assert!(s.contains("do not retry"), "{s}");
        assert!(e.is_media());
        assert_eq!(e.kind(), ErrorKind::Nvme);
        let e = Error::Nvme {
            op: "write",
            status: Status::LBA_OUT_OF_RANGE,
        };
        assert!(!e.is_media());
        assert!(e.to_string().contains("command error"));
    }

    #[test]
    fn transport_and_usage_kinds() {
        let t = Error::Transport {
            qid: 1,
            what: "QP error".into(),
        };
        assert_eq!(t.kind(), ErrorKind::Transport);
        assert!(t.needs_reconnect());
        let r = Error::Rejected {
            qid: 2,
            status: CmRejectStatus::NoResources,
        };
        assert_eq!(r.kind(), ErrorKind::Usage);
        assert!(r.to_string().contains("no resources"), "{r}");
        assert!(r.to_string().contains("fewer"), "{r}");
        assert!(!r.needs_reconnect());
    }
}
