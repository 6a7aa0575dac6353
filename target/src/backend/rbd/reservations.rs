//! The shared reservation store of an RBD namespace: every gateway of the image finds it.
//!
//! - The document is the image's metadata `rdmablk.reservations` (an omap value of the image's
//!   header object, as `rbd image-meta get` shows it), written only if the header is still at
//!   the version it was read at (compare and swap on the object version).
//! - Changes are announced on the object `rdmablk_reservations.<image id>` by notify, which
//!   completes once every gateway watching it acknowledged (each after enforcing the change),
//!   or fails after [`ANNOUNCE_TIMEOUT`]. A gateway that stops answering loses its watch after
//!   [`WATCH_TIMEOUT_S`], and a notify then no longer waits for it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::sys::{CephError, Cluster, Image, IoCtx, Watch};
use crate::namespace::reservation::shared::{Announce, SharedStore, ANNOUNCE_TIMEOUT};

/// The image metadata key (omap keys of image metadata carry librbd's `metadata_` prefix).
const KEY: &str = "metadata_rdmablk.reservations";
/// Seconds after which the OSD drops the watch of a gateway that stopped answering.
const WATCH_TIMEOUT_S: u32 = 10;
const CHANGE: &[u8] = b"rdmablk-reservations-change";
const PROBE: &[u8] = b"rdmablk-reservations-probe";
/// How long a probe for other gateways waits.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct RbdStore {
    /// `pool[/namespace]/image`.
    name: String,
    me: String,
    instance: u64,
    header: String,
    oid: String,
    /// Reads and swaps (the object version is the ioctx's last, so one at a time).
    data: Mutex<IoCtx>,
    /// Watch and notify.
    events: Arc<IoCtx>,
    watch: Mutex<Option<Watch>>,
    /// Notifications taken (id, the cookie of the watch they came on), acknowledged by the
    /// next `ack`.
    taken: Mutex<Vec<(u64, u64)>>,
}

fn io_err(e: CephError) -> std::io::Error {
    std::io::Error::new(
        std::io::Error::from_raw_os_error(e.errno).kind(),
        e.to_string(),
    )
}

impl RbdStore {
    /// Joins the gateways of `image` (named `name`): watches its announcement object.
    pub fn open(
        cluster: &Arc<Cluster>,
        pool: &str,
        ns: Option<&str>,
        image: &Image,
        name: &str,
    ) -> Result<RbdStore, CephError> {
        let id = image.id()?;
        let data = IoCtx::open(cluster, pool, ns)?;
        let events = Arc::new(IoCtx::open(cluster, pool, ns)?);
        let oid = format!("rdmablk_reservations.{id}");
        events.touch(&oid)?;
        let watch = Watch::new(&events, &oid, WATCH_TIMEOUT_S, PROBE)?;
        let instance = cluster.instance_id();
        Ok(RbdStore {
            name: name.to_owned(),
            me: format!("client.{instance}"),
            instance,
            header: format!("rbd_header.{id}"),
            oid,
            data: Mutex::new(data),
            events,
            watch: Mutex::new(Some(watch)),
            taken: Mutex::new(Vec::new()),
        })
    }

    fn cookie(&self) -> Option<u64> {
        self.watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Watch::cookie)
    }

    /// Watches the announcement object again; true once watching (the caller reads the
    /// document: changes may have come meanwhile).
    fn rewatch(&self) -> bool {
        let mut w = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        if w.is_some() {
            return true;
        }
        match Watch::new(&self.events, &self.oid, WATCH_TIMEOUT_S, PROBE) {
            Ok(n) => {
                tracing::info!(object = %self.oid, "reservation watch restored");
                *w = Some(n);
                true
            }
            Err(e) => {
                tracing::error!(object = %self.oid, error = %e,
                    "cannot watch the reservation object; retrying");
                false
            }
        }
    }

    fn read(&self) -> std::io::Result<(Option<String>, u64)> {
        let io = self.data.lock().unwrap_or_else(|p| p.into_inner());
        let (v, version) = io.omap_get(&self.header, KEY).map_err(io_err)?;
        let text = v
            .map(String::from_utf8)
            .transpose()
            .map_err(|_| std::io::Error::other("the image metadata is not UTF-8"))?;
        Ok((text, version))
    }
}

