//! The software RDMA provider: reliable-connected (RC) queue pairs emulated in userspace over
//! TCP, one TCP connection per QP, so the target, the initiator and the tests run on machines
//! (and between processes or hosts) without an RNIC.
//!
//! It keeps the verbs semantics the rest of rdmablk relies on: one-sided WRITE / READ checked
//! against rkeys, ranges, access rights, PDs and type-2 memory-window bindings and executed by
//! a provider thread without the responder application; SEND consuming posted receives with
//! RNR retry; in-order completions; the error state flushing everything. The frame format is in
//! [`wire`] and drawn in `docs/soft-provider.md`.
//!
//! Layout: [`device`] (the `soft0` device, PDs, key table), [`mr`] (regions, windows, access
//! checks), [`cq`], [`queue`] (the send queue ring), [`recv_queue`] (a QP's receive side: its
//! own ring or a shared one), [`srq`] (shared receive queues), [`qp`], [`tx`] and [`rx`] (a
//! QP's transmit and receive sides; [`rxbuf`] the receive buffer), [`cm`] (listen / connect /
//! accept / reject), [`handshake`] (the listener thread: connect requests read without one peer
//! blocking another), [`event`] (eventfds, timerfds, epoll sets).

mod cm;
mod cq;
mod device;
mod event;
mod handshake;
mod mr;
mod qp;
mod queue;
mod recv_queue;
mod rx;
mod rxbuf;
mod srq;
mod tx;
pub mod wire;

pub use cm::{ConnRequest, Listener, Resolved};
pub use cq::Cq;
pub use device::{Device, Pd, DEVICE_NAME};
pub use mr::{Mr, Mw};
pub use qp::Qp;
pub use srq::Srq;

/// See [`crate::fabric::SendBatch`].
pub(crate) fn batch_begin() {
    tx::batch_begin();
}

/// See [`crate::fabric::SendBatch`].
pub(crate) fn batch_end() {
    tx::batch_end();
}

#[cfg(test)]
mod tests;
