//! The receive side: a thread waiting on the receive CQ parses the frames that arrive while it
//! waits; what it leaves (a payload larger than its buffer that is still arriving, a long
//! burst, ACKs held for an application that never posts) the receive thread finishes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;

fn frames_parsed_by_waiters(side: &Side) -> u64 {
    side.qp.as_soft().unwrap().frames_parsed_by_waiters()
}

/// Arms `cq` and waits on it until a completion comes; returns it.
fn wait_wc(cq: &Cq) -> Wc {
    let mut w = [Wc::default()];
    let deadline = Instant::now() + T;
    loop {
        cq.arm().unwrap();
        if cq.poll(&mut w).unwrap() == 1 {
            return w[0];
        }
        assert!(Instant::now() < deadline, "no completion within {T:?}");
        cq.wait(Some(Duration::from_millis(200))).unwrap();
    }
}

#[test]
fn a_thread_waiting_on_the_cq_parses_the_send_itself() {
    let (a, p) = pair();
    let rmr = p.mr(4096, Access::LOCAL_WRITE);
    post_recv(&p, &rmr, 7, 4096);
    let sender = std::thread::spawn(move || {
        // Late enough that the passive side is asleep in Cq::wait.
        std::thread::sleep(Duration::from_millis(100));
        let smr = a.mr(4096, Access::empty());
        smr.write_at(0, &pattern(512, 3)).unwrap();
        a.qp.post_send(&[sw(1, WrOp::Send, &[smr.sge(0, 512)])])
            .unwrap();
        assert_eq!(wc(&a.cq).status, WcStatus::Success);
        a
    });
    let before = frames_parsed_by_waiters(&p);
    let c = wait_wc(&p.cq);
    assert_eq!((c.wr_id, c.status, c.byte_len), (7, WcStatus::Success, 512));
    assert!(
        frames_parsed_by_waiters(&p) > before,
        "the SEND reached the CQ through the receive thread, not the waiting thread"
    );
    let mut got = vec![0; 512];
    rmr.read_at(0, &mut got).unwrap();
    assert_eq!(got, pattern(512, 3));
    drop(sender.join().unwrap());
}

#[test]
fn large_writes_and_long_bursts_arrive_whole_while_the_responder_waits() {
    const BIG: usize = 3 << 20; // far more than the 128 KiB receive buffer
    const BURST: u64 = 100; // more frames than a waiter parses in one go (the queues hold 128)
    let (a, p) = pair();
    let remote = p.mr(BIG, RW);
    let rmr = p.mr(BURST as usize * 64, Access::LOCAL_WRITE);
    for i in 0..BURST {
        p.qp.post_recv(&[RecvWr {
            wr_id: i,
            sgl: &[rmr.sge(i as usize * 64, 64)],
        }])
        .unwrap();
    }
    let src = a.mr(BIG, Access::empty());
    let data = pattern(BIG, 11);
    src.write_at(0, &data).unwrap();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let w = WrOp::RdmaWrite {
            remote_addr: remote.addr(),
            rkey: remote.rkey(),
        };
        a.qp.post_send(&[sw(1000, w, &[src.sge(0, BIG as u32)])])
            .unwrap();
        let _batch = crate::fabric::SendBatch::begin();
        for i in 0..BURST {
            let off = (i as usize * 64) % 4096;
            a.qp.post_send(&[sw(i, WrOp::Send, &[src.sge(off, 64)])])
                .unwrap();
        }
        drop(_batch);
        let mut done = 0;
        while done < BURST + 1 {
            assert_eq!(wc(&a.cq).status, WcStatus::Success);
            done += 1;
        }
        (a, remote)
    });
    // The receives complete in order, each with its 64 bytes; the WRITE before them is whole.
    for i in 0..BURST {
        let c = wait_wc(&p.cq);
        assert_eq!((c.wr_id, c.status, c.byte_len), (i, WcStatus::Success, 64));
        let off = (i as usize * 64) % 4096;
        let mut got = vec![0; 64];
        rmr.read_at(i as usize * 64, &mut got).unwrap();
        assert_eq!(got, data[off..off + 64], "receive {i}");
    }
    let (_a, remote) = sender.join().unwrap();
    let mut got = vec![0; BIG];
    remote.read_at(0, &mut got).unwrap();
    assert!(got == data, "the {BIG}-byte WRITE");
}

#[test]
fn acks_held_by_a_waiting_responder_that_never_posts_still_go() {
    // The responder's application waits on its CQ (so it parses the WRITEs itself and holds
    // their ACKs for a frame of its own) but never posts: the ACKs go when the delay is up.
    let (a, p) = pair();
    let remote = p.mr(4096, RW);
    let src = a.mr(4096, Access::LOCAL_WRITE);
    let stop = Arc::new(AtomicBool::new(false));
    let waiting = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                p.cq.arm().unwrap();
                p.cq.wait(Some(Duration::from_millis(20))).unwrap();
            }
            p
        })
    };
    let w = WrOp::RdmaWrite {
        remote_addr: remote.addr(),
        rkey: remote.rkey(),
    };
    for i in 0..20 {
        std::thread::sleep(Duration::from_millis(2));
        a.qp.post_send(&[sw(i, w, &[src.sge(0, 4096)])]).unwrap();
        let c = wc(&a.cq);
        assert_eq!((c.wr_id, c.status), (i, WcStatus::Success));
    }
    stop.store(true, Ordering::SeqCst);
    let p = waiting.join().unwrap();
    assert!(
        frames_parsed_by_waiters(&p) > 0,
        "the responder's waiting thread parsed none of the WRITEs"
    );
    no_wc(&p.cq);
}
