//! The target's namespace table: every open namespace of every subsystem, by slot.
//!
//! A slot is a namespace's index here and in each worker's list of backend queues, so a
//! request names its namespace's queue by a number. Slots of removed namespaces are reused once
//! every worker has closed its queue to the old one ([`NamespaceTable::release`]).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::namespace::Namespace;

#[derive(Debug, Default)]
pub struct NamespaceTable {
    slots: Mutex<Vec<Option<Arc<Namespace>>>>,
}

impl NamespaceTable {
    fn lock(&self) -> MutexGuard<'_, Vec<Option<Arc<Namespace>>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `ns` in the first free slot; returns it with that slot.
    pub fn insert(&self, ns: Namespace) -> Arc<Namespace> {
        let mut t = self.lock();
        let slot = t.iter().position(Option::is_none).unwrap_or(t.len());
        let ns = Arc::new(ns.with_slot(slot));
        if slot == t.len() {
            t.push(Some(Arc::clone(&ns)));
        } else {
            t[slot] = Some(Arc::clone(&ns));
        }
        ns
    }

    /// Frees `slot` (every worker has closed its queue to the namespace there).
    pub fn release(&self, slot: usize) {
        if let Some(s) = self.lock().get_mut(slot) {
            *s = None;
        }
    }

    /// The namespace in `slot`.
    pub fn get(&self, slot: usize) -> Option<Arc<Namespace>> {
        self.lock().get(slot).cloned().flatten()
    }

    /// Every namespace, in slot order.
    pub fn all(&self) -> Vec<Arc<Namespace>> {
        self.lock().iter().flatten().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.lock().iter().flatten().count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
