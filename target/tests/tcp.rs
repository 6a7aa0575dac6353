//! NVMe/TCP against rdmablk-target over real sockets: the raw test host's NVMe/TCP wire
//! (`common/tcp_wire.rs`, driven by hand) connects, enables the controller, identifies it,
//! writes and reads back every size with and without digests; malformed PDUs get a C2HTermReq
//! and the connection closes; data that fails its digest fails only its command.

mod common;

use std::net::SocketAddr;

use common::tcp_target::{start, start_with_arena, start_with_limits, wait_held};
use common::tcp_wire::{rw_cmd, TcpWire};
use common::{pattern, BLOCK, HOSTNQN, ICD, MAX_IO, OTHER_HOSTNQN};
use rdmablk::nvme::identify::{cns, sgls, IdentifyController, IDENTIFY_LEN};
use rdmablk::nvme::transport::tcp::{
    encode_capsule_cmd, pdu_type, Fes, IcReq, R2t, CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN,
};
use rdmablk::nvme::{Cqe, InCapsuleSgl, Sgl, Sqe, Status, TransportSgl, CQE_LEN};
use rdmablk_target::Target;

fn every_size(addr: SocketAddr, hdgst: bool, ddgst: bool) {
    let (mut a, cntlid) = TcpWire::admin(addr, hdgst, ddgst);
    let id = rdmablk::nvme::IdentifyCmd {
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
        nsid: 0,
    }
    .to_sqe(0);
    let (c, page) = a.exec(id, &[], IDENTIFY_LEN as u32, false);
    assert!(c.status.is_success(), "Identify: {}", c.status);
    let idc = IdentifyController::decode(page[..].try_into().unwrap()).expect("Identify page");
    assert_eq!(idc.sgls & sgls::KEYED, 0, "no keyed SGLs over TCP");
    assert_ne!(idc.sgls & sgls::OFFSET, 0, "in-capsule data offered");
    assert_eq!(idc.ioccsz, (64 + ICD) / 16);
    assert_eq!(idc.icdoff, 0);

    let mut q = TcpWire::connect(addr, hdgst, ddgst);
    let c = q.fabrics_connect(1, 31, cntlid);
    assert!(c.status.is_success(), "I/O Connect: {}", c.status);
    let mut lba = 0u64;
    let mut blocks = 1u32;
    while blocks * BLOCK <= MAX_IO {
        let len = (blocks * BLOCK) as usize;
        let data = pattern(lba + u64::from(hdgst) * 7 + u64::from(ddgst) * 13, len);
        let in_capsule = len as u32 <= ICD;
        let (c, _) = q.exec(rw_cmd(true, lba, blocks), &data, 0, in_capsule);
        assert!(c.status.is_success(), "write {len}: {}", c.status);
        if in_capsule {
            // The same size again by R2T: both ways of sending data work.
            let (c, _) = q.exec(rw_cmd(true, lba, blocks), &data, 0, false);
            assert!(c.status.is_success(), "write {len} by R2T: {}", c.status);
        }
        let (c, read) = q.exec(rw_cmd(false, lba, blocks), &[], len as u32, false);
        assert!(c.status.is_success(), "read {len}: {}", c.status);
        assert!(
            read == data,
            "data read back at {len} bytes (digests {hdgst}/{ddgst})"
        );
        lba += u64::from(blocks);
        blocks *= 2;
    }
    // A keyed SGL is NVMe/RDMA's: refused with SGL Descriptor Type Invalid.
    let mut sqe = rw_cmd(false, 0, 1);
    sqe.cid = 999;
    sqe.set_sgl(&Sgl::Keyed(rdmablk::nvme::KeyedSgl {
        addr: 0x1000,
        len: BLOCK,
        key: 1,
        invalidate: false,
    }));
    q.send_capsule(&sqe, &[]);
    let (l, header, _) = q.recv().unwrap();
    assert_eq!(l.pdu_type, pdu_type::CAPSULE_RESP);
    let cqe = Cqe::decode(header[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap());
    assert_eq!(cqe.status, Status::SGL_INVALID_TYPE.with_dnr());
}

#[test]
fn a_host_writes_and_reads_every_size_without_and_with_digests() {
    let (t, addr) = start();
    every_size(addr, false, false);
    every_size(addr, true, true);
    every_size(addr, true, false);
    t.shutdown();
}

#[test]
fn malformed_pdus_get_a_term_req_and_the_connection_closes() {
    let (t, addr) = start();
    // A capsule whose HLEN is not a capsule's.
    let mut h = TcpWire::connect(addr, false, false);
    let mut bad = [0u8; CAPSULE_CMD_HLEN];
    encode_capsule_cmd(&Sqe::default(), 0, &h.neg, &mut bad);
    bad[2] = 24;
    h.send(&bad).unwrap();
    assert_eq!(h.term_req(), (Some(Fes::InvalidHeaderField), 2));

    // H2CData for an R2T that was never sent, on a connected queue.
    let (mut a, _) = TcpWire::admin(addr, false, false);
    a.h2c(1, 3, 0, &[0u8; 512], true);
    assert_eq!(a.term_req().0, Some(Fes::DataTransferOutOfRange));

    // A second ICReq.
    let mut h = TcpWire::connect(addr, false, false);
    let req = IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: false,
        ddgst: false,
        maxr2t: 0,
    };
    h.send(&req.encode()).unwrap();
    assert_eq!(h.term_req().0, Some(Fes::PduSequenceError));

    // A header digest that does not match.
    let (mut a, _) = TcpWire::admin(addr, true, false);
    let mut h = [0u8; CAPSULE_CMD_HLEN];
    encode_capsule_cmd(&Sqe::default(), 0, &a.neg, &mut h);
    a.send(&h).unwrap();
    a.send(&0xDEAD_BEEFu32.to_le_bytes()).unwrap();
    assert_eq!(a.term_req().0, Some(Fes::HeaderDigestError));

    // The target is fine: a new host does I/O.
    let (_a, cntlid) = TcpWire::admin(addr, false, false);
    let mut q = TcpWire::connect(addr, false, false);
    assert!(q.fabrics_connect(1, 31, cntlid).status.is_success());
    let (c, _) = q.exec(rw_cmd(false, 0, 1), &[], BLOCK, false);
    assert!(c.status.is_success());
    t.shutdown();
}

