//! In-band authentication of a queue, controller side (DH-HMAC-CHAP, `docs/auth.md`).
//!
//! A host listed with a `dhchap_key` gets AUTHREQ.ATR in every Connect response (admin and
//! I/O queues); that queue then accepts nothing but Authentication Send / Receive (and
//! Disconnect) until the transaction below succeeds: anything else completes with
//! Authentication Required.
//!
//! ```text
//!             AUTH_SEND negotiate          AUTH_RECV            AUTH_SEND reply
//!   Idle ───────────────────────▶ Challenge ────────▶ Reply ─────────────────▶ Success1
//!    ▲  (any step: a new negotiate restarts)         (C1, S1, DH value)  (R1 checked)   │
//!    │                                                                         AUTH_RECV│
//!    ├──────── authenticated ◀── AUTH_SEND success2 ◀── Success2 ◀──(R2 sent)───────────┤
//!    └──────── authenticated ◀──────────────────────────────(unidirectional)────────────┘
//!   any failure: Failure1 (reason kept) ── AUTH_RECV ──▶ failure1 sent, queue torn down
//!   failure2 from the host, or the transaction outliving AUTH_TIMEOUT: queue torn down
//! ```
//! A host re-authenticates by sending a new negotiate on an authenticated queue; the queue
//! stays usable meanwhile and is torn down if that transaction fails. Secrets, responses and
//! challenges are never logged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use rdmablk::nvme::auth::dhchap::{self, ResponseInput};
use rdmablk::nvme::auth::ffdhe::KeyPair;
use rdmablk::nvme::auth::{
    AuthReceive, AuthSend, Challenge, DhGroup, FailureReason, HashId, Message, Negotiate, Reply,
    Success1, AUTHREQ_ATR, MAX_MESSAGE_BYTES, RESCODE_FAILED,
};
use rdmablk::nvme::opcodes::fctype;
use rdmablk::nvme::Status;

use super::data_phase::{data_phase, Next, SglFit};
use crate::config::HostAuth;
use crate::nvmf::queue::Queue;
use crate::nvmf::request::{Action, DataDir};
use crate::nvmf::transport::QueueTransport;
use crate::nvmf::Shared;

/// How long a transaction may take, and how long after Connect a queue that must authenticate
/// may go without having done so.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(30);

/// Where a queue's transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// No transaction: waiting for a negotiate.
    Idle,
    /// Negotiated: the host's AUTH_RECEIVE gets the challenge.
    Challenge,
    /// Challenge sent: waiting for the reply.
    Reply,
    /// Reply verified: the host's AUTH_RECEIVE gets success1.
    Success1,
    /// Success1 sent with R2: waiting for success2 (or failure2).
    Success2,
    /// Failed: the host's AUTH_RECEIVE gets failure1, then the queue goes.
    Failure1(FailureReason),
}

/// One queue's authentication state.
pub struct QueueAuth {
    host: Arc<HostAuth>,
    hostnqn: String,
    subnqn: String,
    authenticated: bool,
    step: Step,
    t_id: u16,
    hash: HashId,
    group: DhGroup,
    s1: u32,
    c1: Vec<u8>,
    /// S2 and C2 when the host asked to authenticate the controller.
    c2: Option<(u32, Vec<u8>)>,
    dh: Option<KeyPair>,
    session_key: Option<Zeroizing<Vec<u8>>>,
    /// When the queue connected, or the current transaction started.
    since: Instant,
}

/// What the worker does after an AUTH_SEND.
#[derive(Debug, PartialEq, Eq)]
pub enum SendOutcome {
    Continue,
    /// Respond, then tear the queue down.
    Close(&'static str),
}

impl QueueAuth {
    pub fn new(host: Arc<HostAuth>, hostnqn: &str, subnqn: &str) -> QueueAuth {
        QueueAuth {
            hash: host.hash,
            group: host.dhgroup,
            host,
            hostnqn: hostnqn.to_owned(),
            subnqn: subnqn.to_owned(),
            authenticated: false,
            step: Step::Idle,
            t_id: 0,
            s1: 0,
            c1: Vec::new(),
            c2: None,
            dh: None,
            session_key: None,
            since: Instant::now(),
        }
    }

    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    fn fail(&mut self, why: FailureReason, qid: u16) {
        tracing::info!(qid, hostnqn = %self.hostnqn, step = ?self.step, reason = %why,
            "authentication failed");
        self.step = Step::Failure1(why);
    }

    fn finish(&mut self) {
        self.step = Step::Idle;
        self.authenticated = true;
        self.dh = None;
        self.session_key = None;
        self.c2 = None;
    }

