//! The DH-HMAC-CHAP messages (Negotiate, Challenge, Reply, Success1/2, Failure1/2): their
//! layout constants, decoding from a peer's bytes (never trusting a length) and encoding.
//! The byte layouts are drawn in the [`super`] module doc.

use super::{FailureReason, MAX_MESSAGE_BYTES};
use crate::nvme::le::{put_u16, put_u32, u16_at, u32_at};

/// Header of every message (auth_type, auth_id, rsvd, T_ID).
pub const COMMON_HEADER_LEN: usize = 6;
/// Negotiate header before the protocol descriptors.
pub const NEGOTIATE_HEADER_LEN: usize = 8;
/// One DH-HMAC-CHAP protocol descriptor.
pub const DESCRIPTOR_LEN: usize = 64;
/// Fixed part of Challenge, Reply and Success1; all of Success2.
pub const FIXED_LEN: usize = 16;
/// Failure1 and Failure2.
pub const FAILURE_LEN: usize = 8;
/// Hash IDs a descriptor may list (bytes 4..34) and DH group IDs (bytes 34..64).
pub const MAX_IDS: usize = 30;
const _: () = assert!(NEGOTIATE_HEADER_LEN + DESCRIPTOR_LEN == 72);
const _: () = assert!(4 + 2 * MAX_IDS == DESCRIPTOR_LEN);
const _: () = assert!(FIXED_LEN == 16 && FAILURE_LEN == 8 && COMMON_HEADER_LEN == 6);
const _: () = assert!(FIXED_LEN + 2 * 64 + 1024 <= MAX_MESSAGE_BYTES);

/// auth_type values.
pub mod auth_type {
    /// Negotiate, Failure1, Failure2.
    pub const COMMON: u8 = 0x00;
    /// Challenge, Reply, Success1, Success2.
    pub const DHCHAP: u8 = 0x01;
}

/// auth_id values (message kinds).
pub mod msg {
    pub const NEGOTIATE: u8 = 0x00;
    pub const CHALLENGE: u8 = 0x01;
    pub const REPLY: u8 = 0x02;
    pub const SUCCESS1: u8 = 0x03;
    pub const SUCCESS2: u8 = 0x04;
    pub const FAILURE2: u8 = 0xF0;
    pub const FAILURE1: u8 = 0xF1;
}

/// AUTHID of the DH-HMAC-CHAP protocol descriptor.
pub const AUTHID_DHCHAP: u8 = 0x01;
/// Failure RESCODE: "authentication failed" (the only one defined).
pub const RESCODE_FAILED: u8 = 0x01;

/// Negotiate: the host's offer. IDs are kept raw (unknown ones are skipped when choosing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiate {
    pub t_id: u16,
    /// Secure channel concatenation (0: none; the only value rdmablk accepts).
    pub sc_c: u8,
    pub hash_ids: Vec<u8>,
    pub dh_ids: Vec<u8>,
}

/// Challenge: the controller's hash, group, sequence number S1, challenge C1 and DH value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub t_id: u16,
    pub hash_id: u8,
    pub dh_id: u8,
    pub seqnum: u32,
    pub challenge: Vec<u8>,
    pub dh_value: Vec<u8>,
}

/// Reply: the host's response R1, and for bidirectional authentication its challenge C2 with
/// sequence number S2 (`seqnum`, 0 when C2 is absent), and its DH value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub t_id: u16,
    pub cvalid: bool,
    pub seqnum: u32,
    pub response: Vec<u8>,
    /// C2: as many bytes as `response` (zeros when `cvalid` is false).
    pub challenge: Vec<u8>,
    pub dh_value: Vec<u8>,
}

/// Success1: HL, and the controller's response R2 when the host asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Success1 {
    pub t_id: u16,
    pub hl: u8,
    pub response: Option<Vec<u8>>,
}

/// One DH-HMAC-CHAP message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Negotiate(Negotiate),
    Challenge(Challenge),
    Reply(Reply),
    Success1(Success1),
    Success2 {
        t_id: u16,
    },
    /// Failure1 (controller to host, `from_controller`) or Failure2 (host to controller).
    Failure {
        t_id: u16,
        from_controller: bool,
        rescode: u8,
        rescode_exp: u8,
    },
}

fn need(b: &[u8], len: usize) -> Result<(), FailureReason> {
    if b.len() < len {
        Err(FailureReason::IncorrectPayload)
    } else {
        Ok(())
    }
}

