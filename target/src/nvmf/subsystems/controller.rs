//! Controllers: created by an admin-queue Connect, shared by the controller's queues (which
//! may live on different workers), removed when the admin queue goes.
//!
//! Everything a queue on another worker needs to see is atomic or behind a short mutex: the
//! keep-alive clock, the `dead` flag that tells I/O queues to tear down, CC/CSTS, the number
//! of I/O queues granted and the connected queue IDs.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use rdmablk::nvme::admin::AsyncEvent;
use rdmablk::nvme::identify::oaes;
use rdmablk::nvme::properties::{shn, shst};
use rdmablk::nvme::{Cc, Csts};

use super::ana::AnaPort;
use super::subsystem::Subsystem;
use crate::namespace::Namespace;
use crate::nvmf::transport::Variant;

/// Register and feature state of one controller.
#[derive(Debug)]
pub struct CtrlState {
    pub cc: Cc,
    pub csts: Csts,
    /// I/O queues granted by Set Features Number of Queues (1-based count).
    pub io_queues: u16,
    /// Async event configuration (feature 0x0B).
    pub aec: u32,
    /// Volatile write cache enable (feature 0x06).
    pub vwc: bool,
    /// `connected[qid]`: a queue with that ID is connected.
    connected: Vec<bool>,
}

/// One controller.
#[derive(Debug)]
pub struct Controller {
    pub cntlid: u16,
    pub subsys: Arc<Subsystem>,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// The ANA states of the listener the host connected through.
    pub ana: Arc<AnaPort>,
    /// How the host reached it (its admin queue's connection).
    pub path: HostPath,
    state: Mutex<CtrlState>,
    /// Keep-alive timeout, ms (0: none).
    kato_ms: AtomicU64,
    /// Last sign of life (Keep Alive or any command), ms since the target started.
    last_seen_ms: AtomicU64,
    /// Set when the controller is torn down: every queue of it disconnects.
    dead: AtomicBool,
    /// Commands of its queues that had to wait for a data buffer (counted on the wait path
    /// only, never per command).
    pool_waits: AtomicU64,
    /// Asynchronous events waiting for an Async Event Request, and the changed namespaces.
    events: Mutex<Events>,
}

/// A controller's asynchronous events (NVMe Base 5.2): at most one outstanding per kind
/// until the host reads the log page that clears it.
#[derive(Debug, Default)]
struct Events {
    /// Events to hand to the next Async Event Requests (AER completion dw0).
    pending: VecDeque<u32>,
    /// Namespaces changed since the host last read the Changed Namespace List.
    changed_ns: Vec<u32>,
    /// A namespace event was sent (or is pending) and not yet cleared by a log read.
    ns_masked: bool,
    /// The same for the discovery log.
    discovery_masked: bool,
    /// The same for the ANA log.
    ana_masked: bool,
    /// Reservation Notification log pages waiting to be read (count, type, NSID), oldest
    /// first, and the count of the last one made.
    resv_log: VecDeque<(u64, u8, u32)>,
    resv_count: u64,
    /// A reservation event was sent (or is pending) and the log not read since.
    resv_masked: bool,
    /// Reservation Notification Mask (Features 0x82) by NSID: bit n masks notice type n.
    resv_notice_mask: std::collections::HashMap<u32, u8>,
}

/// The notice types Features 0x82 can mask: Registration Preempted (bit 1), Reservation
/// Released (bit 2), Reservation Preempted (bit 3).
pub const RESV_NOTICE_MASK_BITS: u32 = 0b1110;

/// Reservation Notification log pages kept per controller (as nvmet); beyond, the oldest
/// go and the next page's count says how many were lost.
const RESV_LOG_MAX: usize = 64;

/// Changed namespace IDs kept at most; beyond, the log says "more than 1024" (0xFFFFFFFF).
const CHANGED_NS_MAX: usize = 1024;

impl Controller {
    pub fn state(&self) -> MutexGuard<'_, CtrlState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a command of this controller's that had to wait for a data buffer.
    pub fn note_pool_wait(&self) {
        self.pool_waits.fetch_add(1, Ordering::Relaxed);
    }

