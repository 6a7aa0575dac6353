//! The namespace lists Identify returns: the active namespace ID list (CNS 2) and a
//! namespace's identification descriptors (CNS 3).
//!
//! ```text
//! Active NS list: up to 1024 u32 NSIDs, ascending, zero-terminated.
//! NS descriptor list: entries of nidt u8 | nidl u8 | rsvd u16 | nid[nidl], ended by nidt 0.
//! ```

use super::IDENTIFY_LEN;
use crate::nvme::le::{put_u32, u32_at};
use crate::nvme::WireError;

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
}
