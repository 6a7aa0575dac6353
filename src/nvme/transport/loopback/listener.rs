//! Loop listeners: names in a process-wide table ([`listen`]), an IP address and port that
//! nothing binds, and the queue of new channels each one accepts.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use super::{LoopError, TargetEnd};

static LISTENERS: OnceLock<Mutex<HashMap<SocketAddr, Sender<TargetEnd>>>> = OnceLock::new();

pub(super) fn listeners() -> MutexGuard<'static, HashMap<SocketAddr, Sender<TargetEnd>>> {
    LISTENERS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A loop listener: the name hosts connect to, and the queue of their new channels.
pub struct Listener {
    addr: SocketAddr,
    rx: Receiver<TargetEnd>,
}

/// Listens on `addr` in this process. Port 0 picks a free one.
pub fn listen(addr: SocketAddr) -> Result<Listener, LoopError> {
    let mut table = listeners();
    let mut addr = addr;
    if addr.port() == 0 {
        let port = (1..=u16::MAX)
            .find(|p| !table.contains_key(&SocketAddr::new(addr.ip(), *p)))
            .ok_or(LoopError::InUse(addr))?;
        addr.set_port(port);
    }
    if table.contains_key(&addr) {
        return Err(LoopError::InUse(addr));
    }
    let (tx, rx) = mpsc::channel();
    table.insert(addr, tx);
    Ok(Listener { addr, rx })
}

impl Listener {
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The next new channel, waiting up to `timeout`.
    pub fn accept(&self, timeout: Duration) -> Option<TargetEnd> {
        self.rx.recv_timeout(timeout).ok()
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        listeners().remove(&self.addr);
        // Channels not accepted yet drop with the receiver: their hosts see them closed.
    }
}