    /// Commands of this controller's that had to wait for a data buffer.
    pub fn pool_waits(&self) -> u64 {
        self.pool_waits.load(Ordering::Relaxed)
    }

    pub fn kato_ms(&self) -> u64 {
        self.kato_ms.load(Ordering::Relaxed)
    }

    pub fn set_kato_ms(&self, ms: u64) {
        self.kato_ms.store(ms, Ordering::Relaxed);
    }

    /// Records a sign of life at `now_ms`. Stored only when the millisecond changed: the
    /// controller's queues run on several workers, and a store per command would bounce its
    /// cache line between them.
    pub fn touch(&self, now_ms: u64) {
        if self.last_seen_ms.load(Ordering::Relaxed) != now_ms {
            self.last_seen_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    /// Whether the keep-alive timer expired at `now_ms`.
    pub fn keep_alive_expired(&self, now_ms: u64) -> bool {
        let kato = self.kato_ms();
        kato != 0 && now_ms.saturating_sub(self.last_seen_ms.load(Ordering::Relaxed)) > kato
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Marks the controller dead: its queues disconnect at their worker's next check.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::Release);
    }

    /// Whether I/O may be processed (CC.EN and CSTS.RDY, not shut down).
    pub fn is_ready(&self) -> bool {
        let s = self.state();
        s.cc.en() && s.csts.rdy()
    }

    /// Active namespace `nsid` as this controller's host sees it (hidden ones are inactive).
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        self.subsys
            .namespace(nsid)
            .filter(|ns| ns.visible_to(&self.hostnqn))
    }

    /// The namespaces this controller's host sees, ascending by NSID.
    pub fn visible_namespaces(&self) -> impl Iterator<Item = Arc<Namespace>> + '_ {
        let all = self.subsys.namespaces();
        (0..all.len())
            .map(move |i| Arc::clone(&all[i]))
            .filter(|ns| ns.visible_to(&self.hostnqn))
    }

    /// Namespace `nsid` was added, removed or resized: remember it for the Changed
    /// Namespace List and raise a Namespace Attribute Changed event, if the host enabled
    /// them (Set Features Async Event Configuration bit 8).
    pub fn namespace_changed(&self, nsid: u32) {
        if self.state().aec & oaes::NS_ATTR == 0 {
            return;
        }
        let mut e = self.events();
        if !e.changed_ns.contains(&nsid) && e.changed_ns.len() <= CHANGED_NS_MAX {
            e.changed_ns.push(nsid);
        }
        if !e.ns_masked {
            e.ns_masked = true;
            e.pending.push_back(AsyncEvent::ns_changed().to_dw0());
        }
    }

    /// The discovery log may have changed: raise a Discovery Log Change event, if the host
    /// enabled them (AEC bit 31).
    pub fn discovery_changed(&self) {
        if self.state().aec & oaes::DISCOVERY_LOG_CHANGE == 0 {
            return;
        }
        let mut e = self.events();
        if !e.discovery_masked {
            e.discovery_masked = true;
            e.pending
                .push_back(AsyncEvent::discovery_changed().to_dw0());
        }
    }

    /// An ANA group's state changed on this controller's listener: raise an Asymmetric
    /// Namespace Access Change event, if the host enabled them (AEC bit 11).
    pub fn ana_changed(&self) {
        if self.state().aec & oaes::ANA_CHANGE == 0 {
            return;
        }
        let mut e = self.events();
        if !e.ana_masked {
            e.ana_masked = true;
            e.pending.push_back(AsyncEvent::ana_changed().to_dw0());
        }
    }

