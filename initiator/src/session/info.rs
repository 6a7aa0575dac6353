//! What a connected controller told us: [`ControllerInfo`], and per active namespace its
//! [`NamespaceInfo`] with the global identifiers ([`NamespaceIds`]) that tell two paths lead
//! to the same namespace.

use rdmablk::nvme::ana::AnaLog;

/// What a connected controller told us.
#[derive(Debug, Clone)]
pub struct ControllerInfo {
    pub cntlid: u16,
    pub model: String,
    pub serial: String,
    pub firmware: String,
    pub version: (u16, u8, u8),
    /// I/O queues connected.
    pub io_queues: u16,
    /// Entries per I/O queue.
    pub queue_size: u16,
    /// Largest data one command carries (MDTS and our `max_io_bytes`).
    pub max_transfer_bytes: u32,
    /// In-capsule data bytes on I/O queues (0: none).
    pub in_capsule_bytes: u32,
    /// Push-write window granted on the I/O queues: (slots, slot bytes); `None` when the
    /// target did not grant one (standard targets never do).
    pub push_window: Option<(u16, u32)>,
    /// Identify ONCS (optional NVM commands: DSM, Write Zeroes ...).
    pub oncs: u16,
    /// Keep-alive timeout in effect (0: none).
    pub kato_ms: u32,
    /// Subsystem NQN from Identify Controller (empty if the controller left it out).
    pub subnqn: String,
    /// Identify CMIC (bit 1 several controllers, bit 3 ANA reporting).
    pub cmic: u8,
    /// The ANA log as last read (at connect, on an ANA change notice, or on request);
    /// `None` when the controller does not report ANA.
    pub ana: Option<AnaLog>,
    /// Whether the controller sends ANA change notices (and one is armed).
    pub ana_notices: bool,
    pub namespaces: Vec<NamespaceInfo>,
}

/// One active namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: u32,
    pub block_size: u32,
    pub blocks: u64,
    /// Global identifiers (what tells two paths lead to the same namespace).
    pub ids: NamespaceIds,
    /// ANA group ID (0: none reported).
    pub ana_group: u32,
}

/// A namespace's globally unique identifiers, each `None` when not reported (all zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NamespaceIds {
    pub nguid: Option<[u8; 16]>,
    pub eui64: Option<[u8; 8]>,
    pub uuid: Option<[u8; 16]>,
}

impl NamespaceIds {
    /// Whether none is reported.
    pub fn is_empty(&self) -> bool {
        self.nguid.is_none() && self.eui64.is_none() && self.uuid.is_none()
    }
}

impl std::fmt::Display for NamespaceIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let mut parts = Vec::new();
        if let Some(v) = self.nguid {
            parts.push(format!("nguid {}", hex(&v)));
        }
        if let Some(v) = self.eui64 {
            parts.push(format!("eui64 {}", hex(&v)));
        }
        if let Some(v) = self.uuid {
            parts.push(format!("uuid {}", hex(&v)));
        }
        if parts.is_empty() {
            return f.write_str("no identifiers");
        }
        f.write_str(&parts.join(", "))
    }
}

pub(super) fn non_zero<const N: usize>(v: [u8; N]) -> Option<[u8; N]> {
    v.iter().any(|&b| b != 0).then_some(v)
}
