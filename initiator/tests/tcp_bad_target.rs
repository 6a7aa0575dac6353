//! Bad input from an NVMe/TCP target: a fake target (a TCP listener written here, from the
//! NVMe/TCP specification) answers the host's ICReq and first command with one malformed or
//! hostile PDU each. Every case must be a clear error from `Controller::connect_with`, naming
//! what was wrong: never a panic, a hang or a write outside the command's buffer.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use rdmablk::nvme::transport::tcp::{
    digest, encode_capsule_resp, pdu_type, CommonHeader, DataHeader, Fes, IcResp, Negotiated, R2t,
    TermReq, CAPSULE_RESP_HLEN, CH_LEN, DATA_HLEN, IC_LEN, TERM_REQ_MAX_DATA,
};
use rdmablk::nvme::{Cqe, Sqe, Status, SQE_LEN};
use rdmablk_initiator::{ConnectOptions, Controller};

const NQN: &str = "nqn.2026-11.io.rdmablk:bad-target";

/// What the fake target does after reading the host's ICReq.
#[derive(Clone, Copy, Debug)]
enum Case {
    /// An ICResp with a protocol format version other than 0.
    IcRespPfv,
    /// An ICResp with MAXH2CDATA below 4096.
    IcRespMaxh2cdata,
    /// An ICResp that does not echo the digests asked for.
    IcRespDigests,
    /// After the Connect: a PDU type that does not exist.
    UnknownType,
    /// A CapsuleResp whose PLEN is not its header's length.
    RespPlen,
    /// C2HData for a command that reads nothing (the Connect).
    C2hForNoRead,
    /// An R2T for a command whose data went in the capsule.
    R2tForNoWrite,
    /// C2HData that claims more data than it carries.
    C2hDatalMismatch,
    /// A C2HTermReq: the target gives up on the connection.
    TermReq,
    /// A CapsuleResp with a wrong header digest (digests negotiated).
    HeaderDigest,
}

fn read_pdu(s: &mut TcpStream) -> Vec<u8> {
    let mut ch = [0u8; CH_LEN];
    s.read_exact(&mut ch).expect("a PDU header from the host");
    let h = CommonHeader::decode(&ch);
    let mut rest = vec![0u8; h.plen as usize - CH_LEN];
    s.read_exact(&mut rest).expect("the rest of the PDU");
    let mut pdu = ch.to_vec();
    pdu.extend_from_slice(&rest);
    pdu
}

