//! What a queue's socket brings: the PDUs in the connection's receive buffer, each checked
//! (layout, header digest, data digest) and acted on in place: a command capsule is copied
//! into a receive slot of the queue's parcel and handed to the core; H2CData is checked
//! against the R2T it answers and its data copied into the command's data slot; the host's
//! TermReq closes the queue. A protocol error is a C2HTermReq naming the field, then close.
//!
//! **Placement** (`target.tcp_place_from` > 0, 16 KiB by default; not under TLS in user
//! space): an H2CData PDU of at least that much data whose header has come
//! and whose data has not all come is checked from its header, what came of its data is
//! copied into the command's data slot,
//! and the rest is read from the socket straight into the slot ([`Placed`]); its data digest
//! is then checked over the slot. Meanwhile the socket is read into the receive buffer
//! only [`PLACE_READ`](rdmablk::nvme::transport::tcp::place::PLACE_READ) bytes at a time, so
//! little of the next PDU's data lands there before its header says where it goes. (Tried
//! first on 2026-11-28 with workers that slept when idle: a receiver that drains the socket as
//! the data comes slept between segments and the sender paid a wake-up per segment, halving
//! 128 KiB writes at QD8; an adaptive worker spins `poll_spin_us` after each read instead;
//! `docs/tcp.md`.)

use rdmablk::nvme::transport::tcp::place::Placing;
use rdmablk::nvme::transport::tcp::{
    ack, ch_offset, digest, flags, pdu_type, CommonHeader, DataHeader, Direction, Fes, Negotiated,
    PduLayout, TermError, TermReq, CH_LEN, DATA_HLEN, DIGEST_LEN, TERM_REQ_MAX_DATA,
};
use rdmablk::nvme::{Sqe, Status, SQE_LEN};

use super::group::term_req;
use super::placed::PlacedCounters;
use super::queue::{TcpQueue, NO_R2T};
use super::{ADMIN_CAPSULE_DATA, MAXH2CDATA};
use crate::arena::pool::DataBuf;
use crate::nvmf::queue::begin_close;
use crate::nvmf::request::ReqState;
use crate::nvmf::request_flow::{execute, on_capsule, Ctx};
use crate::nvmf::Shared;

/// Reads what queue `q`'s socket has (as much as the receive buffer takes, and placed data
/// straight into its slot, counted in its worker's `placed`) and acts on every whole PDU in
/// it; a protocol error ends the queue (C2HTermReq, then close). Once `limit` bytes came it
/// reads no more (its host's share of the pass, `group/pass_share.rs`): what is left stays
/// in the kernel's socket, which the next pass hears of again; every whole PDU read is acted
/// on all the same, and a placement begun goes on at the next visit.
pub fn receive(q: &mut TcpQueue, placed: &PlacedCounters, ctx: &mut Ctx<'_>, limit: u64) {
    let before = q.xport.sock.received_bytes;
    let place_from = if q.xport.sock.can_place() {
        ctx.shared.fixed.target.tcp_place_from as usize
    } else {
        0
    };
    let mut read = true;
    let mut cut = false;
    while !q.is_closing() {
        if read && q.xport.sock.received_bytes - before >= limit {
            cut = true; // the host's share of the pass is read; the socket has more
            break;
        }
        if q.xport.placing.is_some_and(|p| p.data.left() > 0) {
            if !read || !place_more(q, placed) {
                break; // the socket is drained (or broken) with data still to come
            }
            // The placed read brought what followed into the buffer too.
            read = !q.xport.sock.drained;
        }
        if read {
            q.xport.sock.fill();
            read = !q.xport.sock.drained;
        }
        match pdus(q, place_from, placed, ctx) {
            Ok(true) => {}                         // a placement began: read its data
            Ok(false) if q.xport.sock.capped => {} // a small read stopped short of the end
            Ok(false) => break,
            Err(e) => return fatal(q, e, ctx.shared),
        }
    }
    // Bulk data came (a host streaming H2CData, or a PDU begun and not whole): acknowledge it
    // now, or a host with a small send buffer waits for our delayed ACK (`tcp::ack`).
    let got = q.xport.sock.received_bytes - before;
    let mid_pdu = !q.xport.sock.received().is_empty() || q.xport.placing.is_some();
    // A visit cut short by the host's share acknowledges what it read too: the rest waits
    // for a later pass, and the host's send buffer should not wait for it.
    if ack::wants_ack(got, mid_pdu) || (cut && got > 0) {
        q.xport.sock.ack_now();
    }
}

