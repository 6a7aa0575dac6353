//! Run-to-completion transmission: send batches hold posts until they end (or the posting
//! thread waits), payloads larger than the socket takes at once wait in the wire's buffer for
//! the transmit thread, and plain ACKs held for a silent application still complete.

use super::*;
use crate::fabric::SendBatch;

#[test]
fn a_send_batch_holds_posts_until_it_ends() {
    let (a, p) = pair();
    let rmr = p.mr(4096, Access::LOCAL_WRITE);
    post_recv(&p, &rmr, 7, 4096);
    post_recv(&p, &rmr, 8, 4096);
    let smr = a.mr(4096, Access::empty());
    smr.write_at(0, &pattern(512, 9)).unwrap();
    let batch = SendBatch::begin();
    let inner = SendBatch::begin();
    a.qp.post_send(&[sw(1, WrOp::Send, &[smr.sge(0, 512)])])
        .unwrap();
    drop(inner); // not the outermost: still held
    a.qp.post_send(&[sw(2, WrOp::Send, &[smr.sge(0, 256)])])
        .unwrap();
    no_wc(&p.cq);
    drop(batch);
    let r = wc(&p.cq);
    assert_eq!((r.wr_id, r.status, r.byte_len), (7, WcStatus::Success, 512));
    assert_eq!(wc(&p.cq).wr_id, 8);
    assert_eq!(wc(&a.cq).wr_id, 1);
    assert_eq!(wc(&a.cq).wr_id, 2);
    let mut got = vec![0; 512];
    rmr.read_at(0, &mut got).unwrap();
    assert_eq!(got, pattern(512, 9));
}

#[test]
fn a_wait_inside_a_batch_transmits_what_it_holds() {
    let (a, p) = pair();
    let rmr = p.mr(4096, Access::LOCAL_WRITE);
    post_recv(&p, &rmr, 7, 4096);
    let smr = a.mr(4096, Access::empty());
    let _batch = SendBatch::begin();
    a.qp.post_send(&[sw(1, WrOp::Send, &[smr.sge(0, 100)])])
        .unwrap();
    // wc() arms and waits on the CQ: the wait sends the held SEND first, or it would never
    // complete.
    let s = wc(&a.cq);
    assert_eq!((s.wr_id, s.status), (1, WcStatus::Success));
    assert_eq!(wc(&p.cq).byte_len, 100);
}

#[test]
fn payloads_larger_than_the_socket_takes_arrive_whole() {
    // 24 MiB: more than a loopback socket's send buffer, so the posting thread's write is
    // partial and the transmit thread writes the rest once the peer has read some.
    const LEN: usize = 24 << 20;
    let (a, p) = pair();
    let remote = p.mr(LEN, RW);
    let src = a.mr(LEN, Access::LOCAL_WRITE);
    let dst = a.mr(LEN, Access::LOCAL_WRITE);
    let data = pattern(LEN, 5);
    src.write_at(0, &data).unwrap();
    let w = WrOp::RdmaWrite {
        remote_addr: remote.addr(),
        rkey: remote.rkey(),
    };
    let r = WrOp::RdmaRead {
        remote_addr: remote.addr(),
        rkey: remote.rkey(),
    };
    // WRITE, then READ back behind it on the same queue, then a small SEND: in order.
    let rmr = p.mr(64, Access::LOCAL_WRITE);
    post_recv(&p, &rmr, 9, 64);
    a.qp.post_send(&[
        sw(1, w, &[src.sge(0, LEN as u32)]),
        sw(2, r, &[dst.sge(0, LEN as u32)]),
        sw(3, WrOp::Send, &[src.sge(0, 64)]),
    ])
    .unwrap();
    for id in 1..=3 {
        let c = wc(&a.cq);
        assert_eq!((c.wr_id, c.status), (id, WcStatus::Success));
    }
    assert_eq!(wc(&p.cq).wr_id, 9);
    let mut got = vec![0; LEN];
    remote.read_at(0, &mut got).unwrap();
    assert!(got == data, "WRITE of {LEN} bytes");
    dst.read_at(0, &mut got).unwrap();
    assert!(got == data, "READ of {LEN} bytes");
}

#[test]
fn held_acks_reach_a_requester_whose_peer_stays_silent() {
    // The responder's application never posts: its ACKs go when their delay is up.
    let (a, p) = pair();
    let remote = p.mr(4096, RW);
    let src = a.mr(4096, Access::LOCAL_WRITE);
    let w = WrOp::RdmaWrite {
        remote_addr: remote.addr(),
        rkey: remote.rkey(),
    };
    for i in 0..50 {
        a.qp.post_send(&[sw(i, w, &[src.sge(0, 4096)])]).unwrap();
        let c = wc(&a.cq);
        assert_eq!((c.wr_id, c.status), (i, WcStatus::Success));
    }
    no_wc(&p.cq);
}