    /// A reservation change concerns this controller's host: a Reservation Notification log
    /// page of `kind` for namespace `nsid`, and an event (one until the host reads the log).
    pub fn reservation_notice(&self, kind: u8, nsid: u32) {
        let mut e = self.events();
        // A masked type makes no page and no event (Features 0x82).
        if e.resv_notice_mask
            .get(&nsid)
            .is_some_and(|m| u32::from(*m) & (1u32 << kind) != 0)
        {
            return;
        }
        // Count 0 is "no page": skip it when the count wraps.
        e.resv_count = e.resv_count.wrapping_add(1).max(1);
        let count = e.resv_count;
        if e.resv_log.len() == RESV_LOG_MAX {
            e.resv_log.pop_front();
        }
        e.resv_log.push_back((count, kind, nsid));
        if !e.resv_masked {
            e.resv_masked = true;
            e.pending.push_back(AsyncEvent::reservation_log().to_dw0());
        }
    }

    /// Features 0x82 of namespace `nsid`: the notice types masked.
    pub fn reservation_notice_mask(&self, nsid: u32) -> u8 {
        self.events()
            .resv_notice_mask
            .get(&nsid)
            .copied()
            .unwrap_or(0)
    }

    /// Sets Features 0x82 of namespace `nsid` (bits within [`RESV_NOTICE_MASK_BITS`]).
    pub fn set_reservation_notice_mask(&self, nsid: u32, mask: u8) {
        self.events().resv_notice_mask.insert(nsid, mask);
    }

    /// Takes the oldest Reservation Notification log page: (count, type, pages left, NSID),
    /// all zero when none is waiting; unless `retain`, re-arms the event (and raises it again
    /// if pages are left).
    pub fn take_reservation_notice(&self, retain: bool) -> (u64, u8, u8, u32) {
        let mut e = self.events();
        let page = e.resv_log.pop_front();
        let left = e.resv_log.len().min(255) as u8;
        if !retain {
            e.resv_masked = false;
            if left > 0 {
                e.resv_masked = true;
                e.pending.push_back(AsyncEvent::reservation_log().to_dw0());
            }
        }
        match page {
            Some((count, kind, nsid)) => (count, kind, left, nsid),
            None => (0, 0, 0, 0),
        }
    }

    /// The host read the ANA log; unless `retain`, re-arms the ANA event.
    pub fn ana_log_read(&self, retain: bool) {
        if !retain {
            self.events().ana_masked = false;
        }
    }

    /// The next event for an Async Event Request.
    pub fn take_event(&self) -> Option<u32> {
        self.events().pending.pop_front()
    }

    /// Reads the Changed Namespace List; unless `retain` (RAE), clears it and re-arms the
    /// namespace event.
    pub fn changed_namespaces(&self, retain: bool) -> Vec<u32> {
        let mut e = self.events();
        let mut list = e.changed_ns.clone();
        if list.len() > CHANGED_NS_MAX {
            list = vec![u32::MAX; CHANGED_NS_MAX + 1];
        }
        if !retain {
            e.changed_ns.clear();
            e.ns_masked = false;
        }
        list
    }

    /// The host read the discovery log; unless `retain`, re-arms the discovery event.
    pub fn discovery_log_read(&self, retain: bool) {
        if !retain {
            self.events().discovery_masked = false;
        }
    }

    fn events(&self) -> MutexGuard<'_, Events> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers I/O queue `qid`; false if it is out of range or already connected.
    pub fn attach_queue(&self, qid: u16) -> bool {
        let mut s = self.state();
        match s.connected.get_mut(usize::from(qid)) {
            Some(c) if !*c => {
                *c = true;
                true
            }
            _ => false,
        }
    }

    /// I/O queues connected right now (the admin queue is not counted).
    pub fn io_queues_connected(&self) -> usize {
        self.state()
            .connected
            .iter()
            .skip(1)
            .filter(|&&c| c)
            .count()
    }

    pub fn detach_queue(&self, qid: u16) {
        if let Some(c) = self.state().connected.get_mut(usize::from(qid)) {
            *c = false;
        }
    }

