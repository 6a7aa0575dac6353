//! NVMe/TCP PDUs (NVMe/TCP Transport Specification 1.0, `include/linux/nvme-tcp.h`): the
//! common header, connection set-up (ICReq, ICResp), capsules, data transfer (H2CData,
//! C2HData, R2T), fatal-error reports (TermReq), digests, and the checks a receiver makes of
//! a PDU's header before it reads a byte of its data.
//!
//! Every PDU starts with an 8-byte common header (type, flags, HLEN, PDO, PLEN), then the rest
//! of its header (HLEN bytes in all), the header digest if negotiated, padding up to PDO,
//! the data, and the data digest if negotiated. All fields are little-endian.
//!
//! [`PduLayout::check`] is what a receiver runs on each common header: the type is known
//! and expected from this side, HLEN is the type's, digests are there exactly when
//! negotiated, PDO and PLEN describe data of a sane size, within the limit the caller gives.
//! It never allocates: a receiver learns from it how many bytes to read next and where they
//! go, or the [`TermReq`] to send before it closes the connection.

use super::super::{Cqe, Sqe, CQE_LEN, SQE_LEN};

/// The common header's length.
pub const CH_LEN: usize = 8;
/// A header or data digest's length (CRC32C).
pub const DIGEST_LEN: usize = 4;
/// HLEN (and PLEN) of ICReq and ICResp.
pub const IC_LEN: usize = 128;
/// HLEN of a CapsuleCmd: the common header and the SQE.
pub const CAPSULE_CMD_HLEN: usize = CH_LEN + SQE_LEN;
/// HLEN of a CapsuleResp: the common header and the CQE.
pub const CAPSULE_RESP_HLEN: usize = CH_LEN + CQE_LEN;
/// HLEN of H2CData, C2HData, R2T and the TermReqs.
pub const DATA_HLEN: usize = 24;
/// The most header bytes of the offending PDU a TermReq carries.
pub const TERM_REQ_MAX_DATA: usize = 128;
/// The smallest MAXH2CDATA a controller may offer (the Linux host refuses less).
pub const MIN_MAXH2CDATA: u32 = 4096;

/// PDU types.
pub mod pdu_type {
    pub const IC_REQ: u8 = 0x00;
    pub const IC_RESP: u8 = 0x01;
    pub const H2C_TERM_REQ: u8 = 0x02;
    pub const C2H_TERM_REQ: u8 = 0x03;
    pub const CAPSULE_CMD: u8 = 0x04;
    pub const CAPSULE_RESP: u8 = 0x05;
    pub const H2C_DATA: u8 = 0x06;
    pub const C2H_DATA: u8 = 0x07;
    pub const R2T: u8 = 0x09;
}

/// Common header flags.
pub mod flags {
    /// A header digest follows the header.
    pub const HDGSTF: u8 = 0x01;
    /// A data digest follows the data.
    pub const DDGSTF: u8 = 0x02;
    /// The last data PDU of a command (H2CData, C2HData).
    pub const DATA_LAST: u8 = 0x04;
    /// C2HData: the command succeeded and no CapsuleResp follows (only with DATA_LAST).
    pub const DATA_SUCCESS: u8 = 0x08;
}

/// Which way a PDU travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    HostToController,
    ControllerToHost,
}

/// Fatal error status of a TermReq (FES).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Fes {
    InvalidHeaderField = 0x01,
    PduSequenceError = 0x02,
    HeaderDigestError = 0x03,
    DataTransferOutOfRange = 0x04,
    DataTransferLimitExceeded = 0x05,
    UnsupportedParameter = 0x06,
}

/// Why a received PDU ends the connection: the TermReq to send (status, and the byte offset
/// of the offending field in its header: FEI) and what to log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermError {
    pub fes: Fes,
    /// Field error information: for a bad header field, its byte offset in the header.
    pub fei: u32,
    pub what: &'static str,
}

impl std::fmt::Display for TermError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?}, byte {})", self.what, self.fes, self.fei)
    }
}

impl std::error::Error for TermError {}

fn bad_field(fei: u32, what: &'static str) -> TermError {
    TermError {
        fes: Fes::InvalidHeaderField,
        fei,
        what,
    }
}

/// Byte offsets in the common header (the FEI of a bad field).
pub mod ch_offset {
    pub const TYPE: u32 = 0;
    pub const FLAGS: u32 = 1;
    pub const HLEN: u32 = 2;
    pub const PDO: u32 = 3;
    pub const PLEN: u32 = 4;
}