fn hash_len(hl: u8) -> Result<usize, FailureReason> {
    match hl {
        32 | 48 | 64 => Ok(usize::from(hl)),
        _ => Err(FailureReason::HashUnusable),
    }
}

impl Message {
    /// The message's T_ID.
    pub fn t_id(&self) -> u16 {
        match self {
            Message::Negotiate(m) => m.t_id,
            Message::Challenge(m) => m.t_id,
            Message::Reply(m) => m.t_id,
            Message::Success1(m) => m.t_id,
            Message::Success2 { t_id } | Message::Failure { t_id, .. } => *t_id,
        }
    }

    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Negotiate(_) => "negotiate",
            Message::Challenge(_) => "challenge",
            Message::Reply(_) => "reply",
            Message::Success1(_) => "success1",
            Message::Success2 { .. } => "success2",
            Message::Failure {
                from_controller: true,
                ..
            } => "failure1",
            Message::Failure { .. } => "failure2",
        }
    }

    /// Decodes a message received from a peer. Bytes past the message's own length (a
    /// receive buffer larger than the message) are ignored.
    pub fn decode(b: &[u8]) -> Result<Message, FailureReason> {
        need(b, FAILURE_LEN)?;
        let (ty, id, t_id) = (b[0], b[1], u16_at(b, 4));
        match (ty, id) {
            (auth_type::COMMON, msg::NEGOTIATE) => decode_negotiate(b, t_id),
            (auth_type::COMMON, msg::FAILURE1 | msg::FAILURE2) => Ok(Message::Failure {
                t_id,
                from_controller: id == msg::FAILURE1,
                rescode: b[6],
                rescode_exp: b[7],
            }),
            (auth_type::DHCHAP, msg::CHALLENGE) => {
                need(b, FIXED_LEN)?;
                let hl = hash_len(b[6])?;
                let dhvlen = usize::from(u16_at(b, 10));
                need(b, FIXED_LEN + hl + dhvlen)?;
                Ok(Message::Challenge(Challenge {
                    t_id,
                    hash_id: b[8],
                    dh_id: b[9],
                    seqnum: u32_at(b, 12),
                    challenge: b[FIXED_LEN..FIXED_LEN + hl].to_vec(),
                    dh_value: b[FIXED_LEN + hl..FIXED_LEN + hl + dhvlen].to_vec(),
                }))
            }
            (auth_type::DHCHAP, msg::REPLY) => {
                need(b, FIXED_LEN)?;
                let hl = hash_len(b[6])?;
                let dhvlen = usize::from(u16_at(b, 10));
                need(b, FIXED_LEN + 2 * hl + dhvlen)?;
                let r = FIXED_LEN;
                Ok(Message::Reply(Reply {
                    t_id,
                    cvalid: b[8] & 1 != 0,
                    seqnum: u32_at(b, 12),
                    response: b[r..r + hl].to_vec(),
                    challenge: b[r + hl..r + 2 * hl].to_vec(),
                    dh_value: b[r + 2 * hl..r + 2 * hl + dhvlen].to_vec(),
                }))
            }
            (auth_type::DHCHAP, msg::SUCCESS1) => {
                need(b, FIXED_LEN)?;
                let hl = hash_len(b[6])?;
                let response = if b[8] & 1 != 0 {
                    need(b, FIXED_LEN + hl)?;
                    Some(b[FIXED_LEN..FIXED_LEN + hl].to_vec())
                } else {
                    None
                };
                Ok(Message::Success1(Success1 {
                    t_id,
                    hl: b[6],
                    response,
                }))
            }
            (auth_type::DHCHAP, msg::SUCCESS2) => {
                need(b, FIXED_LEN)?;
                Ok(Message::Success2 { t_id })
            }
            _ => Err(FailureReason::IncorrectMessage),
        }
    }

    /// Encodes the message (its exact length).
    pub fn encode(&self) -> Vec<u8> {
        let mut b;
        match self {
            Message::Negotiate(m) => {
                b = vec![0u8; NEGOTIATE_HEADER_LEN + DESCRIPTOR_LEN];
                header(&mut b, auth_type::COMMON, msg::NEGOTIATE, m.t_id);
                b[6] = m.sc_c;
                b[7] = 1;
                let d = &mut b[NEGOTIATE_HEADER_LEN..];
                let halen = m.hash_ids.len().min(MAX_IDS);
                let dhlen = m.dh_ids.len().min(MAX_IDS);
                d[0] = AUTHID_DHCHAP;
                d[2] = halen as u8;
                d[3] = dhlen as u8;
                d[4..4 + halen].copy_from_slice(&m.hash_ids[..halen]);
                d[4 + MAX_IDS..4 + MAX_IDS + dhlen].copy_from_slice(&m.dh_ids[..dhlen]);
            }
            Message::Challenge(m) => {
                let (hl, dv) = (m.challenge.len(), m.dh_value.len());
                b = vec![0u8; FIXED_LEN + hl + dv];
                header(&mut b, auth_type::DHCHAP, msg::CHALLENGE, m.t_id);
                b[6] = hl as u8;
                b[8] = m.hash_id;
                b[9] = m.dh_id;
                put_u16(&mut b, 10, dv as u16);
                put_u32(&mut b, 12, m.seqnum);
                b[FIXED_LEN..FIXED_LEN + hl].copy_from_slice(&m.challenge);
                b[FIXED_LEN + hl..].copy_from_slice(&m.dh_value);
            }
            Message::Reply(m) => {
                let (hl, dv) = (m.response.len(), m.dh_value.len());
                debug_assert_eq!(m.challenge.len(), hl, "C2 is HL bytes");
                b = vec![0u8; FIXED_LEN + 2 * hl + dv];
                header(&mut b, auth_type::DHCHAP, msg::REPLY, m.t_id);
                b[6] = hl as u8;
                b[8] = u8::from(m.cvalid);
                put_u16(&mut b, 10, dv as u16);
                put_u32(&mut b, 12, m.seqnum);
                b[FIXED_LEN..FIXED_LEN + hl].copy_from_slice(&m.response);
                let c2 = m.challenge.len().min(hl);
                b[FIXED_LEN + hl..FIXED_LEN + hl + c2].copy_from_slice(&m.challenge[..c2]);
                b[FIXED_LEN + 2 * hl..].copy_from_slice(&m.dh_value);
            }
            Message::Success1(m) => {
                let extra = m.response.as_ref().map_or(0, Vec::len);
                b = vec![0u8; FIXED_LEN + extra];
                header(&mut b, auth_type::DHCHAP, msg::SUCCESS1, m.t_id);
                b[6] = m.hl;
                if let Some(r) = &m.response {
                    b[8] = 1;
                    b[FIXED_LEN..].copy_from_slice(r);
                }
            }
            Message::Success2 { t_id } => {
                b = vec![0u8; FIXED_LEN];
                header(&mut b, auth_type::DHCHAP, msg::SUCCESS2, *t_id);
            }
            Message::Failure {
                t_id,
                from_controller,
                rescode,
                rescode_exp,
            } => {
                b = vec![0u8; FAILURE_LEN];
                let id = if *from_controller {
                    msg::FAILURE1
                } else {
                    msg::FAILURE2
                };
                header(&mut b, auth_type::COMMON, id, *t_id);
                b[6] = *rescode;
                b[7] = *rescode_exp;
            }
        }
        b
    }
}

