//! SGL descriptors as the NVMe/RDMA transport uses them: the 16 bytes of SQE DPTR (24..40).
//!
//! ```text
//! Keyed SGL data block (type 0x40 address, 0x4F address + invalidate key)
//!  0                   8          11            15   16
//! +-------------------+----------+-------------+----+
//! | addr u64          | len u24  | key u32     |type|
//! +-------------------+----------+-------------+----+
//!
//! SGL data block, offset subtype (type 0x01: in-capsule data)
//!  0                   8            12         15   16
//! +-------------------+------------+----------+----+
//! | offset u64        | len u32    | rsvd[3]  |type|
//! +-------------------+------------+----------+----+
//! ```
//!
//! The type byte is `type << 4 | subtype`. Only the keyed and offset forms cross an NVMe/RDMA
//! wire, the offset and transport forms an NVMe/TCP one (nvmet advertises MSDBD = 1: no
//! segments, one descriptor per command); anything else is answered with "SGL Descriptor Type
//! Invalid".
//!
//! Transport SGL data block (type 0x5A: data block, transport-specific subtype): the data moves
//! in the transport's own PDUs (NVMe/TCP: in-capsule, R2T / H2CData, C2HData), so the address
//! field is reserved; only the length counts. NVMe/RDMA does not take it.
//!
//! ```text
//!  0                   8            12         15   16
//! +-------------------+------------+----------+----+
//! | rsvd (address) u64| len u32    | rsvd[3]  |0x5A|
//! +-------------------+------------+----------+----+
//! ```
//!
//! rdmablk's push-write descriptor (type 0xF0) belongs to the RDMA transport:
//! [`crate::nvme::transport::rdma::PushedSgl`].

use super::le::{put_u24, put_u32, put_u64, u24_at, u32_at, u64_at};
use super::status::Status;

/// Size of one SGL descriptor.
pub const SGL_DESC_LEN: usize = 16;
const _: () = assert!(SGL_DESC_LEN == 16);

/// Type byte: keyed SGL data block, address subtype.
pub const TYPE_KEYED_ADDRESS: u8 = 0x40;
/// Type byte: keyed SGL data block, address subtype, invalidate the key when done.
pub const TYPE_KEYED_INVALIDATE: u8 = 0x4F;
/// Type byte: SGL data block, offset subtype (in-capsule data).
pub const TYPE_DATA_OFFSET: u8 = 0x01;

/// Type byte: Transport SGL data block, transport-specific subtype (NVMe/TCP's data).
pub const TYPE_TRANSPORT_DATA: u8 = 0x5A;

/// Largest length a keyed descriptor can carry (24 bits).
pub const KEYED_MAX_LEN: u32 = 0x00FF_FFFF;

/// A host memory region the target reaches by RDMA READ/WRITE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyedSgl {
    /// Remote virtual address.
    pub addr: u64,
    /// Length in bytes (at most [`KEYED_MAX_LEN`]); 0 means no data.
    pub len: u32,
    /// Remote key (rkey).
    pub key: u32,
    /// Subtype 0xF: the host asks the target to invalidate `key` with SEND_WITH_INVALIDATE.
    pub invalidate: bool,
}

/// Data carried in the command capsule after the 64-byte SQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InCapsuleSgl {
    /// Offset from the start of the in-capsule data (ICDOFF 0: the byte after the SQE).
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

/// Data the transport carries in its own PDUs (the address field is reserved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportSgl {
    /// Length in bytes.
    pub len: u32,
}

/// A decoded SGL descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sgl {
    /// Type 0x40 or 0x4F.
    Keyed(KeyedSgl),
    /// Type 0x01.
    InCapsule(InCapsuleSgl),
    /// Type 0x5A.
    Transport(TransportSgl),
}

/// What the receiving controller allows, to check a descriptor against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SglLimits {
    /// In-capsule data bytes this queue accepts (0 on the admin queue, which the Linux host
    /// never sends in-capsule data on).
    pub in_capsule_bytes: u32,
    /// Largest transfer a keyed descriptor may describe (MDTS in bytes).
    pub max_transfer_bytes: u32,
}

