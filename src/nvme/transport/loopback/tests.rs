use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::*;
use crate::nvme::Status;

fn region(buf: &Arc<Mutex<Vec<u8>>>) -> Region {
    let ptr = buf.lock().unwrap().as_mut_ptr();
    let len = buf.lock().unwrap().len();
    // SAFETY: the Vec is kept alive by the Arc and never resized.
    unsafe { Region::new(ptr, len, Box::new(Arc::clone(buf))) }
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 9], port))
}

#[test]
fn capsules_responses_and_data_cross_and_checks_hold() {
    let l = listen(addr(0)).unwrap();
    assert!(matches!(listen(l.local_addr()), Err(LoopError::InUse(_))));
    let mem = Arc::new(Mutex::new(vec![7u8; 4096]));
    let base = mem.lock().unwrap().as_ptr() as u64;
    let mut h = connect(l.local_addr(), 1, 2, region(&mem)).unwrap();
    let t = l.accept(Duration::from_secs(1)).unwrap();
    let sqe = [1u8; SQE_LEN];
    assert_eq!(h.queue(&sqe, b"abc"), Some(0));
    assert_eq!(h.queue(&sqe, b""), Some(1));
    assert_eq!(h.queue(&sqe, b""), None, "two slots");
    h.flush();
    let mut got = Vec::new();
    assert!(t.take(&mut got));
    assert_eq!(got, vec![(0, 67), (1, 64)]);
    assert_eq!(&t.capsule(0, 67).unwrap()[64..], b"abc");
    let mut d = [0u8; 8];
    t.read_host(base + 8, h.key(), &mut d).unwrap();
    assert_eq!(d, [7; 8]);
    t.write_host(base, h.key(), b"xy").unwrap();
    assert_eq!(&mem.lock().unwrap()[..2], b"xy");
    assert_eq!(
        t.write_host(base, h.key() + 1, b"z"),
        Err(LoopError::Key { key: h.key() + 1 })
    );
    assert!(matches!(
        t.write_host(base + 4095, h.key(), b"zz"),
        Err(LoopError::Range { .. })
    ));
    assert!(t.read_host(base - 1, h.key(), &mut d).is_err());
    let mut out = vec![
        ToHost::Taken(0),
        ToHost::Response(Cqe::error(1, 1, 0, Status::SUCCESS)),
    ];
    t.send(&mut out);
    let mut seen = Vec::new();
    h.poll(&mut seen);
    assert_eq!(seen.len(), 2);
    assert_eq!(h.queue(&sqe, b""), Some(0), "the taken slot is free again");
    h.close();
    assert!(t.is_closed());
    assert_eq!(t.write_host(base, h.key(), b"q"), Err(LoopError::Closed));
}

#[test]
fn refused_without_a_listener_and_closed_when_the_target_drops() {
    let a = {
        let l = listen(addr(0)).unwrap();
        l.local_addr()
    };
    let mem = Arc::new(Mutex::new(vec![0u8; 64]));
    assert!(matches!(
        connect(a, 0, 1, region(&mem)),
        Err(LoopError::Refused(_))
    ));
    assert!(matches!(
        connect(a, 0, 0, region(&mem)),
        Err(LoopError::Entries(0))
    ));
    let l = listen(a).unwrap();
    let h = connect(a, 0, 1, region(&mem)).unwrap();
    drop(l.accept(Duration::from_secs(1)));
    assert!(h.is_closed());
}

#[test]
fn an_armed_sleeper_is_woken() {
    let w = Wake::new(Side::Target).unwrap();
    w.arm();
    let w2 = Arc::clone(&w);
    let t = std::thread::spawn(move || w2.kick());
    // Its own eventfd as the "other" descriptor: readable means the kick arrived (a
    // timeout would return false). 60 s is only a hang guard.
    let woke = w.wait(Some(w.fd()), Duration::from_secs(60));
    assert!(woke.kicked && woke.other, "woken by the kick: {woke:?}");
    t.join().unwrap();
    // Cleared (arm reads the eventfd) and disarmed: a kick writes nothing.
    w.arm();
    w.disarm();
    w.kick();
    assert_eq!(
        w.wait(Some(w.fd()), Duration::ZERO),
        Woke {
            kicked: false,
            other: false
        },
        "an unarmed kick wakes no one"
    );
}
