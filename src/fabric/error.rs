//! Errors of the fabric API. One variant per way an operation fails, each carrying what a user
//! needs to act on it.

use std::io;
use std::net::SocketAddr;

/// An error from a fabric operation.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// A system or provider call failed.
    #[error("{op}: {source}")]
    Os {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// No device matched.
    #[error("no RDMA device {what} (list devices with `ibv_devices`; for a machine without an RNIC use the soft provider)")]
    NoDevice { what: String },
    /// The device's port is not ACTIVE.
    #[error("RDMA device {device} port {port} is not active (check the link: `ibv_devinfo -d {device}`)")]
    PortDown { device: String, port: u8 },
    /// Registration or pinning was refused because RLIMIT_MEMLOCK is too low.
    #[error(
        "cannot pin {len} bytes: locked-memory limit is {limit} bytes (raise it: `ulimit -l unlimited`, \
         memlock in /etc/security/limits.conf, or LimitMEMLOCK=infinity in the systemd unit)"
    )]
    Memlock { len: usize, limit: u64 },
    /// The operation or feature is not available on this device / provider.
    #[error("{what} is not supported by this device")]
    Unsupported { what: &'static str },
    /// A caller-supplied value is out of range.
    #[error("invalid argument: {what}")]
    InvalidArgument { what: String },
    /// Objects of two providers (or two devices) were mixed.
    #[error("{what} belongs to another provider or device")]
    ProviderMismatch { what: &'static str },
    /// The send or receive queue has no room for the work request at `index` of the posted
    /// slice; the ones before it were posted.
    #[error("queue full: work request {index} of the posted list was not posted")]
    QueueFull { index: usize },
    /// A work request was refused at post time; the ones before `index` were posted.
    #[error("work request {index} of the posted list refused: {reason}")]
    BadWr { index: usize, reason: String },
    /// The QP is not connected (or already in the error state).
    #[error("queue pair is not connected")]
    NotConnected,
    /// The peer rejected the connection; `private_data` is its reject payload.
    #[error("connection to {addr} rejected by the peer")]
    Rejected {
        addr: SocketAddr,
        private_data: Vec<u8>,
    },
    /// The peer could not be reached (no route, refused, timeout in the CM).
    #[error("cannot reach {addr}: {reason}")]
    Unreachable { addr: SocketAddr, reason: String },
    /// An operation did not finish in time.
    #[error("{op} timed out after {ms} ms")]
    Timeout { op: &'static str, ms: u64 },
    /// A connection-manager event arrived that the state machine did not expect.
    #[error("unexpected connection event during {op}: {event}")]
    UnexpectedEvent { op: &'static str, event: String },
}

impl FabricError {
    /// Wraps the last OS error as the failure of `op`.
    pub fn last_os(op: &'static str) -> Self {
        FabricError::Os {
            op,
            source: io::Error::last_os_error(),
        }
    }

    /// Wraps an OS error (errno) as the failure of `op`.
    pub fn os(op: &'static str, source: io::Error) -> Self {
        FabricError::Os { op, source }
    }
}

pub type Result<T, E = FabricError> = std::result::Result<T, E>;
