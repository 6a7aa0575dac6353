//! A peer that sends garbage: the QP moves to the error state and disconnects, nothing panics.

use std::io::{Read, Write};
use std::net::TcpStream;

use super::*;
use crate::fabric::soft::wire::{CmBody, Header, Opcode, HEADER_LEN};

/// Connects by hand, speaking the wire protocol directly; returns the raw stream.
fn raw_peer(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    let mut out = Vec::new();
    let body = CmBody {
        initiator_depth: 4,
        responder_resources: 4,
        qpn: 1,
        max_send_wr: 4,
        private_data: b"raw",
    };
    body.encode_frame(Opcode::ConnectReq, &mut out);
    s.write_all(&out).unwrap();
    s
}

fn read_accept(s: &mut TcpStream) {
    let mut hb = [0u8; HEADER_LEN];
    s.read_exact(&mut hb).unwrap();
    let h = Header::decode(&hb).unwrap();
    assert_eq!(h.op, Opcode::Accept);
    let mut body = vec![0; h.length as usize];
    s.read_exact(&mut body).unwrap();
}

#[test]
fn malformed_frames_move_the_qp_to_error() {
    let garbage: [&[u8]; 4] = [
        &[0xff; HEADER_LEN],
        // A WRITE claiming more than the message limit.
        &{
            let mut h = Header::new(Opcode::Write, 0, 1);
            h.length = u32::MAX;
            h.encode()
        },
        // An ACK for a request that was never sent.
        &Header::new(Opcode::Ack, 42, 1).encode(),
        // A connect request on an established connection.
        &Header::new(Opcode::ConnectReq, 0, 1).encode(),
    ];
    let l = listener();
    for g in garbage {
        let mut s = raw_peer(l.local_addr());
        let pd = dev().alloc_pd().unwrap();
        let cq = dev().create_cq(64).unwrap();
        let qp = accept(&l, &pd, &cq, &ConnParam::default());
        read_accept(&mut s);
        let m = pd
            .register(MemBuf::zeroed(64).unwrap(), Access::LOCAL_WRITE)
            .unwrap();
        qp.post_recv(&[RecvWr {
            wr_id: 1,
            sgl: &[m.sge(0, 64)],
        }])
        .unwrap();
        s.write_all(&Header::new(Opcode::Rtu, 0, 1).encode())
            .unwrap();
        s.write_all(g).unwrap();
        assert_eq!(qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Established));
        assert_eq!(qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Disconnected));
        assert_eq!(wc(&cq).status, WcStatus::WrFlushErr);
        // The provider closed the connection.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
}

#[test]
fn garbage_instead_of_a_connect_request_is_dropped() {
    let l = listener();
    let mut s = TcpStream::connect(l.local_addr()).unwrap();
    s.write_all(&[0x5a; 100]).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest); // the listener closes it
    assert!(l
        .get_request(Some(Duration::from_millis(50)))
        .unwrap()
        .is_none());
    // The listener still works.
    let (a, _p) = {
        let addr = l.local_addr();
        let t = std::thread::spawn(move || {
            connect(addr, ConnParam::default(), QpCaps::default())
                .unwrap()
                .0
        });
        let pd = dev().alloc_pd().unwrap();
        let cq = dev().create_cq(64).unwrap();
        let qp = accept(&l, &pd, &cq, &ConnParam::default());
        (t.join().unwrap(), qp)
    };
    assert!(a.qp.qp_num() > 0);
}
