//! Work-request IDs: what a work completion on a worker's CQ was, and for which queue and
//! request slot.

/// What a work request was, encoded in its 64-bit ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WrKind {
    Recv = 1,
    Send = 2,
    Read = 3,
    Write = 4,
    Bind = 5,
    Invalidate = 6,
    /// A receive of the worker's shared receive queue: `slot` is the buffer, `queue` unused
    /// (the completion's QP number names the queue).
    SrqRecv = 7,
}

/// A decoded work-request ID: `queue` (the queue key: worker slab index and generation), kind, slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrId {
    pub queue: u32,
    pub kind: WrKind,
    pub slot: u32,
}

impl WrId {
    pub fn new(queue: u32, kind: WrKind, slot: u32) -> WrId {
        WrId { queue, kind, slot }
    }

    pub fn encode(self) -> u64 {
        u64::from(self.queue) << 32 | (self.kind as u64) << 24 | u64::from(self.slot & 0xFF_FFFF)
    }

    pub fn decode(v: u64) -> Option<WrId> {
        let kind = match (v >> 24) as u8 {
            1 => WrKind::Recv,
            2 => WrKind::Send,
            3 => WrKind::Read,
            4 => WrKind::Write,
            5 => WrKind::Bind,
            6 => WrKind::Invalidate,
            7 => WrKind::SrqRecv,
            _ => return None,
        };
        Some(WrId {
            queue: (v >> 32) as u32,
            kind,
            slot: (v & 0xFF_FFFF) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_round_trip() {
        for kind in [
            WrKind::Recv,
            WrKind::Send,
            WrKind::Bind,
            WrKind::Invalidate,
            WrKind::SrqRecv,
        ] {
            let id = WrId::new(0xABCD_0012, kind, 1023);
            assert_eq!(WrId::decode(id.encode()), Some(id));
        }
        assert_eq!(WrId::decode(0), None);
    }
}
