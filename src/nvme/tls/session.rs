//! A TLS 1.3 connection with an external PSK, as NVMe/TCP runs one (TP 8011): OpenSSL does
//! the handshake and the record layer; the NVMe parts (which key, which identity, which cipher
//! suite) are ours ([`super`]). The key is handed to OpenSSL the way SPDK's posix sock module
//! does it (`SSL_CTX_set_psk_find_session_callback` on a target,
//! `SSL_CTX_set_psk_use_session_callback` on a host: an `SSL_SESSION` holding the TLS PSK as its
//! master key, TLS 1.3, and the cipher suite of the key's hash), which is the only way OpenSSL
//! takes a TLS 1.3 PSK of SHA-384.
//!
//! The connection never touches a socket: ciphertext comes in through [`TlsConn::feed`] (or
//! [`TlsConn::read_from`]) and goes out through [`TlsConn::outgoing`] /
//! [`TlsConn::write_to`], so a caller on a non-blocking socket under epoll keeps its own loop
//! and never blocks, and a handshake that stalls halfway costs only its own buffers.
//!
//! After the handshake the records go through this connection (OpenSSL's record layer in
//! user space) or through the kernel's ([`super::ktls`]): while the handshake runs,
//! [`TlsConn::read_from`] takes no byte past the end of a record, so the peer's first
//! application data stays in the socket, and a keylog callback keeps the two application
//! traffic secrets the kernel's keys are derived from.
//!
//! Both sides: TLS 1.3 only (a TLS 1.2 ClientHello gets a protocol_version alert),
//! TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384 only, no session tickets, no
//! certificates (a client that offers no PSK gets a handshake failure). A target accepts
//! PSK with (EC)DHE and PSK alone, whichever the host offers; rdmablk's host, like OpenSSL's
//! and SPDK's, offers PSK with (EC)DHE.

use std::ffi::c_int;
use std::io::{self, Read, Write};
use std::sync::{Arc, OnceLock};

use foreign_types::ForeignTypeRef;
use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslStream, SslVersion,
};
use openssl_sys as ffi;

use super::ktls::TrafficSecrets;
use super::{ConfiguredPsk, IdentityVersion, PskHash, PskIdentity, TlsPsk};
use psk::{
    find_session, use_session, SSL_CTX_set_psk_find_session_callback,
    SSL_CTX_set_psk_use_session_callback,
};
use wire::Wire;

mod psk;
mod wire;

/// Ciphertext bytes a connection holds unread at most: what [`TlsConn::read_from`] takes
/// from the socket before the record layer has consumed it (one TLS record is at most 16 KiB
/// plus 256 bytes; this is a few).
pub const MAX_CIPHERTEXT_IN: usize = 64 * 1024;

/// OpenSSL's SSL_OP_ALLOW_NO_DHE_KEX (ssl.h, 1.1.1 and 3.x): a TLS 1.3 server accepts
/// psk_ke (PSK without (EC)DHE) when that is all the client offers.
const SSL_OP_ALLOW_NO_DHE_KEX: u64 = 1 << 10;

extern "C" {
    // OpenSSL 1.1.0+ (libssl is linked by openssl-sys); the `openssl` crates do not wrap it.
    fn SSL_has_pending(ssl: *const ffi::SSL) -> c_int;
    // OpenSSL 1.1.1+.
    #[cfg(test)]
    fn SSL_key_update(ssl: *mut ffi::SSL, updatetype: c_int) -> c_int;
}

/// Why a TLS connection failed. Carries no key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    #[error("TLS set-up: {0}")]
    Setup(String),
    #[error("TLS handshake refused: {0}")]
    Handshake(String),
    #[error("TLS record layer: {0}")]
    Record(String),
    #[error("the peer closed the TLS connection")]
    Closed,
}

/// What a target's key lookup says of a host's identity: the TLS PSK for it, or why not
/// (logged by the caller with the host's address).
pub type PskLookup = Arc<dyn Fn(&PskIdentity) -> Result<TlsPsk, String> + Send + Sync>;

