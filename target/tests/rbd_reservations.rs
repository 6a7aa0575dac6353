//! Reservations of an RBD namespace served by two gateways (two `rdmablk-target` processes on
//! one image, against a real Ceph cluster from `tools/ceph-dev`): kept in the image's metadata
//! (`rbd image-meta get ... rdmablk.reservations`), a reservation taken through one gateway is
//! enforced by the other when the command completes, and two hosts acquiring at once through
//! the two gateways: exactly one wins. Skipped, loudly, where Ceph is not installed.

#![cfg(feature = "rbd")]

mod process;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use process::ceph::{ceph_installed, CephImage};
use process::*;
use rdmablk::nvme::Status;
use rdmablk_initiator::{
    AcquireAction, ConnectOptions, Controller, Error, Persist, RegisterAction, ResvType,
};

const HANG_GUARD: Duration = Duration::from_secs(120);

fn stop(mut target: TargetProc) {
    target.signal(libc::SIGTERM);
    let st = target.wait_exit(HANG_GUARD);
    assert!(st.success(), "exit {st:?}:\n{}", target.log_text());
}

/// Host `n` (its own host NQN and host ID) on `url`.
fn host(url: &str, n: u8) -> Controller {
    let o = ConnectOptions {
        hostnqn: format!(
            "nqn.2014-08.org.nvmexpress:uuid:72657376-0000-4000-8000-0000000000{n:02x}"
        ),
        hostid: [n; 16],
        ..opts(1, 0)
    };
    connect(url, o)
}

fn conflict(r: rdmablk_initiator::Result<()>) {
    match r {
        Err(Error::Nvme { status, .. }) if status.same_code(&Status::RESERVATION_CONFLICT) => {}
        other => panic!("expected a Reservation Conflict, got {other:?}"),
    }
}

#[test]
fn two_gateways_of_one_image_share_its_reservations() {
    if !ceph_installed("two_gateways_of_one_image_share_its_reservations") {
        return;
    }
    let img = CephImage::create("rdmablk-resv", "16M");
    let dir = tmp_dir("rbd-resv");
    let (d1, d2) = (dir.join("g1"), dir.join("g2"));
    std::fs::create_dir_all(&d1).unwrap();
    std::fs::create_dir_all(&d2).unwrap();
    let g1 = TargetProc::spawn(&d1, &config_text(free_port(), 1, &img.backend()), 1);
    let g2 = TargetProc::spawn(&d2, &config_text(free_port(), 1, &img.backend()), 2);
    let (a, b) = (host(&g1.url(), 0xa), host(&g2.url(), 0xb));
    let (na, nb) = (a.namespace(1).unwrap(), b.namespace(1).unwrap());
    let block = vec![7u8; 4096];

    // A takes Write Exclusive through gateway 1: gateway 2 refuses B's write at once.
    let register = |ns: &rdmablk_initiator::Namespace, key| {
        ns.resv_register(
            RegisterAction::Register { new_key: key },
            0,
            false,
            Persist::NoChange,
        )
        .unwrap()
    };
    register(&na, 1);
    na.resv_acquire(1, ResvType::WriteExclusive, AcquireAction::Acquire)
        .unwrap();
    conflict(nb.write_at(0, &block));
    let mut back = vec![0u8; 4096];
    nb.read_at(0, &mut back)
        .expect("Write Exclusive lets B read");
    na.write_at(0, &block).unwrap();
    // The state is in the image's metadata, where any gateway of the image finds it.
    let meta = img
        .rbd(&["image-meta", "get", &img.spec(), "rdmablk.reservations"])
        .expect("rbd image-meta get");
    assert!(
        meta.contains("\"epoch\"") && meta.contains("\"type\":1"),
        "the image metadata holds the reservation: {meta}"
    );

    // B preempts A through gateway 2: gateway 1 refuses A's write.
    register(&nb, 2);
    nb.resv_acquire(
        2,
        ResvType::WriteExclusive,
        AcquireAction::Preempt { victim_key: 1 },
    )
    .unwrap();
    conflict(na.write_at(0, &block));
    let r = na.resv_report().unwrap();
    assert_eq!(
        (r.rtype, r.registrants.len()),
        (Some(ResvType::WriteExclusive), 1)
    );
    nb.resv_clear(2).unwrap();

    // Both register, then acquire at once through their gateways: exactly one wins.
    register(&na, 1);
    register(&nb, 2);
    const ROUNDS: usize = 8;
    let start = Arc::new(Barrier::new(2));
    let race = |ns: rdmablk_initiator::Namespace, key: u64, start: Arc<Barrier>| {
        std::thread::spawn(move || {
            let mut won = Vec::new();
            for _ in 0..ROUNDS {
                start.wait();
                let r = ns.resv_acquire(key, ResvType::ExclusiveAccess, AcquireAction::Acquire);
                let ok = r.is_ok();
                if !ok {
                    conflict(r);
                }
                start.wait();
                if ok {
                    ns.resv_release(key, ResvType::ExclusiveAccess).unwrap();
                }
                start.wait();
                won.push(ok);
            }
            won
        })
    };
    let ta = race(na, 1, Arc::clone(&start));
    let tb = race(nb, 2, Arc::clone(&start));
    let (wa, wb) = (ta.join().unwrap(), tb.join().unwrap());
    for (round, (x, y)) in wa.iter().zip(&wb).enumerate() {
        assert!(
            x ^ y,
            "round {round}: A won {x}, B won {y}: exactly one must"
        );
    }
    drop((a, b));
    stop(g1);
    stop(g2);
}
