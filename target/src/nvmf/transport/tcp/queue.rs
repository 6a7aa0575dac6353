//! The NVMe/TCP transport's state of one queue, and its [`QueueTransport`] implementation:
//! capsules copied from the socket into the queue's receive slots, data pointers mapped
//! (in-capsule data, or the Transport SGL Data Block fetched by R2T and H2CData), responses
//! sent as C2HData (from the arena, no copy) and CapsuleResp PDUs.
//!
//! # Teardown and the parcel's memory
//! Queued PDUs may name the parcel's data slots (C2HData is written straight from them).
//! The socket is the only way anything reaches the parcel: [`QueueTransport::disconnect`]
//! shuts it down and drops every queued PDU, so when the queue drops its parcel nothing names
//! it any more. There is nothing to revoke first.

use std::time::Duration;

use rdmablk::nvme::opcodes;
use rdmablk::nvme::transport::tcp::{
    digest, encode_capsule_resp, flags, pdu_type, DataHeader, Negotiated, R2t, CAPSULE_RESP_HLEN,
    DATA_HLEN, DIGEST_LEN,
};
use rdmablk::nvme::{Cqe, Sgl, SglLimits, Sqe, Status};

use super::receive::Placed;
use super::socket::{Socket, TxPdu, TX_HEADER_BYTES};
use super::ADMIN_CAPSULE_DATA;
use crate::nvmf::commands::data_phase::{check_sgl, Next, SglFit};
use crate::nvmf::queue::{Queue, SendWatch};
use crate::nvmf::request::{DataDir, ReqState};
use crate::nvmf::transport::QueueTransport;
use crate::nvmf::Shared;

/// A queue served over NVMe/TCP.
pub type TcpQueue = Queue<TcpXport>;

/// No R2T outstanding for the request.
pub const NO_R2T: u32 = u32::MAX;

/// The NVMe/TCP state of one queue.
pub struct TcpXport {
    pub sock: Socket,
    /// What the connection negotiated for the PDUs this side sends (the host's digests and
    /// its HPDA).
    pub neg: Negotiated,
    /// Receive slots free for the next capsule.
    pub free_recv: Vec<u32>,
    /// Per receive slot: its capsule's in-capsule data failed its data digest (the command
    /// completes with Transient Transport Error and does not run).
    pub damaged: Box<[bool]>,
    /// Per request slot: H2C data bytes received for its R2T, or [`NO_R2T`].
    pub h2c_got: Box<[u32]>,
    /// The H2CData being read straight into its command's data slot (`receive.rs`); once its
    /// data is in, its digest (if any) is the next thing on the stream.
    pub placing: Option<Placed>,
    /// Request slots whose last PDU was written: the core hears of them at the next poll.
    pub sent: Vec<u32>,
    /// Bytes sent unchanged with output waiting: the host stopped reading.
    pub send_watch: SendWatch,
    /// The socket is in the epoll set for writability too (its output did not all fit).
    pub epollout: bool,
}

impl TcpXport {
    pub fn new(sock: Socket, neg: Negotiated, depth: u32) -> TcpXport {
        TcpXport {
            sock,
            neg,
            free_recv: (0..depth).rev().collect(),
            damaged: vec![false; depth as usize].into_boxed_slice(),
            h2c_got: vec![NO_R2T; depth as usize].into_boxed_slice(),
            placing: None,
            sent: Vec::with_capacity(depth as usize),
            send_watch: SendWatch::default(),
            epollout: false,
        }
    }
}

/// In-capsule data a command may carry on `q`: up to 8 KiB for admin and fabrics commands
/// (the Linux host sends the 1 KiB Connect data in the capsule on I/O queues too), IOCCSZ's
/// worth for I/O commands.
fn capsule_data_limit(q: &TcpQueue, sqe: &Sqe) -> u32 {
    if q.qid == 0 || sqe.opcode == opcodes::FABRICS {
        ADMIN_CAPSULE_DATA
    } else {
        q.icd_bytes
    }
}

