//! The discovery controller end to end: a raw test host connects to the well-known discovery
//! NQN (and the target's unique one) and reads the Discovery Log Page as `nvme discover` does.

mod common;

use common::*;
use rdmablk::nvme::discovery::{
    subtype, trtype, DiscoveryLogEntry, DiscoveryLogHeader, DISCOVERY_RECORD_LEN,
};
use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::identify::{cns, CNTRLTYPE_DISCOVERY, IDENTIFY_LEN};
use rdmablk::nvme::log_page::lid;
use rdmablk::nvme::opcodes::admin;
use rdmablk::nvme::{GetLogPage, IdentifyCmd, IdentifyController, Sqe, Status};

const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
const UNIQUE_NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:6c0d2d6a-6f3e-4d3c-9a51-0a7a31d2b2c4";

/// A discovery admin queue of `hostnqn` through Connect (KATO 0, as `nvme discover`) and
/// CC.EN.
fn discovery_queue(addr: std::net::SocketAddr, subnqn: &str, hostnqn: &str) -> (Host, u16) {
    let mut h = Host::connect(addr, cm_request(0, 32)).expect("admin CM connect");
    let c = h.fabrics_connect(0, subnqn, hostnqn, CNTLID_DYNAMIC, 0);
    assert!(c.status.is_success(), "discovery connect: {}", c.status);
    let c = h.property_set(rdmablk::nvme::properties::CC, 0x0046_0001);
    assert!(c.status.is_success(), "CC.EN: {}", c.status);
    (h, c.dw0 as u16)
}

fn get_log(h: &mut Host, offset: u64, len: u32) -> (rdmablk::nvme::Cqe, Vec<u8>) {
    let mut sqe = GetLogPage::new(lid::DISCOVERY, 0, offset, u64::from(len)).to_sqe(0);
    sqe.set_sgl(&h.keyed(0, len));
    let c = h.submit(sqe, &[]);
    (c, h.read_data(0, len as usize))
}

/// Reads the log the way libnvme does: the header, then the whole log; checks that the
/// generation did not change in between.
fn read_log(h: &mut Host) -> (DiscoveryLogHeader, Vec<DiscoveryLogEntry>) {
    let (c, head) = get_log(h, 0, DISCOVERY_RECORD_LEN as u32);
    assert_status(&c, Status::SUCCESS);
    let hdr = DiscoveryLogHeader::decode(&head).expect("header");
    let total = DISCOVERY_RECORD_LEN * (hdr.numrec as usize + 1);
    let (c, all) = get_log(h, 0, total as u32);
    assert_status(&c, Status::SUCCESS);
    let again = DiscoveryLogHeader::decode(&all).unwrap();
    assert_eq!(again, hdr, "the log changed between reads");
    let entries = (1..=hdr.numrec as usize)
        .map(|i| DiscoveryLogEntry::decode(&all[i * DISCOVERY_RECORD_LEN..]).unwrap())
        .collect();
    (hdr, entries)
}

