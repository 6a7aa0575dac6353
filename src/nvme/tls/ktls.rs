//! The kernel's TLS record layer (kTLS, Linux's `Documentation/networking/tls.rst`) under an
//! NVMe/TCP connection whose handshake OpenSSL did ([`super::session`]): after it, the socket
//! carries plaintext through the ordinary path (`recv`, `sendmsg`, io_uring) exactly as a
//! clear-text connection, and the kernel encrypts and decrypts, where the kernel has kTLS;
//! OpenSSL's record layer in user space where it does not.
//!
//! The hand-off ([`hand_off`]), as tlshd (ktls-utils) does it after a GnuTLS handshake:
//! `setsockopt(TCP_ULP, "tls")`, then `SOL_TLS`/`TLS_TX` and `TLS_RX` with a
//! `tls12_crypto_info_aes_gcm_128` or `_256` (version TLS 1.3, salt the first 4 bytes of the
//! 12-byte IV, iv the other 8, rec_seq the next record's sequence number). The keys come from
//! the application traffic secrets OpenSSL's keylog callback reports
//! (`CLIENT_TRAFFIC_SECRET_0`, `SERVER_TRAFFIC_SECRET_0`): key = HKDF-Expand-Label(secret,
//! "key", "", 16 or 32), iv = HKDF-Expand-Label(secret, "iv", "", 12) (RFC 8446 7.3). Both
//! sequence numbers are 0: OpenSSL encrypted and decrypted no application record (rdmablk's
//! target sends no session tickets, another server's come after the hand-off, the handshake
//! read no byte past its last record, and [`super::session::TlsConn`] refuses the hand-off if
//! it holds any byte either way).
//!
//! A record that is not application data makes a `recv` without a control-message buffer
//! fail with EIO and stays queued; [`receive_error`] reads it whole with one: a server's
//! NewSessionTickets are passed over (the host reads on), anything else (an alert, a
//! KeyUpdate) is named and ends the connection (rdmablk does not rekey).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use zeroize::{Zeroize, Zeroizing};

use super::session::TlsConn;
use super::{expand_label_from_secret, PskHash, PskIdentity};

// linux/tls.h, linux/tcp.h (stable UAPI since 4.13 / 5.1 for TLS 1.3).
const SOL_TCP: libc::c_int = libc::IPPROTO_TCP;
const TCP_ULP: libc::c_int = 31;
const SOL_TLS: libc::c_int = 282;
const TLS_TX: libc::c_int = 1;
const TLS_RX: libc::c_int = 2;
const TLS_1_3_VERSION: u16 = 0x0304;
const TLS_CIPHER_AES_GCM_128: u16 = 51;
const TLS_CIPHER_AES_GCM_256: u16 = 52;
const TLS_GET_RECORD_TYPE: libc::c_int = 2;
/// RFC 8446 5.1 content types.
const ALERT: u8 = 21;
const HANDSHAKE: u8 = 22;

/// Which record layer carries a TLS connection's records after its handshake (the target's
/// `target.tls_record_layer`, the initiator's `tls_record_layer` option).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RecordLayer {
    /// The kernel's where it has kTLS, else OpenSSL's in user space.
    #[default]
    Auto,
    /// The kernel's only: a connection whose keys the kernel does not take is closed.
    Kernel,
    /// OpenSSL's in user space (for tests and comparisons).
    User,
}

impl RecordLayer {
    pub fn parse(s: &str) -> Option<RecordLayer> {
        match s {
            "auto" => Some(RecordLayer::Auto),
            "kernel" => Some(RecordLayer::Kernel),
            "user" => Some(RecordLayer::User),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RecordLayer::Auto => "auto",
            RecordLayer::Kernel => "kernel",
            RecordLayer::User => "user",
        }
    }
}

/// A connection's application traffic secrets, from OpenSSL's keylog callback.
#[derive(Default)]
pub(crate) struct TrafficSecrets {
    client: Option<Zeroizing<Vec<u8>>>,
    server: Option<Zeroizing<Vec<u8>>>,
}

impl std::fmt::Debug for TrafficSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrafficSecrets")
            .field("client", &self.client.is_some())
            .field("server", &self.server.is_some())
            .finish()
    }
}

