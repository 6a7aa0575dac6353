//! Registered buffers: memory the target reaches directly (zero copy).

use std::ffi::{c_int, c_void};

use rdmablk_initiator::IoBuf;

use crate::ctrl::rdmablk_ctrl;
use crate::error::{fail, guard, guard_value, invalid};

/// A registered I/O buffer (opaque), page aligned. Owned by one thread at a time; while a
/// queued request uses it, nobody may touch its memory: free and split fail with -EBUSY and
/// synchronous I/O with -EINVAL until its completion has been returned by poll/wait.
pub struct rdmablk_buf {
    /// `None` while an asynchronous request holds the buffer.
    pub(crate) io: Option<IoBuf>,
    /// The memory never moves, so its address is kept for `rdmablk_buf_data` in flight too.
    data: *mut u8,
    len: usize,
    /// The caller's tag of the request holding the buffer.
    pub(crate) tag: u64,
}

impl rdmablk_buf {
    fn new(mut io: IoBuf) -> *mut rdmablk_buf {
        let data = io.as_mut_slice().as_mut_ptr();
        let len = io.len();
        Box::into_raw(Box::new(rdmablk_buf {
            io: Some(io),
            data,
            len,
            tag: 0,
        }))
    }

    /// Runs `f` on the buffer if it is not in flight.
    ///
    /// # Safety
    /// `buf` is NULL or a live handle from [`rdmablk_buf_alloc`], used by this thread only.
    pub(crate) unsafe fn with_mut(
        buf: *mut rdmablk_buf,
        f: impl FnOnce(&mut IoBuf) -> rdmablk_initiator::Result<()>,
    ) -> rdmablk_initiator::Result<()> {
        // SAFETY: NULL or a live handle used by one thread (caller's promise).
        let Some(b) = (unsafe { buf.as_mut() }) else {
            return Err(rdmablk_initiator::Error::Option {
                name: "buf",
                reason: "the buffer handle is NULL".into(),
            });
        };
        match b.io.as_mut() {
            Some(io) => f(io),
            None => Err(in_flight()),
        }
    }
}

fn in_flight() -> rdmablk_initiator::Error {
    rdmablk_initiator::Error::Option {
        name: "buf",
        reason: "the buffer is in flight (wait for its completion first)".into(),
    }
}

/// Allocates a registered buffer of `len` bytes (rounded up to 4 KiB pages in the pool) from
/// the controller's pool (`buffer_pool_bytes`); -ENOMEM when the pool has no room. Its
/// contents are unspecified, as with malloc.
///
/// # Safety
/// `ctrl` comes from `rdmablk_connect`; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_buf_alloc(
    ctrl: *const rdmablk_ctrl,
    len: usize,
    out: *mut *mut rdmablk_buf,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live controller handle (caller's promise).
        let Some(c) = (unsafe { ctrl.as_ref() }) else {
            return invalid("rdmablk_buf_alloc: ctrl is NULL");
        };
        if out.is_null() || len == 0 {
            return invalid("rdmablk_buf_alloc: out is NULL or len is 0");
        }
        match c.ctrl.alloc(len) {
            // SAFETY: checked non-null; the caller promises it is writable.
            Ok(io) => unsafe {
                *out = rdmablk_buf::new(io);
                0
            },
            Err(e) => fail(&e),
        }
    })
}

/// The buffer's memory (page aligned; `rdmablk_buf_len` bytes). NULL for a NULL handle.
///
/// # Safety
/// `buf` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_buf_data(buf: *const rdmablk_buf) -> *mut c_void {
    guard_value(std::ptr::null_mut(), || {
        // SAFETY: NULL or a live handle (caller's promise).
        unsafe { buf.as_ref() }.map_or(std::ptr::null_mut(), |b| b.data.cast())
    })
}

/// The buffer's length in bytes (0 for a NULL handle).
///
/// # Safety
/// `buf` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_buf_len(buf: *const rdmablk_buf) -> usize {
    // SAFETY: NULL or a live handle (caller's promise).
    guard_value(0, || unsafe { buf.as_ref() }.map_or(0, |b| b.len))
}

/// Splits `buf` at byte `at` (a multiple of 4096, `0 < at < len`): `buf` keeps `[0, at)` and
/// `*tail` gets a new handle for `[at, len)`; each half is freed on its own. Lets one
/// contiguous allocation be submitted in independent pieces. -EINVAL for a bad `at`, -EBUSY
/// while the buffer is in flight.
///
/// # Safety
/// `buf` is a live handle used by this thread only; `tail` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_buf_split(
    buf: *mut rdmablk_buf,
    at: usize,
    tail: *mut *mut rdmablk_buf,
) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live handle used by this thread (caller's promise).
        let Some(b) = (unsafe { buf.as_mut() }) else {
            return invalid("rdmablk_buf_split: buf is NULL");
        };
        if tail.is_null() {
            return invalid("rdmablk_buf_split: tail is NULL");
        }
        let Some(io) = b.io.as_mut() else {
            fail(&in_flight());
            return -libc::EBUSY;
        };
        let Some(t) = io.split_off(at) else {
            return invalid("rdmablk_buf_split: at must be a multiple of 4096 inside the buffer");
        };
        b.len = at;
        // SAFETY: checked non-null; the caller promises it is writable.
        unsafe { *tail = rdmablk_buf::new(t) };
        0
    })
}

/// Frees a buffer (NULL is fine): 0, or -EBUSY (and nothing freed) while a queued request
/// holds it. A buffer may outlive its controller handle.
///
/// # Safety
/// `buf` is NULL or a live handle, not used after a successful free.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_buf_free(buf: *mut rdmablk_buf) -> c_int {
    guard(|| {
        // SAFETY: NULL or a live handle (caller's promise).
        match unsafe { buf.as_ref() } {
            None => 0,
            Some(b) if b.io.is_none() => {
                fail(&in_flight());
                -libc::EBUSY
            }
            Some(_) => {
                // SAFETY: made by Box::into_raw in rdmablk_buf::new; the caller frees it once.
                drop(unsafe { Box::from_raw(buf) });
                0
            }
        }
    })
}
