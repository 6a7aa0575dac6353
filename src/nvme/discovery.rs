//! The Discovery Log Page (log identifier 0x70, NVMe-oF 1.1 section 5.4): a 1024-byte header
//! followed by one 1024-byte entry per (subsystem, port) the host may connect to.
//!
//! ```text
//! header   0 GENCTR u64 | 8 NUMREC u64 | 16 RECFMT u16 | 18..1024 reserved
//! entry    0 TRTYPE | 1 ADRFAM | 2 SUBTYPE | 3 TREQ | 4 PORTID u16 | 6 CNTLID u16
//!          8 ASQSZ u16 | 10 EFLAGS u16 | 12..32 reserved
//!         32 TRSVCID [32] | 64..256 reserved | 256 SUBNQN [256] | 512 TRADDR [256]
//!        768 TSAS [256]
//! TSAS (RDMA)  0 RDMA_QPTYPE | 1 RDMA_PRTYPE | 2 RDMA_CMS | 3..8 reserved | 8 RDMA_PKEY u16
//! ```
//!
//! String fields are ASCII, NUL padded as Linux nvmet writes them (its host and nvme-cli read
//! up to the first NUL or trailing space); decoding trims both and never trusts a terminator.

use super::le::{put_u16, put_u64, u16_at, u64_at};
use super::{ascii_trimmed, WireError};

/// Size of the header and of each entry.
pub const DISCOVERY_RECORD_LEN: usize = 1024;
/// Size of the TRSVCID field.
pub const TRSVCID_LEN: usize = 32;
/// Size of the TRADDR, SUBNQN and TSAS fields.
pub const TRADDR_LEN: usize = 256;

/// Transport types (TRTYPE).
pub mod trtype {
    pub const RDMA: u8 = 1;
    pub const FC: u8 = 2;
    pub const TCP: u8 = 3;
    pub const LOOP: u8 = 0xFE;
}

/// Address families (ADRFAM).
pub mod adrfam {
    pub const IPV4: u8 = 1;
    pub const IPV6: u8 = 2;
}

/// Subsystem types (SUBTYPE).
pub mod subtype {
    /// A referral to another discovery service.
    pub const REFERRAL: u8 = 1;
    /// An NVM subsystem: something to connect I/O queues to.
    pub const NVME: u8 = 2;
    /// The discovery subsystem answering this log (TP 8013).
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// Transport requirements (TREQ) bits 1:0: secure channel.
pub mod treq {
    pub const NOT_SPECIFIED: u8 = 0;
    pub const REQUIRED: u8 = 1;
    pub const NOT_REQUIRED: u8 = 2;
}

/// RDMA transport-specific address subtype (TSAS) values.
pub mod rdma {
    /// RDMA_QPTYPE: reliable connected.
    pub const QPTYPE_CONNECTED: u8 = 1;
    /// RDMA_PRTYPE: no provider specified (what nvmet advertises).
    pub const PRTYPE_NOT_SPECIFIED: u8 = 1;
    /// RDMA_CMS: the RDMA connection manager.
    pub const CMS_RDMA_CM: u8 = 1;
}

/// EFLAGS bit 0: duplicate returned information (the same subsystem through another entry).
pub const EFLAGS_DUPLICATE_RETURNED_INFO: u16 = 1 << 0;
/// EFLAGS bit 1: explicit persistent connection support for discovery.
pub const EFLAGS_EPCSD: u16 = 1 << 1;

/// The log page header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiscoveryLogHeader {
    /// Generation counter: changes whenever the log's content does.
    pub genctr: u64,
    /// Number of entries that follow.
    pub numrec: u64,
    /// Record format (0).
    pub recfmt: u16,
}

impl DiscoveryLogHeader {
    pub fn encode(&self) -> [u8; DISCOVERY_RECORD_LEN] {
        let mut b = [0u8; DISCOVERY_RECORD_LEN];
        put_u64(&mut b, 0, self.genctr);
        put_u64(&mut b, 8, self.numrec);
        put_u16(&mut b, 16, self.recfmt);
        b
    }

    /// Decodes the first 1024 bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<DiscoveryLogHeader, WireError> {
        let b = record(b, "discovery log header")?;
        let h = DiscoveryLogHeader {
            genctr: u64_at(b, 0),
            numrec: u64_at(b, 8),
            recfmt: u16_at(b, 16),
        };
        if h.recfmt != 0 {
            return Err(WireError::field(
                "discovery log RECFMT",
                format!("{} (only format 0 exists)", h.recfmt),
            ));
        }
        Ok(h)
    }
}

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DiscoveryLogEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub treq: u8,
    pub portid: u16,
    /// 0xFFFF: the dynamic controller model (any controller ID).
    pub cntlid: u16,
    /// Maximum admin queue size the port takes.
    pub asqsz: u16,
    pub eflags: u16,
    /// Transport service ID: the port number, as text.
    pub trsvcid: String,
    /// Transport address: the IP address, as text.
    pub traddr: String,
    pub subnqn: String,
    /// Transport-specific address subtype (RDMA: queue pair type, provider, CM, P_Key).
    pub tsas: [u8; 16],
}

