//! The receive side of a QP: reads frames from the TCP connection and acts on them, as the
//! responder (SEND, WRITE, READ requests: memory checks, copies straight between the socket and
//! registered memory, ACK/NAK) and as the requester (ACK, NAK, READ responses: completions).
//!
//! Two threads drive it, one at a time, under [`RxShared`]'s lock:
//! - a thread waiting on the QP's receive CQ ([`RxShared::drive_inline`], from `cq.rs`): when
//!   frames arrive while the application sleeps in `Cq::wait`, it parses the frames that are
//!   whole in the buffer itself, so a completion costs no hop through another thread;
//! - the QP's receive thread ([`run`]), which wakes when nobody waits on the CQ, and for what a
//!   waiter leaves: a large frame not all arrived, the rest of a long burst, bytes that came
//!   while the receive thread held the lock, held ACKs whose time is up.
//!   It runs whether or not the application polls, so one-sided operations make progress on
//!   their own.
//!
//! The socket is in both threads' epoll sets with `EPOLLEXCLUSIVE`, the CQ's first. The kernel
//! wakes exclusive waiters in that order and stops at the first set that has a thread waiting in
//! it (`ep_poll_callback` reports a wake-up only then): data that arrives while the application
//! waits wakes the application alone; otherwise it wakes the receive thread.
//!
//! Any malformed or out-of-protocol frame ends the connection: the QP goes to the error state
//! and both sides see a disconnect.

use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::fabric::{Result, Sge};

mod frames;

use super::cq::CqInner;
use super::event::{Epoll, EventFd, TimerFd};
use super::mr::MrAccess;
use super::qp::QpShared;
use super::rxbuf::RxBuf;
use super::tx;
use super::wire::{Header, HEADER_LEN};

/// Socket read buffer. A CQ waiter parses frames up to this size once they are whole in it, and
/// larger ones only if all their bytes have arrived; large payloads are read straight into
/// registered memory.
const RX_BUF: usize = 128 * 1024;
/// Sink for payloads that are refused or not needed.
const SCRATCH: usize = 64 * 1024;
/// Frames a CQ waiter parses per wake-up before it leaves the rest to the receive thread (one
/// busy connection does not hold a target worker away from its others).
const INLINE_BUDGET: usize = 64;

/// Why the connection ended (a message for the log).
type Closed = String;

/// The receive state of one QP and what wakes its receive thread.
pub(super) struct RxShared {
    state: Mutex<Rx>,
    /// A CQ waiter left work to the receive thread (see [`Rx::kicked`]).
    kick: EventFd,
    /// A CQ waiter found the receive thread at work: it makes one more pass before it sleeps.
    again: AtomicBool,
    /// Held ACKs are due (armed when a hold begins).
    timer: Arc<TimerFd>,
    /// The socket descriptor in the epoll sets.
    fd: RawFd,
}

struct Rx {
    sh: Arc<QpShared>,
    rd: RxBuf,
    timer: Arc<TimerFd>,
    /// PSN of the next request the responder executes (go-back-N after an RNR NAK: anything
    /// else is discarded until the requester sends this one again).
    expected_psn: u32,
    sges: Vec<Sge>,
    accs: Vec<MrAccess>,
    scratch: Vec<u8>,
    /// Something to send was queued (an answer) or may have been freed to go (a completion
    /// ended a fence or made room among READs): pump before the next read that may block.
    dirty: bool,
    /// What is queued must go now (a NAK, a READ response, a request a completion let go);
    /// plain ACKs alone may wait [`ACK_DELAY`] for a frame of the application to ride with.
    urgent: bool,
    /// Since when plain ACKs wait.
    acks_since: Option<Instant>,
    /// A CQ waiter handed the socket to the receive thread (a large frame not all arrived,
    /// or its budget spent); waiters leave it alone until the receive thread has run.
    kicked: bool,
    /// The connection ended (reported once).
    closed: bool,
}

/// How long plain ACKs may wait to leave with the application's next frame (its answer to the
/// SEND just received, or its next request): one write and one wake-up of the peer instead of
/// two. READ responses and NAKs never wait; a requester's completion comes this much later at
/// most, when its peer's application stays silent.
const ACK_DELAY: Duration = Duration::from_micros(500);

/// Whether the buffer starts with a frame a CQ waiter may parse now.
enum Ahead {
    Whole,
    /// Not all there yet (or nothing): read more, or wait for it.
    Partial,
    /// Larger than the buffer; this many more bytes complete it.
    TooLarge(usize),
}

