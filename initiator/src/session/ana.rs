//! Asymmetric Namespace Access at bring-up: reading the ANA log (sized to what the controller
//! reports, within one transfer) and arming the ANA change notices (Asynchronous Event
//! Configuration and one Asynchronous Event Request held on the admin queue).

use rdmablk::nvme::ana::{AnaLog, GROUP_LEN, HEADER_LEN};
use rdmablk::nvme::identify::oaes;
use rdmablk::nvme::log_page::lid;
use rdmablk::nvme::{admin as nvme_admin, features, GetLogPage, SetFeatures};

use super::{Setup, AER_TAG};
use crate::error::{Error, Result};
use crate::queue::Queue;

impl Setup<'_> {
    /// Reads the ANA log (at most `len` bytes, a multiple of 4); the event it answers, if any,
    /// is cleared (RAE 0).
    pub(crate) fn read_ana_log(&self, q: &mut Queue, len: usize) -> Result<AnaLog> {
        let sqe = GetLogPage::new(lid::ANA, 0, 0, len as u64).to_sqe(0);
        let (_, data) = self.admin_cmd(q, sqe, Some((false, Vec::new(), len)), "Get Log Page")?;
        AnaLog::decode(&data.unwrap_or_default()).map_err(|e| Error::Protocol {
            what: e.to_string(),
        })
    }

    /// Enables ANA change notices and posts the Asynchronous Event Request that carries them.
    pub(super) fn arm_ana_notices(&self, q: &mut Queue) -> Result<()> {
        let sqe = SetFeatures {
            fid: features::fid::ASYNC_EVENT_CONFIG,
            save: false,
            nsid: 0,
            value: oaes::ANA_CHANGE,
        }
        .to_sqe(0);
        self.admin_cmd(q, sqe, None, "Set Features (Async Event Configuration)")?;
        q.submit_held(nvme_admin::async_event_request_sqe(0), AER_TAG)
    }
}

/// Bytes of the largest ANA log `groups` groups and `namespaces` namespaces make, within
/// one transfer.
pub(crate) fn ana_log_bytes(groups: u32, namespaces: usize, max_transfer: u32) -> usize {
    let groups = (groups.clamp(1, 1024)) as usize;
    let want = HEADER_LEN + groups * GROUP_LEN + 4 * namespaces.max(1);
    want.min(max_transfer.max(4096) as usize)
        .next_multiple_of(4)
}