impl DiscoveryLogEntry {
    /// The RDMA TSAS nvmet advertises: RC queue pairs, no provider type, RDMA CM, P_Key 0.
    pub fn rdma_tsas() -> [u8; 16] {
        let mut t = [0u8; 16];
        t[0] = rdma::QPTYPE_CONNECTED;
        t[1] = rdma::PRTYPE_NOT_SPECIFIED;
        t[2] = rdma::CMS_RDMA_CM;
        t
    }

    pub fn encode(&self) -> [u8; DISCOVERY_RECORD_LEN] {
        let mut b = [0u8; DISCOVERY_RECORD_LEN];
        b[0] = self.trtype;
        b[1] = self.adrfam;
        b[2] = self.subtype;
        b[3] = self.treq;
        put_u16(&mut b, 4, self.portid);
        put_u16(&mut b, 6, self.cntlid);
        put_u16(&mut b, 8, self.asqsz);
        put_u16(&mut b, 10, self.eflags);
        put_str(&mut b[32..32 + TRSVCID_LEN], &self.trsvcid);
        // At most 223 bytes plus the NUL (NQN rules); longer is cut, never overrun.
        put_str(&mut b[256..256 + super::nqn::NQN_MAX_LEN + 1], &self.subnqn);
        put_str(&mut b[512..512 + TRADDR_LEN], &self.traddr);
        b[768..768 + self.tsas.len()].copy_from_slice(&self.tsas);
        b
    }

    /// Decodes the first 1024 bytes of `b`.
    pub fn decode(b: &[u8]) -> Result<DiscoveryLogEntry, WireError> {
        let b = record(b, "discovery log entry")?;
        let mut tsas = [0u8; 16];
        tsas.copy_from_slice(&b[768..784]);
        Ok(DiscoveryLogEntry {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: u16_at(b, 4),
            cntlid: u16_at(b, 6),
            asqsz: u16_at(b, 8),
            eflags: u16_at(b, 10),
            trsvcid: field_str(&b[32..32 + TRSVCID_LEN]),
            subnqn: field_str(&b[256..256 + TRADDR_LEN]),
            traddr: field_str(&b[512..512 + TRADDR_LEN]),
            tsas,
        })
    }
}