impl RxShared {
    pub fn new(sh: Arc<QpShared>, stream: TcpStream) -> Result<Arc<RxShared>> {
        let n = sh.caps.max_recv_sge.max(sh.caps.max_send_sge) as usize;
        let timer = Arc::new(TimerFd::new()?);
        let fd = stream.as_raw_fd();
        let rx = Rx {
            sh,
            rd: RxBuf::new(stream, RX_BUF),
            timer: timer.clone(),
            expected_psn: 0,
            sges: Vec::with_capacity(n),
            accs: Vec::with_capacity(n),
            scratch: vec![0; SCRATCH],
            dirty: false,
            urgent: false,
            acks_since: None,
            kicked: false,
            closed: false,
        };
        Ok(Arc::new(RxShared {
            state: Mutex::new(rx),
            kick: EventFd::new(false)?,
            again: AtomicBool::new(false),
            timer,
            fd,
        }))
    }

    pub fn fd(&self) -> RawFd {
        self.fd
    }

    /// Called by a thread woken in `Cq::wait` because this QP's socket has data: parses what is
    /// whole in the buffer, without blocking. If the receive thread is at work, it is told to
    /// make one more pass instead: the wake-up that brought us here went to us alone, and the
    /// data may have come after its last read.
    pub fn drive_inline(&self) {
        self.again.store(true, Ordering::SeqCst);
        // Orders the store before the look at the lock; the receive thread's fence orders its
        // unlock before its look at `again` (so one of the two sees the other).
        fence(Ordering::SeqCst);
        let mut rx = match self.state.try_lock() {
            Ok(rx) => rx,
            // The receive thread holds it: `again` makes it look once more. (Poisoned: a
            // panic under the lock, and the receive thread reports the connection lost.)
            Err(_) => return,
        };
        self.again.store(false, Ordering::SeqCst);
        if rx.closed || rx.kicked {
            return;
        }
        match rx.drive(true) {
            Ok(handoff) => {
                rx.answer(false);
                if handoff {
                    rx.kicked = true;
                    self.kick.notify();
                }
            }
            Err(why) => rx.close(&why),
        }
    }

    /// The receive thread's loop; returns when the connection has ended.
    fn thread_loop(&self) {
        let ep = match self.thread_epoll() {
            Ok(ep) => ep,
            Err(e) => {
                self.lock().close(&format!("receive thread setup: {e}"));
                return;
            }
        };
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        loop {
            let n = match ep.wait(&mut evs, None) {
                Ok(n) => n,
                Err(e) => {
                    self.lock().close(&e.to_string());
                    return;
                }
            };
            let mut due = false;
            for ev in &evs[..n] {
                // A copy: epoll_event is packed.
                let data = ev.u64;
                match data {
                    KICK => {
                        self.kick.consume();
                    }
                    TIMER => due |= self.timer.consume(),
                    _ => {}
                }
            }
            loop {
                let mut rx = self.lock();
                if rx.closed {
                    return;
                }
                rx.kicked = false;
                // Due ACKs go before a partial frame a waiter left is read to its end.
                rx.answer(due);
                due = false;
                if let Err(why) = rx.drive(false) {
                    rx.close(&why);
                    return;
                }
                rx.answer(false);
                drop(rx);
                fence(Ordering::SeqCst);
                if !self.again.swap(false, Ordering::SeqCst) {
                    break;
                }
            }
        }
    }

    /// The receive state, for the receive thread. A panic under the lock (a bug) ends the
    /// connection instead of the thread.
    fn lock(&self) -> MutexGuard<'_, Rx> {
        self.state.lock().unwrap_or_else(|poisoned| {
            let mut rx = poisoned.into_inner();
            rx.close("soft QP receive side panicked");
            rx
        })
    }

    fn thread_epoll(&self) -> Result<Epoll> {
        let ep = Epoll::new()?;
        // Registered after the CQ's set registered the socket: see the module comment.
        ep.add(self.fd, libc::EPOLLIN | libc::EPOLLEXCLUSIVE, SOCKET)?;
        ep.add(self.kick.fd(), libc::EPOLLIN, KICK)?;
        ep.add(self.timer.fd(), libc::EPOLLIN, TIMER)?;
        Ok(ep)
    }
}

