//! Fabrics commands (opcode 0x7F, fctype at SQE byte 4): Connect and its 1024-byte data,
//! Property Get/Set, Disconnect; and the Connect Invalid Parameters response (IATTR/IPO).
//!
//! ```text
//! Connect SQE (fctype 0x01)
//!  0    1     2    4      5               24                 40     42  44     46    47   48     52
//! +----+-----+----+------+---------------+------------------+------+---+------+-----+----+------+
//! |0x7F|flags|cid |fctype| rsvd          | SGL (16)         |recfmt|qid|sqsize|cattr|rsvd| kato |
//! +----+-----+----+------+---------------+------------------+------+---+------+-----+----+------+
//! sqsize is 0-based; kato in milliseconds; cattr bit 2: disable SQ flow control.
//!
//! Connect data (1024 bytes, through the SGL)
//!  0          16     18           256             512             768          1024
//! +----------+------+------------+---------------+---------------+------------+
//! | hostid   |cntlid| rsvd       | subnqn (256)  | hostnqn (256) | rsvd       |
//! +----------+------+------------+---------------+---------------+------------+
//!
//! Property Set SQE: attrib byte 40 (bits 2:0 size: 0 = 4 bytes, 1 = 8), offset u32 at 44,
//! value u64 at 48. Property Get: attrib at 40, offset at 44; the value comes back in CQE
//! dw0 (and dw1 for 8 bytes). Disconnect: recfmt u16 at 40.
//!
//! Connect response: dw0 = cntlid on success. On Connect Invalid Parameters dw0 = IPO u16
//! (byte offset of the bad field) | IATTR u8 << 16 (0: in the SQE, 1: in the Connect data).
//! ```

use super::cqe::Cqe;
use super::le::{array_at, put_u16, u16_at};
use super::nqn::{Nqn, NQN_FIELD_LEN};
use super::opcodes::{fctype, FABRICS};
use super::properties::PropertySize;
use super::sgl::Sgl;
use super::sqe::Sqe;
use super::status::Status;

/// Size of the Connect command's data.
pub const CONNECT_DATA_LEN: usize = 1024;
const _: () = assert!(CONNECT_DATA_LEN == 1024);

/// The only Connect / Disconnect record format (NVMe-oF 1.0).
pub const RECFMT_1_0: u16 = 0;

/// Connect data cntlid asking the subsystem to allocate a controller (dynamic model).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;

/// Connect CATTR bit 2: the host disables SQ flow control (no SQ head in completions).
pub const CATTR_DISABLE_SQ_FLOW: u8 = 1 << 2;

/// Byte offsets of Connect fields, as IPO reports them.
pub mod offset {
    /// SQE: RECFMT.
    pub const RECFMT: u16 = 40;
    /// SQE: QID.
    pub const QID: u16 = 42;
    /// SQE: SQSIZE.
    pub const SQSIZE: u16 = 44;
    /// SQE: CATTR.
    pub const CATTR: u16 = 46;
    /// SQE: KATO.
    pub const KATO: u16 = 48;
    /// Data: HOSTID.
    pub const HOSTID: u16 = 0;
    /// Data: CNTLID.
    pub const CNTLID: u16 = 16;
    /// Data: SUBNQN.
    pub const SUBNQN: u16 = 256;
    /// Data: HOSTNQN.
    pub const HOSTNQN: u16 = 512;
}

/// IATTR: where the invalid Connect parameter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamLocation {
    /// IATTR 0: in the Connect SQE.
    Command,
    /// IATTR 1: in the Connect data.
    Data,
}

/// The invalid parameter a Connect Invalid Parameters (or Invalid Host) response points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidParam {
    /// IATTR.
    pub location: ParamLocation,
    /// IPO: byte offset of the field within the SQE or the data.
    pub offset: u16,
}

impl InvalidParam {
    /// CQE dw0: IPO in bits 15:0, IATTR in bits 23:16.
    pub fn to_dw0(self) -> u32 {
        let iattr = match self.location {
            ParamLocation::Command => 0u32,
            ParamLocation::Data => 1,
        };
        u32::from(self.offset) | iattr << 16
    }

