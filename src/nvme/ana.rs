//! Asymmetric Namespace Access (NVMe Base 2.0, 8.1): ANA states, and the ANA log page
//! (Get Log Page 0x0C) that reports them per ANA group.
//!
//! ```text
//! ANA log page
//!   header (16 bytes):   0 chgcnt u64   8 ngrps u16   10 reserved[6]
//!   then ngrps group descriptors, each:
//!     0 anagrpid u32   4 nnsids u32   8 chgcnt u64   16 state u8 (bits 3:0)   17 reserved[15]
//!     32 nsid[nnsids] u32, ascending
//! Get Log Page LSP bit 0 (RGO, Return Groups Only): every nnsids is 0 and no NSID follows.
//! ```

use std::fmt;

use super::error::WireError;
use super::le::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use super::status::Status;

/// Bytes of the log header.
pub const HEADER_LEN: usize = 16;
/// Bytes of a group descriptor before its NSID list.
pub const GROUP_LEN: usize = 32;
/// Get Log Page LSP bit 0: Return Groups Only.
pub const LSP_RGO: u8 = 1 << 0;

/// An ANA state, as a path reports it for one ANA group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AnaState {
    /// The best path: use it.
    Optimized,
    /// Works, but another path is better.
    NonOptimized,
    /// No I/O through this path now (it may come back).
    Inaccessible,
    /// No I/O through this path ever again.
    PersistentLoss,
    /// In transition (at most ANATT seconds): retry later or elsewhere.
    Change,
}

impl AnaState {
    /// Every state, in wire-code order.
    pub const ALL: [AnaState; 5] = [
        AnaState::Optimized,
        AnaState::NonOptimized,
        AnaState::Inaccessible,
        AnaState::PersistentLoss,
        AnaState::Change,
    ];

    /// The wire code (group descriptor byte 16).
    pub const fn code(self) -> u8 {
        match self {
            AnaState::Optimized => 0x01,
            AnaState::NonOptimized => 0x02,
            AnaState::Inaccessible => 0x03,
            AnaState::PersistentLoss => 0x04,
            AnaState::Change => 0x0F,
        }
    }

    pub fn from_code(c: u8) -> Option<AnaState> {
        AnaState::ALL.into_iter().find(|s| s.code() == c & 0x0F)
    }

    /// The name used in configs, logs and sysfs (`optimized`, `non-optimized`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non-optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent-loss",
            AnaState::Change => "change",
        }
    }

    pub fn from_name(s: &str) -> Option<AnaState> {
        AnaState::ALL.into_iter().find(|a| a.name() == s)
    }

    /// Whether I/O may be sent through a path in this state.
    pub const fn accessible(self) -> bool {
        matches!(self, AnaState::Optimized | AnaState::NonOptimized)
    }

    /// The path-related status an I/O command gets through a path in this state, or `None`
    /// when the path serves I/O. Never with DNR: the host retries on another path.
    pub const fn io_status(self) -> Option<Status> {
        match self {
            AnaState::Optimized | AnaState::NonOptimized => None,
            AnaState::Inaccessible => Some(Status::ANA_INACCESSIBLE),
            AnaState::PersistentLoss => Some(Status::ANA_PERSISTENT_LOSS),
            AnaState::Change => Some(Status::ANA_TRANSITION),
        }
    }
}

impl fmt::Display for AnaState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One ANA group descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnaGroup {
    /// ANA group ID (non-zero).
    pub grpid: u32,
    /// Change count of this group's state.
    pub chgcnt: u64,
    pub state: AnaState,
    /// The group's namespaces attached to the controller (empty with RGO).
    pub nsids: Vec<u32>,
}

/// The ANA log page.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AnaLog {
    /// Change count of the whole log.
    pub chgcnt: u64,
    pub groups: Vec<AnaGroup>,
}

impl AnaLog {
    /// Bytes the encoded log takes (with the NSID lists unless `rgo`).
    pub fn encoded_len(&self, rgo: bool) -> usize {
        HEADER_LEN
            + self
                .groups
                .iter()
                .map(|g| GROUP_LEN + if rgo { 0 } else { 4 * g.nsids.len() })
                .sum::<usize>()
    }

    /// Encodes the log; with `rgo` (Return Groups Only) the NSID lists are left out.
    pub fn encode(&self, rgo: bool) -> Vec<u8> {
        let mut b = vec![0u8; self.encoded_len(rgo)];
        put_u64(&mut b, 0, self.chgcnt);
        put_u16(
            &mut b,
            8,
            self.groups.len().min(usize::from(u16::MAX)) as u16,
        );
        let mut off = HEADER_LEN;
        for g in &self.groups {
            let n = if rgo { 0 } else { g.nsids.len() };
            put_u32(&mut b, off, g.grpid);
            put_u32(&mut b, off + 4, n as u32);
            put_u64(&mut b, off + 8, g.chgcnt);
            b[off + 16] = g.state.code();
            off += GROUP_LEN;
            for &nsid in &g.nsids[..n] {
                put_u32(&mut b, off, nsid);
                off += 4;
            }
        }
        b
    }

