//! NVMe/TCP peers that stall cost other hosts nothing: connections that never send an ICReq,
//! or send half an ICReq or half a command and go quiet, and a host that stops reading its
//! socket. Another host connects and does verified I/O meanwhile on the same (single) worker;
//! the target lets go of each staller by the timer that covers it (`target.connect_timeout_ms`
//! before the Fabrics Connect, the keep-alive timeout after it, `target.response_timeout_ms`
//! for a host that takes nothing), or when it closes, and holds nothing of it afterwards.
//! No timing is asserted beyond "not before its timer": events are waited for, up to
//! `HANG_GUARD`.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::tcp_target::{start, start_with, wait_held};
use common::tcp_wire::{rw_cmd, wait_closed, TcpWire};
use common::{pattern, BLOCK, ICD, MAX_IO};
use rdmablk::nvme::admin::keep_alive_sqe;
use rdmablk::nvme::transport::tcp::{
    encode_capsule_cmd, pdu_type, IcReq, CAPSULE_CMD_HLEN, CH_LEN, IC_LEN,
};
use rdmablk::nvme::{Cqe, InCapsuleSgl, Sgl, Sqe, Status, TransportSgl, CQE_LEN};

const SILENT_PEERS: usize = 50;

/// Writes half of a command capsule's header (a Keep Alive's) and nothing more.
fn half_a_capsule(h: &mut TcpWire) {
    let mut b = [0u8; CAPSULE_CMD_HLEN];
    encode_capsule_cmd(&keep_alive_sqe(77), 0, &h.neg, &mut b);
    h.send(&b[..CAPSULE_CMD_HLEN / 2]).unwrap();
}

/// A verified write and read back of `blocks` at `lba` through `q`: by R2T, and in the
/// capsule too when it fits.
fn verified_io(q: &mut TcpWire, seed: u64, lba: u64, blocks: u32) {
    let data = pattern(seed, (blocks * BLOCK) as usize);
    let (c, _) = q.exec(rw_cmd(true, lba, blocks), &data, 0, false);
    assert_eq!(c.status, Status::SUCCESS, "write by R2T, round {seed}");
    if data.len() as u32 <= ICD {
        let (c, _) = q.exec(rw_cmd(true, lba, blocks), &data, 0, true);
        assert_eq!(
            c.status,
            Status::SUCCESS,
            "write in the capsule, round {seed}"
        );
    }
    let (c, read) = q.exec(rw_cmd(false, lba, blocks), &[], data.len() as u32, false);
    assert_eq!(c.status, Status::SUCCESS, "read, round {seed}");
    assert!(read == data, "data read back, round {seed}");
}

/// A host's admin queue (no keep-alive) and one I/O queue, and a verified write and read.
fn good_host(addr: SocketAddr) -> (TcpWire, TcpWire) {
    let (a, cntlid) = TcpWire::admin_kato(addr, false, false, 0);
    let mut q = TcpWire::io_queue(addr, false, 1, cntlid, 32);
    verified_io(&mut q, 1, 0, 8);
    (a, q)
}

#[test]
fn silent_and_half_sent_connections_cost_a_host_nothing_and_end_at_the_connect_timeout() {
    // Long enough that the good host's few round trips end well inside it.
    let connect_timeout = Duration::from_millis(4000);
    let (t, addr) = start_with(
        &format!("connect_timeout_ms = {}", connect_timeout.as_millis()),
        32,
    );
    let opened = Instant::now();
    let mut quiet: Vec<TcpStream> = (0..SILENT_PEERS)
        .map(|_| TcpStream::connect(addr).expect("TCP connect"))
        .collect();
    let mut half_ic = TcpStream::connect(addr).expect("TCP connect");
    let ic = IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: false,
        ddgst: false,
        maxr2t: 0,
    };
    half_ic.write_all(&ic.encode()[..IC_LEN / 2]).unwrap();
    quiet.push(half_ic);
    let mut half_cmd = TcpWire::connect(addr, false, false);
    half_a_capsule(&mut half_cmd);
    quiet.push(half_cmd.s);
    // Every one of them is the target's (counted from its accept), and none has a window.
    wait_held(&t, SILENT_PEERS + 2);

    // Meanwhile a host connects and does its I/O on the same worker, without waiting for the
    // silent ones to be dropped: they are all still there when it is done.
    let (a, mut q) = good_host(addr);
    assert_eq!(
        t.queues_open(),
        SILENT_PEERS + 4,
        "the silent connections ended before the host was done: it waited for them (or took \
         longer than connect_timeout_ms)"
    );

    // The target ends each of them, not before its connect timeout.
    for s in &mut quiet {
        wait_closed(s);
    }
    assert!(
        opened.elapsed() >= connect_timeout,
        "silent connections closed before target.connect_timeout_ms"
    );
    wait_held(&t, 2);
    verified_io(&mut q, 2, 8, 256);
    drop((q, a, quiet));
    wait_held(&t, 0);
    t.shutdown();
}

