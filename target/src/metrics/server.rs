//! The HTTP endpoint: `GET /metrics` served by a thread of its own (`tiny_http`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;

use super::render;
use crate::nvmf::TargetHandle;

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "metrics.address {addr}: cannot listen: {why} (pick a free address:port, or remove [metrics])"
)]
pub struct MetricsError {
    pub addr: SocketAddr,
    pub why: String,
}

/// The HTTP endpoint; dropping it stops it.
pub struct MetricsServer {
    server: Arc<tiny_http::Server>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl MetricsServer {
    /// Serves `GET /metrics` for `target` on `addr`.
    pub fn start(target: TargetHandle, addr: SocketAddr) -> Result<MetricsServer, MetricsError> {
        let server = tiny_http::Server::http(addr).map_err(|e| MetricsError {
            addr,
            why: e.to_string(),
        })?;
        let bound = server.server_addr().to_ip().unwrap_or(addr);
        let server = Arc::new(server);
        let s = Arc::clone(&server);
        let thread = std::thread::Builder::new()
            .name("rdmablk-metrics".into())
            .spawn(move || {
                for req in s.incoming_requests() {
                    let resp = if req.method() == &tiny_http::Method::Get
                        && (req.url() == "/metrics" || req.url().starts_with("/metrics?"))
                    {
                        let header = tiny_http::Header::from_bytes(
                            &b"Content-Type"[..],
                            &b"text/plain; version=0.0.4; charset=utf-8"[..],
                        )
                        .expect("static header");
                        tiny_http::Response::from_string(render(&target)).with_header(header)
                    } else {
                        tiny_http::Response::from_string("rdmablk: GET /metrics\n")
                            .with_status_code(404)
                    };
                    let _ = req.respond(resp);
                }
            })
            .map_err(|e| MetricsError {
                addr,
                why: e.to_string(),
            })?;
        tracing::info!(addr = %bound, "metrics on http://{bound}/metrics");
        Ok(MetricsServer {
            server,
            thread: Some(thread),
            addr: bound,
        })
    }

    /// The address it listens on (the real port where the configuration said 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
