//! Shared receive queues over a real verbs device (rxe in the VM of `tools/test-rxe`): two QPs
//! on one SRQ, completions naming the receiving QP, the accept's RNR retry count of 7 and
//! RNR timer, a disconnect leaving the SRQ's WRs to the other QPs.
//!
//! rxe on Linux 6.1 reports SRQ caps of 8 WRs for a request of 8 yet accepts a 9th post (6.12
//! refuses it), so nothing here asserts that a device refuses posts beyond its caps.

use std::net::{IpAddr, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use super::device_or_skip;
use super::smoke::{addr_or_skip, hello, init, next_wc, resources, End, T};
use crate::fabric::{
    resolve, Access, CmEvent, ConnParam, Cq, Device, FabricError, Listener, MemBuf, Mr, Pd,
    ProviderKind, Qp, QpInit, RecvWr, SendFlags, SendWr, Srq, SrqInit, Wc, WcOpcode, WcStatus,
    WrOp,
};

const SLOT: usize = 1024;

/// The passive side: a listener whose QPs take their receives from one SRQ.
struct Server {
    l: Listener,
    pd: Pd,
    cq: Cq,
    srq: Srq,
    mr: Mr,
}

impl Server {
    fn new(dev: &Device, ip: IpAddr, max_wr: u32) -> Server {
        let pd = dev.alloc_pd().unwrap();
        let srq = pd.create_srq(SrqInit { max_wr, max_sge: 1 }).unwrap();
        let mr = pd
            .register(MemBuf::zeroed(16 * SLOT).unwrap(), Access::LOCAL_WRITE)
            .unwrap();
        Server {
            l: dev.listen(SocketAddr::new(ip, 0), 8).unwrap(),
            cq: dev.create_cq(256).unwrap(),
            pd,
            srq,
            mr,
        }
    }

    /// Posts slot `i` with wr_id `100 + i`.
    fn post(&self, i: usize) {
        let sge = [self.mr.sge(i * SLOT, SLOT as u32)];
        self.srq
            .post_recv(&[RecvWr {
                wr_id: 100 + i as u64,
                sgl: &sge,
            }])
            .unwrap();
    }

    /// A client connected with `param`, and the server's QP for it (accepted with `accept`).
    fn client(&self, param: ConnParam, accept: ConnParam) -> (End, Qp) {
        let addr = self.l.local_addr();
        let t = thread::spawn(move || {
            let r = resolve(ProviderKind::Verbs, addr, T).unwrap();
            let (pd, cq, mr) = resources(&r.device());
            let c = r.connect(&init(&pd, &cq), &param, T).unwrap();
            End {
                _pd: pd,
                cq,
                mr,
                qp: c.qp,
            }
        });
        let req = self
            .l
            .get_request(Some(T))
            .unwrap()
            .expect("a connect request");
        let qp = req
            .create_qp(&QpInit {
                srq: Some(&self.srq),
                ..init(&self.pd, &self.cq)
            })
            .unwrap();
        qp.accept(&accept).unwrap();
        let c = t.join().unwrap();
        assert_eq!(qp.cm_event(Some(T)).unwrap(), Some(CmEvent::Established));
        (c, qp)
    }
}

/// `c` sends `data` (signaled, wr_id 1); returns without waiting.
fn post_send(c: &End, data: &[u8]) {
    c.mr.write_at(0, data).unwrap();
    let sge = [c.mr.sge(0, data.len() as u32)];
    c.qp.post_send(&[SendWr {
        wr_id: 1,
        op: WrOp::Send,
        sgl: &sge,
        flags: SendFlags::SIGNALED,
    }])
    .unwrap();
}

fn expect_recv(s: &Server, qp: &Qp, len: u32) -> Wc {
    let wc = next_wc(&s.cq);
    assert_eq!(
        (wc.status, wc.opcode, wc.byte_len, wc.qp_num),
        (WcStatus::Success, WcOpcode::Recv, len, qp.qp_num()),
        "{wc:?}"
    );
    assert!((100..116).contains(&wc.wr_id), "{wc:?}");
    wc
}

#[test]
fn srq_device_limits_caps_and_post_checks() {
    let Some(dev) = device_or_skip("srq_device_limits_caps_and_post_checks") else {
        return;
    };
    let a = dev.attr().unwrap();
    eprintln!(
        "max_srq {} max_srq_wr {} max_srq_sge {}",
        a.max_srq, a.max_srq_wr, a.max_srq_sge
    );
    assert!(
        a.max_srq > 0 && a.max_srq_wr >= 8 && a.max_srq_sge >= 1,
        "{a:?}"
    );
    let pd = dev.alloc_pd().unwrap();
    let srq = pd
        .create_srq(SrqInit {
            max_wr: 8,
            max_sge: 1,
        })
        .unwrap();
    let caps = srq.caps();
    eprintln!("asked 8 x 1, got {caps:?}");
    assert!(caps.max_wr >= 8 && caps.max_sge >= 1, "{caps:?}");
    let mr = pd
        .register(MemBuf::zeroed(4096).unwrap(), Access::LOCAL_WRITE)
        .unwrap();
    let one = [mr.sge(0, 64)];
    let wrs = vec![
        RecvWr {
            wr_id: 1,
            sgl: &one,
        };
        caps.max_wr as usize
    ];
    srq.post_recv(&wrs).unwrap();
    let many = vec![mr.sge(0, 8); caps.max_sge as usize + 1];
    let e = srq
        .post_recv(&[RecvWr {
            wr_id: 2,
            sgl: &many,
        }])
        .unwrap_err();
    assert!(matches!(e, FabricError::BadWr { index: 0, .. }), "{e}");
    let e = pd
        .create_srq(SrqInit {
            max_wr: a.max_srq_wr.saturating_add(1),
            max_sge: 1,
        })
        .unwrap_err();
    eprintln!("over max_srq_wr: {e}");
}

#[test]
fn srq_two_qps_receive_through_one_srq() {
    let Some((dev, ip)) = addr_or_skip("srq_two_qps_receive_through_one_srq") else {
        return;
    };
    let s = Server::new(&dev, ip, 16);
    let (a, qa) = s.client(hello(), ConnParam::default());
    let (b, qb) = s.client(hello(), ConnParam::default());
    assert_eq!(qa.caps().max_recv_wr, 0, "{:?}", qa.caps());
    let e = qa
        .post_recv(&[RecvWr {
            wr_id: 1,
            sgl: &[s.mr.sge(0, 64)],
        }])
        .unwrap_err();
    assert!(matches!(e, FabricError::BadWr { index: 0, .. }), "{e}");
    for i in 0..4 {
        s.post(i);
    }
    let mut seen = Vec::new();
    for (c, qp, text) in [
        (&a, &qa, &b"from a 1"[..]),
        (&b, &qb, b"from b 1"),
        (&a, &qa, b"from a 2"),
        (&b, &qb, b"from b 2"),
    ] {
        post_send(c, text);
        assert_eq!(next_wc(&c.cq).status, WcStatus::Success);
        let wc = expect_recv(&s, qp, text.len() as u32);
        let mut got = vec![0; text.len()];
        s.mr.read_at((wc.wr_id - 100) as usize * SLOT, &mut got)
            .unwrap();
        assert_eq!(got, text);
        seen.push(wc.wr_id);
    }
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 4, "each SRQ WR is consumed once: {seen:?}");
}

