//! Semantic checks of a parsed [`Config`]: each problem names the key and the fix.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use rdmablk::nvme::ana::AnaState;

use super::{
    validate_nqn, validate_uuid, BackendConfig, Config, FaultConfig, NamespaceConfig, QosConfig,
    RbdBackendConfig, SubsystemConfig, ANA_GROUP_MAX, CNTLID_MAX, CNTLID_MIN, DISCOVERY_NQN,
    MAX_IN_CAPSULE_DATA_SIZE, MAX_IO_SIZE, MAX_NAMESPACES_PER_SUBSYSTEM, MAX_QUEUE_DEPTH,
    MAX_WORKER_THREADS, MIN_QUEUE_DEPTH, QOS_MIN_BANDWIDTH, QOS_MIN_IOPS,
};

/// One thing wrong with a configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The offending key, as a path: `limits.max_io_size`, `subsystem[0].namespace[1].nsid`.
    pub key: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn fail(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }
}

pub(super) fn check(cfg: &Config) -> Vec<Problem> {
    let mut c = Checker {
        problems: Vec::new(),
    };
    check_listeners(cfg, &mut c);
    check_target(cfg, &mut c);
    check_limits(cfg, &mut c);
    check_arena(cfg, &mut c);
    if cfg.subsystems.is_empty() {
        c.fail(
            "subsystem",
            "no subsystem is configured (add a [[subsystem]] table with an nqn)",
        );
    }
    let mut nqns = HashSet::new();
    for (i, s) in cfg.subsystems.iter().enumerate() {
        let key = format!("subsystem[{i}]");
        if !nqns.insert(s.nqn.as_str()) {
            c.fail(
                format!("{key}.nqn"),
                format!(
                    "{:?} is used by two subsystems (give each its own NQN)",
                    s.nqn
                ),
            );
        }
        check_subsystem(cfg, s, &key, &mut c);
    }
    if let Some(d) = &cfg.target.discovery_nqn {
        if let Err(e) = validate_nqn(d) {
            c.fail("target.discovery_nqn", e);
        } else if d == DISCOVERY_NQN || nqns.contains(d.as_str()) {
            c.fail(
                "target.discovery_nqn",
                format!(
                    "{d:?} is the well-known discovery NQN or a subsystem's NQN (give the \
                     discovery service a name of its own, e.g. \
                     \"nqn.2014-08.org.nvmexpress:uuid:<uuid>\", or remove the key)"
                ),
            );
        }
    }
    for (i, r) in cfg.referrals.iter().enumerate() {
        if let Err(why) = r.transport.kind().check_referral() {
            c.fail(format!("referral[{i}].transport"), why);
        }
        if r.port == 0 {
            c.fail(
                format!("referral[{i}].port"),
                "0 is not a port (the other target's discovery port, usually 4420)",
            );
        }
        if cfg
            .listeners
            .iter()
            .any(|l| l.address == r.address && l.port == r.port)
        {
            c.fail(
                format!("referral[{i}]"),
                format!(
                    "{}:{} is this target's own listener (a referral points to another \
                     discovery service)",
                    r.address, r.port
                ),
            );
        }
    }
    c.problems
}

fn check_listeners(cfg: &Config, c: &mut Checker) {
    if cfg.listeners.is_empty() {
        c.fail(
            "listener",
            "no listener is configured (add a [[listener]] with provider, address and port)",
        );
    }
    let mut seen = HashSet::new();
    for (i, l) in cfg.listeners.iter().enumerate() {
        if !seen.insert(l.key()) {
            c.fail(
                format!("listener[{i}]"),
                format!("{} is listed twice (remove the duplicate)", l.describe()),
            );
        }
        if let Err((key, why)) = l.transport.kind().check_listener(l) {
            c.fail(format!("listener[{i}].{key}"), why);
        }
        if l.port == 0 {
            c.fail(
                format!("listener[{i}].port"),
                "0 is not a port hosts can be told (use 4420, the NVMe-oF port, or another)",
            );
        }
        for (group, state) in &l.ana {
            let key = format!("listener[{i}].ana.{group}");
            if let Err(e) = parse_ana_group(group) {
                c.fail(key.clone(), e);
            }
            if AnaState::from_name(state).is_none() {
                c.fail(
                    key,
                    format!("{state:?} is not an ANA state (use {})", ana_state_names()),
                );
            }
        }
    }
}

