//! The Fabrics Connect command on a queue (admin or I/O), the in-band authentication it may
//! require, and what a refused Connect's status says about why.

use rdmablk::nvme::fabrics::InvalidParam;
use rdmablk::nvme::{CommandKind, Connect, ConnectData, Nqn, Status};

use super::Setup;
use crate::error::{Error, Result};
use crate::queue::Queue;

impl Setup<'_> {
    pub(crate) fn fabrics_connect(
        &self,
        q: &mut Queue,
        qid: u16,
        sqsize: u16,
        cntlid: u16,
        kato_ms: u32,
    ) -> Result<u16> {
        let subnqn = Nqn::new(&self.url.subnqn).map_err(Error::wire)?;
        let hostnqn = Nqn::new(&self.opts.hostnqn).map_err(Error::wire)?;
        let data = ConnectData {
            hostid: self.opts.hostid,
            cntlid,
            subnqn,
            hostnqn: Some(hostnqn),
        }
        .encode();
        let cmd = Connect {
            qid,
            sqsize,
            cattr: 0,
            kato_ms,
        };
        // The data pointer is filled by the queue (keyed SGL over the registered copy).
        let sqe = cmd.to_sqe(
            0,
            &rdmablk::nvme::Sgl::InCapsule(rdmablk::nvme::InCapsuleSgl { offset: 0, len: 0 }),
        );
        let (cqe, _) =
            self.admin_cmd(q, sqe, Some((true, data.to_vec(), data.len())), "Connect")?;
        if !cqe.status.is_success() {
            return Err(Error::ConnectRefused {
                qid,
                subnqn: self.url.subnqn.clone(),
                status: cqe.status,
                reason: connect_refusal(cqe.status, cqe.dw0, &self.opts.hostnqn),
            });
        }
        crate::auth::authenticate(self, q, qid, cqe.dw0)?;
        let got = cqe.dw0 as u16;
        if qid != 0 && got != cntlid {
            tracing::debug!(
                qid,
                got,
                cntlid,
                "I/O queue Connect returned another cntlid"
            );
        }
        Ok(if qid == 0 { got } else { cntlid })
    }
}

/// Says why a Connect was refused, from its status and result (IPO/IATTR).
pub(crate) fn connect_refusal(status: Status, dw0: u32, hostnqn: &str) -> String {
    if status == Status::CONNECT_INVALID_PARAMETERS
        || status.sc == Status::CONNECT_INVALID_PARAMETERS.sc
            && status.sct == Status::CONNECT_INVALID_PARAMETERS.sct
    {
        let p = InvalidParam::from_dw0(dw0);
        return match p.field_name() {
            "subnqn" => {
                "unknown subsystem NQN (the target does not export it; check the NQN)".into()
            }
            "hostnqn" => format!("host NQN {hostnqn} is invalid"),
            "cntlid" => "unknown controller ID (the controller went away: reconnect)".into(),
            f => format!("invalid Connect parameter {f}"),
        };
    }
    if status.sct == Status::CONNECT_INVALID_HOST.sct
        && status.sc == Status::CONNECT_INVALID_HOST.sc
    {
        return format!(
            "host {hostnqn} is not allowed to access the subsystem (add it to the subsystem's \
             allowed hosts, or allow any host)"
        );
    }
    if status.sct == Status::CONNECT_CONTROLLER_BUSY.sct
        && status.sc == Status::CONNECT_CONTROLLER_BUSY.sc
    {
        return "controller busy (the queue is already connected, or the target is out of controllers)".into();
    }
    status.display_for(CommandKind::Fabrics).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdmablk::nvme::fabrics::{self, ConnectFailure};

    #[test]
    fn connect_refusals_name_the_cause() {
        let f = ConnectFailure::invalid_data(fabrics::offset::SUBNQN);
        let s = connect_refusal(f.status, f.dw0(), "nqn.h");
        assert!(s.contains("unknown subsystem NQN"), "{s}");
        let f = ConnectFailure::invalid_host();
        let s = connect_refusal(f.status, f.dw0(), "nqn.h");
        assert!(s.contains("not allowed") && s.contains("nqn.h"), "{s}");
        let s = connect_refusal(Status::CONNECT_CONTROLLER_BUSY, 0, "nqn.h");
        assert!(s.contains("busy"), "{s}");
        let s = connect_refusal(Status::INTERNAL, 0, "nqn.h");
        assert!(!s.is_empty());
    }
}
