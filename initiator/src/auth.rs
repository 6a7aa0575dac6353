//! In-band authentication of a queue, host side (DH-HMAC-CHAP, `docs/auth.md`), run right
//! after a Fabrics Connect whose response sets AUTHREQ.ATR, before anything else on the
//! queue, the way the Linux host does it (drivers/nvme/host/auth.c):
//!
//! ```text
//! AUTH_SEND negotiate (SHA-256/384/512; null and ffdhe2048..8192)
//! AUTH_RECV challenge  (hash, group, S1, C1, controller's DH value)
//! AUTH_SEND reply      (R1; C2 and S2 when a controller key is set; our DH value)
//! AUTH_RECV success1   (R2 checked when we sent C2)
//! AUTH_SEND success2   (only after checking R2)
//! ```
//! A failure after the challenge is reported to the controller with failure2, then returned
//! as [`Error::Auth`]. Secrets and responses never reach logs or errors.

use std::sync::atomic::{AtomicU16, Ordering};

use zeroize::Zeroizing;

use rdmablk::nvme::auth::dhchap::{self, ResponseInput};
use rdmablk::nvme::auth::ffdhe::KeyPair;
use rdmablk::nvme::auth::{
    AuthReceive, AuthSend, Challenge, DhGroup, FailureReason, HashId, Message, Negotiate, Reply,
    AUTHREQ_ASCR, AUTHREQ_ATR, MAX_MESSAGE_BYTES, RESCODE_FAILED,
};

use crate::error::{Error, Result};
use crate::queue::Queue;
use crate::session::Setup;

/// Transaction IDs, unique per process (as the Linux host's per-controller counter).
static NEXT_T_ID: AtomicU16 = AtomicU16::new(1);

/// Authenticates queue `qid` if the Connect response's dword 0 (`connect_dw0`) asks for it.
pub(crate) fn authenticate(s: &Setup<'_>, q: &mut Queue, qid: u16, connect_dw0: u32) -> Result<()> {
    let err = |what: String| Error::Auth {
        qid,
        subnqn: s.url.subnqn.clone(),
        what,
    };
    if connect_dw0 & AUTHREQ_ASCR != 0 {
        return Err(err(
            "the controller requires secure channel concatenation (TLS), which rdmablk does not \
             support"
                .into(),
        ));
    }
    if connect_dw0 & AUTHREQ_ATR == 0 {
        return Ok(());
    }
    let Some(key) = &s.opts.dhchap_key else {
        return Err(err(
            "the controller requires DH-HMAC-CHAP authentication and no host key is set \
             (ConnectOptions::dhchap_key, or ?dhchap_key_file= in the URL)"
                .into(),
        ));
    };
    let mut t = Transaction {
        s,
        q,
        t_id: NEXT_T_ID.fetch_add(1, Ordering::Relaxed),
    };
    let result = t.run(key);
    if let Err(Failed { reason, what, tell }) = &result {
        if *tell {
            // Best effort: the queue is closed by the caller whatever the controller says.
            let _ = t.send(&Message::Failure {
                t_id: t.t_id,
                from_controller: false,
                rescode: RESCODE_FAILED,
                rescode_exp: reason.code(),
            });
        }
        return Err(err(what.clone()));
    }
    tracing::debug!(qid, "queue authenticated");
    Ok(())
}

/// Why the transaction stopped; `tell`: send failure2 first.
struct Failed {
    reason: FailureReason,
    what: String,
    tell: bool,
}

fn failed(reason: FailureReason, what: impl Into<String>) -> Failed {
    Failed {
        reason,
        what: what.into(),
        tell: true,
    }
}

struct Transaction<'a, 'b> {
    s: &'a Setup<'b>,
    q: &'a mut Queue,
    t_id: u16,
}

impl Transaction<'_, '_> {
    fn send(&mut self, m: &Message) -> std::result::Result<(), Failed> {
        let bytes = m.encode();
        let sqe = AuthSend {
            tl: bytes.len() as u32,
        }
        .to_sqe(0);
        let len = bytes.len();
        let (cqe, _) = self
            .s
            .admin_cmd(self.q, sqe, Some((true, bytes, len)), "Authentication Send")
            .map_err(|e| quiet(e.to_string()))?;
        if !cqe.status.is_success() {
            return Err(quiet(format!(
                "Authentication Send ({}): {}",
                m.name(),
                cqe.status
            )));
        }
        Ok(())
    }

    fn receive(&mut self, want: &str) -> std::result::Result<Message, Failed> {
        let sqe = AuthReceive {
            al: MAX_MESSAGE_BYTES as u32,
        }
        .to_sqe(0);
        let data = Some((false, Vec::new(), MAX_MESSAGE_BYTES));
        let (cqe, data) = self
            .s
            .admin_cmd(self.q, sqe, data, "Authentication Receive")
            .map_err(|e| quiet(e.to_string()))?;
        if !cqe.status.is_success() {
            return Err(quiet(format!(
                "Authentication Receive ({want}): {}",
                cqe.status
            )));
        }
        let bytes = data.unwrap_or_default();
        let m = Message::decode(&bytes)
            .map_err(|r| failed(r, format!("malformed {want} from the controller: {r}")))?;
        if let Message::Failure {
            from_controller: true,
            rescode_exp,
            ..
        } = m
        {
            let why = FailureReason::from_code(rescode_exp)
                .map_or_else(|| format!("reason {rescode_exp:#x}"), |r| r.to_string());
            return Err(quiet(format!(
                "the controller refused: {why} (check the host key)"
            )));
        }
        if m.t_id() != self.t_id {
            return Err(failed(
                FailureReason::IncorrectMessage,
                format!(
                    "{} with transaction {} instead of {}",
                    m.name(),
                    m.t_id(),
                    self.t_id
                ),
            ));
        }
        Ok(m)
    }

