//! Identify Controller (CNS 1): the data structure, what an NVMe-oF controller reports by
//! default, and the checks a host makes of a fabrics controller's answer.
//!
//! ```text
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
//! ```

use super::controller_bits::{
    lpa, oaes, oncs, sgls, CNTRLTYPE_IO, CQES_16, CTRATT_HOST_ID_128, SQES_64, VWC_PRESENT,
};
use super::IDENTIFY_LEN;
use crate::nvme::le::{array_at, ascii_trimmed, put_u16, put_u32, u16_at, u32_at};
use crate::nvme::nqn::{Nqn, NQN_FIELD_LEN};
use crate::nvme::properties::Vs;
use crate::nvme::WireError;

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
    /// Serial number, ASCII, space padded (see [`crate::nvme::ascii_padded`]).
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

#[cfg(test)]
mod tests {
    use super::super::anacap;
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
}
