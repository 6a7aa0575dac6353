//! Asymmetric Namespace Access: each listener (an NVMe port) gives every ANA group a state;
//! a namespace belongs to one group (`ana_group`). A controller answers for the listener its
//! host connected through: I/O to a namespace whose group is not accessible there fails with
//! the ANA path status (no DNR), so a multipath host moves to another path. The ANA log page
//! (0x0C) tells the host each group's state and namespaces; a change raises the Asymmetric
//! Namespace Access Change event on the listener's controllers.
//!
//! States live in atomics, one per group, so the I/O path reads one without a lock and a
//! reload (or `rdmablk-ctl ana set`) changes them in place.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use rdmablk::nvme::ana::{AnaGroup, AnaLog, AnaState};

use super::subsystem::Subsystem;
use crate::config::{parse_ana_group, ListenerConfig, ANA_GROUP_MAX};

/// Seconds a group may stay in the change state (Identify Controller ANATT; nvmet's value).
pub const ANATT_SECS: u8 = 10;

/// The ANA states of one listener (port), by group.
#[derive(Debug)]
pub struct AnaPort {
    /// `states[g]`: group g's state code (index 0 unused).
    states: Box<[AtomicU8]>,
    /// `group_chgcnt[g]`: how often group g's state changed.
    group_chgcnt: Box<[AtomicU64]>,
    /// Every change of this port's states.
    chgcnt: AtomicU64,
}

impl AnaPort {
    /// The states `cfg.ana` gives (validated); unlisted groups are optimized.
    pub fn new(cfg: &ListenerConfig) -> AnaPort {
        let n = ANA_GROUP_MAX as usize + 1;
        let port = AnaPort {
            states: (0..n)
                .map(|_| AtomicU8::new(AnaState::Optimized.code()))
                .collect(),
            group_chgcnt: (0..n).map(|_| AtomicU64::new(0)).collect(),
            chgcnt: AtomicU64::new(0),
        };
        for (g, s) in configured(cfg) {
            port.states[g as usize].store(s.code(), Ordering::Release);
        }
        port
    }

    /// Group `grpid`'s state here.
    pub fn state(&self, grpid: u32) -> AnaState {
        self.states
            .get(grpid as usize)
            .and_then(|s| AnaState::from_code(s.load(Ordering::Acquire)))
            .unwrap_or(AnaState::Inaccessible)
    }

    /// Sets group `grpid` to `state`; true if that changed it.
    pub fn set(&self, grpid: u32, state: AnaState) -> bool {
        let Some(slot) = self.states.get(grpid as usize).filter(|_| grpid != 0) else {
            return false;
        };
        if slot.swap(state.code(), Ordering::AcqRel) == state.code() {
            return false;
        }
        self.group_chgcnt[grpid as usize].fetch_add(1, Ordering::AcqRel);
        self.chgcnt.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Applies the states `cfg.ana` gives (unlisted groups back to optimized); returns the
    /// groups that changed, with their new state.
    pub fn apply(&self, cfg: &ListenerConfig) -> Vec<(u32, AnaState)> {
        let want = configured(cfg);
        (1..=ANA_GROUP_MAX)
            .filter_map(|g| {
                let s = want
                    .iter()
                    .find(|(w, _)| *w == g)
                    .map_or(AnaState::Optimized, |(_, s)| *s);
                self.set(g, s).then_some((g, s))
            })
            .collect()
    }

    /// The ANA log page a controller of `subsys` on this port returns to `hostnqn`: every
    /// group that has namespaces the host sees, and group 1 (the default group) always.
    pub fn log(&self, subsys: &Subsystem, hostnqn: &str) -> AnaLog {
        let mut groups: Vec<AnaGroup> = Vec::new();
        for ns in subsys.namespaces().iter().filter(|n| n.visible_to(hostnqn)) {
            let g = ns.ana_group();
            match groups.iter_mut().find(|x| x.grpid == g) {
                Some(x) => x.nsids.push(ns.nsid()),
                None => groups.push(self.group(g, vec![ns.nsid()])),
            }
        }
        if !groups.iter().any(|g| g.grpid == 1) {
            groups.push(self.group(1, Vec::new()));
        }
        groups.sort_by_key(|g| g.grpid);
        AnaLog {
            chgcnt: self.chgcnt.load(Ordering::Acquire),
            groups,
        }
    }

    fn group(&self, grpid: u32, nsids: Vec<u32>) -> AnaGroup {
        AnaGroup {
            grpid,
            chgcnt: self.group_chgcnt[grpid as usize].load(Ordering::Acquire),
            state: self.state(grpid),
            nsids,
        }
    }
}

/// The (group, state) pairs of a validated `[[listener]] ana` table.
fn configured(cfg: &ListenerConfig) -> Vec<(u32, AnaState)> {
    cfg.ana
        .iter()
        .filter_map(|(g, s)| Some((parse_ana_group(g).ok()?, AnaState::from_name(s)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(ana: &[(&str, &str)]) -> ListenerConfig {
        ListenerConfig {
            transport: Default::default(),
            provider: Some(crate::config::Provider::Soft),
            address: "127.0.0.1".parse().unwrap(),
            port: 4420,
            ana: ana
                .iter()
                .map(|(g, s)| (g.to_string(), s.to_string()))
                .collect(),
            tls: Default::default(),
        }
    }

    #[test]
    fn unlisted_groups_are_optimized_and_changes_are_counted() {
        let p = AnaPort::new(&listener(&[("2", "non-optimized")]));
        assert_eq!(p.state(1), AnaState::Optimized);
        assert_eq!(p.state(2), AnaState::NonOptimized);
        assert_eq!(p.state(ANA_GROUP_MAX + 1), AnaState::Inaccessible);
        assert!(!p.set(2, AnaState::NonOptimized));
        assert!(p.set(2, AnaState::Inaccessible));
        assert!(!p.set(0, AnaState::Inaccessible));
        let changed = p.apply(&listener(&[("1", "change")]));
        assert_eq!(
            changed,
            vec![(1, AnaState::Change), (2, AnaState::Optimized)]
        );
        assert_eq!(p.chgcnt.load(Ordering::Relaxed), 3);
        assert_eq!(p.group_chgcnt[2].load(Ordering::Relaxed), 2);
    }
}
