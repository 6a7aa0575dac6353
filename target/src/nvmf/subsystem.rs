//! Subsystems as the engine sees them: NQN, host access list, serial and namespaces.

use std::sync::Arc;

use crate::config::{HostAuth, SubsystemConfig};
use crate::namespace::Namespace;

/// What a subsystem serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubsystemKind {
    /// An NVM subsystem: namespaces, I/O queues.
    Nvm,
    /// The discovery subsystem: an admin queue and the Discovery Log Page only (see
    /// [`super::discovery`]).
    Discovery,
}

/// One subsystem: what a host names in Connect's SUBNQN.
#[derive(Debug)]
pub struct Subsystem {
    pub nqn: String,
    pub kind: SubsystemKind,
    allow_any_host: bool,
    hosts: Vec<AllowedHost>,
    /// Serial number for Identify Controller (at most 20 ASCII bytes).
    pub serial: String,
    /// Namespaces, ascending by NSID.
    namespaces: Vec<Arc<Namespace>>,
    /// Index of this subsystem's first namespace in the target's flat namespace list (the
    /// order of each worker's namespace queues).
    pub ns_base: usize,
}

/// One allow-list entry, its keys resolved when the subsystem is built.
#[derive(Debug)]
struct AllowedHost {
    nqn: String,
    auth: Result<Option<Arc<HostAuth>>, String>,
}

impl AllowedHost {
    fn new(e: &crate::config::HostEntry) -> AllowedHost {
        let auth = e.resolve();
        if let Err(why) = &auth {
            // Validation loaded the same keys moments ago: a key file changed since.
            tracing::error!(hostnqn = e.nqn(), "host refused: {why}");
        }
        AllowedHost {
            nqn: e.nqn().to_owned(),
            auth,
        }
    }
}

impl Subsystem {
    /// The subsystem of `cfg` over its opened namespaces.
    pub fn new(
        cfg: &SubsystemConfig,
        mut namespaces: Vec<Arc<Namespace>>,
        ns_base: usize,
    ) -> Subsystem {
        namespaces.sort_by_key(|n| n.nsid());
        let serial = cfg
            .serial
            .clone()
            .unwrap_or_else(|| derive_serial(&cfg.nqn));
        Subsystem {
            nqn: cfg.nqn.clone(),
            kind: SubsystemKind::Nvm,
            allow_any_host: cfg.allow_any_host,
            hosts: cfg.hosts.iter().map(AllowedHost::new).collect(),
            serial,
            namespaces,
            ns_base,
        }
    }

    /// The discovery subsystem named `nqn` (the well-known discovery NQN, or the target's
    /// unique one): every host may connect; the log it gets lists only what it may use.
    pub fn discovery(nqn: &str) -> Subsystem {
        Subsystem {
            nqn: nqn.to_owned(),
            kind: SubsystemKind::Discovery,
            allow_any_host: true,
            hosts: Vec::new(),
            serial: derive_serial(nqn),
            namespaces: Vec::new(),
            ns_base: 0,
        }
    }

    pub fn is_discovery(&self) -> bool {
        self.kind == SubsystemKind::Discovery
    }

    /// Whether `hostnqn` may connect.
    pub fn allows(&self, hostnqn: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h.nqn == hostnqn)
    }

    /// The DH-HMAC-CHAP settings of `hostnqn`: `Ok(None)` when it need not authenticate,
    /// `Err` (why) when its keys could not be loaded (the host is refused: fail closed).
    pub fn host_auth(&self, hostnqn: &str) -> Result<Option<Arc<HostAuth>>, String> {
        match self.hosts.iter().find(|h| h.nqn == hostnqn) {
            None => Ok(None),
            Some(h) => h.auth.clone(),
        }
    }

    /// The namespaces, ascending by NSID.
    pub fn namespaces(&self) -> &[Arc<Namespace>] {
        &self.namespaces
    }

    /// Index (into [`Subsystem::namespaces`]) of the active namespace `nsid`.
    pub fn ns_index(&self, nsid: u32) -> Option<usize> {
        self.namespaces
            .binary_search_by_key(&nsid, |n| n.nsid())
            .ok()
    }

    /// The highest NSID (Identify Controller NN).
    pub fn max_nsid(&self) -> u32 {
        self.namespaces.last().map_or(0, |n| n.nsid())
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
