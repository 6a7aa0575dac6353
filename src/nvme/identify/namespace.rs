//! Identify Namespace (CNS 0, the NVM command set): the data structure and its LBA formats.
//!
//! ```text
//! Identify Namespace
//!    0 nsze u64    8 ncap u64   16 nuse u64   24 nsfeat  25 nlbaf  26 flbas  27 mc  28 dpc
//!   29 dps  30 nmic  31 rescap  32 fpi  33 dlfeat  34 nawun u16  36 nawupf u16  38 nacwu u16
//!   40 nabsn u16  42 nabo u16  44 nabspf u16  46 noiob u16  48 nvmcap u128  64 npwg u16
//!   66 npwa u16  68 npdg u16  70 npda u16  72 nows u16  92 anagrpid u32  99 nsattr
//!  100 nvmsetid u16  102 endgid u16  104 nguid[16]  120 eui64[8]
//!  128 lbaf[64], 4 bytes each: ms u16 | lbads u8 | rp u8 (bits 1:0)
//! ```

use super::IDENTIFY_LEN;
use crate::nvme::le::{
    array_at, put_u128, put_u16, put_u32, put_u64, u128_at, u16_at, u32_at, u64_at,
};
use crate::nvme::WireError;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