    fn run(
        &mut self,
        key: &rdmablk::nvme::auth::key::DhchapKey,
    ) -> std::result::Result<(), Failed> {
        let opts = self.s.opts;
        let (hostnqn, subnqn) = (opts.hostnqn.as_str(), self.s.url.subnqn.as_str());
        self.send(&Message::Negotiate(Negotiate {
            t_id: self.t_id,
            sc_c: 0,
            hash_ids: HashId::ALL.iter().map(|h| h.id()).collect(),
            dh_ids: DhGroup::ALL.iter().map(|g| g.id()).collect(),
        }))
        .map_err(|f| Failed { tell: false, ..f })?;
        let Message::Challenge(c) = self
            .receive("challenge")
            .map_err(|f| Failed { tell: false, ..f })?
        else {
            return Err(failed(
                FailureReason::IncorrectMessage,
                "expected a challenge",
            ));
        };
        let (hash, group, dh, session_key) = accept_challenge(&c)?;
        let challenge =
            dhchap::augmented_challenge(hash, session_key.as_deref().map(|v| &v[..]), &c.challenge);
        let response = dhchap::host_response(
            &key.transformed(hostnqn),
            &ResponseInput {
                hash,
                challenge: &challenge,
                seqnum: c.seqnum,
                t_id: self.t_id,
                host_nqn: hostnqn,
                subsys_nqn: subnqn,
            },
        );
        let random =
            |n| dhchap::random_bytes(n).map_err(|e| failed(FailureReason::Failed, e.to_string()));
        let (s2, c2) = match &opts.dhchap_ctrl_key {
            Some(_) => (
                dhchap::random_seqnum()
                    .map_err(|e| failed(FailureReason::Failed, e.to_string()))?,
                random(hash.digest_len())?,
            ),
            None => (0, vec![0; hash.digest_len()]),
        };
        self.send(&Message::Reply(Reply {
            t_id: self.t_id,
            cvalid: s2 != 0,
            seqnum: s2,
            response,
            challenge: c2.clone(),
            dh_value: dh.as_ref().map_or(Vec::new(), |k| k.public().to_vec()),
        }))?;
        let Message::Success1(ok) = self.receive("success1")? else {
            return Err(failed(FailureReason::IncorrectMessage, "expected success1"));
        };
        if usize::from(ok.hl) != hash.digest_len() {
            return Err(failed(
                FailureReason::HashUnusable,
                "success1 with a wrong hash length",
            ));
        }
        let Some(ctrl_key) = &opts.dhchap_ctrl_key else {
            tracing::debug!(
                hash = hash.name(),
                dhgroup = group.name(),
                "host authenticated"
            );
            return Ok(());
        };
        let expected = dhchap::controller_response(
            &ctrl_key.transformed(subnqn),
            &ResponseInput {
                hash,
                challenge: &dhchap::augmented_challenge(
                    hash,
                    session_key.as_deref().map(|v| &v[..]),
                    &c2,
                ),
                seqnum: s2,
                t_id: self.t_id,
                host_nqn: hostnqn,
                subsys_nqn: subnqn,
            },
        );
        match &ok.response {
            Some(r) if dhchap::responses_match(&expected, r) => {}
            Some(_) => {
                return Err(failed(
                    FailureReason::Failed,
                    "the controller's response is wrong: it does not hold the controller key \
                     we were given (dhchap_ctrl_key)",
                ))
            }
            None => {
                return Err(failed(
                    FailureReason::Failed,
                    "the controller did not answer our challenge (no controller key for us?)",
                ))
            }
        }
        self.send(&Message::Success2 { t_id: self.t_id })?;
        tracing::debug!(
            hash = hash.name(),
            dhgroup = group.name(),
            "host and controller authenticated"
        );
        Ok(())
    }
}

type Accepted = (HashId, DhGroup, Option<KeyPair>, Option<Zeroizing<Vec<u8>>>);

/// Checks the controller's choice and computes our DH value and the session key.
fn accept_challenge(c: &Challenge) -> std::result::Result<Accepted, Failed> {
    let hash = HashId::from_id(c.hash_id)
        .filter(|h| h.digest_len() == c.challenge.len())
        .ok_or_else(|| {
            failed(
                FailureReason::HashUnusable,
                format!("hash {:#x}", c.hash_id),
            )
        })?;
    let group = DhGroup::from_id(c.dh_id).ok_or_else(|| {
        failed(
            FailureReason::DhGroupUnusable,
            format!("DH group {:#x}", c.dh_id),
        )
    })?;
    if group == DhGroup::Null {
        if !c.dh_value.is_empty() {
            return Err(failed(
                FailureReason::IncorrectPayload,
                "DH value with the null group",
            ));
        }
        return Ok((hash, group, None, None));
    }
    let dh = KeyPair::generate(group).map_err(|e| failed(FailureReason::Failed, e.to_string()))?;
    let ks = dh
        .shared_secret(&c.dh_value)
        .map_err(|e| failed(FailureReason::DhGroupUnusable, e.to_string()))?;
    Ok((hash, group, Some(dh), Some(ks)))
}

/// A failure not worth a failure2 (the transport broke, or the controller already said no).
fn quiet(what: String) -> Failed {
    Failed {
        reason: FailureReason::Failed,
        what,
        tell: false,
    }
}
