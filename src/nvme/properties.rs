//! Controller properties reached by Fabrics Property Get/Set: offsets and typed registers.
//!
//! ```text
//! offset size name
//! 0x00   8    CAP   controller capabilities
//! 0x08   4    VS    version
//! 0x14   4    CC    controller configuration
//! 0x1C   4    CSTS  controller status
//! 0x20   4    NSSR  NVM subsystem reset
//!
//! CAP   63      56 55  52 51  48 47  45 44   37 36  35  32 31   24 23  19 18 17 16 15     0
//!      +----------+------+------+------+-------+----+------+-------+------+-----+---+--------+
//!      |   rsvd   |MPSMAX|MPSMIN| ...  |  CSS  |NSSRS|DSTRD|  TO   | rsvd | AMS |CQR|  MQES  |
//! CC    bit 0 EN, 6:4 CSS, 10:7 MPS, 13:11 AMS, 15:14 SHN, 19:16 IOSQES, 23:20 IOCQES
//! CSTS  bit 0 RDY, 1 CFS, 3:2 SHST, 4 NSSRO, 5 PP
//! VS    31:16 major, 15:8 minor, 7:0 tertiary
//! ```

/// CAP offset (8 bytes).
pub const CAP: u32 = 0x00;
/// VS offset.
pub const VS: u32 = 0x08;
/// INTMS offset (PCIe only; not a fabrics property).
pub const INTMS: u32 = 0x0C;
/// INTMC offset (PCIe only; not a fabrics property).
pub const INTMC: u32 = 0x10;
/// CC offset.
pub const CC: u32 = 0x14;
/// CSTS offset.
pub const CSTS: u32 = 0x1C;
/// NSSR offset.
pub const NSSR: u32 = 0x20;

/// Value NSSR takes to reset the subsystem ("NVMe").
pub const NSSR_RESET_VALUE: u32 = 0x4E56_4D65;

/// Size of a property, as Property Get/Set's ATTRIB says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertySize {
    /// ATTRIB.SIZE 0.
    Four,
    /// ATTRIB.SIZE 1.
    Eight,
}

impl PropertySize {
    /// The size of the property at `offset`, for the properties a fabrics controller has.
    pub fn of_offset(offset: u32) -> Option<PropertySize> {
        match offset {
            CAP => Some(PropertySize::Eight),
            VS | CC | CSTS | NSSR => Some(PropertySize::Four),
            _ => None,
        }
    }

    /// ATTRIB byte value.
    pub fn attrib(self) -> u8 {
        match self {
            PropertySize::Four => 0,
            PropertySize::Eight => 1,
        }
    }
}

const fn get(v: u64, lo: u32, width: u32) -> u64 {
    (v >> lo) & ((1u64 << width) - 1)
}

const fn set(v: u64, lo: u32, width: u32, x: u64) -> u64 {
    let mask = ((1u64 << width) - 1) << lo;
    (v & !mask) | ((x << lo) & mask)
}

/// A register field's Rust type.
trait RegField {
    fn from_raw(v: u64) -> Self;
    fn to_raw(self) -> u64;
}

impl RegField for bool {
    fn from_raw(v: u64) -> bool {
        v != 0
    }
    fn to_raw(self) -> u64 {
        u64::from(self)
    }
}

impl RegField for u8 {
    fn from_raw(v: u64) -> u8 {
        v as u8
    }
    fn to_raw(self) -> u64 {
        u64::from(self)
    }
}

impl RegField for u16 {
    fn from_raw(v: u64) -> u16 {
        v as u16
    }
    fn to_raw(self) -> u64 {
        u64::from(self)
    }
}