    /// Handles the message of an AUTH_SEND.
    pub fn on_send(&mut self, bytes: &[u8], qid: u16) -> SendOutcome {
        let m = match Message::decode(bytes) {
            Ok(m) => m,
            Err(why) => {
                self.fail(why, qid);
                return SendOutcome::Continue;
            }
        };
        tracing::debug!(qid, message = m.name(), step = ?self.step, "auth send");
        match (self.step, m) {
            (_, Message::Negotiate(n)) => self.negotiate(&n, qid),
            (_, Message::Failure { rescode_exp, .. }) => {
                let why = FailureReason::from_code(rescode_exp)
                    .map_or("unknown reason", FailureReason::describe);
                tracing::info!(qid, hostnqn = %self.hostnqn, reason = why,
                    "host ended authentication with failure2");
                return SendOutcome::Close("host failed authentication (failure2)");
            }
            (_, m) if m.t_id() != self.t_id => self.fail(FailureReason::IncorrectPayload, qid),
            (Step::Reply, Message::Reply(r)) => self.reply(&r, qid),
            (Step::Success2, Message::Success2 { .. }) => {
                self.finish();
                tracing::info!(qid, hostnqn = %self.hostnqn, "host and controller authenticated");
            }
            _ => self.fail(FailureReason::IncorrectMessage, qid),
        }
        SendOutcome::Continue
    }

    fn negotiate(&mut self, n: &Negotiate, qid: u16) {
        self.step = Step::Idle;
        self.t_id = n.t_id;
        self.since = Instant::now();
        self.c2 = None;
        self.session_key = None;
        if n.sc_c != 0 {
            return self.fail(FailureReason::ConcatMismatch, qid);
        }
        if !n.hash_ids.contains(&self.hash.id()) {
            return self.fail(FailureReason::HashUnusable, qid);
        }
        if !n.dh_ids.contains(&self.group.id()) {
            return self.fail(FailureReason::DhGroupUnusable, qid);
        }
        self.step = Step::Challenge;
    }

    fn reply(&mut self, r: &Reply, qid: u16) {
        if r.response.len() != self.hash.digest_len() {
            return self.fail(FailureReason::IncorrectPayload, qid);
        }
        self.session_key = match (&self.dh, r.dh_value.is_empty()) {
            (None, true) => None,
            (Some(dh), false) => match dh.shared_secret(&r.dh_value) {
                Ok(k) => Some(k),
                Err(_) => return self.fail(FailureReason::DhGroupUnusable, qid),
            },
            _ => return self.fail(FailureReason::IncorrectPayload, qid),
        };
        let key = self.host.key.transformed(&self.hostnqn);
        let challenge = dhchap::augmented_challenge(
            self.hash,
            self.session_key.as_deref().map(|v| &v[..]),
            &self.c1,
        );
        let expected = dhchap::host_response(
            &key,
            &ResponseInput {
                hash: self.hash,
                challenge: &challenge,
                seqnum: self.s1,
                t_id: self.t_id,
                host_nqn: &self.hostnqn,
                subsys_nqn: &self.subnqn,
            },
        );
        if !dhchap::responses_match(&expected, &r.response) {
            return self.fail(FailureReason::Failed, qid);
        }
        // S2 = 0 with C2: a challenge for a TLS PSK only, not controller authentication.
        if r.cvalid && r.seqnum != 0 {
            if self.host.ctrl_key.is_none() {
                tracing::warn!(qid, hostnqn = %self.hostnqn,
                    "host asked to authenticate the controller, which has no dhchap_ctrl_key for it");
                return self.fail(FailureReason::Failed, qid);
            }
            self.c2 = Some((r.seqnum, r.challenge.clone()));
        } else {
            self.authenticated = true;
            tracing::info!(qid, hostnqn = %self.hostnqn, hash = self.hash.name(),
                dhgroup = self.group.name(), "host authenticated");
        }
        self.step = Step::Success1;
    }

    /// Builds the message an AUTH_RECEIVE returns; the flag says to tear the queue down after.
    pub fn on_receive(&mut self, qid: u16) -> (Vec<u8>, Option<&'static str>) {
        match self.step {
            Step::Challenge => match self.challenge() {
                Ok(m) => {
                    self.step = Step::Reply;
                    (m.encode(), None)
                }
                Err(why) => {
                    self.fail(why, qid);
                    self.failure1(why)
                }
            },
            Step::Success1 => {
                let m = self.success1();
                if self.c2.is_some() {
                    self.step = Step::Success2;
                } else {
                    self.finish();
                }
                (m.encode(), None)
            }
            Step::Failure1(why) => self.failure1(why),
            Step::Idle | Step::Reply | Step::Success2 => {
                self.fail(FailureReason::IncorrectMessage, qid);
                self.failure1(FailureReason::IncorrectMessage)
            }
        }
    }

