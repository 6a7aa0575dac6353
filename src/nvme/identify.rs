//! Identify (admin opcode 0x06): the command, and the 4096-byte data structures it returns:
//! controller (CNS 1), namespace (CNS 0), active namespace list (CNS 2), namespace
//! identification descriptors (CNS 3).
//!
//! ```text
//! Identify command: nsid (bytes 4..8); cdw10 bits 7:0 CNS, 31:16 CNTID; cdw11 bits 31:24 CSI.
//!
//! Identify Controller (offsets of the fields kept here)
//!    0 vid u16     2 ssvid u16     4 sn[20]      24 mn[40]     64 fr[8]     72 rab
//!   73 ieee[3]    76 cmic         77 mdts       78 cntlid u16  80 ver u32   84 rtd3r u32
//!   88 rtd3e u32  92 oaes u32     96 ctratt u32 111 cntrltype 112 fguid[16]
//!  256 oacs u16  258 acl  259 aerl  260 frmw  261 lpa  262 elpe  263 npss  320 kas u16
//!  342 anatt  343 anacap  344 anagrpmax u32  348 nanagrpid u32
//!  512 sqes  513 cqes  514 maxcmd u16  516 nn u32  520 oncs u16  522 fuses u16  524 fna
//!  525 vwc  526 awun u16  528 awupf u16  532 acwu u16  536 sgls u32  540 mnan u32
//!  768 subnqn[256]
//! 1792 ioccsz u32  1796 iorcsz u32  1800 icdoff u16  1802 fcatt  1803 msdbd  1804 ofcs u16
//! 2048 psd[0]: max_power u16 (2048), flags (2051), enlat u32 (2052), exlat u32 (2056)
//!
//! Identify Namespace
//!    0 nsze u64    8 ncap u64   16 nuse u64   24 nsfeat  25 nlbaf  26 flbas  27 mc  28 dpc
//!   29 dps  30 nmic  31 rescap  32 fpi  33 dlfeat  34 nawun u16  36 nawupf u16  38 nacwu u16
//!   40 nabsn u16  42 nabo u16  44 nabspf u16  46 noiob u16  48 nvmcap u128  64 npwg u16
//!   66 npwa u16  68 npdg u16  70 npda u16  72 nows u16  92 anagrpid u32  99 nsattr
//!  100 nvmsetid u16  102 endgid u16  104 nguid[16]  120 eui64[8]
//!  128 lbaf[64], 4 bytes each: ms u16 | lbads u8 | rp u8 (bits 1:0)
//!
//! Active NS list: up to 1024 u32 NSIDs, ascending, zero-terminated.
//! NS descriptor list: entries of nidt u8 | nidl u8 | rsvd u16 | nid[nidl], ended by nidt 0.
//! ```

use super::le::{
    array_at, ascii_trimmed, put_u128, put_u16, put_u32, put_u64, u128_at, u16_at, u32_at, u64_at,
};
use super::nqn::{Nqn, NQN_FIELD_LEN};
use super::opcodes::admin;
use super::properties::Vs;
use super::sqe::Sqe;
use super::WireError;

/// Size of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;
const _: () = assert!(IDENTIFY_LEN == 4096);

/// CNS values.
pub mod cns {
    /// Identify Namespace (NVM command set).
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace identification descriptor list.
    pub const NS_DESC_LIST: u8 = 0x03;
    /// NVM set list.
    pub const NVM_SET_LIST: u8 = 0x04;
    /// I/O command set specific Identify Namespace.
    pub const CSI_NAMESPACE: u8 = 0x05;
    /// I/O command set specific Identify Controller.
    pub const CSI_CONTROLLER: u8 = 0x06;
    /// I/O command set specific active namespace ID list.
    pub const CSI_ACTIVE_NS_LIST: u8 = 0x07;
    /// I/O command set independent Identify Namespace.
    pub const CS_INDEPENDENT_NAMESPACE: u8 = 0x08;
    /// I/O command set data structure.
    pub const COMMAND_SET: u8 = 0x1C;
}

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

/// What a transport needs of a controller's SGL support beyond SGLs at all
/// ([`IdentifyController::check_fabrics`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SglNeed {
    /// Keyed SGL data blocks (SGLS bit 2): NVMe/RDMA, where the target moves data by RDMA
    /// READ/WRITE of the host's keyed buffers.
    Keyed,
    /// Nothing more: transports that carry data in their own PDUs (NVMe/TCP's Transport SGL
    /// Data Block, an in-memory loop).
    None,
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

/// Identify CTRATT bit 0: 128-bit host identifier.
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

/// The Identify command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentifyCmd {
    /// Controller or namespace structure (see [`cns`]).
    pub cns: u8,
    /// Controller identifier (CNS 0x12/0x13 only).
    pub cntid: u16,
    /// Command set identifier (CNS 0x05.. only).
    pub csi: u8,
    /// Namespace (CNS 0, 3: the namespace; CNS 2: list NSIDs greater than this).
    pub nsid: u32,
}

