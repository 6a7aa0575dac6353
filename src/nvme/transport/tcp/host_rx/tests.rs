use super::*;
use crate::nvme::transport::tcp::{ch_offset, digest, encode_capsule_resp, Fes, TERM_REQ_MAX_DATA};
use crate::nvme::Status;

const MAX_DATA: u32 = 8192;
/// Command 1 reads 1024 bytes, 2 writes 4096, 3 moves nothing; the queue has 8 IDs.
const READ: u16 = 1;
const WRITE: u16 = 2;
const NO_DATA: u16 = 3;

fn neg(hdgst: bool, ddgst: bool) -> Negotiated {
    Negotiated {
        hdgst,
        ddgst,
        pda: 0,
    }
}

fn checker(n: Negotiated) -> HostRx {
    let mut rx = HostRx::new(8, n, MAX_DATA);
    rx.expect(READ, Expect::ToHost { len: 1024 });
    rx.expect(WRITE, Expect::ToCtrl { len: 4096 });
    rx.expect(NO_DATA, Expect::Nothing);
    rx
}

/// A whole PDU as a controller sends it: `head`, its digest, padding to `pdo`, `data`, its
/// digest.
fn frame(n: Negotiated, head: &[u8], pdo: usize, data: &[u8]) -> Vec<u8> {
    let mut v = head.to_vec();
    if n.hdgst {
        v.extend_from_slice(&digest(head).to_le_bytes());
    }
    if !data.is_empty() {
        v.resize(pdo, 0);
        v.extend_from_slice(data);
        if n.ddgst {
            v.extend_from_slice(&digest(data).to_le_bytes());
        }
    }
    v
}

fn c2h(n: Negotiated, cid: u16, datao: u32, data: &[u8], f: u8) -> Vec<u8> {
    let h = DataHeader {
        cccid: cid,
        ttag: 0,
        datao,
        datal: data.len() as u32,
    };
    let mut b = [0u8; DATA_HLEN];
    let l = h.encode(pdu_type::C2H_DATA, f, &n, &mut b);
    frame(n, &b, l.pdo, data)
}

fn r2t(n: Negotiated, cid: u16, r2to: u32, r2tl: u32) -> Vec<u8> {
    let mut b = [0u8; DATA_HLEN];
    let r = R2t {
        cccid: cid,
        ttag: 1,
        r2to,
        r2tl,
    };
    r.encode(n.hdgst, &mut b);
    frame(n, &b, 0, &[])
}

fn resp(n: Negotiated, cid: u16) -> Vec<u8> {
    let mut b = [0u8; CAPSULE_RESP_HLEN];
    encode_capsule_resp(&Cqe::error(cid, 1, 5, Status::SUCCESS), n.hdgst, &mut b);
    frame(n, &b, 0, &[])
}

fn err(rx: &mut HostRx, pdu: &[u8]) -> HostRxError {
    rx.next(pdu).expect_err("the PDU is refused")
}

fn accepted<'a>(rx: &mut HostRx, pdu: &'a [u8]) -> HostPdu<'a> {
    match rx.next(pdu) {
        Ok(Next::Pdu { pdu: p, len }) => {
            assert_eq!(len, pdu.len());
            p
        }
        other => panic!("not a whole accepted PDU: {other:?}"),
    }
}

const LAST: u8 = flags::DATA_LAST;
const SUCCESS: u8 = flags::DATA_LAST | flags::DATA_SUCCESS;

#[test]
fn a_read_arrives_in_order_and_success_completes_it() {
    for n in [neg(false, false), neg(true, true)] {
        let mut rx = checker(n);
        let first = c2h(n, READ, 0, &[0xA5; 512], 0);
        let p = accepted(&mut rx, &first);
        assert_eq!(
            p,
            HostPdu::C2hData {
                cid: READ,
                offset: 0,
                data: &[0xA5; 512],
                success: false
            }
        );
        let last = c2h(n, READ, 512, &[0x5A; 512], SUCCESS);
        let HostPdu::C2hData {
            offset, success, ..
        } = accepted(&mut rx, &last)
        else {
            panic!("not C2HData")
        };
        assert_eq!((offset, success), (512, true));
        // SUCCESS completed the command: no more data for it.
        let again = c2h(n, READ, 0, &[0; 4], LAST);
        assert_eq!(
            err(&mut rx, &again),
            HostRxError::C2hForNoRead { cid: READ }
        );
    }
}

