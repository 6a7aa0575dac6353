//! What `rdmablk-ctl status` shows: listeners, subsystems with their namespaces and hosts,
//! controllers, the arena; and what `rdmablk-ctl top` reads (`io`: each namespace's I/O
//! counters). JSON values with a stable shape (documented in `docs/operations.md`).

use serde_json::{json, Value};

use crate::namespace::visibility::Visibility;
use crate::nvmf::TargetHandle;

impl TargetHandle {
    /// The target's state now.
    pub fn status(&self) -> Value {
        let s = &self.0;
        let config = s.live.load_full();
        let listeners: Vec<Value> = s
            .lock_ports()
            .iter()
            .map(|l| {
                json!({
                    "provider": l.cfg.provider.map_or("", |p| p.as_str()),
                    "address": l.addr.to_string(),
                    "accepting": l.accepting(),
                    // Groups in a state other than optimized (the default).
                    "ana": l.cfg.ana,
                })
            })
            .collect();
        let subsystems: Vec<Value> = s
            .subsystems
            .load()
            .iter()
            .map(|sub| {
                let cfg = config.subsystems.iter().find(|c| c.nqn == sub.nqn);
                let namespaces: Vec<Value> = sub
                    .namespaces()
                    .iter()
                    .map(|ns| {
                        let backend = cfg
                            .and_then(|c| c.namespaces.iter().find(|n| n.nsid == ns.nsid()))
                            .map(|n| &n.backend);
                        json!({
                            "nsid": ns.nsid(),
                            "backend": backend.map(|b| b.kind()),
                            "path": backend.and_then(backend_path),
                            "block_size": ns.block_size(),
                            "blocks": ns.num_blocks(),
                            "bytes": ns.num_blocks() * u64::from(ns.block_size()),
                            "read_only": ns.read_only(),
                            "fenced": ns.is_fenced(),
                            "qos": cfg
                                .and_then(|c| c.namespaces.iter().find(|n| n.nsid == ns.nsid()))
                                .map(|n| n.qos.to_string()),
                            "host_qos": cfg
                                .and_then(|c| c.namespaces.iter().find(|n| n.nsid == ns.nsid()))
                                .map(|n| n.host_qos.to_string()),
                            // Absent (null): every host the subsystem admits.
                            "visible_to": match &*ns.visibility().get() {
                                Visibility::All => Value::Null,
                                Visibility::Hosts(h) => json!(h),
                            },
                        })
                    })
                    .collect();
                let hosts = sub.hosts();
                json!({
                    "nqn": sub.nqn,
                    "serial": sub.serial,
                    "allow_any_host": hosts.allow_any_host,
                    "hosts": hosts.nqns(),
                    "namespaces": namespaces,
                })
            })
            .collect();
        let controllers: Vec<Value> = s
            .controllers
            .all()
            .iter()
            .map(|c| {
                json!({
                    "cntlid": c.cntlid,
                    "subnqn": c.subsys.nqn,
                    "hostnqn": c.hostnqn,
                    "transport": c.path.transport.as_str(),
                    "provider": c.path.variant.name,
                    "peer": c.path.peer.to_string(),
                    "io_queues": c.io_queues_connected(),
                    "kato_ms": c.kato_ms(),
                    "discovery": c.subsys.is_discovery(),
                })
            })
            .collect();
        let a = s.arena.stats();
        let (pool_bytes, pool_in_use, waiting, waits, pool_hosts) =
            crate::metrics::PoolCounters::sum(&s.counters_by_worker);
        let heap =
            crate::heap::stats().map(|h| json!({ "bytes_in_use": h.in_use, "bytes_free": h.free }));
        let (placed_bytes, placed_pdus) = s
            .data_placed()
            .iter()
            .fold((0, 0), |(b, p), d| (b + d.bytes, p + d.pdus));
        json!({
            "listeners": listeners,
            "subsystems": subsystems,
            "controllers": controllers,
            "connections": s.queues_open.load(std::sync::atomic::Ordering::Relaxed),
            // NVMe/TCP TLS connections established so far, by the record layer that carries
            // them (kernel: kTLS; user: OpenSSL in user space).
            "tls_connections": {
                "kernel": s.counters.tls_kernel.load(std::sync::atomic::Ordering::Relaxed),
                "user": s.counters.tls_user.load(std::sync::atomic::Ordering::Relaxed),
            },
            "arena": {
                "bytes": a.total_bytes,
                "bytes_in_use": a.bytes_in_use,
                "bytes_free": a.total_bytes.saturating_sub(a.bytes_in_use + a.pool_bytes),
                "windows": a.parcels,
                "high_water_bytes": a.high_water_bytes,
                "data_pool_bytes": a.pool_bytes,
            },
            // The workers' data pools, summed: buffers held by commands in flight, and
            // commands waiting for one (`arena.data_bytes` too small for the load).
            "data_pool": {
                "bytes": pool_bytes,
                "bytes_in_use": pool_in_use,
                "waiting": waiting,
                "waits": waits,
                "hosts": pool_hosts,
                // Who holds the buffers and whose commands wait (hostnqn null: queues not yet
                // named by a Connect, or whose controller is gone while they drain).
                "by_host": crate::metrics::pool_by_host(s)
                    .into_iter()
                    .map(|p| json!({
                        "hostnqn": p.hostnqn,
                        "bytes_in_use": p.bytes_in_use,
                        "waiting": p.waiting,
                        "waits": p.waits,
                    }))
                    .collect::<Vec<_>>(),
            },
            // NVMe/TCP H2CData read from the socket straight into command buffers since the
            // start, summed over the workers (`target.tcp_place_from`; both flat under a load
            // of large writes: their data is being copied through the receive buffers).
            "tcp_placed": { "bytes": placed_bytes, "pdus": placed_pdus },
            // The process heap (glibc's mallinfo2; null elsewhere): a leak shows here, not
            // only in RSS, which also holds what the allocator keeps for reuse.
            "heap": heap,
            "config": s.config_path.get().map(|p| p.display().to_string()),
        })
    }
}

