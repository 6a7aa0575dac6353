//! Every malformation of a PDU that rdmablk-target checks over NVMe/TCP, one row each, with
//! what the target answers: a C2HTermReq (its FES, its FEI, the offending PDU quoted) and a
//! closed connection, a failed command on a connection that goes on, a closed connection with
//! nothing sent, or an ICResp where a value is accepted. The rows are the NVMe/TCP table of
//! `docs/conformance.md`, which names each by its test and row and says what nvmet and SPDK
//! answer. Each row starts from a new connection (fresh, initialized, a connected I/O queue,
//! or one whose write waits for its data), sends its bytes through the raw test host's
//! NVMe/TCP wire (`common/tcp_wire.rs`) and checks the answer; a test runs all its rows and
//! names every row that failed.

mod common;

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};

use common::tcp_target::{start, wait_held};
use common::tcp_wire::{rw_cmd, TcpWire};
use common::{pattern, BLOCK, MAX_IO};
use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::identify::cns;
use rdmablk::nvme::transport::tcp::{
    digest, flags, pdu_type, CommonHeader, Fes, IcReq, IcResp, R2t, TermReq, CH_LEN, DATA_HLEN,
    IC_LEN,
};
use rdmablk::nvme::{
    Cqe, IdentifyCmd, InCapsuleSgl, KeyedSgl, Sgl, Sqe, Status, TransportSgl, CQE_LEN,
};

/// The connection a row starts from.
#[derive(Clone, Copy, Debug)]
enum At {
    /// Connected, nothing sent.
    Fresh,
    /// ICReq answered, no Connect yet.
    Initialized,
    /// An I/O queue (qid 1) of `depth` entries, of a controller whose admin queue is enabled.
    Queue(u16),
    /// A 32-deep I/O queue with a write of [`R2T_BYTES`] (by R2T) whose R2T has come: the
    /// row sends the host's answer.
    AwaitingData,
}

/// The data a write in [`At::AwaitingData`] asks for.
const R2T_BYTES: u32 = 4096;

/// What the target answers a row.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// A C2HTermReq with this FES and FEI, quoting the common header of the row's last PDU;
    /// then the connection closes.
    TermReq(Fes, u32),
    /// The connection closes and nothing is sent.
    Closes,
    /// The row's command completes with this status, and the connection goes on (a read
    /// after it succeeds).
    Status(Status),
    /// An ICResp: the value is accepted.
    IcResp,
    /// The queue's first command completes with this status before any queue exists, and
    /// the connection goes on (a Connect after it makes the queue).
    RefusedFirst(Status),
}

struct Row {
    name: &'static str,
    at: At,
    hdgst: bool,
    ddgst: bool,
    /// Builds the row's last PDU (sending what must come before it, if anything); the
    /// runner sends it.
    pdu: fn(&mut Stage) -> Vec<u8>,
    /// What the target answers; a C2HTermReq quotes the offending PDU, from its common
    /// header on.
    answer: Answer,
}

fn row(name: &'static str, at: At, pdu: fn(&mut Stage) -> Vec<u8>, answer: Answer) -> Row {
    Row {
        name,
        at,
        hdgst: false,
        ddgst: false,
        pdu,
        answer,
    }
}

impl Row {
    /// The row's connection negotiates header and data digests as given.
    fn digests(self, hdgst: bool, ddgst: bool) -> Row {
        Row {
            hdgst,
            ddgst,
            ..self
        }
    }
}

/// A row's connection.
struct Stage {
    host: TcpWire,
    /// The admin queue that keeps the controller of an I/O queue alive.
    _admin: Option<TcpWire>,
    /// The R2T the target sent ([`At::AwaitingData`]).
    r2t: R2t,
}

const QUEUE: At = At::Queue(32);
const IB: Fes = Fes::InvalidHeaderField;
const SEQ: Fes = Fes::PduSequenceError;
const RANGE: Fes = Fes::DataTransferOutOfRange;
const LIMIT: Fes = Fes::DataTransferLimitExceeded;
/// FEI of the common header's fields.
const TYPE: u32 = 0;
const FLAGS: u32 = 1;
const HLEN: u32 = 2;
const PDO: u32 = 3;
const PLEN: u32 = 4;