#[test]
fn c2h_data_for_a_command_that_reads_nothing() {
    let n = neg(false, false);
    let mut rx = checker(n);
    for cid in [NO_DATA, WRITE, 0, 7, 8, 0xFFFF] {
        let e = err(&mut rx, &c2h(n, cid, 0, &[0; 16], LAST));
        assert_eq!(e, HostRxError::C2hForNoRead { cid });
        assert!(e.to_string().contains("reads nothing"), "{e}");
    }
}

/// The error for C2HData at `datao`+`datal` of command READ (1024 bytes) after `got`.
fn out_of_place(datao: u32, datal: u32, got: u32) -> HostRxError {
    HostRxError::C2hOutOfPlace {
        cid: READ,
        datao,
        datal,
        got,
        len: 1024,
    }
}

#[test]
fn c2h_data_at_the_wrong_offset() {
    let n = neg(false, false);
    let mut rx = checker(n);
    // A gap: the first PDU does not start at 0.
    let e = err(&mut rx, &c2h(n, READ, 512, &[0; 512], LAST));
    assert_eq!(e, out_of_place(512, 512, 0));
    // An overlap: the same range twice.
    let mut rx = checker(n);
    accepted(&mut rx, &c2h(n, READ, 0, &[0; 256], 0));
    let e = err(&mut rx, &c2h(n, READ, 0, &[0; 256], 0));
    assert_eq!(e, out_of_place(0, 256, 256));
}

#[test]
fn c2h_data_past_the_buffer() {
    let n = neg(false, false);
    let mut rx = checker(n);
    let e = err(&mut rx, &c2h(n, READ, 0, &[0; 1028], LAST));
    assert_eq!(e, out_of_place(0, 1028, 0));
    // Past it after some data in (DATAO right, the end wrong).
    let mut rx = checker(n);
    accepted(&mut rx, &c2h(n, READ, 0, &[0; 1020], 0));
    let e = err(&mut rx, &c2h(n, READ, 1020, &[0; 8], LAST));
    assert_eq!(e, out_of_place(1020, 8, 1020));
}

#[test]
fn datal_must_be_the_pdus_data() {
    let n = neg(false, false);
    let mut rx = checker(n);
    let mut pdu = c2h(n, READ, 0, &[0; 512], LAST);
    pdu[16..20].copy_from_slice(&4096u32.to_le_bytes());
    let e = err(&mut rx, &pdu);
    assert!(matches!(e, HostRxError::Header(t) if t.fei == 16), "{e}");
    assert!(e.to_string().contains("DATAL"), "{e}");
}

#[test]
fn success_before_all_the_data() {
    let n = neg(false, false);
    let mut rx = checker(n);
    let e = err(&mut rx, &c2h(n, READ, 0, &[0; 512], SUCCESS));
    assert_eq!(
        e,
        HostRxError::SuccessEarly {
            cid: READ,
            got: 512,
            len: 1024
        }
    );
}

#[test]
fn success_without_last() {
    // The common header check refuses it before the checker looks at the command.
    let n = neg(false, false);
    let mut rx = checker(n);
    let e = err(&mut rx, &c2h(n, READ, 0, &[0; 1024], flags::DATA_SUCCESS));
    assert!(
        matches!(e, HostRxError::Header(t) if t.fei == ch_offset::FLAGS),
        "{e}"
    );
}

#[test]
fn r2t_within_a_writing_command() {
    let n = neg(true, false);
    let mut rx = checker(n);
    let pdu = r2t(n, WRITE, 1024, 3072);
    let HostPdu::R2t(r) = accepted(&mut rx, &pdu) else {
        panic!("not an R2T")
    };
    assert_eq!((r.cccid, r.r2to, r.r2tl), (WRITE, 1024, 3072));
}

