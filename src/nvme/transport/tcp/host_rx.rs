//! The host's receive side of NVMe/TCP, without the socket: what a controller sends
//! (CapsuleResp, C2HData, R2T, C2HTermReq), checked PDU by PDU against what each command
//! moves, before the host touches a command's buffer.
//!
//! [`HostRx`] keeps, by command ID, what the command's data does (nothing, `len` bytes to
//! the host with so many in so far, `len` bytes to the controller); the table is sized once,
//! at connect, and [`HostRx::next`] never allocates. For each PDU at the front of the
//! receive buffer it checks:
//!
//! - the common header ([`PduLayout::check`]: type, HLEN, flags, digests as negotiated,
//!   PDO, PLEN within the data limit), then the header digest and the data digest;
//! - C2HData: DATAL is the PDU's data, the command reads, DATAO is the bytes received so far
//!   (in order, no gap, no overlap), DATAO + DATAL within the command's length, and SUCCESS
//!   only with the last byte of the command's data (it then completes the command);
//! - R2T: the command writes through R2Ts, R2TL is not zero, R2TO + R2TL lies within the
//!   command's length, and R2TO asks for no data an earlier R2T asked for (as the Linux host
//!   checks: a target repeating R2Ts cannot make the host send a command's data twice);
//! - CapsuleResp: completes the command (whatever its data did);
//! - C2HTermReq: the controller gave up on the connection (its FES and FEI);
//!
//! and hands back the PDU (with the data's range in the command's buffer, which it
//! guarantees) or a [`HostRxError`] that ends the connection.
//!
//! **Placement.** With [`HostRx::place_from`] set, a C2HData PDU of at least that much data
//! whose header has arrived but not all of its data comes back as a [`Placement`]: checked
//! from its header alone, so the host can receive the rest of the data straight into the
//! command's buffer (one copy, the kernel's, instead of two) and check its data digest
//! there ([`check_data_digest`]).

use super::{
    flags, pdu_type, CommonHeader, DataHeader, Direction, Fes, Negotiated, PduLayout, R2t,
    TermError, TermReq, CAPSULE_RESP_HLEN, CH_LEN, DATA_HLEN, DIGEST_LEN,
};
use crate::nvme::{Cqe, CQE_LEN};

// Every PDU a host receives after the connection is set up has a 24-byte header.
const _: () = assert!(CAPSULE_RESP_HLEN == DATA_HLEN);

/// What a command's data does, as its capsule leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// No data through the transport: none at all, or all of it in the capsule.
    Nothing,
    /// `len` bytes from the controller, in C2HData PDUs.
    ToHost { len: u32 },
    /// `len` bytes to the controller, in H2CData PDUs answering its R2Ts.
    ToCtrl { len: u32 },
}

/// One command ID's data while the command is in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Slot {
    /// No command, or one that moves no data through the transport.
    #[default]
    Idle,
    /// Reading `len` bytes; `got` of them received.
    ToHost { len: u32, got: u32 },
    /// Writing `len` bytes; R2Ts asked for the data before `asked`.
    ToCtrl { len: u32, asked: u32 },
}

/// A checked PDU from the controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostPdu<'a> {
    /// A CapsuleResp. Its command ID is not checked here (the queue does).
    Response(Cqe),
    /// C2HData: `data` goes to byte `offset` of command `cid`'s buffer; `offset +
    /// data.len()` is within the length the command expects. `success`: this was the last of
    /// its data and the command succeeded (no CapsuleResp follows).
    C2hData {
        cid: u16,
        offset: u32,
        data: &'a [u8],
        success: bool,
    },
    /// R2T: send `r2tl` bytes from `r2to` of command `cccid`'s data (within its length,
    /// `r2tl` not zero).
    R2t(R2t),
}