/// An ANA group ID as a `[[listener]] ana` key writes it.
pub fn parse_ana_group(key: &str) -> Result<u32, String> {
    match key.parse::<u32>() {
        Ok(g) if (1..=ANA_GROUP_MAX).contains(&g) => Ok(g),
        _ => Err(format!(
            "{key:?} is not an ANA group ID (use 1 to {ANA_GROUP_MAX}, as in ana = {{ 1 = \"optimized\" }})"
        )),
    }
}

/// The ANA state names a config may use, for messages.
pub fn ana_state_names() -> String {
    let names: Vec<String> = AnaState::ALL
        .iter()
        .map(|s| format!("\"{}\"", s.name()))
        .collect();
    names.join(", ")
}

fn check_target(cfg: &Config, c: &mut Checker) {
    let t = &cfg.target;
    if let Some(d) = &t.state_dir {
        if !d.is_absolute() {
            c.fail(
                "target.state_dir",
                format!("{} is not an absolute path (write it from /)", d.display()),
            );
        }
    }
    if t.worker_threads == 0 || t.worker_threads > MAX_WORKER_THREADS {
        c.fail(
            "target.worker_threads",
            format!(
                "{} is out of range (set 1..={MAX_WORKER_THREADS}; one per core you give the target)",
                t.worker_threads
            ),
        );
    }
    if let (Some(list), Some(allowed)) = (&t.worker_cpus, super::allowed_cpus()) {
        let outside: Vec<usize> = list
            .cpus()
            .iter()
            .copied()
            .filter(|c| !allowed.cpus().contains(c))
            .collect();
        if !outside.is_empty() {
            let (which, verb) = match outside.len() {
                1 => ("CPU", "is not one"),
                _ => ("CPUs", "are not ones"),
            };
            let list: Vec<String> = outside.iter().map(usize::to_string).collect();
            c.fail(
                "target.worker_cpus",
                format!(
                    "{which} {} {verb} this process may run on (it may run on {allowed}: \
                     list only those, or widen its affinity: taskset, or the service's \
                     CPUAffinity=)",
                    list.join(", ")
                ),
            );
        }
    }
    let kas = t.keep_alive_granularity_ms;
    if kas == 0 || kas % 100 != 0 || kas / 100 > u16::MAX as u32 {
        c.fail(
            "target.keep_alive_granularity_ms",
            format!(
                "{kas} is not a non-zero multiple of 100 ms (KAS counts 100 ms units; use 1000)"
            ),
        );
    }
    if t.connect_timeout_ms > MAX_CONNECT_TIMEOUT_MS {
        c.fail(
            "target.connect_timeout_ms",
            format!(
                "{} is out of range (set 0..={MAX_CONNECT_TIMEOUT_MS}; hosts send Connect right \
                 after the RDMA connection is up, 10000 is ample; 0 disables)",
                t.connect_timeout_ms
            ),
        );
    }
    if t.poll_spin_us > MAX_POLL_SPIN_US {
        c.fail(
            "target.poll_spin_us",
            format!(
                "{} is out of range (set 0..={MAX_POLL_SPIN_US}: a spell of polling after work; \
                 50 covers a host's next command at queue depth 1; poll_mode = \"busy\" \
                 polls always)",
                t.poll_spin_us
            ),
        );
    }
    if t.response_timeout_ms > MAX_CONNECT_TIMEOUT_MS {
        c.fail(
            "target.response_timeout_ms",
            format!(
                "{} is out of range (set 0..={MAX_CONNECT_TIMEOUT_MS}; 30000 matches the Linux \
                 host's I/O timeout; 0 disables)",
                t.response_timeout_ms
            ),
        );
    }
}

/// Longest `target.poll_spin_us` (10 ms).
const MAX_POLL_SPIN_US: u32 = 10_000;

/// Longest `target.connect_timeout_ms` and `target.response_timeout_ms` (10 minutes).
const MAX_CONNECT_TIMEOUT_MS: u32 = 600_000;

