//! The ciphertext buffers under a [`super::TlsConn`]: what OpenSSL's record layer reads
//! (received, not yet decrypted) and writes (encrypted, not yet sent). Nothing here touches a
//! socket.

use std::io::{self, Read, Write};

use super::MAX_CIPHERTEXT_IN;

/// The ciphertext buffers OpenSSL's record layer reads from and writes to. The receive side
/// is allocated once ([`MAX_CIPHERTEXT_IN`]), and `rx[rx_off..rx_end]` is what is unread.
pub(super) struct Wire {
    pub rx: Box<[u8]>,
    pub rx_off: usize,
    pub rx_end: usize,
    pub tx: Vec<u8>,
    pub tx_off: usize,
    /// The received stream's record boundaries (kept while the handshake runs).
    pub records: Records,
}

impl Default for Wire {
    fn default() -> Wire {
        Wire {
            rx: vec![0u8; MAX_CIPHERTEXT_IN].into_boxed_slice(),
            rx_off: 0,
            rx_end: 0,
            tx: Vec::new(),
            tx_off: 0,
            records: Records::default(),
        }
    }
}

impl Wire {
    /// Moves the unread bytes to the buffer's start; the free tail after them.
    pub fn room(&mut self) -> &mut [u8] {
        if self.rx_off > 0 {
            self.rx.copy_within(self.rx_off..self.rx_end, 0);
            self.rx_end -= self.rx_off;
            self.rx_off = 0;
        }
        &mut self.rx[self.rx_end..]
    }
}

impl Wire {
    /// `n` bytes were written after the unread ones; `track`: while the handshake runs.
    pub fn arrived(&mut self, n: usize, track: bool) {
        self.rx_end += n;
        if track {
            self.records.track(&self.rx[self.rx_end - n..self.rx_end]);
        }
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let have = &self.rx[self.rx_off..self.rx_end];
        if have.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = have.len().min(buf.len());
        buf[..n].copy_from_slice(&have[..n]);
        self.rx_off += n;
        if self.rx_off == self.rx_end {
            self.rx_off = 0;
            self.rx_end = 0;
        }
        Ok(n)
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tx.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Where the received byte stream stands in its records, while the handshake runs: so that a
/// read stops at the end of a record, whatever of it OpenSSL has taken already.
#[derive(Default)]
pub(super) struct Records {
    header: [u8; 5],
    header_have: usize,
    body_left: usize,
    /// A record ended and the handshake has not run since (it may be the last one).
    ended: bool,
}

impl Records {
    /// Record header: type, version (2), length (2).
    const HEADER: usize = 5;

    /// `bytes` arrived.
    pub fn track(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = if self.header_have < Self::HEADER {
                let n = (Self::HEADER - self.header_have).min(bytes.len());
                self.header[self.header_have..self.header_have + n].copy_from_slice(&bytes[..n]);
                self.header_have += n;
                if self.header_have == Self::HEADER {
                    self.body_left =
                        usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
                }
                n
            } else {
                let n = self.body_left.min(bytes.len());
                self.body_left -= n;
                n
            };
            bytes = &bytes[take..];
            if self.header_have == Self::HEADER && self.body_left == 0 {
                self.header_have = 0;
                self.ended = true;
            }
        }
    }

    /// The handshake took what it could.
    pub fn stepped(&mut self) {
        self.ended = false;
    }

    /// How many more bytes may be read without taking any past the end of a record: the rest
    /// of the record (or header) under way; 0 once one ended and the handshake has not run.
    pub fn to_record_end(&self) -> usize {
        if self.ended {
            0
        } else if self.header_have < Self::HEADER {
            Self::HEADER - self.header_have
        } else {
            self.body_left
        }
    }
}
