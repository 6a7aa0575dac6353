//! A socket's bytes through TLS (a connection that started TLS: `super::super::tls`). Under
//! the kernel's record layer (kTLS) the socket is read and written as in clear text, and only
//! its errors differ (`Socket::fill`). Under OpenSSL's in user space (a kernel without kTLS,
//! or `target.tls_record_layer = "user"`), this is what [`Socket::fill`] and
//! [`Socket::flush`] do instead of `recv` and `sendmsg`: ciphertext is read from the socket
//! and decrypted into the receive buffer, and queued PDUs are copied whole into records (a
//! PDU's response slot is free once its bytes are encrypted).
//!
//! Decrypted bytes and ciphertext held inside the connection do not make the socket
//! readable: [`Socket::tls_backlog`] says when to read again without waiting for epoll.

use std::io;

use rdmablk::nvme::tls::ktls::Established;
use rdmablk::nvme::tls::session::{TlsError, MAX_CIPHERTEXT_IN};

use super::Socket;

/// Plaintext gathered from queued PDUs before it is encrypted (TLS splits it into records of
/// 16 KiB).
const PLAIN_BATCH: usize = 64 * 1024;
/// Ciphertext held for a socket that does not take it, above which no more PDUs are
/// encrypted (they wait in the queue, bounded by the queue's depth as in clear text).
const MAX_CIPHERTEXT_OUT: usize = 512 * 1024;

impl Socket {
    /// From now on, the socket's bytes go through `tls` (its handshake done, its records
    /// handed to one record layer).
    pub fn start_tls(&mut self, tls: Established) {
        self.tls = Some(tls);
    }

    /// Whether OpenSSL's record layer in user space carries the connection's records.
    pub(super) fn tls_user(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.user().is_some())
    }

    /// Whether the connection uses TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The TLS PSK identity the host was accepted under.
    pub fn tls_identity(&self) -> Option<&rdmablk::nvme::tls::PskIdentity> {
        self.tls.as_ref().and_then(Established::identity)
    }

    /// Whether TLS holds received bytes that a read would bring into the buffer now.
    pub fn tls_backlog(&self) -> bool {
        self.tls
            .as_ref()
            .and_then(Established::user)
            .is_some_and(|t| t.has_buffered_input())
    }

    /// [`Socket::fill`] under TLS.
    pub(super) fn fill_tls(&mut self) -> bool {
        let Some(t) = self.tls.as_mut().and_then(Established::user_mut) else {
            return false;
        };
        let mut any = false;
        // The last read from the socket was short: it had no more then (no second call just
        // to hear EAGAIN; epoll is level-triggered, what comes later wakes the group).
        let mut drained = false;
        loop {
            // Decrypt what is held first: the socket may have nothing more to say.
            while self.end < self.rx.len() {
                match t.read_plain(&mut self.rx[self.end..]) {
                    Ok(0) => break,
                    Ok(n) => {
                        self.end += n;
                        any = true;
                    }
                    Err(TlsError::Closed) => {
                        self.broken
                            .get_or_insert_with(|| "the host closed the TLS connection".into());
                        return any;
                    }
                    Err(e) => {
                        self.broken.get_or_insert_with(|| e.to_string());
                        return any;
                    }
                }
            }
            if self.end == self.rx.len() || drained {
                return any;
            }
            let room = MAX_CIPHERTEXT_IN - t.buffered_in();
            match t.read_from(&mut &self.stream) {
                Ok(0) => return any,
                Ok(n) => {
                    self.received_bytes += n as u64;
                    drained = n < room;
                }
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    self.broken
                        .get_or_insert_with(|| "the host closed the connection".into());
                    return any;
                }
                Err(e) => {
                    self.broken.get_or_insert_with(|| format!("receive: {e}"));
                    return any;
                }
            }
        }
    }

    /// [`Socket::flush`] under TLS.
    pub(super) fn flush_tls(&mut self, sent: &mut impl FnMut(u32)) -> bool {
        let Some(t) = self.tls.as_mut().and_then(Established::user_mut) else {
            return false;
        };
        loop {
            if self.broken.is_some() {
                return false;
            }
            let before = t.outgoing().len();
            match t.write_to(&mut &self.stream) {
                Ok(_) => {}
                Err(e) => {
                    self.broken.get_or_insert_with(|| format!("send: {e}"));
                    return false;
                }
            }
            self.sent_bytes += (before - t.outgoing().len()) as u64;
            if self.tx.is_empty() || t.outgoing().len() >= MAX_CIPHERTEXT_OUT {
                return !t.outgoing().is_empty();
            }
            // Encrypt the next PDUs whole.
            self.plain.clear();
            while let Some(pdu) = self.tx.front() {
                if !self.plain.is_empty() && self.plain.len() + pdu.len() > PLAIN_BATCH {
                    break;
                }
                self.plain
                    .extend_from_slice(&pdu.head[..usize::from(pdu.head_len)]);
                if let Some((ptr, len)) = pdu.data {
                    // SAFETY: a queued PDU's data is an arena data slot that stays mapped
                    // and unchanged while queued (as `sendmsg` reads it in clear text).
                    let data = unsafe { std::slice::from_raw_parts(ptr, len) };
                    self.plain.extend_from_slice(data);
                }
                if let Some(d) = &pdu.ddgst {
                    self.plain.extend_from_slice(d);
                }
                if let Some(slot) = self.tx.pop_front().and_then(|p| p.completes) {
                    sent(slot);
                }
            }
            if let Err(e) = t.write_plain(&self.plain) {
                self.broken.get_or_insert_with(|| e.to_string());
                return false;
            }
        }
    }
}