const SOCKET: u64 = 0;
const KICK: u64 = 1;
const TIMER: u64 = 2;

/// The receive thread of a QP; `cq` is the CQ whose epoll set holds the socket as `token`
/// (taken out of it when the connection ends, before the socket closes).
pub(super) fn run(rx: Arc<RxShared>, cq: Arc<CqInner>, token: u64) {
    rx.thread_loop();
    cq.unregister(token, rx.fd);
}

fn io(e: std::io::Error) -> Closed {
    format!("connection closed: {e}")
}

impl Rx {
    /// The connection is gone: the QP goes to the error state (once).
    fn close(&mut self, why: &str) {
        if self.closed {
            return;
        }
        self.closed = true;
        tracing::debug!(qpn = self.sh.qpn, why, "soft QP receive side stops");
        self.accs.clear();
        self.sh.connection_lost(why);
    }

    /// Parses frames until the socket has nothing more. `inline` (a CQ waiter): only frames
    /// whole in the buffer, never blocking; returns whether the rest is left to the receive
    /// thread. Otherwise (the receive thread) every frame that has begun is read to
    /// its end, blocking.
    fn drive(&mut self, inline: bool) -> std::result::Result<bool, Closed> {
        let mut frames = 0;
        // Whoever calls was woken for new bytes: read at least once.
        self.rd.drained = false;
        loop {
            if inline {
                if frames == INLINE_BUDGET {
                    return Ok(true);
                }
                match self.ahead() {
                    Ahead::Whole => {}
                    // The payload goes straight from the socket to memory, so it may be read
                    // here if all of it has arrived; otherwise the receive thread waits for it.
                    Ahead::TooLarge(need) if self.rd.in_socket() >= need => {}
                    Ahead::TooLarge(_) => return Ok(true),
                    Ahead::Partial => {
                        if self.rd.drained || !self.fill()? {
                            return Ok(false);
                        }
                        continue;
                    }
                }
            } else if self.rd.buffered().is_empty() {
                // Answers go out once everything the socket held is handled: one write for a
                // burst of requests.
                self.answer(false);
                if self.rd.drained || !self.fill()? {
                    return Ok(false);
                }
            }
            self.rd.blocking = !inline;
            let r = self.frame();
            self.rd.blocking = false;
            r?;
            frames += 1;
            #[cfg(test)]
            if inline {
                self.sh.frames_inline.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Reads what the socket has without blocking; false if it had nothing.
    fn fill(&mut self) -> std::result::Result<bool, Closed> {
        match self.rd.fill() {
            Ok(0) => Err("connection closed by the peer".into()),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(io(e)),
        }
    }

    fn ahead(&self) -> Ahead {
        let b = self.rd.buffered();
        if b.len() < HEADER_LEN {
            return Ahead::Partial;
        }
        let mut hb = [0u8; HEADER_LEN];
        hb.copy_from_slice(&b[..HEADER_LEN]);
        let Ok(h) = Header::decode(&hb) else {
            return Ahead::Whole; // parsed now, and refused
        };
        let total = HEADER_LEN + h.body_len() as usize;
        if total > self.rd.capacity() {
            Ahead::TooLarge(total - b.len())
        } else if b.len() >= total {
            Ahead::Whole
        } else {
            Ahead::Partial
        }
    }

    /// Sends what is queued, unless it is only plain ACKs still within their [`ACK_DELAY`]
    /// (`due`: the delay's timer fired). A hold that begins arms the timer, so held ACKs go
    /// even if no frame and no post comes.
    fn answer(&mut self, due: bool) {
        if !self.dirty {
            return;
        }
        if !self.urgent && !due {
            {
                let sq = self.sh.lock_sq();
                if sq.responses.is_empty() && !sq.has_unsent() {
                    // Nothing to hold (a post took the ACKs along, or an ACK freed nothing).
                    self.dirty = false;
                    self.acks_since = None;
                    return;
                }
            }
            let now = Instant::now();
            match self.acks_since {
                // Without a timer, nothing would send them if no frame and no post comes.
                None if self.timer.arm(ACK_DELAY) => {
                    self.acks_since = Some(now);
                    return;
                }
                None => {}
                Some(t) if now.duration_since(t) < ACK_DELAY => return,
                Some(_) => {}
            }
        }
        self.dirty = false;
        self.urgent = false;
        self.acks_since = None;
        tx::pump(&self.sh);
    }
}
