//! NVMe/RDMA through each worker's shared receive queue (SRQ, `arena.receive_buffers`): an
//! idle queue holds one page of the arena, a host over its queue size loses the queue, every
//! buffer a closed queue held goes back to the SRQ, and `receive_buffers = 0` keeps a receive
//! queue per connection. On the soft provider by default, on verbs as e2e_soft runs.

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
    init_tracing();
    let t = start_on_free_port(|port| {
        config_text(port, "64MiB", "").replace("[arena]\n", &format!("[arena]\n{arena_extra}\n"))
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
