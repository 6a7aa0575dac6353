//! The peer protocol, carried over the fabric under test itself.
//!
//! Every case runs over its own *control connection*. The client connects with a hello in the
//! connect private data naming the case; the server accepts, runs that case's server half, and
//! the two halves talk through small SEND/RECV messages on the control QP (addresses and rkeys
//! of the memory under test, "go" and "done" steps). The connections the case actually tests
//! are separate, so a case may drive them into the error state without losing the channel.
//!
//! ```text
//! hello (connect private data, zero-padded by some CMs):
//!   "RBCF" | version u8 = 1 | kind u8 (1 = run case, 2 = server quit) | len u8 | name
//! control message (one SEND, at most 256 bytes):
//!   type u8 = 1 (data) | label_len u8 | label | count u8 | count x u64 little-endian
//!   type u8 = 2 (pass) | 3 (fail) | 4 (skip) | reason (UTF-8)
//! ```
//! At the end of a case each side sends its outcome (pass/fail/skip) and waits for the
//! peer's; a side waiting for data that gets the peer's failure instead stops at once.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rdmablk::fabric::{Access, CmEvent, Mr, RecvWr, SendFlags, SendWr, WcStatus, WrOp};

use crate::check::{fail, CaseError, CaseResult, OrFail};
use crate::endpoint::{expect_wc, poll_one, Endpoint, OP_TIMEOUT};

const MAGIC: &[u8; 4] = b"RBCF";
const VERSION: u8 = 1;
const SLOT_BYTES: usize = 256;
const RECV_SLOTS: usize = 16;
const SEND_WR_ID: u64 = 1 << 32;

/// What the client's connect private data asks of the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Hello {
    /// Run the server half of this case over this (control) connection.
    Case(String),
    /// Stop serving.
    Quit,
}

impl Hello {
    /// Encodes the hello (at most `MAX_CONNECT_PRIVATE_DATA` bytes for names up to 48 bytes).
    pub fn encode(&self) -> Vec<u8> {
        let (kind, name) = match self {
            Hello::Case(n) => (1, n.as_bytes()),
            Hello::Quit => (2, &b""[..]),
        };
        assert!(name.len() <= 48, "case name {name:?} too long for a hello");
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&[VERSION, kind, name.len() as u8]);
        v.extend_from_slice(name);
        v
    }

    /// Decodes a hello; `None` when the bytes are not one (trailing padding is ignored).
    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() < 7 || &b[..4] != MAGIC || b[4] != VERSION {
            return None;
        }
        let len = b[6] as usize;
        let name = std::str::from_utf8(b.get(7..7 + len)?).ok()?;
        match b[5] {
            1 => Some(Hello::Case(name.to_string())),
            2 => Some(Hello::Quit),
            _ => None,
        }
    }
}

/// How a case half ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Pass,
    Fail(String),
    Skip(String),
}

impl Outcome {
    /// The outcome a half's result stands for.
    pub fn from_result(r: &CaseResult) -> Outcome {
        match r {
            Ok(()) => Outcome::Pass,
            Err(CaseError::Fail(s)) => Outcome::Fail(s.clone()),
            Err(CaseError::PeerFailed(s)) => Outcome::Fail(format!("(after the peer) {s}")),
            Err(CaseError::Skip(s)) => Outcome::Skip(s.clone()),
        }
    }
}

enum Msg {
    Data(String, Vec<u64>),
    Done(Outcome),
}

