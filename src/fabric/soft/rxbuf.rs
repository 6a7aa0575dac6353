//! The receive side's socket buffer: frames are parsed out of it, and it can be read in two
//! ways. The receive thread reads blocking once a frame has begun (it finishes every frame it
//! starts); a CQ waiter that drives the QP inline ([`super::rx::RxShared::drive_inline`]) only
//! fills it without blocking and parses frames that are already whole in it.
//!
//! Unlike `std::io::BufReader`, a fill appends to what is buffered (moving it to the front when
//! the tail is short), so a frame that arrives in pieces becomes whole in the buffer.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

pub(super) struct RxBuf {
    stream: TcpStream,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Reads wait for data (the receive thread inside a frame); otherwise they fail with
    /// `WouldBlock`.
    pub blocking: bool,
    /// The last fill got less than it had room for: the socket had nothing more then. Data
    /// that comes later makes the socket readable again, which wakes a reader; so a reader
    /// that sees this may stop without one more `recv` that would only say `EAGAIN`.
    pub drained: bool,
}

impl RxBuf {
    pub fn new(stream: TcpStream, capacity: usize) -> RxBuf {
        RxBuf {
            stream,
            buf: vec![0; capacity].into_boxed_slice(),
            start: 0,
            end: 0,
            blocking: false,
            drained: false,
        }
    }

    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The bytes read and not yet parsed.
    pub fn buffered(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Bytes the socket holds that are not read yet (`FIONREAD`; 0 if it cannot tell).
    pub fn in_socket(&self) -> usize {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int to the live `n`; the socket is ours.
        let r = unsafe { libc::ioctl(self.stream.as_raw_fd(), libc::FIONREAD, &mut n) };
        if r < 0 {
            0
        } else {
            n.max(0) as usize
        }
    }

    fn recv(&self, dst: &mut [u8]) -> io::Result<usize> {
        recv(&self.stream, self.blocking, dst)
    }

    /// Reads more from the socket behind what is buffered. `Ok(0)` is the end of the stream;
    /// non-blocking with nothing to read gives `WouldBlock`.
    pub fn fill(&mut self) -> io::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            // Full of one unparsed frame: the caller reads it with `read_exact`.
            return Err(io::Error::other("receive buffer full"));
        }
        let room = self.buf.len() - self.end;
        let n = match recv(&self.stream, self.blocking, &mut self.buf[self.end..]) {
            Ok(n) => n,
            Err(e) => {
                self.drained = e.kind() == io::ErrorKind::WouldBlock;
                return Err(e);
            }
        };
        self.drained = n < room;
        self.end += n;
        Ok(n)
    }

    /// Fills `dst` from the buffer, then from the socket (large remainders straight into `dst`,
    /// without passing through the buffer).
    pub fn read_exact(&mut self, dst: &mut [u8]) -> io::Result<()> {
        let mut off = 0;
        while off < dst.len() {
            let have = self.end - self.start;
            if have > 0 {
                let n = have.min(dst.len() - off);
                dst[off..off + n].copy_from_slice(&self.buf[self.start..self.start + n]);
                self.start += n;
                off += n;
                continue;
            }
            let direct = dst.len() - off >= self.buf.len() / 2;
            let n = if direct {
                self.recv(&mut dst[off..])?
            } else {
                self.fill()?
            };
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            if direct {
                off += n;
            }
        }
        Ok(())
    }
}

/// One `recv`, waiting for data or not (`MSG_DONTWAIT`: the socket's own mode is shared with
/// the transmit side's descriptor and stays blocking).
fn recv(stream: &TcpStream, blocking: bool, dst: &mut [u8]) -> io::Result<usize> {
    let flags = if blocking { 0 } else { libc::MSG_DONTWAIT };
    loop {
        // SAFETY: `dst` is live and writable for its length; the socket is ours.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                dst.as_mut_ptr().cast(),
                dst.len(),
                flags,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    #[test]
    fn fills_append_and_reads_span_the_buffer_and_the_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut w = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (r, _) = l.accept().unwrap();
        let mut rb = RxBuf::new(r, 16);
        assert_eq!(
            rb.fill().unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "nothing sent yet"
        );
        w.write_all(b"abc").unwrap();
        rb.blocking = true;
        let mut n = rb.fill().unwrap();
        w.write_all(b"defgh").unwrap();
        while n < 8 {
            n += rb.fill().unwrap();
        }
        assert_eq!(rb.buffered(), b"abcdefgh");
        let mut two = [0u8; 2];
        rb.read_exact(&mut two).unwrap();
        assert_eq!(&two, b"ab");
        // 6 buffered + 40 from the socket, most of it read straight into the destination.
        let big: Vec<u8> = (0..40u8).collect();
        w.write_all(&big).unwrap();
        let mut dst = [0u8; 46];
        rb.read_exact(&mut dst).unwrap();
        assert_eq!(&dst[..6], b"cdefgh");
        assert_eq!(&dst[6..], &big[..]);
        drop(w);
        assert_eq!(rb.fill().unwrap(), 0, "end of stream");
    }
}