/// Writes a PDU header of `len` bytes with `fill`, adds its header digest if negotiated and
/// pads it to `pdo`; returns the PDU to queue (data and its digest still to add).
fn head(len: usize, pdo: usize, hdgst: bool, fill: impl FnOnce(&mut [u8])) -> TxPdu {
    let mut pdu = TxPdu {
        head: [0u8; TX_HEADER_BYTES],
        head_len: 0,
        data: None,
        ddgst: None,
        completes: None,
    };
    fill(&mut pdu.head[..len]);
    let mut end = len;
    if hdgst {
        let d = digest(&pdu.head[..len]);
        pdu.head[len..len + DIGEST_LEN].copy_from_slice(&d.to_le_bytes());
        end += DIGEST_LEN;
    }
    pdu.head_len = end.max(pdo) as u16;
    pdu
}

/// A CapsuleResp PDU carrying `cqe`.
pub(super) fn capsule_resp(cqe: &Cqe, hdgst: bool) -> TxPdu {
    head(CAPSULE_RESP_HLEN, 0, hdgst, |b| {
        let b: &mut [u8; CAPSULE_RESP_HLEN] = b.try_into().expect("24-byte header");
        encode_capsule_resp(cqe, hdgst, b);
    })
}

impl QueueTransport for TcpXport {
    type Error = String;
    type Outstanding = usize;

    /// Data moves in the transport's own PDUs (R2T, H2CData, C2HData).
    const KEYED_SGLS: bool = false;
    const REVOKE_TIMEOUT: Duration = Duration::from_secs(1);
    const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

    fn release_capsule(q: &mut TcpQueue, recv: u32) -> Result<(), String> {
        debug_assert!(
            !q.xport.damaged[recv as usize],
            "damaged capsule {recv} not seen"
        );
        q.xport.free_recv.push(recv);
        Ok(())
    }

    /// A capsule whose data digest did not match: the data is bad, not the PDU's framing (the
    /// specification has no FES for it), so the connection stays and the command completes
    /// with Transient Transport Error, which the host retries (SPDK does the same; nvmet
    /// closes the connection).
    fn capsule_status(q: &mut TcpQueue, recv: u32) -> Result<(), Status> {
        if std::mem::take(&mut q.xport.damaged[recv as usize]) {
            return Err(Status::TRANSIENT_TRANSPORT_ERROR);
        }
        Ok(())
    }

    fn map_data(
        q: &mut TcpQueue,
        slot: u32,
        dir: DataDir,
        len: u32,
        fit: SglFit,
        shared: &Shared,
    ) -> Result<Next, Status> {
        if dir == DataDir::None {
            // The Linux host describes no data with a transport data block of length 0.
            return Ok(Next::Execute);
        }
        let sqe = q.reqs[slot as usize].sqe;
        let limits = SglLimits {
            in_capsule_bytes: capsule_data_limit(q, &sqe),
            max_transfer_bytes: shared.fixed.limits.max_io_size,
        };
        // Keyed SGLs are NVMe/RDMA's (nvmet-tcp answers them as an unknown type too).
        let foreign = |s: &Sgl| matches!(s, Sgl::Keyed(_));
        let sgl = check_sgl(q, slot, dir, len, fit, &limits, foreign)?;
        let next = match sgl {
            Sgl::Transport(_) if dir == DataDir::HostToController => Next::Fetch,
            _ => Next::Execute, // in-capsule data is in the data slot now
        };
        let r = &mut q.reqs[slot as usize];
        (r.dir, r.data_len) = (dir, len);
        Ok(next)
    }

