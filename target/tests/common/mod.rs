//! A raw NVMe-oF test host built directly on `rdmablk::fabric`, the loop transport's channel
//! and `rdmablk::nvme` (deliberately not the initiator crate): one command at a time, every
//! byte under the test's control, so bad input can be sent on purpose. The host queue is in
//! [`host`]; here are the target configuration the tests share and helpers on top.
//!
//! `RDMABLK_E2E_TRANSPORT=loop` runs the suites that use it over the loop transport (a target
//! in the test's process) instead of RDMA, `RDMABLK_E2E_TRANSPORT=tcp` over NVMe/TCP (the
//! target with a tcp listener; `RDMABLK_E2E_TCP_DIGESTS=1` adds header and data digests);
//! tests of RDMA itself skip there ([`skip_unless_rdma`]).
//!
//! The NVMe/TCP link is built on [`tcp_wire`], the same host's NVMe/TCP connection with every
//! byte under the test's control, which the NVMe/TCP-only tests drive by hand against the
//! target of [`tcp_target`].

#![allow(dead_code)]

mod host;
mod tcp_link;
pub mod tcp_target;
pub mod tcp_wire;
pub use host::*;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rdmablk::fabric::{FabricError, ProviderKind};
use rdmablk::nvme::fabrics::CNTLID_DYNAMIC;
use rdmablk::nvme::features::fid;
use rdmablk::nvme::identify::IDENTIFY_LEN;
use rdmablk::nvme::log_page::lid;
use rdmablk::nvme::opcodes::{admin, fctype, io};
use rdmablk::nvme::transport::rdma::{CmReject, CmRejectStatus};
use rdmablk::nvme::{Cqe, GetLogPage, IdentifyCmd, ReadWrite, SetFeatures, Sgl, Sqe, Status};
use rdmablk_target::Target;

pub const SUBNQN: &str = "nqn.2026-11.io.rdmablk:test";
pub const HOSTNQN: &str = "nqn.2026-11.io.rdmablk:host-a";
pub const OTHER_HOSTNQN: &str = "nqn.2026-11.io.rdmablk:host-b";
pub const HOSTID: [u8; 16] = *b"rdmablk-test-hid";
/// Namespace 1: 16 MiB of RAM in 512-byte blocks.
pub const NS_BLOCKS: u64 = 32768;
pub const BLOCK: u32 = 512;
pub const MAX_IO: u32 = 128 << 10;
pub const DEPTH: u32 = 32;
/// The in-capsule data a queue takes (`limits.in_capsule_data_size`).
pub const ICD: u32 = 4096;

/// How long a test waits for an event that takes milliseconds on an idle machine before it
/// calls it a hang. Only a hang guard: a loaded 2-core machine or a TCG VM (10-50x slower)
/// must never run into it, so no test asserts that something happened within a time.
pub const HANG_GUARD: Duration = Duration::from_secs(60);

/// The fabric these tests run on: `RDMABLK_E2E_PROVIDER` (`soft`, the default, or `verbs`)
/// at `RDMABLK_E2E_ADDR` (default 127.0.0.1; in the Soft-RoCE VM, rxe0's 10.0.2.15).
pub fn e2e_fabric() -> (ProviderKind, String) {
    let (kind, addr) = rdmablk_testkit::e2e_fabric();
    let kind = kind.parse::<ProviderKind>().expect("RDMABLK_E2E_PROVIDER");
    (kind, addr)
}

/// A free port (a free TCP port is free in the RDMA CM port space too, in practice).
pub fn free_port() -> u16 {
    rdmablk_testkit::free_port(&e2e_fabric().1)
}

/// The namespace line of [`config_text`]; a test that needs another backend replaces it.
pub const RAM_BACKEND: &str = r#"backend = { kind = "ram", size = "16MiB" }"#;

/// A target configuration text on `port` with `arena` bytes, listening on the transport the
/// tests run over ([`e2e_transport`]); one host, [`HOSTNQN`], may connect.
pub fn config_text(port: u16, arena: &str, extra_target: &str) -> String {
    let (kind, address) = e2e_fabric();
    let listener = match e2e_transport() {
        E2eTransport::Rdma => format!("provider = \"{}\"", kind.as_str()),
        E2eTransport::Loop => "transport = \"loop\"".to_string(),
        E2eTransport::Tcp => "transport = \"tcp\"".to_string(),
    };
    let limits = format!("max_queue_depth = {DEPTH}\nmax_connections = 16");
    target_text(
        &listener,
        &address,
        port,
        arena,
        extra_target,
        &limits,
        &[HOSTNQN],
    )
}

