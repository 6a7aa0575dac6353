//! RADOS objects beside an image: an omap value read and written under the object's version
//! (compare and swap), and watch / notify. What the shared reservation store of an RBD
//! namespace needs (`super::super::reservations`).

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::{check, cstring, ffi, CephError, Cluster, Image, IoCtx};

impl Image {
    /// The image's id (its header object is `rbd_header.<id>`).
    pub fn id(&self) -> Result<String, CephError> {
        let mut buf = [0u8; 64];
        // SAFETY: an open image and a buffer of the length given.
        check("rbd_get_id", unsafe {
            ffi::rbd_get_id(self.h, buf.as_mut_ptr().cast(), buf.len())
        })?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
    }
}

impl Cluster {
    /// This client's instance id (what a notify's acknowledgements name).
    pub fn instance_id(&self) -> u64 {
        // SAFETY: a connected handle.
        unsafe { ffi::rados_get_instance_id(self.0) }
    }
}

/// Frees a read op when dropped.
struct ReadOp(ffi::rados_read_op_t);

impl Drop for ReadOp {
    fn drop(&mut self) {
        // SAFETY: created by rados_create_read_op, released once.
        unsafe { ffi::rados_release_read_op(self.0) }
    }
}

/// Frees a write op when dropped.
struct WriteOp(ffi::rados_write_op_t);

impl Drop for WriteOp {
    fn drop(&mut self) {
        // SAFETY: created by rados_create_write_op, released once.
        unsafe { ffi::rados_release_write_op(self.0) }
    }
}

impl IoCtx {
    /// Omap value `key` of object `oid` (`None`: no such key), and the object's version.
    /// Not to be run concurrently on one ioctx (the version is the ioctx's last).
    pub fn omap_get(&self, oid: &str, key: &str) -> Result<(Option<Vec<u8>>, u64), CephError> {
        let (o, k) = (cstring(oid), cstring(key));
        // SAFETY: plain constructor; the op is released by ReadOp.
        let op = ReadOp(unsafe { ffi::rados_create_read_op() });
        let keys = [k.as_ptr()];
        let lens = [key.len()];
        let mut iter: ffi::rados_omap_iter_t = std::ptr::null_mut();
        let mut prval = 0i32;
        // SAFETY: the key array, lengths and out-pointers live until the op ran (below).
        unsafe {
            ffi::rados_read_op_omap_get_vals_by_keys2(
                op.0,
                keys.as_ptr(),
                1,
                lens.as_ptr(),
                &mut iter,
                &mut prval,
            )
        };
        // SAFETY: a live ioctx and op, a NUL-terminated name.
        check("rados_read_op_operate", unsafe {
            ffi::rados_read_op_operate(op.0, self.h, o.as_ptr(), 0)
        })?;
        // SAFETY: the op ran on this ioctx just now.
        let version = unsafe { ffi::rados_get_last_version(self.h) };
        check("rados_read_op_omap_get_vals_by_keys2", prval)?;
        let mut value = None;
        loop {
            let (mut kp, mut vp): (*mut c_char, *mut c_char) =
                (std::ptr::null_mut(), std::ptr::null_mut());
            let (mut kl, mut vl) = (0usize, 0usize);
            // SAFETY: an iterator the op filled; out-pointers valid.
            let rc = unsafe { ffi::rados_omap_get_next2(iter, &mut kp, &mut vp, &mut kl, &mut vl) };
            if rc < 0 || kp.is_null() {
                break;
            }
            value = Some(if vp.is_null() || vl == 0 {
                Vec::new()
            } else {
                // SAFETY: librados gives `vl` bytes at `vp`, valid until rados_omap_get_end.
                unsafe { std::slice::from_raw_parts(vp.cast::<u8>(), vl) }.to_vec()
            });
        }
        if !iter.is_null() {
            // SAFETY: the iterator is ended once.
            unsafe { ffi::rados_omap_get_end(iter) };
        }
        Ok((value, version))
    }