    /// Decodes CQE dw0 (as the Linux host does: IATTR bit 0 picks SQE or data).
    pub fn from_dw0(dw0: u32) -> InvalidParam {
        let location = if dw0 >> 16 & 1 != 0 {
            ParamLocation::Data
        } else {
            ParamLocation::Command
        };
        InvalidParam {
            location,
            offset: dw0 as u16,
        }
    }

    /// The field's name, for an initiator's error message.
    pub fn field_name(self) -> &'static str {
        match (self.location, self.offset) {
            (ParamLocation::Command, offset::RECFMT) => "recfmt",
            (ParamLocation::Command, offset::QID) => "qid",
            (ParamLocation::Command, offset::SQSIZE) => "sqsize",
            (ParamLocation::Command, offset::CATTR) => "cattr",
            (ParamLocation::Command, offset::KATO) => "kato",
            (ParamLocation::Data, offset::HOSTID) => "hostid",
            (ParamLocation::Data, offset::CNTLID) => "cntlid",
            (ParamLocation::Data, offset::SUBNQN) => "subnqn",
            (ParamLocation::Data, offset::HOSTNQN) => "hostnqn",
            _ => "unknown field",
        }
    }
}

/// Why a Connect fails: the status and, for parameter errors, the field it points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectFailure {
    /// Completion status (DNR set by the constructors here).
    pub status: Status,
    /// The offending field, sent in dw0.
    pub invalid: Option<InvalidParam>,
}

impl ConnectFailure {
    /// Connect Invalid Parameters pointing at SQE byte `offset`.
    pub fn invalid_command(offset: u16) -> ConnectFailure {
        ConnectFailure {
            status: Status::CONNECT_INVALID_PARAMETERS.with_dnr(),
            invalid: Some(InvalidParam {
                location: ParamLocation::Command,
                offset,
            }),
        }
    }

    /// Connect Invalid Parameters pointing at Connect data byte `offset`.
    pub fn invalid_data(offset: u16) -> ConnectFailure {
        ConnectFailure {
            status: Status::CONNECT_INVALID_PARAMETERS.with_dnr(),
            invalid: Some(InvalidParam {
                location: ParamLocation::Data,
                offset,
            }),
        }
    }

    /// Connect Invalid Host (the host NQN may not use this subsystem).
    pub fn invalid_host() -> ConnectFailure {
        ConnectFailure {
            status: Status::CONNECT_INVALID_HOST.with_dnr(),
            invalid: Some(InvalidParam {
                location: ParamLocation::Data,
                offset: offset::HOSTNQN,
            }),
        }
    }

    /// CQE dw0.
    pub fn dw0(&self) -> u32 {
        self.invalid.map_or(0, InvalidParam::to_dw0)
    }

    /// The offending field's name, `"-"` when the failure names none.
    pub fn field_name(&self) -> &'static str {
        self.invalid.map_or("-", InvalidParam::field_name)
    }

    /// The response completion.
    pub fn to_cqe(&self, cid: u16, sq_id: u16, sq_head: u16) -> Cqe {
        Cqe {
            dw0: self.dw0(),
            ..Cqe::error(cid, sq_id, sq_head, self.status)
        }
    }
}

impl From<Status> for ConnectFailure {
    fn from(status: Status) -> Self {
        ConnectFailure {
            status,
            invalid: None,
        }
    }
}

/// The Connect command's SQE fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// Queue to create: 0 admin, 1.. I/O.
    pub qid: u16,
    /// Submission queue size, 0-based.
    pub sqsize: u16,
    /// Connect attributes (see [`CATTR_DISABLE_SQ_FLOW`]).
    pub cattr: u8,
    /// Keep-alive timeout in milliseconds (admin queue; 0 disables).
    pub kato_ms: u32,
}

