//! The target the NVMe/TCP-only tests run against (a tcp listener on 127.0.0.1, the common
//! configuration's subsystem, two hosts admitted), what they wait for on it, and the check
//! that a target checks the digests a connection negotiates (run on every target the
//! conformance rows start over NVMe/TCP with digests).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::transport::tcp::{pdu_type, Fes, TermReq, CAPSULE_CMD_HLEN, DATA_HLEN};
use rdmablk::nvme::Status;
use rdmablk_target::Target;

use super::tcp_wire::TcpWire;
use super::{init_tracing, tcp_config_text, HANG_GUARD};

/// Checks that target `t` checks both digests when a connection negotiates them,
/// as the conformance run over NVMe/TCP with digests has every target it starts checked
/// (`RDMABLK_E2E_TCP_DIGESTS=1`): a Connect whose data digest is wrong completes with
/// Transient Transport Error (its data is bad, not its PDU), and one whose header digest is
/// wrong gets a C2HTermReq (FES 3) and the connection closes. Neither makes a controller, and
/// this returns once the target holds neither connection.
pub fn assert_target_checks_digests(t: &Target) {
    let addr = t.local_addrs()[0];
    let w = TcpWire::connect(addr, true, true);
    let mut sqe = w.connect_sqe(0, 31);
    sqe.cid = 1;
    w.corrupt_next_data_digest();
    w.send_capsule(&sqe, &w.connect_data(CNTLID_DYNAMIC));
    let c = w.recv_response();
    assert_eq!(
        c.status,
        Status::TRANSIENT_TRANSPORT_ERROR,
        "a Connect whose data digest is wrong, with digests on: {}",
        c.status
    );
    drop(w);
    let mut w = TcpWire::connect(addr, true, true);
    let mut pdu = w.capsule_pdu(&sqe, &w.connect_data(CNTLID_DYNAMIC));
    pdu[CAPSULE_CMD_HLEN] ^= 0xFF;
    w.send(&pdu).expect("a capsule sent");
    let (l, header, _) = w.recv().expect("a C2HTermReq");
    assert_eq!(
        l.pdu_type,
        pdu_type::C2H_TERM_REQ,
        "a wrong header digest's answer"
    );
    let r = TermReq::decode(header[..DATA_HLEN].try_into().expect("24 bytes"));
    assert_eq!(
        r,
        (Some(Fes::HeaderDigestError), 0),
        "a wrong header digest"
    );
    w.wait_closed();
    drop(w);
    wait_held(t, 0);
}

/// A target with one NVMe/TCP listener on 127.0.0.1 and one worker.
pub fn start() -> (Target, SocketAddr) {
    start_with("", 32)
}

/// [`start`] with `extra_target` lines in its `[target]` table and I/O queues up to
/// `max_queue_depth` deep.
pub fn start_with(extra_target: &str, max_queue_depth: u32) -> (Target, SocketAddr) {
    start_with_arena(extra_target, max_queue_depth, "64MiB")
}

/// [`start_with`] with an arena of `arena` bytes (as the config writes them).
pub fn start_with_arena(
    extra_target: &str,
    max_queue_depth: u32,
    arena: &str,
) -> (Target, SocketAddr) {
    start_with_limits(extra_target, max_queue_depth, arena, "")
}

/// [`start_with_arena`] with `extra_limits` lines in its `[limits]` table.
pub fn start_with_limits(
    extra_target: &str,
    max_queue_depth: u32,
    arena: &str,
    extra_limits: &str,
) -> (Target, SocketAddr) {
    init_tracing();
    let text = |port| tcp_config_text(port, arena, extra_target, max_queue_depth, extra_limits);
    let t = Target::start_on_picked_port(text, || rdmablk_testkit::free_port("127.0.0.1"))
        .unwrap_or_else(|e| panic!("target starts: {e:?}"));
    let addr = t.local_addrs()[0];
    (t, addr)
}

/// Waits (up to [`HANG_GUARD`]) until the target holds `connections` connections; an
/// NVMe/TCP queue never takes an arena parcel (its capsules are in ordinary memory, its data
/// in the worker's pool).
pub fn wait_held(t: &Target, connections: usize) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let s = t.arena_stats();
        assert_eq!(s.parcels, 0, "NVMe/TCP queues hold arena parcels: {s:?}");
        if t.queues_open() == connections {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the target holds {} connections and {s:?}, not {connections}",
            t.queues_open()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}