impl IdentifyCmd {
    /// Reads the fields of an Identify SQE.
    pub fn from_sqe(sqe: &Sqe) -> IdentifyCmd {
        IdentifyCmd {
            cns: sqe.cdw10 as u8,
            cntid: (sqe.cdw10 >> 16) as u16,
            csi: (sqe.cdw11 >> 24) as u8,
            nsid: sqe.nsid,
        }
    }

    /// The SQE (data pointer left for the caller to set).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(admin::IDENTIFY, cid);
        sqe.nsid = self.nsid;
        sqe.cdw10 = u32::from(self.cns) | u32::from(self.cntid) << 16;
        sqe.cdw11 = u32::from(self.csi) << 24;
        sqe
    }
}

/// Power state descriptor 0 (the one fabrics controllers fill).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PowerState {
    /// Maximum power in 0.01 W units (nvmet: 0x9c4, 25 W).
    pub max_power: u16,
    /// Flags (byte 3).
    pub flags: u8,
    /// Entry latency, microseconds.
    pub entry_lat_us: u32,
    /// Exit latency, microseconds.
    pub exit_lat_us: u32,
}

/// Identify Controller data (CNS 1). Fields not listed are zero on encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyController {
    pub vid: u16,
    pub ssvid: u16,
    /// Serial number, ASCII, space padded (see [`super::ascii_padded`]).
    pub sn: [u8; 20],
    /// Model number, ASCII, space padded.
    pub mn: [u8; 40],
    /// Firmware revision, ASCII, space padded.
    pub fr: [u8; 8],
    pub rab: u8,
    pub ieee: [u8; 3],
    pub cmic: u8,
    /// Maximum data transfer size: 2^mdts units of CAP.MPSMIN (0: no limit).
    pub mdts: u8,
    pub cntlid: u16,
    pub ver: Vs,
    pub rtd3r: u32,
    pub rtd3e: u32,
    pub oaes: u32,
    pub ctratt: u32,
    pub cntrltype: u8,
    pub fguid: [u8; 16],
    pub oacs: u16,
    pub acl: u8,
    pub aerl: u8,
    pub frmw: u8,
    pub lpa: u8,
    pub elpe: u8,
    pub npss: u8,
    pub avscc: u8,
    /// Keep alive support: granularity in 100 ms units (must be non-zero on fabrics).
    pub kas: u16,
    /// ANA transition time: seconds a namespace may stay in the ANA change state.
    pub anatt: u8,
    /// ANA capabilities (see [`anacap`]).
    pub anacap: u8,
    /// Largest ANA group ID the controller supports.
    pub anagrpmax: u32,
    /// Number of ANA group IDs the controller supports.
    pub nanagrpid: u32,
    pub sqes: u8,
    pub cqes: u8,
    pub maxcmd: u16,
    pub nn: u32,
    pub oncs: u16,
    pub fuses: u16,
    pub fna: u8,
    pub vwc: u8,
    pub awun: u16,
    pub awupf: u16,
    pub acwu: u16,
    pub sgls: u32,
    pub mnan: u32,
    /// Subsystem NQN (None when the field is empty).
    pub subnqn: Option<Nqn>,
    /// I/O queue command capsule size in 16-byte units ((64 + in-capsule bytes) / 16).
    pub ioccsz: u32,
    /// I/O queue response capsule size in 16-byte units.
    pub iorcsz: u32,
    /// In-capsule data offset in 16-byte units (0).
    pub icdoff: u16,
    /// Fabrics controller attributes (bit 0: static controller model).
    pub fcatt: u8,
    /// Maximum SGL data block descriptors per command.
    pub msdbd: u8,
    pub ofcs: u16,
    pub psd0: PowerState,
}

impl Default for IdentifyController {
    /// All zero.
    fn default() -> Self {
        IdentifyController::decode(&[0u8; IDENTIFY_LEN]).expect("all-zero data has no NQN to fail")
    }
}

impl IdentifyController {
    /// The values an NVMe-oF RDMA controller reports, as nvmet does, with `in_capsule_bytes` of
    /// in-capsule data on I/O queues. The caller fills sn, mn, fr, mdts, nn and the rest.
    pub fn nvmf_defaults(cntlid: u16, subnqn: Nqn, in_capsule_bytes: u32) -> IdentifyController {
        IdentifyController {
            cntlid,
            ver: Vs::V1_3,
            cntrltype: CNTRLTYPE_IO,
            ctratt: CTRATT_HOST_ID_128,
            oaes: oaes::NS_ATTR,
            aerl: 3,
            elpe: 127,
            lpa: lpa::CMD_EFFECTS | lpa::EXTENDED,
            kas: 50,
            sqes: SQES_64,
            cqes: CQES_16,
            maxcmd: 128,
            oncs: oncs::DSM | oncs::WRITE_ZEROES,
            vwc: VWC_PRESENT,
            sgls: sgls::SUPPORTED | sgls::KEYED | sgls::OFFSET,
            subnqn: Some(subnqn),
            ioccsz: (64 + in_capsule_bytes) / 16,
            iorcsz: 1,
            icdoff: 0,
            fcatt: 0,
            msdbd: 1,
            psd0: PowerState {
                max_power: 0x9C4,
                flags: 0,
                entry_lat_us: 0x10,
                exit_lat_us: 0x4,
            },
            ..IdentifyController::default()
        }
    }

