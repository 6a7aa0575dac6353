//! The soft provider's wire format: every frame is a fixed 32-byte header, then `length` bytes
//! of body (payload of SEND / WRITE / READ_RESP, or a connection-management body).
//!
//! All integers are little-endian and fixed width. [`Header::decode`] and [`CmBody::decode`]
//! take bytes from the peer: they range-check every field and never panic; whatever they refuse
//! moves the QP to the error state (see `docs/soft-provider.md` for the drawn layouts).

/// Size of every frame header.
pub const HEADER_LEN: usize = 32;
/// Largest message (SEND payload, RDMA WRITE or READ length): 2 GiB - 1, like RC's 2^31.
pub const MAX_MSG_BYTES: u32 = i32::MAX as u32;
/// Size of the fixed part of a connection-management body.
pub const CM_FIXED_LEN: usize = 16;
/// `b"RDSB"`: marks a connection-management body of this protocol.
pub const CM_MAGIC: u32 = u32::from_le_bytes(*b"RDSB");
/// Protocol version carried in connection-management bodies.
pub const CM_VERSION: u8 = 1;

/// Frame types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Active side's connect request (CM body with connect private data).
    ConnectReq = 1,
    /// Passive side's accept (CM body with accept private data).
    Accept = 2,
    /// Passive side's reject (CM body with reject private data).
    Reject = 3,
    /// Ready-to-use: the active side got the accept; the passive side is established.
    Rtu = 4,
    /// Disconnect request; the peer moves its QP to the error state.
    Disconnect = 5,
    /// SEND: payload goes into the responder's next receive WR.
    Send = 16,
    /// SEND_WITH_INV: as Send, and invalidate `rkey` at the responder.
    SendInv = 17,
    /// RDMA WRITE of the payload to `remote_addr` under `rkey`.
    Write = 18,
    /// RDMA READ request of `length` bytes at `remote_addr` under `rkey` (no payload).
    ReadReq = 19,
    /// RDMA READ response: `length` bytes of payload for request `psn`.
    ReadResp = 20,
    /// Positive acknowledgement of SEND / WRITE `psn`.
    Ack = 21,
    /// Negative acknowledgement of request `psn`, with a [`Syndrome`].
    Nak = 22,
}

impl Opcode {
    fn from_u8(v: u8) -> Option<Opcode> {
        Some(match v {
            1 => Opcode::ConnectReq,
            2 => Opcode::Accept,
            3 => Opcode::Reject,
            4 => Opcode::Rtu,
            5 => Opcode::Disconnect,
            16 => Opcode::Send,
            17 => Opcode::SendInv,
            18 => Opcode::Write,
            19 => Opcode::ReadReq,
            20 => Opcode::ReadResp,
            21 => Opcode::Ack,
            22 => Opcode::Nak,
            _ => return None,
        })
    }

    /// Largest body this opcode may carry.
    fn max_body(self) -> u32 {
        match self {
            Opcode::ConnectReq => (CM_FIXED_LEN + super::super::MAX_CONNECT_PRIVATE_DATA) as u32,
            Opcode::Accept => (CM_FIXED_LEN + super::super::MAX_ACCEPT_PRIVATE_DATA) as u32,
            Opcode::Reject => (CM_FIXED_LEN + super::super::MAX_REJECT_PRIVATE_DATA) as u32,
            Opcode::Send | Opcode::SendInv | Opcode::Write | Opcode::ReadResp => MAX_MSG_BYTES,
            // READ_REQ's length is the requested size; nothing follows the header.
            Opcode::ReadReq => MAX_MSG_BYTES,
            Opcode::Rtu | Opcode::Disconnect | Opcode::Ack | Opcode::Nak => 0,
        }
    }
}

/// Why a request was refused (the NAK code), or 0 in every other frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Syndrome {
    /// Not a NAK.
    None = 0,
    /// Receiver not ready: no receive WR posted. The requester retries after a delay.
    Rnr = 1,
    /// rkey, range, access or PD check failed at the responder.
    RemoteAccess = 2,
    /// The request was invalid at the responder (receive too small, bad invalidate).
    InvalidRequest = 3,
    /// The responder failed while executing (its receive SGEs were bad).
    RemoteOperation = 4,
    /// The responder's QP is in the error state; the requester sees a transport retry error.
    ResponderError = 5,
}

impl Syndrome {
    fn from_u8(v: u8) -> Option<Syndrome> {
        Some(match v {
            0 => Syndrome::None,
            1 => Syndrome::Rnr,
            2 => Syndrome::RemoteAccess,
            3 => Syndrome::InvalidRequest,
            4 => Syndrome::RemoteOperation,
            5 => Syndrome::ResponderError,
            _ => return None,
        })
    }
}

