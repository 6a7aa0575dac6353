//! What an NVMe/TCP queue has to send ([`SendQueue`]): the PDU stream as pieces, each either
//! bytes of the queue's own (headers, digests, padding, small data) or a range of a command's
//! buffer (in-capsule data, H2CData) that is written from where it lies. A flush gathers up to
//! [`IOV_BATCH`] pieces into one `sendmsg` (plain TCP and kTLS, where the kernel's copy is the
//! only one); the socket may take any number of bytes, ending inside a piece, and the next
//! flush goes on from there. Under TLS in user space OpenSSL encrypts from a plaintext buffer
//! anyway: the pieces are copied into one, so that each write fills whole records.
//!
//! A borrowed range is read until it is written. Its command's buffer is kept by the queue
//! until the command completes, which a target cannot make happen before it has the data;
//! should one answer a command early all the same, [`SendQueue::release`] copies what of that
//! command is still queued before the response is reported, and on a failed connection
//! [`SendQueue::clear`] drops everything, so no piece names a buffer its command gave back.

use std::collections::VecDeque;
use std::io::{self, ErrorKind, Write};
use std::os::fd::AsRawFd;

use rdmablk::nvme::transport::tcp::send::send_iovecs;

use crate::transport::tcp_tls::Stream;

/// Pieces written per `sendmsg` at most (a PDU takes one to three: its header with the
/// previous PDU's data digest, its data, ...).
pub const IOV_BATCH: usize = 64;
/// Data shorter than this is copied next to its header rather than borrowed: the copy is
/// cheaper than the kernel's walk over one more iovec (admin and fabrics commands' data).
pub const BORROW_FROM: usize = 1024;
/// Plaintext copied for OpenSSL per write at most (its ciphertext waits in the TLS connection
/// until the socket takes it; the next write waits for that).
const TLS_BATCH: usize = 256 * 1024;

/// One piece of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Piece {
    /// `SendQueue::bytes[start..start + len]`.
    Own { start: usize, len: usize },
    /// `len` bytes at `addr` in command `cid`'s buffer.
    Borrowed { cid: u16, addr: u64, len: usize },
}

impl Piece {
    fn len(&self) -> usize {
        match *self {
            Piece::Own { len, .. } | Piece::Borrowed { len, .. } => len,
        }
    }
}

/// A queue's output not yet taken by the socket.
pub struct SendQueue {
    /// The bytes of the [`Piece::Own`] pieces (emptied whenever everything went out).
    bytes: Vec<u8>,
    pieces: VecDeque<Piece>,
    /// Bytes of the front piece already written.
    front_off: usize,
    /// Borrowed pieces queued, by command ID.
    borrowed: Vec<u32>,
    /// TLS in user space: the plaintext being handed to OpenSSL.
    plain: Vec<u8>,
    /// Bytes the socket took so far.
    pub sent_bytes: u64,
}

