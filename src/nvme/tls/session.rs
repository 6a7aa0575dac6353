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
//! Both sides: TLS 1.3 only (a TLS 1.2 ClientHello gets a protocol_version alert),
//! TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384 only, no session tickets, no
//! certificates (a client that offers no PSK gets a handshake failure). A target accepts
//! PSK with (EC)DHE and PSK alone, whichever the host offers; rdmablk's host, like OpenSSL's
//! and SPDK's, offers PSK with (EC)DHE.

use std::ffi::{c_int, c_uchar};
use std::io::{self, Read, Write};
use std::sync::{Arc, OnceLock};

use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{
    ErrorCode, Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslStream, SslVersion,
};
use openssl_sys as ffi;

use super::{ConfiguredPsk, IdentityVersion, PskHash, PskIdentity, TlsPsk};

/// Ciphertext bytes a connection holds unread at most: what [`TlsConn::read_from`] takes
/// from the socket before the record layer has consumed it (one TLS record is at most 16 KiB
/// plus 256 bytes; this is a few).
pub const MAX_CIPHERTEXT_IN: usize = 64 * 1024;

/// OpenSSL's SSL_OP_ALLOW_NO_DHE_KEX (ssl.h, 1.1.1 and 3.x): a TLS 1.3 server accepts
/// psk_ke (PSK without (EC)DHE) when that is all the client offers.
const SSL_OP_ALLOW_NO_DHE_KEX: u64 = 1 << 10;

