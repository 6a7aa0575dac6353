//! NVMe/RDMA through each worker's shared receive queue (SRQ, `arena.receive_buffers`): an
//! idle queue holds one page of the arena, a host over its queue size loses the queue, every
//! buffer a closed queue held goes back to the SRQ, and `receive_buffers = 0` keeps a receive
//! queue per connection; push windows never take the pages the queues still allowed need.
//! On the soft provider by default, on verbs as e2e_soft runs.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rdmablk::fabric::WcOpcode;
use rdmablk_target::arena::{ParcelLayout, PAGE_BYTES};
use rdmablk_target::config::Config;
use rdmablk_target::nvmf::transport::ReceiveBuffers;
use rdmablk_target::Target;

/// Starts a target whose `[arena]` table also says `arena_extra`.
fn start_with(arena_extra: &str) -> (Target, std::net::SocketAddr) {
    start_with_target(arena_extra, "")
}

/// [`start_with`], and `target_extra` in its `[target]` table.
fn start_with_target(arena_extra: &str, target_extra: &str) -> (Target, std::net::SocketAddr) {
    init_tracing();
    let t = start_on_free_port(|port| {
        config_text(port, "64MiB", target_extra)
            .replace("[arena]\n", &format!("[arena]\n{arena_extra}\n"))
    });
    let addr = t.local_addrs()[0];
    (t, addr)
}

/// The only worker's shared receive buffers.
fn srq(t: &Target) -> ReceiveBuffers {
    let all = t.receive_buffers();
    assert_eq!(all.len(), 1, "one worker with an SRQ: {all:?}");
    all[0]
}

