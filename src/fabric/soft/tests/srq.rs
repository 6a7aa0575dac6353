//! Shared receive queues: several QPs take receives from one SRQ; completions name the
//! receiving QP; an empty SRQ makes the sender retry (RNR); a QP's error flushes only the WR it
//! was filling.

use std::io::Write;
use std::net::TcpStream;

use super::*;
use crate::fabric::soft::wire::{CmBody, Header, Opcode};
use crate::fabric::{Listener, Srq, SrqInit};

/// The passive side of SRQ tests: one PD, CQ, SRQ and a region of `slots` x `slot` bytes.
struct Server {
    l: Listener,
    pd: Pd,
    cq: Cq,
    srq: Srq,
    mr: Mr,
    slot: usize,
}

impl Server {
    fn new(max_wr: u32, slots: usize, slot: usize) -> Server {
        let pd = dev().alloc_pd().unwrap();
        let srq = pd.create_srq(SrqInit { max_wr, max_sge: 1 }).unwrap();
        Server {
            l: listener(),
            cq: dev().create_cq(4096).unwrap(),
            mr: pd
                .register(MemBuf::zeroed(slots * slot).unwrap(), Access::LOCAL_WRITE)
                .unwrap(),
            pd,
            srq,
            slot,
        }
    }

    /// Posts slot `i` to the SRQ with wr_id `100 + i`.
    fn post(&self, i: usize) {
        let sge = [self.mr.sge(i * self.slot, self.slot as u32)];
        self.srq
            .post_recv(&[RecvWr {
                wr_id: 100 + i as u64,
                sgl: &sge,
            }])
            .unwrap();
    }

    /// Connects a client with `param` and accepts it on a QP that uses the SRQ.
    fn client(&self, param: ConnParam) -> (Side, Qp) {
        let addr = self.l.local_addr();
        let t = std::thread::spawn(move || connect(addr, param, QpCaps::default()).unwrap().0);
        let qp = self.accept();
        (t.join().unwrap(), qp)
    }

    fn accept(&self) -> Qp {
        let req = self
            .l
            .get_request(Some(T))
            .unwrap()
            .expect("connect request");
        let qp = req.create_qp(&self.init()).unwrap();
        qp.accept(&ConnParam::default()).unwrap();
        qp
    }

    fn init(&self) -> QpInit<'_> {
        QpInit {
            srq: Some(&self.srq),
            ..init(&self.pd, &self.cq, QpCaps::default())
        }
    }

    fn slot_bytes(&self, wr_id: u64, len: usize) -> Vec<u8> {
        let mut got = vec![0; len];
        let off = (wr_id - 100) as usize * self.slot;
        self.mr.read_at(off, &mut got).unwrap();
        got
    }
}

/// `a` sends `data` (signaled, wr_id 1) and waits for its completion.
fn send(a: &Side, data: &[u8]) -> WcStatus {
    let m = a.mr(data.len().max(1), Access::LOCAL_WRITE);
    m.write_at(0, data).unwrap();
    a.qp.post_send(&[sw(1, WrOp::Send, &[m.sge(0, data.len() as u32)])])
        .unwrap();
    wc(&a.cq).status
}

/// Waits for `qp`'s Disconnected event (after its Established, if that is still queued).
fn until_disconnected(qp: &Qp) {
    loop {
        match qp.cm_event(Some(T)).unwrap() {
            Some(CmEvent::Disconnected) => return,
            Some(CmEvent::Established) => continue,
            other => panic!("unexpected connection event {other:?}"),
        }
    }
}

