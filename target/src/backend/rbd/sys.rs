//! librados / librbd through bindgen (`target/build.rs`): the only place that calls them.
//!
//! Safe owners for the three handles, each keeping its parent alive so teardown order is right
//! by construction: an [`Image`] holds its [`IoCtx`], which holds its [`Cluster`]. The
//! asynchronous calls are `unsafe fn`s: the caller vouches for the buffer and the callback
//! argument until the callback has run.

use std::ffi::{c_void, CString};
use std::path::Path;
use std::sync::Arc;

mod bindings {
    #![allow(
        non_camel_case_types,
        non_upper_case_globals,
        non_snake_case,
        dead_code,
        unsafe_op_in_unsafe_fn,
        clippy::all,
        clippy::undocumented_unsafe_blocks
    )]
    include!(concat!(env!("OUT_DIR"), "/rbd_bindings.rs"));
}

use bindings as ffi;

mod objects;
pub use objects::Watch;

pub use ffi::rbd_completion_t;

/// The FUA hint of a write (librados' `LIBRADOS_OP_FLAG_FADVISE_FUA`).
pub const OP_FLAG_FUA: i32 = ffi::LIBRADOS_OP_FLAG_FADVISE_FUA as i32;

/// A failed librados/librbd call: which, and the (positive) errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CephError {
    pub call: &'static str,
    pub errno: i32,
}

impl std::fmt::Display for CephError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = std::io::Error::from_raw_os_error(self.errno);
        write!(f, "{}: {e}", self.call)
    }
}

fn check(call: &'static str, rc: i32) -> Result<(), CephError> {
    if rc < 0 {
        Err(CephError { call, errno: -rc })
    } else {
        Ok(())
    }
}

fn cstring(s: &str) -> CString {
    // Validation refused NULs in every name and path handed here.
    CString::new(s).unwrap_or_default()
}

