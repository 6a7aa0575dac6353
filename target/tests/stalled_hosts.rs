//! Hosts that stop taking what the target sends: one that stops posting receives (its
//! responses meet Receiver Not Ready forever: the target's RNR retry count is "infinite",
//! as in nvmet and SPDK) must cost its neighbours nothing, and the target must give up on it
//! after `target.response_timeout_ms`, freeing its queue and memory.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rdmablk::nvme::Status;

/// Connects an I/O queue that gets `depth` receives posted once and never again.
fn stalled_queue(addr: std::net::SocketAddr, cntlid: u16, depth: u16) -> Host {
    let cm = cm_request(1, depth).encode().to_vec();
    // The host's own RNR retry count does not matter here: the target is the sender that
    // meets the missing receives.
    let mut h = Host::connect_rnr(addr, cm, u32::from(depth), 7).expect("I/O CM connect");
    let c = h.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
    assert!(c.status.is_success(), "I/O connect: {}", c.status);
    h
}

#[test]
fn a_host_that_stops_taking_responses_is_cut_off_and_its_neighbour_never_notices() {
    let response_timeout = Duration::from_millis(1000);
    let (t, addr) = start_target(
        "64MiB",
        &format!("response_timeout_ms = {}", response_timeout.as_millis()),
    );
    // The neighbour: its own controller and I/O queue, verified I/O throughout.
    let (n_admin, n_cntlid) = admin_queue(addr, 0);
    let mut n_io = io_queue(addr, 1, n_cntlid);
    let mut neighbour_io = |round: u64| {
        let data = pattern(round, 8 * BLOCK as usize);
        n_io.write_data(0, &data);
        assert_status(&n_io.rw(true, 1, round % 64, 8), Status::SUCCESS);
        n_io.write_data(0, &vec![0u8; data.len()]);
        assert_status(&n_io.rw(false, 1, round % 64, 8), Status::SUCCESS);
        assert_eq!(n_io.read_data(0, data.len()), data, "round {round}");
    };
    neighbour_io(0);

    // The stalled host: its connection's receives (6) are used by the responses to its first
    // 6 commands, which it never reads or replaces; the responses to the next 6 find no
    // receive. Flushes keep the capsules data-free.
    let (s_admin, s_cntlid) = admin_queue(addr, 0);
    let depth = 6u16;
    let s_io = stalled_queue(addr, s_cntlid, depth);
    let flush = |cid: u16| {
        s_io.send_capsule(&rdmablk::nvme::io::flush_sqe(1, 200 + cid).to_bytes());
    };
    for cid in 0..depth - 1 {
        flush(cid);
    }
    // The host stops taking responses with the sixth: the target's sends last make progress
    // when that one is taken, after this instant, so its `response_timeout_ms` cannot run out
    // before `response_timeout` from here.
    let stall_began = Instant::now();
    flush(depth - 1);
    // The first six are answered (into the host's six receives) before the next six arrive.
    s_io.wait_untaken_responses(usize::from(depth));
    for cid in depth..2 * depth {
        flush(cid);
    }

    // The neighbour keeps working while the target retries the stalled responses, and after.
    let mut round = 1;
    let give_up = Instant::now() + HANG_GUARD;
    while !s_io.wait_disconnected(Duration::from_millis(10)) {
        neighbour_io(round);
        round += 1;
        assert!(
            Instant::now() < give_up,
            "the target never gave up on a host that takes no responses"
        );
    }
    let cut_after = stall_began.elapsed();
    assert!(
        cut_after >= response_timeout,
        "cut off {cut_after:?} after the host stopped taking responses, before \
         response_timeout_ms ({response_timeout:?})"
    );
    eprintln!("cut off {cut_after:?} after the host stopped taking responses");
    for _ in 0..50 {
        neighbour_io(round);
        round += 1;
    }
    // The stalled host's controller is still there (its admin queue is fine): the host can
    // connect a new I/O queue and carry on.
    drop(s_io);
    let mut again = io_queue(addr, 1, s_cntlid);
    assert_status(&again.rw(false, 1, 0, 8), Status::SUCCESS);
    drop((again, s_admin, n_io, n_admin));
    wait_idle(&t);
    t.shutdown();
}
