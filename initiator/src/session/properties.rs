//! Controller properties over Fabrics (Property Get / Set): reading CAP, VS and CSTS,
//! enabling the controller (CC.EN, then waiting for CSTS.RDY up to CAP.TO) and the shutdown
//! notification a host sends on disconnect.

use std::time::{Duration, Instant};

use rdmablk::nvme::properties::{self as props};
use rdmablk::nvme::{Cap, Cc, Csts, PropertyGet, PropertySet, PropertySize};

use super::{fabrics_ok, Setup};
use crate::error::{Error, Result};
use crate::queue::Queue;

impl Setup<'_> {
    pub(crate) fn prop_get(&self, q: &mut Queue, offset: u32) -> Result<u64> {
        let size = PropertySize::of_offset(offset).unwrap_or(PropertySize::Four);
        let (cqe, _) = self.admin_cmd(
            q,
            PropertyGet { size, offset }.to_sqe(0),
            None,
            "Property Get",
        )?;
        fabrics_ok(cqe.status, "Property Get")?;
        Ok(match size {
            PropertySize::Eight => cqe.result64(),
            PropertySize::Four => u64::from(cqe.dw0),
        })
    }

    fn prop_set(&self, q: &mut Queue, offset: u32, value: u32) -> Result<()> {
        let sqe = PropertySet {
            size: PropertySize::Four,
            offset,
            value: u64::from(value),
        }
        .to_sqe(0);
        let (cqe, _) = self.admin_cmd(q, sqe, None, "Property Set")?;
        fabrics_ok(cqe.status, "Property Set")
    }

    pub(crate) fn enable(&self, q: &mut Queue, cap: Cap) -> Result<()> {
        let cc = Cc(0)
            .with_css(0)
            .with_mps(0)
            .with_iosqes(6)
            .with_iocqes(4)
            .with_en(true);
        self.prop_set(q, props::CC, cc.0)?;
        let limit = Duration::from_millis(500 * u64::from(cap.timeout_500ms().max(1)));
        let deadline = Instant::now() + limit;
        loop {
            let csts = Csts(self.prop_get(q, props::CSTS)? as u32);
            if csts.cfs() {
                return Err(Error::Controller {
                    what: "CSTS.CFS: controller fatal status after enable".into(),
                });
            }
            if csts.rdy() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Controller {
                    what: format!(
                        "CSTS.RDY not set {} ms after CC.EN (CAP.TO)",
                        limit.as_millis()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Best-effort shutdown notification (CC.SHN normal), as a host does on disconnect.
    pub fn shutdown(&self, admin: &mut Queue) {
        let cc = Cc(0)
            .with_iosqes(6)
            .with_iocqes(4)
            .with_en(true)
            .with_shn(props::shn::NORMAL);
        if let Err(e) = self.prop_set(admin, props::CC, cc.0) {
            tracing::debug!("shutdown notification: {e}");
        }
    }
}
