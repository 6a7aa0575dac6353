//! The fabric layer: a safe, verbs-shaped RDMA API with two providers chosen at run time.
//!
//! - [`ProviderKind::Verbs`]: libibverbs and librdmacm (`fabric::verbs`), for real RNICs and
//!   for Soft-RoCE (`rdma_rxe`) / siw in the kernel.
//! - [`ProviderKind::Soft`]: a userspace RNIC over TCP (`fabric::soft`) with the same reliable
//!   connected (RC) semantics, for machines without RDMA.
//!
//! The target and the initiator use this module and nothing below it.
//!
//! # Objects and lifetimes
//! ```text
//! Device ──┬── Pd ──┬── Mr (owns its MemBuf)      children hold an Arc of their parent,
//!          │        └── Mw (type 2)               so teardown order is right by construction
//!          ├── Cq  (shared by many QPs; a QP keeps its CQs alive)
//!          ├── Srq (of a Pd; shared by many QPs of that Pd; a QP keeps its SRQ alive)
//!          └── Listener ── ConnRequest ── Qp      (passive side)
//! resolve(addr) ── Resolved ── connect ── Qp      (active side)
//! ```
//!
//! # Ownership of registered memory
//! Work requests name memory by `(addr, length, lkey)` exactly as verbs do. A memory region
//! owns its memory (a [`MemBuf`]) and deregisters it before unmapping it, so a work request that
//! outlives its region fails with a protection error instead of touching freed memory. Memory
//! the caller owns can be registered with the `unsafe` [`Pd::register_raw`], whose `# Safety`
//! section states the rule.
//!
//! # Completion semantics
//! Work requests of one queue complete in the order they were posted. A send WR without
//! [`SendFlags::SIGNALED`] produces a completion only if it fails. After any error completion
//! the QP is in the error state: every outstanding and later-posted WR completes with
//! [`WcStatus::WrFlushErr`]. Posting to a QP in the error state succeeds (the WR then
//! completes with `WrFlushErr`); it is not a post-time error. A `SEND_WITH_INV` completes with
//! opcode [`WcOpcode::Send`], as in verbs.
//!
//! # Shared receive queues
//! A QP created with [`QpInit::srq`] takes its receives from that [`Srq`] instead of a queue of
//! its own ([`Qp::post_recv`] is refused). The completion goes to the receiving QP's receive
//! CQ with that QP's [`Wc::qp_num`] and the SRQ work request's `wr_id`. An SRQ's work requests
//! may be consumed in any order (hardware does), and an empty SRQ makes the sender retry after
//! an RNR NAK, as an empty receive queue does. A QP entering the error state flushes only the
//! SRQ work request it was filling; the others stay posted for the other QPs.
//!
//! A memory region is deregistered when its [`Mr`] is dropped; a failed [`Qp::accept`] (bad
//! private data length) leaves the request acceptable again.
//!
//! # Modules
//! The provider-independent wrappers are declared here and implemented beside this file, one
//! file per object as in the providers: `device`, `memory` (PD, MR, MW), `cq`,
//! `qp` (QP and SRQ), `cm` (listen, resolve, connect) and `send_batch`.

pub mod error;
pub mod membuf;
pub mod soft;
pub mod types;
pub mod verbs;

pub use error::{FabricError, Result};
pub use membuf::{memlock_limit, MemBuf, MemBufOptions};
pub use types::*;

/// Dispatches a method call to the provider behind a wrapper enum.
macro_rules! dispatch {
    ($self:expr, $inner:ident => $body:expr) => {
        match $self {
            Inner::Soft($inner) => $body,
            Inner::Verbs($inner) => $body,
        }
    };
}

macro_rules! wrapper {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        pub struct $name(Inner<soft::$name, verbs::$name>);

        impl $name {
            /// The soft provider's object, if this is one.
            #[allow(dead_code)]
            pub(crate) fn as_soft(&self) -> Option<&soft::$name> {
                match &self.0 {
                    Inner::Soft(x) => Some(x),
                    Inner::Verbs(_) => None,
                }
            }

            /// The verbs provider's object, if this is one.
            #[allow(dead_code)]
            pub(crate) fn as_verbs(&self) -> Option<&verbs::$name> {
                match &self.0 {
                    Inner::Verbs(x) => Some(x),
                    Inner::Soft(_) => None,
                }
            }

            /// Which provider this object belongs to.
            pub fn provider(&self) -> ProviderKind {
                match &self.0 {
                    Inner::Soft(_) => ProviderKind::Soft,
                    Inner::Verbs(_) => ProviderKind::Verbs,
                }
            }
        }

        impl From<soft::$name> for $name {
            fn from(x: soft::$name) -> Self {
                $name(Inner::Soft(x))
            }
        }

        impl From<verbs::$name> for $name {
            fn from(x: verbs::$name) -> Self {
                $name(Inner::Verbs(x))
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self.provider())
            }
        }
    };
}

#[derive(Clone)]
enum Inner<S, V> {
    Soft(S),
    Verbs(V),
}

wrapper! {
    /// An RDMA device (`ibv_context`). Cheap to clone.
    #[derive(Clone)]
    Device
}
wrapper! {
    /// A protection domain. Memory regions, windows and QPs of one PD may be used together;
    /// a remote access through a QP of another PD fails with REM_ACCESS_ERR.
    #[derive(Clone)]
    Pd
}
wrapper! {
    /// A registered memory region. Owns its memory (or, from [`Pd::register_raw`], borrows it
    /// under the caller's promise); deregisters on drop.
    Mr
}
wrapper! {
    /// A type-2 memory window: a remote key over a sub-range of a memory region with its own
    /// access rights, bound and invalidated through work requests on one QP.
    Mw
}
wrapper! {
    /// A completion queue. Cheap to clone; QPs keep theirs alive.
    #[derive(Clone)]
    Cq
}
wrapper! {
    /// A reliable-connected queue pair with its connection.
    Qp
}
wrapper! {
    /// A shared receive queue: receive work requests that any QP created with it
    /// ([`QpInit::srq`]) consumes. Cheap to clone; QPs keep theirs alive.
    #[derive(Clone)]
    Srq
}
wrapper! {
    /// A passive connection endpoint listening on an address.
    Listener
}
wrapper! {
    /// An incoming connection request, to accept (via [`ConnRequest::create_qp`] then
    /// [`Qp::accept`]) or [`ConnRequest::reject`]. Dropping it rejects it without data.
    ConnRequest
}
wrapper! {
    /// An address resolved to a local device, ready to [`Resolved::connect`].
    Resolved
}

mod cm;
mod cq;
mod device;
mod memory;
mod qp;
mod send_batch;

pub(crate) use cm::check_private_data;
pub use cm::{resolve, Connected};
pub use cq::CqReady;
pub use qp::QpInit;
pub use send_batch::SendBatch;