impl Connect {
    /// Reads a Connect SQE (the caller dispatched on opcode 0x7F, fctype 0x01). Checks what
    /// needs no configuration: RECFMT 0 (else Connect Incompatible Format) and SQSIZE not 0
    /// (a 1-entry queue; nvmet rejects it). Queue limits are the target's to check, with
    /// [`ConnectFailure::invalid_command`].
    pub fn from_sqe(sqe: &Sqe) -> Result<Connect, ConnectFailure> {
        if sqe.cdw10 as u16 != RECFMT_1_0 {
            return Err(Status::CONNECT_INCOMPATIBLE_FORMAT.with_dnr().into());
        }
        let c = Connect {
            qid: (sqe.cdw10 >> 16) as u16,
            sqsize: sqe.cdw11 as u16,
            cattr: (sqe.cdw11 >> 16) as u8,
            kato_ms: sqe.cdw12,
        };
        if c.sqsize == 0 {
            return Err(ConnectFailure::invalid_command(offset::SQSIZE));
        }
        Ok(c)
    }

    /// Queue entries (SQSIZE + 1).
    pub fn queue_entries(&self) -> u32 {
        u32::from(self.sqsize) + 1
    }

    /// The SQE, data pointer set to `data` (keyed on the admin queue, or in-capsule).
    pub fn to_sqe(&self, cid: u16, data: &Sgl) -> Sqe {
        let mut sqe = Sqe::new(FABRICS, cid);
        sqe.set_fctype(fctype::CONNECT);
        sqe.set_sgl(data);
        sqe.cdw10 = u32::from(RECFMT_1_0) | u32::from(self.qid) << 16;
        sqe.cdw11 = u32::from(self.sqsize) | u32::from(self.cattr) << 16;
        sqe.cdw12 = self.kato_ms;
        sqe
    }

    /// Checks that the data pointer describes exactly the 1024 Connect data bytes (nvmet fails
    /// anything else with Data SGL Length Invalid).
    pub fn check_data_sgl(sgl: &Sgl) -> Result<(), Status> {
        if sgl.len() as usize != CONNECT_DATA_LEN {
            return Err(Status::SGL_INVALID_DATA_LENGTH.with_dnr());
        }
        Ok(())
    }
}

/// The Connect command's 1024-byte data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectData {
    /// Host identifier (a UUID on Linux: /etc/nvme/hostid).
    pub hostid: [u8; 16],
    /// Controller: [`CNTLID_DYNAMIC`] on the admin queue, the admin Connect's result on I/O
    /// queues.
    pub cntlid: u16,
    /// Subsystem NQN.
    pub subnqn: Nqn,
    /// Host NQN; `None` when the field is empty, as SPDK's `spdk_nvme_perf` sends it without a
    /// `hostnqn:` in its transport string. nvmet and SPDK's target take such a host on a
    /// subsystem that allows any host; the field is decoded, the policy is the target's.
    pub hostnqn: Option<Nqn>,
}

impl ConnectData {
    /// Decodes the data. A malformed NQN fails with Connect Invalid Parameters pointing at it.
    pub fn decode(b: &[u8; CONNECT_DATA_LEN]) -> Result<ConnectData, ConnectFailure> {
        let field = |off: u16| -> Result<Nqn, ConnectFailure> {
            let f: [u8; NQN_FIELD_LEN] = array_at(b, usize::from(off));
            Nqn::from_field(&f).map_err(|_| ConnectFailure::invalid_data(off))
        };
        Ok(ConnectData {
            hostid: array_at(b, 0),
            cntlid: u16_at(b, 16),
            subnqn: field(offset::SUBNQN)?,
            hostnqn: match b[usize::from(offset::HOSTNQN)] {
                0 => None,
                _ => Some(field(offset::HOSTNQN)?),
            },
        })
    }

    /// The host NQN, `""` when the field was empty.
    pub fn hostnqn_str(&self) -> &str {
        self.hostnqn.as_ref().map_or("", Nqn::as_str)
    }

