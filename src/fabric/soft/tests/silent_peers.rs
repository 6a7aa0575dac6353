//! Peers that open TCP to a listener and never finish a connect request must cost the other
//! connects nothing, and are closed at their deadline or when the pending table is full
//! (issue #15: one silent peer used to delay every other connect by up to 5 s).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

use super::*;
use crate::fabric::soft::handshake::HandshakeLimits;
use crate::fabric::soft::wire::{CmBody, Opcode};

/// Opens `n` TCP connections to `addr` that send nothing.
fn silent_peers(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect()
}

/// Waits (up to `bound`, a hang guard only) for the listener to close `s`: true on EOF.
fn closed_by_listener(s: &mut TcpStream, bound: Duration) -> bool {
    s.set_read_timeout(Some(bound)).unwrap();
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Ok(0))
}

/// True if `s` is still open with nothing to read.
fn still_open(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let open = matches!((&*s).read(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    open
}

fn connect_req(private_data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    CmBody {
        initiator_depth: 4,
        responder_resources: 4,
        qpn: 1,
        max_send_wr: 4,
        private_data,
    }
    .encode_frame(Opcode::ConnectReq, &mut out);
    out
}

fn soft_listener(limits: HandshakeLimits) -> crate::fabric::soft::Listener {
    let dev = crate::fabric::soft::Device::open(None).unwrap();
    crate::fabric::soft::Listener::bind_with(dev, "127.0.0.1:0".parse().unwrap(), 128, limits)
        .unwrap()
}

#[test]
fn fifty_silent_peers_do_not_delay_a_real_connect() {
    let l = listener(); // default limits: 5 s deadline
    let addr = l.local_addr();
    let mut silent = silent_peers(addr, 50);

    // The connect and accept below each give up after T (10 s). Read serially, the 50 silent
    // peers ahead of this connect would hold it up 50 x 5 s; that is all this bound catches.
    let t = std::thread::spawn(move || connect(addr, ConnParam::default(), QpCaps::default()));
    let pd = dev().alloc_pd().unwrap();
    let cq = dev().create_cq(64).unwrap();
    let qp = accept(&l, &pd, &cq, &ConnParam::default());
    let (a, _) = t.join().unwrap().expect("connect behind 50 silent peers");

    // Data moves.
    let rmr = pd
        .register(MemBuf::zeroed(64).unwrap(), Access::LOCAL_WRITE)
        .unwrap();
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sgl: &[rmr.sge(0, 64)],
    }])
    .unwrap();
    let smr = a.mr(64, Access::empty());
    smr.write_at(0, b"past the silent ones").unwrap();
    a.qp.post_send(&[sw(2, WrOp::Send, &[smr.sge(0, 20)])])
        .unwrap();
    assert_eq!(wc(&a.cq).status, WcStatus::Success);
    let r = wc(&cq);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 20));
    let mut got = [0u8; 20];
    rmr.read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"past the silent ones");

    // Each silent peer is closed at its deadline; 30 s only guards against a hang.
    for s in &mut silent {
        assert!(closed_by_listener(s, Duration::from_secs(30)));
    }
    assert!(l.get_request(Some(Duration::ZERO)).unwrap().is_none());
}

#[test]
fn a_partial_connect_request_does_not_block_others() {
    let l = soft_listener(HandshakeLimits::default());
    let frame = connect_req(b"slow");
    let mut slow = TcpStream::connect(l.local_addr()).unwrap();
    slow.write_all(&frame[..10]).unwrap(); // part of the header
    let mut fast = TcpStream::connect(l.local_addr()).unwrap();
    fast.write_all(&connect_req(b"fast")).unwrap();
    let req = l
        .get_request(Some(T))
        .unwrap()
        .expect("the complete request");
    assert_eq!(req.private_data(), b"fast");
    // The rest arrives in two more pieces, split inside the body.
    slow.write_all(&frame[10..40]).unwrap();
    assert!(l
        .get_request(Some(Duration::from_millis(50)))
        .unwrap()
        .is_none());
    slow.write_all(&frame[40..]).unwrap();
    let req = l.get_request(Some(T)).unwrap().expect("the slow request");
    assert_eq!(req.private_data(), b"slow");
    drop(fast);
}

#[test]
fn a_flood_of_silent_peers_closes_the_oldest_and_a_request_still_gets_through() {
    let max_pending = 8;
    let l = soft_listener(HandshakeLimits {
        // Far beyond the test's run time: here only the table limit closes connections.
        timeout: Duration::from_secs(600),
        max_pending,
    });
    let mut silent = silent_peers(l.local_addr(), 20);
    // The listener accepts in connect order; the first 12 make room for the last 8.
    for s in &mut silent[..20 - max_pending] {
        assert!(closed_by_listener(s, T));
    }
    // A real request takes the oldest remaining slot and is answered.
    let mut real = TcpStream::connect(l.local_addr()).unwrap();
    real.write_all(&connect_req(b"real")).unwrap();
    let req = l
        .get_request(Some(T))
        .unwrap()
        .expect("a request through the flood");
    assert_eq!(req.private_data(), b"real");
    assert!(closed_by_listener(&mut silent[20 - max_pending], T));
    for s in &silent[20 - max_pending + 1..] {
        assert!(still_open(s));
    }
}

#[test]
fn a_silent_peer_is_closed_at_a_short_deadline() {
    let l = soft_listener(HandshakeLimits {
        timeout: Duration::from_millis(100),
        max_pending: 4,
    });
    let mut s = TcpStream::connect(l.local_addr()).unwrap();
    assert!(closed_by_listener(&mut s, T));
    // A request that arrives in time is unaffected.
    let mut real = TcpStream::connect(l.local_addr()).unwrap();
    real.write_all(&connect_req(b"in time")).unwrap();
    let req = l.get_request(Some(T)).unwrap().expect("request");
    assert_eq!(req.private_data(), b"in time");
}