/// The common header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommonHeader {
    pub pdu_type: u8,
    pub flags: u8,
    pub hlen: u8,
    pub pdo: u8,
    pub plen: u32,
}

impl CommonHeader {
    pub fn decode(b: &[u8; CH_LEN]) -> CommonHeader {
        CommonHeader {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    pub fn encode(&self, b: &mut [u8]) {
        b[0] = self.pdu_type;
        b[1] = self.flags;
        b[2] = self.hlen;
        b[3] = self.pdo;
        b[4..8].copy_from_slice(&self.plen.to_le_bytes());
    }
}

/// CRC32C as NVMe/TCP digests use it (Castagnoli; hardware-accelerated where the CPU has it).
pub fn digest(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// [`digest`] continued over more data (`crc` is the digest of what came before).
pub fn digest_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// What a connection negotiated that shapes its PDUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Negotiated {
    pub hdgst: bool,
    pub ddgst: bool,
    /// The data alignment the receiver asked for (its PDA: CPDA for PDUs to the controller,
    /// HPDA for PDUs to the host), in units of 4 bytes, minus one.
    pub pda: u8,
}

impl Negotiated {
    fn hdgst_len(&self) -> usize {
        if self.hdgst {
            DIGEST_LEN
        } else {
            0
        }
    }

    fn ddgst_len(&self) -> usize {
        if self.ddgst {
            DIGEST_LEN
        } else {
            0
        }
    }

    /// The PDO of a PDU with data and header length `hlen` that this side sends.
    pub fn pdo(&self, hlen: usize) -> usize {
        let align = (usize::from(self.pda) + 1) * 4;
        (hlen + self.hdgst_len()).div_ceil(align) * align
    }
}

/// Where the parts of a PDU lie, from its common header (checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PduLayout {
    pub pdu_type: u8,
    pub flags: u8,
    /// Header bytes (the common header included).
    pub hlen: usize,
    /// Header digest bytes after the header (0 or 4).
    pub hdgst: usize,
    /// Offset of the data from the PDU's start (0 if none).
    pub pdo: usize,
    /// Data bytes.
    pub data_len: usize,
    /// Data digest bytes after the data (0 or 4).
    pub ddgst: usize,
    /// The whole PDU's length.
    pub plen: usize,
}

impl PduLayout {
    /// Checks common header `ch`, received travelling `dir` on a connection that negotiated
    /// `neg` (before the ICReq/ICResp exchange: `None`), whose data may be at most
    /// `max_data` bytes. The data's sanity against the command (its offsets, its length) is
    /// for the caller.
    pub fn check(
        ch: &CommonHeader,
        dir: Direction,
        neg: Option<Negotiated>,
        max_data: u32,
    ) -> Result<PduLayout, TermError> {
        use pdu_type::*;
        let (hlen, may_have_data) = match (ch.pdu_type, dir) {
            (IC_REQ, Direction::HostToController) | (IC_RESP, Direction::ControllerToHost) => {
                (IC_LEN, false)
            }
            (CAPSULE_CMD, Direction::HostToController) => (CAPSULE_CMD_HLEN, true),
            (CAPSULE_RESP, Direction::ControllerToHost) => (CAPSULE_RESP_HLEN, false),
            (H2C_DATA, Direction::HostToController) | (C2H_DATA, Direction::ControllerToHost) => {
                (DATA_HLEN, true)
            }
            (R2T, Direction::ControllerToHost) => (DATA_HLEN, false),
            (H2C_TERM_REQ, Direction::HostToController)
            | (C2H_TERM_REQ, Direction::ControllerToHost) => (DATA_HLEN, true),
            _ => {
                return Err(bad_field(
                    ch_offset::TYPE,
                    "PDU type unknown or not for this side",
                ))
            }
        };
        let is_ic = matches!(ch.pdu_type, IC_REQ | IC_RESP);
        let is_term = matches!(ch.pdu_type, H2C_TERM_REQ | C2H_TERM_REQ);
        let neg = match (neg, is_ic) {
            (None, false) => {
                return Err(TermError {
                    fes: Fes::PduSequenceError,
                    fei: 0,
                    what: "a PDU before the connection was initialized",
                })
            }
            (Some(_), true) => {
                return Err(TermError {
                    fes: Fes::PduSequenceError,
                    fei: 0,
                    what: "a second connection initialization",
                })
            }
            (n, _) => n.unwrap_or_default(),
        };
        if usize::from(ch.hlen) != hlen {
            return Err(bad_field(ch_offset::HLEN, "HLEN is not the PDU type's"));
        }
        let plen = ch.plen as usize;
        if is_ic {
            if ch.flags != 0 || ch.pdo != 0 || plen != IC_LEN {
                let fei = if ch.flags != 0 {
                    ch_offset::FLAGS
                } else if ch.pdo != 0 {
                    ch_offset::PDO
                } else {
                    ch_offset::PLEN
                };
                return Err(bad_field(fei, "connection initialization PDU malformed"));
            }
            return Ok(PduLayout {
                pdu_type: ch.pdu_type,
                flags: 0,
                hlen,
                hdgst: 0,
                pdo: 0,
                data_len: 0,
                ddgst: 0,
                plen,
            });
        }
        if is_term {
            // TermReqs carry no digests; their data is the offending header.
            if !(DATA_HLEN..=DATA_HLEN + TERM_REQ_MAX_DATA).contains(&plen) {
                return Err(bad_field(ch_offset::PLEN, "TermReq length out of range"));
            }
            return Ok(PduLayout {
                pdu_type: ch.pdu_type,
                flags: ch.flags,
                hlen,
                hdgst: 0,
                pdo: if plen > hlen { hlen } else { 0 },
                data_len: plen - hlen,
                ddgst: 0,
                plen,
            });
        }
        let known = flags::HDGSTF
            | flags::DDGSTF
            | match ch.pdu_type {
                H2C_DATA => flags::DATA_LAST,
                C2H_DATA => flags::DATA_LAST | flags::DATA_SUCCESS,
                _ => 0,
            };
        if ch.flags & !known != 0 {
            return Err(bad_field(
                ch_offset::FLAGS,
                "flags not defined for the PDU type",
            ));
        }
        if (ch.flags & flags::HDGSTF != 0) != neg.hdgst {
            return Err(bad_field(
                ch_offset::FLAGS,
                "header digest flag differs from what was negotiated",
            ));
        }
        if ch.flags & flags::DATA_SUCCESS != 0 && ch.flags & flags::DATA_LAST == 0 {
            return Err(bad_field(ch_offset::FLAGS, "SUCCESS without LAST"));
        }
        let hdgst = neg.hdgst_len();
        let header_end = hlen + hdgst;
        if plen < header_end {
            return Err(bad_field(ch_offset::PLEN, "PLEN shorter than the header"));
        }
        if plen == header_end {
            // No data: then no data digest, and PDO zero.
            if ch.pdo != 0 || ch.flags & flags::DDGSTF != 0 {
                let fei = if ch.pdo != 0 {
                    ch_offset::PDO
                } else {
                    ch_offset::FLAGS
                };
                return Err(bad_field(fei, "PDO or data digest on a PDU without data"));
            }
            if matches!(ch.pdu_type, H2C_DATA | C2H_DATA) {
                return Err(bad_field(ch_offset::PLEN, "data PDU without data"));
            }
            return Ok(PduLayout {
                pdu_type: ch.pdu_type,
                flags: ch.flags,
                hlen,
                hdgst,
                pdo: 0,
                data_len: 0,
                ddgst: 0,
                plen,
            });
        }
        if !may_have_data {
            return Err(bad_field(
                ch_offset::PLEN,
                "PLEN longer than a PDU without data",
            ));
        }
        if (ch.flags & flags::DDGSTF != 0) != neg.ddgst {
            return Err(bad_field(
                ch_offset::FLAGS,
                "data digest flag differs from what was negotiated",
            ));
        }
        let pdo = usize::from(ch.pdo);
        let align = (usize::from(neg.pda) + 1) * 4;
        if pdo < header_end || pdo % align != 0 {
            return Err(bad_field(
                ch_offset::PDO,
                "PDO inside the header or misaligned",
            ));
        }
        let ddgst = neg.ddgst_len();
        if plen < pdo + ddgst + 1 {
            return Err(bad_field(ch_offset::PLEN, "PLEN leaves no data after PDO"));
        }
        let data_len = plen - pdo - ddgst;
        if data_len > max_data as usize {
            return Err(TermError {
                fes: Fes::DataTransferLimitExceeded,
                fei: ch_offset::PLEN,
                what: "more data in one PDU than the connection allows",
            });
        }
        Ok(PduLayout {
            pdu_type: ch.pdu_type,
            flags: ch.flags,
            hlen,
            hdgst,
            pdo,
            data_len,
            ddgst,
            plen,
        })
    }
}

/// ICReq: the host's connection initialization request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcReq {
    /// PDU format version (0).
    pub pfv: u16,
    /// Host PDU data alignment (in 4-byte units, minus one) for C2HData.
    pub hpda: u8,
    pub hdgst: bool,
    pub ddgst: bool,
    /// Most R2Ts outstanding per command, minus one.
    pub maxr2t: u32,
}