impl TargetHandle {
    /// Every namespace's I/O counters now (`rdmablk-ctl top` takes two and shows the rates):
    /// commands and latency histograms by operation, bytes, errors, commands in flight.
    pub fn io(&self) -> Value {
        use crate::metrics::{namespace_io, LATENCY_BUCKETS_US, OP_NAMES_BY_KIND};
        let namespaces: Vec<Value> = namespace_io(self)
            .into_iter()
            .map(|io| {
                let by_op = |f: &dyn Fn(usize) -> Value| -> Value {
                    OP_NAMES_BY_KIND
                        .iter()
                        .enumerate()
                        .map(|(i, n)| ((*n).to_string(), f(i)))
                        .collect::<serde_json::Map<_, _>>()
                        .into()
                };
                json!({
                    "subsystem": io.subsystem,
                    "nsid": io.nsid,
                    "ops": by_op(&|i| json!(io.ops[i])),
                    "read_bytes": io.read_bytes,
                    "written_bytes": io.written_bytes,
                    "errors": io.errors.values().sum::<u64>(),
                    "in_flight": io.in_flight,
                    "latency": by_op(&|i| json!(io.latency[i].to_vec())),
                })
            })
            .collect();
        json!({
            "latency_bucket_us": LATENCY_BUCKETS_US,
            "namespaces": namespaces,
        })
    }
}

fn backend_path(b: &crate::config::BackendConfig) -> Option<String> {
    use crate::config::BackendConfig as B;
    match b {
        B::File(f) => Some(f.path.display().to_string()),
        B::Block(d) => Some(d.path.display().to_string()),
        B::Nvme(d) => Some(d.path.display().to_string()),
        B::Error(e) => backend_path(&e.inner),
        B::Rbd(r) => Some(match &r.namespace {
            Some(ns) => format!("rbd:{}/{ns}/{}", r.pool, r.image),
            None => format!("rbd:{}/{}", r.pool, r.image),
        }),
        B::Null(_) | B::Ram(_) => None,
    }
}