fn header(b: &mut [u8], ty: u8, id: u8, t_id: u16) {
    b[0] = ty;
    b[1] = id;
    put_u16(b, 4, t_id);
}

fn decode_negotiate(b: &[u8], t_id: u16) -> Result<Message, FailureReason> {
    need(b, NEGOTIATE_HEADER_LEN + DESCRIPTOR_LEN)?;
    let napd = usize::from(b[7]);
    if napd == 0 {
        return Err(FailureReason::NotUsable);
    }
    need(b, NEGOTIATE_HEADER_LEN + napd * DESCRIPTOR_LEN)?;
    let d = (0..napd)
        .map(|i| &b[NEGOTIATE_HEADER_LEN + i * DESCRIPTOR_LEN..][..DESCRIPTOR_LEN])
        .find(|d| d[0] == AUTHID_DHCHAP)
        .ok_or(FailureReason::NotUsable)?;
    let (halen, dhlen) = (usize::from(d[2]), usize::from(d[3]));
    if halen > MAX_IDS || dhlen > MAX_IDS {
        return Err(FailureReason::IncorrectPayload);
    }
    Ok(Message::Negotiate(Negotiate {
        t_id,
        sc_c: b[6],
        hash_ids: d[4..4 + halen].to_vec(),
        dh_ids: d[4 + MAX_IDS..4 + MAX_IDS + dhlen].to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The negotiate message a Linux host sends (nvme_auth_set_dhchap_negotiate_data): all
    /// three hashes, all six groups, T_ID 3.
    fn linux_negotiate() -> Vec<u8> {
        let mut b = vec![0u8; 72];
        b[4] = 3;
        b[7] = 1;
        b[8] = 1;
        b[10] = 3;
        b[11] = 6;
        b[12..15].copy_from_slice(&[1, 2, 3]);
        b[42..48].copy_from_slice(&[0, 1, 2, 3, 4, 5]);
        b
    }

    #[test]
    fn negotiate_from_linux_decodes_and_reencodes_byte_exact() {
        let b = linux_negotiate();
        let m = Message::decode(&b).unwrap();
        let Message::Negotiate(n) = &m else {
            panic!("{m:?}")
        };
        assert_eq!((n.t_id, n.sc_c), (3, 0));
        assert_eq!(n.hash_ids, [1, 2, 3]);
        assert_eq!(n.dh_ids, [0, 1, 2, 3, 4, 5]);
        assert_eq!(m.encode(), b);
    }

    #[test]
    fn challenge_layout() {
        let m = Message::Challenge(Challenge {
            t_id: 0x0102,
            hash_id: 1,
            dh_id: 1,
            seqnum: 0xAABBCCDD,
            challenge: vec![7; 32],
            dh_value: vec![9; 256],
        });
        let b = m.encode();
        assert_eq!(b.len(), 16 + 32 + 256);
        assert_eq!(
            &b[..16],
            &[1, 1, 0, 0, 2, 1, 32, 0, 1, 1, 0, 1, 0xDD, 0xCC, 0xBB, 0xAA]
        );
        assert_eq!(Message::decode(&b).unwrap(), m);
        // Any truncation is an incorrect payload, never a panic.
        for n in 0..b.len() {
            assert!(Message::decode(&b[..n]).is_err(), "{n}");
        }
    }

    #[test]
    fn reply_success_failure_round_trip() {
        let reply = Message::Reply(Reply {
            t_id: 5,
            cvalid: true,
            seqnum: 77,
            response: vec![1; 48],
            challenge: vec![2; 48],
            dh_value: vec![],
        });
        let b = reply.encode();
        assert_eq!(b.len(), 16 + 96);
        assert_eq!((b[6], b[8]), (48, 1));
        assert_eq!(Message::decode(&b).unwrap(), reply);
        let s1 = Message::Success1(Success1 {
            t_id: 5,
            hl: 64,
            response: Some(vec![3; 64]),
        });
        assert_eq!(Message::decode(&s1.encode()).unwrap(), s1);
        let s2 = Message::Success2 { t_id: 5 };
        assert_eq!(
            s2.encode(),
            [1, 4, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        let f = Message::Failure {
            t_id: 5,
            from_controller: true,
            rescode: RESCODE_FAILED,
            rescode_exp: FailureReason::Failed.code(),
        };
        assert_eq!(f.encode(), [0, 0xF1, 0, 0, 5, 0, 1, 1]);
        // A receive buffer larger than the message: trailing zeros are ignored.
        let mut padded = f.encode();
        padded.resize(4096, 0);
        assert_eq!(Message::decode(&padded).unwrap(), f);
    }

    #[test]
    fn bad_lengths_are_rejected_with_a_reason() {
        let mut b = linux_negotiate();
        b[10] = 31;
        assert_eq!(Message::decode(&b), Err(FailureReason::IncorrectPayload));
        let mut b = linux_negotiate();
        b[7] = 2;
        assert_eq!(Message::decode(&b), Err(FailureReason::IncorrectPayload));
        let mut c = Message::Challenge(Challenge {
            t_id: 0,
            hash_id: 1,
            dh_id: 0,
            seqnum: 1,
            challenge: vec![0; 32],
            dh_value: vec![],
        })
        .encode();
        c[6] = 33;
        assert_eq!(Message::decode(&c), Err(FailureReason::HashUnusable));
        assert_eq!(
            Message::decode(&[9, 9, 0, 0, 0, 0, 0, 0]),
            Err(FailureReason::IncorrectMessage)
        );
    }
}