/// What [`HostRx::next`] found at the front of the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next<'a> {
    /// No whole PDU yet: the buffer must hold `pdu_len` bytes for the next step (the common
    /// header's 8, then the whole PDU; never more than the data limit plus its headers).
    NeedMore { pdu_len: usize },
    /// A whole PDU, checked, `len` bytes long (drop them from the buffer's front).
    Pdu { pdu: HostPdu<'a>, len: usize },
    /// The header of a large C2HData PDU, checked, and the start of its data (only with
    /// [`HostRx::place_from`]).
    Place(Placement<'a>),
}

/// A C2HData PDU whose data the host receives straight into the command's buffer: `len`
/// bytes go to byte `offset` of command `cid`'s buffer (within the length the command
/// expects, in order), the first `data.len()` of them already in the receive buffer. Drop
/// `consumed` bytes (the headers and `data`) from the buffer's front; the rest of the data
/// comes next on the stream, then, if `digest`, its data digest ([`check_data_digest`]).
/// `success`: when all of it is in (and its digest checks), the command succeeded and no
/// CapsuleResp follows. The checker counts the data as received already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement<'a> {
    pub cid: u16,
    pub offset: u32,
    pub len: u32,
    pub data: &'a [u8],
    pub consumed: usize,
    pub digest: bool,
    pub success: bool,
}

/// Why the controller's PDU stream is broken: the connection ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostRxError {
    /// A header field is wrong (the common header or DATAL).
    #[error("PDU from the target: {0}")]
    Header(TermError),
    #[error("header digest mismatch")]
    HeaderDigest,
    #[error("data digest mismatch")]
    DataDigest,
    #[error("C2HData for command {cid}, which reads nothing")]
    C2hForNoRead { cid: u16 },
    #[error(
        "C2HData of command {cid} at {datao}+{datal} does not follow its data \
         ({got} of {len} bytes)"
    )]
    C2hOutOfPlace {
        cid: u16,
        datao: u32,
        datal: u32,
        got: u32,
        len: u32,
    },
    #[error("SUCCESS before all of command {cid}'s data ({got} of {len} bytes)")]
    SuccessEarly { cid: u16, got: u32, len: u32 },
    #[error("R2T for command {cid}, which writes nothing")]
    R2tForNoWrite { cid: u16 },
    #[error("R2T for {r2to}+{r2tl} of command {cid}'s data, of which {asked} bytes were asked for already")]
    R2tRepeated {
        cid: u16,
        r2to: u32,
        r2tl: u32,
        asked: u32,
    },
    #[error("R2T for {r2to}+{r2tl} of command {cid}'s {len} bytes")]
    R2tOutOfRange {
        cid: u16,
        r2to: u32,
        r2tl: u32,
        len: u32,
    },
    #[error(
        "the target terminated the connection (C2HTermReq: {}, field at byte {fei})",
        fes_name(.fes)
    )]
    TermReq { fes: Option<Fes>, fei: u32 },
    #[error("unexpected PDU type {0}")]
    UnexpectedType(u8),
}

fn fes_name(fes: &Option<Fes>) -> String {
    match fes {
        Some(f) => format!("{f:?}"),
        None => "unknown status".into(),
    }
}

/// The checker of one host connection's receive stream.
#[derive(Debug)]
pub struct HostRx {
    neg: Negotiated,
    max_data: u32,
    /// The least data a C2HData PDU must carry to come back as a [`Placement`].
    place_from: Option<usize>,
    /// By command ID.
    cmds: Vec<Slot>,
}

impl HostRx {
    /// A checker for a queue of `entries` command IDs (0..entries) on a connection that
    /// negotiated `neg`, accepting at most `max_data` bytes of data in one PDU.
    pub fn new(entries: usize, neg: Negotiated, max_data: u32) -> HostRx {
        HostRx {
            neg,
            max_data,
            place_from: None,
            cmds: vec![Slot::Idle; entries],
        }
    }

    /// C2HData PDUs of at least `bytes` of data come back as a [`Placement`] once their
    /// header is in, rather than whole.
    pub fn place_from(&mut self, bytes: usize) {
        self.place_from = Some(bytes);
    }