fn stage(addr: SocketAddr, r: &Row) -> Stage {
    let (host, admin) = match r.at {
        At::Fresh => (TcpWire::uninitialized(addr).expect("TCP connect"), None),
        At::Initialized => (TcpWire::connect(addr, r.hdgst, r.ddgst), None),
        At::Queue(depth) => queue(addr, r, depth),
        At::AwaitingData => queue(addr, r, 32),
    };
    let mut st = Stage {
        host,
        _admin: admin,
        r2t: R2t::default(),
    };
    if let At::AwaitingData = r.at {
        let mut sqe = rw_cmd(true, 0, R2T_BYTES / BLOCK);
        sqe.cid = 0x77;
        sqe.set_sgl(&Sgl::Transport(TransportSgl { len: R2T_BYTES }));
        st.host.send_capsule(&sqe, &[]);
        let (l, header, _) = st.host.recv().expect("an R2T");
        assert_eq!(l.pdu_type, pdu_type::R2T, "the write's R2T");
        st.r2t = R2t::decode(header[..DATA_HLEN].try_into().unwrap());
        assert_eq!((st.r2t.cccid, st.r2t.r2tl), (0x77, R2T_BYTES));
    }
    st
}

fn queue(addr: SocketAddr, r: &Row, depth: u16) -> (TcpWire, Option<TcpWire>) {
    let (admin, cntlid) = TcpWire::admin(addr, false, false);
    let mut q = TcpWire::connect(addr, r.hdgst, r.ddgst);
    let c = q.fabrics_connect(1, depth - 1, cntlid);
    assert!(c.status.is_success(), "I/O Connect: {}", c.status);
    (q, Some(admin))
}

/// Runs one row: its connection, its PDU, the answer it must get.
fn run(addr: SocketAddr, r: &Row) {
    let mut st = stage(addr, r);
    let pdu = (r.pdu)(&mut st);
    // A target that closes at the header may refuse the rest: what it answers is the test.
    let _ = st.host.send(&pdu);
    match r.answer {
        Answer::TermReq(fes, fei) => {
            let (l, header, quote) = st.host.recv().expect("a C2HTermReq");
            assert_eq!(l.pdu_type, pdu_type::C2H_TERM_REQ, "PDU type of the answer");
            let got = TermReq::decode(header[..DATA_HLEN].try_into().unwrap());
            assert_eq!(got, (Some(fes), fei), "FES and FEI");
            let n = pdu.len().min(CH_LEN);
            assert!(
                quote.len() >= n && quote[..n] == pdu[..n],
                "the TermReq quotes {:02x?}, not the offending header {:02x?}",
                &quote[..quote.len().min(CH_LEN)],
                &pdu[..n]
            );
            assert_closed(&mut st.host.s);
        }
        Answer::Closes => assert_closed(&mut st.host.s),
        Answer::Status(want) => {
            let (l, header, _) = st.host.recv().expect("a CapsuleResp");
            assert_eq!(l.pdu_type, pdu_type::CAPSULE_RESP, "PDU type of the answer");
            let cqe = Cqe::decode(header[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap());
            assert_eq!(cqe.status, want, "status {}", cqe.status);
            let (c, _) = st.host.exec(rw_cmd(false, 0, 1), &[], BLOCK, false);
            assert!(c.status.is_success(), "a read after it: {}", c.status);
        }
        Answer::RefusedFirst(want) => {
            let (l, header, _) = st.host.recv().expect("a CapsuleResp");
            assert_eq!(l.pdu_type, pdu_type::CAPSULE_RESP, "PDU type of the answer");
            let cqe = Cqe::decode(header[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap());
            assert_eq!(cqe.status, want, "status {}", cqe.status);
            let c = st.host.fabrics_connect(0, 31, CNTLID_DYNAMIC);
            assert!(c.status.is_success(), "a Connect after it: {}", c.status);
        }
        Answer::IcResp => {
            let mut b = [0u8; IC_LEN];
            st.host.s.read_exact(&mut b).expect("an ICResp");
            let ch = CommonHeader::decode(b[..CH_LEN].try_into().unwrap());
            assert_eq!(ch.pdu_type, pdu_type::IC_RESP, "PDU type of the answer");
            let resp = IcResp::decode(&b, &icreq()).expect("ICResp as the Linux host checks it");
            assert_eq!(resp.cpda, 0);
        }
    }
}

/// The peer closes `s` now: end of stream (or a reset), with nothing sent first.
fn assert_closed(s: &mut TcpStream) {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Ok(n) => panic!(
            "{n} more bytes instead of a closed connection: {:02x?}",
            &b[..n]
        ),
        Err(e) => panic!("the connection stayed open: {e}"),
    }
}

/// Runs every row against one target; names each row that failed, and why.
fn check_rows(rows: Vec<Row>) {
    let (t, addr) = start();
    let mut failed = Vec::new();
    for r in &rows {
        let ran = catch_unwind(AssertUnwindSafe(|| run(addr, r)));
        // Every row starts from a target that holds nothing (queues close asynchronously, and
        // the arena has room for a few at a time).
        let freed = catch_unwind(AssertUnwindSafe(|| wait_held(&t, 0)));
        for e in [ran.err(), freed.err()].into_iter().flatten() {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed.push(format!("row {} ({:?}): {why}", r.name, r.answer));
        }
    }
    // The target is fine after them all: a new host does I/O.
    let (_a, cntlid) = TcpWire::admin(addr, false, false);
    let mut q = TcpWire::connect(addr, false, false);
    assert!(q.fabrics_connect(1, 31, cntlid).status.is_success());
    let (c, _) = q.exec(rw_cmd(false, 0, 1), &[], BLOCK, false);
    assert!(c.status.is_success(), "I/O after the rows: {}", c.status);
    t.shutdown();
    assert!(
        failed.is_empty(),
        "{} of {} rows failed:\n{}",
        failed.len(),
        rows.len(),
        failed.join("\n")
    );
}

// --- PDUs -------------------------------------------------------------------------------

fn icreq() -> IcReq {
    IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: false,
        ddgst: false,
        maxr2t: 0,
    }
}