#[test]
fn r2t_that_asks_again_for_data_already_asked_for() {
    let n = neg(false, false);
    let mut rx = checker(n);
    accepted(&mut rx, &r2t(n, WRITE, 0, 1024));
    for (r2to, r2tl) in [(0, 1024), (512, 1024), (1023, 1)] {
        let e = err(&mut rx, &r2t(n, WRITE, r2to, r2tl));
        assert_eq!(
            e,
            HostRxError::R2tRepeated {
                cid: WRITE,
                r2to,
                r2tl,
                asked: 1024
            }
        );
    }
    // The next part of the data, and a gap, as the Linux host allows.
    accepted(&mut rx, &r2t(n, WRITE, 1024, 1024));
    accepted(&mut rx, &r2t(n, WRITE, 3072, 1024));
    // A command sent again starts over.
    rx.expect(WRITE, Expect::ToCtrl { len: 4096 });
    accepted(&mut rx, &r2t(n, WRITE, 0, 4096));
}

#[test]
fn r2t_of_zero_bytes() {
    let n = neg(false, false);
    let mut rx = checker(n);
    let e = err(&mut rx, &r2t(n, WRITE, 0, 0));
    assert!(
        matches!(e, HostRxError::R2tOutOfRange { r2tl: 0, .. }),
        "{e}"
    );
}

#[test]
fn r2t_past_the_buffer() {
    let n = neg(false, false);
    let mut rx = checker(n);
    for (r2to, r2tl) in [(0, 4097), (4096, 1), (1, u32::MAX), (u32::MAX, 1)] {
        let e = err(&mut rx, &r2t(n, WRITE, r2to, r2tl));
        assert_eq!(
            e,
            HostRxError::R2tOutOfRange {
                cid: WRITE,
                r2to,
                r2tl,
                len: 4096
            }
        );
    }
}

#[test]
fn r2t_for_a_command_that_writes_nothing() {
    let n = neg(false, false);
    let mut rx = checker(n);
    for cid in [READ, NO_DATA, 8, 0xFFFF] {
        let e = err(&mut rx, &r2t(n, cid, 0, 512));
        assert_eq!(e, HostRxError::R2tForNoWrite { cid });
        assert!(e.to_string().contains("writes nothing"), "{e}");
    }
}

#[test]
fn capsule_resp_ends_the_commands_data() {
    let n = neg(true, false);
    let mut rx = checker(n);
    for cid in [READ, WRITE, 8, 0xFFFF] {
        let pdu = resp(n, cid);
        let HostPdu::Response(cqe) = accepted(&mut rx, &pdu) else {
            panic!("not a response")
        };
        assert_eq!((cqe.cid, cqe.sq_head), (cid, 5));
    }
    let e = err(&mut rx, &c2h(n, READ, 0, &[0; 16], LAST));
    assert_eq!(e, HostRxError::C2hForNoRead { cid: READ });
    let e = err(&mut rx, &r2t(n, WRITE, 0, 16));
    assert_eq!(e, HostRxError::R2tForNoWrite { cid: WRITE });
    // A new command under the same ID starts from nothing received.
    rx.expect(READ, Expect::ToHost { len: 16 });
    accepted(&mut rx, &c2h(n, READ, 0, &[0; 16], SUCCESS));
}

#[test]
fn header_digest_mismatch() {
    let n = neg(true, false);
    for mut pdu in [
        resp(n, READ),
        r2t(n, WRITE, 0, 8),
        c2h(n, READ, 0, &[1; 8], 0),
    ] {
        pdu[DATA_HLEN] ^= 1;
        let e = err(&mut checker(n), &pdu);
        assert_eq!(e, HostRxError::HeaderDigest);
        assert!(e.to_string().contains("header digest"), "{e}");
    }
    // A header byte changed, the digest kept.
    let mut pdu = resp(n, READ);
    pdu[CH_LEN] ^= 0x80;
    assert_eq!(err(&mut checker(n), &pdu), HostRxError::HeaderDigest);
}

