//! TLS 1.3 with a PSK under an NVMe/TCP queue (TP 8011; `docs/tcp.md`): the handshake before
//! the ICReq (OpenSSL, `rdmablk::nvme::tls::session`), then every byte of the queue through
//! the kernel's record layer (kTLS: the socket is read and written as in clear text) where
//! the kernel has it and the `tls_record_layer` option allows, else through OpenSSL's in user
//! space (`rdmablk::nvme::tls::ktls`). [`Stream`] is what [`super::tcp::TcpLink`] reads and
//! writes: a plain socket, the socket through OpenSSL, or the socket under kTLS.
//!
//! The key is the host's configured PSK (`NVMeTLSkey-1:..`); the identity and the TLS PSK
//! are derived from it for this host and subsystem, identity version 1 (`NVMe1R0x .. digest`)
//! by default, 0 (`NVMe0R0x`) on request (SPDK v25.09 speaks only 0).

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use rdmablk::nvme::tls::ktls::{self, hand_off, RecordLayer};
use rdmablk::nvme::tls::session::{host_offer, TlsConn, TlsError, MAX_CIPHERTEXT_IN};
use rdmablk::nvme::tls::{ConfiguredPsk, IdentityVersion};

/// A host's TLS settings for a controller (`ConnectOptions::tls_psk`).
#[derive(Clone)]
pub struct TlsKey {
    psk: ConfiguredPsk,
}

impl TlsKey {
    /// From the interchange format (`NVMeTLSkey-1:01:...:`, as `nvme gen-tls-key` writes).
    pub fn parse(text: &str) -> Result<TlsKey, String> {
        ConfiguredPsk::parse(text)
            .map(|psk| TlsKey { psk })
            .map_err(|e| e.to_string())
    }

    /// Reads a key file.
    pub fn from_file(path: &std::path::Path) -> Result<TlsKey, String> {
        let text = zeroize::Zeroizing::new(
            std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
        );
        TlsKey::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

impl PartialEq for TlsKey {
    fn eq(&self, other: &TlsKey) -> bool {
        *self.psk.to_interchange() == *other.psk.to_interchange()
    }
}

impl Eq for TlsKey {}

impl std::fmt::Debug for TlsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsKey(<redacted>)")
    }
}

/// What a queue offers: the key and identity version, for this host and subsystem.
#[derive(Clone, Debug)]
pub(crate) struct TlsOffer {
    pub key: TlsKey,
    pub version: IdentityVersion,
    pub hostnqn: String,
    pub subnqn: String,
    /// Which record layer carries the records after the handshake.
    pub record_layer: RecordLayer,
}

impl TlsOffer {
    /// What `opts` ask for on a connection to `subnqn`: None for clear text.
    pub fn of(opts: &crate::ConnectOptions, subnqn: &str) -> Option<TlsOffer> {
        if !opts.tls && opts.tls_psk.is_none() {
            return None;
        }
        Some(TlsOffer {
            // validate() refused tls without a key.
            key: opts.tls_psk.clone()?,
            version: identity_version(opts.tls_identity)?,
            hostnqn: opts.hostnqn.clone(),
            subnqn: subnqn.to_owned(),
            record_layer: opts.tls_record_layer,
        })
    }
}

/// A queue's socket, in clear text or through TLS.
pub(crate) enum Stream {
    Plain(TcpStream),
    /// TLS records through OpenSSL in user space.
    Tls(TcpStream, Box<TlsConn>),
    /// TLS records through the kernel (kTLS): plain text on the socket.
    Kernel(TcpStream),
}