/// An ICReq with `f` applied to its bytes.
fn icreq_with(f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    patch(icreq().encode().to_vec(), f)
}

/// A PDU of `len` zero bytes after its common header.
fn bare(ty: u8, fl: u8, hlen: u8, pdo: u8, plen: u32, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len.max(CH_LEN)];
    CommonHeader {
        pdu_type: ty,
        flags: fl,
        hlen,
        pdo,
        plen,
    }
    .encode(&mut b);
    b
}

/// An H2CTermReq: FES 1 at byte 0, PLEN `plen`, no quote.
fn h2c_term_req(hlen: u8, plen: u32) -> Vec<u8> {
    let mut b = bare(pdu_type::H2C_TERM_REQ, 0, hlen, 0, plen, usize::from(hlen));
    b[8] = Fes::InvalidHeaderField as u8;
    b
}

/// `b` with `f` applied: a PDU with a field made wrong.
fn patch(mut b: Vec<u8>, f: impl FnOnce(&mut [u8])) -> Vec<u8> {
    f(&mut b);
    b
}

fn set_plen(b: &mut [u8], plen: u32) {
    b[4..8].copy_from_slice(&plen.to_le_bytes());
}

/// A read of one block (its data by C2HData).
fn read_sqe() -> Sqe {
    let mut sqe = rw_cmd(false, 0, 1);
    sqe.cid = 0x55;
    sqe.set_sgl(&Sgl::Transport(TransportSgl { len: BLOCK }));
    sqe
}

/// A capsule carrying [`read_sqe`], no data.
fn read_capsule(st: &mut Stage) -> Vec<u8> {
    st.host.capsule_pdu(&read_sqe(), &[])
}

/// A write of `blocks` whose SGL describes `sgl_len` bytes in the capsule, carrying `data_len`
/// bytes.
fn icd_write(st: &mut Stage, blocks: u32, sgl_len: u32, data_len: usize) -> Vec<u8> {
    let mut sqe = rw_cmd(true, 0, blocks);
    sqe.cid = 0x66;
    sqe.set_sgl(&Sgl::InCapsule(InCapsuleSgl {
        offset: 0,
        len: sgl_len,
    }));
    st.host.capsule_pdu(&sqe, &pattern(9, data_len))
}

