//! Subsystems as the engine sees them: NQN, host access list, serial and namespaces.
//!
//! The namespaces and the host list change at run time (reload, `rdmablk-ctl`): each is an
//! immutable list swapped whole (`ArcSwap`), so the I/O path reads a consistent list without a
//! lock, and a change is one atomic store that the next command sees.

use std::sync::Arc;

use arc_swap::ArcSwap;

use rdmablk::nvme::tls::ConfiguredPsk;

use crate::config::{HostAuth, HostEntry, SubsystemConfig, CNTLID_MAX, CNTLID_MIN};
use crate::namespace::Namespace;

/// What a subsystem serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubsystemKind {
    /// An NVM subsystem: namespaces, I/O queues.
    Nvm,
    /// The discovery subsystem: an admin queue and the Discovery Log Page only (see
    /// [`crate::nvmf::commands::discovery`]).
    Discovery,
}

/// Who may connect, and with which DH-HMAC-CHAP keys (resolved when the list is built: at
/// start, and at each reload, so changed keys apply to new connections).
#[derive(Debug, Default)]
pub struct HostList {
    pub allow_any_host: bool,
    hosts: Vec<AllowedHost>,
}

/// One allow-list entry, its keys resolved.
#[derive(Debug)]
struct AllowedHost {
    nqn: String,
    auth: Result<Option<Arc<HostAuth>>, String>,
    /// Its NVMe/TCP TLS PSK for this subsystem (`Err`: its file could not be read).
    tls_psk: Result<Option<ConfiguredPsk>, String>,
}

impl AllowedHost {
    fn new(e: &HostEntry) -> AllowedHost {
        let auth = e.resolve();
        if let Err(why) = &auth {
            // Validation loaded the same keys moments ago: a key file changed since.
            tracing::error!(hostnqn = e.nqn(), "host refused: {why}");
        }
        let tls_psk = e.tls_psk();
        if let Err(why) = &tls_psk {
            tracing::error!(hostnqn = e.nqn(), "host's TLS PSK not loaded: {why}");
        }
        AllowedHost {
            nqn: e.nqn().to_owned(),
            auth,
            tls_psk,
        }
    }
}

impl HostList {
    pub fn allows(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h.nqn == hostnqn)
    }

    /// The allowed host NQNs.
    pub fn nqns(&self) -> Vec<String> {
        self.hosts.iter().map(|h| h.nqn.clone()).collect()
    }
}

/// One subsystem: what a host names in Connect's SUBNQN.
#[derive(Debug)]
pub struct Subsystem {
    pub nqn: String,
    pub kind: SubsystemKind,
    hosts: ArcSwap<HostList>,
    /// Serial number for Identify Controller (at most 20 ASCII bytes).
    pub serial: String,
    /// Namespaces, ascending by NSID.
    namespaces: ArcSwap<Vec<Arc<Namespace>>>,
    /// Controller IDs handed out for this subsystem (`cntlid_min..=cntlid_max`).
    cntlids: (u16, u16),
}

impl Subsystem {
    /// The subsystem of `cfg` over its opened namespaces.
    pub fn new(cfg: &SubsystemConfig, namespaces: Vec<Arc<Namespace>>) -> Subsystem {
        let serial = cfg
            .serial
            .clone()
            .unwrap_or_else(|| derive_serial(&cfg.nqn));
        let s = Subsystem {
            nqn: cfg.nqn.clone(),
            kind: SubsystemKind::Nvm,
            hosts: ArcSwap::from_pointee(HostList::of(cfg)),
            serial,
            namespaces: ArcSwap::from_pointee(Vec::new()),
            cntlids: (cfg.cntlid_min, cfg.cntlid_max),
        };
        s.set_namespaces(namespaces);
        s
    }