fn check_limits(cfg: &Config, c: &mut Checker) {
    let l = &cfg.limits;
    if !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&l.max_queue_depth) {
        c.fail(
            "limits.max_queue_depth",
            format!(
                "{} is out of range (set {MIN_QUEUE_DEPTH}..={MAX_QUEUE_DEPTH}: hosts open a \
                 {MIN_QUEUE_DEPTH}-entry admin queue; 128 is the usual value)",
                l.max_queue_depth
            ),
        );
    }
    if l.max_io_size < 4096 || l.max_io_size % 4096 != 0 || l.max_io_size > MAX_IO_SIZE {
        c.fail(
            "limits.max_io_size",
            format!(
                "{} is not a multiple of 4096 between 4096 and {MAX_IO_SIZE} (use 131072, 128 KiB)",
                l.max_io_size
            ),
        );
    }
    let icd = l.in_capsule_data_size;
    if icd % 16 != 0 {
        c.fail(
            "limits.in_capsule_data_size",
            format!("{icd} is not a multiple of 16 (capsule sizes count 16-byte units; use 4096)"),
        );
    }
    if icd > l.max_io_size || icd > MAX_IN_CAPSULE_DATA_SIZE {
        c.fail(
            "limits.in_capsule_data_size",
            format!(
                "{icd} is larger than limits.max_io_size ({}) or {MAX_IN_CAPSULE_DATA_SIZE} \
                 (lower it; 4096 is usual, 0 disables in-capsule data)",
                l.max_io_size
            ),
        );
    }
    if l.max_queues_per_controller < 2 || l.max_queues_per_controller > 65535 {
        c.fail(
            "limits.max_queues_per_controller",
            format!(
                "{} is out of range (set 2..=65535: it counts the admin queue plus I/O queues)",
                l.max_queues_per_controller
            ),
        );
    }
    if l.max_connections == 0 {
        c.fail(
            "limits.max_connections",
            "0 would refuse every host (set at least 2: one admin and one I/O queue)",
        );
    }
    if l.push_window_bytes > crate::config::MAX_PUSH_WINDOW_BYTES {
        c.fail(
            "limits.push_window_bytes",
            format!(
                "{} is more than 1 GiB per push queue (set 0..=1073741824; 0 declines push \
                 writes)",
                l.push_window_bytes
            ),
        );
    }
}

fn check_arena(cfg: &Config, c: &mut Checker) {
    let l = &cfg.limits;
    if !(MIN_QUEUE_DEPTH..=MAX_QUEUE_DEPTH).contains(&l.max_queue_depth)
        || l.max_io_size == 0
        || l.max_io_size > MAX_IO_SIZE
    {
        return; // reported above; the parcel size would be meaningless
    }
    let parcel = cfg.max_parcel_layout().total_bytes as u64;
    let bytes = cfg.arena.bytes.bytes();
    let data = cfg.data_pool_bytes();
    let workers = u64::from(cfg.target.worker_threads.max(1));
    let largest = u64::from(l.max_io_size).next_multiple_of(crate::arena::PAGE_BYTES as u64);
    if data / workers < 2 * largest {
        c.fail(
            "arena.data_bytes",
            format!(
                "{} for the data pools is {} per worker (target.worker_threads {}), less than \
                 two of the largest transfers (limits.max_io_size {}): raise arena.data_bytes \
                 (or arena.bytes, half of which is the default), or lower limits.max_io_size",
                super::ByteSize(data),
                super::ByteSize(data / workers),
                workers,
                l.max_io_size,
            ),
        );
    } else if bytes < data + parcel {
        c.fail(
            "arena.bytes",
            format!(
                "{} does not hold the data pools (arena.data_bytes {}) and one RDMA queue's \
                 parcel at limits.max_queue_depth {} ({} = receive slots {} x {} B + response \
                 slots): raise arena.bytes to the data pools plus {} per RDMA queue you \
                 expect, or lower arena.data_bytes",
                cfg.arena.bytes,
                super::ByteSize(data),
                l.max_queue_depth,
                super::ByteSize(parcel),
                l.max_queue_depth,
                cfg.max_parcel_layout().capsule_slot_bytes,
                super::ByteSize(parcel),
            ),
        );
    }
    if isize::try_from(bytes).is_err() {
        c.fail("arena.bytes", "is larger than the address space");
    }
}

