//! The shared reservation store of gateways on one machine (two targets serving one file, or
//! one block device): a directory (`shared_reservations`) every gateway of the namespace names.
//!
//! - `state`: the document, replaced whole (temporary file, fsync, rename, fsync of the
//!   directory), so it survives a power cut;
//! - `lock`: held (`flock`) around a compare and swap;
//! - `members/<gateway>`: one per gateway with the namespace open, locked by it while it lives
//!   (a file nobody locks is a gateway gone), holding the epoch it acknowledged.
//!
//! A gateway hears of a change through inotify on the directory (the rename), and a change
//! waits for the members listed while its swap held the lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::shared::{Announce, SharedStore, ANNOUNCE_TIMEOUT};

const STATE: &str = "state";
/// How long a swap waits for another gateway's swap to let go of the lock.
const LOCK_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct DirStore {
    dir: PathBuf,
    me: String,
    /// This gateway's member file, locked while it lives.
    member: File,
    /// Watches the directory for a new `state`.
    inotify: OwnedFd,
}

fn flock(f: &File, op: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor this File owns.
    if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(e)
    }
}

impl DirStore {
    /// Joins the gateways sharing `dir` (created if missing).
    pub fn open(dir: &Path) -> std::io::Result<DirStore> {
        let members = dir.join("members");
        std::fs::create_dir_all(&members)?;
        let mut id = [0u8; 8];
        getrandom::getrandom(&mut id).map_err(std::io::Error::other)?;
        let me = format!("{}-{:016x}", std::process::id(), u64::from_le_bytes(id));
        // Made and locked outside `members/`, then renamed in: a member file is locked from
        // the moment other gateways can see it (an unlocked one is a gateway gone).
        let joining = dir.join(format!("joining.{me}"));
        let member = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&joining)?;
        if !flock(&member, libc::LOCK_EX | libc::LOCK_NB)? {
            return Err(std::io::Error::other(
                "cannot lock this gateway's member file",
            ));
        }
        member.write_all_at(&ack_bytes(0), 0)?;
        std::fs::rename(&joining, members.join(&me))?;
        // SAFETY: plain syscall; the descriptor returned is owned below.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let inotify = unsafe { OwnedFd::from_raw_fd(fd) };
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(std::io::Error::other)?;
        // SAFETY: a valid descriptor and a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_MOVED_TO) };
        if wd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(DirStore {
            dir: dir.to_owned(),
            me,
            member,
            inotify,
        })
    }

    /// The other members that live (the files of those gone are removed).
    fn live_others(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut wait = Vec::new();
        for m in self.others()? {
            match member_ack(&m)? {
                None => {
                    // Its gateway is gone: nothing to wait for.
                    let _ = std::fs::remove_file(&m);
                }
                Some(_) => wait.push(m),
            }
        }
        Ok(wait)
    }

    /// The other members' files.
    fn others(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(self.dir.join("members"))? {
            let e = e?;
            if e.file_name() != self.me.as_str() {
                v.push(e.path());
            }
        }
        Ok(v)
    }
}

fn ack_bytes(epoch: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&epoch.to_le_bytes());
    b[8..].copy_from_slice(&(!epoch).to_le_bytes());
    b
}

/// What member file `path` says: `None` when its gateway is gone, else the epoch it
/// acknowledged (0 while a write is half seen).
fn member_ack(path: &Path) -> std::io::Result<Option<u64>> {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if flock(&f, libc::LOCK_SH | libc::LOCK_NB)? {
        return Ok(None);
    }
    let mut b = [0u8; 16];
    let n = f.read_at(&mut b, 0)?;
    let epoch = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    let check = u64::from_le_bytes(b[8..].try_into().expect("8 bytes"));
    Ok(Some(if n == 16 && check == !epoch { epoch } else { 0 }))
}

impl SharedStore for DirStore {
    fn me(&self) -> &str {
        &self.me
    }

    fn describe(&self) -> String {
        self.dir.join(STATE).display().to_string()
    }