impl TrafficSecrets {
    /// One keylog line (`LABEL <client random> <secret>`, hex): the two first application
    /// traffic secrets are kept, the handshake's and the exporter's ignored.
    pub(crate) fn note(&mut self, line: &str) {
        let mut f = line.split(' ');
        let (Some(label), Some(_random), Some(hex)) = (f.next(), f.next(), f.next()) else {
            return;
        };
        let slot = match label {
            "CLIENT_TRAFFIC_SECRET_0" => &mut self.client,
            "SERVER_TRAFFIC_SECRET_0" => &mut self.server,
            _ => return,
        };
        *slot = decode_hex(hex);
    }
}

fn decode_hex(s: &str) -> Option<Zeroizing<Vec<u8>>> {
    if s.len() % 2 != 0 {
        return None;
    }
    let mut out = Zeroizing::new(Vec::with_capacity(s.len() / 2));
    for pair in s.as_bytes().chunks(2) {
        let digits = std::str::from_utf8(pair).ok()?;
        out.push(u8::from_str_radix(digits, 16).ok()?);
    }
    Some(out)
}

/// A direction's AES-GCM key and 12-byte IV (RFC 8446 7.3).
pub(crate) struct TrafficKey {
    pub key: Zeroizing<Vec<u8>>,
    pub iv: Zeroizing<[u8; 12]>,
}

/// The key and IV of the traffic `secret` under the cipher suite of `hash`
/// (TLS_AES_128_GCM_SHA256: a 16-byte key; TLS_AES_256_GCM_SHA384: 32).
pub(crate) fn traffic_key(hash: PskHash, secret: &[u8]) -> Result<TrafficKey, String> {
    if secret.len() != hash.digest_len() {
        return Err(format!(
            "a {}-byte traffic secret for {}",
            secret.len(),
            hash.cipher_suite()
        ));
    }
    let mut key = Zeroizing::new(vec![0u8; key_len(hash)]);
    let mut iv = Zeroizing::new([0u8; 12]);
    expand_label_from_secret(hash, secret, "key", &[], &mut key);
    expand_label_from_secret(hash, secret, "iv", &[], &mut iv[..]);
    Ok(TrafficKey { key, iv })
}

fn key_len(hash: PskHash) -> usize {
    match hash {
        PskHash::Sha256 => 16,
        PskHash::Sha384 => 32,
    }
}

/// The hash of the cipher suite OpenSSL names `name`: one of the two NVMe/TCP allows.
fn suite_hash(name: &str) -> Option<PskHash> {
    [PskHash::Sha256, PskHash::Sha384]
        .into_iter()
        .find(|h| h.cipher_suite() == name)
}

/// `struct tls12_crypto_info_aes_gcm_128` (K = 16) and `_256` (K = 32).
#[repr(C)]
struct CryptoInfo<const K: usize> {
    version: u16,
    cipher_type: u16,
    iv: [u8; 8],
    key: [u8; K],
    salt: [u8; 4],
    rec_seq: [u8; 8],
}

impl<const K: usize> Drop for CryptoInfo<K> {
    fn drop(&mut self) {
        self.iv.zeroize();
        self.key.zeroize();
        self.salt.zeroize();
    }
}

