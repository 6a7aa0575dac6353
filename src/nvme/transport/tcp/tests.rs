use super::*;
use crate::nvme::Status;

fn neg(hdgst: bool, ddgst: bool) -> Option<Negotiated> {
    Some(Negotiated {
        hdgst,
        ddgst,
        pda: 0,
    })
}

fn ch(pdu_type: u8, flags: u8, hlen: usize, pdo: usize, plen: usize) -> CommonHeader {
    CommonHeader {
        pdu_type,
        flags,
        hlen: hlen as u8,
        pdo: pdo as u8,
        plen: plen as u32,
    }
}

const H2C: Direction = Direction::HostToController;
const C2H: Direction = Direction::ControllerToHost;

#[test]
fn common_header_round_trips() {
    let h = ch(pdu_type::C2H_DATA, flags::DATA_LAST, 24, 24, 4120);
    let mut b = [0u8; CH_LEN];
    h.encode(&mut b);
    assert_eq!(b, [7, 4, 24, 24, 0x18, 0x10, 0, 0]);
    assert_eq!(CommonHeader::decode(&b), h);
}

#[test]
fn digest_is_crc32c() {
    // The CRC-32C check value (RFC 3720 B.4: 32 bytes of zeros).
    assert_eq!(digest(&[0u8; 32]), 0x8A91_36AA);
    assert_eq!(digest(b"123456789"), 0xE306_9283);
    assert_eq!(
        digest_append(digest(b"1234"), b"56789"),
        digest(b"123456789")
    );
}

#[test]
fn ic_req_and_resp_round_trip_and_check() {
    let req = IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: true,
        ddgst: false,
        maxr2t: 0,
    };
    let b = req.encode();
    let h = CommonHeader::decode(b[..8].try_into().unwrap());
    let l = PduLayout::check(&h, H2C, None, 0).unwrap();
    assert_eq!((l.hlen, l.plen, l.data_len), (128, 128, 0));
    assert_eq!(IcReq::decode(&b), Ok(req));
    let resp = IcResp {
        pfv: 0,
        cpda: 0,
        hdgst: true,
        ddgst: false,
        maxh2cdata: 0x40_0000,
    };
    let rb = resp.encode();
    assert_eq!(IcResp::decode(&rb, &req), Ok(resp));
    // The Linux host's checks of an ICResp.
    let bad = |f: &dyn Fn(&mut IcResp)| {
        let mut r = resp;
        f(&mut r);
        IcResp::decode(&r.encode(), &req).unwrap_err()
    };
    assert_eq!(bad(&|r| r.pfv = 1).fei, 8);
    assert_eq!(bad(&|r| r.cpda = 1).fei, 10);
    assert_eq!(bad(&|r| r.hdgst = false).fei, 11);
    assert_eq!(bad(&|r| r.ddgst = true).fei, 11);
    assert_eq!(bad(&|r| r.maxh2cdata = 2048).fei, 12);
    assert_eq!(bad(&|r| r.maxh2cdata = 4098).fei, 12);
}

#[test]
fn ic_req_checks() {
    let mut b = IcReq {
        pfv: 0,
        hpda: 0,
        hdgst: false,
        ddgst: false,
        maxr2t: 0,
    }
    .encode();
    b[8] = 1;
    assert_eq!(
        IcReq::decode(&b).unwrap_err().fes,
        Fes::UnsupportedParameter
    );
    b[8] = 0;
    b[10] = 32;
    assert_eq!(IcReq::decode(&b).unwrap_err().fei, 10);
    b[10] = 31;
    b[11] = 0x04;
    assert_eq!(IcReq::decode(&b).unwrap_err().fei, 11);
}

#[test]
fn connection_initialization_comes_first_and_once() {
    let cmd = ch(pdu_type::CAPSULE_CMD, 0, 72, 0, 72);
    let e = PduLayout::check(&cmd, H2C, None, 8192).unwrap_err();
    assert_eq!(e.fes, Fes::PduSequenceError);
    let ic = ch(pdu_type::IC_REQ, 0, 128, 0, 128);
    let e = PduLayout::check(&ic, H2C, neg(false, false), 8192).unwrap_err();
    assert_eq!(e.fes, Fes::PduSequenceError);
    // ICReq fields: flags, PDO, PLEN.
    for (bad, fei) in [
        (ch(pdu_type::IC_REQ, 1, 128, 0, 128), ch_offset::FLAGS),
        (ch(pdu_type::IC_REQ, 0, 128, 4, 128), ch_offset::PDO),
        (ch(pdu_type::IC_REQ, 0, 128, 0, 132), ch_offset::PLEN),
        (ch(pdu_type::IC_REQ, 0, 72, 0, 128), ch_offset::HLEN),
    ] {
        assert_eq!(
            PduLayout::check(&bad, H2C, None, 0).unwrap_err().fei,
            fei,
            "{bad:?}"
        );
    }
}