    /// Encodes the 4096 bytes; fields not kept here are zero.
    pub fn encode(&self) -> [u8; IDENTIFY_LEN] {
        let mut b = [0u8; IDENTIFY_LEN];
        put_u16(&mut b, 0, self.vid);
        put_u16(&mut b, 2, self.ssvid);
        b[4..24].copy_from_slice(&self.sn);
        b[24..64].copy_from_slice(&self.mn);
        b[64..72].copy_from_slice(&self.fr);
        b[72] = self.rab;
        b[73..76].copy_from_slice(&self.ieee);
        b[76] = self.cmic;
        b[77] = self.mdts;
        put_u16(&mut b, 78, self.cntlid);
        put_u32(&mut b, 80, self.ver.0);
        put_u32(&mut b, 84, self.rtd3r);
        put_u32(&mut b, 88, self.rtd3e);
        put_u32(&mut b, 92, self.oaes);
        put_u32(&mut b, 96, self.ctratt);
        b[111] = self.cntrltype;
        b[112..128].copy_from_slice(&self.fguid);
        put_u16(&mut b, 256, self.oacs);
        b[258..265].copy_from_slice(&[
            self.acl, self.aerl, self.frmw, self.lpa, self.elpe, self.npss, self.avscc,
        ]);
        put_u16(&mut b, 320, self.kas);
        b[342] = self.anatt;
        b[343] = self.anacap;
        put_u32(&mut b, 344, self.anagrpmax);
        put_u32(&mut b, 348, self.nanagrpid);
        b[512] = self.sqes;
        b[513] = self.cqes;
        put_u16(&mut b, 514, self.maxcmd);
        put_u32(&mut b, 516, self.nn);
        put_u16(&mut b, 520, self.oncs);
        put_u16(&mut b, 522, self.fuses);
        b[524] = self.fna;
        b[525] = self.vwc;
        put_u16(&mut b, 526, self.awun);
        put_u16(&mut b, 528, self.awupf);
        put_u16(&mut b, 532, self.acwu);
        put_u32(&mut b, 536, self.sgls);
        put_u32(&mut b, 540, self.mnan);
        if let Some(n) = &self.subnqn {
            b[768..768 + NQN_FIELD_LEN].copy_from_slice(&n.to_field());
        }
        put_u32(&mut b, 1792, self.ioccsz);
        put_u32(&mut b, 1796, self.iorcsz);
        put_u16(&mut b, 1800, self.icdoff);
        b[1802] = self.fcatt;
        b[1803] = self.msdbd;
        put_u16(&mut b, 1804, self.ofcs);
        put_u16(&mut b, 2048, self.psd0.max_power);
        b[2051] = self.psd0.flags;
        put_u32(&mut b, 2052, self.psd0.entry_lat_us);
        put_u32(&mut b, 2056, self.psd0.exit_lat_us);
        b
    }

    /// Decodes the 4096 bytes. Only SUBNQN can be malformed (an empty field reads as None).
    pub fn decode(b: &[u8; IDENTIFY_LEN]) -> Result<IdentifyController, WireError> {
        let nqn_field: [u8; NQN_FIELD_LEN] = array_at(b, 768);
        let subnqn = if nqn_field[0] == 0 {
            None
        } else {
            Some(Nqn::from_field(&nqn_field)?)
        };
        Ok(IdentifyController {
            vid: u16_at(b, 0),
            ssvid: u16_at(b, 2),
            sn: array_at(b, 4),
            mn: array_at(b, 24),
            fr: array_at(b, 64),
            rab: b[72],
            ieee: array_at(b, 73),
            cmic: b[76],
            mdts: b[77],
            cntlid: u16_at(b, 78),
            ver: Vs(u32_at(b, 80)),
            rtd3r: u32_at(b, 84),
            rtd3e: u32_at(b, 88),
            oaes: u32_at(b, 92),
            ctratt: u32_at(b, 96),
            cntrltype: b[111],
            fguid: array_at(b, 112),
            oacs: u16_at(b, 256),
            acl: b[258],
            aerl: b[259],
            frmw: b[260],
            lpa: b[261],
            elpe: b[262],
            npss: b[263],
            avscc: b[264],
            kas: u16_at(b, 320),
            anatt: b[342],
            anacap: b[343],
            anagrpmax: u32_at(b, 344),
            nanagrpid: u32_at(b, 348),
            sqes: b[512],
            cqes: b[513],
            maxcmd: u16_at(b, 514),
            nn: u32_at(b, 516),
            oncs: u16_at(b, 520),
            fuses: u16_at(b, 522),
            fna: b[524],
            vwc: b[525],
            awun: u16_at(b, 526),
            awupf: u16_at(b, 528),
            acwu: u16_at(b, 532),
            sgls: u32_at(b, 536),
            mnan: u32_at(b, 540),
            subnqn,
            ioccsz: u32_at(b, 1792),
            iorcsz: u32_at(b, 1796),
            icdoff: u16_at(b, 1800),
            fcatt: b[1802],
            msdbd: b[1803],
            ofcs: u16_at(b, 1804),
            psd0: PowerState {
                max_power: u16_at(b, 2048),
                flags: b[2051],
                entry_lat_us: u32_at(b, 2052),
                exit_lat_us: u32_at(b, 2056),
            },
        })
    }