    /// How many command IDs the table holds.
    pub fn entries(&self) -> usize {
        self.cmds.len()
    }

    /// Command `cid`'s capsule is leaving: its data does what `e` says, from nothing moved.
    ///
    /// # Panics
    /// If `cid` is not below [`HostRx::entries`] (the caller's bug: it picks the IDs).
    pub fn expect(&mut self, cid: u16, e: Expect) {
        self.cmds[usize::from(cid)] = match e {
            Expect::Nothing => Slot::Idle,
            Expect::ToHost { len } => Slot::ToHost { len, got: 0 },
            Expect::ToCtrl { len } => Slot::ToCtrl { len, asked: 0 },
        };
    }

    /// Checks the PDU at the front of `buf` (which starts at a PDU boundary).
    pub fn next<'a>(&mut self, buf: &'a [u8]) -> Result<Next<'a>, HostRxError> {
        let Some(ch) = buf.first_chunk::<CH_LEN>() else {
            return Ok(Next::NeedMore { pdu_len: CH_LEN });
        };
        let ch = CommonHeader::decode(ch);
        let dir = Direction::ControllerToHost;
        let l = PduLayout::check(&ch, dir, Some(self.neg), self.max_data)
            .map_err(HostRxError::Header)?;
        let Some(pdu) = buf.get(..l.plen) else {
            let placing = self.place_from.is_some_and(|min| l.data_len >= min);
            if placing && l.pdu_type == pdu_type::C2H_DATA {
                if buf.len() < l.pdo {
                    // Only the headers need to be in the buffer, not the data.
                    return Ok(Next::NeedMore { pdu_len: l.pdo });
                }
                return self.place(buf, &l).map(Next::Place);
            }
            return Ok(Next::NeedMore { pdu_len: l.plen });
        };
        check_header_digest(pdu, &l)?;
        let data_end = l.pdo + l.data_len;
        if l.ddgst > 0 {
            let trailer = pdu[data_end..]
                .first_chunk()
                .expect("PLEN holds the digest");
            check_data_digest(&pdu[l.pdo..data_end], trailer)?;
        }
        let header = header_of(pdu, &l)?;
        let checked = match l.pdu_type {
            pdu_type::CAPSULE_RESP => self.response(header),
            pdu_type::C2H_DATA => self.c2h_data(header, &l, pdu)?,
            pdu_type::R2T => self.r2t(header)?,
            pdu_type::C2H_TERM_REQ => {
                let (fes, fei) = TermReq::decode(header);
                return Err(HostRxError::TermReq { fes, fei });
            }
            t => return Err(HostRxError::UnexpectedType(t)),
        };
        Ok(Next::Pdu {
            pdu: checked,
            len: l.plen,
        })
    }

    fn response(&mut self, header: &[u8; DATA_HLEN]) -> HostPdu<'static> {
        let cqe = Cqe::decode(header.last_chunk::<CQE_LEN>().expect("24 = 8 + 16"));
        if let Some(s) = self.cmds.get_mut(usize::from(cqe.cid)) {
            *s = Slot::Idle;
        }
        HostPdu::Response(cqe)
    }

    /// A C2HData PDU with its header (and header digest, and PDO) in `buf` but not all of
    /// its data.
    fn place<'a>(&mut self, buf: &'a [u8], l: &PduLayout) -> Result<Placement<'a>, HostRxError> {
        check_header_digest(buf, l)?;
        let (cid, offset, success) = self.accept_c2h(header_of(buf, l)?, l)?;
        let data = &buf[l.pdo..buf.len().min(l.pdo + l.data_len)];
        Ok(Placement {
            cid,
            offset,
            len: l.data_len as u32, // <= max_data, a u32
            data,
            consumed: l.pdo + data.len(),
            digest: l.ddgst > 0,
            success,
        })
    }

    fn c2h_data<'a>(
        &mut self,
        header: &[u8; DATA_HLEN],
        l: &PduLayout,
        pdu: &'a [u8],
    ) -> Result<HostPdu<'a>, HostRxError> {
        let (cid, offset, success) = self.accept_c2h(header, l)?;
        Ok(HostPdu::C2hData {
            cid,
            offset,
            data: &pdu[l.pdo..l.pdo + l.data_len],
            success,
        })
    }

    /// Checks a C2HData header against its command and counts its data in: the command ID,
    /// the data's offset, and whether it ends the command with SUCCESS.
    fn accept_c2h(
        &mut self,
        header: &[u8; DATA_HLEN],
        l: &PduLayout,
    ) -> Result<(u16, u32, bool), HostRxError> {
        let h = DataHeader::decode(header);
        h.check(l).map_err(HostRxError::Header)?;
        let cid = h.cccid;
        let slot = self.cmds.get_mut(usize::from(cid));
        let Some(Slot::ToHost { len, got }) = slot.as_deref().copied() else {
            return Err(HostRxError::C2hForNoRead { cid });
        };
        let end = u64::from(h.datao) + u64::from(h.datal);
        if h.datao != got || end > u64::from(len) {
            return Err(HostRxError::C2hOutOfPlace {
                cid,
                datao: h.datao,
                datal: h.datal,
                got,
                len,
            });
        }
        let got = got + h.datal; // <= len: checked above
        let success = l.flags & flags::DATA_SUCCESS != 0;
        if success && got != len {
            return Err(HostRxError::SuccessEarly { cid, got, len });
        }
        if let Some(s) = slot {
            *s = if success {
                Slot::Idle
            } else {
                Slot::ToHost { len, got }
            };
        }
        Ok((cid, h.datao, success))
    }

    fn r2t(&mut self, header: &[u8; DATA_HLEN]) -> Result<HostPdu<'static>, HostRxError> {
        let r = R2t::decode(header);
        let cid = r.cccid;
        let slot = self.cmds.get_mut(usize::from(cid));
        let Some(Slot::ToCtrl { len, asked }) = slot else {
            return Err(HostRxError::R2tForNoWrite { cid });
        };
        if r.r2tl == 0 || u64::from(r.r2to) + u64::from(r.r2tl) > u64::from(*len) {
            return Err(HostRxError::R2tOutOfRange {
                cid,
                r2to: r.r2to,
                r2tl: r.r2tl,
                len: *len,
            });
        }
        if r.r2to < *asked {
            return Err(HostRxError::R2tRepeated {
                cid,
                r2to: r.r2to,
                r2tl: r.r2tl,
                asked: *asked,
            });
        }
        *asked = r.r2to + r.r2tl; // <= len: checked above
        Ok(HostPdu::R2t(r))
    }
}