    /// Decodes data of any length: anything but 1024 bytes fails with Data SGL Length Invalid.
    pub fn decode_slice(b: &[u8]) -> Result<ConnectData, ConnectFailure> {
        let arr: &[u8; CONNECT_DATA_LEN] = b
            .try_into()
            .map_err(|_| ConnectFailure::from(Status::SGL_INVALID_DATA_LENGTH.with_dnr()))?;
        ConnectData::decode(arr)
    }

    /// Encodes the data; reserved bytes are zero.
    pub fn encode(&self) -> [u8; CONNECT_DATA_LEN] {
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[..16].copy_from_slice(&self.hostid);
        put_u16(&mut b, 16, self.cntlid);
        b[256..512].copy_from_slice(&self.subnqn.to_field());
        if let Some(h) = &self.hostnqn {
            b[512..768].copy_from_slice(&h.to_field());
        }
        b
    }

    /// True when HOSTID is all zero (nvmet refuses such hosts with Connect Invalid Host).
    pub fn hostid_is_null(&self) -> bool {
        self.hostid.iter().all(|&x| x == 0)
    }
}

fn property_size(attrib: u8) -> Result<PropertySize, Status> {
    match attrib & 0x7 {
        0 => Ok(PropertySize::Four),
        1 => Ok(PropertySize::Eight),
        _ => Err(Status::INVALID_FIELD.with_dnr()),
    }
}

/// Property Get (fctype 0x04).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertyGet {
    /// Size to read.
    pub size: PropertySize,
    /// Property offset (see [`super::properties`]).
    pub offset: u32,
}

impl PropertyGet {
    /// Reads the SQE; a reserved size fails with Invalid Field.
    pub fn from_sqe(sqe: &Sqe) -> Result<PropertyGet, Status> {
        Ok(PropertyGet {
            size: property_size(sqe.cdw10 as u8)?,
            offset: sqe.cdw11,
        })
    }

    /// The SQE.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(FABRICS, cid);
        sqe.set_fctype(fctype::PROPERTY_GET);
        sqe.cdw10 = u32::from(self.size.attrib());
        sqe.cdw11 = self.offset;
        sqe
    }
}

/// Property Set (fctype 0x00).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertySet {
    /// Size to write.
    pub size: PropertySize,
    /// Property offset (see [`super::properties`]).
    pub offset: u32,
    /// Value (the low 4 bytes for a 4-byte property).
    pub value: u64,
}

impl PropertySet {
    /// Reads the SQE; a reserved size fails with Invalid Field. A 4-byte write uses only the
    /// value's low half.
    pub fn from_sqe(sqe: &Sqe) -> Result<PropertySet, Status> {
        let size = property_size(sqe.cdw10 as u8)?;
        let mut value = u64::from(sqe.cdw12) | u64::from(sqe.cdw13) << 32;
        if size == PropertySize::Four {
            value &= 0xFFFF_FFFF;
        }
        Ok(PropertySet {
            size,
            offset: sqe.cdw11,
            value,
        })
    }

    /// The SQE.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut sqe = Sqe::new(FABRICS, cid);
        sqe.set_fctype(fctype::PROPERTY_SET);
        sqe.cdw10 = u32::from(self.size.attrib());
        sqe.cdw11 = self.offset;
        sqe.cdw12 = self.value as u32;
        sqe.cdw13 = (self.value >> 32) as u32;
        sqe
    }
}

/// Disconnect (fctype 0x08): tear down the queue the command arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disconnect;

impl Disconnect {
    /// Reads the SQE; RECFMT other than 0 fails with Connect Incompatible Format.
    pub fn from_sqe(sqe: &Sqe) -> Result<Disconnect, Status> {
        if sqe.cdw10 as u16 != RECFMT_1_0 {
            return Err(Status::CONNECT_INCOMPATIBLE_FORMAT.with_dnr());
        }
        Ok(Disconnect)
    }

