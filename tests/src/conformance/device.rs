//! Device attributes are sane and consistent with what the device does.

use rdmablk::fabric::{Device, FabricError};

use super::case;
use crate::check::{CaseResult, OrFail};
use crate::harness::{Case, Side};
use crate::{ensure, ensure_eq};

pub const CASES: &[Case] = &[case!("device_attr_sane", device_attr, device_attr)];

/// Both halves check their own device (in two-process mode they may differ).
fn device_attr(side: &mut Side<'_>) -> CaseResult {
    let dev = &side.ctl.ep.device;
    let names = Device::list(side.kind).or_fail("Device::list")?;
    ensure!(
        names.contains(&dev.name()),
        "Device::list {names:?} lacks the device in use {:?}",
        dev.name()
    );
    let a = dev.attr().or_fail("Device::attr")?;
    ensure_eq!(a.name, dev.name(), "attr.name");
    ensure!(
        a.port_active,
        "attr.port_active is false on a connected device"
    );
    ensure!(
        a.max_qp >= 66,
        "attr.max_qp {} < 66 (the scale case needs 64 + control)",
        a.max_qp
    );
    ensure!(
        a.max_qp_wr >= 128,
        "attr.max_qp_wr {} < 128 (default QpCaps)",
        a.max_qp_wr
    );
    ensure!(
        a.max_sge >= 4,
        "attr.max_sge {} < 4 (default QpCaps)",
        a.max_sge
    );
    ensure!(a.max_cqe >= 256, "attr.max_cqe {} < 256", a.max_cqe);
    ensure!(a.max_mr >= 64, "attr.max_mr {} < 64", a.max_mr);
    ensure!(
        a.max_mr_size >= 1 << 20,
        "attr.max_mr_size {} < 1 MiB",
        a.max_mr_size
    );
    ensure!(a.max_qp_rd_atom >= 1, "attr.max_qp_rd_atom is 0");
    ensure!(a.max_qp_init_rd_atom >= 1, "attr.max_qp_init_rd_atom is 0");
    let qp = &side.ctl.ep.qp;
    ensure!(
        u32::from(qp.initiator_depth()) <= a.max_qp_init_rd_atom,
        "QP initiator depth {} exceeds attr.max_qp_init_rd_atom {}",
        qp.initiator_depth(),
        a.max_qp_init_rd_atom
    );
    ensure!(
        u32::from(qp.responder_resources()) <= a.max_qp_rd_atom,
        "QP responder resources {} exceed attr.max_qp_rd_atom {}",
        qp.responder_resources(),
        a.max_qp_rd_atom
    );
    match side.ctl.ep.pd.alloc_mw() {
        Ok(_) => {
            ensure!(a.mw_type2, "alloc_mw succeeded but attr.mw_type2 is false");
            ensure!(a.max_mw > 0, "alloc_mw succeeded but attr.max_mw is 0");
        }
        Err(FabricError::Unsupported { .. }) => {
            ensure!(
                !a.mw_type2,
                "attr.mw_type2 is true but alloc_mw is Unsupported"
            );
        }
        Err(e) => ensure!(false, "Pd::alloc_mw: {e}"),
    }
    Ok(())
}