fn encode_data(label: &str, vals: &[u64]) -> Vec<u8> {
    assert!(
        label.len() < 64 && vals.len() <= 24,
        "control message too big"
    );
    let mut v = vec![1, label.len() as u8];
    v.extend_from_slice(label.as_bytes());
    v.push(vals.len() as u8);
    for x in vals {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v
}

fn encode_outcome(o: &Outcome) -> Vec<u8> {
    let (t, text) = match o {
        Outcome::Pass => (2, ""),
        Outcome::Fail(s) => (3, s.as_str()),
        Outcome::Skip(s) => (4, s.as_str()),
    };
    let mut v = vec![t];
    let mut end = text.len().min(SLOT_BYTES - 1);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    v.extend_from_slice(&text.as_bytes()[..end]);
    v
}

fn decode(b: &[u8]) -> Option<Msg> {
    match *b.first()? {
        1 => {
            let ll = *b.get(1)? as usize;
            let label = std::str::from_utf8(b.get(2..2 + ll)?).ok()?.to_string();
            let n = *b.get(2 + ll)? as usize;
            let body = b.get(3 + ll..3 + ll + 8 * n)?;
            let vals = body
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")))
                .collect();
            Some(Msg::Data(label, vals))
        }
        t @ 2..=4 => {
            let text = String::from_utf8_lossy(&b[1..]).into_owned();
            Some(Msg::Done(match t {
                2 => Outcome::Pass,
                3 => Outcome::Fail(text),
                _ => Outcome::Skip(text),
            }))
        }
        _ => None,
    }
}

/// The control channel of one case.
pub struct Ctl {
    /// The control connection. Cases may read its device; they must not post on its QP.
    pub ep: Endpoint,
    mr: Mr,
    pending: VecDeque<(String, Vec<u64>)>,
    peer: Option<Outcome>,
    broken: Option<String>,
}

impl Ctl {
    /// Registers the message buffers and posts the receives (before accept / before the first
    /// message is sent).
    pub fn new(ep: Endpoint) -> CaseResult<Ctl> {
        let mr = ep.register((RECV_SLOTS + 1) * SLOT_BYTES, Access::LOCAL_WRITE)?;
        let ctl = Ctl {
            ep,
            mr,
            pending: VecDeque::new(),
            peer: None,
            broken: None,
        };
        for slot in 0..RECV_SLOTS {
            ctl.post_slot(slot)?;
        }
        Ok(ctl)
    }

    fn post_slot(&self, slot: usize) -> CaseResult<()> {
        let sge = [self.mr.sge(slot * SLOT_BYTES, SLOT_BYTES as u32)];
        let wr = RecvWr {
            wr_id: slot as u64,
            sgl: &sge,
        };
        self.ep
            .qp
            .post_recv(&[wr])
            .or_fail("control connection: post_recv")
    }

    fn send_raw(&mut self, bytes: &[u8]) -> CaseResult<()> {
        if let Some(b) = &self.broken {
            return Err(fail(b.clone()));
        }
        let off = RECV_SLOTS * SLOT_BYTES;
        self.mr.write_at(off, bytes).or_fail("control buffer")?;
        let sge = [self.mr.sge(off, bytes.len() as u32)];
        let wr = SendWr {
            wr_id: SEND_WR_ID,
            op: WrOp::Send,
            sgl: &sge,
            flags: SendFlags::SIGNALED,
        };
        let r = self
            .ep
            .qp
            .post_send(&[wr])
            .or_fail("control connection: post_send")
            .and_then(|()| {
                expect_wc(
                    &self.ep.send_cq,
                    "control message send",
                    SEND_WR_ID,
                    WcStatus::Success,
                )
            });
        if let Err(e) = &r {
            self.broken = Some(format!("control connection broke: {e}"));
        }
        r.map(drop)
    }

    /// Sends a data message to the peer half.
    pub fn send(&mut self, label: &str, vals: &[u64]) -> CaseResult<()> {
        self.send_raw(&encode_data(label, vals))
    }

    /// Takes in whatever messages have arrived, without waiting. Stops at the peer's outcome,
    /// its last message: the peer may disconnect right after it, flushing the rest.
    fn pump(&mut self) -> CaseResult<()> {
        if self.peer.is_some() {
            return Ok(());
        }
        if let Some(b) = &self.broken {
            return Err(fail(b.clone()));
        }
        // Look at the connection events first: messages that arrived before a disconnect are
        // in the CQ by the time its event is seen, and are taken below.
        let lost = match self.ep.qp.cm_event(Some(Duration::ZERO)) {
            Ok(Some(CmEvent::Established)) | Ok(None) => None,
            Ok(Some(ev)) => Some(format!("control connection lost: {ev:?}")),
            Err(e) => Some(format!("control connection: Qp::cm_event: {e}")),
        };
        while let Some(wc) = poll_one(&self.ep.recv_cq)? {
            if wc.status != WcStatus::Success {
                let why = format!(
                    "control connection broke: receive completed with {}",
                    wc.status
                );
                self.broken = Some(why.clone());
                return Err(fail(why));
            }
            let slot = wc.wr_id as usize;
            let len = (wc.byte_len as usize).min(SLOT_BYTES);
            let mut b = vec![0u8; len];
            self.mr
                .read_at(slot * SLOT_BYTES, &mut b)
                .or_fail("control buffer")?;
            self.post_slot(slot)?;
            match decode(&b) {
                Some(Msg::Data(l, v)) => self.pending.push_back((l, v)),
                Some(Msg::Done(o)) => {
                    self.peer = Some(o);
                    return Ok(());
                }
                None => return Err(fail(format!("undecodable control message {b:02x?}"))),
            }
        }
        if let Some(why) = lost {
            self.broken = Some(why.clone());
            return Err(fail(why));
        }
        Ok(())
    }

    /// Fails at once if the peer half has already finished with a failure or skip (a server
    /// half waiting on something other than the channel calls this between waits).
    pub fn check_peer(&mut self, waiting_for: &str) -> CaseResult<()> {
        self.pump()?;
        self.peer_verdict(waiting_for)
    }

    /// What the peer's outcome, if it has come, means for a side still waiting: a failure or
    /// skip ends this side too, a pass means the peer will send nothing more. Takes in no
    /// message: a caller that looks for data first must decide on what it has already taken.
    fn peer_verdict(&self, waiting_for: &str) -> CaseResult<()> {
        match &self.peer {
            None => Ok(()),
            Some(Outcome::Fail(s)) => Err(CaseError::PeerFailed(s.clone())),
            Some(Outcome::Skip(s)) => Err(CaseError::Skip(s.clone())),
            Some(Outcome::Pass) => Err(fail(format!(
                "the peer half finished while this side waited for {waiting_for}"
            ))),
        }
    }

    /// Waits up to `timeout` for data message `label` from the peer half.
    pub fn recv_timeout(&mut self, label: &str, timeout: Duration) -> CaseResult<Vec<u64>> {
        let deadline = Instant::now() + timeout;
        loop {
            self.pump()?;
            if let Some((l, v)) = self.pending.pop_front() {
                if l != label {
                    return Err(fail(format!(
                        "protocol: expected control message {label:?}, got {l:?}"
                    )));
                }
                return Ok(v);
            }
            // No second pump here: the peer may send its data and its outcome back to back,
            // and a pump between the look at `pending` above and this verdict would take both
            // and call the peer finished with the message this side waits for unread (the
            // server half of the first case lost the client's "hello" that way, 1 run in 10
            // on rxe). `pump` stops at the outcome, so with `pending` empty it is the last.
            self.peer_verdict(&format!("control message {label:?}"))?;
            if Instant::now() >= deadline {
                return Err(fail(format!(
                    "peer sent no control message {label:?} within {} ms",
                    timeout.as_millis()
                )));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Waits for data message `label` (see [`OP_TIMEOUT`]; a bit more, as the peer may be in
    /// a wait of its own).
    pub fn recv(&mut self, label: &str) -> CaseResult<Vec<u64>> {
        self.recv_timeout(label, OP_TIMEOUT * 2)
    }

    /// Both halves send `label` then wait for the other's.
    pub fn barrier(&mut self, label: &str) -> CaseResult<()> {
        self.send(label, &[])?;
        self.recv(label).map(drop)
    }

    /// Ends the case: sends this half's outcome and waits up to `timeout` for the peer's.
    pub fn finish(&mut self, mine: &Outcome, timeout: Duration) -> Result<Outcome, String> {
        // Failing to send is reported through the missing peer outcome below.
        let _ = self.send_raw(&encode_outcome(mine));
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(o) = &self.peer {
                return Ok(o.clone());
            }
            if let Err(e) = self.pump() {
                return Err(format!("no outcome from the peer half: {e}"));
            }
            self.pending.clear();
            if Instant::now() >= deadline {
                return Err(format!(
                    "peer half sent no outcome within {} ms",
                    timeout.as_millis()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_with_padding() {
        let mut b = Hello::Case("rdma_write_1b".into()).encode();
        b.resize(56, 0);
        assert_eq!(Hello::decode(&b), Some(Hello::Case("rdma_write_1b".into())));
        assert_eq!(Hello::decode(&Hello::Quit.encode()), Some(Hello::Quit));
        assert_eq!(Hello::decode(b"nonsense"), None);
    }

    #[test]
    fn messages_round_trip() {
        match decode(&encode_data("mr", &[1, u64::MAX])) {
            Some(Msg::Data(l, v)) => assert_eq!((l.as_str(), v), ("mr", vec![1, u64::MAX])),
            _ => panic!("data message did not decode"),
        }
        match decode(&encode_outcome(&Outcome::Fail("x".repeat(400)))) {
            Some(Msg::Done(Outcome::Fail(s))) => assert_eq!(s.len(), 255),
            _ => panic!("outcome did not decode"),
        }
    }
}