/// ICResp: the controller's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IcResp {
    pub pfv: u16,
    /// Controller PDU data alignment for H2C PDUs with data (the Linux host requires 0).
    pub cpda: u8,
    pub hdgst: bool,
    pub ddgst: bool,
    /// The most data in one H2CData PDU.
    pub maxh2cdata: u32,
}

const DGST_HDR: u8 = 0x01;
const DGST_DATA: u8 = 0x02;

fn digest_byte(h: bool, d: bool) -> u8 {
    (if h { DGST_HDR } else { 0 }) | (if d { DGST_DATA } else { 0 })
}

/// ICReq and ICResp share a layout: PFV, the sender's PDA, the digest bits, one 32-bit field
/// (MAXR2T, MAXH2CDATA), reserved to 128 bytes.
fn encode_ic(ty: u8, pfv: u16, pda_dgst: [u8; 2], word: u32) -> [u8; IC_LEN] {
    let mut b = [0u8; IC_LEN];
    CommonHeader {
        pdu_type: ty,
        flags: 0,
        hlen: IC_LEN as u8,
        pdo: 0,
        plen: IC_LEN as u32,
    }
    .encode(&mut b);
    b[8..10].copy_from_slice(&pfv.to_le_bytes());
    b[10..12].copy_from_slice(&pda_dgst);
    b[12..16].copy_from_slice(&word.to_le_bytes());
    b
}