fn serve(l: TcpListener, case: Case) {
    let (mut s, _) = l.accept().expect("the host connects");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut icreq = [0u8; IC_LEN];
    s.read_exact(&mut icreq).expect("ICReq");
    let hdgst = icreq[11] & 1 != 0; // DGST: bit 0 header digest
    let mut resp = IcResp {
        pfv: 0,
        cpda: 0,
        hdgst,
        ddgst: false,
        maxh2cdata: 128 * 1024,
    };
    match case {
        Case::IcRespPfv => resp.pfv = 1,
        Case::IcRespMaxh2cdata => resp.maxh2cdata = 512,
        Case::IcRespDigests => resp.hdgst = !hdgst,
        _ => {}
    }
    s.write_all(&resp.encode()).unwrap();
    if matches!(
        case,
        Case::IcRespPfv | Case::IcRespMaxh2cdata | Case::IcRespDigests
    ) {
        // The host must give up on its own; keep the socket open meanwhile.
        let _ = s.read(&mut [0u8; 1]);
        return;
    }
    let cmd = read_pdu(&mut s);
    let sqe = Sqe::decode(cmd[CH_LEN..CH_LEN + SQE_LEN].try_into().unwrap());
    let neg = Negotiated {
        hdgst,
        ddgst: false,
        pda: 0,
    };
    let mut out = Vec::new();
    match case {
        Case::UnknownType => {
            let mut b = [0u8; CH_LEN];
            CommonHeader {
                pdu_type: 0x7F,
                flags: 0,
                hlen: CH_LEN as u8,
                pdo: 0,
                plen: CH_LEN as u32,
            }
            .encode(&mut b);
            out.extend_from_slice(&b);
        }
        Case::RespPlen | Case::HeaderDigest => {
            let cqe = Cqe::error(sqe.cid, 0, 1, Status::SUCCESS);
            let mut b = [0u8; CAPSULE_RESP_HLEN];
            encode_capsule_resp(&cqe, hdgst, &mut b);
            if let Case::RespPlen = case {
                b[4..8].copy_from_slice(&30u32.to_le_bytes());
            }
            out.extend_from_slice(&b);
            if hdgst {
                let d = digest(&b) ^ 0xFFFF;
                out.extend_from_slice(&d.to_le_bytes());
            }
        }
        Case::C2hForNoRead | Case::C2hDatalMismatch => {
            let h = DataHeader {
                cccid: sqe.cid,
                ttag: 0,
                datao: 0,
                datal: 512,
            };
            let mut b = [0u8; DATA_HLEN];
            h.encode(pdu_type::C2H_DATA, 0x04, &neg, &mut b);
            if let Case::C2hDatalMismatch = case {
                b[16..20].copy_from_slice(&4096u32.to_le_bytes());
            }
            out.extend_from_slice(&b);
            out.extend_from_slice(&[0xEE; 512]);
        }
        Case::R2tForNoWrite => {
            let r = R2t {
                cccid: sqe.cid,
                ttag: 1,
                r2to: 0,
                r2tl: 1 << 20,
            };
            let mut b = [0u8; DATA_HLEN];
            r.encode(hdgst, &mut b);
            out.extend_from_slice(&b);
        }
        Case::TermReq => {
            let mut b = [0u8; DATA_HLEN + TERM_REQ_MAX_DATA];
            let t = TermReq {
                fes: Fes::InvalidHeaderField,
                fei: 4,
            };
            let n = t.encode(pdu_type::C2H_TERM_REQ, &cmd[..CH_LEN + SQE_LEN], &mut b);
            out.extend_from_slice(&b[..n]);
        }
        Case::IcRespPfv | Case::IcRespMaxh2cdata | Case::IcRespDigests => unreachable!(),
    }
    let _ = s.write_all(&out);
    // Hold the connection until the host closes it.
    let _ = s.read(&mut [0u8; 4096]);
}

fn try_connect(case: Case, query: &str) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let server = std::thread::spawn(move || serve(l, case));
    let opts = ConnectOptions {
        connect_timeout_ms: 5_000,
        io_timeout_ms: 5_000,
        reconnect_attempts: 0,
        ..ConnectOptions::default()
    };
    let r = Controller::connect_with(&format!("tcp://{addr}/{NQN}{query}"), opts);
    let e = match r {
        Ok(_) => panic!("{case:?}: the controller connected to a malformed target"),
        Err(e) => e.to_string(),
    };
    server.join().expect("the fake target ran");
    e
}

#[test]
fn malformed_pdus_from_a_target_are_clear_errors() {
    for (case, query, want) in [
        (Case::IcRespPfv, "", "ICResp"),
        (Case::IcRespMaxh2cdata, "", "ICResp"),
        (Case::IcRespDigests, "?hdr_digest=1", "ICResp"),
        (Case::UnknownType, "", "PDU from the target"),
        (Case::RespPlen, "", "PDU from the target"),
        (Case::C2hForNoRead, "", "reads nothing"),
        (Case::R2tForNoWrite, "", "writes nothing"),
        (Case::C2hDatalMismatch, "", "DATAL"),
        (Case::TermReq, "", "terminated the connection"),
        (Case::HeaderDigest, "?hdr_digest=1", "header digest"),
    ] {
        let e = try_connect(case, query);
        eprintln!("{case:?}: {e}");
        assert!(
            e.contains(want),
            "{case:?}: error {e:?} does not say {want:?}"
        );
    }
}
