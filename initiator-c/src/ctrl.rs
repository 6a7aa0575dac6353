//! Connecting, namespaces and the synchronous block-device calls.

use std::ffi::{c_char, c_int, c_void, CStr};

use rdmablk_initiator::{ConnectOptions, Controller, Namespace};

use crate::buf::rdmablk_buf;
use crate::error::{fail, guard, invalid};

/// Connect options (opaque): made by [`rdmablk_opts_new`], set by name with
/// [`rdmablk_opts_set`], freed by [`rdmablk_opts_free`].
pub struct rdmablk_opts {
    pub(crate) opts: ConnectOptions,
}

/// A connected controller (opaque). Thread-safe: any thread may use it, concurrently.
pub struct rdmablk_ctrl {
    pub(crate) ctrl: Controller,
}

/// One namespace of a controller (opaque), for the synchronous calls. Thread-safe: any
/// thread may use it, concurrently (each call borrows one I/O queue of the controller).
pub struct rdmablk_ns {
    ns: Namespace,
}

/// What a namespace is.
#[repr(C)]
pub struct rdmablk_ns_info {
    pub nsid: u32,
    /// Logical block size: offsets and lengths are multiples of it.
    pub block_size: u32,
    pub capacity_bytes: u64,
    /// Largest I/O one asynchronous request may carry (the synchronous calls split).
    pub max_transfer_bytes: u32,
}

/// Reads a C string argument; `None` for NULL or invalid UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string living for 'a.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// New connect options with the defaults (those of the Linux host; push writes asked for).
/// Returns NULL only if a panic was caught (see `rdmablk_errmsg`).
#[no_mangle]
pub extern "C" fn rdmablk_opts_new() -> *mut rdmablk_opts {
    crate::error::guard_value(std::ptr::null_mut(), || {
        Box::into_raw(Box::new(rdmablk_opts {
            opts: ConnectOptions::default(),
        }))
    })
}

/// Sets one option by name, as in a URL query: `hostnqn`, `hostid`, `io_queues`,
/// `queue_size`, `kato_ms` (keep-alive timeout, 0 disables), `push` (1/0), `io_timeout_ms`,
/// `poll_spin_us` (how long a waiting queue polls before it sleeps, default 200 over NVMe/TCP,
/// 0 over NVMe/RDMA and loop),
/// `connect_timeout_ms`, `max_io_bytes`, `buffer_pool_bytes`, `reconnect_attempts`,
/// `ctrl_loss_tmo_ms`, `reconnect_delay_ms`, `reconnect_max_delay_ms`, `retry_writes`;
/// NVMe/TCP: `hdr_digest`, `data_digest`, and TLS 1.3 with a PSK: `psk_file` (a file holding
/// `NVMeTLSkey-1:..:`), `psk` (the key itself), `tls` (1: required), `tls_identity` (1, or 0
/// for SPDK's target), `tls_record_layer` (`auto`, `kernel`: kTLS or fail, `user`: OpenSSL).
/// Returns 0, or -EINVAL for an unknown name or a bad value.
///
/// # Safety
/// `opts` comes from [`rdmablk_opts_new`]; `name` and `value` are NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_opts_set(
    opts: *mut rdmablk_opts,
    name: *const c_char,
    value: *const c_char,
) -> c_int {
    guard(|| {
        // SAFETY: the caller passes strings that outlive this call (or NULL).
        let (Some(name), Some(value)) = (unsafe { str_arg(name) }, unsafe { str_arg(value) })
        else {
            return invalid("rdmablk_opts_set: name and value must be UTF-8 strings");
        };
        // SAFETY: the caller passes an options object from rdmablk_opts_new (or NULL).
        let Some(o) = (unsafe { opts.as_mut() }) else {
            return invalid("rdmablk_opts_set: opts is NULL");
        };
        o.opts.set(name, value).map_or_else(|e| fail(&e), |()| 0)
    })
}

/// Frees connect options (NULL is fine).
///
/// # Safety
/// `opts` comes from [`rdmablk_opts_new`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_opts_free(opts: *mut rdmablk_opts) {
    if !opts.is_null() {
        // SAFETY: made by Box::into_raw in rdmablk_opts_new, freed once (caller's promise).
        crate::error::guard_value((), || drop(unsafe { Box::from_raw(opts) }));
    }
}

