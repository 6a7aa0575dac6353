//! The soft provider's wire: a TCP byte stream of frames (32-byte header, then its body) as a
//! QP's receive thread and the soft CM read it, including the CM bodies and the NVMe/RDMA
//! private data they carry. Asserts no panic, that every accepted header respects its
//! opcode's body limit, and header / CM body roundtrips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmablk::fabric::soft::wire::{CmBody, Header, Opcode, CM_FIXED_LEN, HEADER_LEN};
use rdmablk::fabric::{MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};
use rdmablk::nvme::transport::rdma::{CmAccept, CmReject, CmRequest};
use rdmablk::nvme::{Cqe, Sqe};

fuzz_target!(|stream: &[u8]| {
    let mut rest = stream;
    // Frame by frame, like the receive loop: a header that fails to decode ends the stream.
    while let Some((hb, after)) = rest.split_first_chunk::<HEADER_LEN>() {
        let Ok(h) = Header::decode(hb) else { return };
        let re = h.encode();
        assert_eq!(Header::decode(&re), Ok(h));
        assert_eq!(
            &re[..28],
            &hb[..28],
            "every header byte but the reserved tail is a field"
        );
        let body_len = h.body_len() as usize;
        let Some(body) = after.get(..body_len) else {
            return;
        };
        rest = &after[body_len..];
        match h.op {
            Opcode::ConnectReq | Opcode::Accept | Opcode::Reject => cm(h.op, body),
            Opcode::Send | Opcode::SendInv => {
                // What the NVMe layer then does with a SEND payload.
                let _ = Sqe::from_capsule(body);
                let _ = Cqe::from_capsule(body);
            }
            _ => {}
        }
    }
});

fn cm(op: Opcode, body: &[u8]) {
    let max_pd = match op {
        Opcode::ConnectReq => MAX_CONNECT_PRIVATE_DATA,
        Opcode::Accept => MAX_ACCEPT_PRIVATE_DATA,
        _ => MAX_REJECT_PRIVATE_DATA,
    };
    assert!(
        body.len() <= CM_FIXED_LEN + max_pd,
        "Header::decode bounds CM bodies"
    );
    let Ok(b) = CmBody::decode(body) else { return };
    assert!(b.private_data.len() <= max_pd);
    let mut out = Vec::new();
    b.encode_frame(op, &mut out);
    let (hb, re_body) = out
        .split_first_chunk::<HEADER_LEN>()
        .expect("a frame has a header");
    let h = Header::decode(hb).expect("an encoded CM frame decodes");
    assert_eq!((h.op, h.length as usize), (op, re_body.len()));
    assert_eq!(re_body, body, "a CM body is all fields");
    assert_eq!(CmBody::decode(re_body), Ok(b));
    match op {
        Opcode::ConnectReq => {
            if let Ok(r) = CmRequest::decode(b.private_data) {
                assert_eq!(CmRequest::decode(&r.encode()), Ok(r));
            }
        }
        Opcode::Accept => {
            let _ = CmAccept::decode(b.private_data);
        }
        _ => {
            let _ = CmReject::decode(b.private_data);
        }
    }
}