/// What a connection's callbacks reach through the `SSL`'s ex data.
struct PskState {
    /// Target side: finds the key of an identity.
    lookup: Option<PskLookup>,
    /// Host side: the key and the identity offered (its bytes stay here while OpenSSL
    /// reads them).
    offer: Option<(TlsPsk, Vec<u8>)>,
    /// The identity the handshake went on with (target side).
    accepted: Option<PskIdentity>,
    /// Why the target refused the host's identity.
    refused: Option<String>,
    /// The application traffic secrets, from the keylog callback (for kTLS).
    secrets: TrafficSecrets,
}

fn index() -> Result<Index<Ssl, PskState>, TlsError> {
    static INDEX: OnceLock<Result<Index<Ssl, PskState>, String>> = OnceLock::new();
    INDEX
        .get_or_init(|| Ssl::new_ex_index().map_err(|e| e.to_string()))
        .clone()
        .map_err(TlsError::Setup)
}

/// The callbacks' state of `ssl`.
///
/// # Safety
/// `ssl` is a live `SSL` whose ex data at [`index`] was set by this module, and nothing else
/// holds a reference to that state for the returned lifetime (OpenSSL calls the callbacks
/// from inside `SSL_do_handshake`, where this module holds none).
unsafe fn state<'a>(ssl: *mut ffi::SSL) -> Option<&'a mut PskState> {
    let idx = index().ok()?;
    // SAFETY: per this function's contract; the openssl crate stores a `Box<PskState>` raw.
    let p = unsafe { ffi::SSL_get_ex_data(ssl, idx.as_raw()) }.cast::<PskState>();
    // SAFETY: null or the box the crate stored, alive as long as the SSL.
    unsafe { p.as_mut() }
}

fn context(server: bool, suites: &str) -> Result<SslContext, ErrorStack> {
    let method = if server {
        SslMethod::tls_server()
    } else {
        SslMethod::tls_client()
    };
    let mut b = SslContextBuilder::new(method)?;
    b.set_min_proto_version(Some(SslVersion::TLS1_3))?;
    b.set_max_proto_version(Some(SslVersion::TLS1_3))?;
    b.set_ciphersuites(suites)?;
    b.set_num_tickets(0)?;
    b.set_options(SslOptions::NO_TICKET);
    // The application traffic secrets, for the kernel's record layer (`super::ktls`).
    b.set_keylog_callback(|ssl, line| {
        // SAFETY: a connection this module made, inside its handshake (as the PSK callbacks).
        if let Some(st) = unsafe { state(ssl.as_ptr()) } {
            st.secrets.note(line);
        }
    });
    if server {
        // psk_ke as well as psk_dhe_ke: the host chooses.
        b.set_options(SslOptions::from_bits_retain(SSL_OP_ALLOW_NO_DHE_KEX));
        // SAFETY: a context being built; the callback has the type OpenSSL wants.
        unsafe { SSL_CTX_set_psk_find_session_callback(b.as_ptr(), Some(find_session)) };
    } else {
        // SAFETY: as above.
        unsafe { SSL_CTX_set_psk_use_session_callback(b.as_ptr(), Some(use_session)) };
    }
    Ok(b.build())
}

/// The contexts (one per role and suite list, made once).
fn shared_context(role: Role) -> Result<SslContext, TlsError> {
    static CTX: [OnceLock<Result<SslContext, String>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let (i, server, suites) = match role {
        Role::Server => (0, true, "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256"),
        Role::Client(PskHash::Sha256) => (1, false, "TLS_AES_128_GCM_SHA256"),
        Role::Client(PskHash::Sha384) => (2, false, "TLS_AES_256_GCM_SHA384"),
    };
    CTX[i]
        .get_or_init(|| context(server, suites).map_err(|e| e.to_string()))
        .clone()
        .map_err(TlsError::Setup)
}

#[derive(Clone, Copy)]
enum Role {
    Server,
    Client(PskHash),
}

/// One TLS connection of a queue: handshake, then records both ways, over buffers.
pub struct TlsConn {
    ssl: SslStream<Wire>,
    established: bool,
    closed: bool,
}

impl std::fmt::Debug for TlsConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConn")
            .field("established", &self.established)
            .field("cipher", &self.cipher())
            .finish()
    }
}