fn check_pfv(b: &[u8; IC_LEN]) -> Result<u16, TermError> {
    match u16::from_le_bytes([b[8], b[9]]) {
        0 => Ok(0),
        _ => Err(TermError {
            fes: Fes::UnsupportedParameter,
            fei: 8,
            what: "PDU format version is not 0",
        }),
    }
}

impl IcReq {
    pub fn encode(&self) -> [u8; IC_LEN] {
        let pda_dgst = [self.hpda, digest_byte(self.hdgst, self.ddgst)];
        encode_ic(pdu_type::IC_REQ, self.pfv, pda_dgst, self.maxr2t)
    }

    /// Decodes an ICReq whose common header [`PduLayout::check`] passed, and checks it as a
    /// controller does: PFV 0, HPDA within 0..=31, no unknown digest bits.
    pub fn decode(b: &[u8; IC_LEN]) -> Result<IcReq, TermError> {
        let pfv = check_pfv(b)?;
        let hpda = b[10];
        if hpda > 31 {
            return Err(bad_field(10, "HPDA above 31"));
        }
        if b[11] & !(DGST_HDR | DGST_DATA) != 0 {
            return Err(bad_field(11, "unknown digest bits"));
        }
        Ok(IcReq {
            pfv,
            hpda,
            hdgst: b[11] & DGST_HDR != 0,
            ddgst: b[11] & DGST_DATA != 0,
            maxr2t: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
        })
    }
}

impl IcResp {
    pub fn encode(&self) -> [u8; IC_LEN] {
        let pda_dgst = [self.cpda, digest_byte(self.hdgst, self.ddgst)];
        encode_ic(pdu_type::IC_RESP, self.pfv, pda_dgst, self.maxh2cdata)
    }

    /// Decodes an ICResp whose common header [`PduLayout::check`] passed, and checks it
    /// against the host's `req` as the Linux host does: PFV 0, digests echoed exactly, CPDA
    /// 0, MAXH2CDATA at least 4096 and a multiple of 4.
    pub fn decode(b: &[u8; IC_LEN], req: &IcReq) -> Result<IcResp, TermError> {
        let r = IcResp {
            pfv: check_pfv(b)?,
            cpda: b[10],
            hdgst: b[11] & DGST_HDR != 0,
            ddgst: b[11] & DGST_DATA != 0,
            maxh2cdata: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
        };
        if r.cpda != 0 {
            return Err(TermError {
                fes: Fes::UnsupportedParameter,
                fei: 10,
                what: "CPDA is not 0",
            });
        }
        if b[11] & !(DGST_HDR | DGST_DATA) != 0 || r.hdgst != req.hdgst || r.ddgst != req.ddgst {
            return Err(bad_field(11, "digests do not echo the request"));
        }
        if r.maxh2cdata < MIN_MAXH2CDATA || r.maxh2cdata % 4 != 0 {
            return Err(bad_field(
                12,
                "MAXH2CDATA below 4096 or not a multiple of 4",
            ));
        }
        Ok(r)
    }
}

