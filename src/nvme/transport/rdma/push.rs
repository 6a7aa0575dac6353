//! rdmablk's push-write negotiation: what a host asks for ([`PushRequest`]), the window a
//! target grants ([`PushWindow`]) and the answer an accept carries ([`PushAnswer`]).

/// What a host asks for in the push-write extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushRequest {
    /// Slots wanted (0: the target chooses).
    pub slots: u16,
    /// Bytes per slot wanted (0: the target chooses).
    pub slot_bytes: u32,
}

/// The per-connection window a target grants for push writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushWindow {
    /// Number of slots (at least 1).
    pub slots: u16,
    /// Bytes per slot (at least 1).
    pub slot_bytes: u32,
    /// Remote address of slot 0.
    pub addr: u64,
    /// Window length in bytes: `slots * slot_bytes`.
    pub len: u32,
    /// Remote key of the window (memory window or per-connection MR).
    pub rkey: u32,
}

impl PushWindow {
    /// A window of `slots` slots of `slot_bytes`, or `None` when empty or longer than 4 GiB.
    pub fn new(addr: u64, rkey: u32, slots: u16, slot_bytes: u32) -> Option<PushWindow> {
        let len = u32::try_from(u64::from(slots) * u64::from(slot_bytes)).ok()?;
        (slots > 0 && slot_bytes > 0).then_some(PushWindow {
            slots,
            slot_bytes,
            addr,
            len,
            rkey,
        })
    }

    /// Remote address of slot `i`, or `None` past the last slot.
    pub fn slot_addr(&self, i: u16) -> Option<u64> {
        (i < self.slots).then(|| {
            self.addr
                .wrapping_add(u64::from(i) * u64::from(self.slot_bytes))
        })
    }
}

/// The target's answer to a push-write request, as an accept carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushAnswer {
    /// No extension: a standard target, or no request was made. Reserved bytes are zero.
    Absent,
    /// An rdmablk target that understood the request and declined it.
    Declined,
    /// Granted.
    Granted(PushWindow),
}