impl TlsConn {
    fn new(role: Role, state: PskState) -> Result<TlsConn, TlsError> {
        let ctx = shared_context(role)?;
        let setup = |e: ErrorStack| TlsError::Setup(e.to_string());
        let mut ssl = Ssl::new(&ctx).map_err(setup)?;
        ssl.set_ex_data(index()?, state);
        match role {
            Role::Server => ssl.set_accept_state(),
            Role::Client(_) => ssl.set_connect_state(),
        }
        let ssl = SslStream::new(ssl, Wire::default()).map_err(setup)?;
        Ok(TlsConn {
            ssl,
            established: false,
            closed: false,
        })
    }

    /// A target's side of a connection whose first byte was a TLS handshake record: `lookup`
    /// finds the TLS PSK of the identity the host offers.
    pub fn server(lookup: PskLookup) -> Result<TlsConn, TlsError> {
        TlsConn::new(
            Role::Server,
            PskState {
                lookup: Some(lookup),
                offer: None,
                accepted: None,
                refused: None,
                secrets: TrafficSecrets::default(),
            },
        )
    }

    /// A host's side: offers `identity` with `psk` (its hash picks the one cipher suite
    /// offered, as SPDK's host does).
    pub fn client(psk: TlsPsk, identity: &PskIdentity) -> Result<TlsConn, TlsError> {
        let hash = psk.hash();
        let id = identity.to_string().into_bytes();
        TlsConn::new(
            Role::Client(hash),
            PskState {
                lookup: None,
                offer: Some((psk, id)),
                accepted: None,
                refused: None,
                secrets: TrafficSecrets::default(),
            },
        )
    }

    /// Ciphertext received from the peer; returns how much of it was taken (at most what
    /// fits in [`MAX_CIPHERTEXT_IN`] with what is held).
    pub fn feed(&mut self, ciphertext: &[u8]) -> usize {
        let room = self.ssl.get_mut().room();
        let n = room.len().min(ciphertext.len());
        room[..n].copy_from_slice(&ciphertext[..n]);
        let track = !self.established;
        self.ssl.get_mut().arrived(n, track);
        n
    }

    /// Ciphertext bytes received and not yet through the record layer.
    pub fn buffered_in(&self) -> usize {
        let w = self.ssl.get_ref();
        w.rx_end - w.rx_off
    }

    /// Whether decrypted bytes or unread ciphertext are waiting here (a socket's readiness
    /// does not show them: read again before sleeping on the socket).
    pub fn has_buffered_input(&self) -> bool {
        if self.ssl.ssl().pending() > 0 {
            return true;
        }
        // A whole record among the unread ciphertext (a partial one waits for the socket,
        // which signals when the rest comes). Record header: type, version (2), length (2).
        let w = self.ssl.get_ref();
        let have = &w.rx[w.rx_off..w.rx_end];
        have.len() >= 5 && have.len() >= 5 + usize::from(u16::from_be_bytes([have[3], have[4]]))
    }

