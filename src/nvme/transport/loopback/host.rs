//! The host's end of a channel: [`connect`] opens a queue to a listener, and [`HostEnd`]
//! writes capsules into its slots, sends them in batches and takes the target's responses.

use std::cell::UnsafeCell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::channel::{Channel, Mailbox};
use super::listener::listeners;
use super::{
    LoopError, Region, Side, TargetEnd, ToHost, Wake, CAPSULE_BYTES, CAPSULE_DATA, MAX_ENTRIES,
};
use crate::nvme::SQE_LEN;

static NEXT_KEY: AtomicU32 = AtomicU32::new(0x100);

/// Opens queue `qid` of `entries` capsule slots to the listener at `addr`, through which the
/// target may reach `region`. Its first command is the Fabrics Connect, as on every
/// transport.
pub fn connect(
    addr: SocketAddr,
    qid: u16,
    entries: u32,
    region: Region,
) -> Result<HostEnd, LoopError> {
    if entries == 0 || entries > MAX_ENTRIES {
        return Err(LoopError::Entries(entries));
    }
    let ch = Arc::new(Channel {
        qid,
        entries,
        key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
        region,
        capsules: (0..entries)
            .map(|_| UnsafeCell::new([0u8; CAPSULE_BYTES]))
            .collect(),
        to_target: Mailbox::new(entries as usize),
        to_host: Mailbox::new(2 * entries as usize),
        closed: AtomicBool::new(false),
        copying: AtomicU32::new(0),
        host_wake: Wake::new(Side::Host)?,
        target_wake: OnceLock::new(),
    });
    let tx = listeners()
        .get(&addr)
        .cloned()
        .ok_or(LoopError::Refused(addr))?;
    tx.send(TargetEnd(Arc::clone(&ch)))
        .map_err(|_| LoopError::Refused(addr))?;
    Ok(HostEnd {
        ch,
        free: (0..entries).rev().collect(),
        batch: Vec::with_capacity(entries as usize),
    })
}

/// The host's end of a channel.
pub struct HostEnd {
    ch: Arc<Channel>,
    free: Vec<u32>,
    batch: Vec<(u32, u32)>,
}

impl HostEnd {
    /// The key the host's keyed SGLs carry.
    pub fn key(&self) -> u32 {
        self.ch.key
    }

    pub fn entries(&self) -> u32 {
        self.ch.entries
    }

    /// Writes a capsule (`sqe` and in-capsule `data`) into a free slot, to leave with the
    /// next [`HostEnd::flush`]; its slot, or None if none is free (every capsule in flight).
    pub fn queue(&mut self, sqe: &[u8; SQE_LEN], data: &[u8]) -> Option<u32> {
        assert!(data.len() <= CAPSULE_DATA, "in-capsule data beyond a slot");
        let slot = self.free.pop()?;
        // SAFETY: the slot is the host's (free): the target reads it only once announced.
        let cap = unsafe { &mut *self.ch.capsules[slot as usize].get() };
        cap[..SQE_LEN].copy_from_slice(sqe);
        cap[SQE_LEN..SQE_LEN + data.len()].copy_from_slice(data);
        self.batch.push((slot, (SQE_LEN + data.len()) as u32));
        Some(slot)
    }

    /// As [`HostEnd::queue`] with the capsule's bytes as given, whatever they hold (a test
    /// host's malformed capsules).
    pub fn queue_raw(&mut self, capsule: &[u8]) -> Option<u32> {
        assert!(capsule.len() <= CAPSULE_BYTES, "capsule beyond a slot");
        let slot = self.free.pop()?;
        // SAFETY: the slot is the host's (free): the target reads it only once announced.
        let cap = unsafe { &mut *self.ch.capsules[slot as usize].get() };
        cap[..capsule.len()].copy_from_slice(capsule);
        self.batch.push((slot, capsule.len() as u32));
        Some(slot)
    }

    /// Hands the queued capsules to the target (one lock for the batch) and wakes it if it
    /// sleeps.
    pub fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        self.ch.to_target.post(&mut self.batch);
        if let Some(w) = self.ch.target_wake.get() {
            w.kick();
        }
    }

    /// Appends what the target sent to `out` (slots it took are free again).
    pub fn poll(&mut self, out: &mut Vec<ToHost>) {
        let from = out.len();
        if self.ch.to_host.take(out) {
            for m in &out[from..] {
                if let ToHost::Taken(slot) = m {
                    self.free.push(*slot);
                }
            }
        }
    }

    pub fn is_closed(&self) -> bool {
        self.ch.closed.load(Ordering::SeqCst)
    }

    /// Before sleeping in [`HostEnd::wait`]; poll once more after it.
    pub fn arm(&self) {
        self.ch.host_wake.arm();
    }

    /// Sleeps until the target sends, closes, or `timeout` passes (watching for a while
    /// before it sleeps: [`Wake::spin_then_wait`]).
    pub fn wait(&self, timeout: Duration) {
        let ch = &self.ch;
        let _ = ch.host_wake.spin_then_wait(None, timeout, || {
            ch.to_host.pending() || ch.closed.load(Ordering::SeqCst)
        });
    }

    /// Closes the queue; returns once the target reaches none of the host's memory.
    pub fn close(&mut self) {
        self.ch.closed.store(true, Ordering::SeqCst);
        if let Some(w) = self.ch.target_wake.get() {
            w.kick();
        }
        while self.ch.copying.load(Ordering::SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

impl Drop for HostEnd {
    fn drop(&mut self) {
        self.close();
    }
}
