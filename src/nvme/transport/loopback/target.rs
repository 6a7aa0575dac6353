//! The target's end of a channel ([`TargetEnd`]): takes the announced capsules, sends
//! responses, and copies to and from the host's memory region after checking key and range.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::channel::Channel;
use super::{LoopError, ToHost, Wake};

/// The target's end of a channel.
pub struct TargetEnd(pub(super) Arc<Channel>);

impl TargetEnd {
    /// The queue the host opened.
    pub fn qid(&self) -> u16 {
        self.0.qid
    }

    /// Capsule slots the host has.
    pub fn entries(&self) -> u32 {
        self.0.entries
    }

    /// Where the target sleeps: the host kicks `wake` when it sends while it is armed.
    pub fn set_wake(&self, wake: &Arc<Wake>) {
        let _ = self.0.target_wake.set(Arc::clone(wake));
    }

    /// Whether capsules wait to be taken.
    pub fn pending(&self) -> bool {
        self.0.to_target.pending()
    }

    /// Moves the announced capsules (slot, length) into `out`.
    pub fn take(&self, out: &mut Vec<(u32, u32)>) -> bool {
        self.0.to_target.take(out)
    }

    /// The capsule in `slot`, `len` bytes long (announced, not yet handed back).
    pub fn capsule(&self, slot: u32, len: u32) -> Option<&[u8]> {
        let cap = self.0.capsules.get(slot as usize)?;
        // SAFETY: an announced slot is the target's until it hands it back with
        // `ToHost::Taken`; the host does not write it meanwhile.
        let cap = unsafe { &*cap.get() };
        cap.get(..len as usize)
    }

    /// Sends `batch` (emptied) to the host and wakes it if it sleeps.
    pub fn send(&self, batch: &mut Vec<ToHost>) {
        if batch.is_empty() {
            return;
        }
        self.0.to_host.post(batch);
        self.0.host_wake.kick();
    }

    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::SeqCst)
    }

    /// Closes the queue (the host's next look fails it).
    pub fn close(&self) {
        self.0.closed.store(true, Ordering::SeqCst);
        self.0.host_wake.kick();
    }

    /// Runs `f` on host memory `addr..addr + len` named by a keyed SGL with `key`, unless
    /// the queue is closed (then the host may have reused it).
    fn with_host<R>(
        &self,
        addr: u64,
        len: usize,
        key: u32,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<R, LoopError> {
        let ch = &self.0;
        if key != ch.key {
            return Err(LoopError::Key { key });
        }
        let at = ch
            .region
            .at(addr, len)
            .ok_or(LoopError::Range { addr, len })?;
        ch.copying.fetch_add(1, Ordering::SeqCst);
        let r = if ch.closed.load(Ordering::SeqCst) {
            Err(LoopError::Closed)
        } else {
            Ok(f(at))
        };
        ch.copying.fetch_sub(1, Ordering::SeqCst);
        r
    }

    /// Copies host memory at `addr` (keyed SGL `key`) into `dst`.
    pub fn read_host(&self, addr: u64, key: u32, dst: &mut [u8]) -> Result<(), LoopError> {
        self.with_host(addr, dst.len(), key, |src| {
            // SAFETY: `src..src + len` lies in the live region (checked); `dst` is ours.
            unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) }
        })
    }

    /// Copies `src` into host memory at `addr` (keyed SGL `key`).
    pub fn write_host(&self, addr: u64, key: u32, src: &[u8]) -> Result<(), LoopError> {
        self.with_host(addr, src.len(), key, |dst| {
            // SAFETY: `dst..dst + len` lies in the live region (checked); `src` is ours.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
        })
    }
}

impl Drop for TargetEnd {
    fn drop(&mut self) {
        self.close();
    }
}