/// Frame header flag: the SEND had the solicited-event bit.
pub const FLAG_SOLICITED: u8 = 1;

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub op: Opcode,
    pub flags: u8,
    pub syndrome: Syndrome,
    /// Packet sequence number of the request (responses echo it).
    pub psn: u32,
    pub remote_addr: u64,
    /// rkey of WRITE / READ_REQ; the rkey to invalidate for SEND_INV.
    pub rkey: u32,
    /// Body bytes following the header, or the requested length of a READ_REQ.
    pub length: u32,
    /// Sender's QP number (diagnostics only).
    pub src_qpn: u32,
}

/// Why a frame from the peer was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WireError {
    #[error("unknown opcode {0}")]
    Opcode(u8),
    #[error("unknown NAK syndrome {0}")]
    Syndrome(u8),
    #[error("syndrome {syndrome} on a frame of type {op:?}")]
    StraySyndrome { op: Opcode, syndrome: u8 },
    #[error("reserved header byte is {0}, expected 0")]
    Reserved(u8),
    #[error("{op:?} frame length {length} exceeds its limit of {max}")]
    Length { op: Opcode, length: u32, max: u32 },
    #[error("connection body: bad magic {0:#x}")]
    Magic(u32),
    #[error("connection body: protocol version {0}, this side speaks {CM_VERSION}")]
    Version(u8),
    #[error("connection body: {len} bytes do not match its private data length {pd_len}")]
    CmLength { len: usize, pd_len: u8 },
}

impl Header {
    /// A header with every optional field zero.
    pub fn new(op: Opcode, psn: u32, src_qpn: u32) -> Header {
        Header {
            op,
            flags: 0,
            syndrome: Syndrome::None,
            psn,
            remote_addr: 0,
            rkey: 0,
            length: 0,
            src_qpn,
        }
    }

    /// Bytes of body that follow this header on the wire.
    pub fn body_len(&self) -> u32 {
        match self.op {
            Opcode::ReadReq => 0,
            _ => self.length,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.op as u8;
        b[1] = self.flags;
        b[2] = self.syndrome as u8;
        b[4..8].copy_from_slice(&self.psn.to_le_bytes());
        b[8..16].copy_from_slice(&self.remote_addr.to_le_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_le_bytes());
        b[20..24].copy_from_slice(&self.length.to_le_bytes());
        b[24..28].copy_from_slice(&self.src_qpn.to_le_bytes());
        b
    }

    /// Parses and range-checks a header from the peer.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, WireError> {
        let op = Opcode::from_u8(b[0]).ok_or(WireError::Opcode(b[0]))?;
        let syndrome = Syndrome::from_u8(b[2]).ok_or(WireError::Syndrome(b[2]))?;
        if syndrome != Syndrome::None && op != Opcode::Nak {
            return Err(WireError::StraySyndrome { op, syndrome: b[2] });
        }
        if b[3] != 0 {
            return Err(WireError::Reserved(b[3]));
        }
        let h = Header {
            op,
            flags: b[1],
            syndrome,
            psn: le32(&b[4..8]),
            remote_addr: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
            rkey: le32(&b[16..20]),
            length: le32(&b[20..24]),
            src_qpn: le32(&b[24..28]),
        };
        let max = op.max_body();
        if h.length > max {
            return Err(WireError::Length {
                op,
                length: h.length,
                max,
            });
        }
        Ok(h)
    }
}

fn le32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_le_bytes(a)
}

/// Body of CONNECT_REQ, ACCEPT and REJECT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmBody<'a> {
    pub initiator_depth: u8,
    pub responder_resources: u8,
    /// Sender's QP number.
    pub qpn: u32,
    /// Sender's send queue depth: bounds the responses the receiver must be able to queue.
    pub max_send_wr: u32,
    pub private_data: &'a [u8],
}

impl<'a> CmBody<'a> {
    /// Appends header + body for `op` to `out`. The caller has checked the private data size.
    pub fn encode_frame(&self, op: Opcode, out: &mut Vec<u8>) {
        let pd_len = u8::try_from(self.private_data.len()).expect("private data checked");
        let mut h = Header::new(op, 0, self.qpn);
        h.length = (CM_FIXED_LEN + self.private_data.len()) as u32;
        out.extend_from_slice(&h.encode());
        out.extend_from_slice(&CM_MAGIC.to_le_bytes());
        out.push(CM_VERSION);
        out.push(self.initiator_depth);
        out.push(self.responder_resources);
        out.push(pd_len);
        out.extend_from_slice(&self.qpn.to_le_bytes());
        out.extend_from_slice(&self.max_send_wr.to_le_bytes());
        out.extend_from_slice(self.private_data);
    }

