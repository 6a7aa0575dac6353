//! Tests that run on any machine: errors without a device are the documented ones.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use crate::fabric::{resolve, Device, FabricError, ProviderKind};

#[test]
fn list_works_with_or_without_devices() {
    let names = Device::list(ProviderKind::Verbs).expect("listing never fails for lack of RDMA");
    assert!(names.iter().all(|n| !n.is_empty()));
}

#[test]
fn open_unknown_name_is_no_device() {
    match Device::open(ProviderKind::Verbs, Some("nope")) {
        Err(FabricError::NoDevice { what }) => assert!(what.contains("nope"), "{what}"),
        other => panic!("expected NoDevice, got {other:?}"),
    }
}

#[test]
fn open_first_without_devices_is_no_device() {
    if !Device::list(ProviderKind::Verbs).unwrap().is_empty() {
        eprintln!("SKIP open_first_without_devices_is_no_device: this machine has RDMA devices");
        return;
    }
    let e = Device::open(ProviderKind::Verbs, None).unwrap_err();
    assert!(matches!(e, FabricError::NoDevice { .. }), "{e:?}");
    assert!(
        e.to_string().contains("soft provider"),
        "the error names the fallback: {e}"
    );
}

#[test]
fn open_for_unconfigured_addr_is_no_device() {
    // 192.0.2.0/24 is TEST-NET-1: never configured on a test machine.
    let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 77));
    let e = Device::open_for_addr(ProviderKind::Verbs, ip).unwrap_err();
    assert!(matches!(e, FabricError::NoDevice { .. }), "{e:?}");
}

#[test]
fn resolve_without_rdma_fails_clearly() {
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 77)), 4420);
    let e = resolve(ProviderKind::Verbs, addr, Duration::from_millis(300)).unwrap_err();
    assert!(
        matches!(
            e,
            FabricError::NoDevice { .. }
                | FabricError::Unreachable { .. }
                | FabricError::Timeout { .. }
        ),
        "{e:?}"
    );
}
