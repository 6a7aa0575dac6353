//! Reaching every worker during a reload: a message to each (with or without waiting for
//! every answer), and retiring a namespace (each worker closes its queue once the I/O in
//! flight there is done, the namespace is flushed and its slot freed).

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::bounded;

use crate::namespace::Namespace;
use crate::nvmf::worker::ns_queues::Ack;
use crate::nvmf::worker::WorkerMsg;
use crate::nvmf::Shared;

/// How long workers get to finish a removed namespace's I/O and flush it.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(40);

/// Closes every worker's queue to `ns` (after its I/O), flushes it, frees its slot.
pub(super) fn retire(shared: &Shared, ns: &Arc<Namespace>) {
    let slot = ns.slot();
    if let Err(e) = broadcast(shared, CLOSE_TIMEOUT, |ack| {
        WorkerMsg::CloseNamespace(slot, ack)
    }) {
        tracing::error!(nsid = ns.nsid(), error = %e, "closing a removed namespace");
    }
    shared.namespaces.release(slot);
}

/// Sends a message made by `make` to every worker and waits for every answer.
pub(super) fn broadcast(
    shared: &Shared,
    timeout: Duration,
    make: impl Fn(Ack) -> WorkerMsg,
) -> Result<(), String> {
    let workers = shared.workers.get().cloned().unwrap_or_default();
    let (tx, rx) = bounded(workers.len().max(1));
    let mut sent = 0;
    for w in &workers {
        if w.send(make(tx.clone())).is_ok() {
            sent += 1;
        }
    }
    for _ in 0..sent {
        match rx.recv_timeout(timeout) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(format!("a worker did not answer in {timeout:?}")),
        }
    }
    Ok(())
}

/// Sends a message made by `make` to every worker, without waiting.
pub(super) fn send_all(shared: &Shared, make: impl Fn() -> WorkerMsg) {
    for w in shared.workers.get().into_iter().flatten() {
        let _ = w.send(make());
    }
}
