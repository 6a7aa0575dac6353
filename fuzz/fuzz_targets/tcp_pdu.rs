//! NVMe/TCP PDUs as a receiver parses them from a byte stream: byte 0 picks the side and what
//! was negotiated (bit 0: the controller's side, receiving host PDUs, else the host's; bit 1:
//! connection initialized; bits 2-3: header and data digests; bits 4-7: the PDA); the rest is
//! the stream. Each PDU's common header is checked (`PduLayout::check`), then its type's
//! header decoded; asserts no panic, that an accepted layout adds up within the stream and the
//! data limit, and that ICReq / ICResp / data headers / TermReqs round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::nvme::transport::tcp::{
    pdu_type, CommonHeader, DataHeader, Direction, IcReq, IcResp, Negotiated, PduLayout, R2t,
    TermReq, CH_LEN, DATA_HLEN, IC_LEN,
};

const MAX_DATA: u32 = 8192;

fuzz_target!(|input: &[u8]| {
    let Some((&mode, mut stream)) = input.split_first() else {
        return;
    };
    let dir = if mode & 1 != 0 {
        Direction::HostToController
    } else {
        Direction::ControllerToHost
    };
    let mut neg = (mode & 2 != 0).then_some(Negotiated {
        hdgst: mode & 4 != 0,
        ddgst: mode & 8 != 0,
        pda: mode >> 4,
    });
    while stream.len() >= CH_LEN {
        let ch = CommonHeader::decode(stream[..CH_LEN].try_into().unwrap());
        let Ok(l) = PduLayout::check(&ch, dir, neg, MAX_DATA) else {
            return;
        };
        assert!(l.hlen >= CH_LEN && l.plen >= l.hlen + l.hdgst);
        assert!(
            l.data_len <= MAX_DATA as usize
                || l.pdu_type == pdu_type::H2C_TERM_REQ
                || l.pdu_type == pdu_type::C2H_TERM_REQ
        );
        if l.data_len > 0 {
            assert!(l.pdo >= l.hlen);
            assert_eq!(l.pdo + l.data_len + l.ddgst, l.plen);
        }
        if stream.len() < l.plen {
            return;
        }
        let pdu = &stream[..l.plen];
        match l.pdu_type {
            pdu_type::IC_REQ => {
                let b: &[u8; IC_LEN] = pdu.try_into().unwrap();
                if let Ok(r) = IcReq::decode(b) {
                    assert_eq!(IcReq::decode(&r.encode()), Ok(r));
                    neg = Some(Negotiated {
                        hdgst: r.hdgst,
                        ddgst: r.ddgst,
                        pda: 0,
                    });
                }
            }
            pdu_type::IC_RESP => {
                let b: &[u8; IC_LEN] = pdu.try_into().unwrap();
                let req = IcReq {
                    pfv: 0,
                    hpda: 0,
                    hdgst: b[11] & 1 != 0,
                    ddgst: b[11] & 2 != 0,
                    maxr2t: 0,
                };
                if let Ok(r) = IcResp::decode(b, &req) {
                    assert_eq!(IcResp::decode(&r.encode(), &req), Ok(r));
                    assert!(r.maxh2cdata >= 4096 && r.maxh2cdata % 4 == 0);
                    neg = Some(Negotiated {
                        hdgst: r.hdgst,
                        ddgst: r.ddgst,
                        pda: r.cpda,
                    });
                }
            }
            pdu_type::H2C_DATA | pdu_type::C2H_DATA => {
                let h = DataHeader::decode(pdu[..DATA_HLEN].try_into().unwrap());
                if h.check(&l).is_ok() {
                    assert_eq!(h.datal as usize, l.data_len);
                }
            }
            pdu_type::R2T => {
                let r = R2t::decode(pdu[..DATA_HLEN].try_into().unwrap());
                let mut b = [0u8; DATA_HLEN];
                r.encode(false, &mut b);
                assert_eq!(R2t::decode(&b), r);
            }
            pdu_type::H2C_TERM_REQ | pdu_type::C2H_TERM_REQ => {
                let (fes, fei) = TermReq::decode(pdu[..DATA_HLEN].try_into().unwrap());
                if let Some(fes) = fes {
                    let mut b = [0u8; DATA_HLEN + 128];
                    let n = TermReq { fes, fei }.encode(l.pdu_type, &pdu[DATA_HLEN..], &mut b);
                    assert_eq!(n, l.plen);
                }
                return;
            }
            _ => {}
        }
        stream = &stream[l.plen..];
    }
});
