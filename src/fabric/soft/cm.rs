//! Connection management over TCP: listening, connect requests, accept / reject, and the
//! active side's connect. One TCP connection carries one QP.
//!
//! ```text
//! active                                   passive
//!   TCP connect ─────────────────────────>  Listener thread: TCP accept (`handshake`)
//!   CONNECT_REQ(private data, depths) ───>  Listener::get_request -> ConnRequest
//!                                           create_qp, post receives, Qp::accept
//!   connect() returns  <──────────────────  ACCEPT(private data, negotiated depths)
//!   RTU ─────────────────────────────────>  CmEvent::Established
//!                      or <───────────────  REJECT(private data) -> FabricError::Rejected
//! ```

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::RawFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::fabric::{
    check_private_data, ConnParam, FabricError, QpInit, Result, MAX_CONNECT_PRIVATE_DATA,
    MAX_REJECT_PRIVATE_DATA,
};

use super::device::{Device, MAX_RD_ATOM};
use super::event::{EventFd, EventQueue};
use super::handshake::{AcceptLoop, HandshakeLimits};
use super::qp::{ConnState, Qp};
use super::wire::{CmBody, Header, Opcode, CM_FIXED_LEN, HEADER_LEN};

/// A write that makes no progress for this long means the peer is gone (like RC's transport
/// retry timeout).
pub(super) const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest CM frame body.
pub(super) const CM_BODY_MAX: usize = CM_FIXED_LEN + 196;

/// What the active side offered in its connect request.
#[derive(Clone, Copy, Debug)]
pub(super) struct Offer {
    pub initiator_depth: u8,
    pub responder_resources: u8,
    pub max_send_wr: u32,
}

/// Writes one CM frame.
pub(super) fn write_cm(mut stream: &TcpStream, op: Opcode, body: &CmBody<'_>) -> Result<()> {
    let mut out = Vec::with_capacity(HEADER_LEN + CM_BODY_MAX);
    body.encode_frame(op, &mut out);
    stream
        .write_all(&out)
        .map_err(|e| FabricError::os("soft CM write", e))
}

/// A CM frame read from the peer: its opcode and body bytes.
struct CmFrame {
    op: Opcode,
    body: Vec<u8>,
}

/// Reads one CM frame, waiting until `deadline`.
fn read_cm(mut stream: &TcpStream, deadline: Instant, what: &'static str) -> Result<CmFrame> {
    let timeout = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            FabricError::Timeout { op: what, ms: 0 }
        }
        _ => FabricError::os(what, e),
    };
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(FabricError::Timeout { op: what, ms: 0 });
    }
    stream
        .set_read_timeout(Some(left))
        .map_err(|e| FabricError::os("set socket timeout", e))?;
    let mut hb = [0u8; HEADER_LEN];
    stream.read_exact(&mut hb).map_err(timeout)?;
    let h = Header::decode(&hb).map_err(|e| protocol(what, e.to_string()))?;
    if !matches!(h.op, Opcode::ConnectReq | Opcode::Accept | Opcode::Reject) {
        return Err(protocol(
            what,
            format!("{:?} frame during connection setup", h.op),
        ));
    }
    // Header::decode bounded the length by the opcode's limit (at most CM_BODY_MAX).
    let mut body = vec![0u8; h.length as usize];
    stream.read_exact(&mut body).map_err(timeout)?;
    stream
        .set_read_timeout(None)
        .map_err(|e| FabricError::os("set socket timeout", e))?;
    Ok(CmFrame { op: h.op, body })
}

fn protocol(what: &'static str, why: String) -> FabricError {
    FabricError::UnexpectedEvent {
        op: what,
        event: why,
    }
}

fn configure(stream: &TcpStream) -> Result<()> {
    stream
        .set_nodelay(true)
        .and_then(|_| stream.set_write_timeout(Some(WRITE_TIMEOUT)))
        .map_err(|e| FabricError::os("configure soft QP socket", e))
}

fn reject_body(private_data: &[u8]) -> CmBody<'_> {
    CmBody {
        initiator_depth: 0,
        responder_resources: 0,
        qpn: 0,
        max_send_wr: 0,
        private_data,
    }
}

/// A passive endpoint: a TCP listener and a thread that turns connections into requests
/// (see [`super::handshake`] for how it keeps a silent connection from delaying the others).
pub struct Listener {
    local: SocketAddr,
    requests: Arc<EventQueue<ConnRequest>>,
    stop: Arc<EventFd>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    pub(super) fn bind(dev: Device, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        Listener::bind_with(dev, addr, backlog, HandshakeLimits::default())
    }

