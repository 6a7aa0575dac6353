//! End to end: an in-process target and a raw test host, on the soft provider by default or
//! on verbs (`RDMABLK_E2E_PROVIDER=verbs RDMABLK_E2E_ADDR=10.0.2.15`, as tools/test-rxe runs them).

mod common;

use std::time::Duration;

use common::*;
use rdmablk::fabric::{Access, ProviderKind, SendFlags, SendWr, Wc, WcStatus, WrOp};
use rdmablk::nvme::fabrics::{Disconnect, CNTLID_DYNAMIC};
use rdmablk::nvme::identify::cns;
use rdmablk::nvme::io::{DsmRange, DSM_RANGE_LEN};
use rdmablk::nvme::opcodes::admin;
use rdmablk::nvme::properties::{self, PropertySize};
use rdmablk::nvme::transport::rdma::CmRejectStatus;
use rdmablk::nvme::{
    Cap, Dsm, IdentifyCmd, IdentifyController, IdentifyNamespace, InCapsuleSgl, KeyedSgl,
    NumQueues, SetFeatures, Sgl, Sqe, Status, Vs, WriteZeroes,
};

#[test]
fn admin_bring_up_like_a_linux_host() {
    let (t, addr) = start_target("32MiB", "");
    let (mut h, cntlid) = admin_queue(addr, 5000);
    assert!(cntlid >= 1);

    let c = h.property_get(properties::CAP, PropertySize::Eight);
    assert!(c.status.is_success());
    let cap = Cap(c.result64());
    assert_eq!(cap.mqes(), (DEPTH - 1) as u16);
    assert!(cap.supports_nvm());
    assert!(cap.timeout_500ms() > 0);
    let c = h.property_get(properties::VS, PropertySize::Four);
    assert_eq!(c.dw0, Vs::V1_3.0);
    let c = h.property_get(properties::CSTS, PropertySize::Four);
    assert_eq!(c.dw0 & 1, 1, "CSTS.RDY after CC.EN");

    let (c, b) = identify_page(&mut h, cns::CONTROLLER, 0);
    assert!(c.status.is_success(), "{}", c.status);
    let id = IdentifyController::decode(&b).unwrap();
    id.check_fabrics(cntlid, e2e_transport().sgl_need())
        .expect("what the Linux host enforces");
    assert_eq!(id.mdts, 5, "128 KiB in 4 KiB pages");
    assert_eq!(
        id.cmic & rdmablk::nvme::identify::cmic::MULTI_CTRL,
        rdmablk::nvme::identify::cmic::MULTI_CTRL,
        "a host may have several controllers of a subsystem (the Linux host needs the bit)"
    );
    // NN: room for namespaces added live (nvmet: 1024); MNAN the same, as ANA needs.
    assert_eq!((id.nn, id.mnan), (1024, 1024));
    assert_eq!(id.subnqn.as_ref().unwrap().as_str(), SUBNQN);
    assert_eq!(id.in_capsule_bytes(), 4096);
    assert_ne!(id.sgls & (1 << 20), 0);

    let (c, b) = identify_page(&mut h, cns::NAMESPACE, 1);
    assert!(c.status.is_success());
    let ns = IdentifyNamespace::decode(&b);
    assert_eq!(ns.nsze, NS_BLOCKS);
    assert_eq!(ns.block_bytes().unwrap(), BLOCK);
    assert_eq!(
        ns.nmic & 1,
        1,
        "NMIC: shared (a host's second controller needs it)"
    );
    let (c, b) = identify_page(&mut h, cns::ACTIVE_NS_LIST, 0);
    assert!(c.status.is_success());
    assert_eq!(&b[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    let (c, _) = identify_page(&mut h, cns::NS_DESC_LIST, 1);
    assert!(c.status.is_success());
    // CSI-specific CNS: newer hosts probe it and skip on Invalid Field.
    let (c, _) = identify_page(&mut h, 0x06, 0);
    assert_status(&c, Status::INVALID_FIELD);
    let (c, _) = identify_page(&mut h, cns::NAMESPACE, 0);
    assert_status(&c, Status::INVALID_NAMESPACE);

    let want = NumQueues { nsq: 7, ncq: 7 };
    let c = h.submit(
        SetFeatures {
            fid: rdmablk::nvme::features::fid::NUM_QUEUES,
            save: false,
            nsid: 0,
            value: want.to_dword(),
        }
        .to_sqe(0),
        &[],
    );
    assert!(c.status.is_success());
    assert_eq!(
        NumQueues::from_dword(c.dw0),
        NumQueues { nsq: 2, ncq: 2 },
        "capped at 3 I/O queues"
    );

    let c = h.submit(rdmablk::nvme::admin::keep_alive_sqe(0), &[]);
    assert!(c.status.is_success());
    let c = h.submit(admin_sqe(0xC5), &[]);
    assert_status(&c, Status::INVALID_OPCODE);

    // Get Log Page (SMART, 512 bytes).
    let glp = rdmablk::nvme::GetLogPage::new(0x02, 0xFFFF_FFFF, 0, 512);
    let mut sqe = glp.to_sqe(0);
    sqe.set_sgl(&h.keyed(0, 512));
    assert!(h.submit(sqe, &[]).status.is_success());

    let c = h.submit(Disconnect::to_sqe(0), &[]);
    assert!(c.status.is_success());
    assert!(h.wait_disconnected(HANG_GUARD));
    wait_idle(&t);
    assert_eq!(t.controllers(), 0);
    t.shutdown();
}

#[test]
fn write_read_verify_every_size_and_data_path() {
    let (t, addr) = start_target("32MiB", "");
    let (_admin, cntlid) = admin_queue(addr, 0);
    let mut q = io_queue(addr, 1, cntlid);

    write_read_each_size(&mut q, "every size");

    // In-capsule write (SGL 0x01), read back.
    let data = pattern(99, 4096);
    let sgl = Sgl::InCapsule(InCapsuleSgl {
        offset: 0,
        len: 4096,
    });
    let c = q.submit(rw_sqe(true, 1, 1000, 8, &sgl), &data);
    assert!(c.status.is_success(), "in-capsule write: {}", c.status);
    let c = q.rw(false, 1, 1000, 8);
    assert!(c.status.is_success());
    assert_eq!(q.read_data(0, 4096), data);

    // Flush.
    let c = q.submit(rdmablk::nvme::io::flush_sqe(1, 0), &[]);
    assert!(c.status.is_success());

    // Write Zeroes.
    let wz = WriteZeroes {
        nsid: 1,
        slba: 1000,
        nlb: 3,
        deallocate: false,
        fua: false,
    };
    assert!(q.submit(wz.to_sqe(0), &[]).status.is_success());
    assert!(q.rw(false, 1, 1000, 8).status.is_success());
    let back = q.read_data(0, 4096);
    assert!(back[..2048].iter().all(|&b| b == 0), "zeroed blocks");
    assert_eq!(&back[2048..], &data[2048..], "untouched blocks");

    // Dataset Management deallocate (ranges in-capsule... and keyed).
    let ranges = [
        DsmRange {
            cattr: 0,
            nlb: 4,
            slba: 1004,
        },
        DsmRange {
            cattr: 0,
            nlb: 0,
            slba: 0,
        },
    ];
    let bytes: Vec<u8> = ranges.iter().flat_map(|r| r.encode()).collect();
    q.write_data(0, &bytes);
    let mut sqe = Dsm {
        nsid: 1,
        nr: 1,
        idr: false,
        idw: false,
        deallocate: true,
    }
    .to_sqe(0);
    sqe.set_sgl(&q.keyed(0, (2 * DSM_RANGE_LEN) as u32));
    assert!(q.submit(sqe, &[]).status.is_success());
    assert!(q.rw(false, 1, 1000, 8).status.is_success());
    assert!(
        q.read_data(0, 4096).iter().all(|&b| b == 0),
        "deallocated blocks read zero"
    );

    if e2e_transport() != E2eTransport::Rdma {
        // Memory windows and SEND_WITH_INV are NVMe/RDMA's.
        drop(q);
        drop(_admin);
        wait_idle(&t);
        t.shutdown();
        return;
    }
    // Keyed SGL with invalidate (0x4F) through a host memory window: the target answers
    // with SEND_WITH_INV of exactly that key.
    let mw = q.rdma().pd.alloc_mw().expect("soft provider has windows");
    let bind = SendWr {
        wr_id: 77,
        op: WrOp::BindMw {
            mw: &mw,
            mr: &q.rdma().mr,
            addr: q.buf_addr() + DATA_OFF as u64,
            length: 4096,
            access: Access::REMOTE_READ | Access::REMOTE_WRITE,
        },
        sgl: &[],
        flags: SendFlags::empty(),
    };
    q.rdma().qp.post_send(&[bind]).unwrap();
    let key = mw.rkey();
    let sgl = Sgl::Keyed(KeyedSgl {
        addr: q.buf_addr() + DATA_OFF as u64,
        len: 4096,
        key,
        invalidate: true,
    });
    let c = q.submit(rw_sqe(false, 1, 0, 8, &sgl), &[]);
    assert!(c.status.is_success());
    assert_eq!(q.last_wc.unwrap().invalidated_rkey, Some(key));

    drop(q);
    drop(_admin);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn bad_commands_get_their_status() {
    let (t, addr) = start_target("32MiB", "");
    let (_admin, cntlid) = admin_queue(addr, 0);

    // I/O on a queue before Connect.
    let mut raw = Host::connect(addr, cm_request(2, DEPTH as u16)).unwrap();
    let c = raw.rw(false, 1, 0, 1);
    assert_status(&c, Status::COMMAND_SEQUENCE_ERROR);
    drop(raw);

    let mut q = io_queue(addr, 1, cntlid);
    // Bad SGL type.
    let mut sqe = rw_sqe(false, 1, 0, 1, &q.keyed(0, BLOCK));
    sqe.dptr[15] = 0x20;
    assert_status(&q.submit(sqe, &[]), Status::SGL_INVALID_TYPE);
    // SGL length > MDTS.
    let blocks = 2 * MAX_IO / BLOCK;
    let sgl = q.keyed(0, blocks * BLOCK);
    assert_status(
        &q.submit(rw_sqe(false, 1, 0, blocks, &sgl), &[]),
        Status::SGL_INVALID_DATA_LENGTH,
    );
    // SGL length differing from the blocks.
    let sqe = rw_sqe(false, 1, 0, 2, &q.keyed(0, BLOCK));
    assert_status(&q.submit(sqe, &[]), Status::SGL_INVALID_DATA_LENGTH);
    // LBA out of range.
    assert_status(&q.rw(false, 1, NS_BLOCKS, 1), Status::LBA_OUT_OF_RANGE);
    assert_status(&q.rw(true, 1, NS_BLOCKS - 1, 2), Status::LBA_OUT_OF_RANGE);
    // Bad NSID.
    assert_status(&q.rw(false, 99, 0, 1), Status::INVALID_NAMESPACE);
    assert_status(&q.rw(false, 0, 0, 1), Status::INVALID_NAMESPACE);
    // Unknown I/O opcode.
    assert_status(&q.submit(Sqe::new(0x55, 0), &[]), Status::INVALID_OPCODE);
    // In-capsule data longer than what arrived.
    let sgl = Sgl::InCapsule(InCapsuleSgl {
        offset: 0,
        len: 4096,
    });
    assert_status(
        &q.submit(rw_sqe(true, 1, 0, 8, &sgl), &[0u8; 512]),
        Status::SGL_INVALID_DATA_LENGTH,
    );
    // In-capsule data on a read.
    let sgl = Sgl::InCapsule(InCapsuleSgl {
        offset: 0,
        len: 512,
    });
    assert_status(
        &q.submit(rw_sqe(false, 1, 0, 1, &sgl), &[]),
        Status::INVALID_FIELD,
    );
    // A DSM range out of range.
    let r = DsmRange {
        cattr: 0,
        nlb: 8,
        slba: NS_BLOCKS - 4,
    };
    let mut sqe = Dsm {
        nsid: 1,
        nr: 0,
        idr: false,
        idw: false,
        deallocate: true,
    }
    .to_sqe(0);
    sqe.set_sgl(&Sgl::InCapsule(InCapsuleSgl { offset: 0, len: 16 }));
    assert_status(&q.submit(sqe, &r.encode()), Status::LBA_OUT_OF_RANGE);
    // Second Connect on a connected queue.
    let c = q.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
    assert_status(&c, Status::COMMAND_SEQUENCE_ERROR);
    // The queue still works.
    assert!(q.rw(false, 1, 0, 1).status.is_success());

    // Connect to an I/O queue of a controller that does not exist / another host.
    let mut raw = Host::connect(addr, cm_request(2, DEPTH as u16)).unwrap();
    let c = raw.fabrics_connect(2, SUBNQN, HOSTNQN, cntlid + 100, 0);
    assert_status(&c, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(c.dw0, 0x0001_0010, "IATTR data, IPO cntlid");
    drop(raw);
    drop(q);
    drop(_admin);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn connect_refusals() {
    if skip_unless_rdma("connect_refusals") {
        return;
    }
    let (t, addr) = start_target("32MiB", "");
    // Unknown subsystem NQN: Invalid Parameters pointing at SUBNQN in the data.
    let mut h = Host::connect(addr, cm_request(0, 32)).unwrap();
    let c = h.fabrics_connect(0, "nqn.2026-11.io.rdmablk:nope", HOSTNQN, CNTLID_DYNAMIC, 0);
    assert_status(&c, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(c.dw0, 0x0001_0100);
    // Host not allowed.
    let c = h.fabrics_connect(0, SUBNQN, OTHER_HOSTNQN, CNTLID_DYNAMIC, 0);
    assert_status(&c, Status::CONNECT_INVALID_HOST);
    // Admin Connect with a static cntlid.
    let c = h.fabrics_connect(0, SUBNQN, HOSTNQN, 5, 0);
    assert_status(&c, Status::CONNECT_INVALID_PARAMETERS);
    // Admin commands before Connect.
    let (c, _) = {
        let sgl = h.keyed(0, 4096);
        let mut sqe = IdentifyCmd {
            cns: 1,
            cntid: 0,
            csi: 0,
            nsid: 0,
        }
        .to_sqe(0);
        sqe.set_sgl(&sgl);
        (h.submit(sqe, &[]), ())
    };
    assert_status(&c, Status::COMMAND_SEQUENCE_ERROR);
    drop(h);

    // Bad CM private data.
    let mut bad = cm_request(0, 32).encode();
    bad[0] = 1;
    assert_eq!(
        reject_status(Host::connect_raw(addr, bad.to_vec(), 32)),
        CmRejectStatus::InvalidRecordFormat
    );
    // Private data shorter than the 32-byte record. The soft provider delivers it as sent and
    // the target refuses the length. RDMA CM (verbs) zero-pads a connect's private data to 56
    // bytes, so there the short length cannot be observed: the target decodes a record of
    // zeros, whose hrqsize 0 is refused instead.
    let short_refused_as = match e2e_fabric().0 {
        ProviderKind::Soft => CmRejectStatus::InvalidLength,
        ProviderKind::Verbs => CmRejectStatus::InvalidHrqsize,
    };
    assert_eq!(
        reject_status(Host::connect_raw(addr, vec![0u8; 8], 32)),
        short_refused_as
    );
    assert_eq!(
        reject_status(Host::connect(addr, cm_request(0, 64))),
        CmRejectStatus::InvalidHsqsize
    );
    assert_eq!(
        reject_status(Host::connect(addr, cm_request(1, (DEPTH + 1) as u16))),
        CmRejectStatus::InvalidHsqsize
    );
    assert_eq!(
        reject_status(Host::connect(addr, cm_request(9, 8))),
        CmRejectStatus::InvalidQid
    );
    let mut r = cm_request(1, 8);
    r.hrqsize = 0;
    assert_eq!(
        reject_status(Host::connect(addr, r)),
        CmRejectStatus::InvalidHrqsize
    );
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn arena_full_rejects_with_no_resources() {
    // The data pool takes 400 KiB; an RDMA parcel at depth 32 (receive and response slots)
    // is 136 KiB: the 200 KiB left hold exactly one.
    let (t, addr) = start_target("600KiB\"\ndata_bytes = \"400KiB", "");
    let (admin, _cntlid) = admin_queue(addr, 0);
    let s = t.arena_stats();
    if e2e_transport() != E2eTransport::Rdma {
        // A loop or NVMe/TCP queue takes nothing of the arena (its capsules are in ordinary
        // memory, its data in the pool): a second queue is served.
        assert_eq!(s.parcels, 0);
        let (other, _) = admin_queue(addr, 0);
        drop((admin, other));
        wait_idle(&t);
        t.shutdown();
        return;
    }
    assert_eq!(s.parcels, 1);
    {
        assert_eq!(
            reject_status(Host::connect(addr, cm_request(1, 32))),
            CmRejectStatus::NoResources
        );
    }
    assert_eq!(
        t.arena_stats().parcels,
        1,
        "nothing allocated for the refused queue"
    );
    drop(admin);
    wait_idle(&t);
    // Space is back: a new admin queue fits.
    let (admin, _) = admin_queue(addr, 0);
    drop(admin);
    wait_idle(&t);
    t.shutdown();
}

/// A push queue whose data slots the arena has no room for is served without push (the
/// accept declines it and the host uses the ordinary path), not refused.
#[test]
fn push_without_room_for_its_slots_is_declined_not_refused() {
    if skip_unless_rdma("push_without_room_for_its_slots_is_declined_not_refused") {
        return;
    }
    // Room for a few receive-and-response parcels, not for 32 data slots of 64 KiB (the
    // default push budget, 2 MiB, over 32).
    let (t, addr) = start_target("2MiB\"\ndata_bytes = \"1MiB", "");
    push_declined_queue_serves(&t, addr);
    t.shutdown();
    // A push budget of 0 declines push whatever the arena's room.
    let t = start_on_free_port(|port| {
        config_text(port, "32MiB", "").replace(
            "max_connections = 16",
            "max_connections = 16\npush_window_bytes = 0",
        )
    });
    push_declined_queue_serves(&t, t.local_addrs()[0]);
    t.shutdown();
}

/// A queue that asks for push writes is accepted with push declined and serves every size.
fn push_declined_queue_serves(t: &rdmablk_target::Target, addr: std::net::SocketAddr) {
    let (admin, cntlid) = admin_queue(addr, 0);
    let mut cm = cm_request(1, 32);
    cm.push = Some(rdmablk::nvme::transport::rdma::PushRequest {
        slots: 0,
        slot_bytes: 0,
    });
    let mut q = Host::connect(addr, cm).expect("the queue is accepted");
    assert!(
        matches!(
            q.accept.push,
            rdmablk::nvme::transport::rdma::PushAnswer::Declined
        ),
        "push: {:?}",
        q.accept.push
    );
    let c = q.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
    assert!(c.status.is_success(), "I/O connect: {}", c.status);
    write_read_each_size(&mut q, "push declined");
    drop((q, admin));
    wait_idle(t);
}

#[test]
fn short_capsule_is_fatal_for_the_queue() {
    let (t, addr) = start_target("32MiB", "");
    let (h, _) = admin_queue(addr, 0);
    h.send_capsule(&[0u8; 32]);
    assert!(
        h.wait_disconnected(HANG_GUARD),
        "the target drops the queue"
    );
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn arena_returns_to_idle_after_disconnect_mid_io() {
    let (t, addr) = start_target("32MiB", "");
    let (admin, cntlid) = admin_queue(addr, 0);
    let q = io_queue(addr, 1, cntlid);
    // Fire large writes without waiting, then vanish.
    for i in 0..8u64 {
        let sgl = q.keyed(0, MAX_IO);
        let mut sqe = rw_sqe(true, 1, i * 256, MAX_IO / BLOCK, &sgl);
        sqe.cid = i as u16 + 1;
        q.send_capsule(&sqe.to_bytes());
    }
    drop(q);
    drop(admin);
    wait_idle(&t);
    assert_eq!(t.controllers(), 0);
    t.shutdown();
}

/// A host that says nothing after its last command loses its controller (the admin queue,
/// then the I/O queue): not before its KATO has passed since that command, and without a
/// hang.
#[test]
fn keep_alive_timeout_tears_a_silent_host_down() {
    let kato = Duration::from_millis(300);
    let (t, addr) = start_target("32MiB", "");
    let (mut admin, cntlid) = admin_queue(addr, kato.as_millis() as u32);
    let io = io_queue(addr, 1, cntlid);
    assert_eq!(t.controllers(), 1);
    let last_word = std::time::Instant::now();
    keep_alive(&mut admin).expect("Keep Alive");
    // Say nothing: the admin queue and then the I/O queue go.
    let after = wait_keep_alive_cut(&admin, last_word, kato, "admin queue");
    eprintln!("admin queue dropped {after:?} after the last command (KATO {kato:?})");
    assert!(io.wait_disconnected(HANG_GUARD), "I/O queue dropped");
    wait_idle(&t);
    assert_eq!(t.controllers(), 0);
    t.shutdown();
}

/// A host that sends Keep Alive at a tenth of its KATO keeps its controller through 20 of
/// them (twice its KATO). The target may drop a host only after KATO of silence, so the
/// test can fail only if the target drops one that was not silent that long; a test thread
/// starved for KATO (a loaded machine) makes that attempt inconclusive, and it is tried
/// again.
#[test]
fn keep_alive_keeps_a_talking_host() {
    const ATTEMPTS: u32 = 3;
    let kato = Duration::from_secs(2);
    let (t, addr) = start_target("32MiB", "");
    let mut starved = Vec::new();
    for _ in 0..ATTEMPTS {
        let since = std::time::Instant::now();
        let (mut admin, _) = admin_queue(addr, kato.as_millis() as u32);
        let talk = keep_talking(since, 20, kato / 10, || keep_alive(&mut admin));
        if talk.lived(kato) {
            let controllers = t.controllers();
            if talk.last_sent.elapsed() < kato {
                assert_eq!(controllers, 1, "the controller was torn down");
            }
            drop(admin);
            wait_idle(&t);
            t.shutdown();
            return;
        }
        starved.push(talk.longest_silence);
        drop(admin);
        wait_idle(&t);
    }
    panic!("the test host itself was silent for KATO {kato:?} in every attempt: {starved:?}");
}

#[test]
fn async_event_request_is_held_and_aborted_at_shutdown() {
    let (t, addr) = start_target("32MiB", "");
    let (mut admin, _) = admin_queue(addr, 0);
    let mut sqe = rdmablk::nvme::admin::async_event_request_sqe(0);
    sqe.cid = 4000;
    admin.send_capsule(&sqe.to_bytes());
    // Still answered while one is held.
    assert!(admin
        .submit(rdmablk::nvme::admin::keep_alive_sqe(0), &[])
        .status
        .is_success());
    let stopper = std::thread::spawn(move || t.shutdown());
    let c = admin
        .wait_response()
        .expect("the held request completes at shutdown");
    assert_eq!(c.cid, 4000);
    assert_status(&c, Status::ABORT_SQ_DELETED);
    stopper.join().unwrap();
}

#[test]
fn push_writes_when_negotiated() {
    if skip_unless_rdma("push_writes_when_negotiated") {
        return;
    }
    let (t, addr) = start_target("32MiB", "");
    let (_admin, cntlid) = admin_queue(addr, 0);
    let mut cm = cm_request(1, DEPTH as u16);
    cm.push = Some(rdmablk::nvme::transport::rdma::PushRequest {
        slots: 0,
        slot_bytes: 0,
    });
    let mut q = Host::connect(addr, cm).unwrap();
    let rdmablk::nvme::transport::rdma::PushAnswer::Granted(w) = q.accept.push else {
        panic!("push not granted: {:?}", q.accept.push);
    };
    assert_eq!(w.slots as u32, DEPTH);
    // The default push budget (limits.push_window_bytes, 2 MiB) over the queue's 32 slots.
    assert_eq!(w.slot_bytes, 64 << 10);
    let c = q.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
    assert!(c.status.is_success());
    // Push 8 KiB into slot cid % slots with RDMA WRITE, then name the slot.
    let data = pattern(7, 8192);
    q.write_data(0, &data);
    let next_cid = 2u16; // the host's cid after the Connect (cid 1)
    let slot = u32::from(next_cid) % u32::from(w.slots);
    let sge = [q.rdma().mr.sge(DATA_OFF, 8192)];
    q.rdma()
        .qp
        .post_send(&[SendWr {
            wr_id: 5,
            op: WrOp::RdmaWrite {
                remote_addr: w.slot_addr(slot as u16).unwrap(),
                rkey: w.rkey,
            },
            sgl: &sge,
            flags: SendFlags::empty(),
        }])
        .unwrap();
    let mut sqe = rw_sqe(
        true,
        1,
        50,
        16,
        &Sgl::InCapsule(InCapsuleSgl { offset: 0, len: 0 }),
    );
    let mut d = [0u8; 16];
    d[0..8].copy_from_slice(&u64::from(slot).to_le_bytes());
    d[8..12].copy_from_slice(&8192u32.to_le_bytes());
    d[15] = 0xF0;
    sqe.dptr = d;
    let c = q.submit(sqe, &[]);
    assert!(c.status.is_success(), "push write: {}", c.status);
    q.write_data(0, &[0u8; 8192]);
    assert!(q.rw(false, 1, 50, 16).status.is_success());
    assert_eq!(q.read_data(0, 8192), data);

    // A standard host never sees target memory; a push SGL there is an invalid type.
    let mut std_q = io_queue(addr, 2, cntlid);
    assert_eq!(
        std_q.accept.push,
        rdmablk::nvme::transport::rdma::PushAnswer::Absent
    );
    let mut sqe = rw_sqe(
        true,
        1,
        50,
        16,
        &Sgl::InCapsule(InCapsuleSgl { offset: 0, len: 0 }),
    );
    sqe.dptr = d;
    assert_status(&std_q.submit(sqe, &[]), Status::SGL_INVALID_TYPE);
    drop(std_q);
    drop(q);
    drop(_admin);
    wait_idle(&t);
    t.shutdown();
}

/// The push-write SGL descriptor (type 0xF0) naming `slot` for `len` bytes.
fn pushed_sgl(slot: u32, len: u32) -> [u8; 16] {
    let mut d = [0u8; 16];
    d[0..8].copy_from_slice(&u64::from(slot).to_le_bytes());
    d[8..12].copy_from_slice(&len.to_le_bytes());
    d[15] = 0xF0;
    d
}

/// A push-write command for `blocks` at `lba` with cid `cid` (data in slot `cid % slots`).
fn push_write_sqe(cid: u16, slot: u32, lba: u64, blocks: u32) -> Sqe {
    let mut sqe = rw_sqe(
        true,
        1,
        lba,
        blocks,
        &Sgl::InCapsule(InCapsuleSgl { offset: 0, len: 0 }),
    );
    sqe.cid = cid;
    sqe.dptr = pushed_sgl(slot, blocks * BLOCK);
    sqe
}

/// A CM connect to I/O queue `qid` asking for push writes; panics if not granted.
fn push_queue_cm(
    addr: std::net::SocketAddr,
    qid: u16,
) -> (Host, rdmablk::nvme::transport::rdma::PushWindow) {
    let mut cm = cm_request(qid, DEPTH as u16);
    cm.push = Some(rdmablk::nvme::transport::rdma::PushRequest {
        slots: 0,
        slot_bytes: 0,
    });
    let q = Host::connect(addr, cm).expect("push CM connect");
    let rdmablk::nvme::transport::rdma::PushAnswer::Granted(w) = q.accept.push else {
        panic!("push not granted: {:?}", q.accept.push);
    };
    (q, w)
}

/// Posts one signalled RDMA WRITE or READ of `len` bytes of the host's data buffer at
/// offset 0 and returns its completion status (receive flushes are skipped).
fn rdma(h: &Host, write: bool, remote_addr: u64, rkey: u32, len: u32) -> WcStatus {
    const RDMA_ID: u64 = 0xD00D_0000;
    let sge = [h.rdma().mr.sge(DATA_OFF, len)];
    let op = if write {
        WrOp::RdmaWrite { remote_addr, rkey }
    } else {
        WrOp::RdmaRead { remote_addr, rkey }
    };
    h.rdma()
        .qp
        .post_send(&[SendWr {
            wr_id: RDMA_ID,
            op,
            sgl: &sge,
            flags: SendFlags::SIGNALED,
        }])
        .expect("post RDMA");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut wcs = [Wc::default(); 8];
    loop {
        let n = h.rdma().cq.poll(&mut wcs).expect("poll");
        if let Some(wc) = wcs[..n].iter().find(|wc| wc.wr_id == RDMA_ID) {
            return wc.status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no completion for the RDMA operation in 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Regression (rxe): the target released a push slot only at its response SEND's completion,
/// so a host that reused the command ID as soon as the response arrived (as the initiator
/// does) got Command ID Conflict whenever its next capsule beat that completion. This host,
/// one command at a time, seldom wins that race; the initiator's
/// `push_writes_granted_and_used_by_rdmablk_target` on rxe failed on it every time.
#[test]
fn push_slot_reusable_as_soon_as_the_response_arrives() {
    if skip_unless_rdma("push_slot_reusable_as_soon_as_the_response_arrives") {
        return;
    }
    let (t, addr) = start_target("32MiB", "");
    let (_admin, cntlid) = admin_queue(addr, 0);
    let (mut q, w) = push_queue_cm(addr, 1);
    let c = q.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
    assert!(c.status.is_success());
    let cid = 5u16;
    let slot = u32::from(cid) % u32::from(w.slots);
    for i in 0..64u64 {
        q.write_data(0, &pattern(i, 4096));
        let sge = [q.rdma().mr.sge(DATA_OFF, 4096)];
        q.rdma()
            .qp
            .post_send(&[SendWr {
                wr_id: 5,
                op: WrOp::RdmaWrite {
                    remote_addr: w.slot_addr(slot as u16).unwrap(),
                    rkey: w.rkey,
                },
                sgl: &sge,
                flags: SendFlags::empty(),
            }])
            .unwrap();
        q.send_capsule(&push_write_sqe(cid, slot, i * 8, 8).to_bytes());
        let c = q.wait_response().expect("push write response");
        assert_eq!(c.cid, cid);
        assert!(c.status.is_success(), "push write {i}: {}", c.status);
    }
    q.write_data(0, &[0u8; 4096]);
    assert!(q.rw(false, 1, 63 * 8, 8).status.is_success());
    assert_eq!(q.read_data(0, 4096), pattern(63, 4096));
    drop(q);
    drop(_admin);
    wait_idle(&t);
    t.shutdown();
}

/// Isolation of push windows: a host that learns another host's push window key and address,
/// uses its own key outside its own push window, or guesses keys (the arena region's,
/// neighbours of the victim's) cannot read or write anything: each operation completes with
/// REMOTE_ACCESS_ERROR (which also kills the attacker's queue, so each attempt gets a fresh
/// one) and the victim's pushed data is intact.
///
/// On Soft-RoCE (Linux 6.1) a memory window's accesses are checked against its memory region's
/// range, not the memory window's bounds; the target therefore binds each memory window over a
/// region covering exactly that connection's data area (never the arena's region), so on rxe
/// too nothing outside the attacker's own data area is reachable with its own key. The memory
/// window covers that whole region, so "outside the window but inside the region" does not
/// exist here.
#[test]
fn push_windows_isolate_clients() {
    if skip_unless_rdma("push_windows_isolate_clients") {
        return;
    }
    let (t, addr) = start_target("64MiB", "");
    // The victim: a controller with a push queue, its data pushed into slot 2 (the cid of its
    // next command) but not yet named by a command.
    let (_admin_a, cntlid) = admin_queue(addr, 0);
    let (mut a, wa) = push_queue_cm(addr, 1);
    assert!(a
        .fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0)
        .status
        .is_success());
    let victim = pattern(42, 8192);
    a.write_data(0, &victim);
    let slot = 2u32;
    let victim_addr = wa.slot_addr(slot as u16).unwrap();
    assert_eq!(
        rdma(&a, true, victim_addr, wa.rkey, 8192),
        WcStatus::Success
    );

    let arena_rkey = t.arena_rkey().expect("the arena is registered");
    let attacks: Vec<(&str, bool, Option<u64>, Option<u32>)> = vec![
        // (what, write?, address (None: own push window relative), key (None: own key))
        (
            "victim's key and address, WRITE",
            true,
            Some(victim_addr),
            Some(wa.rkey),
        ),
        (
            "victim's key and address, READ",
            false,
            Some(victim_addr),
            Some(wa.rkey),
        ),
        (
            "own key at the victim's address",
            true,
            Some(victim_addr),
            None,
        ),
        ("own key, READ inside own window", false, None, None),
        (
            "arena region's key, WRITE",
            true,
            Some(victim_addr),
            Some(arena_rkey),
        ),
        (
            "arena region's key, READ",
            false,
            Some(victim_addr),
            Some(arena_rkey),
        ),
        (
            "guessed key: victim's + 1",
            true,
            Some(victim_addr),
            Some(wa.rkey.wrapping_add(1)),
        ),
        (
            "guessed key: next index",
            true,
            Some(victim_addr),
            Some(wa.rkey.wrapping_add(0x100)),
        ),
        (
            "guessed key: previous index",
            true,
            Some(victim_addr),
            Some(wa.rkey.wrapping_sub(0x100)),
        ),
    ];
    for (what, write, at, key) in attacks {
        let (mut b, wb) = push_queue_cm(addr, 1);
        // Any response means the target's bind (posted before it) has executed.
        let _ = b.property_get(properties::CAP, PropertySize::Eight);
        let remote = at.unwrap_or(wb.addr);
        let rkey = key.unwrap_or(wb.rkey);
        b.write_data(0, &pattern(99, 8192));
        let st = rdma(&b, write, remote, rkey, 8192);
        assert_eq!(
            st,
            WcStatus::RemAccessErr,
            "{what}: {remote:#x} rkey {rkey:#x}"
        );
    }
    // Own key just outside both ends of the own push window (own response slots before it,
    // the neighbouring parcel or free arena after it).
    for (what, edge) in [("before own window", -4096i64), ("past own window end", 0)] {
        let (mut b, wb) = push_queue_cm(addr, 1);
        let _ = b.property_get(properties::CAP, PropertySize::Eight);
        let base = if edge < 0 {
            wb.addr - 4096
        } else {
            wb.addr + u64::from(wb.len) - 2048 // straddles the end
        };
        let st = rdma(&b, true, base, wb.rkey, 4096);
        assert_eq!(st, WcStatus::RemAccessErr, "{what}: {base:#x}");
    }

    // The victim's queue is unaffected and its slot holds its own data.
    let c = a.submit(push_write_sqe(0, slot, 100, 16), &[]);
    assert!(c.status.is_success(), "victim's push write: {}", c.status);
    a.write_data(0, &[0u8; 8192]);
    assert!(a.rw(false, 1, 100, 16).status.is_success());
    assert!(
        a.read_data(0, 8192) == victim,
        "the victim's pushed data changed"
    );
    drop(a);
    drop(_admin_a);
    wait_idle(&t);
    t.shutdown();
}

/// Regression: the target reposted a command's receive only when its response SEND completed,
/// but a host may send its next command as soon as it sees the response. With every queue
/// entry in use (depth - 1 commands in flight) that next capsule found no receive posted: an
/// RNR NAK, which on real RDMA stalls the host for the RNR timer (655 ms with RDMA CM's
/// defaults). Here the host's RNR retry count is 0, so a missing receive fails the test.
#[test]
fn host_resending_at_each_response_never_meets_a_missing_receive() {
    if skip_unless_rdma("host_resending_at_each_response_never_meets_a_missing_receive") {
        return;
    }
    let (t, addr) = start_target("64MiB", "");
    let (admin, cntlid) = admin_queue(addr, 0);
    let depth = CMD_SLOTS as u16 + 1;
    let cm = cm_request(1, depth).encode().to_vec();
    let mut h = Host::connect_rnr(addr, cm, u32::from(depth), 0).expect("I/O CM connect");
    let c = h.fabrics_connect(1, SUBNQN, HOSTNQN, cntlid, 0);
    assert!(c.status.is_success(), "I/O connect: {}", c.status);
    let in_flight = depth - 1;
    let mut next_cid = 100u16;
    let mut send_flush = |h: &Host| {
        next_cid = next_cid.wrapping_add(1).max(100);
        h.send_capsule(&rdmablk::nvme::io::flush_sqe(1, next_cid).to_bytes());
    };
    for _ in 0..in_flight {
        send_flush(&h);
    }
    for i in 0..2_000 {
        let cqe = h
            .wait_response()
            .unwrap_or_else(|e| panic!("command {i}: {e} (an RNR means no receive was posted)"));
        assert!(cqe.status.is_success(), "command {i}: {}", cqe.status);
        send_flush(&h);
    }
    for _ in 0..in_flight {
        h.wait_response().expect("last responses");
    }
    drop(h);
    drop(admin);
    wait_idle(&t);
}

#[test]
fn io_opcodes_are_unknown_on_the_admin_queue() {
    let (t, addr) = start_target("32MiB", "");
    let (mut admin, _) = admin_queue(addr, 0);
    // Opcodes the admin command set does not implement here.
    let c = admin.submit(Sqe::new(0x7E, 0), &[]);
    assert_status(&c, Status::INVALID_OPCODE);
    let c = admin.submit(Sqe::new(admin::FORMAT_NVM, 0), &[]);
    assert_status(&c, Status::INVALID_OPCODE);
    // The Abort command answers "not aborted".
    let c = admin.submit(Sqe::new(admin::ABORT, 0), &[]);
    assert!(c.status.is_success());
    assert_eq!(c.dw0, rdmablk::nvme::admin::ABORT_NOT_ABORTED);
    drop(admin);
    wait_idle(&t);
    t.shutdown();
}

/// The Linux host (since about 5.7) sends every Dataset Management with a 4 KiB range buffer,
/// whatever NR says (`nvme_setup_discard`): the SGL is longer than the command's data. It was
/// answered Data SGL Length Invalid, so `blkdiscard`, `fstrim` and mkfs' discard failed.
#[test]
fn discard_with_a_linux_sized_range_buffer_is_accepted() {
    let (t, addr) = start_target("32MiB", "");
    let (_admin, cntlid) = admin_queue(addr, 0);
    let mut q = io_queue(addr, 1, cntlid);
    let data = pattern(7, 8 * BLOCK as usize);
    q.write_data(0, &data);
    assert!(q.rw(true, 1, 64, 8).status.is_success());

    let dsm = |nr: u8| {
        Dsm {
            nsid: 1,
            nr,
            idr: false,
            idw: false,
            deallocate: true,
        }
        .to_sqe(0)
    };
    // One range (NR 0) in a 4096-byte buffer whose other 255 entries are garbage that must
    // not be read as ranges.
    let mut buf = vec![0xEEu8; 4096];
    let r = DsmRange {
        cattr: 0,
        nlb: 4,
        slba: 64,
    };
    buf[..DSM_RANGE_LEN].copy_from_slice(&r.encode());
    q.write_data(0, &buf);
    let mut sqe = dsm(0);
    sqe.set_sgl(&q.keyed(0, 4096));
    assert_status(&q.submit(sqe, &[]), Status::SUCCESS);
    assert!(q.rw(false, 1, 64, 8).status.is_success());
    let back = q.read_data(0, 8 * BLOCK as usize);
    let half = 4 * BLOCK as usize;
    assert!(back[..half].iter().all(|&b| b == 0), "deallocated blocks");
    assert_eq!(&back[half..], &data[half..], "blocks after the range");

    // The same in-capsule (the host inlines the 4 KiB buffer when it fits).
    let r = DsmRange {
        cattr: 0,
        nlb: 4,
        slba: 68,
    };
    buf[..DSM_RANGE_LEN].copy_from_slice(&r.encode());
    let mut sqe = dsm(0);
    sqe.set_sgl(&Sgl::InCapsule(InCapsuleSgl {
        offset: 0,
        len: 4096,
    }));
    assert_status(&q.submit(sqe, &buf), Status::SUCCESS);
    assert!(q.rw(false, 1, 64, 8).status.is_success());
    assert!(q.read_data(0, 8 * BLOCK as usize).iter().all(|&b| b == 0));

    // Shorter than the ranges NR announces is still refused.
    let mut sqe = dsm(3);
    sqe.set_sgl(&q.keyed(0, (3 * DSM_RANGE_LEN) as u32));
    assert_status(&q.submit(sqe, &[]), Status::SGL_INVALID_DATA_LENGTH);
    drop(q);
    drop(_admin);
    wait_idle(&t);
    t.shutdown();
}
