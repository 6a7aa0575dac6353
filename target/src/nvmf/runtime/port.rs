//! The port table: every listener that runs, whatever its transport, with the address it is
//! bound to and its ANA states. Listeners register here when they start; the Fabrics Connect
//! (a controller's ANA port and host path), discovery (its log page's entries and port IDs),
//! status, metrics and reload read and change it. In configuration order: discovery port
//! IDs follow it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::config::ListenerConfig;
use crate::nvmf::subsystems::ana::AnaPort;
use crate::nvmf::{Shared, TargetError};

/// A listener that runs: its configuration, the address it is bound to, and its thread.
pub struct Port {
    /// Unique for the target's life (queues remember which port they came through).
    pub id: u64,
    pub cfg: ListenerConfig,
    /// The bound address (the real port where the configuration said 0).
    pub addr: SocketAddr,
    /// ANA group states through this port (its controllers hold it too).
    pub ana: Arc<AnaPort>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("id", &self.id)
            .field("transport", &self.cfg.transport)
            .field("addr", &self.addr)
            .finish()
    }
}

impl Port {
    /// Starts listener `cfg` (number `index` in the configuration) on its transport.
    pub fn start(
        shared: &Arc<Shared>,
        cfg: &ListenerConfig,
        index: usize,
    ) -> Result<Port, TargetError> {
        let transport = shared
            .transport(cfg.transport)
            .ok_or(TargetError::NoTransport {
                index,
                transport: cfg.transport.as_str(),
            })?;
        let id = shared.next_listener_id.fetch_add(1, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let (addr, thread) = transport.listen(shared, cfg, index, id, Arc::clone(&stop))?;
        Ok(Port {
            id,
            cfg: cfg.clone(),
            addr,
            ana: Arc::new(AnaPort::new(cfg)),
            stop,
            thread: Some(thread),
        })
    }

    /// Whether it still accepts connections (not drained).
    pub fn accepting(&self) -> bool {
        !self.stop.load(Ordering::Acquire)
    }

    /// Stops accepting (the thread ends at its next poll); connections stay.
    pub fn drain(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Stops accepting and waits for the listener's thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!(addr = %self.addr, "a listener thread panicked");
            }
        }
    }
}