impl SendQueue {
    /// For a queue of `entries` command IDs.
    pub fn new(entries: usize) -> SendQueue {
        SendQueue {
            bytes: Vec::with_capacity(16 * 1024),
            pieces: VecDeque::with_capacity(4 * entries),
            front_off: 0,
            borrowed: vec![0; entries],
            plain: Vec::new(),
            sent_bytes: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Appends a copy of `b`.
    pub fn push_own(&mut self, b: &[u8]) {
        self.own(b.len(), |v| v.extend_from_slice(b));
    }

    /// Appends `n` zero bytes (padding).
    pub fn push_zeros(&mut self, n: usize) {
        self.own(n, |v| v.resize(v.len() + n, 0));
    }

    fn own(&mut self, n: usize, append: impl FnOnce(&mut Vec<u8>)) {
        if n == 0 {
            return;
        }
        let end = self.bytes.len();
        append(&mut self.bytes);
        match self.pieces.back_mut() {
            Some(Piece::Own { start, len }) if *start + *len == end => *len += n,
            _ => self.pieces.push_back(Piece::Own { start: end, len: n }),
        }
    }

    /// Appends `data`, of command `cid`'s buffer, to be written from where it lies.
    ///
    /// # Safety
    /// `data` stays readable and unchanged until it is written, [`SendQueue::release`] is
    /// called for `cid`, or [`SendQueue::clear`]: until the command completes or its
    /// connection fails. `cid` is below the queue's entries.
    pub unsafe fn push_borrowed(&mut self, cid: u16, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        self.borrowed[usize::from(cid)] += 1;
        self.pieces.push_back(Piece::Borrowed {
            cid,
            addr: data.as_ptr() as u64,
            len: data.len(),
        });
    }

    /// Command `cid` (an ID from the peer: any value) is answered: what of its buffer is still
    /// queued is copied, so the buffer can go back to its owner.
    pub fn release(&mut self, cid: u16) {
        if self.borrowed.get(usize::from(cid)).copied().unwrap_or(0) == 0 {
            return;
        }
        for i in 0..self.pieces.len() {
            let Piece::Borrowed { cid: c, addr, len } = self.pieces[i] else {
                continue;
            };
            if c != cid {
                continue;
            }
            // SAFETY: a queued borrowed piece, still readable (`push_borrowed`'s contract:
            // the command is being answered, its buffer not yet given back).
            let data = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            let start = self.bytes.len();
            self.bytes.extend_from_slice(data);
            // The same bytes elsewhere: `front_off` still counts into it.
            self.pieces[i] = Piece::Own { start, len };
        }
        self.borrowed[usize::from(cid)] = 0;
    }

    /// Drops everything queued (the connection failed or closes).
    pub fn clear(&mut self) {
        self.pieces.clear();
        self.bytes.clear();
        self.front_off = 0;
        self.borrowed.fill(0);
    }

    /// Writes as much as `stream` takes without blocking. Err: the send failed (`WriteZero`:
    /// the socket took nothing, the peer is gone).
    pub fn flush(&mut self, stream: &mut Stream) -> io::Result<()> {
        while !self.pieces.is_empty() {
            let wrote = if stream.encrypts_in_user_space() {
                self.gather_plain();
                stream.write(&self.plain)
            } else {
                self.send_vectored(stream)
            };
            match wrote {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.sent_bytes += n as u64;
                    self.consume(n)
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Where piece `p` lies.
    fn base(&self, p: &Piece) -> *const u8 {
        match *p {
            Piece::Own { start, .. } => self.bytes[start..].as_ptr(),
            Piece::Borrowed { addr, .. } => addr as *const u8,
        }
    }

    /// One `sendmsg` of the first [`IOV_BATCH`] pieces.
    fn send_vectored(&self, stream: &Stream) -> io::Result<usize> {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut iov = [empty; IOV_BATCH];
        let mut skip = self.front_off;
        let mut k = 0;
        for p in self.pieces.iter().take(IOV_BATCH) {
            iov[k] = libc::iovec {
                // SAFETY: `skip` (the front piece's written bytes) is below its length.
                iov_base: unsafe { self.base(p).add(skip) }.cast_mut().cast(),
                iov_len: p.len() - skip,
            };
            skip = 0;
            k += 1;
        }
        // SAFETY: the iovecs name our own bytes (not touched during the call) and queued
        // borrowed ranges, readable until written (`push_borrowed`'s contract).
        unsafe { send_iovecs(stream.as_raw_fd(), &iov[..k]) }
    }

    /// Copies the front of the queue, up to [`TLS_BATCH`] bytes, into `plain`.
    fn gather_plain(&mut self) {
        self.plain.clear();
        let mut skip = self.front_off;
        for p in &self.pieces {
            let room = TLS_BATCH - self.plain.len();
            let n = (p.len() - skip).min(room);
            // SAFETY: as in `send_vectored`; `skip + n` is within the piece.
            let b = unsafe { std::slice::from_raw_parts(self.base(p).add(skip), n) };
            self.plain.extend_from_slice(b);
            skip = 0;
            if self.plain.len() == TLS_BATCH {
                break;
            }
        }
    }

    /// The socket took the first `n` queued bytes.
    fn consume(&mut self, mut n: usize) {
        while let Some(&p) = self.pieces.front() {
            let left = p.len() - self.front_off;
            if n < left {
                self.front_off += n;
                return;
            }
            n -= left;
            self.front_off = 0;
            self.pieces.pop_front();
            if let Piece::Borrowed { cid, .. } = p {
                self.borrowed[usize::from(cid)] -= 1;
            }
        }
        debug_assert_eq!(n, 0, "the socket took more than was queued");
        self.bytes.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::RawFd;
    use std::time::Duration;

    use super::*;

    fn set_buf(fd: RawFd, opt: libc::c_int, bytes: libc::c_int) {
        // SAFETY: a valid socket, option and option length.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "setsockopt: {}", io::Error::last_os_error());
    }

    /// A loopback connection with socket buffers as small as the kernel allows, so that
    /// every flush stops wherever the socket is full: the sending side (non-blocking) and
    /// the receiving one (blocking, with a timeout so that lost bytes fail the test rather
    /// than hang it).
    fn small_pair() -> (Stream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        set_buf(l.as_raw_fd(), libc::SO_RCVBUF, 2048);
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        set_buf(c.as_raw_fd(), libc::SO_SNDBUF, 2048);
        let (s, _) = l.accept().unwrap();
        c.set_nonblocking(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        (Stream::Plain(c), s)
    }

    /// Flushes `q` and reads the other end in odd-sized chunks until `want` bytes arrived:
    /// what arrived, and how many flushes stopped inside a piece (`Own`, `Borrowed`).
    fn drain(q: &mut SendQueue, tx: &mut Stream, rx: &mut TcpStream, want: usize) -> Received {
        let mut r = Received::default();
        let mut buf = [0u8; 1777];
        while r.bytes.len() < want {
            q.flush(tx).expect("flush");
            if q.front_off > 0 {
                match q.pieces.front() {
                    Some(Piece::Own { .. }) => r.inside_own += 1,
                    Some(Piece::Borrowed { .. }) => r.inside_borrowed += 1,
                    None => unreachable!("an offset into no piece"),
                }
            }
            let n = rx.read(&mut buf).expect("the queued bytes arrive");
            assert_ne!(n, 0, "connection closed");
            r.bytes.extend_from_slice(&buf[..n]);
        }
        r
    }

    #[derive(Default)]
    struct Received {
        bytes: Vec<u8>,
        inside_own: usize,
        inside_borrowed: usize,
    }

    fn pattern(seed: usize, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i * 31 + seed * 7 + i / 251) as u8)
            .collect()
    }

    /// More pieces than one `sendmsg` takes, of every kind and size, cut by a full socket
    /// anywhere (inside our own bytes and inside borrowed data): the stream arrives exactly.
    #[test]
    fn pieces_cut_anywhere_by_a_full_socket_arrive_whole_and_in_order() {
        let (mut tx, mut rx) = small_pair();
        let sizes = [1usize, 1023, 1024, 4096, 5000, 65536, 131_075, 7, 300];
        let bufs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| pattern(i, n))
            .collect();
        let mut q = SendQueue::new(8);
        let mut want = Vec::new();
        for k in 0..100usize {
            let head = pattern(1000 + k, 8 + (k * 37) % 3000);
            q.push_own(&head);
            want.extend_from_slice(&head);
            if k % 7 == 0 {
                q.push_zeros(3);
                want.extend_from_slice(&[0; 3]);
            }
            let data = &bufs[k % bufs.len()];
            // SAFETY: `bufs` outlives the queue's use of it (drained below).
            unsafe { q.push_borrowed((k % 8) as u16, data) };
            want.extend_from_slice(data);
            let ddgst = [k as u8; 4];
            q.push_own(&ddgst);
            want.extend_from_slice(&ddgst);
        }
        assert!(q.pieces.len() > IOV_BATCH, "more than one sendmsg's worth");
        let got = drain(&mut q, &mut tx, &mut rx, want.len());
        assert!(
            got.bytes == want,
            "the bytes that arrived differ from those queued"
        );
        assert!(q.is_empty() && q.bytes.is_empty());
        assert!(q.borrowed.iter().all(|&n| n == 0), "{:?}", q.borrowed);
        assert!(
            got.inside_own > 0 && got.inside_borrowed > 0,
            "the socket cut our bytes {} and borrowed data {} times (the test needs both)",
            got.inside_own,
            got.inside_borrowed
        );
    }

    /// A command answered while its data is still queued (the target did not wait for it):
    /// the rest goes out from a copy, whatever its buffer holds after it is given back.
    #[test]
    fn release_sends_the_rest_of_an_answered_command_from_a_copy() {
        let (mut tx, mut rx) = small_pair();
        let mut a = pattern(1, 512 * 1024);
        let b = pattern(2, 64 * 1024);
        let mut q = SendQueue::new(4);
        q.push_own(b"head");
        // SAFETY: `a` is read only until `release(1)` below, `b` until drained.
        unsafe {
            q.push_borrowed(1, &a);
            q.push_own(b"dgst");
            q.push_borrowed(2, &b);
            q.push_borrowed(1, &a[..4096]);
        }
        let mut want = b"head".to_vec();
        want.extend_from_slice(&a);
        want.extend_from_slice(b"dgst");
        want.extend_from_slice(&b);
        want.extend_from_slice(&a[..4096]);
        q.flush(&mut tx).expect("flush");
        assert!(
            matches!(q.pieces.front(), Some(Piece::Borrowed { cid: 1, .. })),
            "the socket is full inside command 1's data"
        );
        q.release(1);
        q.release(u16::MAX); // an ID from the peer: nothing queued, no panic
        a.fill(0xEE); // the buffer given back and reused
        let got = drain(&mut q, &mut tx, &mut rx, want.len());
        assert!(
            got.bytes == want,
            "the bytes that arrived differ from those queued"
        );
        assert_eq!(q.borrowed, [0, 0, 0, 0]);
        // A failed connection: everything queued is dropped.
        // SAFETY: `b` outlives the queue.
        unsafe { q.push_borrowed(2, &b) };
        q.clear();
        assert!(q.is_empty() && q.borrowed.iter().all(|&n| n == 0));
    }
}