#[test]
fn data_digest_mismatch() {
    let n = neg(false, true);
    let good = c2h(n, READ, 0, &[7; 100], LAST);
    let mut bad_digest = good.clone();
    *bad_digest.last_mut().unwrap() ^= 1;
    let mut bad_data = good.clone();
    bad_data[DATA_HLEN + 3] ^= 1;
    for pdu in [bad_digest, bad_data] {
        let e = err(&mut checker(n), &pdu);
        assert_eq!(e, HostRxError::DataDigest);
    }
    accepted(&mut checker(n), &good);
}

#[test]
fn term_req_names_fes_and_fei() {
    let n = neg(true, true);
    let mut b = [0u8; DATA_HLEN + TERM_REQ_MAX_DATA];
    let t = TermReq {
        fes: Fes::DataTransferOutOfRange,
        fei: 12,
    };
    let len = t.encode(pdu_type::C2H_TERM_REQ, &[0xCC; 40], &mut b);
    let e = err(&mut checker(n), &b[..len]);
    assert_eq!(
        e,
        HostRxError::TermReq {
            fes: Some(Fes::DataTransferOutOfRange),
            fei: 12
        }
    );
    assert_eq!(
        e.to_string(),
        "the target terminated the connection (C2HTermReq: DataTransferOutOfRange, \
         field at byte 12)"
    );
    // An FES this side does not know is reported, not refused.
    b[8] = 0x77;
    let e = err(&mut checker(n), &b[..len]);
    assert_eq!(e, HostRxError::TermReq { fes: None, fei: 12 });
    assert!(e.to_string().contains("unknown status"), "{e}");
}

#[test]
fn unknown_and_host_pdu_types() {
    let n = neg(false, false);
    for t in [
        0x7F,
        0xFF,
        8,
        pdu_type::CAPSULE_CMD,
        pdu_type::H2C_DATA,
        pdu_type::H2C_TERM_REQ,
    ] {
        let mut pdu = r2t(n, WRITE, 0, 8);
        pdu[0] = t;
        let e = err(&mut checker(n), &pdu);
        assert!(
            matches!(e, HostRxError::Header(x) if x.fei == ch_offset::TYPE),
            "type {t}: {e}"
        );
        assert!(e.to_string().starts_with("PDU from the target"), "{e}");
    }
    // An ICResp once the connection is set up.
    let mut pdu = [0u8; 128];
    CommonHeader {
        pdu_type: pdu_type::IC_RESP,
        flags: 0,
        hlen: 128,
        pdo: 0,
        plen: 128,
    }
    .encode(&mut pdu);
    let e = err(&mut checker(n), &pdu);
    assert!(
        matches!(e, HostRxError::Header(x) if x.fes == Fes::PduSequenceError),
        "{e}"
    );
}

#[test]
fn a_partial_pdu_asks_for_more() {
    let n = neg(true, true);
    let pdu = c2h(n, READ, 0, &[3; 300], LAST);
    let mut rx = checker(n);
    for cut in 0..CH_LEN {
        assert_eq!(rx.next(&pdu[..cut]), Ok(Next::NeedMore { pdu_len: CH_LEN }));
    }
    for cut in CH_LEN..pdu.len() {
        let want = Next::NeedMore { pdu_len: pdu.len() };
        assert_eq!(rx.next(&pdu[..cut]), Ok(want), "cut at {cut}");
    }
    // Nothing was taken from the command while the PDU was partial.
    accepted(&mut rx, &pdu);
    // A bad common header is refused before the rest of the PDU is in.
    let mut bad = pdu.clone();
    bad[2] = 72;
    assert!(matches!(
        rx.next(&bad[..CH_LEN]),
        Err(HostRxError::Header(_))
    ));
}

#[test]
fn more_data_than_the_limit_is_refused_from_the_header() {
    let n = neg(false, false);
    let mut rx = HostRx::new(4, n, MAX_DATA);
    rx.expect(READ, Expect::ToHost { len: 1 << 20 });
    let pdu = c2h(n, READ, 0, &[0; MAX_DATA as usize + 4], LAST);
    let e = err(&mut rx, &pdu[..CH_LEN]);
    assert!(
        matches!(e, HostRxError::Header(t) if t.fes == Fes::DataTransferLimitExceeded),
        "{e}"
    );
}