impl SharedStore for RbdStore {
    fn me(&self) -> &str {
        &self.me
    }

    fn describe(&self) -> String {
        format!("image {} metadata rdmablk.reservations", self.name)
    }

    fn load(&self) -> std::io::Result<Option<String>> {
        self.read().map(|(t, _)| t)
    }

    fn swap(
        &self,
        current: Option<&str>,
        next: &str,
        epoch: u64,
    ) -> std::io::Result<Option<Announce>> {
        let (text, version) = self.read()?;
        if text.as_deref() != current {
            return Ok(None);
        }
        let written = {
            let io = self.data.lock().unwrap_or_else(|p| p.into_inner());
            io.omap_set_at(&self.header, KEY, next.as_bytes(), version)
        };
        match written {
            Ok(true) => {}
            // The header moved (another gateway, or librbd): read again.
            Ok(false) => return Ok(None),
            Err(e) => {
                // The write may have been applied (a timeout after it reached the OSD): what
                // is stored decides.
                match self.read() {
                    Ok((Some(t), _)) if t == next => {
                        tracing::warn!(image = %self.name, error = %e,
                            "the reservation write reported an error but was applied");
                    }
                    _ => return Err(io_err(e)),
                }
            }
        }
        Ok(self.announce(epoch))
    }

    fn announce(&self, _epoch: u64) -> Option<Announce> {
        let events = Arc::clone(&self.events);
        let oid = self.oid.clone();
        // Every gateway watching reads the document and acknowledges once it enforces it.
        Some(Box::new(move || {
            events
                .notify(&oid, CHANGE, ANNOUNCE_TIMEOUT)
                .map(|_| ())
                .map_err(|e| format!("{oid}: {e} (a gateway did not acknowledge in time)"))
        }))
    }

    fn others_live(&self) -> std::io::Result<bool> {
        let mine = (self.instance, self.cookie().unwrap_or(0));
        // Every gateway watching acknowledges a probe at once (in its watch callback).
        let acked = match self.events.notify(&self.oid, PROBE, PROBE_TIMEOUT) {
            Ok(a) => a,
            // Some watcher did not answer: it is there (its watch not yet dropped).
            Err(e) if e.errno == libc::ETIMEDOUT => return Ok(true),
            Err(e) => return Err(io_err(e)),
        };
        Ok(acked.iter().any(|a| *a != mine))
    }

    fn wait_change(&self, timeout: Duration) -> bool {
        let inbox = {
            let w = self.watch.lock().unwrap_or_else(|p| p.into_inner());
            w.as_ref().map(|w| (w.wait(timeout), w.cookie()))
        };
        let Some((inbox, cookie)) = inbox else {
            // No watch (it broke and could not be made again): try again, and read the
            // document once it is back (changes may have been missed meanwhile).
            std::thread::sleep(timeout);
            return self.rewatch();
        };
        // Taken with the cookie of the watch they came on (acknowledged on it).
        self.taken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(inbox.notifies.iter().map(|(id, _)| (*id, cookie)));
        if inbox.broken {
            tracing::warn!(object = %self.oid, "reservation watch lost; watching again");
            self.watch.lock().unwrap_or_else(|p| p.into_inner()).take();
            return self.rewatch() || !inbox.notifies.is_empty();
        }
        !inbox.notifies.is_empty()
    }

    fn ack(&self, _epoch: u64) {
        let ids = std::mem::take(&mut *self.taken.lock().unwrap_or_else(|p| p.into_inner()));
        for (id, cookie) in ids {
            if let Err(e) = self.events.notify_ack(&self.oid, id, cookie) {
                tracing::error!(object = %self.oid, error = %e, "cannot acknowledge a reservation change");
            }
        }
    }

    fn leave(&self) {
        self.watch.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}
