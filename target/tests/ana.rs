//! Asymmetric Namespace Access end to end: two listeners of one target give the ANA groups of
//! one subsystem different states; a raw host reads what the Linux host reads (Identify, the
//! ANA log, the ANA change event) and sees I/O refused with the path status where a group is
//! inaccessible; a reload moves the states and tells only the listener's controllers.

mod common;

use std::net::SocketAddr;

use common::*;
use rdmablk::nvme::admin::AsyncEvent;
use rdmablk::nvme::ana::{AnaLog, AnaState, LSP_RGO};
use rdmablk::nvme::features::fid;
use rdmablk::nvme::identify::{anacap, cmic, cns, oaes};
use rdmablk::nvme::log_page::lid;
use rdmablk::nvme::opcodes::admin;
use rdmablk::nvme::{GetLogPage, IdentifyController, IdentifyNamespace, SetFeatures, Sqe, Status};
use rdmablk_target::config::Config;
use rdmablk_target::Target;

/// Two listeners (`ana1`, `ana2` are their `ana` tables); namespace 1 in ANA group 1,
/// namespace 2 in group 2; `sub_extra` goes into the subsystem table.
fn cfg(ports: (u16, u16), ana1: &str, ana2: &str, sub_extra: &str) -> Config {
    let (kind, address) = e2e_fabric();
    let provider = kind.as_str();
    let text = format!(
        r#"
[[listener]]
provider = "{provider}"
address = "{address}"
port = {}
ana = {{ {ana1} }}

[[listener]]
provider = "{provider}"
address = "{address}"
port = {}
ana = {{ {ana2} }}

[target]
worker_threads = 2
keep_alive_granularity_ms = 100

[arena]
bytes = "48MiB"
lock = false

[limits]
max_queue_depth = 32
max_io_size = 131072

[[subsystem]]
nqn = "{SUBNQN}"
hosts = ["{HOSTNQN}"]
{sub_extra}

[[subsystem.namespace]]
nsid = 1
block_size = 512
backend = {{ kind = "ram", size = "16MiB" }}

[[subsystem.namespace]]
nsid = 2
block_size = 512
ana_group = 2
backend = {{ kind = "ram", size = "16MiB" }}
"#,
        ports.0, ports.1
    );
    Config::from_str(&text).expect("test config")
}

fn start(ana2: &str) -> (Target, (u16, u16)) {
    init_tracing();
    let ports = (free_port(), free_port());
    let t = Target::start(cfg(ports, "", ana2, "")).expect("target starts");
    (t, ports)
}

fn addr(t: &Target, i: usize) -> SocketAddr {
    t.local_addrs()[i]
}

fn identified(h: &mut Host, cns: u8, nsid: u32) -> [u8; 4096] {
    let (c, b) = identify_page(h, cns, nsid);
    assert_status(&c, Status::SUCCESS);
    b
}

fn ana_log(h: &mut Host, lsp: u8) -> AnaLog {
    let mut glp = GetLogPage::new(lid::ANA, 0xFFFF_FFFF, 0, 4096);
    glp.lsp = lsp;
    let mut sqe = glp.to_sqe(0);
    sqe.set_sgl(&h.keyed(0, 4096));
    assert_status(&h.submit(sqe, &[]), Status::SUCCESS);
    AnaLog::decode(&h.read_data(0, 4096)).expect("a log the Linux host accepts")
}

/// Enables ANA change events and leaves an Async Event Request outstanding.
fn arm_ana_events(h: &mut Host) {
    let sf = SetFeatures {
        fid: fid::ASYNC_EVENT_CONFIG,
        value: oaes::ANA_CHANGE,
        save: false,
        nsid: 0,
    };
    assert_status(&h.submit(sf.to_sqe(0), &[]), Status::SUCCESS);
    let mut aer = Sqe::new(admin::ASYNC_EVENT_REQUEST, 0);
    aer.cid = 0x7000;
    h.send_capsule(&aer.to_bytes());
}

