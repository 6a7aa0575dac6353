//! One NVMe/TCP connection's socket: what came in and is not consumed yet (a receive buffer
//! that PDUs are parsed from in place), and what is to go out (a queue of PDUs, each a header
//! with its digest and padding, optional data straight from the arena, and its data digest),
//! written with one `sendmsg` for as many PDUs as are queued.

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use rdmablk::nvme::tls::ktls::{self, Established};
use rdmablk::nvme::transport::tcp::ack;
use rdmablk::nvme::transport::tcp::place::PLACE_READ;
use rdmablk::nvme::transport::tcp::send::send_iovecs;

mod tls;

/// Receive buffer bytes: room for the largest PDU this target accepts (an H2CData of
/// [`super::MAXH2CDATA`], or a CapsuleCmd with 8 KiB of in-capsule data) plus what follows.
pub const RX_BYTES: usize = 2 * super::MAXH2CDATA as usize;
/// Header bytes a queued PDU may have: a TermReq with its quote (152), or a data PDU's header,
/// digest and padding up to a PDA of 31 (128 + 4).
pub const TX_HEADER_BYTES: usize = 160;
/// PDUs written per `sendmsg` at most (three pieces each).
const IOV_BATCH: usize = 64;

/// A PDU to send.
pub struct TxPdu {
    /// Header, header digest and padding.
    pub head: [u8; TX_HEADER_BYTES],
    pub head_len: u16,
    /// Data from the arena (a request's data slot): address and length.
    pub data: Option<(*const u8, usize)>,
    /// Data digest, sent after the data.
    pub ddgst: Option<[u8; 4]>,
    /// The request slot whose response this PDU completes (the core hears it was sent once
    /// the whole PDU is written).
    pub completes: Option<u32>,
}

impl TxPdu {
    fn len(&self) -> usize {
        usize::from(self.head_len)
            + self.data.map_or(0, |(_, n)| n)
            + self.ddgst.map_or(0, |d| d.len())
    }
}

/// The socket and its buffers.
pub struct Socket {
    pub stream: TcpStream,
    rx: Box<[u8]>,
    /// `rx[start..end]` is received and not consumed.
    start: usize,
    end: usize,
    /// The most one [`Socket::fill`] reads: all of `rx`, or [`PLACE_READ`] while large
    /// H2CData comes to be placed (`receive.rs`).
    read_max: usize,
    /// The last [`Socket::fill`] stopped at `read_max` with the socket not drained.
    pub capped: bool,
    /// The last read ([`Socket::fill`] or [`Socket::read_into`]) found the socket drained
    /// (a short read, nothing, or an error): another before epoll says so again would most
    /// likely find nothing.
    pub drained: bool,
    tx: VecDeque<TxPdu>,
    /// Bytes of `tx.front()` already written.
    tx_off: usize,
    /// Bytes written so far (progress, for the stalled-host timer).
    pub sent_bytes: u64,
    /// Bytes read from the socket so far (ciphertext under TLS in user space).
    pub received_bytes: u64,
    /// The peer closed its side, or the socket failed: why.
    pub broken: Option<String>,
    iov: Vec<libc::iovec>,
    /// TLS, once the connection's handshake is done (`socket/tls.rs`): its records through
    /// OpenSSL in user space, or through the kernel (then the socket is read and written as
    /// in clear text).
    tls: Option<Established>,
    /// TLS: plaintext of the PDUs being encrypted.
    plain: Vec<u8>,
}