/// Acts on the whole PDUs in the receive buffer (first the digest of placed data, if it is
/// due); true if it stopped at an H2CData to place whose data is still to come.
fn pdus(
    q: &mut TcpQueue,
    place_from: usize,
    placed: &PlacedCounters,
    ctx: &mut Ctx<'_>,
) -> Result<bool, TermError> {
    if !placed_end(q, placed, ctx)? {
        return Ok(false);
    }
    while !q.is_closing() {
        match next_pdu(q, place_from)? {
            Some((l, whole)) => {
                if on_pdu(q, &l, whole, place_from, ctx)? {
                    return Ok(true);
                }
            }
            // TLS may hold what did not fit in the buffer (the socket will not say so).
            None if q.xport.sock.tls_backlog() && q.xport.sock.fill() => {}
            None => break,
        }
    }
    Ok(false)
}

/// An H2CData PDU whose data is being read straight into its command's data slot.
#[derive(Clone, Copy, Debug)]
pub struct Placed {
    h2c: H2c,
    pub data: Placing,
}

/// Reads what the socket has of the placed H2CData's data into its slot (counted in
/// `placed`); true once all of it is in.
fn place_more(q: &mut TcpQueue, placed: &PlacedCounters) -> bool {
    let Some(mut p) = q.xport.placing else {
        return true;
    };
    debug_assert_eq!(
        q.reqs[p.h2c.slot as usize].state,
        ReqState::AwaitingData,
        "placing into a command not in its data phase"
    );
    // SAFETY: the region is the command's data slot (`begin_placing` checked the PDU's data
    // lies in it); the command waits for this data (AwaitingData), so nothing else reads or
    // writes the slot until `h2c_end`, and a queue that closes reads its socket no more.
    let got = unsafe { q.xport.sock.read_into(p.data.rest()) };
    placed.read_into(got);
    p.data.got(got);
    q.xport.placing = Some(p);
    p.data.left() == 0
}

/// Begins placing H2CData `p` (laid out as `l`; its header, and some of its data, at the head
/// of the receive buffer): copies the data that came into the slot and consumes it. True:
/// the rest is to be read.
fn begin_placing(q: &mut TcpQueue, l: &PduLayout, p: H2c) -> Result<bool, TermError> {
    let region = p.data.region();
    if p.off
        .checked_add(p.len)
        .map_or(true, |end| end > region.len)
    {
        return Err(outside_slot());
    }
    let buf = q.xport.sock.received();
    let first = &buf[l.pdo..];
    // SAFETY: `off + len` lies in the command's data slot (checked above), which waits for
    // this data: nothing else touches it until `h2c_end`; it is arena memory, not `rx`.
    let data = unsafe { Placing::begin(region.as_ptr().add(p.off), p.len, first, l.ddgst > 0) };
    let n = buf.len();
    q.xport.sock.consume(n);
    q.xport.placing = Some(Placed { h2c: p, data });
    Ok(true)
}

/// The placed H2CData, once all its data is in: its data digest (if the connection has
/// them) checked from the head of the receive buffer, then the command goes on as for any
/// H2CData (`h2c_end`). True if no placement waits any more.
fn placed_end(
    q: &mut TcpQueue,
    placed: &PlacedCounters,
    ctx: &mut Ctx<'_>,
) -> Result<bool, TermError> {
    let Some(p) = q.xport.placing else {
        return Ok(true);
    };
    if p.data.left() > 0 {
        return Ok(false);
    }
    let data_ok = if p.data.digest {
        let Some(&trailer) = q.xport.sock.received().first_chunk::<DIGEST_LEN>() else {
            return Ok(false);
        };
        q.xport.sock.consume(DIGEST_LEN);
        // SAFETY: as in `place_more`; all of the data is in.
        unsafe { p.data.digest_matches(&trailer) }
    } else {
        true
    };
    q.xport.placing = None;
    placed.pdu_done();
    h2c_end(q, &p.h2c, data_ok, ctx)?;
    Ok(true)
}

fn outside_slot() -> TermError {
    TermError {
        fes: Fes::DataTransferOutOfRange,
        fei: 12,
        what: "H2CData outside the data slot",
    }
}

/// Reports a fatal error to the host (C2HTermReq quoting the offending header) and closes the
/// queue.
fn fatal(q: &mut TcpQueue, e: TermError, shared: &Shared) {
    tracing::warn!(peer = %q.peer, qid = q.qid, error = %e, "NVMe/TCP protocol error: terminating the connection");
    let quote = q.xport.sock.received();
    let quote = &quote[..quote.len().min(TERM_REQ_MAX_DATA)];
    let pdu = term_req(e, quote);
    q.xport.sock.discard_output();
    q.xport.sock.queue(pdu);
    q.xport.sock.flush(&mut |_| {});
    begin_close(q, "NVMe/TCP protocol error", shared);
}