impl Sgl {
    /// Decodes a descriptor, or the status to fail the command with (DNR set).
    pub fn decode(b: &[u8; SGL_DESC_LEN]) -> Result<Sgl, Status> {
        match b[15] {
            TYPE_KEYED_ADDRESS | TYPE_KEYED_INVALIDATE => Ok(Sgl::Keyed(KeyedSgl {
                addr: u64_at(b, 0),
                len: u24_at(b, 8),
                key: u32_at(b, 11),
                invalidate: b[15] == TYPE_KEYED_INVALIDATE,
            })),
            TYPE_DATA_OFFSET => Ok(Sgl::InCapsule(InCapsuleSgl {
                offset: u64_at(b, 0),
                len: u32_at(b, 8),
            })),
            TYPE_TRANSPORT_DATA => Ok(Sgl::Transport(TransportSgl { len: u32_at(b, 8) })),
            _ => Err(Status::SGL_INVALID_TYPE.with_dnr()),
        }
    }

    /// Encodes the descriptor. A keyed length above [`KEYED_MAX_LEN`] is a caller bug.
    pub fn encode(&self) -> [u8; SGL_DESC_LEN] {
        let mut b = [0u8; SGL_DESC_LEN];
        match *self {
            Sgl::Keyed(k) => {
                assert!(
                    k.len <= KEYED_MAX_LEN,
                    "keyed SGL length {} exceeds 24 bits",
                    k.len
                );
                put_u64(&mut b, 0, k.addr);
                put_u24(&mut b, 8, k.len);
                put_u32(&mut b, 11, k.key);
                b[15] = if k.invalidate {
                    TYPE_KEYED_INVALIDATE
                } else {
                    TYPE_KEYED_ADDRESS
                };
            }
            Sgl::InCapsule(c) => {
                put_u64(&mut b, 0, c.offset);
                put_u32(&mut b, 8, c.len);
                b[15] = TYPE_DATA_OFFSET;
            }
            Sgl::Transport(t) => {
                put_u32(&mut b, 8, t.len);
                b[15] = TYPE_TRANSPORT_DATA;
            }
        }
        b
    }

    /// Data length the descriptor describes.
    pub fn len(&self) -> u32 {
        match self {
            Sgl::Keyed(k) => k.len,
            Sgl::InCapsule(c) => c.len,
            Sgl::Transport(t) => t.len,
        }
    }

