//! The Authentication Send / Receive commands (Fabrics fctype 0x05 / 0x06) that carry the
//! messages: their SQE fields (SECP, SPSP0/1, TL / AL).

use super::{SECP_DHCHAP, SPSP_DHCHAP};
use crate::nvme::opcodes::{fctype, FABRICS};
use crate::nvme::sqe::Sqe;
use crate::nvme::status::Status;

fn check_protocol(sqe: &Sqe) -> Result<u32, Status> {
    let b = sqe.cdw10.to_le_bytes();
    if b[1] != SPSP_DHCHAP || b[2] != SPSP_DHCHAP || b[3] != SECP_DHCHAP {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    if sqe.cdw11 == 0 {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    Ok(sqe.cdw11)
}

fn auth_sqe(ft: u8, cid: u16, len: u32) -> Sqe {
    let mut sqe = Sqe::new(FABRICS, cid);
    sqe.set_fctype(ft);
    sqe.cdw10 = u32::from_le_bytes([0, SPSP_DHCHAP, SPSP_DHCHAP, SECP_DHCHAP]);
    sqe.cdw11 = len;
    sqe
}

/// Authentication Send (fctype 0x05): `tl` bytes of a message, host to controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthSend {
    pub tl: u32,
}

impl AuthSend {
    /// Reads the SQE: SECP/SPSP other than DH-HMAC-CHAP's, or TL 0, is Invalid Field.
    pub fn from_sqe(sqe: &Sqe) -> Result<AuthSend, Status> {
        check_protocol(sqe).map(|tl| AuthSend { tl })
    }

    pub fn to_sqe(&self, cid: u16) -> Sqe {
        auth_sqe(fctype::AUTH_SEND, cid, self.tl)
    }
}

/// Authentication Receive (fctype 0x06): up to `al` bytes of a message, controller to host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthReceive {
    pub al: u32,
}

impl AuthReceive {
    /// Reads the SQE: SECP/SPSP other than DH-HMAC-CHAP's, or AL 0, is Invalid Field.
    pub fn from_sqe(sqe: &Sqe) -> Result<AuthReceive, Status> {
        check_protocol(sqe).map(|al| AuthReceive { al })
    }

    pub fn to_sqe(&self, cid: u16) -> Sqe {
        auth_sqe(fctype::AUTH_RECEIVE, cid, self.al)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_commands() {
        let sqe = AuthSend { tl: 72 }.to_sqe(9);
        assert_eq!(sqe.fctype(), fctype::AUTH_SEND);
        assert_eq!(sqe.cdw10.to_le_bytes(), [0, 1, 1, 0xE9]);
        assert_eq!(AuthSend::from_sqe(&sqe), Ok(AuthSend { tl: 72 }));
        let mut bad = AuthReceive { al: 4096 }.to_sqe(1);
        assert_eq!(AuthReceive::from_sqe(&bad), Ok(AuthReceive { al: 4096 }));
        bad.cdw10 ^= 0xE9 << 24;
        assert!(AuthReceive::from_sqe(&bad).is_err());
        let zero = AuthReceive { al: 0 }.to_sqe(1);
        assert!(AuthReceive::from_sqe(&zero).is_err());
    }
}