#[test]
fn two_qps_receive_through_one_srq_and_completions_name_the_receiving_qp() {
    let s = Server::new(16, 4, 1024);
    assert_eq!(s.srq.caps().max_wr, 16);
    assert_eq!(s.srq.caps().max_sge, 1);
    let (a, qa) = s.client(ConnParam::default());
    let (b, qb) = s.client(ConnParam::default());
    assert_eq!((qa.caps().max_recv_wr, qa.caps().max_recv_sge), (0, 0));
    assert_ne!(qa.qp_num(), qb.qp_num());
    for i in 0..4 {
        s.post(i);
    }
    let mut seen = Vec::new();
    for (side, qp, seed) in [(&a, &qa, 1u8), (&b, &qb, 2), (&a, &qa, 3), (&b, &qb, 4)] {
        let data = pattern(700, seed);
        assert_eq!(send(side, &data), WcStatus::Success);
        let r = wc(&s.cq);
        assert_eq!(
            (r.status, r.opcode, r.byte_len, r.qp_num),
            (WcStatus::Success, WcOpcode::Recv, 700, qp.qp_num()),
            "{r:?}"
        );
        assert!((100..104).contains(&r.wr_id), "{r:?}");
        assert_eq!(s.slot_bytes(r.wr_id, 700), data);
        seen.push(r.wr_id);
    }
    seen.sort_unstable();
    assert_eq!(seen, [100, 101, 102, 103], "each SRQ WR is consumed once");
}

#[test]
fn srq_posts_are_checked_and_qp_post_recv_is_refused() {
    let s = Server::new(2, 4, 64);
    let sges = [s.mr.sge(0, 64), s.mr.sge(64, 64)];
    let e = s
        .srq
        .post_recv(&[RecvWr {
            wr_id: 9,
            sgl: &sges,
        }])
        .unwrap_err();
    assert!(matches!(e, FabricError::BadWr { index: 0, .. }), "{e}");
    let one = [s.mr.sge(0, 64)];
    let wrs = [RecvWr {
        wr_id: 1,
        sgl: &one,
    }; 3];
    let e = s.srq.post_recv(&wrs).unwrap_err();
    assert!(matches!(e, FabricError::QueueFull { index: 2 }), "{e}");

    let (_a, qa) = s.client(ConnParam::default());
    let e = qa.post_recv(&wrs[..1]).unwrap_err();
    assert!(matches!(e, FabricError::BadWr { index: 0, .. }), "{e}");

    for bad in [
        SrqInit {
            max_wr: 0,
            max_sge: 1,
        },
        SrqInit {
            max_wr: 1 << 20,
            max_sge: 1,
        },
        SrqInit {
            max_wr: 16,
            max_sge: 1000,
        },
    ] {
        let e = s.pd.create_srq(bad).unwrap_err();
        assert!(
            matches!(e, FabricError::InvalidArgument { .. }),
            "{bad:?}: {e}"
        );
    }
    let a = dev().attr().unwrap();
    assert!(
        a.max_srq > 0 && a.max_srq_wr >= 1024 && a.max_srq_sge >= 1,
        "{a:?}"
    );
}

#[test]
fn an_srq_of_another_pd_is_refused() {
    let s = Server::new(4, 1, 64);
    let other = dev().alloc_pd().unwrap();
    let addr = s.l.local_addr();
    let t = std::thread::spawn(move || connect(addr, ConnParam::default(), QpCaps::default()));
    let req = s.l.get_request(Some(T)).unwrap().expect("connect request");
    let init = QpInit {
        pd: &other,
        ..s.init()
    };
    let e = req.create_qp(&init).unwrap_err();
    assert!(matches!(e, FabricError::InvalidArgument { .. }), "{e}");
    assert!(
        t.join().unwrap().is_err(),
        "the refused request is rejected"
    );
}

#[test]
fn a_dry_srq_makes_the_sender_retry_until_a_receive_is_posted() {
    let s = Server::new(4, 2, 64);
    // Retries exhausted: the sender's SEND fails, nothing is consumed at the receiver.
    let (a, _qa) = s.client(ConnParam {
        rnr_retry_count: 1,
        ..ConnParam::default()
    });
    assert_eq!(send(&a, b"dry"), WcStatus::RnrRetryExcErr);
    no_wc(&s.cq);

    // Retry for ever: the SEND lands once the SRQ has a WR.
    let (b, qb) = s.client(ConnParam::default());
    let m = b.mr(64, Access::LOCAL_WRITE);
    m.write_at(0, b"late").unwrap();
    b.qp.post_send(&[sw(1, WrOp::Send, &[m.sge(0, 4)])])
        .unwrap();
    no_wc(&b.cq);
    s.post(1);
    let r = wc(&s.cq);
    assert_eq!(
        (r.wr_id, r.status, r.qp_num),
        (101, WcStatus::Success, qb.qp_num())
    );
    assert_eq!(s.slot_bytes(101, 4), b"late");
    assert_eq!(wc(&b.cq).status, WcStatus::Success);
}

