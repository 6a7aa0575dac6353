//! Per-host namespace visibility end to end: two hosts on one subsystem, each seeing only
//! its namespaces (Identify, the ANA log, SMART per namespace, I/O), and a reload that moves a
//! namespace from one host to the other without a reconnect, with events only to the hosts
//! concerned.

mod common;

use common::*;
use rdmablk::nvme::admin::AsyncEvent;
use rdmablk::nvme::ana::AnaLog;
use rdmablk::nvme::identify::{cns, decode_ns_list, IdentifyNamespace};
use rdmablk::nvme::log_page::lid;
use rdmablk::nvme::{GetLogPage, Status};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

/// Namespace 1 seen by `a_sees_1` (host A) or host B, 2 by host B, 3 by `ns3` (a `hosts` line
/// or nothing: every host).
fn cfg(port: u16, ns1: &str, ns3: &str) -> Config {
    let (kind, address) = e2e_fabric();
    let text = format!(
        r#"
[[listener]]
provider = "{}"
address = "{address}"
port = {port}

[target]
worker_threads = 2

[arena]
bytes = "32MiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = 131072

[[subsystem]]
nqn = "{SUBNQN}"
hosts = ["{HOSTNQN}", "{OTHER_HOSTNQN}"]

[[subsystem.namespace]]
nsid = 1
block_size = 512
{ns1}
backend = {{ kind = "ram", size = "4MiB" }}

[[subsystem.namespace]]
nsid = 2
block_size = 512
hosts = ["{OTHER_HOSTNQN}"]
backend = {{ kind = "ram", size = "4MiB" }}

[[subsystem.namespace]]
nsid = 3
block_size = 512
{ns3}
backend = {{ kind = "ram", size = "4MiB" }}
"#,
        kind.as_str()
    );
    Config::from_str(&text).expect("test config")
}

fn only(host: &str) -> String {
    format!("hosts = [\"{host}\"]")
}

fn active(h: &mut Host) -> Vec<u32> {
    let (c, b) = identify_page(h, cns::ACTIVE_NS_LIST, 0);
    assert_status(&c, Status::SUCCESS);
    decode_ns_list(&b).expect("a namespace list")
}

fn ana_nsids(h: &mut Host) -> Vec<u32> {
    let mut sqe = GetLogPage::new(lid::ANA, 0xFFFF_FFFF, 0, 4096).to_sqe(0);
    sqe.set_sgl(&h.keyed(0, 4096));
    assert_status(&h.submit(sqe, &[]), Status::SUCCESS);
    let log = AnaLog::decode(&h.read_data(0, 4096)).expect("an ANA log");
    let mut ids: Vec<u32> = log.groups.iter().flat_map(|g| g.nsids.clone()).collect();
    ids.sort_unstable();
    ids
}

fn smart_of(h: &mut Host, nsid: u32) -> rdmablk::nvme::Cqe {
    let mut sqe = GetLogPage::new(lid::SMART, nsid, 0, 512).to_sqe(0);
    sqe.set_sgl(&h.keyed(0, 512));
    h.submit(sqe, &[])
}

fn expect_ns_event(h: &mut Host, cid: u16) {
    let aen = h.wait_response().expect("the AER completes");
    assert_eq!(aen.cid, cid);
    assert_eq!(AsyncEvent::from_dw0(aen.dw0), AsyncEvent::ns_changed());
}