/// Defines getter / `with_` setter pairs over bit ranges of a register newtype.
macro_rules! reg_fields {
    ($reg:ident : $raw:ty { $( $(#[$m:meta])* $name:ident / $with:ident : $ty:ty = $lo:literal, $w:literal; )* }) => {
        impl $reg {
            $(
                $(#[$m])*
                pub fn $name(self) -> $ty {
                    <$ty as RegField>::from_raw(get(u64::from(self.0), $lo, $w))
                }
                #[doc = concat!("The register with `", stringify!($name), "` set (excess bits dropped).")]
                pub fn $with(self, v: $ty) -> $reg {
                    $reg(set(u64::from(self.0), $lo, $w, v.to_raw()) as $raw)
                }
            )*
        }
    };
}

/// Controller Capabilities (CAP, 8 bytes at 0x00).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cap(pub u64);

reg_fields!(Cap: u64 {
    /// Maximum queue entries supported, 0-based (queue size - 1).
    mqes / with_mqes: u16 = 0, 16;
    /// Contiguous queues required.
    cqr / with_cqr: bool = 16, 1;
    /// Arbitration mechanisms supported.
    ams / with_ams: u8 = 17, 2;
    /// Worst-case time to ready, in 500 ms units.
    timeout_500ms / with_timeout_500ms: u8 = 24, 8;
    /// Doorbell stride.
    dstrd / with_dstrd: u8 = 32, 4;
    /// NVM subsystem reset supported.
    nssrs / with_nssrs: bool = 36, 1;
    /// Command sets supported (bit 0 of this field, CAP bit 37: NVM command set).
    css / with_css: u8 = 37, 8;
    /// Boot partition support.
    bps / with_bps: bool = 45, 1;
    /// Memory page size minimum: 2^(12 + MPSMIN).
    mpsmin / with_mpsmin: u8 = 48, 4;
    /// Memory page size maximum: 2^(12 + MPSMAX).
    mpsmax / with_mpsmax: u8 = 52, 4;
});

impl Cap {
    /// CSS bit for the NVM command set.
    pub const CSS_NVM: u8 = 0x01;
    /// CSS bit: one or more I/O command sets (CSS bit 6, CAP bit 43).
    pub const CSS_IO_SETS: u8 = 0x40;

    /// True when the NVM command set is supported (CAP bit 37).
    pub fn supports_nvm(self) -> bool {
        self.css() & Cap::CSS_NVM != 0
    }
}

/// Version (VS, 4 bytes at 0x08).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Vs(pub u32);

impl Vs {
    /// NVMe 1.3.0, what nvmet reports and what the Linux host expects of a fabrics target.
    pub const V1_3: Vs = Vs::new(1, 3, 0);
    /// NVMe 1.4.0.
    pub const V1_4: Vs = Vs::new(1, 4, 0);

    /// A version from its parts.
    pub const fn new(major: u16, minor: u8, tertiary: u8) -> Vs {
        Vs((major as u32) << 16 | (minor as u32) << 8 | tertiary as u32)
    }

    /// Major version.
    pub const fn major(self) -> u16 {
        (self.0 >> 16) as u16
    }

    /// Minor version.
    pub const fn minor(self) -> u8 {
        (self.0 >> 8) as u8
    }

    /// Tertiary version.
    pub const fn tertiary(self) -> u8 {
        self.0 as u8
    }
}

/// Controller Configuration (CC, 4 bytes at 0x14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cc(pub u32);

reg_fields!(Cc: u32 {
    /// Enable.
    en / with_en: bool = 0, 1;
    /// I/O command set selected (0: NVM).
    css / with_css: u8 = 4, 3;
    /// Memory page size: 2^(12 + MPS).
    mps / with_mps: u8 = 7, 4;
    /// Arbitration mechanism selected.
    ams / with_ams: u8 = 11, 3;
    /// Shutdown notification (see [`shn`]).
    shn / with_shn: u8 = 14, 2;
    /// I/O submission queue entry size, log2 (6: 64 bytes).
    iosqes / with_iosqes: u8 = 16, 4;
    /// I/O completion queue entry size, log2 (4: 16 bytes).
    iocqes / with_iocqes: u8 = 20, 4;
    /// Controller ready independent of media enable.
    crime / with_crime: bool = 24, 1;
});

/// CC.SHN values.
pub mod shn {
    /// No notification.
    pub const NONE: u8 = 0;
    /// Normal shutdown.
    pub const NORMAL: u8 = 1;
    /// Abrupt shutdown.
    pub const ABRUPT: u8 = 2;
}

/// CSTS.SHST values.
pub mod shst {
    /// Normal operation.
    pub const NORMAL: u8 = 0;
    /// Shutdown processing occurring.
    pub const OCCURRING: u8 = 1;
    /// Shutdown processing complete.
    pub const COMPLETE: u8 = 2;
}

/// Controller Status (CSTS, 4 bytes at 0x1C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Csts(pub u32);

reg_fields!(Csts: u32 {
    /// Ready.
    rdy / with_rdy: bool = 0, 1;
    /// Controller fatal status.
    cfs / with_cfs: bool = 1, 1;
    /// Shutdown status (see [`shst`]).
    shst / with_shst: u8 = 2, 2;
    /// NVM subsystem reset occurred.
    nssro / with_nssro: bool = 4, 1;
    /// Processing paused.
    pp / with_pp: bool = 5, 1;
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_fields_at_spec_bits() {
        // MQES 127, TO 15 (7.5 s), CSS NVM, MPSMIN 0, MPSMAX 0: 0x0000_0020_0F00_007F.
        let cap = Cap::default()
            .with_mqes(127)
            .with_timeout_500ms(15)
            .with_css(Cap::CSS_NVM)
            .with_cqr(true);
        assert_eq!(cap.0, 0x0000_0020_0F01_007F);
        assert!(cap.supports_nvm());
        assert_eq!(cap.0 >> 37 & 1, 1);
        let cap = cap.with_mpsmax(4).with_mpsmin(0);
        assert_eq!(cap.mpsmax(), 4);
        assert_eq!(cap.0 >> 52 & 0xF, 4);
        assert_eq!(cap.mqes(), 127);
        assert!(cap.cqr());
    }

    #[test]
    fn cc_as_linux_writes_it() {
        // nvme_enable_ctrl: CSS NVM, MPS 0 (4 KiB), AMS RR, IOSQES 6, IOCQES 4, EN.
        let cc = Cc(0x0046_0001);
        assert!(cc.en());
        assert_eq!(cc.iosqes(), 6);
        assert_eq!(cc.iocqes(), 4);
        assert_eq!(cc.shn(), shn::NONE);
        assert_eq!(
            Cc::default().with_en(true).with_iosqes(6).with_iocqes(4),
            cc
        );
        let shutdown = cc.with_shn(shn::NORMAL);
        assert_eq!(shutdown.0, 0x0046_4001);
    }

    #[test]
    fn csts_and_vs() {
        let c = Csts::default().with_rdy(true).with_shst(shst::COMPLETE);
        assert_eq!(c.0, 0x9);
        assert_eq!(c.shst(), 2);
        assert_eq!(Vs::V1_3.0, 0x0001_0300);
        assert_eq!(
            (Vs::V1_3.major(), Vs::V1_3.minor(), Vs::V1_3.tertiary()),
            (1, 3, 0)
        );
        assert_eq!(PropertySize::of_offset(CAP), Some(PropertySize::Eight));
        assert_eq!(PropertySize::of_offset(CSTS), Some(PropertySize::Four));
        assert_eq!(PropertySize::of_offset(0x0C), None);
    }
}