    fn failure1(&mut self, why: FailureReason) -> (Vec<u8>, Option<&'static str>) {
        self.authenticated = false;
        let m = Message::Failure {
            t_id: self.t_id,
            from_controller: true,
            rescode: RESCODE_FAILED,
            rescode_exp: why.code(),
        };
        (m.encode(), Some("authentication failed"))
    }

    fn challenge(&mut self) -> Result<Message, FailureReason> {
        let hl = self.hash.digest_len();
        self.c1 = dhchap::random_bytes(hl).map_err(|_| FailureReason::Failed)?;
        self.s1 = dhchap::random_seqnum().map_err(|_| FailureReason::Failed)?;
        self.dh = match self.group {
            DhGroup::Null => None,
            g => Some(KeyPair::generate(g).map_err(|_| FailureReason::Failed)?),
        };
        Ok(Message::Challenge(Challenge {
            t_id: self.t_id,
            hash_id: self.hash.id(),
            dh_id: self.group.id(),
            seqnum: self.s1,
            challenge: self.c1.clone(),
            dh_value: self.dh.as_ref().map_or(Vec::new(), |k| k.public().to_vec()),
        }))
    }

    fn success1(&self) -> Message {
        let response = match (&self.c2, &self.host.ctrl_key) {
            (Some((s2, c2)), Some(ctrl_key)) => {
                let key = ctrl_key.transformed(&self.subnqn);
                let challenge = dhchap::augmented_challenge(
                    self.hash,
                    self.session_key.as_deref().map(|v| &v[..]),
                    c2,
                );
                Some(dhchap::controller_response(
                    &key,
                    &ResponseInput {
                        hash: self.hash,
                        challenge: &challenge,
                        seqnum: *s2,
                        t_id: self.t_id,
                        host_nqn: &self.hostnqn,
                        subsys_nqn: &self.subnqn,
                    },
                ))
            }
            _ => None,
        };
        Message::Success1(Success1 {
            t_id: self.t_id,
            hl: self.hash.digest_len() as u8,
            response,
        })
    }

    /// Checks the deadlines: `Some(why)` to tear the queue down. A re-authentication that
    /// stalls is abandoned (the queue stays authenticated).
    pub fn expired(&mut self, now: Instant) -> Option<&'static str> {
        if now.duration_since(self.since) <= AUTH_TIMEOUT {
            return None;
        }
        if !self.authenticated {
            return Some("authentication timeout");
        }
        if self.step != Step::Idle {
            self.step = Step::Idle;
            self.dh = None;
            self.session_key = None;
        }
        None
    }
}

// --------------------------------------------------------------------- engine hooks

/// Connect of a queue whose host must authenticate: sets the queue's state up and returns
/// the AUTHREQ bits for the Connect response.
pub fn on_connect<X: QueueTransport>(
    q: &mut Queue<X>,
    host: Option<Arc<HostAuth>>,
    hostnqn: &str,
    subnqn: &str,
) -> u32 {
    match host {
        Some(h) => {
            q.auth = Some(Box::new(QueueAuth::new(h, hostnqn, subnqn)));
            AUTHREQ_ATR
        }
        None => 0,
    }
}

/// Whether the queue may run commands other than authentication ones.
pub fn admitted(auth: &Option<Box<QueueAuth>>) -> bool {
    auth.as_ref().map_or(true, |a| a.authenticated())
}

/// Checks an Authentication Send / Receive and sets up its data phase.
pub fn prepare<X: QueueTransport>(q: &mut Queue<X>, slot: u32, shared: &Shared) -> Next {
    let r = &mut q.reqs[slot as usize];
    if q.auth.is_none() {
        // Nothing to authenticate on this queue (the host is not listed with a key).
        r.fail(Status::INVALID_OPCODE.with_dnr());
        return Next::Respond;
    }
    let sqe = r.sqe;
    let (dir, len) = if sqe.fctype() == fctype::AUTH_SEND {
        match AuthSend::from_sqe(&sqe) {
            Ok(s) => (DataDir::HostToController, s.tl),
            Err(st) => return fail(q, slot, st),
        }
    } else {
        match AuthReceive::from_sqe(&sqe) {
            Ok(s) => (DataDir::ControllerToHost, s.al),
            Err(st) => return fail(q, slot, st),
        }
    };
    if len as usize > MAX_MESSAGE_BYTES {
        return fail(q, slot, Status::INVALID_FIELD.with_dnr());
    }
    q.reqs[slot as usize].action = Action::Auth;
    match data_phase(q, slot, dir, len, SglFit::Exact, shared) {
        Ok(next) => next,
        Err(st) => fail(q, slot, st),
    }
}