#[test]
fn a_stream_is_taken_one_pdu_at_a_time() {
    let n = neg(false, false);
    let mut rx = checker(n);
    let stream = [
        r2t(n, WRITE, 0, 4096),
        c2h(n, READ, 0, &[1; 1000], 0),
        c2h(n, READ, 1000, &[2; 24], LAST),
        resp(n, READ),
        resp(n, WRITE),
    ]
    .concat();
    let mut at = 0;
    let mut kinds = Vec::new();
    while at < stream.len() {
        let Ok(Next::Pdu { pdu, len }) = rx.next(&stream[at..]) else {
            panic!("stopped at {at}")
        };
        kinds.push(match pdu {
            HostPdu::R2t(_) => 'r',
            HostPdu::C2hData { .. } => 'd',
            HostPdu::Response(_) => 'c',
        });
        at += len;
    }
    assert_eq!(kinds, ['r', 'd', 'd', 'c', 'c']);
    assert_eq!(rx.next(&[]), Ok(Next::NeedMore { pdu_len: CH_LEN }));
}

#[test]
fn a_large_c2h_is_placed_once_its_header_is_in() {
    for n in [neg(false, false), neg(true, true)] {
        let mut rx = checker(n);
        rx.place_from(256);
        let data: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
        let pdu = c2h(n, READ, 0, &data, 0);
        let pdo = pdu.len() - data.len() - if n.ddgst { DIGEST_LEN } else { 0 };
        // Before the whole header (and its digest) is in: more, up to the data (the buffer
        // need not hold the data).
        assert_eq!(
            rx.next(&pdu[..pdo - 1]),
            Ok(Next::NeedMore { pdu_len: pdo })
        );
        // The header and 100 bytes of data: placed, those 100 bytes handed over.
        let Ok(Next::Place(p)) = rx.next(&pdu[..pdo + 100]) else {
            panic!("not placed")
        };
        assert_eq!((p.cid, p.offset, p.len), (READ, 0, 600));
        assert_eq!((p.data, p.consumed), (&data[..100], pdo + 100));
        assert_eq!((p.digest, p.success), (n.ddgst, false));
        if n.ddgst {
            let trailer = pdu[pdu.len() - DIGEST_LEN..].try_into().unwrap();
            assert_eq!(check_data_digest(&data, trailer), Ok(()));
            assert_eq!(
                check_data_digest(&data[1..], trailer),
                Err(HostRxError::DataDigest)
            );
        }
        // The checker counted the 600 bytes: the rest of the command follows them.
        let rest = c2h(n, READ, 600, &[1; 424], SUCCESS);
        let HostPdu::C2hData {
            offset, success, ..
        } = accepted(&mut rx, &rest)
        else {
            panic!("not C2HData")
        };
        assert_eq!((offset, success), (600, true));
    }
}

#[test]
fn placement_checks_the_header_first() {
    let n = neg(true, false);
    let mut rx = checker(n);
    rx.place_from(1);
    // Small PDUs stay whole below the threshold; past the buffer or out of order: refused
    // from the header alone, before any data is placed.
    let past = c2h(n, READ, 0, &[0; 1028], 0);
    assert_eq!(
        rx.next(&past[..DATA_HLEN + DIGEST_LEN + 1]),
        Err(HostRxError::C2hOutOfPlace {
            cid: READ,
            datao: 0,
            datal: 1028,
            got: 0,
            len: 1024
        })
    );
    let mut bad = c2h(n, READ, 0, &[0; 512], 0);
    bad[CH_LEN] ^= 1;
    assert_eq!(
        rx.next(&bad[..DATA_HLEN + DIGEST_LEN + 1]),
        Err(HostRxError::HeaderDigest)
    );
    let no_read = c2h(n, WRITE, 0, &[0; 512], 0);
    assert_eq!(
        rx.next(&no_read[..DATA_HLEN + DIGEST_LEN]),
        Err(HostRxError::C2hForNoRead { cid: WRITE })
    );
    let mut small = checker(n);
    small.place_from(1024);
    let pdu = c2h(n, READ, 0, &[0; 512], 0);
    assert_eq!(
        small.next(&pdu[..pdu.len() - 1]),
        Ok(Next::NeedMore { pdu_len: pdu.len() })
    );
}
