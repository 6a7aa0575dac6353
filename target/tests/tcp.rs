//! NVMe/TCP against rdmablk-target over real sockets: a host written from the NVMe/TCP
//! specification ([`tcp_host`]) connects, enables the controller, identifies it, writes and
//! reads back every size with and without digests; malformed PDUs get a C2HTermReq and the
//! connection closes; data that fails its digest fails only its command.

mod tcp_host;

use std::io::{Read, Write};
use std::net::SocketAddr;

use rdmablk::nvme::identify::{cns, sgls, IdentifyController, IDENTIFY_LEN};
use rdmablk::nvme::transport::tcp::{
    encode_capsule_cmd, pdu_type, Fes, IcReq, TermReq, CAPSULE_CMD_HLEN, CH_LEN, DATA_HLEN,
};
use rdmablk::nvme::{Cqe, Sgl, Sqe, Status, CQE_LEN};
use tcp_host::*;

fn every_size(addr: SocketAddr, hdgst: bool, ddgst: bool) {
    let (mut a, cntlid) = admin(addr, hdgst, ddgst);
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

    let mut q = Host::connect(addr, hdgst, ddgst);
    let c = q.fabrics_connect(1, 31, cntlid);
    assert!(c.status.is_success(), "I/O Connect: {}", c.status);
    let mut lba = 0u64;
    let mut blocks = 1u32;
    while blocks * BLOCK <= MAX_IO {
        let len = (blocks * BLOCK) as usize;
        let data = pattern(lba + u64::from(hdgst) * 7 + u64::from(ddgst) * 13, len);
        let in_capsule = len as u32 <= ICD;
        let (c, _) = q.exec(rw_sqe(true, lba, blocks), &data, 0, in_capsule);
        assert!(c.status.is_success(), "write {len}: {}", c.status);
        if in_capsule {
            // The same size again by R2T: both ways of sending data work.
            let (c, _) = q.exec(rw_sqe(true, lba, blocks), &data, 0, false);
            assert!(c.status.is_success(), "write {len} by R2T: {}", c.status);
        }
        let (c, read) = q.exec(rw_sqe(false, lba, blocks), &[], len as u32, false);
        assert!(c.status.is_success(), "read {len}: {}", c.status);
        assert!(
            read == data,
            "data read back at {len} bytes (digests {hdgst}/{ddgst})"
        );
        lba += u64::from(blocks);
        blocks *= 2;
    }
    // A keyed SGL is NVMe/RDMA's: refused with SGL Descriptor Type Invalid.
    let mut sqe = rw_sqe(false, 0, 1);
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

/// Reads until the target's C2HTermReq; returns its FES and FEI, and checks the connection
/// closes after it.
fn term_req(h: &mut Host) -> (Option<Fes>, u32) {
    let (l, header, _) = h.recv().expect("a C2HTermReq");
    assert_eq!(l.pdu_type, pdu_type::C2H_TERM_REQ);
    let r = TermReq::decode(header[..DATA_HLEN].try_into().unwrap());
    let mut b = [0u8; 1];
    assert_eq!(h.s.read(&mut b).unwrap_or(0), 0, "closed after the TermReq");
    r
}

#[test]
fn malformed_pdus_get_a_term_req_and_the_connection_closes() {
    let (t, addr) = start();
    // A capsule whose HLEN is not a capsule's.
    let mut h = Host::connect(addr, false, false);
    let mut bad = [0u8; CAPSULE_CMD_HLEN];
    encode_capsule_cmd(&Sqe::default(), 0, &h.neg, &mut bad);
    bad[2] = 24;
    h.s.write_all(&bad).unwrap();
    assert_eq!(term_req(&mut h), (Some(Fes::InvalidHeaderField), 2));

    // H2CData for an R2T that was never sent, on a connected queue.
    let (mut a, _) = admin(addr, false, false);
    a.h2c(1, 3, 0, &[0u8; 512], true);
    assert_eq!(term_req(&mut a).0, Some(Fes::DataTransferOutOfRange));

    // A second ICReq.
    let mut h = Host::connect(addr, false, false);
    let req = IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: false,
        ddgst: false,
        maxr2t: 0,
    };
    h.s.write_all(&req.encode()).unwrap();
    assert_eq!(term_req(&mut h).0, Some(Fes::PduSequenceError));

    // A header digest that does not match.
    let (mut a, _) = admin(addr, true, false);
    let mut h = [0u8; CAPSULE_CMD_HLEN];
    encode_capsule_cmd(&Sqe::default(), 0, &a.neg, &mut h);
    a.s.write_all(&h).unwrap();
    a.s.write_all(&0xDEAD_BEEFu32.to_le_bytes()).unwrap();
    assert_eq!(term_req(&mut a).0, Some(Fes::HeaderDigestError));

    // The target is fine: a new host does I/O.
    let (_a, cntlid) = admin(addr, false, false);
    let mut q = Host::connect(addr, false, false);
    assert!(q.fabrics_connect(1, 31, cntlid).status.is_success());
    let (c, _) = q.exec(rw_sqe(false, 0, 1), &[], BLOCK, false);
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
    let (a, cntlid) = admin(addr, false, true);
    let mut q = io_queue(addr, true, 1, cntlid, 32);
    // 8 KiB at LBA 64: 4 KiB of it fits in a capsule (ICD); 8 KiB goes by R2T in two
    // H2CData PDUs.
    let (lba, blocks) = (64, 16);
    let known = pattern(1, (blocks * BLOCK) as usize);
    let (c, _) = q.exec(rw_sqe(true, lba, blocks), &known, 0, false);
    assert_eq!(c.status, Status::SUCCESS, "the known pattern");
    let other = pattern(2, known.len());
    let read_back = |q: &mut Host| {
        let (c, read) = q.exec(rw_sqe(false, lba, blocks), &[], known.len() as u32, false);
        assert_eq!(c.status, Status::SUCCESS, "read");
        read
    };

    // In-capsule data with a wrong digest.
    q.corrupt_ddgst = true;
    let (c, _) = q.exec(
        rw_sqe(true, lba, blocks / 2),
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
    q.corrupt_ddgst = true;
    let (c, _) = q.exec(rw_sqe(true, lba, blocks), &other, 0, false);
    assert_eq!(c.status, Status::TRANSIENT_TRANSPORT_ERROR, "H2CData");
    assert!(read_back(&mut q) == known, "damaged H2CData was written");

    // The same connection, the same receive and request slots: both ways work again.
    let (c, _) = q.exec(
        rw_sqe(true, lba, blocks / 2),
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
        rw_sqe(true, lba + 8, blocks / 2),
        &other[known.len() / 2..],
        0,
        false,
    );
    assert_eq!(c.status, Status::SUCCESS, "write by R2T after the errors");
    assert!(read_back(&mut q) == other, "data written after the errors");
    drop((q, a));
    wait_held(&t, 0, 0);
    t.shutdown();
}