fn fail<X: QueueTransport>(q: &mut Queue<X>, slot: u32, st: Status) -> Next {
    q.reqs[slot as usize].fail(st);
    Next::Respond
}

/// Runs an Authentication Send / Receive whose data is in place.
pub fn execute<X: QueueTransport>(q: &mut Queue<X>, slot: u32) {
    let r = q.reqs[slot as usize];
    let qid = q.qid;
    if q.auth.is_none() {
        q.reqs[slot as usize].fail(Status::INTERNAL);
        return;
    }
    if r.dir == DataDir::HostToController {
        let mut buf = Zeroizing::new(vec![0u8; r.data_len as usize]);
        if q.read_data(r.data, 0, &mut buf).is_err() {
            q.reqs[slot as usize].fail(Status::INTERNAL);
            return;
        }
        let auth = q.auth.as_mut().expect("checked above");
        if let SendOutcome::Close(why) = auth.on_send(&buf, qid) {
            q.reqs[slot as usize].close_after = Some(why);
        }
        return;
    }
    let auth = q.auth.as_mut().expect("checked above");
    let (msg, close) = auth.on_receive(qid);
    let n = msg.len().min(r.data_len as usize);
    if q.write_data(r.data, 0, &msg[..n]).is_err() {
        q.reqs[slot as usize].fail(Status::INTERNAL);
        return;
    }
    let req = &mut q.reqs[slot as usize];
    // Only the message moves: the rest of the host's buffer is left alone (never stale bytes
    // of the data slot).
    req.data_len = n as u32;
    req.close_after = close;
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmablk::nvme::auth::key::DhchapKey;

    fn queue(hash: HashId, dhgroup: DhGroup) -> QueueAuth {
        let key = DhchapKey::parse("DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:")
            .unwrap();
        let host = Arc::new(HostAuth {
            key,
            ctrl_key: None,
            hash,
            dhgroup,
        });
        QueueAuth::new(
            host,
            "nqn.2014-08.org.nvmexpress:uuid:h",
            "nqn.2026-11.io.rdmablk:s",
        )
    }

    fn negotiate(hashes: &[HashId], groups: &[DhGroup]) -> Vec<u8> {
        Message::Negotiate(Negotiate {
            t_id: 7,
            sc_c: 0,
            hash_ids: hashes.iter().map(|h| h.id()).collect(),
            dh_ids: groups.iter().map(|g| g.id()).collect(),
        })
        .encode()
    }

    /// The host's AUTH_RECEIVE after a negotiate: failure1 with `why`, and the queue goes.
    fn refused_with(q: &mut QueueAuth, why: FailureReason) {
        let (bytes, close) = q.on_receive(1);
        assert_eq!(close, Some("authentication failed"));
        assert_eq!(
            Message::decode(&bytes).unwrap(),
            Message::Failure {
                t_id: 7,
                from_controller: true,
                rescode: RESCODE_FAILED,
                rescode_exp: why.code(),
            }
        );
        assert!(!q.authenticated());
    }

    #[test]
    fn a_hash_the_host_does_not_offer_fails_with_hash_unusable() {
        let mut q = queue(HashId::Sha512, DhGroup::Null);
        let m = negotiate(&[HashId::Sha256, HashId::Sha384], &DhGroup::ALL);
        assert_eq!(q.on_send(&m, 1), SendOutcome::Continue);
        refused_with(&mut q, FailureReason::HashUnusable);
    }

    #[test]
    fn a_group_the_host_does_not_offer_fails_with_dh_group_unusable() {
        let mut q = queue(HashId::Sha256, DhGroup::Ffdhe8192);
        let m = negotiate(&HashId::ALL, &[DhGroup::Null, DhGroup::Ffdhe2048]);
        assert_eq!(q.on_send(&m, 1), SendOutcome::Continue);
        refused_with(&mut q, FailureReason::DhGroupUnusable);
    }

    #[test]
    fn every_offered_hash_and_group_gets_a_challenge_in_it() {
        for hash in HashId::ALL {
            for group in DhGroup::ALL {
                let mut q = queue(hash, group);
                assert_eq!(
                    q.on_send(&negotiate(&HashId::ALL, &DhGroup::ALL), 0),
                    SendOutcome::Continue
                );
                let (bytes, close) = q.on_receive(0);
                assert_eq!(close, None);
                let Message::Challenge(c) = Message::decode(&bytes).unwrap() else {
                    panic!("no challenge for {hash:?}/{group:?}");
                };
                assert_eq!((c.hash_id, c.dh_id), (hash.id(), group.id()));
                assert_eq!(c.challenge.len(), hash.digest_len());
                assert_eq!(c.dh_value.len(), group.value_len());
            }
        }
    }
}