fn check_subsystem(cfg: &Config, s: &SubsystemConfig, key: &str, c: &mut Checker) {
    if let Err(e) = validate_nqn(&s.nqn) {
        c.fail(format!("{key}.nqn"), e);
    }
    if s.nqn == DISCOVERY_NQN {
        c.fail(
            format!("{key}.nqn"),
            "is the discovery NQN, which the target serves itself (choose another NQN)",
        );
    }
    match (s.allow_any_host, s.hosts.is_empty()) {
        (true, false) => c.fail(
            format!("{key}.hosts"),
            "is set together with allow_any_host = true (remove one of them)",
        ),
        (false, true) => c.fail(
            format!("{key}.hosts"),
            "is empty and allow_any_host is false, so no host could connect \
             (list host NQNs in hosts, or set allow_any_host = true)",
        ),
        _ => {}
    }
    let mut hosts = HashSet::new();
    for (j, h) in s.hosts.iter().enumerate() {
        if let Err(e) = validate_nqn(h.nqn()) {
            c.fail(format!("{key}.hosts[{j}]"), e);
        }
        if !hosts.insert(h.nqn()) {
            c.fail(
                format!("{key}.hosts[{j}]"),
                format!("{:?} is listed twice", h.nqn()),
            );
        }
        if let Err(e) = h.resolve() {
            c.fail(format!("{key}.hosts[{j}]"), e);
        }
        if let Err(e) = h.tls_psk() {
            c.fail(format!("{key}.hosts[{j}]"), e);
        }
    }
    if s.cntlid_min < CNTLID_MIN || s.cntlid_max > CNTLID_MAX || s.cntlid_min > s.cntlid_max {
        c.fail(
            format!("{key}.cntlid_min"),
            format!(
                "{}..={} is not a controller ID range (use {CNTLID_MIN} <= cntlid_min <= \
                 cntlid_max <= {CNTLID_MAX:#x}; gateways of one subsystem take disjoint ranges)",
                s.cntlid_min, s.cntlid_max
            ),
        );
    }
    if let Some(sn) = &s.serial {
        if sn.is_empty() || sn.len() > 20 || !sn.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            c.fail(
                format!("{key}.serial"),
                format!("{sn:?} is not 1 to 20 printable ASCII characters"),
            );
        }
    }
    if s.namespaces.len() > MAX_NAMESPACES_PER_SUBSYSTEM {
        c.fail(
            format!("{key}.namespace"),
            format!(
                "{} namespaces, the limit is {MAX_NAMESPACES_PER_SUBSYSTEM} (split the subsystem)",
                s.namespaces.len()
            ),
        );
    }
    let mut nsids = HashSet::new();
    let mut uuids = HashSet::new();
    for (j, ns) in s.namespaces.iter().enumerate() {
        let nkey = format!("{key}.namespace[{j}]");
        if !nsids.insert(ns.nsid) {
            c.fail(
                format!("{nkey}.nsid"),
                format!(
                    "{} is used twice in this subsystem (give each namespace its own)",
                    ns.nsid
                ),
            );
        }
        if let Some(u) = &ns.uuid {
            if !uuids.insert(u.to_ascii_lowercase()) {
                c.fail(format!("{nkey}.uuid"), format!("{u} is used twice"));
            }
        }
        check_namespace(cfg, ns, &nkey, c);
        check_visibility(s, ns, &nkey, c);
        check_qos(&ns.qos, &format!("{nkey}.qos"), c);
        check_qos(&ns.host_qos, &format!("{nkey}.host_qos"), c);
        if let Some(d) = &ns.shared_reservations {
            if !d.is_absolute() {
                c.fail(
                    format!("{nkey}.shared_reservations"),
                    format!(
                        "{} is not an absolute path (write it from /, the same on every gateway)",
                        d.display()
                    ),
                );
            }
        }
    }
}

/// `qos` of a namespace: limits high enough that held commands do not time out on hosts.
fn check_qos(q: &QosConfig, key: &str, c: &mut Checker) {
    if let Some(n) = q.iops {
        if n < QOS_MIN_IOPS {
            c.fail(
                format!("{key}.iops"),
                format!(
                    "{n} is below {QOS_MIN_IOPS}: a host's queue of held commands would outlast \
                     its I/O timeout (raise it, or remove the key for no limit)"
                ),
            );
        }
    }
    for (name, b) in [
        ("bandwidth", q.bandwidth),
        ("read_bandwidth", q.read_bandwidth),
        ("write_bandwidth", q.write_bandwidth),
    ] {
        if let Some(b) = b {
            if b.bytes() < QOS_MIN_BANDWIDTH {
                c.fail(
                    format!("{key}.{name}"),
                    format!(
                        "{b} per second is below 1 MiB (raise it, or remove the key for no \
                         limit)"
                    ),
                );
            }
        }
    }
}

