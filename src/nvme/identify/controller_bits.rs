//! The bits and values of Identify Controller's fields: SGLS, ONCS, LPA, OAES, CMIC, ANACAP,
//! CTRATT, CNTRLTYPE, VWC and the queue entry sizes (SQES, CQES).

/// Identify SGLS bits.
pub mod sgls {
    /// SGLs supported, no alignment requirement (bits 1:0 = 01).
    pub const SUPPORTED: u32 = 1 << 0;
    /// Bits 1:0: 00 means no SGL support at all, which no fabrics controller may report.
    pub const SUPPORT_MASK: u32 = 0b11;
    /// Keyed SGL data block descriptor supported (the Linux host requires it).
    pub const KEYED: u32 = 1 << 2;
    /// SGL offset (in-capsule data) supported; the Linux host sends in-capsule writes only
    /// when set.
    pub const OFFSET: u32 = 1 << 20;
}

/// Identify ONCS bits.
pub mod oncs {
    pub const COMPARE: u16 = 1 << 0;
    pub const WRITE_UNCORRECTABLE: u16 = 1 << 1;
    pub const DSM: u16 = 1 << 2;
    pub const WRITE_ZEROES: u16 = 1 << 3;
    pub const SAVE_SELECT_FEATURES: u16 = 1 << 4;
    pub const RESERVATIONS: u16 = 1 << 5;
    pub const TIMESTAMP: u16 = 1 << 6;
}

/// Identify LPA bits.
pub mod lpa {
    /// SMART log per namespace.
    pub const SMART_PER_NS: u8 = 1 << 0;
    /// Commands Supported and Effects log page.
    pub const CMD_EFFECTS: u8 = 1 << 1;
    /// Extended data for Get Log Page (NUMDU, LPO).
    pub const EXTENDED: u8 = 1 << 2;
}

/// Identify OAES bits.
pub mod oaes {
    /// Namespace attribute notices (changed namespace list).
    pub const NS_ATTR: u32 = 1 << 8;
    /// Firmware activation notices.
    pub const FW_ACTIVATION: u32 = 1 << 9;
    /// ANA change notices.
    pub const ANA_CHANGE: u32 = 1 << 11;
    /// Discovery log page change notices (discovery controllers).
    pub const DISCOVERY_LOG_CHANGE: u32 = 1 << 31;
}

/// Identify CMIC bits (controller multi-path I/O and namespace sharing capabilities).
pub mod cmic {
    /// The subsystem may have more than one port.
    pub const MULTI_PORT: u8 = 1 << 0;
    /// The subsystem may have two or more controllers (the Linux host refuses a second
    /// controller of a subsystem without it: "Subsystem does not support multiple
    /// controllers").
    pub const MULTI_CTRL: u8 = 1 << 1;
    /// Asymmetric namespace access reporting.
    pub const ANA: u8 = 1 << 3;
}

/// Identify Controller ANACAP bits.
pub mod anacap {
    /// Reports the optimized state.
    pub const OPTIMIZED: u8 = 1 << 0;
    /// Reports the non-optimized state.
    pub const NON_OPTIMIZED: u8 = 1 << 1;
    /// Reports the inaccessible state.
    pub const INACCESSIBLE: u8 = 1 << 2;
    /// Reports the persistent loss state.
    pub const PERSISTENT_LOSS: u8 = 1 << 3;
    /// Reports the change state.
    pub const CHANGE: u8 = 1 << 4;
    /// A namespace's ANAGRPID does not change while it is attached.
    pub const GRPID_STATIC: u8 = 1 << 6;
    /// Namespaces may have a non-zero ANAGRPID.
    pub const GRPID_NONZERO: u8 = 1 << 7;
    /// Every state.
    pub const ALL_STATES: u8 = OPTIMIZED | NON_OPTIMIZED | INACCESSIBLE | PERSISTENT_LOSS | CHANGE;
}

/// Identify CTRATT bit 0: 128-bit host identifier.
pub const CTRATT_HOST_ID_128: u32 = 1 << 0;
/// Identify CNTRLTYPE: I/O controller.
pub const CNTRLTYPE_IO: u8 = 1;
/// Identify CNTRLTYPE: discovery controller.
pub const CNTRLTYPE_DISCOVERY: u8 = 2;
/// Identify VWC bit 0: volatile write cache present.
pub const VWC_PRESENT: u8 = 1 << 0;
/// SQES as a fabrics controller reports it: required and maximum 2^6 = 64 bytes.
pub const SQES_64: u8 = 0x66;
/// CQES: required and maximum 2^4 = 16 bytes.
pub const CQES_16: u8 = 0x44;
