//! A large data PDU's data read from the socket straight into where it belongs ("placed"):
//! the host's C2HData into the command's buffer, the target's H2CData into the command's
//! data slot. What came with the PDU's header is copied there ([`Placing::begin`]), the rest
//! is read into [`Placing::rest`], and the data digest, when the connection has one, is
//! checked over the placed bytes ([`Placing::digest_matches`]) once the trailer arrives.
//!
//! Both sides place only data that has not all arrived with its header, and read the socket
//! [`PLACE_READ`] bytes at a time while large PDUs come, so that little of the next PDU's
//! data lands in the receive buffer before its header says where it goes.

use super::{digest, DIGEST_LEN};

/// While large data PDUs come, the socket is read this much at a time into the receive
/// buffer (a PDU's header, and whatever small PDUs come between).
pub const PLACE_READ: usize = 4096;

/// A data PDU's data being placed: `len` bytes at `addr`, the last `left` of them still to
/// come from the socket. (An address, not a pointer: the queue that owns it may move between
/// threads.)
#[derive(Clone, Copy, Debug)]
pub struct Placing {
    addr: usize,
    len: usize,
    left: usize,
    /// A data digest follows the data.
    pub digest: bool,
}

impl Placing {
    /// Starts placing `len` bytes at `dst`, of which `first` (the bytes that came with the
    /// header) are copied there now.
    ///
    /// # Safety
    /// `dst..dst + len` is writable memory that nothing else reads or writes until the
    /// placement is over, and does not overlap `first`.
    ///
    /// # Panics
    /// If `first` is longer than `len` (the caller measured `first` from the PDU's length).
    pub unsafe fn begin(dst: *mut u8, len: usize, first: &[u8], digest: bool) -> Placing {
        assert!(first.len() <= len, "more data than the PDU has");
        // SAFETY: the caller's promise; `first.len() <= len`.
        unsafe { std::ptr::copy_nonoverlapping(first.as_ptr(), dst, first.len()) };
        Placing {
            addr: dst as usize,
            len,
            left: len - first.len(),
            digest,
        }
    }

    /// The PDU's data bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the PDU has no data (never placed; for symmetry with [`Placing::len`]).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes still to come from the socket.
    pub fn left(&self) -> usize {
        self.left
    }

    /// Where the bytes still to come go: address and length (within what
    /// [`Placing::begin`] was given).
    pub fn rest(&self) -> (*mut u8, usize) {
        ((self.addr + self.len - self.left) as *mut u8, self.left)
    }

    /// `n` more bytes were read into [`Placing::rest`].
    ///
    /// # Panics
    /// If `n` is more than was left (a read longer than it was asked for).
    pub fn got(&mut self, n: usize) {
        assert!(n <= self.left, "read past the placed data");
        self.left -= n;
    }

    /// The placed data (all of it in).
    ///
    /// # Safety
    /// As for [`Placing::begin`]: the memory is still the PDU's.
    pub unsafe fn data(&self) -> &[u8] {
        debug_assert_eq!(self.left, 0, "placed data not all in");
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    /// Whether `trailer`, the data digest that followed the data on the wire, matches the
    /// placed data.
    ///
    /// # Safety
    /// As for [`Placing::data`].
    pub unsafe fn digest_matches(&self, trailer: &[u8; DIGEST_LEN]) -> bool {
        // SAFETY: the caller's promise.
        digest(unsafe { self.data() }) == u32::from_le_bytes(*trailer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_in_pieces_and_digest_checked() {
        let src: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut dst = vec![0u8; 1000];
        // SAFETY: `dst` is ours and not touched otherwise while placing.
        let mut p = unsafe { Placing::begin(dst.as_mut_ptr(), 1000, &src[..100], true) };
        assert_eq!(p.left(), 900);
        for chunk in src[100..].chunks(333) {
            let (at, left) = p.rest();
            assert!(chunk.len() <= left);
            // SAFETY: within `dst`, as `rest` says.
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), at, chunk.len()) };
            p.got(chunk.len());
        }
        assert_eq!(p.left(), 0);
        let good = digest(&src).to_le_bytes();
        let mut bad = good;
        bad[0] ^= 1;
        // SAFETY: `dst` is still the PDU's.
        unsafe {
            assert_eq!(p.data(), &src[..]);
            assert!(p.digest_matches(&good));
            assert!(!p.digest_matches(&bad));
        }
        assert_eq!(dst, src);
    }

    #[test]
    #[should_panic(expected = "read past")]
    fn a_read_past_the_data_panics() {
        let mut dst = [0u8; 8];
        // SAFETY: `dst` is ours.
        let mut p = unsafe { Placing::begin(dst.as_mut_ptr(), 8, &[1, 2], false) };
        p.got(7);
    }
}