// OpenSSL 1.1.1+ functions the `openssl` crates do not wrap (libssl is linked by openssl-sys).
type FindSession = unsafe extern "C" fn(
    ssl: *mut ffi::SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut ffi::SSL_SESSION,
) -> c_int;
type UseSession = unsafe extern "C" fn(
    ssl: *mut ffi::SSL,
    md: *const ffi::EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut ffi::SSL_SESSION,
) -> c_int;
extern "C" {
    fn SSL_CTX_set_psk_find_session_callback(ctx: *mut ffi::SSL_CTX, cb: Option<FindSession>);
    fn SSL_CTX_set_psk_use_session_callback(ctx: *mut ffi::SSL_CTX, cb: Option<UseSession>);
    fn SSL_SESSION_new() -> *mut ffi::SSL_SESSION;
    fn SSL_SESSION_set1_master_key(
        s: *mut ffi::SSL_SESSION,
        key: *const c_uchar,
        len: usize,
    ) -> c_int;
    fn SSL_CIPHER_find(ssl: *mut ffi::SSL, ptr: *const c_uchar) -> *const ffi::SSL_CIPHER;
    fn SSL_SESSION_set_cipher(s: *mut ffi::SSL_SESSION, cipher: *const ffi::SSL_CIPHER) -> c_int;
    fn SSL_SESSION_set_protocol_version(s: *mut ffi::SSL_SESSION, version: c_int) -> c_int;
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

/// A new `SSL_SESSION` carrying `psk` as a TLS 1.3 external PSK of its hash's cipher suite.
///
/// # Safety
/// `ssl` is a live `SSL`.
unsafe fn psk_session(ssl: *mut ffi::SSL, psk: &TlsPsk) -> *mut ffi::SSL_SESSION {
    // RFC 8446 B.4: TLS_AES_128_GCM_SHA256 {0x13,0x01}, TLS_AES_256_GCM_SHA384 {0x13,0x02}.
    let id: [u8; 2] = match psk.hash() {
        PskHash::Sha256 => [0x13, 0x01],
        PskHash::Sha384 => [0x13, 0x02],
    };
    // SAFETY: `ssl` is live (contract); `id` is the two bytes SSL_CIPHER_find reads.
    let cipher = unsafe { SSL_CIPHER_find(ssl, id.as_ptr()) };
    if cipher.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: plain constructor; freed below on failure, else owned by OpenSSL's handshake.
    let sess = unsafe { SSL_SESSION_new() };
    if sess.is_null() {
        return sess;
    }
    let key = psk.as_bytes();
    // SAFETY: `sess` is the new session; the key is copied by set1.
    let ok = unsafe {
        SSL_SESSION_set_cipher(sess, cipher) == 1
            && SSL_SESSION_set_protocol_version(sess, ffi::TLS1_3_VERSION) == 1
            && SSL_SESSION_set1_master_key(sess, key.as_ptr(), key.len()) == 1
    };
    if !ok {
        // SAFETY: ours, not handed out.
        unsafe { ffi::SSL_SESSION_free(sess) };
        return std::ptr::null_mut();
    }
    sess
}

/// Target side: OpenSSL asks for the session of the identity the host offered. A panic in
/// the lookup (a bug: it parses the peer's bytes) must not unwind into OpenSSL, nor abort the
/// target: it refuses this host.
unsafe extern "C" fn find_session(
    ssl: *mut ffi::SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut ffi::SSL_SESSION,
) -> c_int {
    std::panic::catch_unwind(|| {
        // SAFETY: the arguments OpenSSL gave this callback, passed on unchanged.
        unsafe { find_session_inner(ssl, identity, identity_len, sess) }
    })
    .unwrap_or(0)
}

/// [`find_session`]'s work.
///
/// # Safety
/// The arguments of an OpenSSL PSK find-session callback.
unsafe fn find_session_inner(
    ssl: *mut ffi::SSL,
    identity: *const c_uchar,
    identity_len: usize,
    sess: *mut *mut ffi::SSL_SESSION,
) -> c_int {
    // SAFETY: OpenSSL passes a valid out pointer.
    unsafe { *sess = std::ptr::null_mut() };
    // SAFETY: a connection this module made (the callback is set on its contexts only).
    let Some(st) = (unsafe { state(ssl) }) else {
        return 0;
    };
    let Some(lookup) = st.lookup.clone() else {
        return 0;
    };
    let bytes: &[u8] = if identity.is_null() || identity_len == 0 {
        &[]
    } else {
        // SAFETY: OpenSSL gives `identity_len` bytes at `identity` for this call.
        unsafe { std::slice::from_raw_parts(identity, identity_len) }
    };
    let shown = || String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned();
    let found = std::str::from_utf8(bytes)
        .map_err(|_| format!("TLS PSK identity {:?} is not UTF-8", shown()))
        .and_then(|s| PskIdentity::parse(s).map_err(|e| format!("{e} (identity {:?})", shown())))
        .and_then(|id| lookup(&id).map(|psk| (id, psk)));
    let (id, psk) = match found {
        Ok(x) => x,
        Err(why) => {
            st.refused = Some(why);
            // 0 aborts the handshake (the host gets an alert), where 1 with no session
            // would go on to ask for a certificate the target does not have.
            return 0;
        }
    };
    // SAFETY: `ssl` is live for this callback.
    let s = unsafe { psk_session(ssl, &psk) };
    if s.is_null() {
        st.refused = Some("OpenSSL could not make a PSK session".into());
        return 0;
    }
    st.accepted = Some(id);
    // SAFETY: OpenSSL takes ownership of the session it is given.
    unsafe { *sess = s };
    1
}

/// Host side: OpenSSL asks for the session (and identity) to offer.
unsafe extern "C" fn use_session(
    ssl: *mut ffi::SSL,
    md: *const ffi::EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut ffi::SSL_SESSION,
) -> c_int {
    std::panic::catch_unwind(|| {
        // SAFETY: the arguments OpenSSL gave this callback, passed on unchanged.
        unsafe { use_session_inner(ssl, md, id, idlen, sess) }
    })
    .unwrap_or(0)
}

/// [`use_session`]'s work.
///
/// # Safety
/// The arguments of an OpenSSL PSK use-session callback.
unsafe fn use_session_inner(
    ssl: *mut ffi::SSL,
    _md: *const ffi::EVP_MD,
    id: *mut *const c_uchar,
    idlen: *mut usize,
    sess: *mut *mut ffi::SSL_SESSION,
) -> c_int {
    // SAFETY: OpenSSL passes valid out pointers.
    unsafe {
        *sess = std::ptr::null_mut();
        *id = std::ptr::null();
        *idlen = 0;
    }
    // SAFETY: a connection this module made.
    let Some(st) = (unsafe { state(ssl) }) else {
        return 0;
    };
    let Some((psk, identity)) = st.offer.as_ref() else {
        return 0;
    };
    // SAFETY: `ssl` is live for this callback.
    let s = unsafe { psk_session(ssl, psk) };
    if s.is_null() {
        return 0;
    }
    // SAFETY: the identity bytes live in the SSL's ex data, as long as the SSL.
    unsafe {
        *sess = s;
        *id = identity.as_ptr();
        *idlen = identity.len();
    }
    1
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

/// The ciphertext buffers OpenSSL's record layer reads from and writes to. The receive side
/// is allocated once ([`MAX_CIPHERTEXT_IN`]), and `rx[rx_off..rx_end]` is what is unread.
struct Wire {
    rx: Box<[u8]>,
    rx_off: usize,
    rx_end: usize,
    tx: Vec<u8>,
    tx_off: usize,
}

impl Default for Wire {
    fn default() -> Wire {
        Wire {
            rx: vec![0u8; MAX_CIPHERTEXT_IN].into_boxed_slice(),
            rx_off: 0,
            rx_end: 0,
            tx: Vec::new(),
            tx_off: 0,
        }
    }
}

impl Wire {
    /// Moves the unread bytes to the buffer's start; the free tail after them.
    fn room(&mut self) -> &mut [u8] {
        if self.rx_off > 0 {
            self.rx.copy_within(self.rx_off..self.rx_end, 0);
            self.rx_end -= self.rx_off;
            self.rx_off = 0;
        }
        &mut self.rx[self.rx_end..]
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
            },
        )
    }

    /// Ciphertext received from the peer; returns how much of it was taken (at most what
    /// fits in [`MAX_CIPHERTEXT_IN`] with what is held).
    pub fn feed(&mut self, ciphertext: &[u8]) -> usize {
        let room = self.ssl.get_mut().room();
        let n = room.len().min(ciphertext.len());
        room[..n].copy_from_slice(&ciphertext[..n]);
        self.ssl.get_mut().rx_end += n;
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

    /// Reads what `r` (a non-blocking socket) has, up to [`MAX_CIPHERTEXT_IN`] held. Ok(0):
    /// nothing now (or no room); Err(UnexpectedEof): the peer closed the TCP connection.
    pub fn read_from(&mut self, r: &mut impl Read) -> io::Result<usize> {
        let w = self.ssl.get_mut();
        let room = w.room();
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
        w.rx_end += n;
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
mod tests;
