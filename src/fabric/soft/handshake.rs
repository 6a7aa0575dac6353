//! The listener thread: accepts TCP connections and reads each one's CONNECT_REQ without letting
//! one connection hold up another.
//!
//! Accepted sockets are non-blocking and polled together with the listening socket; each keeps
//! its partly read frame and a deadline. A peer that connects and says nothing (a port scanner,
//! a stalled client, a flood) therefore costs the others nothing: it is closed at its deadline,
//! or earlier when the table of pending handshakes is full and a newer connection needs its slot
//! (the oldest goes first, so a flood cannot shut real clients out; they send CONNECT_REQ at
//! once). Issue #15: the listener used to read each CONNECT_REQ synchronously, so one silent
//! peer delayed every other connect by up to 5 s.
//!
//! ```text
//!            poll: listening socket, stop eventfd, every pending socket
//!   accept ──> Pending { header bytes ... body bytes, deadline } ──> ConnRequest ──> queue
//!                 │ deadline passed, EOF, bad frame, evicted: closed (logged)
//! ```

use std::collections::VecDeque;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::fabric::{FabricError, Result};

use super::cm::{ConnRequest, CM_BODY_MAX};
use super::device::Device;
use super::event::{EventFd, EventQueue};
use super::wire::{Header, Opcode, HEADER_LEN};

/// Limits on connections that have not sent their CONNECT_REQ yet.
#[derive(Clone, Copy, Debug)]
pub(super) struct HandshakeLimits {
    /// How long a new TCP connection may take to send its whole CONNECT_REQ.
    pub timeout: Duration,
    /// Connections waiting for their CONNECT_REQ at once; beyond it the oldest is closed.
    pub max_pending: usize,
}

impl Default for HandshakeLimits {
    fn default() -> HandshakeLimits {
        HandshakeLimits {
            timeout: Duration::from_secs(5),
            // Each costs one descriptor and a few hundred bytes.
            max_pending: 256,
        }
    }
}

/// After `accept` fails for lack of descriptors, stop accepting for this long (the listening
/// socket stays readable, so polling it would spin).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// At most one "evicted" warning per this interval (a flood must not flood the log too).
const EVICT_LOG_INTERVAL: Duration = Duration::from_secs(1);

/// A TCP connection whose CONNECT_REQ has not fully arrived.
struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    deadline: Instant,
    frame: [u8; HEADER_LEN + CM_BODY_MAX],
    /// Bytes of `frame` read so far.
    got: usize,
    /// Bytes of the whole frame: `HEADER_LEN` until the header is in, then header + body.
    need: usize,
}

/// What reading a pending connection came to.
enum Step {
    /// The frame is not complete; wait for more.
    Waiting,
    /// The whole CONNECT_REQ is in.
    Complete,
    /// The peer closed without sending a byte (a port probe or health check).
    Closed,
    /// The peer closed mid-frame, or sent something other than a connect request.
    Failed(FabricError),
}

impl Pending {
    fn new(stream: TcpStream, peer: SocketAddr, deadline: Instant) -> Pending {
        Pending {
            stream,
            peer,
            deadline,
            frame: [0; HEADER_LEN + CM_BODY_MAX],
            got: 0,
            need: HEADER_LEN,
        }
    }

    /// Reads what has arrived, never past the end of the CONNECT_REQ (nothing else may follow
    /// it before our ACCEPT, and what follows belongs to the QP).
    fn read(&mut self) -> Step {
        loop {
            match (&self.stream).read(&mut self.frame[self.got..self.need]) {
                Ok(0) if self.got == 0 => return Step::Closed,
                Ok(0) => return Step::Failed(protocol("the peer closed mid-frame")),
                Ok(n) => self.got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Step::Waiting,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Step::Failed(FabricError::os("soft connect request", e)),
            }
            if self.got < self.need {
                continue;
            }
            if self.need > HEADER_LEN {
                return Step::Complete;
            }
            let mut hb = [0u8; HEADER_LEN];
            hb.copy_from_slice(&self.frame[..HEADER_LEN]);
            let h = match Header::decode(&hb) {
                Ok(h) => h,
                Err(e) => return Step::Failed(protocol(&e.to_string())),
            };
            if h.op != Opcode::ConnectReq {
                return Step::Failed(protocol(&format!("{:?} frame", h.op)));
            }
            // Header::decode bounded the length by the opcode's limit; check it fits anyway.
            let need = HEADER_LEN.saturating_add(h.length as usize);
            if need > self.frame.len() {
                return Step::Failed(protocol(&format!("{} byte body", h.length)));
            }
            self.need = need;
            if self.got == self.need {
                return Step::Complete; // an empty body; CmBody::decode refuses it
            }
        }
    }
}

fn protocol(why: &str) -> FabricError {
    FabricError::UnexpectedEvent {
        op: "soft connect request",
        event: why.to_string(),
    }
}

/// Counts evictions and warns about them at most once per [`EVICT_LOG_INTERVAL`].
#[derive(Default)]
struct EvictLog {
    unreported: u64,
    last_warn: Option<Instant>,
}

impl EvictLog {
    fn evicted(&mut self, peer: SocketAddr, max_pending: usize) {
        self.unreported += 1;
        tracing::debug!(%peer, "soft listener: handshake table full, closed the oldest");
        let now = Instant::now();
        let due = match self.last_warn {
            None => true,
            Some(t) => now.duration_since(t) >= EVICT_LOG_INTERVAL,
        };
        if due {
            tracing::warn!(
                evicted = self.unreported,
                max_pending,
                "soft listener: too many connections without a connect request; \
                 closed the oldest (a client flooding the port?)"
            );
            self.unreported = 0;
            self.last_warn = Some(now);
        }
    }
}