#[test]
fn srq_dry_queue_rnr_retries_for_ever_and_min_rnr_timer() {
    let Some((dev, ip)) = addr_or_skip("srq_dry_queue_rnr_retries_for_ever_and_min_rnr_timer")
    else {
        return;
    };
    let s = Server::new(&dev, ip, 16);
    // The client asks for no RNR retries; a QP with an SRQ answers 7 in the accept, so the
    // client's SEND into the dry SRQ waits instead of failing.
    let param = ConnParam {
        rnr_retry_count: 0,
        ..hello()
    };
    for (round, timer) in [(0usize, Some(12u8)), (1, None)] {
        let accept = ConnParam {
            min_rnr_timer: timer,
            ..ConnParam::default()
        };
        let (c, qp) = s.client(param.clone(), accept);
        post_send(&c, b"dry");
        thread::sleep(Duration::from_millis(50));
        let mut w = [Wc::default()];
        assert_eq!(
            c.cq.poll(&mut w).unwrap(),
            0,
            "the SEND completed early: {:?}",
            w[0]
        );
        let posted = Instant::now();
        s.post(round);
        let wc = expect_recv(&s, &qp, 3);
        assert_eq!(wc.wr_id, 100 + round as u64);
        assert_eq!(next_wc(&c.cq).status, WcStatus::Success);
        // Reported, not asserted: how long the last RNR wait was (about the responder's
        // min_rnr_timer: 0.64 ms for 12, 655 ms for the CM's default).
        eprintln!(
            "min_rnr_timer {timer:?}: delivered {:?} after the post",
            posted.elapsed()
        );
    }
}

#[test]
fn srq_disconnect_leaves_the_wrs_to_the_other_qps() {
    let Some((dev, ip)) = addr_or_skip("srq_disconnect_leaves_the_wrs_to_the_other_qps") else {
        return;
    };
    let s = Server::new(&dev, ip, 16);
    let (a, qa) = s.client(hello(), ConnParam::default());
    let (b, qb) = s.client(hello(), ConnParam::default());
    s.post(0);
    s.post(1);
    a.qp.disconnect().unwrap();
    loop {
        match qa.cm_event(Some(T)).unwrap() {
            Some(CmEvent::Disconnected) => break,
            Some(e) => eprintln!("server QP a: {e:?}"),
            None => panic!("no disconnect within {T:?}"),
        }
    }
    drop((a, qa));
    // Both WRs are still posted: b's two SENDs land (with RNR retries for ever, a lost WR would
    // hang the second one until next_wc's timeout).
    for text in [&b"one"[..], b"two"] {
        post_send(&b, text);
        assert_eq!(next_wc(&b.cq).status, WcStatus::Success);
        expect_recv(&s, &qb, text.len() as u32);
    }
}
