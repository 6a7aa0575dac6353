//! Issue #15 end to end: TCP connections to the target's soft listener that never send a
//! connect request must not delay a real host's connect. Before the fix the listener read each
//! connect request in turn with a 5 s limit, so 50 silent peers held a host up for 250 s.
//!
//! Soft provider only (a silent TCP peer means nothing to an RDMA CM listener); on verbs the
//! test says so and returns.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use rdmablk::fabric::ProviderKind;

const SILENT_PEERS: usize = 50;

/// Admin queue, one I/O queue, a write and a read back: what a host does to start using a
/// namespace. Returns how long it took.
fn connect_and_io(addr: SocketAddr, seed: u64) -> Duration {
    let start = Instant::now();
    let (_admin, cntlid) = admin_queue(addr, 0);
    let mut q = io_queue(addr, 1, cntlid);
    let took = start.elapsed();
    let data = pattern(seed, 4096);
    q.write_data(0, &data);
    let c = q.rw(true, 1, seed, 8);
    assert!(c.status.is_success(), "write: {}", c.status);
    q.write_data(0, &[0; 4096]);
    let c = q.rw(false, 1, seed, 8);
    assert!(c.status.is_success(), "read: {}", c.status);
    assert_eq!(q.read_data(0, 4096), data);
    took
}

#[test]
fn fifty_silent_tcp_peers_do_not_delay_a_host_connect() {
    if e2e_fabric().0 != ProviderKind::Soft {
        eprintln!("silent_peers: skipped, soft provider only (RDMABLK_E2E_PROVIDER is not soft)");
        return;
    }
    let (t, addr) = start_target("32MiB", "");
    let alone = connect_and_io(addr, 1);
    wait_idle(&t);

    let silent: Vec<TcpStream> = (0..SILENT_PEERS)
        .map(|_| TcpStream::connect(addr).expect("silent TCP connect"))
        .collect();
    // Each CM connect in admin_queue / io_queue gives up after 10 s; serialized behind 50
    // silent peers it would wait 250 s. That is all this bound catches: no timing is asserted.
    let behind = connect_and_io(addr, 2);
    eprintln!(
        "silent_peers: admin + I/O queue connect took {:.1} ms alone, {:.1} ms with \
         {SILENT_PEERS} silent TCP peers open",
        alone.as_secs_f64() * 1e3,
        behind.as_secs_f64() * 1e3
    );
    // Idle with the silent peers still open: they hold no connection, arena or parcel.
    wait_idle(&t);
    drop(silent);
    t.shutdown();
}
