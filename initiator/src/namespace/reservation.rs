//! Reservations on a namespace: Register, Acquire, Release and Report (NVMe Base 2.0, 8.19),
//! for clustered applications that fence each other. A registration and a reservation belong
//! to this host's host ID (`ConnectOptions::hostid`), across all its controllers.
//!
//! These commands are not idempotent (a register counts a generation, a preempt unregisters
//! a host), so unlike reads and writes they are never re-sent after a reconnect: a transport
//! failure comes back as an error, and the caller reads the report to learn what happened.

use rdmablk::nvme::reservation::{
    decode_report, encode_keys, op, racqa, rrega, rrela, ResvCdw10, ONE_KEY, TWO_KEYS,
};
use rdmablk::nvme::Sqe;

pub use rdmablk::nvme::reservation::{Registrant, ResvType};

use super::Namespace;
use crate::error::{Error, Result};
use crate::io_path::Cmd;
use crate::queue::{Dir, Seg};

/// What a Reservation Register does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegisterAction {
    /// Register `new_key` (re-registering the same key succeeds).
    Register { new_key: u64 },
    /// Unregister (the current key must match unless `ignore_key`).
    Unregister,
    /// Replace the current key with `new_key`.
    Replace { new_key: u64 },
}

/// Persist Through Power Loss, as a Register sets it (CPTPL).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persist {
    /// Leave it as it is.
    NoChange,
    /// The reservation state is lost at a power loss (and a target restart).
    Off,
    /// The reservation state survives (the target must offer it: RESCAP bit 0).
    On,
}

/// How an Acquire takes the reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireAction {
    /// Take it if nobody holds it.
    Acquire,
    /// Take it from (or unregister) the registrants holding `victim_key`.
    Preempt { victim_key: u64 },
    /// The same, and the preempted hosts' commands are aborted.
    PreemptAndAbort { victim_key: u64 },
}

/// The Reservation Report of a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationReport {
    /// Changes with every registration change, preempt and clear.
    pub generation: u32,
    /// The reservation held, if any.
    pub rtype: Option<ResvType>,
    /// Persist Through Power Loss is on.
    pub persist: bool,
    /// Every registered host (CNTLID 0xFFFF: a host, not one controller).
    pub registrants: Vec<Registrant>,
}

/// The largest report read (63 registrants besides the header).
const REPORT_BYTES: u32 = 4096;

impl Namespace {
    /// Reservation Register.
    pub fn resv_register(
        &self,
        action: RegisterAction,
        current_key: u64,
        ignore_key: bool,
        persist: Persist,
    ) -> Result<()> {
        let (rrega, new_key) = match action {
            RegisterAction::Register { new_key } => (rrega::REGISTER, new_key),
            RegisterAction::Unregister => (rrega::UNREGISTER, 0),
            RegisterAction::Replace { new_key } => (rrega::REPLACE, new_key),
        };
        let cptpl = match persist {
            Persist::NoChange => 0b00,
            Persist::Off => 0b10,
            Persist::On => 0b11,
        };
        let c = ResvCdw10 {
            action: rrega,
            iekey: ignore_key,
            rtype: 0,
            cptpl,
        };
        self.resv_command(
            op::REGISTER,
            c,
            current_key,
            new_key,
            "reservation register",
        )
    }

    /// Reservation Acquire of type `rtype` with this host's `key`.
    pub fn resv_acquire(&self, key: u64, rtype: ResvType, action: AcquireAction) -> Result<()> {
        let (racqa, victim) = match action {
            AcquireAction::Acquire => (racqa::ACQUIRE, 0),
            AcquireAction::Preempt { victim_key } => (racqa::PREEMPT, victim_key),
            AcquireAction::PreemptAndAbort { victim_key } => (racqa::PREEMPT_AND_ABORT, victim_key),
        };
        let c = ResvCdw10 {
            action: racqa,
            iekey: false,
            rtype: rtype as u8,
            cptpl: 0,
        };
        self.resv_command(op::ACQUIRE, c, key, victim, "reservation acquire")
    }

    /// Reservation Release of the reservation of type `rtype` this host holds.
    pub fn resv_release(&self, key: u64, rtype: ResvType) -> Result<()> {
        let c = ResvCdw10 {
            action: rrela::RELEASE,
            iekey: false,
            rtype: rtype as u8,
            cptpl: 0,
        };
        self.resv_command(op::RELEASE, c, key, 0, "reservation release")
    }

    /// Reservation Release, clear: the reservation and every registration go.
    pub fn resv_clear(&self, key: u64) -> Result<()> {
        let c = ResvCdw10 {
            action: rrela::CLEAR,
            iekey: false,
            rtype: 0,
            cptpl: 0,
        };
        self.resv_command(op::RELEASE, c, key, 0, "reservation clear")
    }

    /// Reservation Report (the extended data structure: 128-bit host IDs).
    pub fn resv_report(&self) -> Result<ReservationReport> {
        let mut buf = self.path.alloc(REPORT_BYTES as usize)?;
        let mut sqe = Sqe::new(op::REPORT, 0);
        sqe.nsid = self.info.nsid;
        sqe.cdw10 = REPORT_BYTES / 4 - 1;
        sqe.cdw11 = 1; // EDS
        let cmds = [Cmd {
            sqe,
            dir: Dir::ToHost(Seg::of(&buf, 0, REPORT_BYTES)),
        }];
        self.run(&cmds, "reservation report", true)?;
        let (generation, rtype, persist, registrants) =
            decode_report(&buf.as_mut_slice()[..REPORT_BYTES as usize]).ok_or_else(|| {
                Error::Protocol {
                    what: "a Reservation Report shorter than its header".into(),
                }
            })?;
        Ok(ReservationReport {
            generation,
            rtype: ResvType::from_u8(rtype),
            persist,
            registrants,
        })
    }

    fn resv_command(
        &self,
        opcode: u8,
        c: ResvCdw10,
        k1: u64,
        k2: u64,
        what: &'static str,
    ) -> Result<()> {
        let len = if opcode == op::RELEASE {
            ONE_KEY
        } else {
            TWO_KEYS
        };
        let mut buf = self.path.alloc(len as usize)?;
        buf.as_mut_slice()[..len as usize].copy_from_slice(&encode_keys(k1, k2)[..len as usize]);
        let mut sqe = Sqe::new(opcode, 0);
        sqe.nsid = self.info.nsid;
        sqe.cdw10 = c.to_cdw10();
        let cmds = [Cmd {
            sqe,
            dir: Dir::ToCtrl(Seg::of(&buf, 0, len)),
        }];
        // Never re-sent after a reconnect (see the module's documentation).
        self.run(&cmds, what, false)
    }
}