/// The configuration text of the NVMe/TCP-only tests' target (`tcp_target::start`): a tcp
/// listener on 127.0.0.1, I/O queues up to `max_queue_depth` deep, `extra_limits` lines in
/// its `[limits]` table; two hosts, [`HOSTNQN`] and [`OTHER_HOSTNQN`], may connect.
pub fn tcp_config_text(
    port: u16,
    arena: &str,
    extra_target: &str,
    max_queue_depth: u32,
    extra_limits: &str,
) -> String {
    let limits = format!("max_queue_depth = {max_queue_depth}\n{extra_limits}");
    let hosts = [HOSTNQN, OTHER_HOSTNQN];
    let listener = "transport = \"tcp\"";
    target_text(
        listener,
        "127.0.0.1",
        port,
        arena,
        extra_target,
        &limits,
        &hosts,
    )
}

/// A test target's configuration: one listener (`listener`: its transport or provider line),
/// one worker, `limits` lines beside the I/O size limits, subsystem [`SUBNQN`] for `hosts`
/// with namespace 1 ([`NS_BLOCKS`] of RAM).
fn target_text(
    listener: &str,
    address: &str,
    port: u16,
    arena: &str,
    extra_target: &str,
    limits: &str,
    hosts: &[&str],
) -> String {
    let hosts = hosts
        .iter()
        .map(|h| format!("\"{h}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
[[listener]]
{listener}
address = "{address}"
port = {port}

[target]
worker_threads = 1
poll_mode = "interrupt"
keep_alive_granularity_ms = 100
{extra_target}

[control]
socket = ""   # parallel tests: no shared default socket

[arena]
bytes = "{arena}"
lock = false

[limits]
max_io_size = {MAX_IO}
in_capsule_data_size = {ICD}
max_queues_per_controller = 4
{limits}

[[subsystem]]
nqn = "{SUBNQN}"
hosts = [{hosts}]

[[subsystem.namespace]]
nsid = 1
block_size = {BLOCK}
{RAM_BACKEND}
"#
    )
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}

/// Starts an in-process target from the configuration `text(port)` on a free port. The port
/// [`free_port`] picked may be taken by a test running in parallel before the target binds
/// it: then another port is tried (a few times), rather than failing the test.
pub fn start_on_free_port(text: impl Fn(u16) -> String) -> Target {
    Target::start_on_picked_port(text, free_port).unwrap_or_else(|e| panic!("target starts: {e:?}"))
}

/// Starts an in-process target; returns it and its address.
pub fn start_target(arena: &str, extra_target: &str) -> (Target, SocketAddr) {
    init_tracing();
    let t = start_on_free_port(|port| config_text(port, arena, extra_target));
    let addr = t.local_addrs()[0];
    (t, addr)
}

/// Waits until the target's arena is idle (no parcels) and no connection is left.
pub fn wait_idle(t: &Target) {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let s = t.arena_stats();
        if s.bytes_in_use == 0 && s.parcels == 0 && t.queues_open() == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "arena not idle: {s:?}, {} connections",
            t.queues_open()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes a pattern at every power-of-two size up to the largest I/O (consecutive LBAs from
/// 0, through data slot 0), reads each back and compares; returns the first (LBA, data).
pub fn write_read_each_size(q: &mut Host, what: &str) -> (u64, Vec<u8>) {
    let mut first = None;
    let mut lba = 0u64;
    let mut blocks = 1u32;
    while blocks * BLOCK <= MAX_IO {
        let len = (blocks * BLOCK) as usize;
        let data = pattern(lba + 1, len);
        q.write_data(0, &data);
        let c = q.rw(true, 1, lba, blocks);
        assert!(c.status.is_success(), "{what}: write {len}: {}", c.status);
        q.write_data(0, &vec![0u8; len]);
        let c = q.rw(false, 1, lba, blocks);
        assert!(c.status.is_success(), "{what}: read {len}: {}", c.status);
        assert_eq!(q.read_data(0, len), data, "{what}: data of {len} bytes");
        first.get_or_insert((lba, data));
        lba += u64::from(blocks);
        blocks *= 2;
    }
    first.expect("MAX_IO holds at least one block")
}

pub fn rw_sqe(write: bool, nsid: u32, lba: u64, blocks: u32, sgl: &Sgl) -> Sqe {
    let op = if write { io::WRITE } else { io::READ };
    let mut sqe = ReadWrite {
        nsid,
        slba: lba,
        nlb: (blocks - 1) as u16,
        fua: false,
        lr: false,
        dsm: 0,
    }
    .to_sqe(op, 0);
    sqe.set_sgl(sgl);
    sqe
}

/// An admin queue through Connect and CC.EN; returns it and the cntlid.
pub fn admin_queue(addr: SocketAddr, kato_ms: u32) -> (Host, u16) {
    admin_queue_as(addr, HOSTNQN, kato_ms)
}

/// [`admin_queue`] for host `hostnqn`.
pub fn admin_queue_as(addr: SocketAddr, hostnqn: &str, kato_ms: u32) -> (Host, u16) {
    let mut h = Host::connect(addr, cm_request(0, 32)).expect("admin CM connect");
    let c = h.fabrics_connect(0, SUBNQN, hostnqn, CNTLID_DYNAMIC, kato_ms);
    assert!(c.status.is_success(), "admin connect: {}", c.status);
    let cntlid = c.dw0 as u16;
    let c = h.property_set(rdmablk::nvme::properties::CC, 0x0046_0001);
    assert!(c.status.is_success(), "CC.EN: {}", c.status);
    (h, cntlid)
}

/// A connected I/O queue `qid` of controller `cntlid`.
pub fn io_queue(addr: SocketAddr, qid: u16, cntlid: u16) -> Host {
    io_queue_as(addr, HOSTNQN, qid, cntlid)
}

/// [`io_queue`] for host `hostnqn`.
pub fn io_queue_as(addr: SocketAddr, hostnqn: &str, qid: u16, cntlid: u16) -> Host {
    let mut h = Host::connect(addr, cm_request(qid, DEPTH as u16)).expect("I/O CM connect");
    let c = h.fabrics_connect(qid, SUBNQN, hostnqn, cntlid, 0);
    assert!(c.status.is_success(), "I/O connect: {}", c.status);
    h
}

/// Enables namespace-attribute events and leaves an Async Event Request (command ID `cid`)
/// outstanding.
pub fn arm_ns_events(h: &mut Host, cid: u16) {
    let sf = SetFeatures {
        fid: fid::ASYNC_EVENT_CONFIG,
        value: 1 << 8,
        save: false,
        nsid: 0,
    };
    assert_status(&h.submit(sf.to_sqe(0), &[]), Status::SUCCESS);
    let mut aer = Sqe::new(admin::ASYNC_EVENT_REQUEST, 0);
    aer.cid = cid;
    h.send_capsule(&aer.to_bytes());
}

/// Reads (and so clears) the Changed Namespace List.
pub fn changed_namespaces(h: &mut Host) -> Vec<u32> {
    let mut sqe = GetLogPage::new(lid::CHANGED_NS_LIST, 0xFFFF_FFFF, 0, 4096).to_sqe(0);
    sqe.set_sgl(&h.keyed(0, 4096));
    assert_status(&h.submit(sqe, &[]), Status::SUCCESS);
    h.read_data(0, 4096)
        .chunks(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .take_while(|&id| id != 0)
        .collect()
}

/// The reject status of a refused CM connect.
pub fn reject_status(r: Result<Host, FabricError>) -> CmRejectStatus {
    match r {
        Err(FabricError::Rejected { private_data, .. }) => {
            CmReject::decode(&private_data).expect("reject data").status
        }
        Err(e) => panic!("expected a reject, got {e}"),
        Ok(_) => panic!("expected a reject, got a connection"),
    }
}

pub fn assert_status(c: &Cqe, want: Status) {
    assert!(
        c.status.same_code(&want),
        "status {} (sct {:?} sc {:#x}), wanted {} (sct {:?} sc {:#x})",
        c.status,
        c.status.sct,
        c.status.sc,
        want,
        want.sct,
        want.sc
    );
}

pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    rdmablk_testkit::pattern(seed, len)
}

/// A fresh temporary directory for one test.
pub fn tmp_dir(name: &str) -> std::path::PathBuf {
    rdmablk_testkit::tmp_dir(name)
}

pub fn admin_sqe(opcode: u8) -> Sqe {
    Sqe::new(opcode, 0)
}

pub const ADMIN_IDENTIFY: u8 = admin::IDENTIFY;
pub const FABRICS_DISCONNECT: u8 = fctype::DISCONNECT;

/// Identify with CNS `cns` for `nsid`: the completion and the 4096 bytes.
pub fn identify_page(h: &mut Host, cns: u8, nsid: u32) -> (Cqe, [u8; IDENTIFY_LEN]) {
    let sgl = h.keyed(0, IDENTIFY_LEN as u32);
    let mut sqe = IdentifyCmd {
        cns,
        cntid: 0,
        csi: 0,
        nsid,
    }
    .to_sqe(0);
    sqe.set_sgl(&sgl);
    let c = h.submit(sqe, &[]);
    let mut b = [0u8; IDENTIFY_LEN];
    b.copy_from_slice(&h.read_data(0, IDENTIFY_LEN));
    (c, b)
}

/// Sends one Keep Alive on the admin queue `h`: `Err` with the text when the queue failed
/// (the controller torn down); a response other than success fails the test.
pub fn keep_alive(h: &mut Host) -> Result<(), String> {
    let c = h.try_submit(rdmablk::nvme::admin::keep_alive_sqe(0), &[])?;
    assert!(c.status.is_success(), "Keep Alive: {}", c.status);
    Ok(())
}

/// What [`keep_talking`] saw.
#[derive(Debug)]
pub struct Talk {
    /// An upper bound on the longest time the target can have gone without a command of the
    /// controller: from sending one command to the end of the next (the target reset its
    /// timer somewhere in each), the first measured from the caller's `since`.
    pub longest_silence: Duration,
    /// When the last command that got its response was sent.
    pub last_sent: Instant,
    /// The error of the command that failed (its queue was torn down), if one did.
    pub failure: Option<String>,
}

impl Talk {
    /// Whether the controller lived through the talk (true), or the test host itself was
    /// silent for `kato` before the controller went (false: inconclusive, try again). Fails
    /// the test if the controller went though the host was never silent that long.
    pub fn lived(&self, kato: Duration) -> bool {
        match &self.failure {
            None => true,
            Some(_) if self.longest_silence >= kato => {
                eprintln!("inconclusive: the test host was silent for {self:?} (KATO {kato:?})");
                false
            }
            Some(e) => panic!(
                "the controller was torn down though the host was never silent for its KATO \
                 {kato:?} (at most {:?}): {e}",
                self.longest_silence
            ),
        }
    }
}

/// Keep-alive tests: `n` commands of a controller through `say` (one command; `Err` when its
/// queue failed), `period` apart, so the controller lives at least `n * period`. `since` is
/// an instant taken before the controller's previous command was sent. Stops at the first
/// failure.
///
/// The caller judges a failure by [`Talk::longest_silence`]: the target may drop a host that
/// really was silent for its KATO (a starved test thread on a loaded machine), never one
/// that was not.
pub fn keep_talking(
    since: Instant,
    n: u32,
    period: Duration,
    mut say: impl FnMut() -> Result<(), String>,
) -> Talk {
    let mut talk = Talk {
        longest_silence: Duration::ZERO,
        last_sent: since,
        failure: None,
    };
    for _ in 0..n {
        std::thread::sleep(period);
        let sent = Instant::now();
        let r = say();
        talk.longest_silence = talk.longest_silence.max(talk.last_sent.elapsed());
        if let Err(e) = r {
            talk.failure = Some(e);
            return talk;
        }
        talk.last_sent = sent;
    }
    talk
}

/// Waits (up to [`HANG_GUARD`]) for the target to drop `h` because the controller's
/// keep-alive timer ran out, and checks that it came no earlier than `kato` after
/// `last_word`, an instant taken before the controller's last command was sent (the target
/// reset its timer after that instant, and cuts only after KATO has passed since). Returns
/// the time from `last_word` to the disconnect seen.
pub fn wait_keep_alive_cut(h: &Host, last_word: Instant, kato: Duration, what: &str) -> Duration {
    assert!(
        h.wait_disconnected(HANG_GUARD),
        "{what}: still connected {HANG_GUARD:?} into a silence (KATO {kato:?})"
    );
    let after = last_word.elapsed();
    assert!(
        after >= kato,
        "{what}: dropped {after:?} after the last command, before KATO {kato:?}"
    );
    after
}

/// The I/O counters of namespace `nsid` of `t`.
pub fn ns_counters(t: &Target, nsid: u32) -> rdmablk_target::metrics::NamespaceIo {
    rdmablk_target::metrics::namespace_io(&t.handle())
        .into_iter()
        .find(|n| n.nsid == nsid)
        .expect("namespace counters")
}

/// Sends `h`'s write of 8 blocks at LBA 0 (command `cid`) without waiting for it, and returns
/// once `t` runs it (its namespace counts a command in flight): an event, not a time.
pub fn start_write(t: &Target, h: &mut Host, nsid: u32, cid: u16) {
    let sgl = h.keyed(0, 8 * BLOCK);
    let mut w = rw_sqe(true, nsid, 0, 8, &sgl);
    w.cid = cid;
    h.send_capsule(&w.to_bytes());
    let deadline = Instant::now() + HANG_GUARD;
    while ns_counters(t, nsid).in_flight == 0 {
        assert!(Instant::now() < deadline, "the write never ran");
        std::thread::yield_now();
    }
}
