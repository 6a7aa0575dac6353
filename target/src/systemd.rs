//! systemd readiness notification (`Type=notify`): `READY=1` once every listener listens,
//! `RELOADING=1` / `READY=1` around a reload, `STOPPING=1` at shutdown. A datagram to
//! `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace), as sd_notify(3) sends it;
//! without the variable (not started by systemd) nothing is sent.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. "READY=1") to systemd, if it is listening.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let path = path.to_string_lossy().to_string();
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(&path),
    };
    let sent = addr.and_then(|a| UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &a));
    if let Err(e) = sent {
        tracing::warn!(socket = %path, error = %e, "cannot notify systemd");
    }
}
