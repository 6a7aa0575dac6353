//! Acknowledging bulk data at once. A peer whose socket send buffer holds about one segment
//! sends nothing more until that segment is acknowledged, and Linux acknowledges a lone
//! full-sized segment only when its delayed-ACK timer fires (milliseconds later). SPDK's TLS
//! sockets are such peers (`SO_SNDBUF` 4 KiB: each 16 KiB record goes alone): 128 KiB of
//! H2CData from `spdk_nvme_perf` to the target, or of C2HData from SPDK's `nvmf_tgt` to the
//! initiator, took 350 ms so, one delayed ACK per record. After a read that brought bulk data,
//! or left a PDU begun and not whole, the reader asks for the ACK now (`TCP_QUICKACK`): one
//! `setsockopt` per pass over the socket (one or more reads), never per PDU; reads of commands
//! and responses alone (the common small-I/O case) cost nothing more, their ACKs ride on the
//! replies as usual.

use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Bytes one read (a pass over a socket) must bring for [`ack_now`] to be worth a call.
pub const ACK_NOW_BYTES: u64 = 8 * 1024;

/// Whether a pass that read `got` bytes, leaving part of a PDU in hand (`mid_pdu`), should
/// acknowledge now.
pub fn wants_ack(got: u64, mid_pdu: bool) -> bool {
    got >= ACK_NOW_BYTES || (got > 0 && mid_pdu)
}

/// Acknowledges what `sock` has received now, not at the delayed-ACK timer. A failure only
/// leaves the ACK delayed, so it is not reported.
pub fn ack_now(sock: &TcpStream) {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket, option and option length.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_or_a_pdu_begun_asks_for_the_ack() {
        assert!(!wants_ack(0, true), "nothing read: nothing to acknowledge");
        assert!(
            !wants_ack(72, false),
            "a command alone: its reply carries the ACK"
        );
        assert!(
            wants_ack(100, true),
            "a PDU begun: its sender is waiting to send the rest"
        );
        assert!(wants_ack(ACK_NOW_BYTES, false));
    }
}