impl Stream {
    /// `sock` (connected, blocking with a read timeout) as the queue's stream: through TLS
    /// after a handshake that ends by `deadline`, if `offer` says so.
    pub fn start(
        sock: TcpStream,
        offer: Option<&TlsOffer>,
        deadline: Instant,
    ) -> Result<Stream, String> {
        let Some(o) = offer else {
            return Ok(Stream::Plain(sock));
        };
        let (psk, id) = host_offer(&o.key.psk, o.version, &o.hostnqn, &o.subnqn)?;
        let mut conn = TlsConn::client(psk, &id).map_err(|e| e.to_string())?;
        loop {
            let done = conn.handshake().map_err(|e| refusal(&e))?;
            conn.write_to(&mut &sock)
                .map_err(|e| format!("TLS handshake: send: {e}"))?;
            if done {
                let est = hand_off(Box::new(conn), &sock, o.record_layer)
                    .map_err(|e| format!("TLS: {e}"))?;
                tracing::debug!(identity = %id, cipher = est.cipher(),
                    record_layer = est.record_layer(), "NVMe/TCP TLS established");
                return Ok(match est.into_user() {
                    Some(conn) => Stream::Tls(sock, conn),
                    None => Stream::Kernel(sock),
                });
            }
            if Instant::now() > deadline {
                return Err("TLS handshake: the target did not finish it in time".into());
            }
            match conn.read_from(&mut &sock) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    // The target's alert, if it sent one, says why.
                    return Err(match conn.handshake() {
                        Err(e) => refusal(&e),
                        Ok(_) => "TLS handshake: the target closed the connection (does it \
                                  have this host's key, and TLS on this port?)"
                            .into(),
                    });
                }
                Err(e) => return Err(format!("TLS handshake: receive: {e}")),
            }
        }
    }

    fn sock(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) | Stream::Kernel(s) | Stream::Tls(s, _) => s,
        }
    }

    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.sock().set_nonblocking(on)
    }

    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.sock().shutdown(how)
    }

    /// Acknowledges what the socket received now (`rdmablk::nvme::transport::tcp::ack`).
    pub fn ack_now(&self) {
        rdmablk::nvme::transport::tcp::ack::ack_now(self.sock());
    }

    /// Received bytes TLS holds that the socket's readiness does not show.
    pub fn has_buffered_input(&self) -> bool {
        match self {
            Stream::Plain(_) | Stream::Kernel(_) => false,
            Stream::Tls(_, c) => c.has_buffered_input(),
        }
    }

    /// Whether OpenSSL encrypts in user space: what is written is copied into its records
    /// (no socket write is made from the caller's memory).
    pub fn encrypts_in_user_space(&self) -> bool {
        matches!(self, Stream::Tls(..))
    }

    /// Ciphertext not yet taken by the socket.
    pub fn has_pending_output(&self) -> bool {
        match self {
            Stream::Plain(_) | Stream::Kernel(_) => false,
            Stream::Tls(_, c) => !c.outgoing().is_empty(),
        }
    }

    /// Sends what TLS holds, as far as the socket takes it.
    pub fn push_output(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) | Stream::Kernel(_) => Ok(()),
            Stream::Tls(sock, conn) => conn.write_to(&mut &*sock).map(|_| ()),
        }
    }
}

fn refusal(e: &TlsError) -> String {
    format!("{e} (is the key the target has for this host and subsystem?)")
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.sock().as_raw_fd()
    }
}

impl Read for Stream {
    /// Under TLS: as much as is decryptable now, up to `buf`'s length (so that a short read
    /// still means the socket is drained, as in clear text).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (sock, conn) = match self {
            Stream::Plain(s) => return s.read(buf),
            Stream::Kernel(s) => loop {
                // A server's NewSessionTicket is passed over; any other record that is not
                // data (an alert, a KeyUpdate) or does not decrypt: named, never taken as data.
                return match s.read(buf) {
                    Ok(n) => Ok(n),
                    Err(e) => match ktls::receive_error(s, &e) {
                        Some(ktls::ReceiveError::Ticket) => continue,
                        Some(ktls::ReceiveError::Ends(why)) => Err(io::Error::other(why)),
                        None => Err(e),
                    },
                };
            },
            Stream::Tls(s, c) => (&*s, c),
        };
        let mut n = 0;
        // The last read from the socket was short: it had no more then.
        let mut drained = false;
        while n < buf.len() {
            match conn.read_plain(&mut buf[n..]) {
                Ok(0) => {}
                Ok(k) => {
                    n += k;
                    continue;
                }
                Err(TlsError::Closed) => return Ok(n),
                Err(e) => return Err(io::Error::other(e.to_string())),
            }
            if drained && n > 0 {
                return Ok(n);
            }
            let room = MAX_CIPHERTEXT_IN - conn.buffered_in();
            match conn.read_from(&mut { sock }) {
                Ok(0) if n > 0 => return Ok(n),
                Ok(0) => return Err(ErrorKind::WouldBlock.into()),
                Ok(k) => drained = k < room,
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(n),
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }
}

impl Write for Stream {
    /// Under TLS: takes all of `buf` (encrypted at once), then sends what the socket takes;
    /// the rest goes out with [`Stream::push_output`].
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) | Stream::Kernel(s) => s.write(buf),
            Stream::Tls(sock, conn) => {
                if !conn.outgoing().is_empty() && !conn.write_to(&mut &*sock)? {
                    return Err(ErrorKind::WouldBlock.into());
                }
                conn.write_plain(buf)
                    .map_err(|e| io::Error::other(e.to_string()))?;
                match conn.write_to(&mut &*sock) {
                    Ok(_) => Ok(buf.len()),
                    Err(e) => Err(e),
                }
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.push_output()
    }
}

/// The identity version a URL's `tls_identity` names.
pub(crate) fn identity_version(v: u8) -> Option<IdentityVersion> {
    match v {
        0 => Some(IdentityVersion::V0),
        1 => Some(IdentityVersion::V1),
        _ => None,
    }
}