/// A write of one block in the capsule.
fn write_capsule(st: &mut Stage) -> Vec<u8> {
    icd_write(st, 1, BLOCK, BLOCK as usize)
}

/// The Fabrics Connect of an admin queue (`f` applied to its SQE), its data in the capsule.
fn connect_capsule(st: &mut Stage, f: fn(&mut Sqe)) -> Vec<u8> {
    let mut sqe = st.host.connect_sqe(0, 31);
    sqe.cid = 1;
    f(&mut sqe);
    st.host
        .capsule_pdu(&sqe, &st.host.connect_data(CNTLID_DYNAMIC))
}

/// H2CData answering the stage's R2T: `data_len` bytes at `datao`.
fn h2c(st: &mut Stage, datao: u32, data_len: usize, last: bool) -> Vec<u8> {
    let r = st.r2t;
    st.host
        .h2c_pdu(r.cccid, r.ttag, datao, &pattern(3, data_len), last)
}

/// All the data the stage's R2T asks for, in one H2CData with LAST.
fn h2c_all(st: &mut Stage) -> Vec<u8> {
    h2c(st, 0, R2T_BYTES as usize, true)
}

/// The header digest after the header (`hlen` bytes) made wrong.
fn spoil_hdgst(mut b: Vec<u8>, hlen: usize) -> Vec<u8> {
    let d = digest(&b[..hlen]);
    b[hlen..hlen + 4].copy_from_slice(&(!d).to_le_bytes());
    b
}

/// Only the first `n` bytes (a header whose PLEN promises more).
fn head(mut b: Vec<u8>, n: usize) -> Vec<u8> {
    b.truncate(n);
    b
}

// --- Rows -------------------------------------------------------------------------------

/// The ICReq and its fields, and the order of the first PDUs: ICReq, then a Fabrics Connect.
#[test]
fn connection_setup_rows() {
    use At::{Fresh, Initialized};
    check_rows(vec![
        row(
            "icreq_hlen",
            Fresh,
            |_| icreq_with(|b| b[2] = 127),
            Answer::TermReq(IB, HLEN),
        ),
        row(
            "icreq_flags",
            Fresh,
            |_| icreq_with(|b| b[1] = flags::HDGSTF),
            Answer::TermReq(IB, FLAGS),
        ),
        row(
            "icreq_pdo",
            Fresh,
            |_| icreq_with(|b| b[3] = 8),
            Answer::TermReq(IB, PDO),
        ),
        row(
            "icreq_plen",
            Fresh,
            |_| icreq_with(|b| set_plen(b, 132)),
            Answer::TermReq(IB, PLEN),
        ),
        row(
            "icreq_pfv",
            Fresh,
            |_| icreq_with(|b| b[8] = 1),
            Answer::TermReq(Fes::UnsupportedParameter, 8),
        ),
        row(
            "icreq_hpda_above_31",
            Fresh,
            |_| icreq_with(|b| b[10] = 32),
            Answer::TermReq(IB, 10),
        ),
        row(
            "icreq_hpda_31",
            Fresh,
            |_| icreq_with(|b| b[10] = 31),
            Answer::IcResp,
        ),
        row(
            "icreq_digest_bits",
            Fresh,
            |_| icreq_with(|b| b[11] = 0x04),
            Answer::TermReq(IB, 11),
        ),
        row(
            "icreq_maxr2t_any",
            Fresh,
            |_| icreq_with(|b| b[12..16].fill(0xFF)),
            Answer::IcResp,
        ),
        row(
            "capsule_before_icreq",
            Fresh,
            |st| st.host.capsule_pdu(&read_sqe(), &[]),
            Answer::TermReq(SEQ, 0),
        ),
        row(
            "h2c_data_before_icreq",
            Fresh,
            |st| st.host.h2c_pdu(1, 0, 0, &[0; 512], true),
            Answer::TermReq(SEQ, 0),
        ),
        row(
            "h2c_term_req_before_icreq",
            Fresh,
            |_| h2c_term_req(24, 24),
            Answer::TermReq(SEQ, 0),
        ),
        row(
            "type_unknown_before_icreq",
            Fresh,
            |_| bare(0x08, 0, 24, 0, 24, 24),
            Answer::TermReq(IB, TYPE),
        ),
        row(
            "second_icreq_before_connect",
            Initialized,
            |_| icreq().encode().to_vec(),
            Answer::TermReq(SEQ, 0),
        ),
        row(
            "h2c_data_before_connect",
            Initialized,
            |st| st.host.h2c_pdu(1, 0, 0, &[0; 512], true),
            Answer::TermReq(SEQ, 0),
        ),
        row(
            "h2c_term_req_before_connect",
            Initialized,
            |_| h2c_term_req(24, 24),
            Answer::TermReq(SEQ, 0),
        ),
        row(
            "first_command_not_connect",
            Initialized,
            |st| {
                let mut sqe = IdentifyCmd {
                    cns: cns::CONTROLLER,
                    cntid: 0,
                    csi: 0,
                    nsid: 0,
                }
                .to_sqe(1);
                sqe.set_sgl(&Sgl::Transport(TransportSgl { len: 4096 }));
                st.host.capsule_pdu(&sqe, &[])
            },
            Answer::RefusedFirst(Status::COMMAND_SEQUENCE_ERROR.with_dnr()),
        ),
        row(
            "connect_recfmt_nonzero",
            Initialized,
            |st| connect_capsule(st, |sqe| sqe.cdw10 |= 1),
            Answer::RefusedFirst(Status::CONNECT_INCOMPATIBLE_FORMAT.with_dnr()),
        ),
        row(
            "connect_sqsize_zero",
            Initialized,
            |st| connect_capsule(st, |sqe| sqe.cdw11 &= !0xFFFF),
            Answer::RefusedFirst(Status::CONNECT_INVALID_PARAMETERS.with_dnr()),
        ),
        row(
            "connect_header_digest",
            Initialized,
            |st| spoil_hdgst(connect_capsule(st, |_| {}), 72),
            Answer::TermReq(Fes::HeaderDigestError, 0),
        )
        .digests(true, false),
    ]);
}