    /// Serial number as text.
    pub fn serial(&self) -> String {
        ascii_trimmed(&self.sn)
    }

    /// Model number as text.
    pub fn model(&self) -> String {
        ascii_trimmed(&self.mn)
    }

    /// Firmware revision as text.
    pub fn firmware(&self) -> String {
        ascii_trimmed(&self.fr)
    }

    /// In-capsule data bytes an I/O command capsule may carry (IOCCSZ * 16 - 64).
    pub fn in_capsule_bytes(&self) -> u32 {
        self.ioccsz.saturating_mul(16).saturating_sub(64)
    }

    /// Checks what the Linux host (and so our initiator) enforces of a fabrics controller
    /// answering a Connect that returned `connect_cntlid`: cntlid, MAXCMD, KAS, IOCCSZ, IORCSZ,
    /// ICDOFF, SGL support (SGLS bits 1:0, `nvme_init_identify`) and what the transport needs
    /// on top (`need`: keyed SGLs for RDMA, as `nvme_rdma_setup_ctrl` requires); and, our own
    /// addition, that SQES/CQES allow 64/16-byte entries.
    pub fn check_fabrics(&self, connect_cntlid: u16, need: SglNeed) -> Result<(), WireError> {
        let bad = |d: String| Err(WireError::field("Identify Controller", d));
        if self.cntlid != connect_cntlid {
            return bad(format!(
                "cntlid {} differs from Connect's {connect_cntlid}",
                self.cntlid
            ));
        }
        if self.maxcmd == 0 {
            return bad("MAXCMD is 0; the Linux host refuses such a controller".into());
        }
        if self.kas == 0 {
            return bad("KAS is 0; fabrics controllers must support keep alive".into());
        }
        if self.ioccsz < 4 {
            return bad(format!("IOCCSZ {} is below 4 (64-byte SQE)", self.ioccsz));
        }
        if self.iorcsz < 1 {
            return bad("IORCSZ is 0 (16-byte CQE needs 1)".into());
        }
        if self.icdoff != 0 {
            return bad(format!("ICDOFF {} is not supported", self.icdoff));
        }
        if self.sgls & sgls::SUPPORT_MASK == 0 {
            return bad(format!(
                "SGLS {:#x} lacks SGL support (bits 1:0)",
                self.sgls
            ));
        }
        if need == SglNeed::Keyed && self.sgls & sgls::KEYED == 0 {
            return bad(format!("SGLS {:#x} lacks keyed SGL support", self.sgls));
        }
        if self.sqes & 0xF > 6 || self.sqes >> 4 < 6 || self.cqes & 0xF > 4 || self.cqes >> 4 < 4 {
            return bad(format!(
                "SQES {:#x} / CQES {:#x} exclude 64/16 bytes",
                self.sqes, self.cqes
            ));
        }
        Ok(())
    }
}

/// One LBA format descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lbaf {
    /// Metadata bytes per block.
    pub ms: u16,
    /// Block size, log2 (9: 512 bytes, 12: 4096).
    pub lbads: u8,
    /// Relative performance (bits 1:0).
    pub rp: u8,
}

/// Number of LBA format descriptors in Identify Namespace.
pub const LBAF_COUNT: usize = 64;

/// Identify Namespace data (CNS 0, NVM command set). Fields not listed are zero on encode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// Namespace size in blocks.
    pub nsze: u64,
    /// Namespace capacity in blocks.
    pub ncap: u64,
    /// Namespace utilization in blocks.
    pub nuse: u64,
    /// Features (bit 0 thin provisioning, bit 4 NPWG/NOWS fields valid...).
    pub nsfeat: u8,
    /// Number of LBA formats, 0-based.
    pub nlbaf: u8,
    /// Formatted LBA size: bits 3:0 (and 6:5 high bits) index lbaf; bit 4 metadata at end.
    pub flbas: u8,
    pub mc: u8,
    pub dpc: u8,
    pub dps: u8,
    pub nmic: u8,
    pub rescap: u8,
    pub fpi: u8,
    /// Deallocate logical block features (bits 2:0 read behaviour: 1 = zeroes).
    pub dlfeat: u8,
    pub nawun: u16,
    pub nawupf: u16,
    pub nacwu: u16,
    pub nabsn: u16,
    pub nabo: u16,
    pub nabspf: u16,
    pub noiob: u16,
    /// NVM capacity in bytes.
    pub nvmcap: u128,
    pub npwg: u16,
    pub npwa: u16,
    pub npdg: u16,
    pub npda: u16,
    /// Namespace optimal write size, 0-based blocks.
    pub nows: u16,
    pub anagrpid: u32,
    pub nsattr: u8,
    pub nvmsetid: u16,
    pub endgid: u16,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
    pub lbaf: [Lbaf; LBAF_COUNT],
}

