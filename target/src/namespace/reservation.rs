//! A namespace's reservations (NVMe Base 2.0, 8.19): registrants by host identifier, the
//! holder, the generation, and the access check every I/O command passes.
//!
//! The semantics are Linux nvmet's (`drivers/nvme/target/pr.c`, Linux 6.13 and later), the
//! reference peer: a registration and the reservation belong to the 128-bit host identifier
//! (every controller of a host shares them), the generation counts successful Register
//! commands, preempts and clears, and a holder preempting itself changes the type whatever
//! PRKEY says (blktests nvme/054 relies on it). Where nvmet and the specification differ,
//! `docs/conformance.md` ("Reservations") says which this follows.
//!
//! Commands change the state under a mutex (they are rare); the I/O path reads an immutable
//! snapshot swapped whole ([`ArcSwapOption`]), and with no reservation held only a relaxed load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwapOption;
use rdmablk::nvme::reservation::{racqa, rrega, rrela, Registrant, ResvType};

/// A host identifier (Connect's HOSTID).
pub type HostId = [u8; 16];

/// Why a reservation command failed (the caller maps these to NVMe statuses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResvError {
    /// Reservation Conflict.
    Conflict,
    /// Invalid Field in Command.
    InvalidField,
    /// An action value that is not defined: Invalid Opcode, as nvmet answers.
    InvalidAction,
}

#[derive(Clone, Copy, Debug)]
struct Reg {
    host: HostId,
    key: u64,
}

#[derive(Debug, Default)]
struct State {
    /// In registration order (a replace keeps the place).
    regs: Vec<Reg>,
    /// The holder (for types 5 and 6, the registrant that acquired: every registrant holds).
    holder: Option<(HostId, ResvType)>,
    generation: u32,
}

impl State {
    /// Acquire and Release need the sender registered with CRKEY (IEKEY is not honoured).
    fn check_key(&self, host: &HostId, crkey: u64) -> Result<(), ResvError> {
        match self.regs.iter().find(|r| &r.host == host) {
            Some(r) if r.key == crkey => Ok(()),
            _ => Err(ResvError::Conflict),
        }
    }
}

/// What the access check reads: who holds which type, and who is registered.
#[derive(Debug)]
struct Snapshot {
    rtype: ResvType,
    holder: HostId,
    registered: Vec<HostId>,
}

/// Hosts whose registration a command removed (other than the sender), for the caller.
pub type Preempted = Vec<HostId>;

#[derive(Debug, Default)]
pub struct Reservations {
    state: Mutex<State>,
    held: AtomicBool,
    snapshot: ArcSwapOption<Snapshot>,
}

impl Reservations {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes `s` for the access check.
    fn publish(&self, s: &State) {
        match s.holder {
            Some((holder, rtype)) => {
                self.snapshot.store(Some(Arc::new(Snapshot {
                    rtype,
                    holder,
                    registered: s.regs.iter().map(|r| r.host).collect(),
                })));
                self.held.store(true, Ordering::Release);
            }
            None => {
                self.held.store(false, Ordering::Release);
                self.snapshot.store(None);
            }
        }
    }

    /// Whether `host` may run an I/O command that writes (`write`) or reads. No reservation
    /// held: one relaxed load.
    #[inline]
    pub fn allows(&self, host: &HostId, write: bool) -> bool {
        if !self.held.load(Ordering::Relaxed) {
            return true;
        }
        self.allows_held(host, write)
    }

    #[cold]
    fn allows_held(&self, host: &HostId, write: bool) -> bool {
        let Some(s) = &*self.snapshot.load() else {
            return true;
        };
        if &s.holder == host {
            return true;
        }
        if !write && !s.rtype.excludes_reads() {
            return true;
        }
        s.rtype.registrants_write() && s.registered.contains(host)
    }

    /// Reservation Register: `action` RREGA, keys CRKEY and NRKEY.
    pub fn register(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
    ) -> Result<(), ResvError> {
        let mut s = self.lock();
        let me = s.regs.iter().position(|r| &r.host == host);
        match action {
            rrega::REGISTER => match me {
                None => s.regs.push(Reg {
                    host: *host,
                    key: nrkey,
                }),
                Some(i) if s.regs[i].key == nrkey => {}
                Some(_) => return Err(ResvError::Conflict),
            },
            rrega::UNREGISTER => {
                let i = me.ok_or(ResvError::Conflict)?;
                if !iekey && s.regs[i].key != crkey {
                    return Err(ResvError::Conflict);
                }
                s.regs.remove(i);
                if s.holder.is_some_and(|(h, _)| &h == host) {
                    let rtype = s.holder.map(|(_, t)| t).unwrap_or(ResvType::WriteExclusive);
                    // All-registrants: the reservation stays with the first registrant left.
                    s.holder = match s.regs.first() {
                        Some(r) if rtype.all_registrants() => Some((r.host, rtype)),
                        _ => None,
                    };
                }
            }
            rrega::REPLACE => {
                let i = me.ok_or(ResvError::Conflict)?;
                if !iekey && s.regs[i].key != crkey {
                    return Err(ResvError::Conflict);
                }
                s.regs[i].key = nrkey;
            }
            _ => return Err(ResvError::InvalidAction),
        }
        s.generation = s.generation.wrapping_add(1);
        self.publish(&s);
        Ok(())
    }

