//! What a scrape returns: every metric family, encoded from the counters, the pools and the
//! target's state at each scrape ([`render`]). The families are listed in
//! `docs/operations.md`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use rdmablk::nvme::{CommandKind, Status};

use super::counters::{BUCKETS_US, NB, OP_NAMES};
use super::{namespace_io, pool_by_host, HostPool, PoolCounters, WorkerCounters};
use crate::nvmf::transport::{CompletionQueues, DataPlaced, ReceiveBuffers};
use crate::nvmf::TargetHandle;

/// Encodes the target's metrics at each scrape.
#[derive(Debug)]
struct TargetCollector(TargetHandle);

type Labels = Vec<(&'static str, String)>;
/// One histogram series: labels, sum (s), count, buckets (upper bound s, count in that bucket
/// alone: the encoder makes them cumulative).
type HistogramSeries = (Labels, f64, u64, Vec<(f64, u64)>);

impl Collector for TargetCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.shared();
        let workers = &s.counters_by_worker;
        // Per namespace: every worker's counters of its slot, merged ([`namespace_io`]).
        let mut ops: Vec<(Labels, u64)> = Vec::new();
        let mut bytes: Vec<(Labels, u64, u64)> = Vec::new();
        let mut errors: Vec<(Labels, u64)> = Vec::new();
        let mut lat: Vec<HistogramSeries> = Vec::new();
        let mut in_flight: Vec<(Labels, i64)> = Vec::new();
        let mut qos: Vec<(Labels, u64, f64, i64)> = Vec::new();
        let mut host_qos: Vec<(Labels, u64, f64, i64)> = Vec::new();
        for io in namespace_io(&self.0) {
            let base: Labels = vec![
                ("subsystem", io.subsystem.clone()),
                ("nsid", io.nsid.to_string()),
            ];
            for (i, name) in OP_NAMES.iter().enumerate() {
                let mut l = base.clone();
                l.push(("op", (*name).to_string()));
                ops.push((l.clone(), io.ops[i]));
                // Per-bucket counts, not cumulative ones: prometheus-client's encoder adds
                // them up itself (passing running totals made every `le` bucket, and so every
                // quantile, far too high; the +Inf bucket then exceeded _count).
                let buckets: Vec<(f64, u64)> = (0..NB)
                    .map(|b| {
                        let ub = BUCKETS_US.get(b).map_or(f64::INFINITY, |&u| u as f64 / 1e6);
                        (ub, io.latency[i][b])
                    })
                    .collect();
                let count = io.latency[i].iter().sum();
                lat.push((l, io.latency_sum_ns[i] as f64 / 1e9, count, buckets));
            }
            in_flight.push((base.clone(), io.in_flight as i64));
            qos.push((
                base.clone(),
                io.qos_held,
                io.qos_held_seconds,
                io.qos_queued as i64,
            ));
            for (host, n, secs, now) in &io.host_qos {
                let mut l = base.clone();
                l.push(("host", host.clone()));
                host_qos.push((l, *n, *secs, *now as i64));
            }
            bytes.push((base.clone(), io.read_bytes, io.written_bytes));
            for ((op, field), n) in io.errors {
                let mut l = base.clone();
                l.push(("op", OP_NAMES[usize::from(op)].to_string()));
                let st = Status::from_field(field);
                l.push(("status", st.display_for(CommandKind::Io).to_string()));
                errors.push((l, n));
            }
        }
        counter_family(
            &mut enc,
            "rdmablk_namespace_ops",
            "Commands completed, by operation",
            &ops,
        )?;
        let read: Vec<(Labels, u64)> = bytes.iter().map(|(l, r, _)| (l.clone(), *r)).collect();
        let written: Vec<(Labels, u64)> = bytes.iter().map(|(l, _, w)| (l.clone(), *w)).collect();
        counter_family(
            &mut enc,
            "rdmablk_namespace_read_bytes",
            "Bytes read by hosts",
            &read,
        )?;
        counter_family(
            &mut enc,
            "rdmablk_namespace_written_bytes",
            "Bytes written by hosts",
            &written,
        )?;
        counter_family(
            &mut enc,
            "rdmablk_namespace_errors",
            "Commands failed, by operation and NVMe status",
            &errors,
        )?;
        {
            let mut m = enc.encode_descriptor(
                "rdmablk_namespace_latency_seconds",
                "Command latency, capsule received to response posted",
                None,
                MetricType::Histogram,
            )?;
            for (l, sum, count, buckets) in &lat {
                m.encode_family(l)?
                    .encode_histogram::<Labels>(*sum, *count, buckets, None)?;
            }
        }
        gauge_family(
            &mut enc,
            "rdmablk_namespace_in_flight",
            "Commands executing now",
            &in_flight,
        )?;
        let held: Vec<(Labels, u64)> = qos.iter().map(|(l, n, ..)| (l.clone(), *n)).collect();
        counter_family(
            &mut enc,
            "rdmablk_namespace_qos_throttled_commands",
            "Commands the namespace's QoS limits held before they ran",
            &held,
        )?;
        {
            let mut m = enc.encode_descriptor(
                "rdmablk_namespace_qos_throttled_seconds",
                "Time commands spent held by the namespace's QoS limits, summed",
                None,
                MetricType::Counter,
            )?;
            for (l, _, secs, _) in &qos {
                ConstCounter::new(*secs).encode(m.encode_family(l)?)?;
            }
        }
        let queued: Vec<(Labels, i64)> = qos.iter().map(|(l, .., q)| (l.clone(), *q)).collect();
        gauge_family(
            &mut enc,
            "rdmablk_namespace_qos_queued",
            "Commands held by the namespace's QoS limits now",
            &queued,
        )?;
        let held: Vec<(Labels, u64)> = host_qos.iter().map(|(l, n, ..)| (l.clone(), *n)).collect();
        counter_family(
            &mut enc,
            "rdmablk_namespace_host_qos_throttled_commands",
            "Commands of a host held before they ran (by its namespace's or its own per-host limits), where per-host limits are set",
            &held,
        )?;
        let queued: Vec<(Labels, i64)> =
            host_qos.iter().map(|(l, .., q)| (l.clone(), *q)).collect();
        gauge_family(
            &mut enc,
            "rdmablk_namespace_host_qos_queued",
            "Commands of a host held now, where per-host limits are set",
            &queued,
        )?;

        let mut per_host: HashMap<(String, String), i64> = HashMap::new();
        for c in s.controllers.all() {
            *per_host
                .entry((c.subsys.nqn.clone(), c.hostnqn.clone()))
                .or_default() += 1;
        }
        let ctrls: Vec<(Labels, i64)> = per_host
            .into_iter()
            .map(|((sub, host), n)| (vec![("subsystem", sub), ("host", host)], n))
            .collect();
        gauge_family(
            &mut enc,
            "rdmablk_controllers",
            "Controllers, by subsystem and host",
            &ctrls,
        )?;
        // ANA: per listener and group in use (a namespace's group), 1 for the state it is
        // in and 0 for the others (the enum-as-gauge form Prometheus' own exporters use), so
        // `rdmablk_ana_state{state="optimized"} == 0` finds a path that is not optimized.
        let mut groups: Vec<u32> = s
            .subsystems
            .load()
            .iter()
            .flat_map(|sub| {
                sub.namespaces()
                    .iter()
                    .map(|ns| ns.ana_group())
                    .collect::<Vec<_>>()
            })
            .collect();
        groups.sort_unstable();
        groups.dedup();
        let mut ana: Vec<(Labels, i64)> = Vec::new();
        for l in s.lock_ports().iter() {
            for &g in &groups {
                let now = l.ana.state(g);
                for st in rdmablk::nvme::ana::AnaState::ALL {
                    let labels = vec![
                        ("listener", l.addr.to_string()),
                        ("group", g.to_string()),
                        ("state", st.name().to_string()),
                    ];
                    ana.push((labels, i64::from(st == now)));
                }
            }
        }
        gauge_family(
            &mut enc,
            "rdmablk_ana_state",
            "ANA state of each group in use through each listener (1 for its state, 0 others)",
            &ana,
        )?;
        let conns = s.queues_open.load(Ordering::Relaxed) as i64;
        gauge_family(
            &mut enc,
            "rdmablk_connections",
            "Queues open, on every transport (an RDMA connection or a TCP socket each)",
            &[(vec![], conns)],
        )?;
        let a = s.arena.stats();
        gauge_family(
            &mut enc,
            "rdmablk_arena_bytes",
            "Arena bytes, by state",
            &[
                (vec![("state", "used".to_string())], a.bytes_in_use as i64),
                (
                    vec![("state", "data_pools".to_string())],
                    a.pool_bytes as i64,
                ),
                (
                    vec![("state", "free".to_string())],
                    a.total_bytes.saturating_sub(a.bytes_in_use + a.pool_bytes) as i64,
                ),
            ],
        )?;
        let rb = s.receive_buffers();
        let by_worker = |f: fn(&ReceiveBuffers) -> u64| -> Vec<(Labels, u64)> {
            rb.iter()
                .map(|r| (vec![("worker", r.worker.to_string())], f(r)))
                .collect()
        };
        let posted: Vec<(Labels, i64)> = by_worker(|r| u64::from(r.posted))
            .into_iter()
            .map(|(l, v)| (l, v as i64))
            .collect();
        gauge_family(
            &mut enc,
            "rdmablk_rdma_srq_posted",
            "Receive buffers posted in each worker's shared receive queue (the rest are held \
             by commands being read)",
            &posted,
        )?;
        counter_family(
            &mut enc,
            "rdmablk_rdma_srq_low",
            "Receives that left a worker's shared receive queue under 1/8 full (hosts may wait \
             on RNR: raise arena.receive_buffers)",
            &by_worker(|r| r.low_total),
        )?;
        counter_family(
            &mut enc,
            "rdmablk_rdma_srq_stale",
            "Receives for an RDMA queue already closed (the buffer went back at once)",
            &by_worker(|r| r.stale_total),
        )?;
        let cqs = s.completion_queues();
        let cq_gauge = |f: fn(&CompletionQueues) -> i64| -> Vec<(Labels, i64)> {
            cqs.iter()
                .map(|c| (vec![("worker", c.worker.to_string())], f(c)))
                .collect()
        };
        gauge_family(
            &mut enc,
            "rdmablk_rdma_cqs",
            "Completion queues of each worker (more are made when the device's CQs are too \
             small for its queues)",
            &cq_gauge(|c| c.count as i64),
        )?;
        gauge_family(
            &mut enc,
            "rdmablk_rdma_cq_entries_reserved",
            "Completion-queue entries a worker's RDMA queues have reserved, over its CQs",
            &cq_gauge(|c| c.reserved as i64),
        )?;
        let pool = |f: fn(&PoolCounters) -> &AtomicU64| -> Vec<(Labels, i64)> {
            per_worker(workers, |w| f(&w.pool).load(Ordering::Relaxed) as i64)
        };
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_bytes",
            "Bytes of each worker's data pool (arena.data_bytes split between workers)",
            &pool(|p| &p.bytes),
        )?;
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_bytes_in_use",
            "Bytes of each worker's data pool held by commands in flight",
            &pool(|p| &p.bytes_in_use),
        )?;
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_waiting",
            "Commands waiting for a data buffer now, by worker",
            &pool(|p| &p.waiting),
        )?;
        counter_family(
            &mut enc,
            "rdmablk_data_pool_waits",
            "Commands that had to wait for a data buffer, by worker",
            &per_worker(workers, |w| w.pool.waits.load(Ordering::Relaxed)),
        )?;
        let dp = s.data_placed();
        let placed = |f: fn(&DataPlaced) -> u64| -> Vec<(Labels, u64)> {
            dp.iter()
                .map(|d| (vec![("worker", d.worker.to_string())], f(d)))
                .collect()
        };
        counter_family(
            &mut enc,
            "rdmablk_tcp_placed_bytes",
            "NVMe/TCP H2CData bytes read from the socket straight into the command's data \
             buffer (target.tcp_place_from), by worker",
            &placed(|p| p.bytes),
        )?;
        counter_family(
            &mut enc,
            "rdmablk_tcp_placed_pdus",
            "NVMe/TCP H2CData PDUs whose data was read straight into the command's data \
             buffer, by worker",
            &placed(|p| p.pdus),
        )?;
        // By host: who holds the buffers and whose commands wait (hosts with neither now and
        // no wait ever are left out; `hostnqn=""`: queues not yet named by a Connect, or whose controller is gone while they drain).
        let by_host = pool_by_host(s);
        let host = |p: &HostPool| vec![("hostnqn", p.hostnqn.clone().unwrap_or_default())];
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_host_bytes_in_use",
            "Bytes of the data pools held by a host's commands in flight",
            &by_host
                .iter()
                .map(|p| (host(p), p.bytes_in_use as i64))
                .collect::<Vec<_>>(),
        )?;
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_host_waiting",
            "A host's commands waiting for a data buffer now",
            &by_host
                .iter()
                .map(|p| (host(p), p.waiting as i64))
                .collect::<Vec<_>>(),
        )?;
        // A gauge: it sums the host's connected controllers, so it falls when one goes (a
        // counter must not).
        gauge_family(
            &mut enc,
            "rdmablk_data_pool_host_waited",
            "Commands of a host's connected controllers that had to wait for a data buffer",
            &by_host
                .iter()
                .filter(|p| p.hostnqn.is_some())
                .map(|p| (host(p), p.waits as i64))
                .collect::<Vec<_>>(),
        )?;
        if let Some(h) = crate::heap::stats() {
            gauge_family(
                &mut enc,
                "rdmablk_heap_bytes",
                "Process heap bytes (glibc mallinfo2), by state: in use, or free but kept by the allocator",
                &[
                    (vec![("state", "used".to_string())], h.in_use as i64),
                    (vec![("state", "free".to_string())], h.free as i64),
                ],
            )?;
        }
        let busy = per_worker(workers, WorkerCounters::busy_seconds);
        {
            let mut m = enc.encode_descriptor(
                "rdmablk_worker_busy_seconds",
                "Time each worker spent working rather than waiting (rate() is its busy fraction)",
                None,
                MetricType::Counter,
            )?;
            for (l, v) in &busy {
                ConstCounter::new(*v).encode(m.encode_family(l)?)?;
            }
        }
        let t = &s.counters;
        counter_family(
            &mut enc,
            "rdmablk_keep_alive_expirations",
            "Controllers torn down because their host went silent",
            &[(vec![], t.keep_alive_expirations.load(Ordering::Relaxed))],
        )?;
        counter_family(
            &mut enc,
            "rdmablk_reloads",
            "Configuration reloads, by result",
            &[
                (
                    vec![("result", "applied".into())],
                    t.reloads_applied.load(Ordering::Relaxed),
                ),
                (
                    vec![("result", "refused".into())],
                    t.reloads_refused.load(Ordering::Relaxed),
                ),
            ],
        )?;
        counter_family(
            &mut enc,
            "rdmablk_tls_connections",
            "NVMe/TCP TLS connections established, by the record layer that carries them",
            &[
                (
                    vec![("record_layer", "kernel".into())],
                    t.tls_kernel.load(Ordering::Relaxed),
                ),
                (
                    vec![("record_layer", "user".into())],
                    t.tls_user.load(Ordering::Relaxed),
                ),
            ],
        )?;
        Ok(())
    }
}

/// One series per worker, labelled with its index: `f` of its counters.
fn per_worker<V>(
    workers: &[Arc<WorkerCounters>],
    f: impl Fn(&WorkerCounters) -> V,
) -> Vec<(Labels, V)> {
    workers
        .iter()
        .enumerate()
        .map(|(i, w)| (vec![("worker", i.to_string())], f(w)))
        .collect()
}

fn counter_family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (l, v) in series {
        ConstCounter::new(*v).encode(m.encode_family(l)?)?;
    }
    Ok(())
}

fn gauge_family(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Labels, i64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (l, v) in series {
        ConstGauge::new(*v).encode(m.encode_family(l)?)?;
    }
    Ok(())
}

/// The text a scrape returns.
pub fn render(target: &TargetHandle) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(TargetCollector(target.clone())));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        tracing::error!(error = %e, "encoding metrics");
    }
    out
}