#[test]
fn identify_reports_ana_as_the_linux_host_needs_it() {
    let (t, _) = start("");
    let (mut h, _) = admin_queue(addr(&t, 0), 0);
    let id = IdentifyController::decode(&identified(&mut h, cns::CONTROLLER, 0)).unwrap();
    assert_ne!(id.cmic & cmic::ANA, 0, "CMIC.ANA");
    assert_ne!(id.cmic & cmic::MULTI_CTRL, 0);
    assert_ne!(id.oaes & oaes::ANA_CHANGE, 0, "OAES: ANA change notices");
    assert_eq!(id.anacap & anacap::ALL_STATES, anacap::ALL_STATES);
    assert!(id.anatt > 0);
    assert!(id.nanagrpid >= 2 && id.anagrpmax >= id.nanagrpid);
    // nvme_mpath_init_identify: MNAN non-zero and not above NN, and the whole log within MDTS.
    assert!(
        id.mnan > 0 && id.mnan <= id.nn,
        "mnan {} nn {}",
        id.mnan,
        id.nn
    );
    let log_size = 16 + 32 * id.nanagrpid as usize + 4 * id.mnan as usize;
    assert!(
        log_size <= (4096usize << id.mdts),
        "ANA log {log_size} bytes past MDTS"
    );
    let ns2 = IdentifyNamespace::decode(&identified(&mut h, cns::NAMESPACE, 2));
    assert_eq!(ns2.anagrpid, 2);
    let ns1 = IdentifyNamespace::decode(&identified(&mut h, cns::NAMESPACE, 1));
    assert_eq!(ns1.anagrpid, 1);
    drop(h);
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn each_listener_reports_its_states_and_refuses_io_on_an_inaccessible_group() {
    let (t, _) = start(r#"2 = "inaccessible""#);
    // Listener 1: every group optimized.
    let (mut a, cntlid_a) = admin_queue(addr(&t, 0), 0);
    let log = ana_log(&mut a, 0);
    assert_eq!(log.groups.len(), 2);
    assert_eq!(
        (
            log.groups[0].grpid,
            log.groups[0].state,
            &log.groups[0].nsids[..]
        ),
        (1, AnaState::Optimized, &[1][..])
    );
    assert_eq!(
        (
            log.groups[1].grpid,
            log.groups[1].state,
            &log.groups[1].nsids[..]
        ),
        (2, AnaState::Optimized, &[2][..])
    );
    // Listener 2: group 2 inaccessible; RGO leaves the NSIDs out.
    let (mut b, cntlid_b) = admin_queue(addr(&t, 1), 0);
    assert_ne!(cntlid_a, cntlid_b);
    let log = ana_log(&mut b, 0);
    assert_eq!(log.state_of(1), Some(AnaState::Optimized));
    assert_eq!(log.state_of(2), Some(AnaState::Inaccessible));
    // libnvme reads logs in 4 KiB pieces: past the groups, up to the largest log the
    // Identify fields allow, a piece is zeroes, not an error.
    let mut sqe = GetLogPage::new(lid::ANA, 0xFFFF_FFFF, 4096, 4096).to_sqe(0);
    sqe.set_sgl(&b.keyed(0, 4096));
    assert_status(&b.submit(sqe, &[]), Status::SUCCESS);
    assert!(b.read_data(0, 4096).iter().all(|&x| x == 0));
    let rgo = ana_log(&mut b, LSP_RGO);
    assert!(rgo.groups.iter().all(|g| g.nsids.is_empty()));
    assert_eq!(rgo.groups[1].state, AnaState::Inaccessible);

    // I/O: namespace 2 through listener 2 gets the path status without DNR (try elsewhere);
    // namespace 1 there, and both through listener 1, work.
    let mut io_b = io_queue(addr(&t, 1), 1, cntlid_b);
    let c = io_b.rw(false, 2, 0, 8);
    assert_status(&c, Status::ANA_INACCESSIBLE);
    assert!(
        !c.status.dnr,
        "an ANA status must let the host retry on another path"
    );
    assert_status(&io_b.rw(true, 2, 0, 8), Status::ANA_INACCESSIBLE);
    assert_status(&io_b.rw(false, 1, 0, 8), Status::SUCCESS);
    let mut io_a = io_queue(addr(&t, 0), 1, cntlid_a);
    assert_status(&io_a.rw(true, 2, 0, 8), Status::SUCCESS);
    drop((a, b, io_a, io_b));
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn a_reload_moves_the_states_and_tells_only_that_listeners_controllers() {
    let (t, ports) = start(r#"2 = "inaccessible""#);
    let (mut a, _) = admin_queue(addr(&t, 0), 0);
    let (mut b, cntlid_b) = admin_queue(addr(&t, 1), 0);
    arm_ana_events(&mut a);
    arm_ana_events(&mut b);
    let mut io_b = io_queue(addr(&t, 1), 1, cntlid_b);
    assert_status(&io_b.rw(false, 2, 0, 8), Status::ANA_INACCESSIBLE);
    let before = ana_log(&mut b, 0);

    // Group 2 through listener 2 becomes non-optimized.
    let changes = t
        .handle()
        .apply(cfg(ports, "", r#"2 = "non-optimized""#, ""))
        .expect("reload");
    assert!(
        changes
            .iter()
            .any(|c| c.contains("ANA group 2 non-optimized")),
        "{changes:?}"
    );
    let aen = b.wait_response().expect("the AER completes");
    assert_eq!(aen.cid, 0x7000);
    assert_eq!(AsyncEvent::from_dw0(aen.dw0), AsyncEvent::ana_changed());
    let after = ana_log(&mut b, 0);
    assert_eq!(after.state_of(2), Some(AnaState::NonOptimized));
    assert!(after.chgcnt > before.chgcnt, "the change count moves");
    assert!(after.groups[1].chgcnt > before.groups[1].chgcnt);
    assert_status(&io_b.rw(false, 2, 0, 8), Status::SUCCESS);

    // Listener 1's host saw nothing change, and got no event: the next event it gets is
    // the one a change of its own listener raises.
    t.handle()
        .apply(cfg(ports, r#"1 = "change""#, r#"2 = "non-optimized""#, ""))
        .expect("reload");
    let aen = a.wait_response().expect("the AER completes");
    assert_eq!(AsyncEvent::from_dw0(aen.dw0), AsyncEvent::ana_changed());
    assert_eq!(ana_log(&mut a, 0).state_of(1), Some(AnaState::Change));
    let cntlid_a = ana_cntlid(&mut a);
    let mut io_a = io_queue(addr(&t, 0), 1, cntlid_a);
    assert_status(&io_a.rw(false, 1, 0, 8), Status::ANA_TRANSITION);
    drop((a, b, io_a, io_b));
    wait_idle(&t);
    t.shutdown();
}

/// The cntlid of the controller behind admin queue `h` (Identify Controller).
fn ana_cntlid(h: &mut Host) -> u16 {
    IdentifyController::decode(&identified(h, cns::CONTROLLER, 0))
        .unwrap()
        .cntlid
}

#[test]
fn controller_ids_come_from_the_subsystems_range() {
    init_tracing();
    let ports = (free_port(), free_port());
    let t = Target::start(cfg(ports, "", "", "cntlid_min = 100\ncntlid_max = 101"))
        .expect("target starts");
    let (_a, c1) = admin_queue(addr(&t, 0), 0);
    let (_b, c2) = admin_queue(addr(&t, 1), 0);
    let mut ids = [c1, c2];
    ids.sort_unstable();
    assert_eq!(ids, [100, 101]);
    // The range is used up: the third admin Connect is refused, as busy.
    let mut h = Host::connect(addr(&t, 0), cm_request(0, 32)).expect("CM connect");
    let c = h.fabrics_connect(
        0,
        SUBNQN,
        HOSTNQN,
        rdmablk::nvme::fabrics::CNTLID_DYNAMIC,
        0,
    );
    assert_status(&c, Status::CONNECT_CONTROLLER_BUSY);
    drop(h);
    drop((_a, _b));
    wait_idle(&t);
    t.shutdown();
}

#[test]
fn bad_ana_settings_name_the_key() {
    let ports = (4420, 4421);
    let bad = [
        (
            cfg_text_err(ports, r#"0 = "optimized""#, ""),
            "listener[1].ana.0",
        ),
        (
            cfg_text_err(ports, r#"x = "optimized""#, ""),
            "listener[1].ana.x",
        ),
        (
            cfg_text_err(ports, r#"1 = "fast""#, ""),
            "listener[1].ana.1",
        ),
        (
            cfg_text_err(ports, "", "cntlid_min = 10\ncntlid_max = 5"),
            "subsystem[0].cntlid_min",
        ),
        (
            cfg_text_err(ports, "", "cntlid_max = 65520"),
            "subsystem[0].cntlid_min",
        ),
    ];
    for (err, key) in bad {
        assert!(err.contains(key), "{err:?} does not name {key}");
    }
    let text = cfg_text(ports, "", "").replace("ana_group = 2", "ana_group = 129");
    let err = Config::from_str(&text).unwrap_err().to_string();
    assert!(err.contains("subsystem[0].namespace[1].ana_group"), "{err}");
}

fn cfg_text(ports: (u16, u16), ana2: &str, sub_extra: &str) -> String {
    // A small configuration of the same shape, for tests of refusals.
    let (kind, address) = e2e_fabric();
    format!(
        "[[listener]]\nprovider = \"{p}\"\naddress = \"{address}\"\nport = {}\n\n\
         [[listener]]\nprovider = \"{p}\"\naddress = \"{address}\"\nport = {}\nana = {{ {ana2} }}\n\n\
         [[subsystem]]\nnqn = \"{SUBNQN}\"\nallow_any_host = true\n{sub_extra}\n\n\
         [arena]\nbytes = \"8MiB\"\nlock = false\n\n\
         [[subsystem.namespace]]\nnsid = 1\nbackend = {{ kind = \"ram\", size = \"1MiB\" }}\n\n\
         [[subsystem.namespace]]\nnsid = 2\nana_group = 2\n\
         backend = {{ kind = \"ram\", size = \"1MiB\" }}\n",
        ports.0,
        ports.1,
        p = kind.as_str()
    )
}

fn cfg_text_err(ports: (u16, u16), ana2: &str, sub_extra: &str) -> String {
    match Config::from_str(&cfg_text(ports, ana2, sub_extra)) {
        Ok(_) => panic!("accepted ana = {{ {ana2} }} / {sub_extra:?}"),
        Err(e) => e.to_string(),
    }
}