/// A whole log: header, then `entries`, as one buffer (what Get Log Page windows into).
pub fn encode_log(genctr: u64, entries: &[DiscoveryLogEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(DISCOVERY_RECORD_LEN * (entries.len() + 1));
    let header = DiscoveryLogHeader {
        genctr,
        numrec: entries.len() as u64,
        recfmt: 0,
    };
    out.extend_from_slice(&header.encode());
    for e in entries {
        out.extend_from_slice(&e.encode());
    }
    out
}

/// Most entries [`decode_log`] takes from one log (the initiator's bound; nvmet lists one per
/// port and subsystem, far fewer).
pub const MAX_LOG_ENTRIES: u64 = 4096;

/// A whole log as a host reads it: the header, then NUMREC entries at byte 1024 * i. Refuses
/// a NUMREC over [`MAX_LOG_ENTRIES`] and a buffer shorter than the entries it claims, so a
/// peer's counts never drive an allocation or a read past what was received.
pub fn decode_log(b: &[u8]) -> Result<(DiscoveryLogHeader, Vec<DiscoveryLogEntry>), WireError> {
    let h = DiscoveryLogHeader::decode(b)?;
    if h.numrec > MAX_LOG_ENTRIES {
        return Err(WireError::field(
            "Discovery Log",
            format!(
                "claims {} entries (at most {MAX_LOG_ENTRIES} are read)",
                h.numrec
            ),
        ));
    }
    let total = DISCOVERY_RECORD_LEN * (h.numrec as usize + 1);
    if b.len() < total {
        return Err(WireError::Length {
            what: "Discovery Log",
            len: b.len(),
            expected: total,
        });
    }
    let entries = (1..=h.numrec as usize)
        .map(|i| DiscoveryLogEntry::decode(&b[i * DISCOVERY_RECORD_LEN..total]))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((h, entries))
}

fn record<'a>(b: &'a [u8], what: &'static str) -> Result<&'a [u8], WireError> {
    b.get(..DISCOVERY_RECORD_LEN).ok_or(WireError::Length {
        what,
        len: b.len(),
        expected: DISCOVERY_RECORD_LEN,
    })
}

/// Copies `s` into `field`, NUL padded, leaving at least one NUL at the end.
fn put_str(field: &mut [u8], s: &str) {
    let n = s.len().min(field.len().saturating_sub(1));
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// The text of a field up to its first NUL, trailing spaces removed.
fn field_str(field: &[u8]) -> String {
    let end = field.iter().position(|&c| c == 0).unwrap_or(field.len());
    ascii_trimmed(&field[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_log_refuses_counts_the_buffer_does_not_hold() {
        let log = encode_log(7, &[entry(), entry()]);
        let (h, e) = decode_log(&log).unwrap();
        assert_eq!((h.genctr, h.numrec, e.len()), (7, 2, 2));
        assert_eq!(e[1], entry());
        // One byte short of the second entry: a length error, not a panic.
        assert!(matches!(
            decode_log(&log[..log.len() - 1]),
            Err(WireError::Length { expected, .. }) if expected == log.len()
        ));
        // A NUMREC past the bound is refused before anything is sized from it.
        let mut huge = log.clone();
        huge[8..16].copy_from_slice(&(MAX_LOG_ENTRIES + 1).to_le_bytes());
        assert!(matches!(decode_log(&huge), Err(WireError::Field { .. })));
    }

    fn entry() -> DiscoveryLogEntry {
        DiscoveryLogEntry {
            trtype: trtype::RDMA,
            adrfam: adrfam::IPV4,
            subtype: subtype::NVME,
            treq: treq::NOT_SPECIFIED,
            portid: 3,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: 0,
            trsvcid: "4420".into(),
            traddr: "10.0.2.15".into(),
            subnqn: "nqn.2026-11.io.rdmablk:disk".into(),
            tsas: DiscoveryLogEntry::rdma_tsas(),
        }
    }

    #[test]
    fn entry_layout_matches_the_spec() {
        let b = entry().encode();
        assert_eq!(&b[0..4], &[1, 1, 2, 0]);
        assert_eq!(&b[4..12], &[3, 0, 0xFF, 0xFF, 32, 0, 0, 0]);
        assert_eq!(&b[32..37], b"4420\0");
        // struct nvmf_disc_rsp_page_entry: SUBNQN before TRADDR.
        assert_eq!(&b[256..283], b"nqn.2026-11.io.rdmablk:disk");
        assert_eq!(b[283], 0);
        assert_eq!(&b[512..522], b"10.0.2.15\0");
        assert_eq!(&b[768..772], &[1, 1, 1, 0]);
        assert_eq!(DiscoveryLogEntry::decode(&b).unwrap(), entry());
    }

    #[test]
    fn log_header_and_entries() {
        let log = encode_log(7, &[entry(), entry()]);
        assert_eq!(log.len(), 3 * DISCOVERY_RECORD_LEN);
        let h = DiscoveryLogHeader::decode(&log).unwrap();
        assert_eq!((h.genctr, h.numrec, h.recfmt), (7, 2, 0));
        let e = DiscoveryLogEntry::decode(&log[2 * DISCOVERY_RECORD_LEN..]).unwrap();
        assert_eq!(e.subnqn, "nqn.2026-11.io.rdmablk:disk");
    }

    #[test]
    fn decoding_untrusted_bytes_never_panics() {
        assert!(DiscoveryLogEntry::decode(&[0u8; 100]).is_err());
        assert!(DiscoveryLogHeader::decode(&[]).is_err());
        let mut b = [0xFFu8; DISCOVERY_RECORD_LEN];
        assert!(DiscoveryLogHeader::decode(&b).is_err(), "RECFMT 0xFFFF");
        let e = DiscoveryLogEntry::decode(&b).unwrap();
        assert!(
            e.traddr.chars().all(|c| c == '?'),
            "no terminator: cut at the field"
        );
        b[512..516].copy_from_slice(b"1.2 ");
        b[516] = 0;
        assert_eq!(DiscoveryLogEntry::decode(&b).unwrap().traddr, "1.2");
        // A too-long NQN is cut, and the field keeps its terminator.
        let mut long = entry();
        long.subnqn = "n".repeat(400);
        let b = long.encode();
        assert_eq!(b[256 + 223], 0);
        assert_eq!(DiscoveryLogEntry::decode(&b).unwrap().subnqn.len(), 223);
    }
}