#[test]
fn each_host_sees_only_its_namespaces_and_a_reload_moves_one_live() {
    init_tracing();
    let port = free_port();
    let t = Target::start(cfg(port, &only(HOSTNQN), "")).expect("target starts");
    let (mut a, a_id) = admin_queue_as(t.local_addrs()[0], HOSTNQN, 0);
    let (mut b, b_id) = admin_queue_as(t.local_addrs()[0], OTHER_HOSTNQN, 0);

    // What each host sees.
    assert_eq!(active(&mut a), vec![1, 3]);
    assert_eq!(active(&mut b), vec![2, 3]);
    assert_eq!(ana_nsids(&mut a), vec![1, 3]);
    assert_eq!(ana_nsids(&mut b), vec![2, 3]);
    let (c, page) = identify_page(&mut a, cns::NAMESPACE, 2);
    assert_status(&c, Status::SUCCESS);
    assert!(page.iter().all(|&x| x == 0), "a hidden NSID is inactive");
    let (c, page) = identify_page(&mut b, cns::NAMESPACE, 2);
    assert_status(&c, Status::SUCCESS);
    assert_eq!(IdentifyNamespace::decode(&page).nsze, 8192);
    let (c, _) = identify_page(&mut a, cns::NS_DESC_LIST, 2);
    assert_status(&c, Status::INVALID_NAMESPACE);
    assert_status(&smart_of(&mut a, 2), Status::INVALID_NAMESPACE);
    assert_status(&smart_of(&mut b, 2), Status::SUCCESS);

    // I/O: a hidden namespace is an invalid one, a visible one works.
    let mut qa = io_queue_as(t.local_addrs()[0], HOSTNQN, 1, a_id);
    let mut qb = io_queue_as(t.local_addrs()[0], OTHER_HOSTNQN, 1, b_id);
    let c = qa.rw(true, 2, 0, 8);
    assert_status(&c, Status::INVALID_NAMESPACE);
    assert!(c.status.dnr, "Invalid Namespace carries DNR");
    assert_status(&qa.rw(false, 2, 0, 8), Status::INVALID_NAMESPACE);
    assert_status(&qa.rw(true, 1, 0, 8), Status::SUCCESS);
    assert_status(&qb.rw(true, 1, 0, 8), Status::INVALID_NAMESPACE);
    assert_status(&qb.rw(true, 2, 0, 8), Status::SUCCESS);
    assert_status(&qb.rw(false, 3, 0, 8), Status::SUCCESS);

    // Namespace 1 moves from host A to host B, in place (not reopened: its data stays).
    arm_ns_events(&mut a, 0x7000);
    arm_ns_events(&mut b, 0x7001);
    let pattern_a = pattern(11, 4096);
    qa.write_data(0, &pattern_a);
    assert_status(&qa.rw(true, 1, 16, 8), Status::SUCCESS);
    let changes = t
        .handle()
        .apply(cfg(port, &only(OTHER_HOSTNQN), ""))
        .expect("reload");
    assert!(
        changes
            .iter()
            .any(|c| c.contains(&format!("namespace 1 visible to {OTHER_HOSTNQN}"))),
        "{changes:?}"
    );
    assert!(
        !changes.iter().any(|c| c.contains("replaced")),
        "{changes:?}"
    );
    expect_ns_event(&mut a, 0x7000);
    expect_ns_event(&mut b, 0x7001);
    assert_eq!(changed_namespaces(&mut a), vec![1]);
    assert_eq!(changed_namespaces(&mut b), vec![1]);
    assert_eq!(active(&mut a), vec![3]);
    assert_eq!(active(&mut b), vec![1, 2, 3]);
    assert_status(&qa.rw(false, 1, 16, 8), Status::INVALID_NAMESPACE);
    assert_status(&qb.rw(false, 1, 16, 8), Status::SUCCESS);
    assert_eq!(
        qb.read_data(0, 4096),
        pattern_a,
        "the namespace kept its data"
    );

    // Namespace 3 is hidden from host A only: A hears of it, B does not. Then namespace 2
    // is shown to every host: A hears of it, B (which saw it already) does not. B's list
    // after both holds neither, so B got no event for either.
    arm_ns_events(&mut a, 0x7002);
    arm_ns_events(&mut b, 0x7003);
    t.handle()
        .apply(cfg(port, &only(OTHER_HOSTNQN), &only(OTHER_HOSTNQN)))
        .expect("reload");
    expect_ns_event(&mut a, 0x7002);
    assert_eq!(changed_namespaces(&mut a), vec![3]);
    assert_eq!(active(&mut a), Vec::<u32>::new());
    arm_ns_events(&mut a, 0x7004);
    let mut shown = cfg(port, &only(OTHER_HOSTNQN), &only(OTHER_HOSTNQN));
    shown.subsystems[0].namespaces[1].hosts = None;
    t.handle().apply(shown.clone()).expect("reload");
    expect_ns_event(&mut a, 0x7004);
    assert_eq!(changed_namespaces(&mut a), vec![2]);
    assert_eq!(active(&mut a), vec![2]);
    // B's Async Event Request is still outstanding and its list empty.
    assert_eq!(changed_namespaces(&mut b), Vec::<u32>::new());
    assert_status(&qb.rw(false, 3, 0, 8), Status::SUCCESS);

    // An empty list hides the namespace from every host: both hear of it.
    shown.subsystems[0].namespaces[1].hosts = Some(Vec::new());
    t.handle().apply(shown).expect("reload");
    expect_ns_event(&mut b, 0x7003);
    assert_eq!(changed_namespaces(&mut b), vec![2]);
    arm_ns_events(&mut a, 0x7005);
    expect_ns_event(&mut a, 0x7005);
    assert_eq!(changed_namespaces(&mut a), vec![2]);
    assert_eq!(active(&mut a), Vec::<u32>::new());
    assert_eq!(active(&mut b), vec![1, 3]);

    drop((a, b, qa, qb));
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn a_namespace_host_the_subsystem_does_not_admit_is_refused_naming_the_key() {
    let mut c = cfg(free_port(), "", "");
    c.subsystems[0].namespaces[2].hosts = Some(vec!["nqn.2026-11.io.rdmablk:stranger".into()]);
    let e = c.validate().expect_err("refused").to_string();
    assert!(
        e.contains("subsystem[0].namespace[2].hosts[0]") && e.contains("not in the subsystem"),
        "{e}"
    );
}