    /// Sets omap value `key` of object `oid` if the object is still at `version`: false if it
    /// changed since.
    pub fn omap_set_at(
        &self,
        oid: &str,
        key: &str,
        value: &[u8],
        version: u64,
    ) -> Result<bool, CephError> {
        let (o, k) = (cstring(oid), cstring(key));
        // SAFETY: plain constructor; the op is released by WriteOp.
        let op = WriteOp(unsafe { ffi::rados_create_write_op() });
        let keys = [k.as_ptr()];
        let vals = [value.as_ptr().cast::<c_char>()];
        let (klen, vlen) = ([key.len()], [value.len()]);
        // SAFETY: the arrays live until the op ran (below); librados copies them.
        unsafe {
            ffi::rados_write_op_assert_version(op.0, version);
            ffi::rados_write_op_omap_set2(
                op.0,
                keys.as_ptr(),
                vals.as_ptr(),
                klen.as_ptr(),
                vlen.as_ptr(),
                1,
            );
        }
        // SAFETY: a live ioctx and op, a NUL-terminated name, no mtime.
        let rc = unsafe {
            ffi::rados_write_op_operate(op.0, self.h, o.as_ptr(), std::ptr::null_mut(), 0)
        };
        match -rc {
            // The version moved (ERANGE: newer than asserted; EOVERFLOW: older).
            libc::ERANGE | libc::EOVERFLOW => Ok(false),
            _ => check("rados_write_op_operate", rc).map(|()| true),
        }
    }

    /// Creates object `oid` if it does not exist.
    pub fn touch(&self, oid: &str) -> Result<(), CephError> {
        let o = cstring(oid);
        // SAFETY: plain constructor; the op is released by WriteOp.
        let op = WriteOp(unsafe { ffi::rados_create_write_op() });
        // SAFETY: a live op, no object locator.
        unsafe {
            ffi::rados_write_op_create(
                op.0,
                ffi::LIBRADOS_CREATE_IDEMPOTENT as i32,
                std::ptr::null(),
            )
        };
        // SAFETY: a live ioctx and op, a NUL-terminated name, no mtime.
        check("rados_write_op_operate", unsafe {
            ffi::rados_write_op_operate(op.0, self.h, o.as_ptr(), std::ptr::null_mut(), 0)
        })
    }

    /// Notifies the watchers of `oid` with `payload` and waits (up to `timeout`) for each to
    /// acknowledge: the (client instance, watch cookie) of each that did.
    pub fn notify(
        &self,
        oid: &str,
        payload: &[u8],
        timeout: Duration,
    ) -> Result<Vec<(u64, u64)>, CephError> {
        let o = cstring(oid);
        let (mut reply, mut reply_len): (*mut c_char, usize) = (std::ptr::null_mut(), 0);
        // SAFETY: a live ioctx, a NUL-terminated name, a payload of the length given,
        // out-pointers valid.
        let rc = unsafe {
            ffi::rados_notify2(
                self.h,
                o.as_ptr(),
                payload.as_ptr().cast(),
                payload.len() as i32,
                timeout.as_millis() as u64,
                &mut reply,
                &mut reply_len,
            )
        };
        let mut acked = Vec::new();
        if !reply.is_null() {
            let mut acks: *mut ffi::notify_ack_t = std::ptr::null_mut();
            let mut timeouts: *mut ffi::notify_timeout_t = std::ptr::null_mut();
            let (mut n_acks, mut n_timeouts) = (0usize, 0usize);
            // SAFETY: the reply buffer notify2 returned, decoded then freed once.
            unsafe {
                if ffi::rados_decode_notify_response(
                    reply,
                    reply_len,
                    &mut acks,
                    &mut n_acks,
                    &mut timeouts,
                    &mut n_timeouts,
                ) == 0
                {
                    if !acks.is_null() && n_acks > 0 {
                        for a in std::slice::from_raw_parts(acks, n_acks) {
                            acked.push((a.notifier_id, a.cookie));
                        }
                    }
                    ffi::rados_free_notify_response(acks, n_acks, timeouts);
                }
                ffi::rados_buffer_free(reply);
            }
        }
        check("rados_notify2", rc)?;
        Ok(acked)
    }

    /// Acknowledges notify `notify_id` received on watch `cookie` of `oid`.
    pub fn notify_ack(&self, oid: &str, notify_id: u64, cookie: u64) -> Result<(), CephError> {
        let o = cstring(oid);
        // SAFETY: a live ioctx, a NUL-terminated name, no payload.
        check("rados_notify_ack", unsafe {
            ffi::rados_notify_ack(self.h, o.as_ptr(), notify_id, cookie, std::ptr::null(), 0)
        })
    }
}

/// What a watch received: notifications not yet acknowledged (id, payload), and whether the
/// watch broke.
#[derive(Debug, Default)]
pub struct Inbox {
    pub notifies: Vec<(u64, Vec<u8>)>,
    pub broken: bool,
}

/// What the callbacks reach: the inbox, and what acknowledges a probe at once.
#[derive(Debug)]
struct Shared {
    inbox: Mutex<Inbox>,
    cv: Condvar,
    io: Arc<IoCtx>,
    oid: std::ffi::CString,
    /// Notifications with this payload are acknowledged in the callback, not queued.
    probe: &'static [u8],
}