/// Connects to `url` (`rdma://IP:PORT/SUBNQN`, NVMe/TCP's `tcp://HOST:PORT/SUBNQN` or
/// `soft://HOST:PORT/SUBNQN`; query parameters override `opts`, which may be NULL for the
/// defaults). On success stores the controller in `*out` and returns 0. Keep-alive and
/// reconnects run in the background.
///
/// # Safety
/// `url` is a NUL-terminated string, `opts` is NULL or from [`rdmablk_opts_new`], `out` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_connect(
    url: *const c_char,
    opts: *const rdmablk_opts,
    out: *mut *mut rdmablk_ctrl,
) -> c_int {
    guard(|| {
        // SAFETY: the caller passes a string that outlives this call (or NULL).
        let Some(url) = (unsafe { str_arg(url) }) else {
            return invalid("rdmablk_connect: url must be a UTF-8 string");
        };
        if out.is_null() {
            return invalid("rdmablk_connect: out is NULL");
        }
        // SAFETY: NULL or an options object from rdmablk_opts_new (caller's promise).
        let opts =
            unsafe { opts.as_ref() }.map_or_else(ConnectOptions::default, |o| o.opts.clone());
        match Controller::connect_with(url, opts) {
            Ok(ctrl) => {
                // SAFETY: checked non-null above; the caller promises it is writable.
                unsafe { *out = Box::into_raw(Box::new(rdmablk_ctrl { ctrl })) };
                0
            }
            Err(e) => fail(&e),
        }
    })
}

/// Releases a controller handle (NULL is fine). The connection closes once the controller,
/// and every namespace, queue and buffer made from it, is freed.
///
/// # Safety
/// `ctrl` comes from [`rdmablk_connect`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ctrl_free(ctrl: *mut rdmablk_ctrl) {
    if !ctrl.is_null() {
        // SAFETY: made by Box::into_raw in rdmablk_connect, freed once (caller's promise).
        crate::error::guard_value((), || drop(unsafe { Box::from_raw(ctrl) }));
    }
}

/// Opens namespace `nsid` for the synchronous calls; -ENODEV if it is not active.
///
/// # Safety
/// `ctrl` comes from [`rdmablk_connect`]; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_open(
    ctrl: *const rdmablk_ctrl,
    nsid: u32,
    out: *mut *mut rdmablk_ns,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live controller handle (caller's promise).
        let Some(c) = (unsafe { ctrl.as_ref() }) else {
            return invalid("rdmablk_ns_open: ctrl is NULL");
        };
        if out.is_null() {
            return invalid("rdmablk_ns_open: out is NULL");
        }
        match c.ctrl.namespace(nsid) {
            Ok(ns) => {
                // SAFETY: checked non-null; the caller promises it is writable.
                unsafe { *out = Box::into_raw(Box::new(rdmablk_ns { ns })) };
                0
            }
            Err(e) => fail(&e),
        }
    })
}

/// Frees a namespace handle (NULL is fine).
///
/// # Safety
/// `ns` comes from [`rdmablk_ns_open`] and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_free(ns: *mut rdmablk_ns) {
    if !ns.is_null() {
        // SAFETY: made by Box::into_raw in rdmablk_ns_open, freed once (caller's promise).
        crate::error::guard_value((), || drop(unsafe { Box::from_raw(ns) }));
    }
}

/// Fills `*info` with the namespace's geometry.
///
/// # Safety
/// `ns` comes from [`rdmablk_ns_open`]; `info` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_get_info(
    ns: *const rdmablk_ns,
    info: *mut rdmablk_ns_info,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or live handles / writable memory (caller's promise).
        let (Some(n), Some(info)) = (unsafe { ns.as_ref() }, unsafe { info.as_mut() }) else {
            return invalid("rdmablk_ns_get_info: ns and info must not be NULL");
        };
        *info = rdmablk_ns_info {
            nsid: n.ns.nsid(),
            block_size: n.ns.block_size(),
            capacity_bytes: n.ns.capacity_bytes(),
            max_transfer_bytes: n.ns.max_transfer_bytes(),
        };
        0
    })
}

/// Runs a sync call on a namespace handle.
///
/// # Safety
/// `ns` is NULL or a live handle from [`rdmablk_ns_open`].
pub(crate) unsafe fn with_ns(
    ns: *const rdmablk_ns,
    f: impl FnOnce(&Namespace) -> rdmablk_initiator::Result<()>,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live handle (caller's promise).
        let Some(n) = (unsafe { ns.as_ref() }) else {
            return invalid("namespace handle is NULL");
        };
        f(&n.ns).map_or_else(|e| fail(&e), |()| 0)
    })
}