/// The next whole PDU in the receive buffer, checked up to its data's digest: its layout, or
/// None if it has not all arrived. An H2CData of at least `place_from` bytes (0: none) whose
/// header is in and data is not comes as `(layout, false)`: to place.
fn next_pdu(q: &mut TcpQueue, place_from: usize) -> Result<Option<(PduLayout, bool)>, TermError> {
    let buf = q.xport.sock.received();
    if buf.len() < CH_LEN {
        return Ok(None);
    }
    let ch = CommonHeader::decode(buf[..CH_LEN].try_into().expect("8 bytes"));
    let host = Negotiated {
        pda: 0, // CPDA: what the host's PDUs to us are aligned to
        ..q.xport.neg
    };
    let max = match ch.pdu_type {
        pdu_type::CAPSULE_CMD => ADMIN_CAPSULE_DATA.max(q.icd_bytes),
        _ => MAXH2CDATA,
    };
    let layout = PduLayout::check(&ch, Direction::HostToController, Some(host), max)?;
    let whole = buf.len() >= layout.plen;
    let to_place = place_from > 0
        && layout.pdu_type == pdu_type::H2C_DATA
        && layout.data_len >= place_from
        && (layout.pdo..layout.pdo + layout.data_len).contains(&buf.len());
    if !whole && !to_place {
        return Ok(None);
    }
    check_header_digest(buf, &layout)?;
    Ok(Some((layout, whole)))
}

/// The header digest of the whole PDU at the head of `buf` (laid out as `layout`), if the
/// connection negotiated one: a mismatch is fatal (FES 3).
pub(super) fn check_header_digest(buf: &[u8], layout: &PduLayout) -> Result<(), TermError> {
    if layout.hdgst > 0 {
        let want = digest(&buf[..layout.hlen]);
        let got = u32::from_le_bytes(buf[layout.hlen..layout.hlen + 4].try_into().expect("4"));
        if want != got {
            return Err(TermError {
                fes: Fes::HeaderDigestError,
                fei: 0,
                what: "header digest mismatch",
            });
        }
    }
    Ok(())
}

/// Acts on the PDU at the head of the receive buffer, and consumes it: a whole one, or
/// (`!whole`) an H2CData to place. True: a placement began (its data is to be read).
fn on_pdu(
    q: &mut TcpQueue,
    l: &PduLayout,
    whole: bool,
    place_from: usize,
    ctx: &mut Ctx<'_>,
) -> Result<bool, TermError> {
    if !whole {
        let p = h2c_accept(q, l)?;
        q.xport.sock.read_small(true);
        return begin_placing(q, l, p);
    }
    let data_ok = {
        let buf = q.xport.sock.received();
        l.ddgst == 0 || {
            let data = &buf[l.pdo..l.pdo + l.data_len];
            let got = u32::from_le_bytes(
                buf[l.pdo + l.data_len..l.pdo + l.data_len + DIGEST_LEN]
                    .try_into()
                    .expect("4"),
            );
            digest(data) == got
        }
    };
    match l.pdu_type {
        pdu_type::CAPSULE_CMD => {
            let Some(recv) = q.xport.free_recv.pop() else {
                return Err(TermError {
                    fes: Fes::PduSequenceError,
                    fei: 0,
                    what: "a command beyond the queue's size",
                });
            };
            let len = SQE_LEN + l.data_len;
            let region = q.parcel.recv_slot(recv);
            assert!(
                len <= region.len,
                "capsule slots hold the largest capsule accepted"
            );
            let buf = q.xport.sock.received();
            // SAFETY: the receive slot lies in this queue's parcel and is free (just taken
            // from the free list); the source is our receive buffer; they cannot overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(buf[CH_LEN..].as_ptr(), region.as_ptr(), SQE_LEN);
                if l.data_len > 0 && data_ok {
                    std::ptr::copy_nonoverlapping(
                        buf[l.pdo..].as_ptr(),
                        region.as_ptr().add(SQE_LEN),
                        l.data_len,
                    );
                }
            }
            if !data_ok {
                // The data is bad, not the PDU: the command completes with Transient Transport
                // Error without running (`capsule_status`), and the connection stays.
                let sqe = Sqe::decode(buf[CH_LEN..CH_LEN + SQE_LEN].try_into().expect("64"));
                data_digest_mismatch(q, sqe.cid);
                q.xport.damaged[recv as usize] = true;
            }
            q.xport.sock.consume(l.plen);
            if l.data_len > 0 {
                q.xport.sock.read_small(false); // small writes: read all there is
            }
            on_capsule(q, recv, len as u32, ctx);
            Ok(false)
        }
        pdu_type::H2C_DATA => {
            let p = h2c_accept(q, l)?;
            if data_ok && q.reqs[p.slot as usize].status.is_success() {
                let buf = q.xport.sock.received();
                let data = &buf[l.pdo..l.pdo + l.data_len];
                if q.write_data(p.data, p.off, data).is_err() {
                    return Err(outside_slot());
                }
            }
            q.xport.sock.consume(l.plen);
            q.xport
                .sock
                .read_small(place_from > 0 && l.data_len >= place_from);
            h2c_end(q, &p, data_ok, ctx).map(|()| false)
        }
        pdu_type::H2C_TERM_REQ => {
            let buf = q.xport.sock.received();
            let (fes, fei) = TermReq::decode(buf[..DATA_HLEN].try_into().expect("24 bytes"));
            tracing::warn!(peer = %q.peer, qid = q.qid, ?fes, fei, "the host terminated the connection (H2CTermReq)");
            let len = l.plen;
            q.xport.sock.consume(len);
            begin_close(q, "the host sent a TermReq", ctx.shared);
            Ok(false)
        }
        _ => Err(TermError {
            fes: Fes::InvalidHeaderField,
            fei: ch_offset::TYPE,
            what: "PDU type not expected on a queue",
        }),
    }
}