/// Data that fails its data digest is bad data, not a bad PDU (the specification has no FES
/// for it): its command completes with Transient Transport Error, which the host retries,
/// without a byte of it reaching the namespace, and the connection goes on, as SPDK does
/// (nvmet closes the connection). Before, the target sent a C2HTermReq and closed.
#[test]
fn a_data_digest_error_fails_its_command_with_a_transient_transport_error_and_nothing_else() {
    let (t, addr) = start();
    let (a, cntlid) = TcpWire::admin(addr, false, true);
    let mut q = TcpWire::io_queue(addr, true, 1, cntlid, 32);
    // 8 KiB at LBA 64: 4 KiB of it fits in a capsule (ICD); 8 KiB goes by R2T in two
    // H2CData PDUs.
    let (lba, blocks) = (64, 16);
    let known = pattern(1, (blocks * BLOCK) as usize);
    let (c, _) = q.exec(rw_cmd(true, lba, blocks), &known, 0, false);
    assert_eq!(c.status, Status::SUCCESS, "the known pattern");
    let other = pattern(2, known.len());
    let read_back = |q: &mut TcpWire| {
        let (c, read) = q.exec(rw_cmd(false, lba, blocks), &[], known.len() as u32, false);
        assert_eq!(c.status, Status::SUCCESS, "read");
        read
    };

    // In-capsule data with a wrong digest.
    q.corrupt_next_data_digest();
    let (c, _) = q.exec(
        rw_cmd(true, lba, blocks / 2),
        &other[..known.len() / 2],
        0,
        true,
    );
    assert_eq!(c.status, Status::TRANSIENT_TRANSPORT_ERROR, "in-capsule");
    assert!(
        read_back(&mut q) == known,
        "a damaged capsule's data was written"
    );

    // By R2T: the first H2CData's digest is wrong; the second (LAST) is taken and dropped.
    q.corrupt_next_data_digest();
    let (c, _) = q.exec(rw_cmd(true, lba, blocks), &other, 0, false);
    assert_eq!(c.status, Status::TRANSIENT_TRANSPORT_ERROR, "H2CData");
    assert!(read_back(&mut q) == known, "damaged H2CData was written");

    // The same connection, the same receive and request slots: both ways work again.
    let (c, _) = q.exec(
        rw_cmd(true, lba, blocks / 2),
        &other[..known.len() / 2],
        0,
        true,
    );
    assert_eq!(
        c.status,
        Status::SUCCESS,
        "in-capsule write after the errors"
    );
    let (c, _) = q.exec(
        rw_cmd(true, lba + 8, blocks / 2),
        &other[known.len() / 2..],
        0,
        false,
    );
    assert_eq!(c.status, Status::SUCCESS, "write by R2T after the errors");
    assert!(read_back(&mut q) == other, "data written after the errors");
    drop((q, a));
    wait_held(&t, 0);
    t.shutdown();
}