    /// Decodes a log as a host reads it; checks what the Linux host checks (no group 0, a
    /// known state, descriptors inside the buffer).
    pub fn decode(b: &[u8]) -> Result<AnaLog, WireError> {
        if b.len() < HEADER_LEN {
            return Err(WireError::field(
                "ANA log",
                format!("{} bytes, shorter than its 16-byte header", b.len()),
            ));
        }
        let chgcnt = u64_at(b, 0);
        let ngrps = usize::from(u16_at(b, 8));
        let mut groups = Vec::with_capacity(ngrps.min(1024));
        let mut off = HEADER_LEN;
        for _ in 0..ngrps {
            if b.len() < off + GROUP_LEN {
                return Err(WireError::field(
                    "ANA log",
                    format!(
                        "group descriptor at byte {off} past the end ({} bytes)",
                        b.len()
                    ),
                ));
            }
            let grpid = u32_at(b, off);
            let n = u32_at(b, off + 4) as usize;
            let gchg = u64_at(b, off + 8);
            let code = b[off + 16];
            if grpid == 0 {
                return Err(WireError::field("ANA log", "group ID 0"));
            }
            let state = AnaState::from_code(code).ok_or_else(|| {
                WireError::field("ANA log", format!("group {grpid}: unknown state {code:#x}"))
            })?;
            off += GROUP_LEN;
            let end = n
                .checked_mul(4)
                .and_then(|l| l.checked_add(off))
                .filter(|&e| e <= b.len())
                .ok_or_else(|| {
                    WireError::field(
                        "ANA log",
                        format!("group {grpid}: {n} NSIDs past the end ({} bytes)", b.len()),
                    )
                })?;
            let nsids = (off..end).step_by(4).map(|o| u32_at(b, o)).collect();
            off = end;
            groups.push(AnaGroup {
                grpid,
                chgcnt: gchg,
                state,
                nsids,
            });
        }
        Ok(AnaLog { chgcnt, groups })
    }

    /// The state of the group that holds `nsid`, if the log lists it.
    pub fn state_of(&self, nsid: u32) -> Option<AnaState> {
        self.groups
            .iter()
            .find(|g| g.nsids.contains(&nsid))
            .map(|g| g.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> AnaLog {
        AnaLog {
            chgcnt: 7,
            groups: vec![
                AnaGroup {
                    grpid: 1,
                    chgcnt: 3,
                    state: AnaState::Optimized,
                    nsids: vec![1, 2],
                },
                AnaGroup {
                    grpid: 2,
                    chgcnt: 4,
                    state: AnaState::Inaccessible,
                    nsids: vec![5],
                },
            ],
        }
    }

    #[test]
    fn layout_matches_the_spec() {
        let b = sample().encode(false);
        assert_eq!(b.len(), 16 + 32 + 8 + 32 + 4);
        assert_eq!(u64_at(&b, 0), 7);
        assert_eq!(u16_at(&b, 8), 2);
        assert_eq!((u32_at(&b, 16), u32_at(&b, 20), u64_at(&b, 24)), (1, 2, 3));
        assert_eq!(b[32], 0x01);
        assert_eq!((u32_at(&b, 48), u32_at(&b, 52)), (1, 2));
        assert_eq!((u32_at(&b, 56), u32_at(&b, 60)), (2, 1));
        assert_eq!(b[72], 0x03);
        assert_eq!(u32_at(&b, 88), 5);
        assert_eq!(AnaLog::decode(&b).unwrap(), sample());
    }

    #[test]
    fn rgo_leaves_out_the_nsids() {
        let b = sample().encode(true);
        assert_eq!(b.len(), 16 + 2 * 32);
        let d = AnaLog::decode(&b).unwrap();
        assert!(d.groups.iter().all(|g| g.nsids.is_empty()));
        assert_eq!(d.groups[1].state, AnaState::Inaccessible);
    }

    #[test]
    fn decode_refuses_what_the_linux_host_refuses() {
        let mut b = sample().encode(false);
        b[16] = 0; // group 1 -> 0
        assert!(AnaLog::decode(&b).is_err());
        let mut b = sample().encode(false);
        b[32] = 0x05; // no such state
        assert!(AnaLog::decode(&b).is_err());
        let b = sample().encode(false);
        assert!(AnaLog::decode(&b[..b.len() - 1]).is_err());
        let mut b = sample().encode(false);
        put_u32(&mut b, 20, u32::MAX); // nnsids past the end
        assert!(AnaLog::decode(&b).is_err());
    }

    #[test]
    fn states_codes_names_and_statuses() {
        for s in AnaState::ALL {
            assert_eq!(AnaState::from_code(s.code()), Some(s));
            assert_eq!(AnaState::from_name(s.name()), Some(s));
            assert_eq!(s.accessible(), s.io_status().is_none());
            assert!(s.io_status().is_none_or(|st| !st.dnr), "{s}: never DNR");
        }
        assert_eq!(AnaState::Change.code(), 0x0F);
        assert_eq!(
            AnaState::Inaccessible.io_status(),
            Some(Status::ANA_INACCESSIBLE)
        );
        assert_eq!(AnaState::from_name("fast"), None);
    }
}