    fn load(&self) -> std::io::Result<Option<String>> {
        match File::open(self.dir.join(STATE)) {
            Ok(mut f) => {
                let mut s = String::new();
                f.read_to_string(&mut s)?;
                Ok(Some(s))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn swap(
        &self,
        current: Option<&str>,
        next: &str,
        epoch: u64,
    ) -> std::io::Result<Option<Announce>> {
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join("lock"))?;
        // Another gateway's swap holds it for a write and two fsyncs; one that never lets go
        // (a process stopped while holding it) fails the command instead of the worker.
        let deadline = Instant::now() + LOCK_WAIT;
        while !flock(&lock, libc::LOCK_EX | libc::LOCK_NB)? {
            if Instant::now() > deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{} held for over {} s",
                        self.dir.join("lock").display(),
                        LOCK_WAIT.as_secs()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if self.load()?.as_deref() != current {
            return Ok(None);
        }
        let tmp = self.dir.join(format!("{STATE}.{}.tmp", self.me));
        {
            let mut f = File::create(&tmp)?;
            f.write_all(next.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, self.dir.join(STATE))?;
        // From here the change is stored (the other gateways see it): a failure fails the
        // command, the change stands.
        if let Err(e) = File::open(&self.dir).and_then(|d| d.sync_all()) {
            let what = format!(
                "{}: the change is stored but not synced: {e}",
                self.describe()
            );
            return Ok(Some(Box::new(move || Err(what))));
        }
        // Under the lock: a gateway joining later reads this state.
        let wait = match self.live_others() {
            Ok(w) => w,
            Err(e) => {
                let what = format!(
                    "{}: cannot list the gateways to wait for: {e}",
                    self.describe()
                );
                return Ok(Some(Box::new(move || Err(what))));
            }
        };
        drop(lock);
        Ok(Some(wait_for(wait, epoch)))
    }

    fn announce(&self, epoch: u64) -> Option<Announce> {
        Some(match self.live_others() {
            Ok(w) => wait_for(w, epoch),
            Err(e) => {
                let what = format!(
                    "{}: cannot list the gateways to wait for: {e}",
                    self.describe()
                );
                Box::new(move || Err(what))
            }
        })
    }

    fn others_live(&self) -> std::io::Result<bool> {
        for m in self.others()? {
            if member_ack(&m)?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn wait_change(&self, timeout: Duration) -> bool {
        let mut p = libc::pollfd {
            fd: self.inotify.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n <= 0 {
            return false;
        }
        let mut buf = [0u8; 4096];
        // Drain the events (non-blocking): one look at the state covers them all.
        // SAFETY: reads into a buffer of its length.
        while unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
        true
    }

    fn leave(&self) {
        let _ = std::fs::remove_file(self.dir.join("members").join(&self.me));
        let _ = flock(&self.member, libc::LOCK_UN);
    }

    fn ack(&self, epoch: u64) {
        if let Err(e) = self.member.write_all_at(&ack_bytes(epoch), 0) {
            tracing::error!(error = %e, store = %self.describe(),
                "cannot acknowledge a reservation change: the other gateways' command waits");
        }
    }
}

/// Waits until each member in `wait` acknowledged `epoch` or is gone.
fn wait_for(mut wait: Vec<PathBuf>, epoch: u64) -> Announce {
    Box::new(move || {
        let deadline = Instant::now() + ANNOUNCE_TIMEOUT;
        while let Some(m) = wait.last() {
            match member_ack(m) {
                Ok(Some(e)) if e < epoch => {
                    if Instant::now() > deadline {
                        return Err(format!(
                            "gateway {} did not acknowledge epoch {epoch} within {} s",
                            m.display(),
                            ANNOUNCE_TIMEOUT.as_secs()
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Ok(_) => {
                    wait.pop();
                }
                Err(e) => return Err(format!("{}: {e}", m.display())),
            }
        }
        Ok(())
    })
}

impl Drop for DirStore {
    fn drop(&mut self) {
        self.leave();
    }
}
