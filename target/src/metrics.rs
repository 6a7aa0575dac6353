//! Prometheus metrics: counted by each worker in its own counters (one writer each, relaxed
//! atomics, no lock and no allocation per I/O), merged only when scraped.
//!
//! `[metrics] address = "127.0.0.1:9464"` serves `GET /metrics` (Prometheus text format, via
//! `prometheus-client`). The metric families are listed in `docs/operations.md`.
//!
//! The counters are `counters.rs` (per worker and namespace, target-wide) and `pool.rs` (the
//! data pools, by worker and by host); a transport's own (RDMA's shared receive queues, NVMe/TCP's
//! placed data) come from the transport (`nvmf::transport::Transport`); `collector.rs` encodes
//! the families at each scrape; `server.rs` is the endpoint.

mod collector;
mod counters;
mod pool;
mod server;

pub use collector::render;
pub use counters::{
    namespace_io, NamespaceIo, NsCounters, OpKind, TargetCounters, WorkerCounters,
    LATENCY_BUCKETS_US, OP_NAMES_BY_KIND,
};
pub use pool::{pool_by_host, HostPool, PoolCounters};
pub use server::{MetricsError, MetricsServer};