#[test]
fn types_are_checked_by_direction() {
    for t in [
        pdu_type::IC_RESP,
        pdu_type::C2H_TERM_REQ,
        pdu_type::CAPSULE_RESP,
        pdu_type::C2H_DATA,
        pdu_type::R2T,
        8,
        10,
        0xFF,
    ] {
        let e = PduLayout::check(&ch(t, 0, 24, 0, 24), H2C, neg(false, false), 0).unwrap_err();
        assert_eq!(
            (e.fes, e.fei),
            (Fes::InvalidHeaderField, ch_offset::TYPE),
            "type {t}"
        );
    }
    for t in [pdu_type::IC_REQ, pdu_type::CAPSULE_CMD, pdu_type::H2C_DATA] {
        let e = PduLayout::check(&ch(t, 0, 24, 0, 24), C2H, neg(false, false), 0).unwrap_err();
        assert_eq!(e.fei, ch_offset::TYPE, "type {t}");
    }
}

#[test]
fn capsule_cmd_layouts() {
    let n = neg(false, false);
    // No data.
    let l = PduLayout::check(&ch(4, 0, 72, 0, 72), H2C, n, 8192).unwrap();
    assert_eq!((l.pdo, l.data_len), (0, 0));
    // 4 KiB in-capsule, CPDA 0: PDO right after the header.
    let l = PduLayout::check(&ch(4, 0, 72, 72, 72 + 4096), H2C, n, 8192).unwrap();
    assert_eq!((l.pdo, l.data_len, l.ddgst), (72, 4096, 0));
    // Both digests.
    let nd = neg(true, true);
    let h = ch(4, flags::HDGSTF | flags::DDGSTF, 72, 76, 76 + 512 + 4);
    let l = PduLayout::check(&h, H2C, nd, 8192).unwrap();
    assert_eq!((l.hdgst, l.pdo, l.data_len, l.ddgst), (4, 76, 512, 4));
}

#[test]
fn every_header_field_is_checked() {
    let n = neg(false, false);
    let cases = [
        (
            ch(4, 0, 24, 0, 72),
            ch_offset::HLEN,
            Fes::InvalidHeaderField,
        ),
        (
            ch(4, flags::DATA_LAST, 72, 0, 72),
            ch_offset::FLAGS,
            Fes::InvalidHeaderField,
        ),
        (
            ch(4, flags::HDGSTF, 72, 0, 76),
            ch_offset::FLAGS,
            Fes::InvalidHeaderField,
        ),
        (
            ch(4, 0, 72, 0, 70),
            ch_offset::PLEN,
            Fes::InvalidHeaderField,
        ),
        (ch(4, 0, 72, 8, 72), ch_offset::PDO, Fes::InvalidHeaderField),
        (
            ch(4, flags::DDGSTF, 72, 0, 72),
            ch_offset::FLAGS,
            Fes::InvalidHeaderField,
        ),
        (
            ch(4, 0, 72, 64, 72 + 64),
            ch_offset::PDO,
            Fes::InvalidHeaderField,
        ),
        (
            ch(4, 0, 72, 74, 72 + 64),
            ch_offset::PDO,
            Fes::InvalidHeaderField,
        ),
        (
            ch(4, flags::DDGSTF, 72, 72, 72 + 64),
            ch_offset::FLAGS,
            Fes::InvalidHeaderField,
        ),
        (
            ch(4, 0, 72, 72 + 64, 72 + 64),
            ch_offset::PLEN,
            Fes::InvalidHeaderField,
        ),
        (
            ch(4, 0, 72, 72, 72 + 8193),
            ch_offset::PLEN,
            Fes::DataTransferLimitExceeded,
        ),
        (
            ch(6, 0, 24, 0, 24),
            ch_offset::PLEN,
            Fes::InvalidHeaderField,
        ),
        (
            ch(6, flags::DATA_SUCCESS, 24, 24, 28),
            ch_offset::FLAGS,
            Fes::InvalidHeaderField,
        ),
        (
            ch(2, 0, 24, 0, 23),
            ch_offset::PLEN,
            Fes::InvalidHeaderField,
        ),
        (
            ch(2, 0, 24, 24, 24 + 129),
            ch_offset::PLEN,
            Fes::InvalidHeaderField,
        ),
    ];
    for (h, fei, fes) in cases {
        let e = PduLayout::check(&h, H2C, n, 8192).unwrap_err();
        assert_eq!((e.fes, e.fei), (fes, fei), "{h:?}: {}", e.what);
    }
    // A huge PLEN is refused before anything is read or allocated.
    let e = PduLayout::check(&ch(6, 0, 24, 24, u32::MAX as usize), H2C, n, 1 << 20).unwrap_err();
    assert_eq!(e.fes, Fes::DataTransferLimitExceeded);
    // C2H: SUCCESS needs LAST; R2T has no data.
    let e = PduLayout::check(&ch(7, flags::DATA_SUCCESS, 24, 24, 28), C2H, n, 8192).unwrap_err();
    assert_eq!(e.fei, ch_offset::FLAGS);
    let e = PduLayout::check(&ch(9, 0, 24, 24, 28), C2H, n, 8192).unwrap_err();
    assert_eq!(e.fei, ch_offset::PLEN);
}