    /// True when the descriptor describes no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the descriptor against the queue's limits for a command whose data flows host to
    /// controller (`host_to_controller`) or not. Errors carry DNR.
    ///
    /// - in-capsule data on a queue without it, or for a command that does not carry data to
    ///   the controller: Invalid Field;
    /// - in-capsule offset past the capsule: SGL Offset Invalid;
    /// - in-capsule offset + length past the capsule, or a keyed or transport length above the
    ///   maximum transfer: Data SGL Length Invalid.
    pub fn check(&self, limits: &SglLimits, host_to_controller: bool) -> Result<(), Status> {
        match *self {
            Sgl::Keyed(KeyedSgl { len, .. }) | Sgl::Transport(TransportSgl { len })
                if len > limits.max_transfer_bytes =>
            {
                Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr())
            }
            Sgl::Keyed(_) | Sgl::Transport(_) => Ok(()),
            Sgl::InCapsule(_) if limits.in_capsule_bytes == 0 || !host_to_controller => {
                Err(Status::INVALID_FIELD.with_dnr())
            }
            Sgl::InCapsule(c) => {
                let cap = u64::from(limits.in_capsule_bytes);
                if c.offset > cap {
                    Err(Status::SGL_INVALID_OFFSET.with_dnr())
                } else if u64::from(c.len) > cap - c.offset {
                    Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr())
                } else {
                    Ok(())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_data_block_layout() {
        let t = Sgl::Transport(TransportSgl { len: 0x1234 });
        let b = t.encode();
        assert_eq!(b, [0, 0, 0, 0, 0, 0, 0, 0, 0x34, 0x12, 0, 0, 0, 0, 0, 0x5A]);
        assert_eq!(Sgl::decode(&b), Ok(t));
        assert_eq!(t.len(), 0x1234);
        assert!(t.check(&LIMITS, true).is_ok() && t.check(&LIMITS, false).is_ok());
        let big = Sgl::Transport(TransportSgl { len: (1 << 17) + 1 });
        assert_eq!(
            big.check(&LIMITS, false),
            Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr())
        );
    }

    const LIMITS: SglLimits = SglLimits {
        in_capsule_bytes: 8192,
        max_transfer_bytes: 1 << 17,
    };

    #[test]
    fn decodes_linux_keyed_invalidate_descriptor() {
        // nvme_rdma_map_sg_single: addr, length 4096 as 3 bytes, key, type 0x4F.
        let b = [
            0x00, 0x10, 0x34, 0x12, 0x00, 0x00, 0xFF, 0xFF, // addr 0xFFFF_0000_1234_1000
            0x00, 0x10, 0x00, // len 4096
            0x78, 0x56, 0x34, 0x12, // key 0x12345678
            0x4F,
        ];
        let sgl = Sgl::decode(&b).unwrap();
        assert_eq!(
            sgl,
            Sgl::Keyed(KeyedSgl {
                addr: 0xFFFF_0000_1234_1000,
                len: 4096,
                key: 0x1234_5678,
                invalidate: true
            })
        );
        assert_eq!(sgl.encode(), b);
        assert!(sgl.check(&LIMITS, false).is_ok());
    }

    #[test]
    fn in_capsule_roundtrip_and_limits() {
        let sgl = Sgl::InCapsule(InCapsuleSgl {
            offset: 0,
            len: 4096,
        });
        let b = sgl.encode();
        assert_eq!(b[15], 0x01);
        assert_eq!(&b[8..12], &4096u32.to_le_bytes());
        assert_eq!(Sgl::decode(&b).unwrap(), sgl);
        assert!(sgl.check(&LIMITS, true).is_ok());
        // Reads never carry in-capsule data; the admin queue has none.
        assert_eq!(
            sgl.check(&LIMITS, false),
            Err(Status::INVALID_FIELD.with_dnr())
        );
        let admin = SglLimits {
            in_capsule_bytes: 0,
            ..LIMITS
        };
        assert_eq!(
            sgl.check(&admin, true),
            Err(Status::INVALID_FIELD.with_dnr())
        );
        let past = Sgl::InCapsule(InCapsuleSgl {
            offset: 8193,
            len: 0,
        });
        assert_eq!(
            past.check(&LIMITS, true),
            Err(Status::SGL_INVALID_OFFSET.with_dnr())
        );
        let long = Sgl::InCapsule(InCapsuleSgl {
            offset: 4096,
            len: 4097,
        });
        assert_eq!(
            long.check(&LIMITS, true),
            Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr())
        );
        let huge = Sgl::InCapsule(InCapsuleSgl {
            offset: u64::MAX,
            len: u32::MAX,
        });
        assert_eq!(
            huge.check(&LIMITS, true),
            Err(Status::SGL_INVALID_OFFSET.with_dnr())
        );
    }

    #[test]
    fn keyed_length_above_mdts_is_rejected() {
        let k = KeyedSgl {
            addr: 0,
            len: (1 << 17) + 1,
            key: 1,
            invalidate: false,
        };
        let sgl = Sgl::Keyed(k);
        assert_eq!(sgl.encode()[15], 0x40);
        assert_eq!(
            sgl.check(&LIMITS, true),
            Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr())
        );
    }

    #[test]
    fn other_types_are_invalid() {
        for t in [0x00u8, 0x02, 0x03, 0x41, 0x50, 0x5B, 0x0F, 0xFF] {
            let mut b = [0u8; 16];
            b[15] = t;
            assert_eq!(
                Sgl::decode(&b),
                Err(Status::SGL_INVALID_TYPE.with_dnr()),
                "type {t:#x}"
            );
        }
    }
}
