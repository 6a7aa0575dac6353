//! NVMe and NVMe-oF wire format, exact to the byte, shared by the target and
//! the initiator.
//!
//! Every structure that crosses the wire has a fixed size asserted at compile time, is encoded
//! and decoded with explicit little-endian byte operations (no `unsafe`, no `repr(C)` casts),
//! and is decoded from untrusted bytes without panicking: a bad command yields the NVMe
//! [`Status`] to complete it with, a bad record (CM private data, Connect data, a log page) a
//! [`WireError`] or a typed rejection. Byte diagrams: `docs/wire-format.md`.
//!
//! Modules, by concept:
//! - [`sqe`], [`cqe`]: the 64-byte command and 16-byte completion.
//! - [`auth`]: in-band authentication (DH-HMAC-CHAP): Authentication Send/Receive, their
//!   messages, the `DHHC-1` key format and the crypto both sides share.
//! - [`sgl`]: the SGL descriptor in the SQE's data pointer.
//! - [`status`]: completion status codes and their names.
//! - [`opcodes`]: admin, I/O and Fabrics opcodes.
//! - [`fabrics`]: Connect (command, data, Invalid Parameters response), Property Get/Set,
//!   Disconnect; [`nqn`]: NQN fields; [`properties`]: CAP, VS, CC, CSTS.
//! - [`identify`]: Identify command and data (controller, namespace, NS list, descriptors).
//! - [`features`]: Get/Set Features and feature values; [`log_page`]: Get Log Page and the
//!   error, SMART, firmware slot, changed NS and command effects pages.
//! - [`discovery`]: the Discovery Log Page (header and entries).
//! - [`admin`]: Abort, Asynchronous Event completions, Keep Alive.
//! - [`io`]: Read, Write, Flush, Write Zeroes, Dataset Management.
//! - [`tls`]: the NVMe parts of TLS for NVMe/TCP: the PSK interchange format, the retained and
//!   TLS PSK derivations, the PSK identities.
//! - [`transport`]: what belongs to one transport: [`transport::rdma`], the RDMA CM private
//!   data (request, accept, reject) and rdmablk's push-write extension.

pub mod admin;
pub mod ana;
pub mod auth;
pub mod cqe;
pub mod discovery;
mod error;
pub mod fabrics;
pub mod features;
pub mod identify;
pub mod io;
mod le;
pub mod log_page;
pub mod nqn;
pub mod opcodes;
pub mod properties;
pub mod reservation;
#[cfg(test)]
mod robustness;
pub mod sgl;
pub mod sqe;
pub mod status;
pub mod tls;
pub mod transport;

pub use cqe::{Cqe, CQE_LEN};
pub use error::WireError;
pub use fabrics::{Connect, ConnectData, ConnectFailure, Disconnect, PropertyGet, PropertySet};
pub use features::{GetFeatures, NumQueues, SetFeatures};
pub use identify::{
    IdentifyCmd, IdentifyController, IdentifyNamespace, Lbaf, NsDescriptor, SglNeed,
};
pub use io::{Dsm, DsmRange, ReadWrite, WriteZeroes};
pub use le::{ascii_padded, ascii_trimmed};
pub use log_page::GetLogPage;
pub use nqn::Nqn;
pub use properties::{Cap, Cc, Csts, PropertySize, Vs};
pub use sgl::{InCapsuleSgl, KeyedSgl, Sgl, SglLimits, TransportSgl};
pub use sqe::{Sqe, SQE_LEN};
pub use status::{CommandKind, Sct, Status};