/// The common header on a connected queue: the PDU type, HLEN, FLAGS, PDO, PLEN and the
/// header digest, on capsules and TermReqs (H2CData's are in [`h2c_data_rows`]).
#[test]
fn common_header_rows() {
    use pdu_type::*;
    let hdgst = |r: Row| r.digests(true, false);
    let ddgst = |r: Row| r.digests(false, true);
    check_rows(vec![
        row(
            "type_ic_resp",
            QUEUE,
            |_| bare(IC_RESP, 0, 128, 0, 128, 128),
            Answer::TermReq(IB, TYPE),
        ),
        row(
            "type_c2h_term_req",
            QUEUE,
            |_| bare(C2H_TERM_REQ, 0, 24, 0, 24, 24),
            Answer::TermReq(IB, TYPE),
        ),
        row(
            "type_capsule_resp",
            QUEUE,
            |_| bare(CAPSULE_RESP, 0, 24, 0, 24, 24),
            Answer::TermReq(IB, TYPE),
        ),
        row(
            "type_c2h_data",
            QUEUE,
            |_| bare(C2H_DATA, flags::DATA_LAST, 24, 24, 24 + 512, 24 + 512),
            Answer::TermReq(IB, TYPE),
        ),
        row(
            "type_r2t",
            QUEUE,
            |_| bare(R2T, 0, 24, 0, 24, 24),
            Answer::TermReq(IB, TYPE),
        ),
        row(
            "type_unknown_08",
            QUEUE,
            |_| bare(0x08, 0, 24, 0, 24, 24),
            Answer::TermReq(IB, TYPE),
        ),
        row(
            "type_unknown_0a",
            QUEUE,
            |_| bare(0x0A, 0, 24, 0, 24, 24),
            Answer::TermReq(IB, TYPE),
        ),
        row(
            "type_unknown_ff",
            QUEUE,
            |_| bare(0xFF, 0, 24, 0, 24, 24),
            Answer::TermReq(IB, TYPE),
        ),
        row(
            "second_icreq_on_queue",
            QUEUE,
            |_| icreq().encode().to_vec(),
            Answer::TermReq(SEQ, 0),
        ),
        row(
            "capsule_hlen",
            QUEUE,
            |st| patch(read_capsule(st), |b| b[2] = 24),
            Answer::TermReq(IB, HLEN),
        ),
        row(
            "h2c_term_req_hlen",
            QUEUE,
            |_| h2c_term_req(28, 28),
            Answer::TermReq(IB, HLEN),
        ),
        row(
            "capsule_hdgstf_not_negotiated",
            QUEUE,
            |st| patch(read_capsule(st), |b| b[1] |= flags::HDGSTF),
            Answer::TermReq(IB, FLAGS),
        ),
        hdgst(row(
            "capsule_hdgstf_missing",
            QUEUE,
            |st| patch(read_capsule(st), |b| b[1] &= !flags::HDGSTF),
            Answer::TermReq(IB, FLAGS),
        )),
        row(
            "capsule_ddgstf_not_negotiated",
            QUEUE,
            |st| patch(write_capsule(st), |b| b[1] |= flags::DDGSTF),
            Answer::TermReq(IB, FLAGS),
        ),
        ddgst(row(
            "capsule_ddgstf_missing",
            QUEUE,
            |st| patch(write_capsule(st), |b| b[1] &= !flags::DDGSTF),
            Answer::TermReq(IB, FLAGS),
        )),
        ddgst(row(
            "capsule_ddgstf_without_data",
            QUEUE,
            |st| patch(read_capsule(st), |b| b[1] |= flags::DDGSTF),
            Answer::TermReq(IB, FLAGS),
        )),
        row(
            "capsule_flag_last",
            QUEUE,
            |st| patch(read_capsule(st), |b| b[1] |= flags::DATA_LAST),
            Answer::TermReq(IB, FLAGS),
        ),
        row(
            "capsule_pdo_inside_header",
            QUEUE,
            |st| patch(write_capsule(st), |b| b[3] = 64),
            Answer::TermReq(IB, PDO),
        ),
        row(
            "capsule_pdo_misaligned",
            QUEUE,
            |st| patch(write_capsule(st), |b| b[3] = 74),
            Answer::TermReq(IB, PDO),
        ),
        row(
            "capsule_pdo_without_data",
            QUEUE,
            |st| patch(read_capsule(st), |b| b[3] = 72),
            Answer::TermReq(IB, PDO),
        ),
        row(
            "capsule_plen_below_header",
            QUEUE,
            |st| patch(read_capsule(st), |b| set_plen(b, 71)),
            Answer::TermReq(IB, PLEN),
        ),
        row(
            "capsule_plen_no_data_after_pdo",
            QUEUE,
            |st| {
                patch(read_capsule(st), |b| {
                    b[3] = 76;
                    set_plen(b, 74);
                })
            },
            Answer::TermReq(IB, PLEN),
        ),
        row(
            "capsule_data_above_8k",
            QUEUE,
            |st| patch(head(write_capsule(st), 72), |b| set_plen(b, 72 + 8192 + 4)),
            Answer::TermReq(LIMIT, PLEN),
        ),
        row(
            "h2c_term_req_plen_below_24",
            QUEUE,
            |_| h2c_term_req(24, 23),
            Answer::TermReq(IB, PLEN),
        ),
        row(
            "h2c_term_req_plen_above_152",
            QUEUE,
            |_| h2c_term_req(24, 153),
            Answer::TermReq(IB, PLEN),
        ),
        hdgst(row(
            "capsule_header_digest",
            QUEUE,
            |st| spoil_hdgst(read_capsule(st), 72),
            Answer::TermReq(Fes::HeaderDigestError, 0),
        )),
    ]);
}