/// H2CData and C2HData's header after the common header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataHeader {
    /// The command's ID.
    pub cccid: u16,
    /// H2CData: the R2T's transfer tag it answers (reserved in C2HData).
    pub ttag: u16,
    /// Offset of this PDU's data in the command's data.
    pub datao: u32,
    /// Bytes of data in this PDU.
    pub datal: u32,
}

impl DataHeader {
    pub fn decode(b: &[u8; DATA_HLEN]) -> DataHeader {
        DataHeader {
            cccid: u16::from_le_bytes([b[8], b[9]]),
            ttag: u16::from_le_bytes([b[10], b[11]]),
            datao: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
            datal: u32::from_le_bytes([b[16], b[17], b[18], b[19]]),
        }
    }

    /// Writes the whole header (common header first) of a data PDU of `ty` with `flags`
    /// on a connection that negotiated `neg` (its receiver's PDA).
    pub fn encode(
        &self,
        ty: u8,
        flags: u8,
        neg: &Negotiated,
        b: &mut [u8; DATA_HLEN],
    ) -> PduLayout {
        let layout = data_layout(ty, flags, self.datal as usize, neg);
        CommonHeader {
            pdu_type: ty,
            flags: layout.flags,
            hlen: DATA_HLEN as u8,
            pdo: layout.pdo as u8,
            plen: layout.plen as u32,
        }
        .encode(b);
        b[8..10].copy_from_slice(&self.cccid.to_le_bytes());
        b[10..12].copy_from_slice(&self.ttag.to_le_bytes());
        b[12..16].copy_from_slice(&self.datao.to_le_bytes());
        b[16..20].copy_from_slice(&self.datal.to_le_bytes());
        b[20..24].fill(0);
        layout
    }

    /// Checks the header against its PDU: DATAL is the data the PDU holds (the Linux host
    /// and nvmet require it).
    pub fn check(&self, layout: &PduLayout) -> Result<(), TermError> {
        if self.datal as usize != layout.data_len || self.datal == 0 {
            return Err(bad_field(16, "DATAL is not the PDU's data length"));
        }
        Ok(())
    }
}

/// The layout of a PDU this side sends: `hlen`-byte header of type `ty`, `data_len` bytes
/// of data, digests and padding as `neg` says. Sets the digest flags into the returned
/// layout's `flags` (with `flags`).
fn data_layout(ty: u8, flags: u8, data_len: usize, neg: &Negotiated) -> PduLayout {
    let hlen = DATA_HLEN;
    let hdgst = neg.hdgst_len();
    let mut f = flags;
    if neg.hdgst {
        f |= self::flags::HDGSTF;
    }
    let (pdo, ddgst) = if data_len > 0 {
        if neg.ddgst {
            f |= self::flags::DDGSTF;
        }
        (neg.pdo(hlen), neg.ddgst_len())
    } else {
        (0, 0)
    };
    let plen = if data_len > 0 {
        pdo + data_len + ddgst
    } else {
        hlen + hdgst
    };
    PduLayout {
        pdu_type: ty,
        flags: f,
        hlen,
        hdgst,
        pdo,
        data_len,
        ddgst,
        plen,
    }
}

/// R2T: the controller asks for `r2tl` bytes of command `cccid`'s data from offset `r2to`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct R2t {
    pub cccid: u16,
    pub ttag: u16,
    pub r2to: u32,
    pub r2tl: u32,
}

impl R2t {
    pub fn decode(b: &[u8; DATA_HLEN]) -> R2t {
        let d = DataHeader::decode(b);
        R2t {
            cccid: d.cccid,
            ttag: d.ttag,
            r2to: d.datao,
            r2tl: d.datal,
        }
    }

    pub fn encode(&self, hdgst: bool, b: &mut [u8; DATA_HLEN]) -> PduLayout {
        let neg = Negotiated {
            hdgst,
            ..Negotiated::default()
        };
        DataHeader {
            cccid: self.cccid,
            ttag: self.ttag,
            datao: self.r2to,
            datal: 0,
        }
        .encode(pdu_type::R2T, 0, &neg, b);
        b[16..20].copy_from_slice(&self.r2tl.to_le_bytes());
        data_layout(pdu_type::R2T, 0, 0, &neg)
    }
}