    /// Applies a Property Set of CC; returns the new CSTS.
    pub fn write_cc(&self, value: u32) -> Csts {
        let mut s = self.state();
        let new = Cc(value);
        let old = s.cc;
        if new.en() && !old.en() {
            // The entry sizes must be the only ones we support (64-byte SQE, 16-byte CQE).
            let ok = new.iosqes() == 6 && new.iocqes() == 4 && new.mps() == 0 && new.css() == 0;
            s.csts = s.csts.with_rdy(ok).with_cfs(!ok).with_shst(shst::NORMAL);
        } else if !new.en() && old.en() {
            s.csts = s.csts.with_rdy(false).with_shst(shst::NORMAL);
        }
        if new.shn() != shn::NONE && old.shn() == shn::NONE {
            // Shut down: no more I/O until the host resets the controller (CC.EN 1 -> 0 -> 1),
            // as nvmet (`nvmet_clear_ctrl` clears RDY) and SPDK (disconnects the I/O queues)
            // answer it.
            s.csts = s.csts.with_rdy(false).with_shst(shst::COMPLETE);
        }
        s.cc = new;
        s.csts
    }
}

/// How a host reached its controller: the transport of the listener its admin queue came
/// through, that listener's variant of it (the RDMA provider: "verbs", "soft"), and the
/// host's address (`rdmablk-ctl status` and `top`; discovery lists what the variant may
/// reach). Plain values: the controller knows no transport type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPath {
    pub transport: crate::config::Transport,
    pub variant: Variant,
    pub peer: std::net::SocketAddr,
}

/// What a new controller is made of (an admin-queue Connect's answer).
#[derive(Debug)]
pub struct NewController {
    pub subsys: Arc<Subsystem>,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    pub ana: Arc<AnaPort>,
    pub path: HostPath,
    pub kato_ms: u64,
    pub max_queues: u16,
}

/// Every live controller of the target, by cntlid.
#[derive(Debug, Default)]
pub struct ControllerTable {
    inner: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    by_id: HashMap<u16, Arc<Controller>>,
    next: u16,
}

impl ControllerTable {
    /// Creates a controller with a fresh cntlid from the subsystem's range; `None` when all
    /// its IDs are taken.
    pub fn create(&self, new: NewController, now_ms: u64) -> Option<Arc<Controller>> {
        let NewController {
            subsys,
            hostnqn,
            hostid,
            ana,
            path,
            kato_ms,
            max_queues,
        } = new;
        let (lo, hi) = subsys.cntlid_range();
        let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let span = usize::from(hi - lo) + 1;
        let start = usize::from(t.next.saturating_sub(lo));
        let cntlid = (0..span).find_map(|i| {
            let id = lo + ((start + i) % span) as u16;
            (!t.by_id.contains_key(&id)).then_some(id)
        })?;
        t.next = cntlid.wrapping_add(1);
        let mut connected = vec![false; usize::from(max_queues)];
        connected[0] = true;
        let ctrl = Arc::new(Controller {
            cntlid,
            subsys,
            hostnqn,
            hostid,
            ana,
            path,
            state: Mutex::new(CtrlState {
                cc: Cc(0),
                csts: Csts(0),
                io_queues: max_queues.saturating_sub(1),
                aec: 0,
                vwc: true,
                connected,
            }),
            kato_ms: AtomicU64::new(kato_ms),
            last_seen_ms: AtomicU64::new(now_ms),
            dead: AtomicBool::new(false),
            pool_waits: AtomicU64::new(0),
            events: Mutex::new(Events::default()),
        });
        t.by_id.insert(cntlid, Arc::clone(&ctrl));
        Some(ctrl)
    }

    pub fn get(&self, cntlid: u16) -> Option<Arc<Controller>> {
        let t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        t.by_id.get(&cntlid).cloned()
    }

    /// Removes and kills the controller (its admin queue went away).
    pub fn remove(&self, cntlid: u16) {
        let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = t.by_id.remove(&cntlid) {
            c.kill();
        }
    }

    /// Every live controller, in cntlid order.
    pub fn all(&self) -> Vec<Arc<Controller>> {
        let t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = t.by_id.values().cloned().collect();
        v.sort_by_key(|c| c.cntlid);
        v
    }

    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_id
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Milliseconds since `epoch`: the clock keep-alive uses.
pub fn now_ms(epoch: Instant) -> u64 {
    epoch.elapsed().as_millis() as u64
}