/// H2CData answering an R2T: its common header, then its own fields against the R2T.
#[test]
fn h2c_data_rows() {
    use At::AwaitingData as Data;
    let hdgst = |r: Row| r.digests(true, false);
    let ddgst = |r: Row| r.digests(false, true);
    check_rows(vec![
        row(
            "h2c_data_hlen",
            Data,
            |st| patch(h2c_all(st), |b| b[2] = 28),
            Answer::TermReq(IB, HLEN),
        ),
        row(
            "h2c_data_flag_success",
            Data,
            |st| patch(h2c_all(st), |b| b[1] |= flags::DATA_SUCCESS),
            Answer::TermReq(IB, FLAGS),
        ),
        row(
            "h2c_data_flag_reserved",
            Data,
            |st| patch(h2c_all(st), |b| b[1] |= 0x10),
            Answer::TermReq(IB, FLAGS),
        ),
        hdgst(row(
            "h2c_data_hdgstf_missing",
            Data,
            |st| patch(h2c_all(st), |b| b[1] &= !flags::HDGSTF),
            Answer::TermReq(IB, FLAGS),
        )),
        ddgst(row(
            "h2c_data_ddgstf_missing",
            Data,
            |st| patch(h2c_all(st), |b| b[1] &= !flags::DDGSTF),
            Answer::TermReq(IB, FLAGS),
        )),
        row(
            "h2c_data_pdo_inside_header",
            Data,
            |st| patch(h2c_all(st), |b| b[3] = 20),
            Answer::TermReq(IB, PDO),
        ),
        row(
            "h2c_data_plen_below_header",
            Data,
            |st| patch(head(h2c_all(st), DATA_HLEN), |b| set_plen(b, 20)),
            Answer::TermReq(IB, PLEN),
        ),
        row(
            "h2c_data_without_data",
            Data,
            |st| {
                patch(head(h2c_all(st), DATA_HLEN), |b| {
                    b[3] = 0;
                    set_plen(b, DATA_HLEN as u32);
                })
            },
            Answer::TermReq(IB, PLEN),
        ),
        row(
            "h2c_data_above_maxh2cdata",
            Data,
            |st| {
                patch(head(h2c_all(st), DATA_HLEN), |b| {
                    set_plen(b, (DATA_HLEN + 128 * 1024 + 4) as u32);
                    b[16..20].copy_from_slice(&(128 * 1024 + 4u32).to_le_bytes());
                })
            },
            Answer::TermReq(LIMIT, PLEN),
        ),
        hdgst(row(
            "h2c_data_header_digest",
            Data,
            |st| spoil_hdgst(h2c_all(st), DATA_HLEN),
            Answer::TermReq(Fes::HeaderDigestError, 0),
        )),
        row(
            "h2c_data_ttag_unknown",
            Data,
            |st| {
                let r = st.r2t;
                st.host.h2c_pdu(r.cccid, r.ttag + 1, 0, &[0; 4096], true)
            },
            Answer::TermReq(RANGE, 10),
        ),
        row(
            "h2c_data_ttag_beyond_queue",
            Data,
            |st| {
                let r = st.r2t;
                st.host.h2c_pdu(r.cccid, 0xFFFF, 0, &[0; 4096], true)
            },
            Answer::TermReq(RANGE, 10),
        ),
        row(
            "h2c_data_cccid",
            Data,
            |st| {
                let r = st.r2t;
                st.host.h2c_pdu(r.cccid + 1, r.ttag, 0, &[0; 4096], true)
            },
            Answer::TermReq(RANGE, 8),
        ),
        row(
            "h2c_data_datao",
            Data,
            |st| h2c(st, 512, 512, false),
            Answer::TermReq(RANGE, 12),
        ),
        row(
            "h2c_data_beyond_r2t",
            Data,
            |st| h2c(st, 0, R2T_BYTES as usize + 4, true),
            Answer::TermReq(RANGE, 16),
        ),
        row(
            "h2c_data_datal_not_plen",
            Data,
            |st| {
                patch(h2c(st, 0, 512, false), |b| {
                    b[16..20].copy_from_slice(&100u32.to_le_bytes())
                })
            },
            Answer::TermReq(IB, 16),
        ),
        row(
            "h2c_data_datal_zero",
            Data,
            |st| patch(h2c(st, 0, 512, false), |b| b[16..20].fill(0)),
            Answer::TermReq(IB, 16),
        ),
        row(
            "h2c_data_last_missing",
            Data,
            |st| h2c(st, 0, R2T_BYTES as usize, false),
            Answer::TermReq(IB, FLAGS),
        ),
        row(
            "h2c_data_after_the_last",
            Data,
            |st| {
                let all = h2c_all(st);
                st.host.send(&all).unwrap();
                let (l, header, _) = st.host.recv().expect("the write's CapsuleResp");
                assert_eq!(l.pdu_type, pdu_type::CAPSULE_RESP);
                let cqe = Cqe::decode(header[CH_LEN..CH_LEN + CQE_LEN].try_into().unwrap());
                assert!(cqe.status.is_success(), "the write: {}", cqe.status);
                h2c(st, 0, 512, true)
            },
            Answer::TermReq(RANGE, 10),
        ),
        ddgst(row(
            "h2c_data_data_digest",
            Data,
            |st| {
                st.host.corrupt_next_data_digest();
                h2c_all(st)
            },
            Answer::Status(Status::TRANSIENT_TRANSPORT_ERROR),
        )),
    ]);
}