/// The listener thread's state.
pub(super) struct AcceptLoop {
    pub dev: Device,
    pub listener: TcpListener,
    pub requests: Arc<EventQueue<ConnRequest>>,
    pub stop: Arc<EventFd>,
    pub backlog: usize,
    pub limits: HandshakeLimits,
}

impl AcceptLoop {
    /// Runs until `stop` is notified or polling fails.
    pub fn run(self) {
        assert!(self.limits.max_pending > 0);
        // Oldest first: accept order is deadline order.
        let mut pending: VecDeque<Pending> = VecDeque::with_capacity(self.limits.max_pending);
        let mut pfds: Vec<libc::pollfd> = Vec::with_capacity(self.limits.max_pending + 2);
        let mut evict_log = EvictLog::default();
        let mut backoff_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if backoff_until.is_some_and(|t| now >= t) {
                backoff_until = None;
            }
            let listening = if backoff_until.is_none() {
                self.listener.as_raw_fd()
            } else {
                -1 // poll ignores negative descriptors
            };
            let wake = pending.front().map(|p| p.deadline).into_iter();
            let wake = wake.chain(backoff_until).min();
            let fds = [self.stop.fd(), listening];
            let fds = fds
                .into_iter()
                .chain(pending.iter().map(|p| p.stream.as_raw_fd()));
            let ready = match poll(&mut pfds, fds, wake) {
                Ok(()) => &pfds,
                Err(e) => {
                    tracing::error!(error = %e, "soft listener: poll failed; listener stopped");
                    return;
                }
            };
            if ready[0].revents != 0 {
                return;
            }
            let readable: Vec<bool> = ready[2..].iter().map(|p| p.revents != 0).collect();
            let accept_now = ready[1].revents != 0;
            self.progress(&mut pending, &readable);
            if accept_now {
                backoff_until = self.accept(&mut pending, &mut evict_log);
            }
        }
    }

    /// Reads the readable pending connections; hands complete requests on and closes failed
    /// and expired ones. `readable[j]` is the poll result of the `j`th entry.
    fn progress(&self, pending: &mut VecDeque<Pending>, readable: &[bool]) {
        let now = Instant::now();
        let mut i = 0;
        for &ready in readable {
            let step = match pending.get_mut(i) {
                Some(p) if ready => p.read(),
                Some(_) => Step::Waiting,
                None => break,
            };
            if matches!(step, Step::Waiting) && now < pending[i].deadline {
                i += 1;
                continue;
            }
            let Some(p) = pending.remove(i) else { break };
            match step {
                Step::Waiting => tracing::info!(
                    peer = %p.peer,
                    timeout_ms = self.limits.timeout.as_millis() as u64,
                    "soft listener: no connect request in time; closed"
                ),
                Step::Complete => self.complete(p),
                Step::Closed => {
                    tracing::debug!(peer = %p.peer, "soft listener: closed before a request")
                }
                Step::Failed(e) => {
                    tracing::warn!(peer = %p.peer, error = %e,
                        "soft listener: bad connect request")
                }
            }
        }
    }

    /// Turns a complete CONNECT_REQ into a [`ConnRequest`] and queues it (or rejects it when
    /// the backlog is full).
    fn complete(&self, p: Pending) {
        let peer = p.peer;
        let body = &p.frame[HEADER_LEN..p.need];
        match ConnRequest::from_frame(&self.dev, p.stream, peer, body) {
            Ok(req) if self.requests.len() < self.backlog => self.requests.push(req),
            Ok(req) => {
                tracing::warn!(%peer, backlog = self.backlog,
                    "soft listener: backlog full, rejecting");
                drop(req);
            }
            Err(e) => tracing::warn!(%peer, error = %e, "soft listener: bad connect request"),
        }
    }

    /// Accepts every waiting connection into `pending`, closing the oldest when it is full.
    /// Returns when to try again if descriptors ran out.
    fn accept(&self, pending: &mut VecDeque<Pending>, evict_log: &mut EvictLog) -> Option<Instant> {
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return None,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    tracing::warn!(error = %e, pending = pending.len(),
                        "soft listener: out of descriptors; pausing accept");
                    return Some(Instant::now() + ACCEPT_BACKOFF);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "soft listener: accept failed");
                    return None;
                }
            };
            if let Err(e) = stream.set_nonblocking(true) {
                tracing::warn!(%peer, error = %e, "soft listener: accept failed");
                continue;
            }
            if pending.len() >= self.limits.max_pending {
                if let Some(oldest) = pending.pop_front() {
                    evict_log.evicted(oldest.peer, self.limits.max_pending);
                }
            }
            let deadline = Instant::now() + self.limits.timeout;
            tracing::trace!(%peer, "soft listener: TCP accepted, awaiting connect request");
            pending.push_back(Pending::new(stream, peer, deadline));
        }
    }
}

/// Polls `fds` for input until one is ready or `wake` passes (or a signal arrives); `pfds`
/// gets one entry per fd.
fn poll(
    pfds: &mut Vec<libc::pollfd>,
    fds: impl Iterator<Item = RawFd>,
    wake: Option<Instant>,
) -> Result<()> {
    pfds.clear();
    pfds.extend(fds.map(|fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }));
    let ms: libc::c_int = match wake {
        None => -1,
        Some(t) => {
            let left = t.saturating_duration_since(Instant::now());
            // Round up so a deadline a fraction of a millisecond away does not busy-poll.
            left.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int
        }
    };
    // SAFETY: `pfds` is a live, initialised array of exactly `pfds.len()` entries that nothing
    // else touches during the call.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if r >= 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.kind() == std::io::ErrorKind::Interrupted {
        return Ok(()); // nothing is marked ready; the caller polls again
    }
    Err(FabricError::os("poll", e))
}
