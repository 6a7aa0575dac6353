//! A target with two namespaces (1: read-write, 2: read-only) and helpers that build
//! commands field by field.

use std::net::SocketAddr;

use rdmablk::nvme::fabrics::{CNTLID_DYNAMIC, CONNECT_DATA_LEN};
use rdmablk::nvme::identify::IDENTIFY_LEN;
use rdmablk::nvme::properties::CC;
use rdmablk::nvme::{
    Connect, ConnectData, Cqe, GetFeatures, GetLogPage, IdentifyCmd, InCapsuleSgl, Nqn,
    SetFeatures, Sgl, Sqe, Status,
};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

use super::common::*;

/// Namespace 2: read-only, 1 MiB of RAM.
pub const RO_NSID: u32 = 2;
/// An NSID in the valid range that no namespace has.
pub const INACTIVE_NSID: u32 = 3;
/// CC as the Linux host writes it to enable the controller.
pub const CC_ENABLE: u64 = 0x0046_0001;

/// A running target (stopped when dropped; hosts declared after it in a test drop first).
pub struct Fx {
    pub addr: SocketAddr,
    _target: Target,
}

/// Starts a target with namespace 1 (read-write) and 2 (read-only); `extra_target` goes in
/// its `[target]` table. Over NVMe/TCP with digests (`RDMABLK_E2E_TCP_DIGESTS=1`) the target
/// is first shown to check both ([`tcp_target::assert_target_checks_digests`]).
pub fn target_with(extra_target: &str) -> Fx {
    init_tracing();
    let port = free_port();
    let mut text = config_text(port, "32MiB", extra_target);
    text.push_str(
        r#"
[[subsystem.namespace]]
nsid = 2
block_size = 512
read_only = true
backend = { kind = "ram", size = "1MiB" }
"#,
    );
    let cfg = Config::from_str(&text).expect("config");
    let target = Target::start(cfg).expect("target starts");
    if e2e_tcp() && e2e_tcp_digests() {
        // The rows run with both digests on: this target must check them, or the run
        // proves nothing of them.
        tcp_target::assert_target_checks_digests(&target);
    }
    let addr = target.local_addrs()[0];
    Fx {
        addr,
        _target: target,
    }
}

pub fn target() -> Fx {
    target_with("")
}

/// A target and an enabled admin queue (KATO 0) with its cntlid.
pub fn ready() -> (Fx, Host, u16) {
    let fx = target();
    let (h, cntlid) = admin_queue(fx.addr, 0);
    (fx, h, cntlid)
}

/// A target, an enabled admin queue and I/O queue 1.
pub fn with_io() -> (Fx, Host, Host) {
    let (fx, admin, cntlid) = ready();
    let q = io_queue(fx.addr, 1, cntlid);
    (fx, admin, q)
}

/// An admin queue CM-connected and Fabrics-connected, CC.EN not written.
pub fn connected_not_enabled(addr: SocketAddr) -> Host {
    let mut h = Host::connect(addr, cm_request(0, 32)).expect("admin CM connect");
    let c = h.fabrics_connect(0, SUBNQN, HOSTNQN, CNTLID_DYNAMIC, 0);
    ok(&c);
    h
}

pub fn enable(h: &mut Host) {
    ok(&h.property_set(CC, CC_ENABLE));
}

/// The status exactly: SCT, SC and DNR.
#[track_caller]
pub fn expect(c: &Cqe, want: Status) {
    assert!(
        c.status.sct == want.sct && c.status.sc == want.sc && c.status.dnr == want.dnr,
        "status {} (sct {:?} sc {:#x} dnr {}), wanted {} (sct {:?} sc {:#x} dnr {})",
        c.status,
        c.status.sct,
        c.status.sc,
        c.status.dnr,
        want,
        want.sct,
        want.sc,
        want.dnr
    );
}

#[track_caller]
pub fn ok(c: &Cqe) {
    expect(c, Status::SUCCESS);
}

/// `sqe` with a keyed SGL over `len` bytes of the host's data buffer.
pub fn keyed(h: &Host, mut sqe: Sqe, len: u32) -> Sqe {
    sqe.set_sgl(&h.keyed(0, len));
    sqe
}

pub fn identify_sqe(cns: u8, nsid: u32) -> Sqe {
    IdentifyCmd {
        cns,
        cntid: 0,
        csi: 0,
        nsid,
    }
    .to_sqe(0)
}

/// Identify with a 4096-byte keyed SGL; the status and the page.
pub fn identify(h: &mut Host, cns: u8, nsid: u32) -> (Cqe, Vec<u8>) {
    h.write_data(0, &[0xA5; IDENTIFY_LEN]);
    let sqe = keyed(h, identify_sqe(cns, nsid), IDENTIFY_LEN as u32);
    let c = h.submit(sqe, &[]);
    (c, h.read_data(0, IDENTIFY_LEN))
}

/// Get Log Page `lid` of `len` bytes from `offset`, SGL of the same length.
pub fn get_log(h: &mut Host, lid: u8, nsid: u32, offset: u64, len: u32) -> (Cqe, Vec<u8>) {
    let sqe = GetLogPage::new(lid, nsid, offset, u64::from(len)).to_sqe(0);
    let c = h.submit(keyed(h, sqe, len), &[]);
    (c, h.read_data(0, len as usize))
}

pub fn set_features(h: &mut Host, fid: u8, value: u32) -> Cqe {
    let sqe = SetFeatures {
        fid,
        save: false,
        nsid: 0,
        value,
    }
    .to_sqe(0);
    h.submit(sqe, &[])
}

pub fn get_features_sqe(fid: u8) -> Sqe {
    GetFeatures {
        fid,
        select: 0,
        nsid: 0,
        cdw11: 0,
    }
    .to_sqe(0)
}

pub fn get_features(h: &mut Host, fid: u8) -> Cqe {
    h.submit(get_features_sqe(fid), &[])
}

/// The Connect data of the test host for `subnqn`, with `cntlid`.
pub fn connect_data(subnqn: &str, cntlid: u16) -> [u8; CONNECT_DATA_LEN] {
    ConnectData {
        hostid: HOSTID,
        cntlid,
        subnqn: Nqn::new(subnqn).unwrap(),
        hostnqn: Some(Nqn::new(HOSTNQN).unwrap()),
    }
    .encode()
}

/// A Connect with every command field and the raw data under the caller's control; the
/// data goes keyed with an SGL of `sgl_len` bytes (admin) or in-capsule (I/O).
pub fn connect_raw(h: &mut Host, c: Connect, data: &[u8], sgl_len: u32) -> Cqe {
    if c.qid == 0 {
        h.write_data(0, data);
        let sqe = c.to_sqe(0, &h.keyed(0, sgl_len));
        h.submit(sqe, &[])
    } else {
        let sgl = Sgl::InCapsule(InCapsuleSgl {
            offset: 0,
            len: sgl_len,
        });
        h.submit(c.to_sqe(0, &sgl), data)
    }
}

/// The Connect the test host sends on queue `qid` with `sqsize`.
pub fn connect_cmd(qid: u16, sqsize: u16) -> Connect {
    Connect {
        qid,
        sqsize,
        cattr: 0,
        kato_ms: 0,
    }
}
