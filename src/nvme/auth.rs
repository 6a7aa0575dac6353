//! In-band authentication (NVMe base spec 8.13, "DH-HMAC-CHAP"): the Authentication Send /
//! Receive commands (Fabrics fctype 0x05 / 0x06) and the messages they carry.
//!
//! ```text
//! Authentication Send / Receive SQE (beyond the Fabrics common fields):
//!   40      41      42      43      44..48
//! +-------+-------+-------+-------+---------------------+
//! | rsvd  | SPSP0 | SPSP1 | SECP  | TL (send) / AL (recv)|   SECP 0xE9, SPSP0 = SPSP1 = 1
//! +-------+-------+-------+-------+---------------------+
//!
//! Every message starts:  0 auth_type | 1 auth_id | 2..4 rsvd | 4..6 T_ID (LE)
//!
//! Negotiate (host -> ctrl, 8 + 64 x NAPD):   6 SC_C | 7 NAPD | protocol descriptors
//!   descriptor (64): 0 AUTHID (1) | 1 rsvd | 2 HALEN | 3 DHLEN | 4..34 hash IDs | 34..64 DH IDs
//! Challenge (ctrl -> host, 16 + HL + DHVLEN):
//!   6 HL | 7 rsvd | 8 HASHID | 9 DHGID | 10..12 DHVLEN | 12..16 SEQNUM | C1[HL] | DH value
//! Reply (host -> ctrl, 16 + 2 x HL + DHVLEN):
//!   6 HL | 7 rsvd | 8 CVALID | 9 rsvd | 10..12 DHVLEN | 12..16 SEQNUM | R1[HL] | C2[HL] | DH
//! Success1 (ctrl -> host, 16 [+ HL]):  6 HL | 7 rsvd | 8 RVALID | 9..16 rsvd | R2[HL]
//! Success2 (host -> ctrl, 16):         6..16 rsvd
//! Failure1 / Failure2 (8):             6 RESCODE (1) | 7 RESCODE_EXP (a [`FailureReason`])
//! ```
//! Parsing never trusts a length: HL, DHVLEN and NAPD are checked against the bytes received,
//! and a malformed message is the [`FailureReason`] to answer with.
//!
//! # Modules
//! - `message`: the messages, their layout constants, decode and encode.
//! - `command`: the Authentication Send / Receive SQEs that carry them.
//! - `algorithm`: the negotiated hash function ([`HashId`]) and DH group ([`DhGroup`]).
//! - `failure`: [`FailureReason`], the RESCODE_EXP of a failure message.
//!
//! The key format and the crypto live beside them: [`key`] (the `DHHC-1` secret
//! representation), [`dhchap`] (transforms and responses) and [`ffdhe`] (RFC 7919 groups).

mod algorithm;
mod command;
pub mod dhchap;
mod failure;
pub mod ffdhe;
pub mod key;
mod message;

pub use algorithm::{DhGroup, HashId};
pub use command::{AuthReceive, AuthSend};
pub use failure::FailureReason;
pub use message::{
    auth_type, msg, Challenge, Message, Negotiate, Reply, Success1, AUTHID_DHCHAP,
    COMMON_HEADER_LEN, DESCRIPTOR_LEN, FAILURE_LEN, FIXED_LEN, MAX_IDS, NEGOTIATE_HEADER_LEN,
    RESCODE_FAILED,
};

/// Security Protocol of NVMe in-band authentication (SECP).
pub const SECP_DHCHAP: u8 = 0xE9;
/// SPSP0 and SPSP1 of DH-HMAC-CHAP.
pub const SPSP_DHCHAP: u8 = 0x01;
/// Largest message either side sends or accepts: a Reply with SHA-512 and an ffdhe8192 value
/// is 16 + 128 + 1024 bytes; Linux hosts offer 4 KiB receive buffers.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Connect response dword 0, AUTHREQ: the queue must authenticate (DH-HMAC-CHAP).
pub const AUTHREQ_ATR: u32 = 1 << 17;
/// Connect response dword 0, AUTHREQ: secure channel concatenation required (not supported).
pub const AUTHREQ_ASCR: u32 = 1 << 18;