    /// Reads what `r` (a non-blocking socket) has, up to [`MAX_CIPHERTEXT_IN`] held; while
    /// the handshake runs, no byte past the end of the next record. Ok(0): nothing now (or
    /// no room); Err(UnexpectedEof): the peer closed the TCP connection.
    pub fn read_from(&mut self, r: &mut impl Read) -> io::Result<usize> {
        let w = self.ssl.get_mut();
        let limit = if self.established {
            usize::MAX
        } else {
            w.records.to_record_end()
        };
        let room = w.room();
        let n = limit.min(room.len());
        let room = &mut room[..n];
        if room.is_empty() {
            return Ok(0);
        }
        let n = loop {
            match r.read(room) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
                Err(e) => return Err(e),
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => break n,
            }
        };
        w.arrived(n, !self.established);
        Ok(n)
    }

    /// Ciphertext waiting to be sent.
    pub fn outgoing(&self) -> &[u8] {
        let w = self.ssl.get_ref();
        &w.tx[w.tx_off..]
    }

    /// `n` bytes of [`TlsConn::outgoing`] were sent.
    pub fn sent(&mut self, n: usize) {
        let w = self.ssl.get_mut();
        w.tx_off = (w.tx_off + n).min(w.tx.len());
        if w.tx_off == w.tx.len() {
            w.tx.clear();
            w.tx_off = 0;
        }
    }

    /// Writes what is waiting to `w` (a non-blocking socket). Ok(true): all of it went.
    pub fn write_to(&mut self, w: &mut impl Write) -> io::Result<bool> {
        while !self.outgoing().is_empty() {
            match w.write(self.outgoing()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.sent(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Takes the handshake as far as what has arrived allows. Ok(true): done (records may
    /// flow); Ok(false): it waits for the peer (send [`TlsConn::outgoing`] first).
    pub fn handshake(&mut self) -> Result<bool, TlsError> {
        if self.established {
            return Ok(true);
        }
        self.ssl.get_mut().records.stepped();
        match self.ssl.do_handshake() {
            Ok(()) => {
                self.established = true;
                Ok(true)
            }
            Err(e) if e.code() == ErrorCode::WANT_READ || e.code() == ErrorCode::WANT_WRITE => {
                Ok(false)
            }
            Err(e) => {
                let mut why = self.refusal().map_or_else(|| e.to_string(), str::to_owned);
                if why.contains("binder does not verify") {
                    why.push_str(
                        " (wrong key: the PSK is not the one configured for this identity)",
                    );
                } else if let Some(hash) = self.binder_of_another_hash(&why) {
                    why.push_str(&format!(
                        " (the host's PSK binder is not {} bytes long, as the identity's hash \
                         makes it: the host computed it with another hash; GnuTLS before \
                         3.8.11, under which Debian 13's tlshd (ktls-utils 1.0.0) runs, makes \
                         every binder with SHA-256 and so cannot use a SHA-384 key)",
                        hash.digest_len()
                    ));
                }
                Err(TlsError::Handshake(why))
            }
        }
    }

    /// Target side: the hash of the identity the target accepted, if OpenSSL then refused the
    /// ClientHello's pre_shared_key extension (`why`, its error): after an accepted identity
    /// that is the binder's length, which is the hash's (RFC 8446 4.2.11), not the
    /// session's. OpenSSL says "bad extension" and no more.
    fn binder_of_another_hash(&self, why: &str) -> Option<PskHash> {
        if !(why.contains("tls_parse_ctos_psk") && why.contains("bad extension")) {
            return None;
        }
        self.accepted_identity().map(PskIdentity::hash)
    }

    /// Why the target's key lookup refused the host's identity (then the handshake failed).
    pub fn refusal(&self) -> Option<&str> {
        self.ssl
            .ssl()
            .ex_data(index().ok()?)
            .and_then(|s| s.refused.as_deref())
    }

    /// The identity the target accepted (target side, after the handshake).
    pub fn accepted_identity(&self) -> Option<&PskIdentity> {
        self.ssl
            .ssl()
            .ex_data(index().ok()?)
            .and_then(|s| s.accepted.as_ref())
    }

    pub fn is_established(&self) -> bool {
        self.established
    }

    /// The negotiated cipher suite's name.
    pub fn cipher(&self) -> Option<&'static str> {
        self.ssl.ssl().current_cipher().map(|c| c.name())
    }

    /// The application traffic secrets (client's, server's), taken out of the connection,
    /// and whether this is the server's side; Err if records may no longer be handed to
    /// another record layer: the handshake is not done, or OpenSSL holds ciphertext to send
    /// or received bytes (a record past the handshake, whose sequence number would be
    /// lost). Taken even then, so no copy of the secrets outlives this call unused.
    pub(crate) fn take_traffic_secrets(&mut self) -> Result<(TrafficSecrets, bool), String> {
        let server = self.ssl.ssl().is_server();
        // SAFETY: this connection's SSL, whose state nothing else borrows (`&mut self`).
        let secrets = unsafe { state(self.ssl.ssl().as_ptr()) }
            .map(|st| std::mem::take(&mut st.secrets))
            .ok_or("the connection has no TLS state")?;
        // SAFETY: the live SSL of this connection.
        let held = unsafe { SSL_has_pending(self.ssl.ssl().as_ptr()) } != 0;
        if !self.established {
            return Err("the TLS handshake is not done".into());
        }
        if held || self.buffered_in() > 0 || !self.outgoing().is_empty() {
            return Err(format!(
                "records past the handshake are held in user space ({} bytes received, {} to \
                 send)",
                self.buffered_in(),
                self.outgoing().len()
            ));
        }
        Ok((secrets, server))
    }

    /// Decrypts into `buf`. Ok(0): nothing decryptable yet (feed more ciphertext);
    /// Err(Closed): the peer's close_notify.
    pub fn read_plain(&mut self, buf: &mut [u8]) -> Result<usize, TlsError> {
        if buf.is_empty() || self.closed {
            return Ok(0);
        }
        match self.ssl.ssl_read(buf) {
            Ok(n) => Ok(n),
            Err(e) if e.code() == ErrorCode::WANT_READ || e.code() == ErrorCode::WANT_WRITE => {
                Ok(0)
            }
            Err(e) if e.code() == ErrorCode::ZERO_RETURN => {
                self.closed = true;
                Err(TlsError::Closed)
            }
            Err(e) => Err(TlsError::Record(e.to_string())),
        }
    }

    /// Encrypts all of `buf` into [`TlsConn::outgoing`] (records of up to 16 KiB).
    pub fn write_plain(&mut self, buf: &[u8]) -> Result<(), TlsError> {
        let mut done = 0;
        while done < buf.len() {
            match self.ssl.ssl_write(&buf[done..]) {
                Ok(n) => done += n,
                Err(e) => return Err(TlsError::Record(e.to_string())),
            }
        }
        Ok(())
    }

    /// Queues a KeyUpdate (send [`TlsConn::outgoing`] after): what a peer that rekeys sends.
    #[cfg(test)]
    pub(crate) fn key_update(&mut self) {
        // SAFETY: the live SSL of this connection; 0 is SSL_KEY_UPDATE_NOT_REQUESTED.
        unsafe { SSL_key_update(self.ssl.ssl().as_ptr(), 0) };
        let _ = self.ssl.do_handshake();
    }

    /// Queues a close_notify alert (send [`TlsConn::outgoing`] after).
    pub fn close(&mut self) {
        let _ = self.ssl.shutdown();
    }
}

/// The TLS PSK a target uses for identity `id`, whose host is configured with `key`: the
/// identity must be the one the host's retained PSK makes for its NQNs (of the key's hash;
/// version 1's digest is checked), so that a host holding another key, or naming another
/// host, is refused before a byte of the handshake's secrets is used.
pub fn target_psk(key: &ConfiguredPsk, id: &PskIdentity) -> Result<TlsPsk, String> {
    if id.hash() != key.hash() {
        return Err(format!(
            "the host offers a {} identity (NVMe.R{:02}) but its configured key is for {}",
            id.hash().cipher_suite(),
            id.hash().id(),
            key.hash().cipher_suite()
        ));
    }
    let retained = key.retained(id.host_nqn()).map_err(|e| e.to_string())?;
    let expected = retained
        .identity(id.version(), id.host_nqn(), id.subsys_nqn())
        .map_err(|e| e.to_string())?;
    if expected != *id {
        return Err("the identity's PSK digest is not the configured key's (wrong key)".into());
    }
    retained.tls_psk(id).map_err(|e| e.to_string())
}

/// What a host offers for (`host_nqn`, `subsys_nqn`) with `key`: the TLS PSK and the identity
/// of `version`.
pub fn host_offer(
    key: &ConfiguredPsk,
    version: IdentityVersion,
    host_nqn: &str,
    subsys_nqn: &str,
) -> Result<(TlsPsk, PskIdentity), String> {
    let retained = key.retained(host_nqn).map_err(|e| e.to_string())?;
    let id = retained
        .identity(version, host_nqn, subsys_nqn)
        .map_err(|e| e.to_string())?;
    let psk = retained.tls_psk(&id).map_err(|e| e.to_string())?;
    Ok((psk, id))
}

/// Whether `first` (a connection's first byte) opens a TLS handshake record (content type
/// 22), as a ClientHello does; a plain NVMe/TCP connection starts with an ICReq (PDU type 0).
pub fn is_tls_record(first: u8) -> bool {
    first == 0x16
}

#[cfg(test)]
pub(crate) mod tests;