    /// The SQE.
    pub fn to_sqe(cid: u16) -> Sqe {
        let mut sqe = Sqe::new(FABRICS, cid);
        sqe.set_fctype(fctype::DISCONNECT);
        sqe
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::properties;
    use crate::nvme::sgl::{InCapsuleSgl, KeyedSgl};
    use crate::nvme::sqe::SQE_LEN;

    /// An admin-queue Connect as `nvme connect -t rdma` sends it from Linux 6.1: PSDT SGL,
    /// fctype Connect, keyed SGL with invalidate over the 1024-byte data, qid 0, sqsize 31,
    /// kato 5000 ms.
    fn linux_admin_connect() -> [u8; SQE_LEN] {
        let mut b = [0u8; SQE_LEN];
        b[0] = 0x7F;
        b[1] = 0x40;
        b[2..4].copy_from_slice(&0x0005u16.to_le_bytes());
        b[4] = 0x01;
        b[24..32].copy_from_slice(&0xFFFF_8881_0A2B_3000u64.to_le_bytes());
        b[32..35].copy_from_slice(&[0x00, 0x04, 0x00]);
        b[35..39].copy_from_slice(&0x0001_2345u32.to_le_bytes());
        b[39] = 0x4F;
        b[42..44].copy_from_slice(&0u16.to_le_bytes());
        b[44..46].copy_from_slice(&31u16.to_le_bytes());
        b[48..52].copy_from_slice(&5000u32.to_le_bytes());
        b
    }

    fn linux_connect_data() -> [u8; CONNECT_DATA_LEN] {
        let mut d = [0u8; CONNECT_DATA_LEN];
        d[..16].copy_from_slice(&[0x5a; 16]);
        d[16..18].copy_from_slice(&0xFFFFu16.to_le_bytes());
        let sub = b"nqn.2024-01.io.rdmablk:ram0";
        d[256..256 + sub.len()].copy_from_slice(sub);
        let host = b"nqn.2014-08.org.nvmexpress:uuid:5a5a5a5a-5a5a-5a5a-5a5a-5a5a5a5a5a5a";
        d[512..512 + host.len()].copy_from_slice(host);
        d
    }

    #[test]
    fn decodes_linux_admin_connect() {
        let sqe = Sqe::decode(&linux_admin_connect());
        assert_eq!(sqe.opcode, FABRICS);
        assert_eq!(sqe.fctype(), fctype::CONNECT);
        assert!(sqe.check_fabrics_flags().is_ok());
        let c = Connect::from_sqe(&sqe).unwrap();
        assert_eq!(
            c,
            Connect {
                qid: 0,
                sqsize: 31,
                cattr: 0,
                kato_ms: 5000
            }
        );
        assert_eq!(c.queue_entries(), 32);
        let sgl = sqe.sgl().unwrap();
        let Sgl::Keyed(k) = sgl else {
            panic!("keyed expected")
        };
        assert_eq!((k.len, k.key, k.invalidate), (1024, 0x0001_2345, true));
        assert!(Connect::check_data_sgl(&sgl).is_ok());
        assert_eq!(c.to_sqe(5, &sgl).to_bytes(), linux_admin_connect());
    }

    #[test]
    fn decodes_linux_connect_data() {
        let d = ConnectData::decode(&linux_connect_data()).unwrap();
        assert_eq!(d.cntlid, CNTLID_DYNAMIC);
        assert_eq!(d.subnqn.as_str(), "nqn.2024-01.io.rdmablk:ram0");
        assert!(d
            .hostnqn_str()
            .starts_with("nqn.2014-08.org.nvmexpress:uuid:"));
        assert!(!d.hostid_is_null());
        assert_eq!(d.encode(), linux_connect_data());
    }

    #[test]
    fn io_connect_in_capsule_roundtrip() {
        let c = Connect {
            qid: 3,
            sqsize: 127,
            cattr: CATTR_DISABLE_SQ_FLOW,
            kato_ms: 0,
        };
        let sgl = Sgl::InCapsule(InCapsuleSgl {
            offset: 0,
            len: 1024,
        });
        let sqe = c.to_sqe(9, &sgl);
        let b = sqe.to_bytes();
        assert_eq!(&b[40..48], &[0, 0, 3, 0, 127, 0, 4, 0]);
        assert_eq!(Connect::from_sqe(&Sqe::decode(&b)).unwrap(), c);
    }

    #[test]
    fn connect_rejections() {
        let mut sqe = Sqe::decode(&linux_admin_connect());
        sqe.cdw10 |= 1;
        let f = Connect::from_sqe(&sqe).unwrap_err();
        assert_eq!(f.status, Status::CONNECT_INCOMPATIBLE_FORMAT.with_dnr());
        let mut sqe = Sqe::decode(&linux_admin_connect());
        sqe.cdw11 = 0;
        let f = Connect::from_sqe(&sqe).unwrap_err();
        assert_eq!(f.dw0(), 44);
        let cqe = f.to_cqe(5, 0, 1);
        assert_eq!(cqe.to_bytes()[0..4], [44, 0, 0, 0]);
        assert_eq!(cqe.to_bytes()[14..16], (0x4182u16 << 1).to_le_bytes());

        let mut d = linux_connect_data();
        d[256..512].fill(b'x');
        let f = ConnectData::decode(&d).unwrap_err();
        assert_eq!(f.dw0(), 0x0001_0100, "IATTR 1, IPO 256");
        assert_eq!(InvalidParam::from_dw0(f.dw0()).field_name(), "subnqn");
        // An empty host NQN is a field left empty (spdk_nvme_perf without hostnqn:), the
        // target's to admit or refuse; one with no NUL is malformed.
        let mut d = linux_connect_data();
        d[512] = 0;
        assert_eq!(ConnectData::decode(&d).unwrap().hostnqn, None);
        assert_eq!(ConnectData::decode(&d).unwrap().hostnqn_str(), "");
        d[512..768].fill(b'x');
        let f = ConnectData::decode(&d).unwrap_err();
        assert_eq!(
            f.invalid,
            Some(InvalidParam {
                location: ParamLocation::Data,
                offset: 512
            })
        );
        assert_eq!(ConnectFailure::invalid_host().dw0(), 0x0001_0200);
        assert!(ConnectData::decode_slice(&[0u8; 1023]).is_err());
        let keyed = Sgl::Keyed(KeyedSgl {
            addr: 0,
            len: 4096,
            key: 0,
            invalidate: false,
        });
        assert!(Connect::check_data_sgl(&keyed).is_err());
    }

    #[test]
    fn property_commands() {
        let get = PropertyGet {
            size: PropertySize::Eight,
            offset: properties::CAP,
        };
        let b = get.to_sqe(1).to_bytes();
        assert_eq!((b[0], b[4], b[40], b[44]), (0x7F, 0x04, 1, 0));
        assert_eq!(PropertyGet::from_sqe(&Sqe::decode(&b)).unwrap(), get);

        let set = PropertySet {
            size: PropertySize::Four,
            offset: properties::CC,
            value: 0x46_0001,
        };
        let b = set.to_sqe(2).to_bytes();
        assert_eq!((b[4], b[40], b[44]), (0x00, 0, 0x14));
        assert_eq!(&b[48..52], &0x46_0001u32.to_le_bytes());
        assert_eq!(PropertySet::from_sqe(&Sqe::decode(&b)).unwrap(), set);

        let mut bad = Sqe::decode(&b);
        bad.cdw10 = 2;
        assert_eq!(
            PropertySet::from_sqe(&bad),
            Err(Status::INVALID_FIELD.with_dnr())
        );
        bad.cdw10 = 0;
        bad.cdw13 = 0xFFFF;
        assert_eq!(PropertySet::from_sqe(&bad).unwrap().value, 0x46_0001);

        let d = Disconnect::to_sqe(3);
        assert_eq!(d.fctype(), fctype::DISCONNECT);
        assert!(Disconnect::from_sqe(&d).is_ok());
    }
}