impl Default for IdentifyNamespace {
    fn default() -> Self {
        IdentifyNamespace {
            nsze: 0,
            ncap: 0,
            nuse: 0,
            nsfeat: 0,
            nlbaf: 0,
            flbas: 0,
            mc: 0,
            dpc: 0,
            dps: 0,
            nmic: 0,
            rescap: 0,
            fpi: 0,
            dlfeat: 0,
            nawun: 0,
            nawupf: 0,
            nacwu: 0,
            nabsn: 0,
            nabo: 0,
            nabspf: 0,
            noiob: 0,
            nvmcap: 0,
            npwg: 0,
            npwa: 0,
            npdg: 0,
            npda: 0,
            nows: 0,
            anagrpid: 0,
            nsattr: 0,
            nvmsetid: 0,
            endgid: 0,
            nguid: [0; 16],
            eui64: [0; 8],
            lbaf: [Lbaf::default(); LBAF_COUNT],
        }
    }
}

impl IdentifyNamespace {
    /// A namespace of `blocks` blocks of 2^`lbads` bytes, one LBA format, no metadata.
    pub fn simple(blocks: u64, lbads: u8) -> IdentifyNamespace {
        let mut ns = IdentifyNamespace {
            nsze: blocks,
            ncap: blocks,
            nuse: blocks,
            ..IdentifyNamespace::default()
        };
        ns.lbaf[0] = Lbaf {
            ms: 0,
            lbads,
            rp: 0,
        };
        ns
    }

    /// Index of the formatted LBA format (FLBAS bits 3:0, with bits 6:5 as bits 5:4).
    pub fn format_index(&self) -> usize {
        usize::from(self.flbas & 0xF) | usize::from((self.flbas >> 5) & 0x3) << 4
    }

    /// Block size in bytes of the formatted LBA format.
    pub fn block_bytes(&self) -> Result<u32, WireError> {
        let i = self.format_index();
        if i > usize::from(self.nlbaf) {
            return Err(WireError::field(
                "Identify Namespace",
                format!("FLBAS selects format {i}, NLBAF allows 0..={}", self.nlbaf),
            ));
        }
        match self.lbaf[i].lbads {
            l @ 9..=31 => Ok(1 << l),
            l => Err(WireError::field(
                "Identify Namespace",
                format!("LBADS {l} out of 9..=31"),
            )),
        }
    }

    /// Encodes the 4096 bytes.
    pub fn encode(&self) -> [u8; IDENTIFY_LEN] {
        let mut b = [0u8; IDENTIFY_LEN];
        put_u64(&mut b, 0, self.nsze);
        put_u64(&mut b, 8, self.ncap);
        put_u64(&mut b, 16, self.nuse);
        b[24..34].copy_from_slice(&[
            self.nsfeat,
            self.nlbaf,
            self.flbas,
            self.mc,
            self.dpc,
            self.dps,
            self.nmic,
            self.rescap,
            self.fpi,
            self.dlfeat,
        ]);
        let u16s = [
            self.nawun,
            self.nawupf,
            self.nacwu,
            self.nabsn,
            self.nabo,
            self.nabspf,
            self.noiob,
        ];
        for (i, v) in u16s.into_iter().enumerate() {
            put_u16(&mut b, 34 + 2 * i, v);
        }
        put_u128(&mut b, 48, self.nvmcap);
        for (i, v) in [self.npwg, self.npwa, self.npdg, self.npda, self.nows]
            .into_iter()
            .enumerate()
        {
            put_u16(&mut b, 64 + 2 * i, v);
        }
        put_u32(&mut b, 92, self.anagrpid);
        b[99] = self.nsattr;
        put_u16(&mut b, 100, self.nvmsetid);
        put_u16(&mut b, 102, self.endgid);
        b[104..120].copy_from_slice(&self.nguid);
        b[120..128].copy_from_slice(&self.eui64);
        for (i, f) in self.lbaf.iter().enumerate() {
            let o = 128 + 4 * i;
            put_u16(&mut b, o, f.ms);
            b[o + 2] = f.lbads;
            b[o + 3] = f.rp & 0x3;
        }
        b
    }

