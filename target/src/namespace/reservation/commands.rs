//! The reservation commands on the state: Register, Acquire (with preempt and preempt and
//! abort), Release (and clear) and Report, with the notices each leaves for other hosts.

use rdmablk::nvme::reservation::{notice, racqa, rrega, rrela, Registrant, ResvType};

use super::{Announce, Core, HostId, Notices, Preempted, Reg, ResvError, State};

impl Core {
    /// Reservation Register: `action` RREGA, keys CRKEY and NRKEY, `cptpl` CPTPL (00b: no
    /// change, 10b: do not persist, 11b: persist through power loss).
    pub fn register(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
        cptpl: u8,
    ) -> Result<Notices, ResvError> {
        self.register_announced(host, action, iekey, crkey, nrkey, cptpl)
            .map(|(n, _)| n)
    }

    /// [`Core::register`], with what announces the change to the other gateways.
    pub fn register_announced(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
        cptpl: u8,
    ) -> Result<(Notices, Option<Announce>), ResvError> {
        match cptpl {
            0b00 | 0b10 => {}
            0b11 if self.can_persist() => {}
            _ => return Err(ResvError::InvalidField),
        }
        self.change(|s| {
            let mut notices = Vec::new();
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
                        // Registrants Only: the others lose what registration gave them.
                        if s.holder.is_none() && rtype.registrants_write() {
                            notices = released(s, host);
                        }
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
            match cptpl {
                0b10 => s.ptpl = false,
                0b11 => s.ptpl = true,
                _ => {}
            }
            Ok(notices)
        })
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
    ) -> Result<Notices, ResvError> {
        self.acquire_announced(host, action, iekey, rtype, crkey, prkey)
            .map(|(n, _)| n)
    }

    /// [`Core::acquire`], with what announces the change to the other gateways.
    pub fn acquire_announced(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
        prkey: u64,
    ) -> Result<(Notices, Option<Announce>), ResvError> {
        if iekey {
            return Err(ResvError::InvalidField);
        }
        let rtype = ResvType::from_u8(rtype).ok_or(ResvError::InvalidField)?;
        self.change(|s| {
            s.check_key(host, crkey)?;
            let preempted = match action {
                racqa::ACQUIRE => {
                    match s.holder {
                        None => s.holder = Some((*host, rtype)),
                        Some((h, t)) if &h == host && t == rtype => {}
                        Some(_) => return Err(ResvError::Conflict),
                    }
                    // Acquire leaves the generation as it is.
                    Vec::new()
                }
                racqa::PREEMPT | racqa::PREEMPT_AND_ABORT => {
                    let before = s.holder.map(|(_, t)| t);
                    let gone = preempt(s, host, rtype, prkey)?;
                    s.generation = s.generation.wrapping_add(1);
                    let mut n: Notices = gone
                        .into_iter()
                        .map(|h| (h, notice::REGISTRATION_PREEMPTED))
                        .collect();
                    // The type changed: the registrants left hear the reservation was released.
                    if before.is_some_and(|t| Some(t) != s.holder.map(|(_, t)| t)) {
                        n.extend(released(s, host));
                    }
                    n
                }
                _ => return Err(ResvError::InvalidAction),
            };
            Ok(preempted)
        })
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
    ) -> Result<Notices, ResvError> {
        self.release_announced(host, action, iekey, rtype, crkey)
            .map(|(n, _)| n)
    }

    /// [`Core::release`], with what announces the change to the other gateways.
    pub fn release_announced(
        &self,
        host: &HostId,
        action: u8,
        iekey: bool,
        rtype: u8,
        crkey: u64,
    ) -> Result<(Notices, Option<Announce>), ResvError> {
        if iekey {
            return Err(ResvError::InvalidField);
        }
        self.change(|s| {
            s.check_key(host, crkey)?;
            let mut others = Vec::new();
            match action {
                rrela::RELEASE => match s.holder {
                    Some((h, t)) if &h == host => {
                        if t as u8 != rtype {
                            return Err(ResvError::Conflict);
                        }
                        s.holder = None;
                        if t.registrants_write() {
                            others = released(s, host);
                        }
                    }
                    // Not the holder (or nothing held): nothing to release, success.
                    _ => {}
                },
                rrela::CLEAR => {
                    others = s
                        .regs
                        .iter()
                        .map(|r| r.host)
                        .filter(|h| h != host)
                        .map(|h| (h, notice::RESERVATION_PREEMPTED))
                        .collect();
                    s.regs.clear();
                    s.holder = None;
                    s.generation = s.generation.wrapping_add(1);
                }
                _ => return Err(ResvError::InvalidAction),
            }
            Ok(others)
        })
    }

    /// The report: generation, the type held (0: none), PTPLS and every registrant.
    pub fn report(&self) -> (u32, u8, bool, Vec<Registrant>) {
        self.refresh();
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
        (s.generation, rtype, s.ptpl, regs)
    }
}

/// "Reservation released" for every registrant but `host`.
fn released(s: &State, host: &HostId) -> Notices {
    s.regs
        .iter()
        .filter(|r| &r.host != host)
        .map(|r| (r.host, notice::RESERVATION_RELEASED))
        .collect()
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
