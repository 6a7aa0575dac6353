//! NVMe and NVMe-oF (RDMA transport) wire format, exact to the byte, shared by the target and
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
//! - [`sgl`]: the SGL descriptor in the SQE's data pointer.
//! - [`status`]: completion status codes and their names.
//! - [`opcodes`]: admin, I/O and Fabrics opcodes.
//! - [`fabrics`]: Connect (command, data, Invalid Parameters response), Property Get/Set,
//!   Disconnect; [`nqn`]: NQN fields; [`properties`]: CAP, VS, CC, CSTS.
//! - [`rdma_cm`]: RDMA CM private data (request, accept, reject) and rdmablk's push-write
//!   extension.

pub mod cqe;
mod error;
pub mod fabrics;
pub mod identify;
mod le;
pub mod nqn;
pub mod opcodes;
pub mod properties;
pub mod rdma_cm;
pub mod sgl;
pub mod sqe;
pub mod status;

pub use cqe::{Cqe, CQE_LEN};
pub use error::WireError;
pub use fabrics::{Connect, ConnectData, ConnectFailure, Disconnect, PropertyGet, PropertySet};
pub use identify::{IdentifyCmd, IdentifyController, IdentifyNamespace, Lbaf, NsDescriptor};
pub use le::{ascii_padded, ascii_trimmed};
pub use nqn::Nqn;
pub use properties::{Cap, Cc, Csts, PropertySize, Vs};
pub use rdma_cm::{
    CmAccept, CmReject, CmRejectStatus, CmRequest, PushAnswer, PushRequest, PushWindow,
};
pub use sgl::{InCapsuleSgl, KeyedSgl, Sgl, SglLimits};
pub use sqe::{Sqe, SQE_LEN};
pub use status::{CommandKind, Sct, Status};