    /// Decodes the 4096 bytes. Every bit pattern decodes; check the format with
    /// [`IdentifyNamespace::block_bytes`].
    pub fn decode(b: &[u8; IDENTIFY_LEN]) -> IdentifyNamespace {
        let mut lbaf = [Lbaf::default(); LBAF_COUNT];
        for (i, f) in lbaf.iter_mut().enumerate() {
            let o = 128 + 4 * i;
            *f = Lbaf {
                ms: u16_at(b, o),
                lbads: b[o + 2],
                rp: b[o + 3] & 0x3,
            };
        }
        IdentifyNamespace {
            nsze: u64_at(b, 0),
            ncap: u64_at(b, 8),
            nuse: u64_at(b, 16),
            nsfeat: b[24],
            nlbaf: b[25],
            flbas: b[26],
            mc: b[27],
            dpc: b[28],
            dps: b[29],
            nmic: b[30],
            rescap: b[31],
            fpi: b[32],
            dlfeat: b[33],
            nawun: u16_at(b, 34),
            nawupf: u16_at(b, 36),
            nacwu: u16_at(b, 38),
            nabsn: u16_at(b, 40),
            nabo: u16_at(b, 42),
            nabspf: u16_at(b, 44),
            noiob: u16_at(b, 46),
            nvmcap: u128_at(b, 48),
            npwg: u16_at(b, 64),
            npwa: u16_at(b, 66),
            npdg: u16_at(b, 68),
            npda: u16_at(b, 70),
            nows: u16_at(b, 72),
            anagrpid: u32_at(b, 92),
            nsattr: b[99],
            nvmsetid: u16_at(b, 100),
            endgid: u16_at(b, 102),
            nguid: array_at(b, 104),
            eui64: array_at(b, 120),
            lbaf,
        }
    }
}

/// Most NSIDs an active namespace list holds.
pub const NS_LIST_MAX: usize = IDENTIFY_LEN / 4;

/// Encodes an active namespace list: the NSIDs greater than `after`, ascending, at most 1024.
/// `nsids` must be ascending.
pub fn encode_ns_list(nsids: &[u32], after: u32) -> [u8; IDENTIFY_LEN] {
    debug_assert!(nsids.windows(2).all(|w| w[0] < w[1]), "NSIDs must ascend");
    let mut b = [0u8; IDENTIFY_LEN];
    for (i, &id) in nsids
        .iter()
        .filter(|&&id| id > after)
        .take(NS_LIST_MAX)
        .enumerate()
    {
        put_u32(&mut b, 4 * i, id);
    }
    b
}

/// Decodes an active namespace list up to its first zero entry; the NSIDs must ascend.
pub fn decode_ns_list(b: &[u8; IDENTIFY_LEN]) -> Result<Vec<u32>, WireError> {
    let mut out = Vec::new();
    for i in 0..NS_LIST_MAX {
        let id = u32_at(b, 4 * i);
        if id == 0 {
            break;
        }
        if out.last().is_some_and(|&last| id <= last) {
            return Err(WireError::field(
                "active NS list",
                format!("NSID {id} out of order"),
            ));
        }
        out.push(id);
    }
    Ok(out)
}

/// A namespace identification descriptor (CNS 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NsDescriptor {
    /// NIDT 1, 8 bytes.
    Eui64([u8; 8]),
    /// NIDT 2, 16 bytes.
    Nguid([u8; 16]),
    /// NIDT 3, 16 bytes.
    Uuid([u8; 16]),
    /// NIDT 4, 1 byte: command set identifier (0 NVM).
    Csi(u8),
}

/// NIDT values.
pub mod nidt {
    pub const EUI64: u8 = 1;
    pub const NGUID: u8 = 2;
    pub const UUID: u8 = 3;
    pub const CSI: u8 = 4;
}

impl NsDescriptor {
    fn parts(&self) -> (u8, &[u8]) {
        match self {
            NsDescriptor::Eui64(v) => (nidt::EUI64, v),
            NsDescriptor::Nguid(v) => (nidt::NGUID, v),
            NsDescriptor::Uuid(v) => (nidt::UUID, v),
            NsDescriptor::Csi(v) => (nidt::CSI, std::slice::from_ref(v)),
        }
    }
}

/// Encodes a descriptor list (terminated by the zero bytes that follow, or by the end of the
/// page when the list fills it exactly, as [`decode_ns_descriptors`] and the Linux host accept).
pub fn encode_ns_descriptors(descs: &[NsDescriptor]) -> [u8; IDENTIFY_LEN] {
    let mut b = [0u8; IDENTIFY_LEN];
    let mut o = 0;
    for d in descs {
        let (t, v) = d.parts();
        assert!(
            o + 4 + v.len() <= IDENTIFY_LEN,
            "descriptor list overflows 4096 bytes"
        );
        b[o] = t;
        b[o + 1] = v.len() as u8;
        b[o + 4..o + 4 + v.len()].copy_from_slice(v);
        o += 4 + v.len();
    }
    b
}

