//! Reservations from C: Register, Acquire, Release and Report on a namespace
//! (`rdmablk_initiator::Namespace::resv_*`). The action, type and CPTPL values are the NVMe
//! ones, as nvme-cli takes them.

use std::ffi::c_int;

use rdmablk_initiator::{AcquireAction, Persist, RegisterAction, ResvType};

use crate::ctrl::{rdmablk_ns, with_ns};
use crate::error::{guard, invalid};

/// Reservation Register. `rrega`: 0 register `nrkey`, 1 unregister, 2 replace the key with
/// `nrkey`; `crkey` the current key (unregister, replace); `iekey` nonzero ignores it;
/// `cptpl`: 0 no change, 2 do not persist through power loss, 3 persist (the target must
/// offer it). Returns 0, or -errno with `rdmablk_nvme_status()` set for an NVMe status
/// (Reservation Conflict is 0x83).
///
/// # Safety
/// `ns` comes from `rdmablk_ns_open`.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_resv_register(
    ns: *const rdmablk_ns,
    rrega: u8,
    crkey: u64,
    nrkey: u64,
    iekey: c_int,
    cptpl: u8,
) -> c_int {
    let action = match rrega {
        0 => RegisterAction::Register { new_key: nrkey },
        1 => RegisterAction::Unregister,
        2 => RegisterAction::Replace { new_key: nrkey },
        _ => return guard(|| invalid("rdmablk_resv_register: rrega must be 0, 1 or 2")),
    };
    let persist = match cptpl {
        0 => Persist::NoChange,
        2 => Persist::Off,
        3 => Persist::On,
        _ => return guard(|| invalid("rdmablk_resv_register: cptpl must be 0, 2 or 3")),
    };
    // SAFETY: the caller's handle.
    unsafe { with_ns(ns, |n| n.resv_register(action, crkey, iekey != 0, persist)) }
}

/// Reservation Acquire of type `rtype` (1..=6) with key `crkey`. `racqa`: 0 acquire, 1
/// preempt the holders of `prkey`, 2 preempt and abort.
///
/// # Safety
/// `ns` comes from `rdmablk_ns_open`.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_resv_acquire(
    ns: *const rdmablk_ns,
    racqa: u8,
    rtype: u8,
    crkey: u64,
    prkey: u64,
) -> c_int {
    let Some(rtype) = ResvType::from_u8(rtype) else {
        return guard(|| invalid("rdmablk_resv_acquire: rtype must be 1 to 6"));
    };
    let action = match racqa {
        0 => AcquireAction::Acquire,
        1 => AcquireAction::Preempt { victim_key: prkey },
        2 => AcquireAction::PreemptAndAbort { victim_key: prkey },
        _ => return guard(|| invalid("rdmablk_resv_acquire: racqa must be 0, 1 or 2")),
    };
    // SAFETY: the caller's handle.
    unsafe { with_ns(ns, |n| n.resv_acquire(crkey, rtype, action)) }
}

/// Reservation Release with key `crkey`. `rrela`: 0 release the reservation of type `rtype`
/// this host holds, 1 clear (every registration goes; `rtype` unused).
///
/// # Safety
/// `ns` comes from `rdmablk_ns_open`.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_resv_release(
    ns: *const rdmablk_ns,
    rrela: u8,
    rtype: u8,
    crkey: u64,
) -> c_int {
    match rrela {
        0 => {
            let Some(rtype) = ResvType::from_u8(rtype) else {
                return guard(|| invalid("rdmablk_resv_release: rtype must be 1 to 6"));
            };
            // SAFETY: the caller's handle.
            unsafe { with_ns(ns, |n| n.resv_release(crkey, rtype)) }
        }
        // SAFETY: the caller's handle.
        1 => unsafe { with_ns(ns, |n| n.resv_clear(crkey)) },
        _ => guard(|| invalid("rdmablk_resv_release: rrela must be 0 or 1")),
    }
}

/// One registered host of a [`rdmablk_resv_report`].
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdmablk_registrant {
    /// 128-bit host identifier.
    pub hostid: [u8; 16],
    pub rkey: u64,
    /// Nonzero if it holds the reservation.
    pub holds: c_int,
}

/// The head of a [`rdmablk_resv_report`].
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct rdmablk_resv_status {
    pub generation: u32,
    /// The reservation type held (1..=6), 0 for none.
    pub rtype: u8,
    /// Nonzero when the state persists through power loss.
    pub ptpl: c_int,
    /// Registered hosts (also those that did not fit in `regs`).
    pub registrants: u32,
}

/// Reservation Report: fills `*out` and the first `max_regs` entries of `regs` (which may be
/// NULL when `max_regs` is 0). Returns 0 or -errno.
///
/// # Safety
/// `ns` comes from `rdmablk_ns_open`; `out` is writable; `regs` has room for `max_regs`.
#[no_mangle]
pub unsafe extern "C" fn rdmablk_resv_report(
    ns: *const rdmablk_ns,
    out: *mut rdmablk_resv_status,
    regs: *mut rdmablk_registrant,
    max_regs: u32,
) -> c_int {
    guard(|| {
        if out.is_null() || (regs.is_null() && max_regs > 0) {
            return invalid("rdmablk_resv_report: out (and regs, with max_regs) must not be NULL");
        }
        let mut report = None;
        // SAFETY: the caller's handle.
        let rc = unsafe {
            with_ns(ns, |n| {
                report = Some(n.resv_report()?);
                Ok(())
            })
        };
        let Some(r) = report else {
            return rc;
        };
        let status = rdmablk_resv_status {
            generation: r.generation,
            rtype: r.rtype.map_or(0, |t| t as u8),
            ptpl: c_int::from(r.persist),
            registrants: r.registrants.len() as u32,
        };
        // SAFETY: `out` is writable (checked non-NULL; the caller's promise).
        unsafe { out.write(status) };
        for (i, g) in r.registrants.iter().take(max_regs as usize).enumerate() {
            let e = rdmablk_registrant {
                hostid: g.hostid,
                rkey: g.rkey,
                holds: c_int::from(g.holds),
            };
            // SAFETY: `regs` has room for `max_regs` entries (the caller's promise).
            unsafe { regs.add(i).write(e) };
        }
        0
    })
}