/// Waits (bounded by [`HANG_GUARD`]) until `posted` buffers are in the SRQ.
fn wait_posted(t: &Target, posted: u32) {
    let deadline = Instant::now() + HANG_GUARD;
    while srq(t).posted != posted {
        assert!(
            Instant::now() < deadline,
            "SRQ posted {:?}, want {posted}",
            srq(t)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An I/O queue `depth` deep whose host then stops reposting its receives: `depth` flushes
/// are answered (and their responses taken, so the target has the host's ACKs before any
/// later capsule), every later response SEND waits (RNR) and keeps its request context busy,
/// so capsules beyond `depth` more wait in their receive buffers.
fn stuck_queue(addr: std::net::SocketAddr, cntlid: u16, depth: u16) -> Host {
    let h = io_queue(addr, 1, cntlid);
    assert_eq!(h.depth, u32::from(depth), "common::DEPTH");
    send_flushes(&h, 1, depth);
    for _ in 0..depth {
        response_without_repost(&h);
    }
    h
}

fn send_flushes(h: &Host, first_cid: u16, n: u16) {
    for cid in first_cid..first_cid + n {
        h.send_capsule(&rdmablk::nvme::io::flush_sqe(1, cid).to_bytes());
    }
}

/// Waits for a receive of the host to complete (a response), without reposting it.
fn response_without_repost(h: &Host) {
    let deadline = Instant::now() + HANG_GUARD;
    let mut wc = [rdmablk::fabric::Wc::default()];
    loop {
        if h.rdma().cq.poll(&mut wc).unwrap() == 1 && wc[0].opcode == WcOpcode::Recv {
            assert!(wc[0].status.is_success(), "{:?}", wc[0]);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no response within {HANG_GUARD:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn an_idle_controller_holds_a_page_per_queue_of_the_arena() {
    if skip_unless_rdma("an_idle_controller_holds_a_page_per_queue_of_the_arena") {
        return;
    }
    const CONTROLLERS: usize = 6;
    for (extra, per_queue) in [
        ("", PAGE_BYTES),
        (
            "receive_buffers = 0",
            ParcelLayout::without_data(DEPTH, ICD).total_bytes,
        ),
    ] {
        let (t, addr) = start_with(extra);
        let mut hosts = Vec::new();
        for _ in 0..CONTROLLERS {
            let (admin, cntlid) = admin_queue(addr, 0);
            let mut io = io_queue(addr, 1, cntlid);
            let c = io.submit(rdmablk::nvme::io::flush_sqe(1, 0), &[]);
            assert!(c.status.is_success(), "{}", c.status);
            hosts.push((admin, io));
        }
        let s = t.arena_stats();
        assert_eq!(s.parcels, 2 * CONTROLLERS, "{extra:?}: {s:?}");
        assert_eq!(
            s.bytes_in_use,
            2 * CONTROLLERS * per_queue,
            "{extra:?}: {s:?} (the SRQ's buffers count as pool bytes, once per worker)"
        );
        if extra.is_empty() {
            let r = srq(&t);
            assert_eq!(
                (r.count, r.posted),
                (1024, 1024),
                "idle: every buffer posted"
            );
        } else {
            assert!(
                t.receive_buffers().is_empty(),
                "no SRQ with receive_buffers = 0"
            );
            // Today's path still serves I/O.
            write_read_each_size(&mut hosts[0].1, "receive_buffers = 0");
        }
        drop(hosts);
        wait_idle(&t);
        t.shutdown();
    }
}

#[test]
fn a_host_sending_more_commands_than_its_queue_size_loses_the_queue() {
    if skip_unless_rdma("a_host_sending_more_commands_than_its_queue_size_loses_the_queue") {
        return;
    }
    let (t, addr) = start_with("");
    let (admin, cntlid) = admin_queue(addr, 0);
    const D: u16 = DEPTH as u16;
    let h = stuck_queue(addr, cntlid, D);
    // D with their responses waiting for the host, then D capsules waiting for a request
    // context in their buffers: the queue is full, not over.
    send_flushes(&h, 101, 2 * D);
    wait_posted(&t, 1024 - u32::from(D));
    assert!(
        !h.wait_disconnected(Duration::ZERO),
        "within the queue size"
    );
    send_flushes(&h, 200, 1);
    assert!(
        h.wait_disconnected(HANG_GUARD),
        "the queue is closed when its host goes over its queue size"
    );
    // The buffers it held went back.
    wait_posted(&t, 1024);
    drop(h);
    drop(admin);
    wait_idle(&t);
    assert_eq!(srq(&t).posted, 1024);
    t.shutdown();
}

#[test]
fn buffers_held_by_a_closed_queue_go_back_to_the_srq() {
    if skip_unless_rdma("buffers_held_by_a_closed_queue_go_back_to_the_srq") {
        return;
    }
    let (t, addr) = start_with("receive_buffers = 64");
    let (admin, cntlid) = admin_queue(addr, 0);
    const D: u16 = DEPTH as u16;
    let h = stuck_queue(addr, cntlid, D);
    send_flushes(&h, 101, D + 2);
    assert_eq!(srq(&t).count, 64);
    wait_posted(&t, 64 - 2);
    // The host vanishes with two capsules unread.
    drop(h);
    wait_posted(&t, 64);
    // A new queue is served by the same buffers.
    let mut q = io_queue(addr, 1, cntlid);
    write_read_each_size(&mut q, "after a closed queue");
    drop(q);
    drop(admin);
    wait_idle(&t);
    let r = srq(&t);
    assert_eq!(r.posted, r.count);
    t.shutdown();
}

/// Commands a test host keeps in flight per queue: its capsule slots (a capsule is not
/// rewritten while its SEND may still be retried).
const IN_FLIGHT: u16 = CMD_SLOTS as u16;

/// Sends `IN_FLIGHT` 4 KiB reads or writes on `q` (LBAs from `first_lba`, host data at
/// `i x 4 KiB`) without waiting.
fn send_rw(q: &Host, write: bool, first_lba: u64) {
    let blocks = 4096 / BLOCK;
    for i in 0..IN_FLIGHT {
        let sgl = q.keyed(usize::from(i) * 4096, 4096);
        let mut sqe = rw_sqe(
            write,
            1,
            first_lba + u64::from(i * blocks as u16),
            blocks,
            &sgl,
        );
        sqe.cid = 1000 + i;
        q.send_capsule(&sqe.to_bytes());
    }
}

fn wait_all(q: &mut Host, what: &str) {
    for i in 0..IN_FLIGHT {
        let c = q
            .wait_response()
            .unwrap_or_else(|e| panic!("{what}: response {i}: {e}"));
        assert!(c.status.is_success(), "{what}: {}", c.status);
    }
}

#[test]
fn many_queues_on_a_small_srq_wait_on_rnr_and_lose_nothing() {
    if skip_unless_rdma("many_queues_on_a_small_srq_wait_on_rnr_and_lose_nothing") {
        return;
    }
    // 6 queues x 12 commands in flight on 16 buffers: hosts' SENDs find the SRQ empty and
    // retry (RNR), which is backpressure, not an error.
    let (t, addr) = start_with("receive_buffers = 16");
    let admins: Vec<(Host, u16)> = (0..6).map(|_| admin_queue(addr, 0)).collect();
    let mut qs: Vec<Host> = admins.iter().map(|(_, c)| io_queue(addr, 1, *c)).collect();
    let lba = |n: usize| n as u64 * 1024;
    for (n, q) in qs.iter().enumerate() {
        for i in 0..usize::from(IN_FLIGHT) {
            q.write_data(i * 4096, &pattern((n * 100 + i) as u64, 4096));
        }
        send_rw(q, true, lba(n));
    }
    for q in qs.iter_mut() {
        wait_all(q, "write");
    }
    for (n, q) in qs.iter().enumerate() {
        q.write_data(0, &vec![0; usize::from(IN_FLIGHT) * 4096]);
        send_rw(q, false, lba(n));
    }
    for (n, q) in qs.iter_mut().enumerate() {
        wait_all(q, "read");
        for i in 0..usize::from(IN_FLIGHT) {
            let want = pattern((n * 100 + i) as u64, 4096);
            assert_eq!(q.read_data(i * 4096, 4096), want, "queue {n} block {i}");
        }
    }
    wait_posted(&t, 16);
    eprintln!("{:?}", srq(&t));
    drop(qs);
    drop(admins);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn a_dry_srq_holds_other_hosts_back_until_buffers_return() {
    if skip_unless_rdma("a_dry_srq_holds_other_hosts_back_until_buffers_return") {
        return;
    }
    let (t, addr) = start_with("receive_buffers = 16");
    // Another controller's queue, connected while buffers are there.
    let (other_admin, other_cntlid) = admin_queue(addr, 0);
    let mut other = io_queue(addr, 1, other_cntlid);
    // A stuck queue whose waiting capsules hold all 16 buffers.
    let (admin, cntlid) = admin_queue(addr, 0);
    const D: u16 = DEPTH as u16;
    let h = stuck_queue(addr, cntlid, D);
    send_flushes(&h, 101, D + 16);
    wait_posted(&t, 0);
    assert!(srq(&t).low_total > 0, "{:?}", srq(&t));
    // The other host's command finds no buffer: its SEND retries (RNR) until the stuck host
    // goes and its buffers return.
    other.send_capsule(&rdmablk::nvme::io::flush_sqe(1, 7).to_bytes());
    drop(h);
    let c = other.wait_response().expect("served once buffers return");
    assert!(c.status.is_success(), "{}", c.status);
    write_read_each_size(&mut other, "after the SRQ ran dry");
    wait_posted(&t, 16);
    drop(other);
    drop(other_admin);
    drop(admin);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn commands_waiting_for_a_data_buffer_hold_no_receive_buffer() {
    if skip_unless_rdma("commands_waiting_for_a_data_buffer_hold_no_receive_buffer") {
        return;
    }
    // A pool of two of the largest buffers, held by writes whose responses cannot reach
    // their host (it posts no receives any more).
    // (No response timeout: the queue stays, holding what it holds, until the host goes.)
    let (t, addr) = start_with_target(
        "data_bytes = \"256KiB\"\nreceive_buffers = 16",
        "response_timeout_ms = 0",
    );
    let (admin, cntlid) = admin_queue(addr, 0);
    let h = stuck_queue(addr, cntlid, DEPTH as u16);
    let write = |cid: u16, lba: u64| {
        let sgl = h.keyed(usize::from(cid % 2) * MAX_IO as usize, MAX_IO);
        let mut sqe = rw_sqe(true, 1, lba, MAX_IO / BLOCK, &sgl);
        sqe.cid = cid;
        h.send_capsule(&sqe.to_bytes());
    };
    write(200, 0);
    write(201, 256);
    // Four more wait for a buffer; their capsules (keyed SGLs, nothing in them) go back to
    // the SRQ at once.
    for i in 0..4u16 {
        write(210 + i, 512 + u64::from(i) * 256);
    }
    let deadline = Instant::now() + HANG_GUARD;
    // (At least four: the pool's share rule may keep the second buffer from this host too.)
    while t.data_pool_waiting() < 4 {
        assert!(
            Instant::now() < deadline,
            "waiting {}",
            t.data_pool_waiting()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    wait_posted(&t, 16);
    drop(h);
    drop(admin);
    wait_idle(&t);
    assert_eq!(srq(&t).posted, 16);
    t.shutdown();
}

#[test]
fn two_hundred_connect_io_disconnect_cycles_leave_the_srq_full() {
    if skip_unless_rdma("two_hundred_connect_io_disconnect_cycles_leave_the_srq_full") {
        return;
    }
    let (t, addr) = start_with("receive_buffers = 64");
    for cycle in 0..200u64 {
        // A controller per cycle: its queues' QP numbers are freed (and, on verbs, reused).
        let (admin, cntlid) = admin_queue(addr, 0);
        let mut q = io_queue(addr, 1, cntlid);
        let data = pattern(cycle, 4096);
        q.write_data(0, &data);
        let c = q.rw(true, 1, cycle * 8, 8);
        assert!(c.status.is_success(), "cycle {cycle}: {}", c.status);
        q.write_data(0, &[0; 4096]);
        let c = q.rw(false, 1, cycle * 8, 8);
        assert!(c.status.is_success(), "cycle {cycle}: {}", c.status);
        assert_eq!(q.read_data(0, 4096), data, "cycle {cycle}");
        drop(q);
        drop(admin);
    }
    wait_idle(&t);
    let r = srq(&t);
    assert_eq!(r.posted, r.count, "{r:?}");
    t.shutdown();
}

#[test]
fn receive_buffers_out_of_range_is_refused_with_its_key() {
    for bad in [1, 15, 65_537] {
        let text = config_text(4420, "64MiB", "")
            .replace("[arena]\n", &format!("[arena]\nreceive_buffers = {bad}\n"));
        let e = Config::from_str(&text).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("arena.receive_buffers"), "{bad}: {msg}");
    }
    for good in [0, 16, 1024, 65_536] {
        let text = config_text(4420, "64MiB", "")
            .replace("[arena]\n", &format!("[arena]\nreceive_buffers = {good}\n"));
        let c = Config::from_str(&text).unwrap_or_else(|e| panic!("{good}: {e}"));
        assert_eq!(c.arena.receive_buffers, good);
    }
}

#[test]
fn push_windows_leave_the_arena_room_for_the_queues_still_allowed() {
    if skip_unless_rdma("push_windows_leave_the_arena_room_for_the_queues_still_allowed") {
        return;
    }
    // Outside its data pools and 64 receive buffers the arena has room for about 7 push
    // parcels (128 KiB of push slots and 32 receive slots each): taken first come, they would
    // leave fewer pages than the plain queues still allowed need (a page each).
    const CONTROLLERS: usize = 40;
    init_tracing();
    let t = start_on_free_port(|port| {
        config_text(port, "8MiB", "")
            .replace(
                "[arena]\n",
                "[arena]\ndata_bytes = \"6MiB\"\nreceive_buffers = 64\n",
            )
            .replace(
                "max_connections = 16",
                &format!(
                    "max_connections = {}\npush_window_bytes = 131072",
                    2 * CONTROLLERS
                ),
            )
    });
    let addr = t.local_addrs()[0];
    let mut hosts = Vec::new();
    let mut granted = 0;
    for i in 0..CONTROLLERS {
        let (admin, cntlid) = admin_queue(addr, 0);
        let mut cm = cm_request(1, DEPTH as u16);
        cm.push = Some(rdmablk::nvme::transport::rdma::PushRequest {
            slots: 0,
            slot_bytes: 0,
        });
        let mut io = Host::connect(addr, cm)
            .unwrap_or_else(|e| panic!("controller {i}'s I/O queue ({granted} pushed): {e}"));
        if matches!(
            io.accept.push,
            rdmablk::nvme::transport::rdma::PushAnswer::Granted(_)
        ) {
            granted += 1;
        }
        let c = io.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
        assert!(
            c.status.is_success(),
            "controller {i}: I/O connect: {}",
            c.status
        );
        hosts.push((admin, io));
    }
    assert!(
        (1..CONTROLLERS).contains(&granted),
        "push granted to {granted} of {CONTROLLERS} queues: {:?}",
        t.arena_stats()
    );
    write_read_each_size(&mut hosts[CONTROLLERS - 1].1, "the last queue");
    drop(hosts);
    wait_idle(&t);
    t.shutdown();
}