/// Checks the H2CData at the head of the receive buffer (`l`) against the R2T it answers;
/// where its data goes. Consumes nothing.
fn h2c_accept(q: &TcpQueue, l: &PduLayout) -> Result<H2c, TermError> {
    let buf = q.xport.sock.received();
    let h = DataHeader::decode(buf[..DATA_HLEN].try_into().expect("24 bytes"));
    h.check(l)?;
    let slot = u32::from(h.ttag);
    let out_of_range = |fei, what| TermError {
        fes: Fes::DataTransferOutOfRange,
        fei,
        what,
    };
    let got = q
        .xport
        .h2c_got
        .get(slot as usize)
        .copied()
        .unwrap_or(NO_R2T);
    let r = q.reqs.get(slot as usize);
    let Some(r) = r.filter(|r| got != NO_R2T && r.state == ReqState::AwaitingData) else {
        return Err(out_of_range(10, "H2CData for no R2T outstanding"));
    };
    if r.sqe.cid != h.cccid {
        return Err(out_of_range(8, "H2CData command ID is not the R2T's"));
    }
    if h.datao != got {
        return Err(out_of_range(
            12,
            "H2CData offset is not where the data stands",
        ));
    }
    let end = u64::from(h.datao) + u64::from(h.datal);
    if end > u64::from(r.data_len) {
        return Err(out_of_range(16, "H2CData beyond the command's data"));
    }
    // Checked here, before the PDU is consumed, so that the C2HTermReq quotes it.
    if end == u64::from(r.data_len) && l.flags & flags::DATA_LAST == 0 {
        return Err(TermError {
            fes: Fes::InvalidHeaderField,
            fei: ch_offset::FLAGS,
            what: "the last H2CData of a command without LAST",
        });
    }
    Ok(H2c {
        slot,
        cid: h.cccid,
        data: r.data,
        off: h.datao as usize,
        len: h.datal as usize,
    })
}

/// An H2CData PDU checked against its R2T: whose data it is and where it goes.
#[derive(Clone, Copy, Debug)]
struct H2c {
    /// The request slot of the command (its R2T's transfer tag).
    slot: u32,
    cid: u16,
    /// The command's data buffer.
    data: DataBuf,
    /// Where in the slot this PDU's data goes (its DATAO), and its length (DATAL).
    off: usize,
    len: usize,
}

/// The H2CData `p` was taken (`data_ok`: its data digest matched, or there was none): the
/// command's data stands further on, and once all of it is in the command runs.
fn h2c_end(q: &mut TcpQueue, p: &H2c, data_ok: bool, ctx: &mut Ctx<'_>) -> Result<(), TermError> {
    let slot = p.slot as usize;
    if !data_ok && q.reqs[slot].status.is_success() {
        // The data is bad, not the PDU: the rest of the command's data is taken and dropped,
        // and the command completes with Transient Transport Error without running once its
        // data phase ends (`execute`); the connection stays.
        data_digest_mismatch(q, p.cid);
        q.reqs[slot].fail(Status::TRANSIENT_TRANSPORT_ERROR);
    }
    let got = (p.off + p.len) as u32;
    if got == q.reqs[slot].data_len {
        q.xport.h2c_got[slot] = NO_R2T;
        execute(q, p.slot, ctx);
    } else {
        q.xport.h2c_got[slot] = got;
    }
    Ok(())
}

/// A data digest that did not match, for command `cid`: a transient error of the link (SPDK's
/// choice; the specification has no FES for it, and nvmet closes the connection).
fn data_digest_mismatch(q: &TcpQueue, cid: u16) {
    tracing::warn!(peer = %q.peer, qid = q.qid, cid,
        "NVMe/TCP data digest mismatch: the command completes with Transient Transport Error");
}