#[test]
fn discovery_log_lists_what_the_host_may_connect_to() {
    let referral = "\n[[referral]]\naddress = \"192.0.2.77\"\nport = 4421\n";
    let extra = format!("discovery_nqn = \"{UNIQUE_NQN}\"\n{referral}");
    let (t, addr) = start_target("32MiB", &extra);

    // An allowed host: one entry for the subsystem on the one listener, then the referral.
    let (mut h, _) = discovery_queue(addr, DISCOVERY_NQN, HOSTNQN);
    let mut sqe = IdentifyCmd {
        cns: cns::CONTROLLER,
        cntid: 0,
        csi: 0,
        nsid: 0,
    }
    .to_sqe(0);
    sqe.set_sgl(&h.keyed(0, IDENTIFY_LEN as u32));
    assert_status(&h.submit(sqe, &[]), Status::SUCCESS);
    let mut page = [0u8; IDENTIFY_LEN];
    page.copy_from_slice(&h.read_data(0, IDENTIFY_LEN));
    let id = IdentifyController::decode(&page).expect("identify");
    assert_eq!(id.cntrltype, CNTRLTYPE_DISCOVERY);
    assert_eq!(id.nn, 0, "a discovery controller has no namespaces");
    assert_eq!(id.subnqn.as_ref().map(|n| n.as_str()), Some(UNIQUE_NQN));

    let (hdr, entries) = read_log(&mut h);
    assert_eq!(hdr.numrec, 2, "{entries:?}");
    let e = &entries[0];
    assert_eq!(
        (e.trtype, e.subtype, e.cntlid, e.asqsz),
        (trtype::RDMA, subtype::NVME, CNTLID_DYNAMIC, 32)
    );
    assert_eq!(e.subnqn, SUBNQN);
    assert_eq!(e.traddr, addr.ip().to_string());
    assert_eq!(e.trsvcid, addr.port().to_string());
    assert_eq!(
        &e.tsas[..3],
        &[1, 1, 1],
        "RDMA TSAS: RC, no provider type, RDMA CM"
    );
    let r = &entries[1];
    assert_eq!(
        (r.subtype, r.traddr.as_str()),
        (subtype::REFERRAL, "192.0.2.77")
    );
    assert_eq!(
        (r.trsvcid.as_str(), r.subnqn.as_str()),
        ("4421", DISCOVERY_NQN)
    );

    // Reads at an offset (libnvme reads large logs in pieces) see the same bytes.
    let (_, whole) = get_log(&mut h, 0, 3 * DISCOVERY_RECORD_LEN as u32);
    let (c, tail) = get_log(&mut h, 2048, 1024);
    assert_status(&c, Status::SUCCESS);
    assert_eq!(tail, whole[2048..3072]);
    // An offset past the log is refused.
    let (c, _) = get_log(&mut h, 64 << 10, 1024);
    assert_status(&c, Status::INVALID_FIELD);

    // What a discovery controller does not have.
    let mut sqe = GetLogPage::new(lid::SMART, 0, 0, 512).to_sqe(0);
    sqe.set_sgl(&h.keyed(0, 512));
    assert_status(&h.submit(sqe, &[]), Status::INVALID_FIELD);
    let mut sqe = IdentifyCmd {
        cns: cns::NAMESPACE,
        cntid: 0,
        csi: 0,
        nsid: 1,
    }
    .to_sqe(0);
    sqe.set_sgl(&h.keyed(0, IDENTIFY_LEN as u32));
    assert_status(&h.submit(sqe, &[]), Status::INVALID_FIELD);
    assert_status(
        &h.submit(Sqe::new(admin::ABORT, 0), &[]),
        Status::INVALID_OPCODE,
    );
    assert_status(
        &h.submit(Sqe::new(admin::KEEP_ALIVE, 0), &[]),
        Status::SUCCESS,
    );
    drop(h);

    // A host not on the allow-list learns of no subsystem, only of the referral.
    let (mut other, _) = discovery_queue(addr, UNIQUE_NQN, OTHER_HOSTNQN);
    let (hdr, entries) = read_log(&mut other);
    assert_eq!(hdr.numrec, 1, "{entries:?}");
    assert_eq!(entries[0].subtype, subtype::REFERRAL);
    drop(other);

    // A discovery controller has no I/O queues.
    let (_admin, cntlid) = discovery_queue(addr, DISCOVERY_NQN, HOSTNQN);
    let mut q = Host::connect(addr, cm_request(1, DEPTH as u16)).unwrap();
    let c = q.fabrics_connect(1, DISCOVERY_NQN, HOSTNQN, cntlid, 0);
    assert_status(&c, Status::CONNECT_INVALID_PARAMETERS);
    drop(q);
    drop(_admin);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn io_controllers_have_no_discovery_log() {
    let (t, addr) = start_target("32MiB", "");
    let (mut h, _) = admin_queue(addr, 0);
    let (c, _) = get_log(&mut h, 0, 1024);
    assert_status(&c, Status::INVALID_LOG_PAGE);
    drop(h);
    wait_idle(&t);
    t.shutdown();
}