    /// Parses a body from the peer (its length was already bounded by [`Header::decode`]).
    pub fn decode(b: &'a [u8]) -> Result<CmBody<'a>, WireError> {
        if b.len() < CM_FIXED_LEN {
            return Err(WireError::CmLength {
                len: b.len(),
                pd_len: 0,
            });
        }
        let magic = le32(&b[0..4]);
        if magic != CM_MAGIC {
            return Err(WireError::Magic(magic));
        }
        if b[4] != CM_VERSION {
            return Err(WireError::Version(b[4]));
        }
        let pd_len = b[7];
        if b.len() != CM_FIXED_LEN + pd_len as usize {
            return Err(WireError::CmLength {
                len: b.len(),
                pd_len,
            });
        }
        Ok(CmBody {
            initiator_depth: b[5],
            responder_resources: b[6],
            qpn: le32(&b[8..12]),
            max_send_wr: le32(&b[12..16]),
            private_data: &b[CM_FIXED_LEN..],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        let mut h = Header::new(Opcode::Write, 0xdead_beef, 7);
        h.remote_addr = 0x1122_3344_5566_7788;
        h.rkey = 0x0102_0304;
        h.length = 4096;
        h.flags = FLAG_SOLICITED;
        let b = h.encode();
        assert_eq!(Header::decode(&b), Ok(h));
        assert_eq!(b[0], 18);
        assert_eq!(&b[20..24], &4096u32.to_le_bytes());
    }

    #[test]
    fn nak_roundtrip() {
        let mut h = Header::new(Opcode::Nak, 3, 1);
        h.syndrome = Syndrome::RemoteAccess;
        assert_eq!(Header::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn header_rejects_garbage_without_panicking() {
        let mut b = Header::new(Opcode::Ack, 1, 1).encode();
        b[0] = 99;
        assert_eq!(Header::decode(&b), Err(WireError::Opcode(99)));
        let mut b = Header::new(Opcode::Ack, 1, 1).encode();
        b[20] = 1; // an ACK carries no body
        assert!(matches!(Header::decode(&b), Err(WireError::Length { .. })));
        let mut b = Header::new(Opcode::Send, 1, 1).encode();
        b[2] = 2; // syndrome on a SEND
        assert!(matches!(
            Header::decode(&b),
            Err(WireError::StraySyndrome { .. })
        ));
        let mut b = Header::new(Opcode::Write, 1, 1).encode();
        b[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Header::decode(&b), Err(WireError::Length { .. })));
        let mut b = Header::new(Opcode::ConnectReq, 1, 1).encode();
        b[20..24].copy_from_slice(&1000u32.to_le_bytes());
        assert!(matches!(Header::decode(&b), Err(WireError::Length { .. })));
        // A cheap deterministic fuzz: no input may panic.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..100_000 {
            let mut b = [0u8; HEADER_LEN];
            for byte in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *byte = x as u8;
            }
            b[0] = [1, 2, 3, 4, 5, 16, 17, 18, 19, 20, 21, 22, b[0]][(x % 13) as usize];
            if let Ok(h) = Header::decode(&b) {
                assert!(h.length <= h.op.max_body());
            }
            let _ = CmBody::decode(&b[..(x as usize % HEADER_LEN)]);
        }
    }

    #[test]
    fn cm_body_roundtrip_and_checks() {
        let body = CmBody {
            initiator_depth: 4,
            responder_resources: 8,
            qpn: 77,
            max_send_wr: 128,
            private_data: b"hello",
        };
        let mut out = Vec::new();
        body.encode_frame(Opcode::Accept, &mut out);
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(&out[..HEADER_LEN]);
        let h = Header::decode(&hb).unwrap();
        assert_eq!(h.op, Opcode::Accept);
        assert_eq!(h.length as usize, out.len() - HEADER_LEN);
        assert_eq!(CmBody::decode(&out[HEADER_LEN..]), Ok(body));
        let mut bad = out[HEADER_LEN..].to_vec();
        bad[7] = 50; // private data length larger than the body
        assert!(matches!(
            CmBody::decode(&bad),
            Err(WireError::CmLength { .. })
        ));
        bad[7] = 5;
        bad[0] = 0;
        assert!(matches!(CmBody::decode(&bad), Err(WireError::Magic(_))));
        assert!(CmBody::decode(&[]).is_err());
    }
}