    /// [`Listener::bind`] with other handshake limits (tests use short ones).
    pub(super) fn bind_with(
        dev: Device,
        addr: SocketAddr,
        backlog: u32,
        limits: HandshakeLimits,
    ) -> Result<Listener> {
        let l = TcpListener::bind(addr).map_err(|e| FabricError::os("soft listen (bind)", e))?;
        l.set_nonblocking(true)
            .map_err(|e| FabricError::os("soft listen", e))?;
        let local = l
            .local_addr()
            .map_err(|e| FabricError::os("soft listen", e))?;
        let requests = Arc::new(EventQueue::new()?);
        let stop = Arc::new(EventFd::new(false)?);
        let accept = AcceptLoop {
            dev,
            listener: l,
            requests: requests.clone(),
            stop: stop.clone(),
            backlog: backlog.max(1) as usize,
            limits,
        };
        let thread = std::thread::Builder::new()
            .name(format!("soft-lsn-{}", local.port()))
            .spawn(move || accept.run())
            .map_err(|e| FabricError::os("spawn soft listener thread", e))?;
        Ok(Listener {
            local,
            requests,
            stop,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn get_request(&self, timeout: Option<Duration>) -> Result<Option<ConnRequest>> {
        self.requests.pop(timeout)
    }

    pub fn fd(&self) -> RawFd {
        self.requests.fd()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        drop(self.requests.drain()); // each pending request rejects itself
    }
}

/// An incoming connection waiting for accept or reject.
pub struct ConnRequest {
    dev: Device,
    stream: Option<TcpStream>,
    peer: SocketAddr,
    private_data: Vec<u8>,
    offer: Offer,
}

impl ConnRequest {
    /// A request from a CONNECT_REQ body read off `stream` (non-blocking until now).
    pub(super) fn from_frame(
        dev: &Device,
        stream: TcpStream,
        peer: SocketAddr,
        body: &[u8],
    ) -> Result<ConnRequest> {
        let what = "soft connect request";
        let body = CmBody::decode(body).map_err(|e| protocol(what, e.to_string()))?;
        stream
            .set_nonblocking(false)
            .map_err(|e| FabricError::os("soft accept", e))?;
        configure(&stream)?;
        Ok(ConnRequest {
            dev: dev.clone(),
            stream: Some(stream),
            peer,
            private_data: body.private_data.to_vec(),
            offer: Offer {
                initiator_depth: body.initiator_depth,
                responder_resources: body.responder_resources,
                max_send_wr: body.max_send_wr,
            },
        })
    }

    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
    pub fn initiator_depth(&self) -> u8 {
        self.offer.initiator_depth
    }
    pub fn responder_resources(&self) -> u8 {
        self.offer.responder_resources
    }
    pub fn device(&self) -> Device {
        self.dev.clone()
    }

    pub fn create_qp(mut self, init: &QpInit<'_>) -> Result<Qp> {
        let stream = self.stream.take().ok_or(FabricError::NotConnected)?;
        Qp::new(init, stream, ConnState::AwaitingAccept, Some(self.offer))
    }

    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        check_private_data(private_data.len(), MAX_REJECT_PRIVATE_DATA, "reject")?;
        let stream = self.stream.take().ok_or(FabricError::NotConnected)?;
        let r = write_cm(&stream, Opcode::Reject, &reject_body(private_data));
        let _ = stream.shutdown(Shutdown::Write);
        r
    }
}

impl Drop for ConnRequest {
    fn drop(&mut self) {
        if let Some(s) = self.stream.take() {
            let _ = write_cm(&s, Opcode::Reject, &reject_body(&[]));
            let _ = s.shutdown(Shutdown::Write);
        }
    }
}

/// A destination for an active connection.
pub struct Resolved {
    addr: SocketAddr,
    dev: Device,
}

impl Resolved {
    /// The soft provider needs no route: it only records the address.
    pub fn resolve(addr: SocketAddr, _timeout: Duration) -> Result<Resolved> {
        Ok(Resolved {
            addr,
            dev: Device::open(None)?,
        })
    }

    pub fn device(&self) -> Device {
        self.dev.clone()
    }

    pub fn connect(
        self,
        init: &QpInit<'_>,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<(Qp, Vec<u8>)> {
        check_private_data(
            param.private_data.len(),
            MAX_CONNECT_PRIVATE_DATA,
            "connect",
        )?;
        let addr = self.addr;
        let deadline = Instant::now() + timeout;
        let stream =
            TcpStream::connect_timeout(&addr, timeout).map_err(|e| FabricError::Unreachable {
                addr,
                reason: e.to_string(),
            })?;
        configure(&stream)?;
        let qp = Qp::new(init, stream, ConnState::AwaitingAccept, None)?;
        let cap = MAX_RD_ATOM.min(u8::MAX as u32) as u8;
        let body = CmBody {
            initiator_depth: param.initiator_depth.min(cap),
            responder_resources: param.responder_resources.min(cap),
            qpn: qp.qp_num(),
            max_send_wr: qp.caps().max_send_wr,
            private_data: &param.private_data,
        };
        let s = qp.stream();
        write_cm(s, Opcode::ConnectReq, &body)?;
        let f = read_cm(s, deadline, "soft connect").map_err(|e| match e {
            FabricError::Timeout { op, .. } => FabricError::Timeout {
                op,
                ms: timeout.as_millis() as u64,
            },
            FabricError::Os { source, .. }
                if source.kind() == std::io::ErrorKind::UnexpectedEof =>
            {
                FabricError::Unreachable {
                    addr,
                    reason: "the peer closed the connection without answering".into(),
                }
            }
            e => e,
        })?;
        let body = CmBody::decode(&f.body).map_err(|e| protocol("soft connect", e.to_string()))?;
        match f.op {
            Opcode::Reject => Err(FabricError::Rejected {
                addr,
                private_data: body.private_data.to_vec(),
            }),
            Opcode::Accept => {
                let private_data = body.private_data.to_vec();
                let mut rtu = Vec::with_capacity(HEADER_LEN);
                rtu.extend_from_slice(&Header::new(Opcode::Rtu, 0, qp.qp_num()).encode());
                let mut w = s;
                w.write_all(&rtu)
                    .map_err(|e| FabricError::os("soft connect (RTU)", e))?;
                // The passive side computed both directions; ours are its mirror image.
                qp.start(
                    body.responder_resources,
                    body.initiator_depth,
                    param.rnr_retry_count,
                    body.max_send_wr,
                )?;
                Ok((qp, private_data))
            }
            other => Err(protocol("soft connect", format!("{other:?} frame"))),
        }
    }
}