impl Socket {
    pub fn new(stream: TcpStream, tx_capacity: usize) -> io::Result<Socket> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(Socket {
            stream,
            rx: vec![0u8; RX_BYTES].into_boxed_slice(),
            start: 0,
            end: 0,
            read_max: RX_BYTES,
            capped: false,
            drained: false,
            tx: VecDeque::with_capacity(tx_capacity),
            tx_off: 0,
            sent_bytes: 0,
            received_bytes: 0,
            broken: None,
            iov: Vec::with_capacity(3 * IOV_BATCH),
            tls: None,
            plain: Vec::new(),
        })
    }

    /// Reads what the socket has, as far as the buffer has room. True if anything came.
    pub fn fill(&mut self) -> bool {
        self.compact();
        self.capped = false;
        self.drained = false;
        if self.tls_user() {
            return self.fill_tls();
        }
        let mut any = false;
        let limit = self.rx.len().min(self.end + self.read_max);
        while self.end < limit {
            // SAFETY: the destination is the free tail of our own buffer.
            let n = unsafe {
                libc::recv(
                    self.stream.as_raw_fd(),
                    self.rx[self.end..].as_mut_ptr().cast(),
                    limit - self.end,
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                let asked = limit - self.end;
                self.end += n as usize;
                self.received_bytes += n as u64;
                any = true;
                if (n as usize) < asked {
                    // The socket is drained (a short read): no second call just to hear
                    // EAGAIN; the epoll set is level-triggered, so whatever comes next wakes
                    // the group again.
                    self.drained = true;
                    break;
                }
                self.capped = self.end == limit && limit < self.rx.len();
                continue;
            }
            if !self.recv_failed(n) {
                self.drained = true;
                break;
            }
        }
        any
    }

    /// Moves what is not consumed to the front of the buffer when the buffer's end is reached
    /// or nothing is left.
    fn compact(&mut self) {
        if self.start > 0 && (self.end == self.rx.len() || self.start == self.end) {
            self.rx.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// A `recv` that returned `n` <= 0: whether to call it again (interrupted). End of file
    /// or an error marks the socket broken.
    fn recv_failed(&mut self, n: isize) -> bool {
        if n == 0 {
            self.broken
                .get_or_insert_with(|| "the host closed the connection".into());
            return false;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => false,
            io::ErrorKind::Interrupted => true,
            _ => {
                // Under kTLS, a record that is not data (an alert, a KeyUpdate) or one that
                // does not decrypt: named, and the connection ends. A ticket too: only
                // servers send them.
                let why = match self
                    .tls
                    .as_ref()
                    .and_then(|_| ktls::receive_error(&self.stream, &e))
                {
                    Some(ktls::ReceiveError::Ends(why)) => why,
                    Some(ktls::ReceiveError::Ticket) => {
                        "the host sent a NewSessionTicket (only a server sends them)".into()
                    }
                    None => format!("receive: {e}"),
                };
                self.broken.get_or_insert(why);
                false
            }
        }
    }

    /// Reads what the socket has straight into `dst`, up to all of it, and in the same
    /// `recvmsg` what follows into the receive buffer (as [`Socket::fill`] would: up to its
    /// read size, so the next PDU's header comes with the end of this data); the bytes that
    /// went into `dst` (placed H2CData: `receive.rs`). Fewer than asked: the socket is
    /// drained ([`Socket::drained`]), or broken. Never under TLS in user space
    /// ([`Socket::can_place`]); under kTLS the kernel decrypts into `dst`.
    ///
    /// # Safety
    /// `dst.0..dst.0 + dst.1` is writable memory nothing else touches during the call, not
    /// in the receive buffer.
    pub unsafe fn read_into(&mut self, dst: (*mut u8, usize)) -> usize {
        debug_assert!(self.can_place(), "placed read under TLS in user space");
        self.compact();
        self.capped = false;
        self.drained = false;
        let (at, len) = dst;
        let mut got = 0;
        while got < len && self.broken.is_none() {
            let tail = self.rx.len().min(self.end + self.read_max) - self.end;
            let mut iov = [
                libc::iovec {
                    // SAFETY: within `dst` (the caller's promise).
                    iov_base: unsafe { at.add(got) }.cast(),
                    iov_len: len - got,
                },
                libc::iovec {
                    iov_base: self.rx[self.end..].as_mut_ptr().cast(),
                    iov_len: tail,
                },
            ];
            let asked = len - got + tail;
            // SAFETY: a zeroed msghdr is valid; its iovecs name the rest of `dst` and the free
            // tail of our own buffer.
            let n = unsafe {
                let mut msg: libc::msghdr = std::mem::zeroed();
                msg.msg_iov = iov.as_mut_ptr();
                msg.msg_iovlen = if tail > 0 { 2 } else { 1 };
                libc::recvmsg(self.stream.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT)
            };
            if n > 0 {
                let n = n as usize;
                self.received_bytes += n as u64;
                let placed = n.min(len - got);
                got += placed;
                self.end += n - placed;
                if n < asked {
                    self.drained = true; // a short read, as in `fill`
                    break;
                }
            } else if !self.recv_failed(n) {
                self.drained = true;
                break;
            }
        }
        got
    }

    /// Whether received data may be read straight to where it goes ([`Socket::read_into`]):
    /// not under TLS in user space, where OpenSSL decrypts into the receive buffer.
    pub fn can_place(&self) -> bool {
        !self.tls_user()
    }

    /// Whether all it has not read yet is the kernel's, so a level-triggered epoll set
    /// reports it until it is read (not under TLS in user space: OpenSSL may hold records it
    /// has read and not yet handed over).
    pub fn kernel_holds_unread(&self) -> bool {
        !self.tls_user()
    }

    /// Reads at most [`PLACE_READ`] bytes a [`Socket::fill`] (`true`: large H2CData comes to
    /// be placed, its headers are read in small bites) or as much as fits (`false`).
    pub fn read_small(&mut self, small: bool) {
        self.read_max = if small { PLACE_READ } else { RX_BYTES };
    }

    /// Acknowledges what the socket received now (`rdmablk::nvme::transport::tcp::ack`).
    pub fn ack_now(&self) {
        ack::ack_now(&self.stream);
    }

    /// The received bytes not consumed yet.
    pub fn received(&self) -> &[u8] {
        &self.rx[self.start..self.end]
    }

    /// Consumes `n` received bytes.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.start);
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Queues a PDU (written by the next [`Socket::flush`]).
    pub fn queue(&mut self, pdu: TxPdu) {
        self.tx.push_back(pdu);
    }

    pub fn has_output(&self) -> bool {
        !self.tx.is_empty()
            || self
                .tls
                .as_ref()
                .and_then(Established::user)
                .is_some_and(|t| !t.outgoing().is_empty())
    }

    /// PDUs queued and not written.
    pub fn queued(&self) -> usize {
        self.tx.len()
    }

    /// Drops what is queued (the connection is closing: nothing more goes out).
    pub fn discard_output(&mut self) {
        self.tx.clear();
        self.tx_off = 0;
    }

    /// Writes as much of the queue as the socket takes; each request slot whose PDU is written
    /// whole goes to `sent`. Returns whether output is left (the socket is full).
    pub fn flush(&mut self, sent: &mut impl FnMut(u32)) -> bool {
        if self.tls_user() {
            return self.flush_tls(sent);
        }
        while !self.tx.is_empty() && self.broken.is_none() {
            self.iov.clear();
            let mut skip = self.tx_off;
            for pdu in self.tx.iter().take(IOV_BATCH) {
                let head = &pdu.head[..usize::from(pdu.head_len)];
                let parts = [
                    Some((head.as_ptr(), head.len())),
                    pdu.data,
                    pdu.ddgst.as_ref().map(|d| (d.as_ptr(), d.len())),
                ];
                for (ptr, len) in parts.into_iter().flatten() {
                    if skip >= len {
                        skip -= len;
                        continue;
                    }
                    self.iov.push(libc::iovec {
                        // SAFETY: `skip < len`, inside the piece.
                        iov_base: unsafe { ptr.add(skip) } as *mut libc::c_void,
                        iov_len: len - skip,
                    });
                    skip = 0;
                }
            }
            // SAFETY: the iovecs point at PDU headers we own and at arena data slots that stay
            // mapped and unchanged while queued.
            let mut n = match unsafe { send_iovecs(self.stream.as_raw_fd(), &self.iov) } {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.broken.get_or_insert_with(|| format!("send: {e}"));
                    return false;
                }
            };
            self.sent_bytes += n as u64;
            while n > 0 {
                let Some(front) = self.tx.front() else {
                    break;
                };
                let left = front.len() - self.tx_off;
                if n < left {
                    self.tx_off += n;
                    break;
                }
                n -= left;
                self.tx_off = 0;
                if let Some(slot) = self.tx.pop_front().and_then(|p| p.completes) {
                    sent(slot);
                }
            }
        }
        false
    }
}