/// Decodes a descriptor list. Unknown NIDTs are skipped; a known NIDT with the wrong length, or
/// an entry running past the end, is an error.
pub fn decode_ns_descriptors(b: &[u8; IDENTIFY_LEN]) -> Result<Vec<NsDescriptor>, WireError> {
    let mut out = Vec::new();
    let mut o = 0usize;
    while o + 4 <= IDENTIFY_LEN && b[o] != 0 {
        let (t, len) = (b[o], usize::from(b[o + 1]));
        let v = b.get(o + 4..o + 4 + len).ok_or_else(|| {
            WireError::field(
                "NS descriptor list",
                format!("entry at {o} runs past the end"),
            )
        })?;
        let wrong = || {
            WireError::field(
                "NS descriptor list",
                format!("NIDT {t} with NIDL {len} at {o}"),
            )
        };
        let d = match t {
            nidt::EUI64 => Some(NsDescriptor::Eui64(v.try_into().map_err(|_| wrong())?)),
            nidt::NGUID => Some(NsDescriptor::Nguid(v.try_into().map_err(|_| wrong())?)),
            nidt::UUID => Some(NsDescriptor::Uuid(v.try_into().map_err(|_| wrong())?)),
            nidt::CSI if len == 1 => Some(NsDescriptor::Csi(v[0])),
            nidt::CSI => return Err(wrong()),
            _ => None,
        };
        out.extend(d);
        o += 4 + len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::le::ascii_padded;

    fn ctrl() -> IdentifyController {
        let mut c = IdentifyController::nvmf_defaults(
            1,
            Nqn::new("nqn.2024-01.io.rdmablk:ram0").unwrap(),
            4096,
        );
        c.sn = ascii_padded("0123456789abcdef");
        c.mn = ascii_padded("rdmablk");
        c.fr = ascii_padded("0.1.0");
        c.mdts = 5;
        c.nn = 4;
        c
    }

    #[test]
    fn ana_fields_sit_where_the_linux_host_reads_them() {
        // struct nvme_id_ctrl: ... endgidmax at 340, anatt 342, anacap 343, anagrpmax 344,
        // nanagrpid 348, pels 352.
        let id = IdentifyController {
            anatt: 10,
            anacap: anacap::ALL_STATES,
            anagrpmax: 128,
            nanagrpid: 127,
            ..IdentifyController::default()
        };
        let b = id.encode();
        assert_eq!((b[341], b[342], b[343]), (0, 10, 0x1F));
        assert_eq!((u32_at(&b, 344), u32_at(&b, 348)), (128, 127));
        assert_eq!(u32_at(&b, 352), 0);
        let back = IdentifyController::decode(&b).unwrap();
        assert_eq!((back.anatt, back.anagrpmax, back.nanagrpid), (10, 128, 127));
    }

    #[test]
    fn controller_offsets() {
        let b = ctrl().encode();
        assert_eq!(&b[4..8], b"0123");
        assert_eq!(&b[24..31], b"rdmablk");
        assert_eq!(b[31], b' ');
        assert_eq!(b[77], 5);
        assert_eq!(&b[78..80], &[1, 0]);
        assert_eq!(&b[80..84], &0x0001_0300u32.to_le_bytes());
        assert_eq!(&b[320..322], &50u16.to_le_bytes());
        assert_eq!((b[512], b[513]), (0x66, 0x44));
        assert_eq!(&b[516..520], &4u32.to_le_bytes());
        assert_eq!(&b[520..522], &0x000Cu16.to_le_bytes());
        assert_eq!(&b[536..540], &0x0010_0005u32.to_le_bytes());
        assert_eq!(&b[768..772], b"nqn.");
        assert_eq!(&b[1792..1796], &260u32.to_le_bytes());
        assert_eq!(&b[1796..1800], &1u32.to_le_bytes());
        assert_eq!(b[1803], 1);
        assert_eq!(&b[2048..2050], &0x9C4u16.to_le_bytes());
        let d = IdentifyController::decode(&b).unwrap();
        assert_eq!(d, ctrl());
        assert_eq!(d.serial(), "0123456789abcdef");
        assert_eq!(d.model(), "rdmablk");
        assert_eq!(d.in_capsule_bytes(), 4096);
        assert!(d.check_fabrics(1, SglNeed::Keyed).is_ok());
    }

    #[test]
    fn controller_checks() {
        assert!(ctrl().check_fabrics(2, SglNeed::Keyed).is_err());
        let mut c = ctrl();
        c.maxcmd = 0;
        assert!(c.check_fabrics(1, SglNeed::Keyed).is_err());
        let mut c = ctrl();
        c.kas = 0;
        assert!(c.check_fabrics(1, SglNeed::Keyed).is_err());
        let mut c = ctrl();
        c.ioccsz = 3;
        assert!(c.check_fabrics(1, SglNeed::Keyed).is_err());
        // An NVMe/TCP controller (nvmet-tcp: SGLs, no keyed ones) suits a transport that
        // needs no keys, not RDMA; no SGL support at all suits none.
        let mut c = ctrl();
        c.sgls = sgls::SUPPORTED | sgls::OFFSET;
        assert!(c.check_fabrics(1, SglNeed::Keyed).is_err());
        assert!(c.check_fabrics(1, SglNeed::None).is_ok());
        c.sgls = sgls::KEYED | sgls::OFFSET;
        assert!(c.check_fabrics(1, SglNeed::None).is_err());
        let mut c = ctrl();
        c.icdoff = 1;
        assert!(c.check_fabrics(1, SglNeed::Keyed).is_err());
        let mut b = ctrl().encode();
        b[768..1024].fill(b'z');
        assert!(IdentifyController::decode(&b).is_err());
        b[768] = 0;
        assert_eq!(IdentifyController::decode(&b).unwrap().subnqn, None);
    }

    #[test]
    fn namespace_roundtrip_and_format() {
        let mut ns = IdentifyNamespace::simple(2_097_152, 12);
        ns.dlfeat = 1;
        ns.nows = 7;
        ns.nguid = [7; 16];
        ns.nvmcap = 8 << 30;
        let b = ns.encode();
        assert_eq!(&b[0..8], &2_097_152u64.to_le_bytes());
        assert_eq!(b[33], 1);
        assert_eq!(&b[72..74], &7u16.to_le_bytes());
        assert_eq!(b[128 + 2], 12);
        assert_eq!(&b[48..56], &(8u64 << 30).to_le_bytes());
        let d = IdentifyNamespace::decode(&b);
        assert_eq!(d, ns);
        assert_eq!(d.block_bytes(), Ok(4096));
        let mut bad = ns.clone();
        bad.flbas = 1;
        assert!(bad.block_bytes().is_err(), "format 1 beyond nlbaf 0");
        let mut bad = ns;
        bad.lbaf[0].lbads = 0;
        assert!(bad.block_bytes().is_err());
    }

    #[test]
    fn ns_list() {
        let b = encode_ns_list(&[1, 2, 5, 9], 1);
        assert_eq!(&b[..12], &[2, 0, 0, 0, 5, 0, 0, 0, 9, 0, 0, 0]);
        assert_eq!(decode_ns_list(&b).unwrap(), vec![2, 5, 9]);
        let mut bad = b;
        bad[4] = 1;
        assert!(decode_ns_list(&bad).is_err());
        let full: Vec<u32> = (1..=2000).collect();
        assert_eq!(
            decode_ns_list(&encode_ns_list(&full, 0)).unwrap().len(),
            1024
        );
    }

    #[test]
    fn ns_descriptors() {
        let descs = [
            NsDescriptor::Nguid([1; 16]),
            NsDescriptor::Uuid([2; 16]),
            NsDescriptor::Csi(0),
        ];
        let b = encode_ns_descriptors(&descs);
        assert_eq!(&b[..4], &[2, 16, 0, 0]);
        assert_eq!(&b[20..24], &[3, 16, 0, 0]);
        assert_eq!(&b[40..45], &[4, 1, 0, 0, 0]);
        assert_eq!(decode_ns_descriptors(&b).unwrap(), descs);
        let mut bad = b;
        bad[1] = 8;
        assert!(decode_ns_descriptors(&bad).is_err());
        let mut unknown = [0u8; IDENTIFY_LEN];
        unknown[..6].copy_from_slice(&[0x7E, 2, 0, 0, 9, 9]);
        unknown[6..10].copy_from_slice(&[1, 8, 0, 0]);
        assert_eq!(
            decode_ns_descriptors(&unknown).unwrap(),
            vec![NsDescriptor::Eui64([0; 8])]
        );
        let mut past = [0u8; IDENTIFY_LEN];
        past[4092..4094].copy_from_slice(&[1, 8]);
        past[..2].copy_from_slice(&[0x7E, 255]);
        for i in (0..4092).step_by(259) {
            past[i] = 0x7E;
            past[i + 1] = 255;
        }
        assert!(decode_ns_descriptors(&past).is_err());
    }

    /// Broke the `cqe_identify` fuzz target's roundtrip: 200 NGUIDs and 8 EUI64s fill the
    /// 4096 bytes exactly; the decoder accepts that list and the encoder asserted it overflowed.
    #[test]
    fn ns_descriptors_filling_the_whole_page_roundtrip() {
        let mut descs = vec![NsDescriptor::Nguid([7; 16]); 200];
        descs.extend([NsDescriptor::Eui64([9; 8]); 8]);
        let b = encode_ns_descriptors(&descs);
        assert_eq!(
            &b[IDENTIFY_LEN - 12..IDENTIFY_LEN - 8],
            &[nidt::EUI64, 8, 0, 0]
        );
        assert_eq!(decode_ns_descriptors(&b).unwrap(), descs);
    }

    #[test]
    fn identify_command_fields() {
        let c = IdentifyCmd {
            cns: cns::NS_DESC_LIST,
            cntid: 0,
            csi: 0,
            nsid: 1,
        };
        let s = c.to_sqe(4);
        assert_eq!((s.opcode, s.nsid, s.cdw10), (0x06, 1, 3));
        assert_eq!(IdentifyCmd::from_sqe(&s), c);
        let s = Sqe {
            cdw10: 0x0007_0005,
            cdw11: 0x0200_0000,
            ..Sqe::default()
        };
        let c = IdentifyCmd::from_sqe(&s);
        assert_eq!((c.cns, c.cntid, c.csi), (5, 7, 2));
    }
}
