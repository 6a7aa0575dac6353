//! Per-host namespace visibility: which hosts a namespace is attached to
//! (`[[subsystem.namespace]] hosts`, SPDK's `no_auto_visible` with `nvmf_ns_add_host`).
//!
//! A namespace hidden from a host is, for that host's controllers, an inactive NSID: absent
//! from the active namespace list and the ANA log, zeroes for Identify Namespace, Invalid
//! Namespace for I/O. The list changes at run time (reload, `rdmablk-ctl namespace host`)
//! without reopening the namespace: it is swapped whole, so the I/O path reads it with one
//! atomic load and, for a namespace every host sees, no comparison at all.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

/// Who sees a namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Visibility {
    /// Every host the subsystem admits (no `hosts` key).
    #[default]
    All,
    /// Only these host NQNs (an empty list: no host).
    Hosts(Vec<String>),
}

impl Visibility {
    /// The visibility a namespace's `hosts` key gives.
    pub fn of(hosts: Option<&[String]>) -> Visibility {
        match hosts {
            None => Visibility::All,
            Some(h) => Visibility::Hosts(h.to_vec()),
        }
    }

    /// Whether `hostnqn` sees the namespace.
    pub fn allows(&self, hostnqn: &str) -> bool {
        match self {
            Visibility::All => true,
            Visibility::Hosts(h) => h.iter().any(|x| x == hostnqn),
        }
    }
}

/// A namespace's visibility as it changes at run time: the list, and a flag that says
/// whether there is one (so a namespace every host sees costs a command one relaxed load).
#[derive(Debug, Default)]
pub struct VisibilityCell {
    restricted: AtomicBool,
    list: ArcSwap<Visibility>,
}

impl VisibilityCell {
    pub fn new(v: Visibility) -> VisibilityCell {
        VisibilityCell {
            restricted: AtomicBool::new(v != Visibility::All),
            list: ArcSwap::from_pointee(v),
        }
    }

    /// Whether `hostnqn` sees the namespace now.
    #[inline]
    pub fn allows(&self, hostnqn: &str) -> bool {
        !self.restricted.load(Ordering::Relaxed) || self.list.load().allows(hostnqn)
    }

    pub fn get(&self) -> Arc<Visibility> {
        self.list.load_full()
    }

    /// Replaces the visibility; the one it replaced. (A command checked during the change
    /// may see the old list or the new one, as with any reload.)
    pub fn set(&self, v: Visibility) -> Arc<Visibility> {
        let restricted = v != Visibility::All;
        // A list before the flag that says to read it; the flag cleared before the list goes.
        if restricted {
            let old = self.list.swap(Arc::new(v));
            self.restricted.store(true, Ordering::Release);
            old
        } else {
            self.restricted.store(false, Ordering::Release);
            self.list.swap(Arc::new(v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_list_shows_all_and_empty_list_shows_none() {
        assert!(Visibility::of(None).allows("nqn.a"));
        assert!(!Visibility::of(Some(&[])).allows("nqn.a"));
        let v = Visibility::of(Some(&["nqn.a".to_owned()]));
        assert!(v.allows("nqn.a"));
        assert!(!v.allows("nqn.b"));
        let c = VisibilityCell::new(v.clone());
        assert_eq!(*c.set(Visibility::All), v);
        assert!(c.allows("nqn.b"));
    }
}