/// A connected queue that stops in the middle of a PDU is not timed out by the transport (nor
/// is it by nvmet or SPDK): an I/O queue may be idle for ever. The controller's keep-alive
/// timeout covers it: once the host stops talking the controller and all its queues end.
#[test]
fn a_controller_whose_queues_stop_mid_pdu_ends_at_its_keep_alive_timeout() {
    let (t, addr) = start();
    let kato = Duration::from_millis(1000);
    let (mut a, cntlid) = TcpWire::admin_kato(addr, false, false, kato.as_millis() as u32);
    let mut q = TcpWire::io_queue(addr, false, 1, cntlid, 32);
    verified_io(&mut q, 1, 0, 8);
    // The controller's last sign of life is at the earliest here.
    let last_word = Instant::now();
    let (c, _) = a.exec(keep_alive_sqe(0), &[], 0, false);
    assert_eq!(c.status, Status::SUCCESS, "Keep Alive");
    half_a_capsule(&mut a);
    half_a_capsule(&mut q);
    // Another host goes on meanwhile.
    let (b, mut other) = good_host(addr);
    a.wait_closed();
    q.wait_closed();
    assert!(
        last_word.elapsed() >= kato,
        "closed before the keep-alive timeout"
    );
    wait_held(&t, 2);
    verified_io(&mut other, 2, 8, 8);
    drop((other, b));
    wait_held(&t, 0);
    t.shutdown();
}

