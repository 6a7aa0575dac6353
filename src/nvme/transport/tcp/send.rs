//! Writing a PDU stream gathered from pieces (headers, data where it lies, digests) to a
//! non-blocking socket: one `sendmsg` for as many pieces as it takes, no copy into a staging
//! buffer. The target's `Socket::flush` and the initiator's send queue both write this way.

use std::io;
use std::os::fd::RawFd;

/// Writes the bytes `iov` names to `fd` without blocking and without `SIGPIPE` (a closed peer
/// is an `EPIPE` error); how many bytes the socket took (possibly fewer than asked, ending
/// inside any piece). `WouldBlock`: none fit.
///
/// # Safety
/// Each iovec names `iov_len` readable bytes that stay unchanged for the call.
pub unsafe fn send_iovecs(fd: RawFd, iov: &[libc::iovec]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len() as _;
    // SAFETY: `msg` names the caller's iovecs, readable for the call (this function's
    // contract); the kernel only reads them.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}