    /// The discovery subsystem named `nqn` (the well-known discovery NQN, or the target's
    /// unique one): every host may connect; the log it gets lists only what it may use.
    pub fn discovery(nqn: &str) -> Subsystem {
        Subsystem {
            nqn: nqn.to_owned(),
            kind: SubsystemKind::Discovery,
            hosts: ArcSwap::from_pointee(HostList {
                allow_any_host: true,
                hosts: Vec::new(),
            }),
            serial: derive_serial(nqn),
            namespaces: ArcSwap::from_pointee(Vec::new()),
            cntlids: (CNTLID_MIN, CNTLID_MAX),
        }
    }

    /// The controller IDs this subsystem's controllers get (inclusive).
    pub fn cntlid_range(&self) -> (u16, u16) {
        self.cntlids
    }

    pub fn is_discovery(&self) -> bool {
        self.kind == SubsystemKind::Discovery
    }

    /// Whether `hostnqn` may connect.
    pub fn allows(&self, hostnqn: &str) -> bool {
        self.hosts.load().allows(hostnqn)
    }

    /// The host list in force.
    pub fn hosts(&self) -> Arc<HostList> {
        self.hosts.load_full()
    }

    /// Replaces the host list (new Connects see it at once).
    pub fn set_hosts(&self, hosts: HostList) {
        self.hosts.store(Arc::new(hosts));
    }

    /// The DH-HMAC-CHAP settings of `hostnqn`: `Ok(None)` when it need not authenticate,
    /// `Err` (why) when its keys could not be loaded (the host is refused: fail closed).
    pub fn host_auth(&self, hostnqn: &str) -> Result<Option<Arc<HostAuth>>, String> {
        match self.hosts.load().hosts.iter().find(|h| h.nqn == hostnqn) {
            None => Ok(None),
            Some(h) => h.auth.clone(),
        }
    }

    /// The TLS PSK configured for `hostnqn` on this subsystem (`Ok(None)`: none, or the host
    /// is not listed; `Err`: its key could not be loaded).
    pub fn host_tls_psk(&self, hostnqn: &str) -> Result<Option<ConfiguredPsk>, String> {
        match self.hosts.load().hosts.iter().find(|h| h.nqn == hostnqn) {
            None => Ok(None),
            Some(h) => h.tls_psk.clone(),
        }
    }

    /// The namespaces, ascending by NSID.
    pub fn namespaces(&self) -> Arc<Vec<Arc<Namespace>>> {
        self.namespaces.load_full()
    }

    /// Replaces the namespace list.
    pub fn set_namespaces(&self, mut namespaces: Vec<Arc<Namespace>>) {
        namespaces.sort_by_key(|n| n.nsid());
        self.namespaces.store(Arc::new(namespaces));
    }

    /// The active namespace `nsid`.
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        let list = self.namespaces.load();
        list.binary_search_by_key(&nsid, |n| n.nsid())
            .ok()
            .map(|i| Arc::clone(&list[i]))
    }

    /// The highest NSID (Identify Controller NN).
    pub fn max_nsid(&self) -> u32 {
        self.namespaces.load().last().map_or(0, |n| n.nsid())
    }
}

impl HostList {
    /// The host list a subsystem's configuration gives (keys read now).
    pub fn of(cfg: &SubsystemConfig) -> HostList {
        HostList {
            allow_any_host: cfg.allow_any_host,
            hosts: cfg.hosts.iter().map(AllowedHost::new).collect(),
        }
    }
}

/// A stable 20-character serial from the NQN (FNV-1a), for subsystems configured without one.
fn derive_serial(nqn: &str) -> String {
    format!("RDMABLK{:013X}", fnv1a(nqn.as_bytes()) & 0xF_FFFF_FFFF_FFFF)
}

/// FNV-1a 64-bit hash: stable identifiers derived from names (serials, namespace UUIDs).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_serial_is_stable_and_fits() {
        let a = derive_serial("nqn.2026-11.io.rdmablk:a");
        assert_eq!(a, derive_serial("nqn.2026-11.io.rdmablk:a"));
        assert_ne!(a, derive_serial("nqn.2026-11.io.rdmablk:b"));
        assert_eq!(a.len(), 20);
    }
}