#[test]
fn a_disconnect_leaves_the_srq_wrs_posted_for_the_other_qps() {
    let s = Server::new(4, 2, 64);
    let (a, qa) = s.client(ConnParam::default());
    let (b, qb) = s.client(ConnParam::default());
    s.post(0);
    s.post(1);
    a.qp.disconnect().unwrap();
    until_disconnected(&qa);
    drop((a, qa));
    no_wc(&s.cq);
    for seed in [1, 2] {
        assert_eq!(send(&b, &pattern(64, seed)), WcStatus::Success);
        let r = wc(&s.cq);
        assert_eq!(
            (r.status, r.qp_num),
            (WcStatus::Success, qb.qp_num()),
            "{r:?}"
        );
    }
}

#[test]
fn a_peer_dying_mid_payload_flushes_only_the_wr_being_filled() {
    const BIG: usize = 512 * 1024;
    let s = Server::new(4, 2, BIG);
    s.post(0);
    s.post(1);
    // A raw peer: connect, RTU, then a SEND whose payload stops halfway.
    let mut raw = TcpStream::connect(s.l.local_addr()).unwrap();
    let mut out = Vec::new();
    CmBody {
        initiator_depth: 4,
        responder_resources: 4,
        qpn: 1,
        max_send_wr: 4,
        private_data: b"raw",
    }
    .encode_frame(Opcode::ConnectReq, &mut out);
    raw.write_all(&out).unwrap();
    let qp = s.accept();
    raw.write_all(&Header::new(Opcode::Rtu, 0, 1).encode())
        .unwrap();
    let mut h = Header::new(Opcode::Send, 0, 1);
    h.length = BIG as u32;
    raw.write_all(&h.encode()).unwrap();
    raw.write_all(&vec![7u8; BIG / 2]).unwrap();
    drop(raw);
    let r = wc(&s.cq);
    assert_eq!(
        (r.status, r.qp_num),
        (WcStatus::WrFlushErr, qp.qp_num()),
        "{r:?}"
    );
    assert!(r.wr_id == 100 || r.wr_id == 101, "{r:?}");
    until_disconnected(&qp);
    drop(qp);
    no_wc(&s.cq);
    // The other WR is still posted and serves another QP.
    let (b, qb) = s.client(ConnParam::default());
    assert_eq!(send(&b, b"after"), WcStatus::Success);
    let r2 = wc(&s.cq);
    assert_eq!((r2.status, r2.qp_num), (WcStatus::Success, qb.qp_num()));
    assert_eq!(r2.wr_id, 201 - r.wr_id, "the WR not being filled");
}

#[test]
fn a_short_srq_buffer_is_loc_len_err_at_the_receiving_qp() {
    let s = Server::new(4, 1, 8);
    let (a, qa) = s.client(ConnParam::default());
    s.post(0);
    assert_ne!(send(&a, &[1; 100]), WcStatus::Success);
    let r = wc(&s.cq);
    assert_eq!(
        (r.wr_id, r.status, r.qp_num),
        (100, WcStatus::LocLenErr, qa.qp_num())
    );
}

#[test]
fn qps_keep_their_srq_alive() {
    let s = Server::new(4, 1, 64);
    let (a, qa) = s.client(ConnParam::default());
    s.post(0);
    let Server { srq, cq, mr, .. } = s;
    drop(srq);
    assert_eq!(send(&a, b"kept"), WcStatus::Success);
    let r = wc(&cq);
    assert_eq!(
        (r.wr_id, r.status, r.qp_num),
        (100, WcStatus::Success, qa.qp_num())
    );
    let mut got = [0u8; 4];
    mr.read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"kept");
}