/// `hosts` of a namespace: host NQNs the subsystem admits, each once.
fn check_visibility(s: &SubsystemConfig, ns: &NamespaceConfig, key: &str, c: &mut Checker) {
    let Some(hosts) = &ns.hosts else { return };
    let mut seen = HashSet::new();
    for (j, h) in hosts.iter().enumerate() {
        let hkey = format!("{key}.hosts[{j}]");
        if let Err(e) = validate_nqn(h) {
            c.fail(hkey, e);
            continue;
        }
        if !seen.insert(h.as_str()) {
            c.fail(hkey, format!("{h:?} is listed twice"));
        } else if !s.allow_any_host && !s.hosts.iter().any(|x| x.nqn() == h) {
            c.fail(
                hkey,
                format!(
                    "{h:?} is not in the subsystem's hosts, so it could never connect to see \
                     the namespace (add it to the subsystem's hosts, or remove it here)"
                ),
            );
        }
    }
}

fn check_namespace(cfg: &Config, ns: &NamespaceConfig, key: &str, c: &mut Checker) {
    if ns.nsid == 0 || ns.nsid == u32::MAX {
        c.fail(
            format!("{key}.nsid"),
            format!(
                "{:#x} is reserved (0 and 0xFFFFFFFF are not namespace IDs; use 1, 2, ...)",
                ns.nsid
            ),
        );
    }
    if ns.block_size != 512 && ns.block_size != 4096 {
        c.fail(
            format!("{key}.block_size"),
            format!("{} is not supported (use 512 or 4096)", ns.block_size),
        );
    } else if cfg.limits.max_io_size % ns.block_size != 0 {
        c.fail(
            "limits.max_io_size",
            format!(
                "{} is not a multiple of {key}.block_size {} (make it one)",
                cfg.limits.max_io_size, ns.block_size
            ),
        );
    }
    if let Some(u) = &ns.uuid {
        if let Err(e) = validate_uuid(u) {
            c.fail(format!("{key}.uuid"), e);
        }
    }
    if !(1..=ANA_GROUP_MAX).contains(&ns.ana_group) {
        c.fail(
            format!("{key}.ana_group"),
            format!(
                "{} is not an ANA group ID (use 1 to {ANA_GROUP_MAX})",
                ns.ana_group
            ),
        );
    }
    check_backend(&ns.backend, ns.block_size, &format!("{key}.backend"), c);
}

fn check_backend(b: &BackendConfig, block_size: u32, key: &str, c: &mut Checker) {
    let size_ok = |c: &mut Checker, size: u64| {
        if size == 0 || size % u64::from(block_size) != 0 {
            c.fail(
                format!("{key}.size"),
                format!(
                    "{size} is not a non-zero multiple of the block size {block_size} \
                     (use e.g. \"256MiB\")"
                ),
            );
        }
    };
    match b {
        BackendConfig::File(f) => {
            check_path(&f.path, key, c);
            if let Some(s) = f.create_size {
                if s.bytes() == 0 || s.bytes() % u64::from(block_size) != 0 {
                    c.fail(
                        format!("{key}.create_size"),
                        format!("{s} is not a non-zero multiple of the block size {block_size}"),
                    );
                }
            }
        }
        BackendConfig::Block(d) => {
            check_path(&d.path, key, c);
            if !d.path.starts_with("/dev/") {
                c.fail(
                    format!("{key}.path"),
                    format!(
                        "{} is not under /dev (use kind = \"file\" for regular files)",
                        d.path.display()
                    ),
                );
            }
        }
        BackendConfig::Nvme(d) => {
            check_path(&d.path, key, c);
            let name = d.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !d.path.starts_with("/dev/") || !name.starts_with("ng") {
                c.fail(
                    format!("{key}.path"),
                    format!(
                        "{} is not an NVMe generic character device /dev/ngXnY (`nvme list -v` \
                         names them; a block device /dev/nvmeXnY is kind = \"block\")",
                        d.path.display()
                    ),
                );
            }
        }
        BackendConfig::Null(s) | BackendConfig::Ram(s) => size_ok(c, s.size.bytes()),
        BackendConfig::Rbd(r) => check_rbd(r, key, c),
        BackendConfig::Error(e) => {
            for (name, f) in [
                ("fail_reads", &e.fail_reads),
                ("fail_writes", &e.fail_writes),
                ("fail_flushes", &e.fail_flushes),
            ] {
                check_fault(f, &format!("{key}.{name}"), c);
            }
            if e.latency_us > 10_000_000 {
                c.fail(
                    format!("{key}.latency_us"),
                    "is above 10 s, longer than any host waits (lower it)",
                );
            }
            if matches!(e.inner, BackendConfig::Error(_)) {
                c.fail(
                    format!("{key}.inner"),
                    "is another error backend (put all faults in one)",
                );
            }
            check_backend(&e.inner, block_size, &format!("{key}.inner"), c);
        }
    }
}