fn cpath(p: &Path) -> CString {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// A cluster handle (`rados_t`), configured and connected.
#[derive(Debug)]
pub struct Cluster(ffi::rados_t);

// SAFETY: librados handles are thread-safe (its C API is used from any thread); the handle is
// only shut down in Drop, when no IoCtx (which holds an Arc of this) is left.
unsafe impl Send for Cluster {}
// SAFETY: as above.
unsafe impl Sync for Cluster {}

impl Cluster {
    /// Creates a handle for `client.<user>`, reads `conf`, sets `options` (name, value), and
    /// connects (bounded by the `client_mount_timeout` among `options`).
    pub fn connect(
        user: &str,
        conf: &Path,
        options: &[(&str, String)],
    ) -> Result<Arc<Cluster>, CephError> {
        let mut h: ffi::rados_t = std::ptr::null_mut();
        let name = cstring(&format!("client.{user}"));
        let cluster = c"ceph";
        // SAFETY: `h` is a valid out-pointer; the strings are NUL-terminated and live.
        check("rados_create2", unsafe {
            ffi::rados_create2(&mut h, cluster.as_ptr(), name.as_ptr(), 0)
        })?;
        // From here on Drop shuts the handle down, connected or not.
        let c = Cluster(h);
        let path = cpath(conf);
        // SAFETY: a created, unconnected handle and a NUL-terminated path.
        check("rados_conf_read_file", unsafe {
            ffi::rados_conf_read_file(c.0, path.as_ptr())
        })?;
        for (k, v) in options {
            let (k, v) = (cstring(k), cstring(v));
            // SAFETY: as above, NUL-terminated option name and value.
            check("rados_conf_set", unsafe {
                ffi::rados_conf_set(c.0, k.as_ptr(), v.as_ptr())
            })?;
        }
        // SAFETY: a configured handle; connecting blocks at most client_mount_timeout.
        check("rados_connect", unsafe { ffi::rados_connect(c.0) })?;
        Ok(Arc::new(c))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: the handle came from rados_create2, and nothing uses it any more (every
        // IoCtx holds an Arc of this Cluster).
        unsafe { ffi::rados_shutdown(self.0) }
    }
}

/// An I/O context on one pool (and RADOS namespace).
#[derive(Debug)]
pub struct IoCtx {
    h: ffi::rados_ioctx_t,
    _cluster: Arc<Cluster>,
}

// SAFETY: an ioctx may be used from any thread once set up; it is not changed after `open`.
unsafe impl Send for IoCtx {}
// SAFETY: as above.
unsafe impl Sync for IoCtx {}

impl IoCtx {
    pub fn open(cluster: &Arc<Cluster>, pool: &str, ns: Option<&str>) -> Result<IoCtx, CephError> {
        let mut h: ffi::rados_ioctx_t = std::ptr::null_mut();
        let pool = cstring(pool);
        // SAFETY: a connected cluster, a NUL-terminated pool name, a valid out-pointer.
        check("rados_ioctx_create", unsafe {
            ffi::rados_ioctx_create(cluster.0, pool.as_ptr(), &mut h)
        })?;
        let io = IoCtx {
            h,
            _cluster: Arc::clone(cluster),
        };
        if let Some(ns) = ns {
            let ns = cstring(ns);
            // SAFETY: a fresh ioctx nothing else uses yet; librados copies the string.
            unsafe { ffi::rados_ioctx_set_namespace(io.h, ns.as_ptr()) };
        }
        Ok(io)
    }
}

impl Drop for IoCtx {
    fn drop(&mut self) {
        // SAFETY: created by rados_ioctx_create; every Image on it holds an Arc of this.
        unsafe { ffi::rados_ioctx_destroy(self.h) }
    }
}

/// An open RBD image. Thread-safe in librbd; shared by the workers of a namespace.
#[derive(Debug)]
pub struct Image {
    h: ffi::rbd_image_t,
    _io: Arc<IoCtx>,
}

// SAFETY: librbd image handles are thread-safe (every call takes the image's own locks).
unsafe impl Send for Image {}
// SAFETY: as above.
unsafe impl Sync for Image {}

/// The callback librbd calls, on one of its threads, when an operation completes.
pub type Callback = unsafe extern "C" fn(c: rbd_completion_t, arg: *mut c_void);

impl Image {
    pub fn open(io: &Arc<IoCtx>, name: &str) -> Result<Image, CephError> {
        let mut h: ffi::rbd_image_t = std::ptr::null_mut();
        let name = cstring(name);
        // SAFETY: a live ioctx, a NUL-terminated name, a valid out-pointer, no snapshot.
        check("rbd_open", unsafe {
            ffi::rbd_open(io.h, name.as_ptr(), &mut h, std::ptr::null())
        })?;
        Ok(Image {
            h,
            _io: Arc::clone(io),
        })
    }

    /// The image's size in bytes, as librbd knows it now (it follows resizes).
    pub fn size(&self) -> Result<u64, CephError> {
        let mut size = 0u64;
        // SAFETY: an open image and a valid out-pointer.
        check("rbd_get_size", unsafe {
            ffi::rbd_get_size(self.h, &mut size)
        })?;
        Ok(size)
    }

    /// Starts `op`; `cb(completion, arg)` runs once, on a librbd thread, when it ends (also
    /// when it fails), unless this returns an error.
    ///
    /// # Safety
    /// - for reads and writes, `buf..buf + len` stays valid (and unused by anyone else) until
    ///   the callback has run;
    /// - `arg` stays valid for whatever `cb` does with it until the callback has run;
    /// - the callback calls [`finish`] on the completion it is given.
    pub unsafe fn aio(&self, op: AioOp, cb: Callback, arg: *mut c_void) -> Result<(), CephError> {
        let mut c: rbd_completion_t = std::ptr::null_mut();
        // SAFETY: `arg` and `cb` are the caller's to vouch for; `c` is a valid out-pointer.
        check("rbd_aio_create_completion", unsafe {
            ffi::rbd_aio_create_completion(arg, Some(cb), &mut c)
        })?;
        // SAFETY: an open image, a live completion; the buffers are the caller's to vouch for.
        let rc = unsafe {
            match op {
                AioOp::Read { off, buf, len } => ffi::rbd_aio_read(self.h, off, len, buf.cast(), c),
                AioOp::Write {
                    off,
                    buf,
                    len,
                    flags,
                } => ffi::rbd_aio_write2(self.h, off, len, buf.cast(), c, flags),
                AioOp::Flush => ffi::rbd_aio_flush(self.h, c),
                AioOp::Discard { off, len } => ffi::rbd_aio_discard(self.h, off, len, c),
                AioOp::WriteZeroes { off, len } => {
                    ffi::rbd_aio_write_zeroes(self.h, off, len as usize, c, 0, 0)
                }
            }
        };
        if rc < 0 {
            // Not started: the callback will not run, so the completion is ours to release.
            // SAFETY: a completion created above that librbd does not hold.
            unsafe { ffi::rbd_aio_release(c) };
            return Err(CephError {
                call: op.call(),
                errno: -rc,
            });
        }
        Ok(())
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: opened by rbd_open; no operation is in flight (queues hold an Arc of the
        // image until their last completion) and nothing uses the handle any more.
        let rc = unsafe { ffi::rbd_close(self.h) };
        if rc < 0 {
            tracing::error!(errno = -rc, "rbd_close failed");
        }
    }
}

/// One asynchronous operation on an image (offsets and lengths in bytes).
#[derive(Clone, Copy, Debug)]
pub enum AioOp {
    Read {
        off: u64,
        buf: *mut u8,
        len: usize,
    },
    Write {
        off: u64,
        buf: *const u8,
        len: usize,
        flags: i32,
    },
    Flush,
    Discard {
        off: u64,
        len: u64,
    },
    WriteZeroes {
        off: u64,
        len: u64,
    },
}

impl AioOp {
    fn call(&self) -> &'static str {
        match self {
            AioOp::Read { .. } => "rbd_aio_read",
            AioOp::Write { .. } => "rbd_aio_write2",
            AioOp::Flush => "rbd_aio_flush",
            AioOp::Discard { .. } => "rbd_aio_discard",
            AioOp::WriteZeroes { .. } => "rbd_aio_write_zeroes",
        }
    }
}

/// The result of a completed operation (bytes, or a negated errno), and releases it.
///
/// # Safety
/// `c` is the completion librbd handed to the callback, not released yet; it is released here
/// and must not be used again.
pub unsafe fn finish(c: rbd_completion_t) -> i64 {
    // SAFETY: a live completion whose operation has completed (we are in its callback).
    let rc = unsafe { ffi::rbd_aio_get_return_value(c) };
    // SAFETY: as above; this is the one release of `c`.
    unsafe { ffi::rbd_aio_release(c) };
    rc as i64
}