/// Sets `opt` (TLS_TX or TLS_RX) to `k`, the next record's sequence number 0.
fn set_key<const K: usize>(
    fd: RawFd,
    opt: libc::c_int,
    cipher: u16,
    k: &TrafficKey,
) -> io::Result<()> {
    let mut info = CryptoInfo::<K> {
        version: TLS_1_3_VERSION,
        cipher_type: cipher,
        iv: [0; 8],
        key: [0; K],
        salt: [0; 4],
        rec_seq: [0; 8],
    };
    info.salt.copy_from_slice(&k.iv[..4]);
    info.iv.copy_from_slice(&k.iv[4..]);
    info.key.copy_from_slice(&k.key);
    // SAFETY: `info` is the kernel's struct for `cipher`, with its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            SOL_TLS,
            opt,
            (&info as *const CryptoInfo<K>).cast(),
            std::mem::size_of::<CryptoInfo<K>>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_ulp(fd: RawFd) -> io::Result<()> {
    const NAME: &[u8] = b"tls\0";
    // SAFETY: the option's value is NAME's bytes.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            SOL_TCP,
            TCP_ULP,
            NAME.as_ptr().cast(),
            NAME.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Why the keys did not go to the kernel.
enum Refused {
    /// Nothing was installed: the socket is as it was, OpenSSL may carry the records.
    Untouched(String),
    /// The transmit key was installed, the receive key not: the connection cannot go on.
    Half(String),
}

/// Installs the keys of both directions on `fd` (TLS_TX first, as tlshd).
fn install(fd: RawFd, hash: PskHash, tx: &TrafficKey, rx: &TrafficKey) -> Result<(), Refused> {
    set_ulp(fd).map_err(|e| {
        Refused::Untouched(format!(
            "this kernel has no kTLS (setsockopt TCP_ULP \"tls\": {e}; `modprobe tls`)"
        ))
    })?;
    // With the ULP and no key, the socket is still a plain TCP socket.
    let set = |opt, k| match hash {
        PskHash::Sha256 => set_key::<16>(fd, opt, TLS_CIPHER_AES_GCM_128, k),
        PskHash::Sha384 => set_key::<32>(fd, opt, TLS_CIPHER_AES_GCM_256, k),
    };
    set(TLS_TX, tx).map_err(|e| {
        Refused::Untouched(format!(
            "the kernel refused the {} transmit key (setsockopt SOL_TLS TLS_TX: {e})",
            hash.cipher_suite()
        ))
    })?;
    set(TLS_RX, rx).map_err(|e| {
        Refused::Half(format!(
            "the kernel took the {} transmit key but refused the receive key (setsockopt \
             SOL_TLS TLS_RX: {e}); the connection cannot go on",
            hash.cipher_suite()
        ))
    })?;
    expect_no_padding(fd);
    Ok(())
}

/// TLS_RX_EXPECT_NO_PAD (Linux 6.0+): records are decrypted straight into the reader's
/// buffer, as the peer pads none (neither OpenSSL nor kTLS pads); a padded one is decrypted
/// again, so a peer that pads costs only time. Best effort: older kernels lack it.
fn expect_no_padding(fd: RawFd) {
    const TLS_RX_EXPECT_NO_PAD: libc::c_int = 4;
    let on: u32 = 1;
    // SAFETY: the option's value is a u32.
    unsafe {
        libc::setsockopt(
            fd,
            SOL_TLS,
            TLS_RX_EXPECT_NO_PAD,
            (&on as *const u32).cast(),
            std::mem::size_of::<u32>() as libc::socklen_t,
        )
    };
}

/// A TLS connection after its handshake.
pub struct Established {
    cipher: &'static str,
    identity: Option<PskIdentity>,
    /// OpenSSL's record layer in user space; None: the kernel's carries the records.
    user: Option<Box<TlsConn>>,
    /// Why OpenSSL's record layer (when it is).
    why_user: Option<String>,
}

impl std::fmt::Debug for Established {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Established")
            .field("cipher", &self.cipher)
            .field("record_layer", &self.record_layer())
            .finish()
    }
}

impl Established {
    /// The negotiated cipher suite's name.
    pub fn cipher(&self) -> &'static str {
        self.cipher
    }

    /// The identity the target accepted (target side).
    pub fn identity(&self) -> Option<&PskIdentity> {
        self.identity.as_ref()
    }

    /// "kernel" (kTLS) or "user" (OpenSSL in user space).
    pub fn record_layer(&self) -> &'static str {
        if self.user.is_some() {
            "user"
        } else {
            "kernel"
        }
    }

    /// Why OpenSSL's record layer carries the records (None: the kernel's does).
    pub fn why_user(&self) -> Option<&str> {
        self.why_user.as_deref()
    }

    /// OpenSSL's record layer, when it carries the records.
    pub fn user(&self) -> Option<&TlsConn> {
        self.user.as_deref()
    }

    pub fn user_mut(&mut self) -> Option<&mut TlsConn> {
        self.user.as_deref_mut()
    }

    /// OpenSSL's record layer, when it carries the records.
    pub fn into_user(self) -> Option<Box<TlsConn>> {
        self.user
    }
}