/// The stalled host's I/O queue: `depth` deep, with a small receive buffer (the window the
/// target may fill), and `depth` reads of the largest size submitted, whose data it never
/// reads: far more than the socket buffers on both sides hold.
fn stalled_reader(addr: SocketAddr, cntlid: u16, depth: u16) -> TcpWire {
    let s = TcpWire::io_queue(addr, false, 1, cntlid, depth);
    let rcvbuf: libc::c_int = 16 << 10;
    // SAFETY: a valid socket descriptor and option value of the size given.
    let rc = unsafe {
        libc::setsockopt(
            s.s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&rcvbuf as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUF");
    for cid in 0..depth {
        let mut sqe: Sqe = rw_cmd(false, u64::from(cid) * 256, MAX_IO / BLOCK);
        sqe.cid = 1000 + cid;
        sqe.set_sgl(&Sgl::Transport(TransportSgl { len: MAX_IO }));
        s.send_capsule(&sqe, &[]);
    }
    s
}

const STALLED_DEPTH: u16 = 128;

/// What a neighbour does while a host does not read: verified I/O of every kind, while the
/// target's memory in use stays what the queues were given at their connect.
fn neighbour_unaffected(t: &rdmablk_target::Target, q: &mut TcpWire) {
    let held = t.arena_stats();
    for round in 0..16 {
        verified_io(
            q,
            10 + round,
            round * 256,
            if round % 2 == 0 { 8 } else { 256 },
        );
    }
    let now = t.arena_stats();
    assert_eq!(
        (now.bytes_in_use, now.parcels),
        (held.bytes_in_use, held.parcels),
        "the target's memory in use changed while a host did not read"
    );
}

#[test]
fn a_host_that_stops_reading_costs_its_neighbour_nothing_and_is_released_when_it_closes() {
    // Longer than the test: the stalled queue ends because its host closes it.
    let (t, addr) = start_with("response_timeout_ms = 600000", u32::from(STALLED_DEPTH));
    let (a, mut q) = good_host(addr);
    let (sa, s_cntlid) = TcpWire::admin_kato(addr, false, false, 0);
    let s = stalled_reader(addr, s_cntlid, STALLED_DEPTH);
    wait_held(&t, 4);
    neighbour_unaffected(&t, &mut q);
    // The host closes its queue with the target's data unread: everything of it goes.
    drop(s);
    wait_held(&t, 3);
    drop(sa);
    wait_held(&t, 2);
    verified_io(&mut q, 99, 0, 256);
    drop((q, a));
    wait_held(&t, 0);
    t.shutdown();
}

#[test]
fn a_host_that_stops_reading_is_cut_off_at_the_response_timeout() {
    let response_timeout = Duration::from_millis(1000);
    let (t, addr) = start_with(
        &format!("response_timeout_ms = {}", response_timeout.as_millis()),
        u32::from(STALLED_DEPTH),
    );
    let (a, mut q) = good_host(addr);
    let (sa, s_cntlid) = TcpWire::admin_kato(addr, false, false, 0);
    let mut s = stalled_reader(addr, s_cntlid, STALLED_DEPTH);
    let stalled = Instant::now();
    neighbour_unaffected(&t, &mut q);
    // The target gives up on the queue that takes nothing (its admin queue, idle, stays).
    wait_held(&t, 3);
    assert!(
        stalled.elapsed() >= response_timeout,
        "cut off before target.response_timeout_ms"
    );
    // The host, reading at last, gets what had left and then the end of the connection.
    s.wait_closed();
    verified_io(&mut q, 99, 0, 256);
    drop((q, a, sa));
    wait_held(&t, 0);
    t.shutdown();
}

/// In-capsule writes that arrive while every request context of their queue is taken (the
/// queue's reads wait for a host that does not read) wait for one, their data copied out of
/// the connection's receive buffer first: once the host reads again they run and land whole,
/// though 16 MiB more passed through that buffer meanwhile (the reads' data the other way, and
/// the writes' own capsules).
#[test]
fn in_capsule_writes_that_wait_for_a_request_context_land_whole() {
    let (t, addr) = start_with("response_timeout_ms = 600000", u32::from(STALLED_DEPTH));
    let (a, cntlid) = TcpWire::admin_kato(addr, false, false, 0);
    let mut s = stalled_reader(addr, cntlid, STALLED_DEPTH);
    // As many in-capsule writes as the queue is deep: the reads before them hold contexts
    // until their data leaves, which it cannot all do, so some (most) of the writes wait.
    let small: Vec<Vec<u8>> = (0..STALLED_DEPTH)
        .map(|i| pattern(500 + u64::from(i), ICD as usize))
        .collect();
    let lba = |i: u16| u64::from(i) * u64::from(ICD / BLOCK) * 3;
    for (i, data) in small.iter().enumerate() {
        let i = i as u16;
        let mut w = rw_cmd(true, lba(i), ICD / BLOCK);
        w.cid = 3000 + i;
        w.set_sgl(&Sgl::InCapsule(InCapsuleSgl {
            offset: 0,
            len: ICD,
        }));
        s.send_capsule(&w, data);
    }
    // The host reads again: everything comes, the writes' responses after the reads'.
    let mut written = 0;
    while written < STALLED_DEPTH {
        let (l, h, _) = s.recv().expect("a PDU");
        if l.pdu_type == pdu_type::CAPSULE_RESP {
            let c = Cqe::decode(h[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap());
            assert!(c.status.is_success(), "command {}: {}", c.cid, c.status);
            if c.cid >= 3000 {
                written += 1;
            }
        }
    }
    for (i, data) in small.iter().enumerate() {
        let (c, back) = s.exec(rw_cmd(false, lba(i as u16), ICD / BLOCK), &[], ICD, false);
        assert!(c.status.is_success(), "read: {}", c.status);
        assert!(&back == data, "in-capsule write {i} read back differs");
    }
    drop((s, a));
    wait_held(&t, 0);
    t.shutdown();
}