/// H2CData that trickles in, cut anywhere (inside the header's digest, at the data's first
/// byte, one byte before its digest, inside the digest), lands whole; one whose data digest
/// fails fails its command (Transient Transport Error) without a byte reaching the namespace,
/// and the connection goes on; the PDU after it (the command's LAST, whole) continues where
/// the first one's data ended.
#[test]
fn h2c_data_trickling_in_lands_whole_and_its_digest_is_checked() {
    use rdmablk::nvme::transport::tcp::{R2t, DIGEST_LEN};
    let (t, addr) = start();
    for ddgst in [false, true] {
        let (a, cntlid) = TcpWire::admin(addr, true, ddgst);
        let mut q = TcpWire::io_queue(addr, ddgst, 1, cntlid, 32);
        let hlen = DATA_HLEN + DIGEST_LEN; // the I/O queue has header digests
        let dd = if ddgst { DIGEST_LEN } else { 0 };
        let (lba, blocks) = (256, 128); // 64 KiB: 48 KiB trickling in, then 16 KiB whole (LAST)
        let len = (blocks * BLOCK) as usize;
        let first = 48 * 1024;
        let write = |q: &mut TcpWire, data: &[u8], cuts: &[usize], corrupt: bool| {
            let mut sqe = rw_cmd(true, lba, blocks);
            sqe.cid = q.next_cid;
            q.next_cid += 1;
            sqe.set_sgl(&Sgl::Transport(TransportSgl { len: len as u32 }));
            q.send_capsule(&sqe, &[]);
            let (l, header, _) = q.recv().unwrap();
            assert_eq!(l.pdu_type, pdu_type::R2T);
            let r = R2t::decode(header[..DATA_HLEN].try_into().unwrap());
            assert_eq!((r.r2to, r.r2tl as usize), (0, len));
            if corrupt {
                q.corrupt_next_data_digest();
            }
            q.h2c_trickle((r.cccid, r.ttag, 0), &data[..first], false, cuts);
            q.h2c(r.cccid, r.ttag, first as u32, &data[first..], true);
            let (l, header, _) = q.recv().unwrap();
            assert_eq!(l.pdu_type, pdu_type::CAPSULE_RESP);
            Cqe::decode(header[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap())
        };
        let read_back = |q: &mut TcpWire| {
            let (c, read) = q.exec(rw_cmd(false, lba, blocks), &[], len as u32, false);
            assert_eq!(c.status, Status::SUCCESS, "read");
            read
        };
        let cut_sets: [&[usize]; 4] = [
            &[hlen - 2, hlen + 1, hlen + 20_000],
            &[hlen, hlen + 4096, hlen + 4097],
            &[hlen + 100, hlen + first - 1, hlen + first + dd / 2],
            &[hlen + first],
        ];
        let mut want = Vec::new();
        for (i, cuts) in cut_sets.iter().enumerate() {
            want = pattern(1000 + i as u64 + u64::from(ddgst) * 10, len);
            let c = write(&mut q, &want, cuts, false);
            assert_eq!(
                c.status,
                Status::SUCCESS,
                "write, cuts {cuts:?}, ddgst {ddgst}"
            );
            assert!(
                read_back(&mut q) == want,
                "data read back, cuts {cuts:?}, ddgst {ddgst}"
            );
        }
        if ddgst {
            let other = pattern(77, len);
            let c = write(&mut q, &other, &[hlen + 10, hlen + 30_000], true);
            assert_eq!(
                c.status,
                Status::TRANSIENT_TRANSPORT_ERROR,
                "trickled data, bad digest"
            );
            assert!(
                read_back(&mut q) == want,
                "trickled data with a bad digest was written"
            );
            let c = write(&mut q, &other, &[hlen + 10], false);
            assert_eq!(
                c.status,
                Status::SUCCESS,
                "the same connection after the error"
            );
            assert!(read_back(&mut q) == other, "data written after the error");
        }
        drop((q, a));
    }
    wait_held(&t, 0);
    t.shutdown();
}

/// I/O queue 2 of controller `cntlid`, `tries` times: each Connect is answered Controller
/// Busy (no DNR: room comes back as queues go) and the connection then closes, and none of
/// them counts as a queue (the admin queue and `q1` are the two); once `q1` goes, the same
/// Connect succeeds.
fn busy_until_queue_1_goes(t: &Target, addr: SocketAddr, cntlid: u16, q1: TcpWire, tries: usize) {
    for _ in 0..tries {
        let mut q2 = TcpWire::connect(addr, false, false);
        let c = q2.fabrics_connect(2, 31, cntlid);
        assert_eq!(c.status, Status::CONNECT_CONTROLLER_BUSY, "{}", c.status);
        assert!(!c.status.dnr);
        q2.wait_closed();
    }
    // (The refused connection may close before the target has counted it out.)
    wait_held(t, 2);
    drop(q1);
    wait_held(t, 1);
    let mut q2 = TcpWire::connect(addr, false, false);
    let c = q2.fabrics_connect(2, 31, cntlid);
    assert!(c.status.is_success(), "{}", c.status);
}

/// At `limits.max_connections`, one more connection is answered, not closed; nothing of it
/// counts as a queue.
#[test]
fn a_connect_over_max_connections_is_answered_controller_busy() {
    let (t, addr) = start_with_limits("", 32, "64MiB", "max_connections = 2");
    let (_admin, cntlid) = TcpWire::admin(addr, false, false);
    let q1 = TcpWire::io_queue(addr, false, 1, cntlid, 32);
    busy_until_queue_1_goes(&t, addr, cntlid, q1, 3);
    t.shutdown();
}

/// A host that holds data buffers and never sends their data (the R2Ts it leaves unanswered)
/// takes at most seven eighths of its worker's data pool: another host's commands still run,
/// and the buffers come back when the first host goes.
#[test]
fn a_host_sitting_on_buffers_cannot_starve_another() {
    // A pool of 1 MiB: eight 128 KiB buffers.
    let (t, addr) = start_with_arena("", 32, "4MiB\"\ndata_bytes = \"1MiB");
    let (heavy_admin, cntlid) = TcpWire::admin(addr, false, false);
    let heavy = TcpWire::io_queue(addr, false, 1, cntlid, 32);
    for cid in 1..=16u16 {
        let mut w = rw_cmd(true, 0, MAX_IO / BLOCK);
        w.cid = cid;
        w.set_sgl(&Sgl::Transport(TransportSgl { len: MAX_IO }));
        heavy.send_capsule(&w, &[]);
    }
    // Seven R2Ts come (seven buffers taken); the other nine commands wait for one.
    for _ in 0..7 {
        let (l, _, _) = heavy.recv().expect("an R2T");
        assert_eq!(l.pdu_type, pdu_type::R2T);
    }
    heavy
        .s
        .set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    assert!(
        heavy.recv().is_err(),
        "an eighth R2T: the pool's last eighth went to one host"
    );
    // Status names the host that holds the buffers and whose commands wait.
    let by_host = wait_pool_by_host(&t, |h| h.len() == 1 && h[0]["waiting"] == 9);
    assert_eq!(
        by_host,
        serde_json::json!([{ "hostnqn": HOSTNQN, "bytes_in_use": 7 * MAX_IO, "waiting": 9,
                             "waits": 9 }]),
    );
    // The other host: its admin queue, an I/O queue, verified writes and reads.
    let (light_admin, cntlid2) = TcpWire::admin_as(addr, false, false, 5000, OTHER_HOSTNQN);
    let mut light = TcpWire::io_queue_as(addr, false, 1, cntlid2, 32, OTHER_HOSTNQN);
    for (i, len) in [4096usize, 8192, 4096].into_iter().enumerate() {
        let data = pattern(i as u64, len);
        let lba = 1024 + 64 * i as u64;
        let blocks = len as u32 / BLOCK;
        let (c, _) = light.exec(rw_cmd(true, lba, blocks), &data, 0, false);
        assert!(c.status.is_success(), "write: {}", c.status);
        let (c, back) = light.exec(rw_cmd(false, lba, blocks), &[], len as u32, false);
        assert!(c.status.is_success(), "read: {}", c.status);
        assert!(back == data, "data read back differs");
    }
    // The heavy host still holds its seven; the light one holds none now.
    let by_host = wait_pool_by_host(&t, |h| h.len() == 1);
    assert_eq!(by_host[0]["hostnqn"], HOSTNQN, "{by_host}");
    assert_eq!(by_host[0]["bytes_in_use"], 7 * MAX_IO, "{by_host}");
    drop((heavy, heavy_admin, light, light_admin));
    wait_held(&t, 0);
    t.shutdown();
}

/// In-capsule writes that wait for a data-pool buffer keep their data: it is copied out of
/// the connection's receive buffer into the command's receive slot as its capsule arrives, so
/// the H2CData that passes through the receive buffer meanwhile (seven times its size) does
/// not reach their blocks (a change that read it from the receive buffer later would fail).
#[test]
fn in_capsule_writes_that_wait_for_a_buffer_land_whole() {
    // A pool of 1 MiB: eight 128 KiB buffers.
    let (t, addr) = start_with_arena("", 32, "4MiB\"\ndata_bytes = \"1MiB");
    let (admin, cntlid) = TcpWire::admin(addr, false, false);
    let mut q = TcpWire::io_queue(addr, false, 1, cntlid, 32);
    let big = pattern(99, MAX_IO as usize);
    // Seven R2Ts take seven buffers (the host's share); the eighth command waits, and so does
    // everything the host sends after it.
    for cid in 1..=8u16 {
        let mut w = rw_cmd(
            true,
            u64::from(cid - 1) * u64::from(MAX_IO / BLOCK),
            MAX_IO / BLOCK,
        );
        w.cid = cid;
        w.set_sgl(&Sgl::Transport(TransportSgl { len: MAX_IO }));
        q.send_capsule(&w, &[]);
    }
    let mut r2ts = Vec::new();
    for _ in 0..7 {
        let (l, h, _) = q.recv().expect("an R2T");
        assert_eq!(l.pdu_type, pdu_type::R2T);
        r2ts.push(R2t::decode(h[..DATA_HLEN].try_into().unwrap()));
    }
    // Four in-capsule writes in one send: they arrive together and all wait.
    let lba = |i: usize| 4096 + 8 * i as u64;
    let small: Vec<Vec<u8>> = (0..4).map(|i| pattern(1000 + i as u64, 4096)).collect();
    let mut bytes = Vec::new();
    for (i, data) in small.iter().enumerate() {
        let mut w = rw_cmd(true, lba(i), 4096 / BLOCK);
        w.cid = 100 + i as u16;
        w.set_sgl(&Sgl::InCapsule(InCapsuleSgl {
            offset: 0,
            len: 4096,
        }));
        bytes.extend(q.capsule_pdu(&w, data));
    }
    q.send(&bytes).unwrap();
    wait_pool_by_host(&t, |h| h.len() == 1 && h[0]["waiting"] == 5);
    // The seven commands' data, then the eighth's when its R2T comes; every write succeeds.
    let mut answered = 0;
    for r in &r2ts {
        send_h2c(&q, r, &big);
    }
    while answered < 12 {
        let (l, h, _) = q.recv().expect("a PDU");
        match l.pdu_type {
            pdu_type::R2T => send_h2c(&q, &R2t::decode(h[..DATA_HLEN].try_into().unwrap()), &big),
            pdu_type::CAPSULE_RESP => {
                let c = Cqe::decode(h[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap());
                assert!(c.status.is_success(), "write {}: {}", c.cid, c.status);
                answered += 1;
            }
            t => panic!("unexpected PDU type {t}"),
        }
    }
    for (i, data) in small.iter().enumerate() {
        let (c, back) = q.exec(rw_cmd(false, lba(i), 4096 / BLOCK), &[], 4096, false);
        assert!(c.status.is_success(), "read: {}", c.status);
        assert!(&back == data, "in-capsule write {i} read back differs");
    }
    drop((q, admin));
    wait_held(&t, 0);
    t.shutdown();
}

/// Answers R2T `r` with `data` in two H2CData PDUs.
fn send_h2c(q: &TcpWire, r: &R2t, data: &[u8]) {
    let half = data.len() / 2;
    q.h2c(r.cccid, r.ttag, 0, &data[..half], false);
    q.h2c(r.cccid, r.ttag, half as u32, &data[half..], true);
}

/// `rdmablk-ctl status`'s `data_pool.by_host` once `done` says it is what the test waits for
/// (the workers publish it each housekeeping tick).
fn wait_pool_by_host(
    t: &Target,
    done: impl Fn(&Vec<serde_json::Value>) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let s = t.handle().status();
        let by_host = s["data_pool"]["by_host"].clone();
        if by_host.as_array().is_some_and(&done) {
            return by_host;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "data_pool.by_host never became what the test waits for: {by_host}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// An I/O queue dropped and connected again at once (SPDK's host does so after an error) gets
/// its queue ID back: the one going frees it when it begins to close, not once it drained.
#[test]
fn an_io_queue_connected_again_at_once_gets_its_id() {
    let (t, addr) = start();
    let (_admin, cntlid) = TcpWire::admin(addr, false, false);
    for round in 0..20 {
        let q = TcpWire::io_queue(addr, false, 1, cntlid, 32);
        drop(q);
        let mut again = TcpWire::connect(addr, false, false);
        let c = again.fabrics_connect(1, 31, cntlid);
        assert!(
            c.status.is_success(),
            "round {round}: Connect of queue 1 again: {}",
            c.status
        );
    }
    t.shutdown();
}
