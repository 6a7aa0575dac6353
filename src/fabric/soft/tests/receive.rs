//! The receive side: a thread waiting on the receive CQ parses the frames that arrive while it
//! waits; what it leaves (a payload larger than its buffer that is still arriving, a long
//! burst, ACKs held for an application that never posts) the receive thread finishes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::*;

fn frames_parsed_by_waiters(side: &Side) -> u64 {
    side.qp.as_soft().unwrap().frames_parsed_by_waiters()
}

/// How long a test waits for something that takes milliseconds before calling it a hang.
const HANG_GUARD: Duration = Duration::from_secs(60);

/// The calling thread's id, for [`wait_asleep_in_epoll`].
fn tid() -> libc::pid_t {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// Whether thread `tid` of this process is asleep in an epoll wait: `/proc/self/task/TID/
/// syscall` names the system call a blocked thread is in (and says "running" otherwise); the
/// kernel lists a thread there only once it sleeps, i.e. once it is on the epoll set's wait
/// queue.
fn asleep_in_epoll(tid: libc::pid_t) -> bool {
    let path = format!("/proc/self/task/{tid}/syscall");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    #[cfg(target_arch = "x86_64")]
    let waits = [
        libc::SYS_epoll_wait,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let waits = [libc::SYS_epoll_pwait, libc::SYS_epoll_pwait2];
    text.split_whitespace()
        .next()
        .and_then(|nr| nr.parse::<libc::c_long>().ok())
        .is_some_and(|nr| waits.contains(&nr))
}

/// Waits until thread `tid` is asleep in an epoll wait (in these tests: in `Cq::wait`, the
/// only epoll wait of the waiting thread).
fn wait_asleep_in_epoll(tid: libc::pid_t) {
    let deadline = Instant::now() + HANG_GUARD;
    while !asleep_in_epoll(tid) {
        assert!(
            Instant::now() < deadline,
            "thread {tid} not asleep in epoll_wait within {HANG_GUARD:?}"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
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

/// The frame that completes a receive arrives while the application sleeps in `Cq::wait`:
/// the kernel wakes that thread rather than the receive thread (the CQ's epoll set comes
/// first, `rx/mod.rs`), and it parses the frame itself.
///
/// The SEND is posted only once the waiting thread is seen asleep in its epoll wait, and
/// that wait has no timeout short of the hang guard, so the frame cannot come before the
/// wait or after a timed-out one (where the receive thread would take it). A sleep before the
/// SEND instead made that likely, never certain.
#[test]
fn a_thread_waiting_on_the_cq_parses_the_send_itself() {
    let (a, p) = pair();
    let rmr = p.mr(4096, Access::LOCAL_WRITE);
    post_recv(&p, &rmr, 7, 4096);
    let before = frames_parsed_by_waiters(&p);
    let waiter = tid();
    let sender = std::thread::spawn(move || {
        let smr = a.mr(4096, Access::empty());
        smr.write_at(0, &pattern(512, 3)).unwrap();
        wait_asleep_in_epoll(waiter);
        a.qp.post_send(&[sw(1, WrOp::Send, &[smr.sge(0, 512)])])
            .unwrap();
        assert_eq!(wc(&a.cq).status, WcStatus::Success);
        a
    });
    let mut w = [Wc::default()];
    p.cq.arm().unwrap();
    assert_eq!(
        p.cq.poll(&mut w).unwrap(),
        0,
        "a completion before the SEND"
    );
    // One wait: woken by the frame, it returns with the completion.
    assert!(
        p.cq.wait(Some(HANG_GUARD)).unwrap(),
        "no completion within {HANG_GUARD:?}"
    );
    assert_eq!(p.cq.poll(&mut w).unwrap(), 1);
    let c = w[0];
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
    let waiter = tid();
    let sender = std::thread::spawn(move || {
        // The responder is waiting on its CQ when the frames come.
        wait_asleep_in_epoll(waiter);
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
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let waiting = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            tid_tx.send(tid()).unwrap();
            while !stop.load(Ordering::SeqCst) {
                p.cq.arm().unwrap();
                p.cq.wait(Some(Duration::from_millis(20))).unwrap();
            }
            p
        })
    };
    let waiter = tid_rx.recv().unwrap();
    let w = WrOp::RdmaWrite {
        remote_addr: remote.addr(),
        rkey: remote.rkey(),
    };
    // Each WRITE goes once the responder's thread is asleep in its wait (it wakes every
    // 20 ms to look at `stop`: a WRITE that comes just then goes to the receive thread, and
    // the assertion below needs one of the 20 to reach the waiter).
    for i in 0..20 {
        wait_asleep_in_epoll(waiter);
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