/// The 24-byte header of PDU `pdu` (at least its header) laid out as `l`.
fn header_of<'a>(pdu: &'a [u8], l: &PduLayout) -> Result<&'a [u8; DATA_HLEN], HostRxError> {
    match pdu.first_chunk::<DATA_HLEN>() {
        Some(h) if l.hlen == DATA_HLEN => Ok(h),
        _ => Err(HostRxError::UnexpectedType(l.pdu_type)),
    }
}

/// Checks the header digest of PDU `pdu` (at least its header and digest) laid out as `l`.
fn check_header_digest(pdu: &[u8], l: &PduLayout) -> Result<(), HostRxError> {
    if l.hdgst == 0 {
        return Ok(());
    }
    let got = pdu[l.hlen..]
        .first_chunk::<DIGEST_LEN>()
        .expect("PDO holds the digest");
    if u32::from_le_bytes(*got) != super::digest(&pdu[..l.hlen]) {
        return Err(HostRxError::HeaderDigest);
    }
    Ok(())
}

/// Checks `data` against the data digest that followed it on the wire.
pub fn check_data_digest(data: &[u8], digest: &[u8; DIGEST_LEN]) -> Result<(), HostRxError> {
    if u32::from_le_bytes(*digest) != super::digest(data) {
        return Err(HostRxError::DataDigest);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
