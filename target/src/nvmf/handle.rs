//! A handle on a running target for operators ([`TargetHandle`]): what the control socket,
//! SIGHUP and `rdmablk-ctl` act on.

use std::net::SocketAddr;
use std::sync::Arc;

use super::Shared;

/// A handle on a running target for operators: reload, status, changes (see
/// [`reload`](super::runtime::reload), `docs/operations.md`). Cheap to clone; valid while the
/// target runs.
#[derive(Clone, Debug)]
pub struct TargetHandle(pub(crate) Arc<Shared>);

impl TargetHandle {
    /// Records the file the configuration came from, for [`TargetHandle::reload`].
    pub fn set_config_path(&self, path: std::path::PathBuf) {
        let _ = self.0.config_path.set(path);
    }

    /// The control socket the configuration names (`[control] socket`; empty: none).
    pub fn control_socket(&self) -> std::path::PathBuf {
        self.0.fixed.control.socket.clone()
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.0
    }

    /// The metrics endpoint the configuration names (`[metrics] address`), if any.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.0.fixed.metrics.as_ref().map(|m| m.address)
    }

    /// The file the configuration came from.
    pub fn config_path(&self) -> Option<std::path::PathBuf> {
        self.0.config_path.get().cloned()
    }

    /// Stops accepting connections on the listener bound to `addr` ("ADDR:PORT"); its
    /// connections stay. Until `listener remove` or a restart.
    pub fn drain(&self, addr: &str) -> Result<(), String> {
        let want: SocketAddr = addr
            .parse()
            .map_err(|e| format!("{addr:?} is not ADDR:PORT: {e}"))?;
        let ls = self.0.lock_ports();
        let l = ls
            .iter()
            .find(|l| l.addr == want)
            .ok_or_else(|| format!("no listener on {addr}"))?;
        l.drain();
        tracing::info!(addr, "listener drained: no new connections");
        Ok(())
    }
}