fn check_rbd(r: &RbdBackendConfig, key: &str, c: &mut Checker) {
    if !cfg!(feature = "rbd") {
        c.fail(
            format!("{key}.kind"),
            "\"rbd\": this rdmablk-target was built without RBD support (build it with the \
             default features, which need librbd-dev and librados-dev)",
        );
    }
    let names = [
        ("pool", Some(r.pool.as_str())),
        ("image", Some(r.image.as_str())),
        ("namespace", r.namespace.as_deref()),
        ("user", Some(r.user.as_str())),
    ];
    for (name, value) in names {
        let Some(v) = value else { continue };
        if v.is_empty() || v.contains('\0') || v.contains('/') || v.contains('@') {
            c.fail(
                format!("{key}.{name}"),
                format!("{v:?} is not a valid Ceph name (non-empty, no '/', '@' or NUL)"),
            );
        }
    }
    if r.user.starts_with("client.") {
        c.fail(
            format!("{key}.user"),
            format!(
                "{:?}: give the name without \"client.\" (user = {:?})",
                r.user,
                &r.user["client.".len()..]
            ),
        );
    }
    for (name, path) in [
        ("ceph_conf", Some(&r.ceph_conf)),
        ("keyring", r.keyring.as_ref()),
    ] {
        if path.is_some_and(|p| !p.is_absolute()) {
            c.fail(
                format!("{key}.{name}"),
                "is a relative path (use an absolute path)",
            );
        }
    }
    if !(1..=300).contains(&r.connect_timeout_s) {
        c.fail(
            format!("{key}.connect_timeout_s"),
            format!("{} is not in 1..=300", r.connect_timeout_s),
        );
    }
    if r.op_timeout_s > 3600 {
        c.fail(
            format!("{key}.op_timeout_s"),
            format!(
                "{} is above an hour (use 0 to wait for ever)",
                r.op_timeout_s
            ),
        );
    }
}

fn check_fault(f: &FaultConfig, key: &str, c: &mut Checker) {
    if !(0.0..=1.0).contains(&f.rate) {
        c.fail(
            format!("{key}.rate"),
            format!("{} is not a probability (use 0.0..=1.0)", f.rate),
        );
    }
    if f.nth == Some(0) {
        c.fail(
            format!("{key}.nth"),
            "counts from 1 (use 1 for the first operation)",
        );
    }
    if f.sticky && f.nth.is_none() {
        c.fail(
            format!("{key}.sticky"),
            "needs nth (the operation it starts from)",
        );
    }
}

fn check_path(p: &Path, key: &str, c: &mut Checker) {
    if !p.is_absolute() {
        c.fail(
            format!("{key}.path"),
            format!("{} is relative (use an absolute path)", p.display()),
        );
    }
}

pub(super) fn check_device(
    cfg: &Config,
    attr: &rdmablk::fabric::DeviceAttr,
    send_wrs_per_request: u32,
) -> Vec<Problem> {
    let mut c = Checker {
        problems: Vec::new(),
    };
    let depth = cfg.limits.max_queue_depth;
    let send_wrs = u64::from(depth) * u64::from(send_wrs_per_request.max(1));
    if depth > attr.max_qp_wr || send_wrs > u64::from(attr.max_qp_wr) {
        c.fail(
            "limits.max_queue_depth",
            format!(
                "{depth} needs {send_wrs} send work requests per queue but device {} allows {} \
                 (lower limits.max_queue_depth to {})",
                attr.name,
                attr.max_qp_wr,
                attr.max_qp_wr / send_wrs_per_request.max(1)
            ),
        );
    }
    if attr.max_mr_size > 0 && cfg.arena.bytes.bytes() > attr.max_mr_size {
        c.fail(
            "arena.bytes",
            format!(
                "{} is larger than device {}'s largest memory region ({} bytes; lower it)",
                cfg.arena.bytes, attr.name, attr.max_mr_size
            ),
        );
    }
    if attr.max_qp > 0 && cfg.limits.max_connections > attr.max_qp {
        // Not an error: limits.max_connections counts NVMe/TCP queues too, and its default
        // (4096) is above some devices' count (siw: 1024). An RDMA queue beyond the device's
        // queue pairs is refused with a CM reject, as any other that finds no room.
        tracing::warn!(
            "limits.max_connections {} is more than device {}'s {} queue pairs: RDMA queues \
             beyond them are refused (lower limits.max_connections to say so at start)",
            cfg.limits.max_connections,
            attr.name,
            attr.max_qp
        );
    }
    c.problems
}