/// Writes the header of a CapsuleCmd carrying `sqe` and `data_len` bytes of in-capsule data.
pub fn encode_capsule_cmd(
    sqe: &Sqe,
    data_len: usize,
    neg: &Negotiated,
    b: &mut [u8; CAPSULE_CMD_HLEN],
) -> PduLayout {
    let hlen = CAPSULE_CMD_HLEN;
    let mut layout = data_layout(pdu_type::CAPSULE_CMD, 0, data_len, neg);
    layout.hlen = hlen;
    if data_len > 0 {
        layout.pdo = neg.pdo(hlen);
        layout.plen = layout.pdo + data_len + layout.ddgst;
    } else {
        layout.plen = hlen + layout.hdgst;
    }
    CommonHeader {
        pdu_type: pdu_type::CAPSULE_CMD,
        flags: layout.flags,
        hlen: hlen as u8,
        pdo: layout.pdo as u8,
        plen: layout.plen as u32,
    }
    .encode(b);
    let body: &mut [u8; SQE_LEN] = (&mut b[CH_LEN..]).try_into().expect("72 = 8 + 64");
    sqe.encode(body);
    layout
}

/// Writes a CapsuleResp carrying `cqe`.
pub fn encode_capsule_resp(cqe: &Cqe, hdgst: bool, b: &mut [u8; CAPSULE_RESP_HLEN]) -> PduLayout {
    let hlen = CAPSULE_RESP_HLEN;
    let hd = if hdgst { DIGEST_LEN } else { 0 };
    CommonHeader {
        pdu_type: pdu_type::CAPSULE_RESP,
        flags: if hdgst { flags::HDGSTF } else { 0 },
        hlen: hlen as u8,
        pdo: 0,
        plen: (hlen + hd) as u32,
    }
    .encode(b);
    let body: &mut [u8; CQE_LEN] = (&mut b[CH_LEN..]).try_into().expect("24 = 8 + 16");
    cqe.encode(body);
    PduLayout {
        pdu_type: pdu_type::CAPSULE_RESP,
        flags: if hdgst { flags::HDGSTF } else { 0 },
        hlen,
        hdgst: hd,
        pdo: 0,
        data_len: 0,
        ddgst: 0,
        plen: hlen + hd,
    }
}

/// A TermReq: fatal error status, its information, and (up to 128 bytes of) the offending
/// PDU's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermReq {
    pub fes: Fes,
    pub fei: u32,
}

impl TermReq {
    /// Writes a TermReq of `ty` (H2C or C2H) quoting `offending` (cut to 128 bytes) into `b`;
    /// returns its length.
    pub fn encode(
        &self,
        ty: u8,
        offending: &[u8],
        b: &mut [u8; DATA_HLEN + TERM_REQ_MAX_DATA],
    ) -> usize {
        let n = offending.len().min(TERM_REQ_MAX_DATA);
        let plen = DATA_HLEN + n;
        b.fill(0);
        CommonHeader {
            pdu_type: ty,
            flags: 0,
            hlen: DATA_HLEN as u8,
            pdo: if n > 0 { DATA_HLEN as u8 } else { 0 },
            plen: plen as u32,
        }
        .encode(b);
        b[8..10].copy_from_slice(&(self.fes as u16).to_le_bytes());
        b[10..14].copy_from_slice(&self.fei.to_le_bytes());
        b[DATA_HLEN..plen].copy_from_slice(&offending[..n]);
        plen
    }

    /// Decodes a TermReq's header (FES and FEI); an unknown FES is kept as `None`.
    pub fn decode(b: &[u8; DATA_HLEN]) -> (Option<Fes>, u32) {
        let fes = match u16::from_le_bytes([b[8], b[9]]) {
            1 => Some(Fes::InvalidHeaderField),
            2 => Some(Fes::PduSequenceError),
            3 => Some(Fes::HeaderDigestError),
            4 => Some(Fes::DataTransferOutOfRange),
            5 => Some(Fes::DataTransferLimitExceeded),
            6 => Some(Fes::UnsupportedParameter),
            _ => None,
        };
        (fes, u32::from_le_bytes([b[10], b[11], b[12], b[13]]))
    }
}

impl From<TermError> for TermReq {
    fn from(e: TermError) -> TermReq {
        TermReq {
            fes: e.fes,
            fei: e.fei,
        }
    }
}

pub mod ack;
pub mod host_rx;
pub mod place;
pub mod send;

#[cfg(test)]
mod tests;