/// Hands the records of `conn` (its handshake done, every byte of it sent) to the record
/// layer `want` asks for, on `sock`: the kernel's, or OpenSSL's where the kernel's cannot
/// take them and `want` allows (each outcome logged once per process). Err: the connection
/// must be closed (`want` is [`RecordLayer::Kernel`] and the kernel did not take the keys,
/// or it took one direction's only).
pub fn hand_off(
    mut conn: Box<TlsConn>,
    sock: &impl AsRawFd,
    want: RecordLayer,
) -> Result<Established, String> {
    let cipher = conn.cipher().unwrap_or("?");
    let identity = conn.accepted_identity().cloned();
    let taken = conn.take_traffic_secrets();
    let user = |conn: Box<TlsConn>, why: String| {
        if want == RecordLayer::Kernel {
            return Err(format!(
                "the kernel's TLS record layer is required (tls_record_layer = \"kernel\"), \
                 but {why}"
            ));
        }
        note(false, &why);
        Ok(Established {
            cipher,
            identity: identity.clone(),
            user: Some(conn),
            why_user: Some(why),
        })
    };
    if want == RecordLayer::User {
        return user(conn, "tls_record_layer = \"user\"".into());
    }
    let keys = taken.and_then(|(secrets, server)| {
        let hash =
            suite_hash(cipher).ok_or_else(|| format!("no kTLS for cipher suite {cipher}"))?;
        let (Some(c), Some(s)) = (&secrets.client, &secrets.server) else {
            return Err("OpenSSL reported no application traffic secrets".to_string());
        };
        let (tx, rx) = if server { (s, c) } else { (c, s) };
        Ok((hash, traffic_key(hash, tx)?, traffic_key(hash, rx)?))
    });
    let (hash, tx, rx) = match keys {
        Ok(k) => k,
        Err(why) => return user(conn, why),
    };
    match install(sock.as_raw_fd(), hash, &tx, &rx) {
        Ok(()) => {
            note(true, "");
            Ok(Established {
                cipher,
                identity,
                user: None,
                why_user: None,
            })
        }
        Err(Refused::Untouched(why)) => user(conn, why),
        Err(Refused::Half(why)) => Err(why),
    }
}

/// Logs once per process which record layer TLS connections use (each, the first time).
fn note(kernel: bool, why: &str) {
    static SAID: [AtomicBool; 2] = [AtomicBool::new(false), AtomicBool::new(false)];
    if SAID[usize::from(kernel)].swap(true, Ordering::Relaxed) {
        return;
    }
    if kernel {
        tracing::info!("NVMe/TCP TLS: records go through the kernel's TLS record layer (kTLS)");
    } else {
        tracing::info!(
            why,
            "NVMe/TCP TLS: records go through OpenSSL's record layer in user space"
        );
    }
}

/// What a failed read from a socket whose receive side is the kernel's TLS was.
#[derive(Debug, PartialEq, Eq)]
pub enum ReceiveError {
    /// A record of NewSessionTickets, read and passed over (a TLS 1.3 server may send them at
    /// any time after the handshake; OpenSSL's servers send two unless told not to): read on.
    /// Only a server sends them: the target takes one from a host as the end.
    Ticket,
    /// The connection ends, for this reason (for the log).
    Ends(String),
}

/// What a failed read from a socket whose receive side is the kernel's TLS means; None for an
/// error that is not kTLS's own. EIO: a record that is not application data, read here whole
/// with a control-message buffer (so the next read starts at the next record): tickets are
/// passed over, anything else (an alert, a KeyUpdate) is named.
pub fn receive_error(sock: &impl AsRawFd, e: &io::Error) -> Option<ReceiveError> {
    let why = match e.raw_os_error()? {
        libc::EIO => return Some(control_record(sock.as_raw_fd())),
        libc::EBADMSG => "a TLS record failed to decrypt (EBADMSG: corrupted, or sealed with \
                          other keys)"
            .into(),
        libc::EMSGSIZE => "a TLS record longer than TLS allows (EMSGSIZE)".into(),
        libc::EINVAL => "a TLS record of another version (EINVAL)".into(),
        libc::EKEYEXPIRED => "the peer updated its keys (KeyUpdate), which rdmablk does not \
                              follow (EKEYEXPIRED)"
            .into(),
        _ => return None,
    };
    Some(ReceiveError::Ends(why))
}

/// The largest plaintext a TLS record carries (RFC 8446 5.1); the kernel refuses longer.
const MAX_RECORD: usize = 1 << 14;

