//! NVMe/RDMA on a device whose completion queues are small: a worker makes another CQ when
//! its CQs have no room for a connecting queue's share, serves queues on every CQ (waking
//! for a completion on any of them), and reuses the room that closed queues give back. On
//! the soft provider its CQs are made small (`RDMABLK_SOFT_MAX_CQE`, as rxe's 32,767 are
//! small for a thousand controllers); on verbs the device's own limit applies.

mod common;

use std::time::Duration;

use common::*;
use rdmablk_target::nvmf::transport::CompletionQueues;
use rdmablk_target::Target;

/// Entries of a soft CQ in this test binary: with the 1,024 receives of the worker's SRQ
/// kept free, 976 for queues, room for 7 controllers (admin and one I/O queue, 32 deep:
/// 66 + 66 entries).
const SOFT_MAX_CQE: &str = "2000";

/// Controllers connected: enough for 3 CQs on the soft provider.
const CONTROLLERS: usize = 18;

/// The SRQ's receives each CQ keeps room for (`arena.receive_buffers`' default).
const RECEIVE_BUFFERS: u64 = 1024;

fn start() -> (Target, std::net::SocketAddr) {
    static SMALL_CQS: std::sync::Once = std::sync::Once::new();
    // Before any soft device is opened in this process (it reads the limit once).
    SMALL_CQS.call_once(|| std::env::set_var("RDMABLK_SOFT_MAX_CQE", SOFT_MAX_CQE));
    init_tracing();
    let t = start_on_free_port(|port| {
        config_text(port, "64MiB", "").replace("max_connections = 16", "max_connections = 1000")
    });
    let addr = t.local_addrs()[0];
    (t, addr)
}

fn cqs(t: &Target) -> CompletionQueues {
    let all = t.completion_queues();
    assert_eq!(all.len(), 1, "one worker: {all:?}");
    all[0]
}

/// Connects `n` controllers (admin + one I/O queue each), each answering a flush.
fn connect(addr: std::net::SocketAddr, n: usize) -> Vec<(Host, Host)> {
    (0..n)
        .map(|i| {
            let (admin, cntlid) = admin_queue(addr, 0);
            let mut io = io_queue(addr, 1, cntlid);
            let c = io.submit(rdmablk::nvme::io::flush_sqe(1, 0), &[]);
            assert!(c.status.is_success(), "controller {i}: flush {}", c.status);
            (admin, io)
        })
        .collect()
}

/// Verified writes and reads on the first controller, one in the middle and the last (on
/// the first, a middle and the last CQ), each after a pause long enough for the worker to
/// sleep: its completions must wake it whichever CQ they land on.
fn io_on_every_cq(hosts: &mut [(Host, Host)], what: &str) {
    let last = hosts.len() - 1;
    for i in [last, last / 2, 0] {
        std::thread::sleep(Duration::from_millis(300));
        write_read_each_size(&mut hosts[i].1, &format!("{what}: controller {i}"));
        keep_alive(&mut hosts[i].0)
            .unwrap_or_else(|e| panic!("{what}: controller {i}'s admin queue: {e}"));
    }
}

#[test]
fn a_worker_makes_completion_queues_as_queues_arrive() {
    if skip_unless_rdma("a_worker_makes_completion_queues_as_queues_arrive") {
        return;
    }
    let (t, addr) = start();
    let first = cqs(&t);
    assert_eq!((first.count, first.reserved), (1, 0), "{first:?}");
    let per_controller = 2 * (2 * u64::from(DEPTH) + 2);
    let (n, want_cqs) = if first.entries <= 2000 {
        (CONTROLLERS, 3)
    } else {
        // A verbs device (rxe in the VM: 32,767 entries, 241 such controllers per CQ):
        // enough controllers for a second CQ.
        let per_cq = (u64::from(first.entries) - RECEIVE_BUFFERS) / per_controller;
        (per_cq as usize + 2, 2)
    };
    let mut hosts = connect(addr, n);
    let grown = cqs(&t);
    assert!(
        grown.count >= want_cqs,
        "{n} controllers on CQs of {} entries: {grown:?}",
        grown.entries
    );
    assert_eq!(grown.reserved, n as u64 * per_controller, "{grown:?}");
    io_on_every_cq(&mut hosts, "grown");

    // Closed queues give their room back; the next hosts reuse it, no CQ more is made.
    drop(hosts);
    wait_idle(&t);
    let idle = cqs(&t);
    assert_eq!(
        (idle.count, idle.reserved),
        (grown.count, 0),
        "after the hosts left: {idle:?}"
    );
    let mut hosts = connect(addr, n);
    let again = cqs(&t);
    assert_eq!(
        (again.count, again.reserved),
        (grown.count, grown.reserved),
        "{again:?}"
    );
    io_on_every_cq(&mut hosts, "reconnected");
    drop(hosts);
    wait_idle(&t);
    t.shutdown();
}