    /// Reservation Acquire: `action` RACQA, type `rtype`, keys CRKEY and PRKEY. The hosts a
    /// preempt unregistered (other than the sender) come back: their commands in flight are
    /// the caller's to wait for (preempt and abort).
    pub fn acquire(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
        prkey: u64,
    ) -> Result<Preempted, ResvError> {
        if iekey {
            return Err(ResvError::InvalidField);
        }
        let rtype = ResvType::from_u8(rtype).ok_or(ResvError::InvalidField)?;
        let mut s = self.lock();
        s.check_key(host, crkey)?;
        let preempted = match action {
            racqa::ACQUIRE => {
                match s.holder {
                    None => s.holder = Some((*host, rtype)),
                    Some((h, t)) if &h == host && t == rtype => {}
                    Some(_) => return Err(ResvError::Conflict),
                }
                // Acquire leaves the generation as it is.
                self.publish(&s);
                return Ok(Vec::new());
            }
            racqa::PREEMPT | racqa::PREEMPT_AND_ABORT => preempt(&mut s, host, rtype, prkey)?,
            _ => return Err(ResvError::InvalidAction),
        };
        s.generation = s.generation.wrapping_add(1);
        self.publish(&s);
        Ok(preempted)
    }

    /// Reservation Release: `action` RRELA, type `rtype`, key CRKEY. A clear returns the hosts
    /// it unregistered (other than the sender).
    pub fn release(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
    ) -> Result<Preempted, ResvError> {
        if iekey {
            return Err(ResvError::InvalidField);
        }
        let mut s = self.lock();
        s.check_key(host, crkey)?;
        match action {
            rrela::RELEASE => match s.holder {
                Some((h, t)) if &h == host => {
                    if t as u8 != rtype {
                        return Err(ResvError::Conflict);
                    }
                    s.holder = None;
                }
                // Not the holder (or nothing held): nothing to release, success.
                _ => {}
            },
            rrela::CLEAR => {
                let others = s
                    .regs
                    .iter()
                    .map(|r| r.host)
                    .filter(|h| h != host)
                    .collect();
                s.regs.clear();
                s.holder = None;
                s.generation = s.generation.wrapping_add(1);
                self.publish(&s);
                return Ok(others);
            }
            _ => return Err(ResvError::InvalidAction),
        }
        self.publish(&s);
        Ok(Vec::new())
    }

    /// The report: generation, the type held (0: none) and every registrant.
    pub fn report(&self) -> (u32, u8, Vec<Registrant>) {
        let s = self.lock();
        let (holder, rtype) = match s.holder {
            Some((h, t)) => (Some(h), t as u8),
            None => (None, 0),
        };
        let all = s.holder.is_some_and(|(_, t)| t.all_registrants());
        let regs = s
            .regs
            .iter()
            .map(|r| Registrant {
                cntlid: 0xFFFF,
                holds: all || holder == Some(r.host),
                rkey: r.key,
                hostid: r.host,
            })
            .collect();
        (s.generation, rtype, regs)
    }
}

/// Preempt (and abort): nvmet's cases in its order. The hosts unregistered, but the sender.
fn preempt(
    s: &mut State,
    host: &HostId,
    rtype: ResvType,
    prkey: u64,
) -> Result<Preempted, ResvError> {
    // Unregisters every registrant with key `prkey` (the sender too, when its key matches);
    // a conflict if none has it.
    fn drop_key(
        s: &mut State,
        host: &HostId,
        prkey: u64,
        keep: Option<&HostId>,
    ) -> Result<Preempted, ResvError> {
        let before = s.regs.len();
        let mut gone = Vec::new();
        s.regs.retain(|r| {
            let drop = r.key == prkey && Some(&r.host) != keep;
            if drop && &r.host != host {
                gone.push(r.host);
            }
            !drop
        });
        if s.regs.len() == before {
            return Err(ResvError::Conflict);
        }
        Ok(gone)
    }
    match s.holder {
        None => drop_key(s, host, prkey, None),
        Some((_, t)) if t.all_registrants() => {
            if prkey == 0 {
                s.holder = Some((*host, rtype));
                let gone = s
                    .regs
                    .iter()
                    .map(|r| r.host)
                    .filter(|h| h != host)
                    .collect();
                s.regs.retain(|r| &r.host == host);
                Ok(gone)
            } else {
                drop_key(s, host, prkey, None)
            }
        }
        Some((h, _)) if &h == host => {
            // The holder preempting itself changes the type; PRKEY does not matter.
            s.holder = Some((*host, rtype));
            Ok(Vec::new())
        }
        Some((h, _)) => {
            let holder_key = s.regs.iter().find(|r| r.host == h).map(|r| r.key);
            if holder_key == Some(prkey) {
                s.holder = Some((*host, rtype));
                drop_key(s, host, prkey, Some(host))
            } else if prkey != 0 {
                drop_key(s, host, prkey, None)
            } else {
                Err(ResvError::InvalidField)
            }
        }
    }
}

#[cfg(test)]
mod tests;
