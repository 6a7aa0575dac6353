//! The one soft device of a process (`soft0`), its protection domains and its key table.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::fabric::{DeviceAttr, FabricError, Result, SrqInit};

use super::cm::Listener;
use super::cq::Cq;
use super::mr::{KeyEntry, KEY_INDEX_MAX};
use super::srq::Srq;

/// The device name.
pub const DEVICE_NAME: &str = "soft0";

/// Limits of the soft device.
pub(super) const MAX_QP: u32 = 65_536;
pub(super) const MAX_QP_WR: u32 = 16_384;
pub(super) const MAX_SGE: u32 = 32;
pub(super) const MAX_INLINE: u32 = 4096;
pub(super) const MAX_CQE: u32 = 1 << 22;
pub(super) const MAX_CQ: u32 = 65_536;
pub(super) const MAX_RD_ATOM: u32 = 128;

/// Entries a CQ of the soft device may have: [`MAX_CQE`], or fewer when the environment's
/// `RDMABLK_SOFT_MAX_CQE` says so (1 or more), for tests of what an application does on a
/// device with small CQs (rxe's are 32,767 entries).
pub(super) fn max_cqe() -> u32 {
    static MAX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| {
        std::env::var("RDMABLK_SOFT_MAX_CQE")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|&n| n > 0)
            .map_or(MAX_CQE, |n| n.min(MAX_CQE))
    })
}

/// One slot of the key table: what a key index names now, and the tag its next key gets.
struct Slot {
    next_tag: u8,
    entry: Option<KeyEntry>,
}

/// Memory regions and windows by key index (the upper 24 bits of an lkey / rkey).
#[derive(Default)]
struct KeyTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

pub(super) struct DeviceInner {
    keys: RwLock<KeyTable>,
    next_pd: AtomicU32,
    next_qpn: AtomicU32,
}

impl DeviceInner {
    /// Reserves a key index; `make` builds the entry from the first key (index << 8 | tag).
    pub fn add_key(&self, make: impl FnOnce(u32) -> KeyEntry) -> Result<KeyEntry> {
        let mut t = self.keys.write().unwrap();
        let index = match t.free.pop() {
            Some(i) => i,
            None => {
                let i = t.slots.len() as u32 + 1; // index 0 is never used: key 0 is invalid
                if i > KEY_INDEX_MAX {
                    return Err(FabricError::InvalidArgument {
                        what: format!("soft device: all {KEY_INDEX_MAX} keys in use"),
                    });
                }
                t.slots.push(Slot {
                    next_tag: 0,
                    entry: None,
                });
                i
            }
        };
        let slot = &mut t.slots[index as usize - 1];
        let entry = make(index << 8 | slot.next_tag as u32);
        slot.entry = Some(entry.clone());
        Ok(entry)
    }

    /// Frees the key index of `key`; the next user of the index starts at `next_tag`.
    pub fn remove_key(&self, key: u32, next_tag: u8) {
        let index = key >> 8;
        let mut t = self.keys.write().unwrap();
        if let Some(slot) = t.slots.get_mut((index as usize).wrapping_sub(1)) {
            if slot.entry.take().is_some() {
                slot.next_tag = next_tag;
                t.free.push(index);
            }
        }
    }

    /// What the index of `key` names now (the caller compares the full key).
    pub fn lookup(&self, key: u32) -> Option<KeyEntry> {
        let t = self.keys.read().unwrap();
        let slot = t.slots.get(((key >> 8) as usize).wrapping_sub(1))?;
        slot.entry.clone()
    }

    pub fn alloc_qpn(&self) -> u32 {
        self.next_qpn.fetch_add(1, Ordering::Relaxed)
    }
}

fn device() -> Arc<DeviceInner> {
    static DEV: OnceLock<Arc<DeviceInner>> = OnceLock::new();
    DEV.get_or_init(|| {
        Arc::new(DeviceInner {
            keys: RwLock::new(KeyTable::default()),
            next_pd: AtomicU32::new(1),
            // Small QP numbers are reserved on real devices; keep the look.
            next_qpn: AtomicU32::new(0x11),
        })
    })
    .clone()
}

/// The soft RDMA device. Cheap to clone.
#[derive(Clone)]
pub struct Device(pub(super) Arc<DeviceInner>);

impl Device {
    pub fn list() -> Result<Vec<String>> {
        Ok(vec![DEVICE_NAME.to_string()])
    }

    pub fn open(name: Option<&str>) -> Result<Device> {
        match name {
            None | Some(DEVICE_NAME) => Ok(Device(device())),
            Some(other) => Err(FabricError::NoDevice {
                what: format!("{other:?} (the soft provider has only {DEVICE_NAME:?})"),
            }),
        }
    }

    /// Every address goes through `soft0` (it runs over the host's TCP stack).
    pub fn open_for_addr(_addr: IpAddr) -> Result<Device> {
        Device::open(None)
    }

    pub fn name(&self) -> String {
        DEVICE_NAME.to_string()
    }

    pub fn attr(&self) -> Result<DeviceAttr> {
        Ok(DeviceAttr {
            name: DEVICE_NAME.to_string(),
            max_qp: MAX_QP,
            max_qp_wr: MAX_QP_WR,
            max_sge: MAX_SGE,
            max_cqe: max_cqe(),
            max_cq: MAX_CQ,
            max_mr: KEY_INDEX_MAX,
            max_mr_size: super::wire::MAX_MSG_BYTES as u64 + 1,
            max_mw: KEY_INDEX_MAX,
            max_qp_rd_atom: MAX_RD_ATOM,
            max_qp_init_rd_atom: MAX_RD_ATOM,
            mw_type2: true,
            mem_mgt_extensions: true,
            port_active: true,
            max_srq: MAX_QP,
            max_srq_wr: MAX_QP_WR,
            max_srq_sge: MAX_SGE,
        })
    }

    pub fn alloc_pd(&self) -> Result<Pd> {
        let id = self.0.next_pd.fetch_add(1, Ordering::Relaxed);
        Ok(Pd(Arc::new(PdInner {
            id,
            dev: self.clone(),
        })))
    }

    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        Cq::new(depth)
    }

    pub fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        Listener::bind(self.clone(), addr, backlog)
    }
}

pub(super) struct PdInner {
    pub id: u32,
    pub dev: Device,
}

/// A protection domain. Cheap to clone.
#[derive(Clone)]
pub struct Pd(pub(super) Arc<PdInner>);

impl Pd {
    pub(super) fn id(&self) -> u32 {
        self.0.id
    }

    pub(super) fn dev(&self) -> &Arc<DeviceInner> {
        &self.0.dev.0
    }

    pub fn create_srq(&self, init: SrqInit) -> Result<Srq> {
        Srq::new(self, init)
    }
}
