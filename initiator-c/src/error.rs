//! The error model of the C API: every call that can fail returns 0 (or a count) on success
//! and a negative errno on failure; the failure's message and NVMe status are kept per thread
//! for [`rdmablk_errmsg`] and [`rdmablk_nvme_status`]. Every entry point runs under
//! [`guard`], so no panic unwinds into C: a panic becomes `-ENOTRECOVERABLE` with its message.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use rdmablk::nvme::{Sct, Status};
use rdmablk_initiator::Error;

struct Last {
    msg: CString,
    status: u16,
}

thread_local! {
    static LAST: RefCell<Last> = RefCell::new(Last { msg: CString::default(), status: 0 });
}

/// The NVMe status as Linux's nvme driver keeps it (the CQE status field without the phase
/// bit): SC in bits 0-7, SCT 8-10, CRD 11-12, More 13, DNR 14.
pub(crate) fn status_bits(s: &Status) -> u16 {
    u16::from(s.sc)
        | u16::from(s.sct.bits() & 7) << 8
        | u16::from(s.crd & 3) << 11
        | u16::from(s.more) << 13
        | u16::from(s.dnr) << 14
}

/// The errno a failure maps to (positive).
pub(crate) fn errno_of(e: &Error) -> c_int {
    match e {
        Error::Url { .. }
        | Error::Option { .. }
        | Error::Unaligned { .. }
        | Error::TooLarge { .. }
        | Error::ShortBuffer { .. } => libc::EINVAL,
        Error::OutOfRange { .. } => libc::ERANGE,
        Error::Rejected { .. } | Error::Refused { .. } | Error::ConnectRefused { .. } => {
            libc::ECONNREFUSED
        }
        Error::Protocol { .. } | Error::Controller { .. } => libc::EPROTO,
        Error::Disconnected { .. } => libc::ENOTCONN,
        Error::PoolExhausted { .. } => libc::ENOMEM,
        Error::NoNamespace { .. } => libc::ENODEV,
        Error::Unsupported { .. } => libc::EOPNOTSUPP,
        Error::Nvme { status, .. } => match (status.sct, status.sc) {
            (Sct::Generic, sc) if sc == Status::LBA_OUT_OF_RANGE.sc => libc::ERANGE,
            (Sct::Generic, sc) if sc == Status::CAPACITY_EXCEEDED.sc => libc::ENOSPC,
            (Sct::Generic, sc) if sc == Status::INVALID_OPCODE.sc => libc::EOPNOTSUPP,
            _ => libc::EIO,
        },
        // Transport failures, a failed fabric call, a namespace that refuses writes after a
        // failed flush: the I/O's outcome is unknown or refused, as EIO says for a disk.
        _ => libc::EIO,
    }
}

/// Records `msg` and `status` as this thread's last error.
pub(crate) fn set_last(msg: &str, status: u16) {
    let msg = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = Last { msg, status });
}

/// Records `e` as this thread's last error and returns its negative errno.
pub(crate) fn fail(e: &Error) -> c_int {
    set_last(&e.to_string(), e.status().as_ref().map_or(0, status_bits));
    -errno_of(e)
}

/// Records a usage error of the C API itself (a null pointer, a bad constant): `-EINVAL`.
pub(crate) fn invalid(what: &str) -> c_int {
    set_last(what, 0);
    -libc::EINVAL
}

/// Runs an entry point's body; a panic becomes `-ENOTRECOVERABLE` with its message.
pub(crate) fn guard(f: impl FnOnce() -> c_int) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(rc) => rc,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last(&format!("internal error in librdmablk (a bug): {what}"), 0);
            -libc::ENOTRECOVERABLE
        }
    }
}

/// [`guard`] for entry points that return a value instead of a status: `fallback` on panic.
pub(crate) fn guard_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The message of the last failed call on the calling thread (`""` if none failed yet).
/// The string stays valid until the next failing call on this thread; copy it to keep it.
#[no_mangle]
pub extern "C" fn rdmablk_errmsg() -> *const c_char {
    guard_value(c"internal error".as_ptr(), || {
        LAST.with(|l| l.borrow().msg.as_ptr())
    })
}

/// The NVMe status of the last failed call on the calling thread, in Linux's form (SC bits
/// 0-7, SCT 8-10, CRD 11-12, More 13, DNR 14); 0 when that failure carried no NVMe status
/// (a transport or usage error).
#[no_mangle]
pub extern "C" fn rdmablk_nvme_status() -> u16 {
    guard_value(0, || LAST.with(|l| l.borrow().status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvme_status_maps_to_linux_bits_and_errno() {
        let s = Status::UNRECOVERED_READ_ERROR.with_dnr();
        assert_eq!(status_bits(&s), 0x4000 | 0x200 | 0x81);
        let e = Error::Nvme {
            op: "read",
            status: s,
        };
        assert_eq!(fail(&e), -libc::EIO);
        assert_eq!(rdmablk_nvme_status(), 0x4281);
        let e = Error::Nvme {
            op: "write",
            status: Status::LBA_OUT_OF_RANGE,
        };
        assert_eq!(errno_of(&e), libc::ERANGE);
    }

    #[test]
    fn panics_become_enotrecoverable_with_the_message() {
        assert_eq!(guard(|| panic!("boom")), -libc::ENOTRECOVERABLE);
        // SAFETY: rdmablk_errmsg returns a NUL-terminated string owned by this thread.
        let msg = unsafe { std::ffi::CStr::from_ptr(rdmablk_errmsg()) };
        assert!(msg.to_str().unwrap().contains("boom"), "{msg:?}");
        assert_eq!(guard_value(7, || -> i32 { panic!("x") }), 7);
    }
}