    /// Sends one R2T for the whole data (the host splits its H2CData at MAXH2CDATA); the
    /// transfer tag is the request slot.
    fn fetch(q: &mut TcpQueue, slot: u32, _shared: &Shared) {
        debug_assert_eq!(q.reqs[slot as usize].state, ReqState::AwaitingData);
        let r = &q.reqs[slot as usize];
        let r2t = R2t {
            cccid: r.sqe.cid,
            ttag: slot as u16,
            r2to: 0,
            r2tl: r.data_len,
        };
        let hdgst = q.xport.neg.hdgst;
        let pdu = head(DATA_HLEN, 0, hdgst, |b| {
            let b: &mut [u8; DATA_HLEN] = b.try_into().expect("24-byte header");
            r2t.encode(hdgst, b);
        });
        q.xport.h2c_got[slot as usize] = 0;
        q.xport.sock.queue(pdu);
    }

    /// Controller-to-host data as one C2HData PDU straight from the data slot, then the
    /// CapsuleResp; with SQ flow control disabled, a successful read's C2HData carries
    /// SUCCESS and no CapsuleResp follows (as nvmet does).
    fn post_response(q: &mut TcpQueue, slot: u32) -> Result<(), String> {
        let r = q.reqs[slot as usize];
        let neg = q.xport.neg;
        let with_data =
            r.status.is_success() && r.dir == DataDir::ControllerToHost && r.data_len > 0;
        let skip_resp = with_data && q.sqhd_disabled;
        if with_data {
            let region = r.data.region();
            let len = r.data_len as usize;
            assert!(len <= region.len, "data phase longer than its slot");
            let mut f = flags::DATA_LAST;
            if skip_resp {
                f |= flags::DATA_SUCCESS;
            }
            let hdr = DataHeader {
                cccid: r.sqe.cid,
                ttag: 0,
                datao: 0,
                datal: r.data_len,
            };
            let mut layout = None;
            let mut pdu = head(DATA_HLEN, neg.pdo(DATA_HLEN), false, |b| {
                let b: &mut [u8; DATA_HLEN] = b.try_into().expect("24-byte header");
                layout = Some(hdr.encode(pdu_type::C2H_DATA, f, &neg, b));
            });
            if neg.hdgst {
                let d = digest(&pdu.head[..DATA_HLEN]);
                pdu.head[DATA_HLEN..DATA_HLEN + DIGEST_LEN].copy_from_slice(&d.to_le_bytes());
            }
            let layout = layout.expect("encoded");
            pdu.head_len = layout.pdo as u16;
            pdu.data = Some((region.as_ptr().cast_const(), len));
            if neg.ddgst {
                // SAFETY: the data slot lies in this queue's parcel; the request's data is in
                // place and nothing writes the slot until the request is free again.
                let data = unsafe { std::slice::from_raw_parts(region.as_ptr(), len) };
                pdu.ddgst = Some(digest(data).to_le_bytes());
            }
            if skip_resp {
                pdu.completes = Some(slot);
            }
            q.xport.sock.queue(pdu);
        }
        if !skip_resp {
            let mut cqe = Cqe::error(r.sqe.cid, q.qid, q.sqhd(), r.status);
            cqe.dw0 = r.dw0;
            cqe.dw1 = r.dw1;
            let mut pdu = capsule_resp(&cqe, neg.hdgst);
            pdu.completes = Some(slot);
            q.xport.sock.queue(pdu);
        }
        Ok(())
    }

    fn disconnect(q: &mut TcpQueue) {
        let _ = q.xport.sock.stream.shutdown(std::net::Shutdown::Both);
        q.xport.sock.discard_output();
        q.xport.sock.broken.get_or_insert_with(|| "closed".into());
    }

    fn drained(q: &TcpQueue) -> bool {
        !q.xport.sock.has_output()
    }

    fn outstanding(q: &TcpQueue) -> usize {
        q.xport.sock.queued()
    }

    fn send_stalled(q: &mut TcpQueue, limit_ms: u32) -> bool {
        let x = &mut q.xport;
        x.send_watch
            .stalled(x.sock.has_output(), x.sock.sent_bytes, limit_ms)
    }
}
