//! The PSK callbacks OpenSSL calls inside a handshake, as SPDK's posix sock module sets them:
//! a target finds the session of the identity a host offers, a host gives the session and
//! identity it offers; each session holds the TLS PSK as its master key, TLS 1.3 and the
//! cipher suite of the key's hash.

use std::ffi::{c_int, c_uchar};

use openssl_sys as ffi;

use super::super::{PskHash, PskIdentity, TlsPsk};
use super::state;

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
    pub(super) fn SSL_CTX_set_psk_find_session_callback(
        ctx: *mut ffi::SSL_CTX,
        cb: Option<FindSession>,
    );
    pub(super) fn SSL_CTX_set_psk_use_session_callback(
        ctx: *mut ffi::SSL_CTX,
        cb: Option<UseSession>,
    );
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
pub(super) unsafe extern "C" fn find_session(
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
pub(super) unsafe extern "C" fn use_session(
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