/// Reads the whole record a `recv` without a control-message buffer refused (the kernel
/// hands a control record out in pieces as the buffer allows, the last with MSG_EOR) and
/// says what to do with it.
fn control_record(fd: RawFd) -> ReceiveError {
    // The rare path (once per ticket or per connection's end): an allocation is fine here.
    let mut buf = vec![0u8; MAX_RECORD];
    let mut len = 0;
    let mut kind = 0; // no record type is 0
    loop {
        let mut cbuf = [0u64; 4]; // room for CMSG_SPACE(1) (24 bytes), aligned
        let mut iov = libc::iovec {
            iov_base: buf[len..].as_mut_ptr().cast(),
            iov_len: buf.len() - len,
        };
        // SAFETY: a zeroed msghdr is valid; it names our buffers, which outlive the call.
        let (n, flags, k) = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cbuf.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
            let n = libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT);
            let c = libc::CMSG_FIRSTHDR(&msg);
            let k = (n >= 0
                && !c.is_null()
                && (*c).cmsg_level == SOL_TLS
                && (*c).cmsg_type == TLS_GET_RECORD_TYPE)
                .then(|| *libc::CMSG_DATA(c));
            (n, msg.msg_flags, k)
        };
        if n < 0 {
            return ReceiveError::Ends(format!(
                "a TLS record that is not application data (its type unread: {})",
                io::Error::last_os_error()
            ));
        }
        let Some(k) = k else {
            return ReceiveError::Ends(
                "a TLS record that is not application data (no record type)".into(),
            );
        };
        if kind == 0 {
            kind = k;
        } else if kind != k {
            return ReceiveError::Ends("a TLS record whose type changed midway".into());
        }
        len += n as usize;
        if flags & libc::MSG_EOR != 0 || n == 0 || len == buf.len() {
            break;
        }
    }
    let body = &buf[..len];
    if kind == HANDSHAKE && only_tickets(body) {
        ReceiveError::Ticket
    } else {
        ReceiveError::Ends(describe(kind, body))
    }
}

/// Whether a handshake record's `body` is whole NewSessionTicket messages (type 4, each with
/// its 24-bit length, RFC 8446 4), at least one.
fn only_tickets(mut body: &[u8]) -> bool {
    if body.is_empty() {
        return false;
    }
    while let [4, a, b, c, rest @ ..] = body {
        let len = usize::from(*a) << 16 | usize::from(*b) << 8 | usize::from(*c);
        let Some(next) = rest.get(len..) else {
            return false; // split across records: not followed, the connection ends
        };
        body = next;
    }
    body.is_empty()
}

/// Names a record of content type `kind` whose first bytes are `body`.
fn describe(kind: u8, body: &[u8]) -> String {
    match (kind, body) {
        (ALERT, [_, 0, ..]) => "the peer closed the TLS connection (close_notify)".into(),
        (ALERT, [level, desc, ..]) => format!(
            "the peer sent a TLS alert: {} ({})",
            alert_name(*desc),
            if *level == 2 { "fatal" } else { "warning" }
        ),
        (HANDSHAKE, [24, ..]) => "the peer sent a KeyUpdate; rdmablk does not rekey a kTLS \
                                  connection, so it ends"
            .into(),
        (HANDSHAKE, [4, ..]) => "the peer sent a NewSessionTicket that is not whole in its \
                                 record, or another handshake message after one"
            .into(),
        (HANDSHAKE, [t, ..]) => {
            format!("the peer sent a TLS handshake message (type {t}) after the handshake")
        }
        _ => format!("the peer sent a TLS record of content type {kind}, not application data"),
    }
}

fn alert_name(desc: u8) -> String {
    match desc {
        10 => "unexpected_message".into(),
        20 => "bad_record_mac".into(),
        22 => "record_overflow".into(),
        40 => "handshake_failure".into(),
        47 => "illegal_parameter".into(),
        50 => "decode_error".into(),
        51 => "decrypt_error".into(),
        80 => "internal_error".into(),
        90 => "user_canceled".into(),
        d => format!("alert {d}"),
    }
}

/// Whether this kernel takes the TLS ULP on a TCP socket (a loopback connection is made to
/// ask): what [`RecordLayer::Auto`] will use. For tests and diagnostics.
pub fn kernel_has_ktls() -> bool {
    let Ok(l) = std::net::TcpListener::bind("127.0.0.1:0") else {
        return false;
    };
    let Ok(addr) = l.local_addr() else {
        return false;
    };
    let Ok(c) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    set_ulp(c.as_raw_fd()).is_ok()
}

#[cfg(test)]
mod tests;