/// A watch on an object; unwatched when dropped.
#[derive(Debug)]
pub struct Watch {
    cookie: u64,
    /// From `Box::into_raw`: librados holds it as the callbacks' argument until the watch
    /// is gone and its callbacks flushed (Drop frees it then).
    shared: *mut Shared,
}

// SAFETY: `Shared` is Send + Sync (mutex, condvar, Arc of a thread-safe ioctx, a CString);
// the pointer is only read through shared references until Drop frees it.
unsafe impl Send for Watch {}
// SAFETY: as above.
unsafe impl Sync for Watch {}

unsafe extern "C" fn on_notify(
    arg: *mut c_void,
    notify_id: u64,
    cookie: u64,
    _notifier: u64,
    data: *mut c_void,
    len: usize,
) {
    // SAFETY: `arg` is the Watch's boxed Shared, alive until rados_unwatch2 returned.
    let sh = unsafe { &*arg.cast::<Shared>() };
    let payload = if data.is_null() {
        Vec::new()
    } else {
        // SAFETY: librados gives `len` bytes at `data` for the callback's duration.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec()
    };
    if payload == sh.probe {
        // SAFETY: a live ioctx, a NUL-terminated name, no payload.
        unsafe {
            ffi::rados_notify_ack(
                sh.io.h,
                sh.oid.as_ptr(),
                notify_id,
                cookie,
                std::ptr::null(),
                0,
            )
        };
        return;
    }
    let mut g = sh.inbox.lock().unwrap_or_else(|p| p.into_inner());
    g.notifies.push((notify_id, payload));
    sh.cv.notify_all();
}

unsafe extern "C" fn on_error(arg: *mut c_void, _cookie: u64, _err: i32) {
    // SAFETY: as in on_notify.
    let sh = unsafe { &*arg.cast::<Shared>() };
    sh.inbox.lock().unwrap_or_else(|p| p.into_inner()).broken = true;
    sh.cv.notify_all();
}

impl Watch {
    /// Watches `oid`; the OSD drops the watch `timeout_s` seconds after this client stops
    /// answering. Notifications with payload `probe` are acknowledged at once.
    pub fn new(
        io: &Arc<IoCtx>,
        oid: &str,
        timeout_s: u32,
        probe: &'static [u8],
    ) -> Result<Watch, CephError> {
        let shared = Box::into_raw(Box::new(Shared {
            inbox: Mutex::default(),
            cv: Condvar::new(),
            io: Arc::clone(io),
            oid: cstring(oid),
            probe,
        }));
        let mut cookie = 0u64;
        let arg = shared.cast::<c_void>();
        // SAFETY: `shared` is the live allocation made just above.
        let oid_ptr = unsafe { (*shared).oid.as_ptr() };
        // SAFETY: a live ioctx, a NUL-terminated name; `arg` stays valid until unwatched
        // (Drop), and the callbacks only read it.
        let rc = check("rados_watch3", unsafe {
            ffi::rados_watch3(
                io.h,
                oid_ptr,
                &mut cookie,
                Some(on_notify),
                Some(on_error),
                timeout_s,
                arg,
            )
        });
        if let Err(e) = rc {
            // SAFETY: no watch was made, so librados holds no copy of the pointer.
            drop(unsafe { Box::from_raw(shared) });
            return Err(e);
        }
        Ok(Watch { cookie, shared })
    }

    pub fn cookie(&self) -> u64 {
        self.cookie
    }

    /// Waits up to `timeout` for a notification or a broken watch; returns what came.
    pub fn wait(&self, timeout: Duration) -> Inbox {
        // SAFETY: the allocation lives until Drop.
        let sh = unsafe { &*self.shared };
        let mut g = sh.inbox.lock().unwrap_or_else(|p| p.into_inner());
        if g.notifies.is_empty() && !g.broken {
            g = sh
                .cv
                .wait_timeout(g, timeout)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        std::mem::take(&mut *g)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // SAFETY: the allocation lives until the end of this function.
        let io = Arc::clone(unsafe { &(*self.shared).io });
        // SAFETY: the cookie came from rados_watch3 on this ioctx. After rados_unwatch2, a
        // callback may still be queued: rados_watch_flush waits for them all, and only then
        // is the callbacks' argument freed.
        unsafe {
            ffi::rados_unwatch2(io.h, self.cookie);
            ffi::rados_watch_flush(io._cluster.0);
            drop(Box::from_raw(self.shared));
        }
    }
}