#[test]
fn pdo_follows_the_receivers_alignment() {
    let n = Negotiated {
        hdgst: true,
        ddgst: false,
        pda: 7, // 32 bytes
    };
    assert_eq!(n.pdo(24), 32);
    assert_eq!(n.pdo(72), 96);
    let l = PduLayout::check(&ch(7, flags::HDGSTF, 24, 32, 32 + 100), C2H, Some(n), 8192).unwrap();
    assert_eq!((l.pdo, l.data_len), (32, 100));
    let e = PduLayout::check(&ch(7, flags::HDGSTF, 24, 28, 28 + 100), C2H, Some(n), 8192);
    assert_eq!(e.unwrap_err().fei, ch_offset::PDO);
}

#[test]
fn data_pdus_round_trip() {
    let n = Negotiated {
        hdgst: true,
        ddgst: true,
        pda: 0,
    };
    let d = DataHeader {
        cccid: 9,
        ttag: 3,
        datao: 8192,
        datal: 4096,
    };
    let mut b = [0u8; DATA_HLEN];
    let l = d.encode(pdu_type::H2C_DATA, flags::DATA_LAST, &n, &mut b);
    assert_eq!((l.pdo, l.plen), (28, 28 + 4096 + 4));
    let h = CommonHeader::decode(b[..8].try_into().unwrap());
    let checked = PduLayout::check(&h, H2C, Some(n), 1 << 20).unwrap();
    assert_eq!(checked, l);
    let back = DataHeader::decode(&b);
    assert_eq!(back, d);
    assert!(back.check(&checked).is_ok());
    let wrong = DataHeader { datal: 4095, ..d };
    assert_eq!(wrong.check(&checked).unwrap_err().fei, 16);
}

#[test]
fn r2t_and_capsules_encode() {
    let mut b = [0u8; DATA_HLEN];
    let r = R2t {
        cccid: 1,
        ttag: 2,
        r2to: 0,
        r2tl: 65536,
    };
    let l = r.encode(false, &mut b);
    assert_eq!((l.plen, l.pdo, b[0], b[2]), (24, 0, pdu_type::R2T, 24));
    assert_eq!(R2t::decode(&b), r);
    let h = CommonHeader::decode(b[..8].try_into().unwrap());
    assert!(PduLayout::check(&h, C2H, neg(false, false), 0).is_ok());

    let sqe = Sqe {
        opcode: 1,
        cid: 7,
        nsid: 1,
        ..Sqe::default()
    };
    let mut cb = [0u8; CAPSULE_CMD_HLEN];
    let l = encode_capsule_cmd(&sqe, 4096, &Negotiated::default(), &mut cb);
    assert_eq!((l.pdo, l.plen), (72, 72 + 4096));
    assert_eq!(Sqe::decode(cb[8..].try_into().unwrap()).cid, 7);

    let cqe = Cqe::error(7, 1, 3, Status::SUCCESS);
    let mut rb = [0u8; CAPSULE_RESP_HLEN];
    let l = encode_capsule_resp(&cqe, true, &mut rb);
    assert_eq!((l.plen, rb[1]), (28, flags::HDGSTF));
    let h = CommonHeader::decode(rb[..8].try_into().unwrap());
    assert!(PduLayout::check(&h, C2H, neg(true, false), 0).is_ok());
}

#[test]
fn term_req_quotes_the_offending_header() {
    let mut b = [0u8; DATA_HLEN + TERM_REQ_MAX_DATA];
    let offending = [0xAAu8; 200];
    let t = TermReq {
        fes: Fes::InvalidHeaderField,
        fei: 2,
    };
    let n = t.encode(pdu_type::C2H_TERM_REQ, &offending, &mut b);
    assert_eq!(n, 152);
    let h = CommonHeader::decode(b[..8].try_into().unwrap());
    let l = PduLayout::check(&h, C2H, neg(true, true), 0).unwrap();
    assert_eq!(l.data_len, 128);
    assert_eq!(
        TermReq::decode(b[..DATA_HLEN].try_into().unwrap()),
        (Some(Fes::InvalidHeaderField), 2)
    );
    assert!(b[DATA_HLEN..].iter().all(|&x| x == 0xAA));
}
