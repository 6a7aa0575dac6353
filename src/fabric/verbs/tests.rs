//! Verbs provider tests. The ones that need a device run on Soft-RoCE in a VM
//! (`tools/test-rxe`); elsewhere they print why they skip. With `RDMABLK_REQUIRE_RDMA=1` a
//! missing device fails them instead, so a harness can never pass without running them.

mod no_device;
mod smoke;
mod srq;

use crate::fabric::{Device, ProviderKind};

/// The device to test on, or `None` after printing why (panics when RDMA is required).
pub(super) fn device_or_skip(test: &str) -> Option<Device> {
    let required = std::env::var_os("RDMABLK_REQUIRE_RDMA").is_some_and(|v| v == "1");
    let why = match Device::list(ProviderKind::Verbs) {
        Ok(names) if names.is_empty() => "no RDMA device (ibv_devices lists none)".to_string(),
        Ok(_) => match Device::open(ProviderKind::Verbs, None) {
            Ok(d) => return Some(d),
            Err(e) => format!("cannot open an RDMA device: {e}"),
        },
        Err(e) => format!("cannot list RDMA devices: {e}"),
    };
    assert!(!required, "{test}: RDMABLK_REQUIRE_RDMA=1 but {why}");
    eprintln!("SKIP {test}: {why} (run tools/test-rxe for Soft-RoCE in a VM)");
    None
}