/// Reads `len` bytes at byte `offset` into `data` (both multiples of the block size). The
/// data bounces through a registered buffer; [`rdmablk_ns_read_buf`] does not copy.
///
/// # Safety
/// `ns` comes from [`rdmablk_ns_open`]; `data` points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_read(
    ns: *const rdmablk_ns,
    offset: u64,
    data: *mut c_void,
    len: usize,
) -> c_int {
    if data.is_null() && len > 0 {
        return invalid("rdmablk_ns_read: data is NULL");
    }
    // SAFETY: `ns` is the caller's handle; `data` holds `len` writable bytes (caller's
    // promise), checked non-null when len > 0 (a dangling pointer is fine for len 0).
    unsafe {
        with_ns(ns, |n| {
            let data = if len == 0 {
                std::ptr::NonNull::dangling().as_ptr()
            } else {
                data.cast()
            };
            n.read_at(offset, std::slice::from_raw_parts_mut(data, len))
        })
    }
}

/// Writes `len` bytes of `data` at byte `offset` (bounced; see [`rdmablk_ns_write_buf`]).
///
/// # Safety
/// `ns` comes from [`rdmablk_ns_open`]; `data` points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_write(
    ns: *const rdmablk_ns,
    offset: u64,
    data: *const c_void,
    len: usize,
) -> c_int {
    if data.is_null() && len > 0 {
        return invalid("rdmablk_ns_write: data is NULL");
    }
    // SAFETY: as in rdmablk_ns_read, for `len` readable bytes.
    unsafe {
        with_ns(ns, |n| {
            let data = if len == 0 {
                std::ptr::NonNull::dangling().as_ptr()
            } else {
                data.cast()
            };
            n.write_at(offset, std::slice::from_raw_parts(data, len))
        })
    }
}

/// Zero-copy read of the whole registered buffer `buf` (its length) at byte `offset`.
///
/// # Safety
/// `ns` comes from [`rdmablk_ns_open`]; `buf` from [`crate::buf::rdmablk_buf_alloc`], not
/// used by another thread during the call.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_read_buf(
    ns: *const rdmablk_ns,
    offset: u64,
    buf: *mut rdmablk_buf,
) -> c_int {
    // SAFETY: the caller's handles; the buffer is ours for the call (caller's promise).
    unsafe {
        with_ns(ns, |n| {
            rdmablk_buf::with_mut(buf, |b| n.read_buf(offset, b))
        })
    }
}

/// Zero-copy write of the whole registered buffer `buf` at byte `offset`.
///
/// # Safety
/// As [`rdmablk_ns_read_buf`].
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_write_buf(
    ns: *const rdmablk_ns,
    offset: u64,
    buf: *mut rdmablk_buf,
) -> c_int {
    // SAFETY: as in rdmablk_ns_read_buf.
    unsafe {
        with_ns(ns, |n| {
            rdmablk_buf::with_mut(buf, |b| n.write_buf(offset, b))
        })
    }
}

/// Makes everything written so far durable (NVMe Flush). After a failed flush the namespace
/// handle refuses writes (-EIO) until it is reopened.
///
/// # Safety
/// `ns` comes from [`rdmablk_ns_open`].
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_flush(ns: *const rdmablk_ns) -> c_int {
    // SAFETY: the caller's handle.
    unsafe { with_ns(ns, |n| n.flush()) }
}

/// Zeroes `len` bytes at `offset` without transferring data (NVMe Write Zeroes);
/// -EOPNOTSUPP if the controller lacks it.
///
/// # Safety
/// `ns` comes from [`rdmablk_ns_open`].
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_write_zeroes(
    ns: *const rdmablk_ns,
    offset: u64,
    len: u64,
) -> c_int {
    // SAFETY: the caller's handle.
    unsafe { with_ns(ns, |n| n.write_zeroes(offset, len)) }
}

/// Deallocates (trims) `len` bytes at `offset` (Dataset Management); -EOPNOTSUPP if the
/// controller lacks it.
///
/// # Safety
/// `ns` comes from [`rdmablk_ns_open`].
#[no_mangle]
pub unsafe extern "C" fn rdmablk_ns_discard(ns: *const rdmablk_ns, offset: u64, len: u64) -> c_int {
    // SAFETY: the caller's handle.
    unsafe { with_ns(ns, |n| n.discard(offset, len)) }
}