/// What is not the common header's: a capsule's data digest, its SGL against the data it
/// carries, more commands than the queue holds, the host's own TermReq.
#[test]
fn command_rows() {
    let sgl_length = Answer::Status(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
    check_rows(vec![
        row(
            "capsule_data_digest",
            QUEUE,
            |st| {
                st.host.corrupt_next_data_digest();
                write_capsule(st)
            },
            Answer::Status(Status::TRANSIENT_TRANSPORT_ERROR),
        )
        .digests(false, true),
        row(
            "capsule_icd_above_ioccsz",
            QUEUE,
            |st| icd_write(st, 16, 16 * BLOCK, 16 * BLOCK as usize),
            sgl_length,
        ),
        row(
            "capsule_icd_sgl_longer_than_data",
            QUEUE,
            |st| icd_write(st, 2, 2 * BLOCK, BLOCK as usize),
            sgl_length,
        ),
        row(
            "capsule_icd_data_longer_than_sgl",
            QUEUE,
            |st| icd_write(st, 1, BLOCK, 2 * BLOCK as usize),
            Answer::Status(Status::SUCCESS),
        ),
        row(
            "capsule_transport_sgl_above_mdts",
            QUEUE,
            |st| {
                let blocks = MAX_IO / BLOCK + 1;
                let mut sqe = rw_cmd(false, 0, blocks);
                sqe.set_sgl(&Sgl::Transport(TransportSgl {
                    len: blocks * BLOCK,
                }));
                st.host.capsule_pdu(&sqe, &[])
            },
            sgl_length,
        ),
        row(
            "capsule_keyed_sgl",
            QUEUE,
            |st| {
                let mut sqe = read_sqe();
                sqe.set_sgl(&Sgl::Keyed(KeyedSgl {
                    addr: 0x1000,
                    len: BLOCK,
                    key: 1,
                    invalidate: false,
                }));
                st.host.capsule_pdu(&sqe, &[])
            },
            Answer::Status(Status::SGL_INVALID_TYPE.with_dnr()),
        ),
        row(
            "capsule_beyond_queue_size",
            At::Queue(2),
            |st| {
                // Two writes take the queue's two request contexts (their R2Ts come and are
                // not answered), two more wait in the queue's two receive slots, a fifth has
                // nowhere to go.
                let write = |st: &mut Stage, cid: u16| {
                    let mut sqe = rw_cmd(true, 0, 1);
                    sqe.cid = cid;
                    sqe.set_sgl(&Sgl::Transport(TransportSgl { len: BLOCK }));
                    st.host.capsule_pdu(&sqe, &[])
                };
                for cid in [10, 11] {
                    let b = write(st, cid);
                    st.host.send(&b).unwrap();
                    let (l, _, _) = st.host.recv().expect("an R2T");
                    assert_eq!(l.pdu_type, pdu_type::R2T);
                }
                let mut b = write(st, 12);
                b.extend(write(st, 13));
                st.host.send(&b).unwrap();
                write(st, 14)
            },
            Answer::TermReq(SEQ, 0),
        ),
        row(
            "h2c_term_req",
            QUEUE,
            |_| h2c_term_req(24, 24),
            Answer::Closes,
        ),
    ]);
}
