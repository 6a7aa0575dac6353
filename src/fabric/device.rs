//! The public [`Device`]: listing and opening devices of a provider, their attributes, and
//! what is created on one (PDs, CQs, listeners).

use std::net::{IpAddr, SocketAddr};

use super::{soft, verbs, Cq, Device, DeviceAttr, Inner, Listener, Pd, ProviderKind, Result};

impl Device {
    /// Names of the devices this provider has.
    pub fn list(kind: ProviderKind) -> Result<Vec<String>> {
        match kind {
            ProviderKind::Soft => soft::Device::list(),
            ProviderKind::Verbs => verbs::Device::list(),
        }
    }

    /// Opens a device by name, or the first one when `name` is `None`.
    pub fn open(kind: ProviderKind, name: Option<&str>) -> Result<Device> {
        Ok(match kind {
            ProviderKind::Soft => soft::Device::open(name)?.into(),
            ProviderKind::Verbs => verbs::Device::open(name)?.into(),
        })
    }

    /// Opens the device that owns local address `addr` (what a listener on `addr` will use).
    pub fn open_for_addr(kind: ProviderKind, addr: IpAddr) -> Result<Device> {
        Ok(match kind {
            ProviderKind::Soft => soft::Device::open_for_addr(addr)?.into(),
            ProviderKind::Verbs => verbs::Device::open_for_addr(addr)?.into(),
        })
    }

    /// Device name (`rxe0`, `mlx5_0`, `soft0`).
    pub fn name(&self) -> String {
        dispatch!(&self.0, d => d.name())
    }

    /// Capabilities and limits.
    pub fn attr(&self) -> Result<DeviceAttr> {
        dispatch!(&self.0, d => d.attr())
    }

    pub fn alloc_pd(&self) -> Result<Pd> {
        dispatch!(&self.0, d => d.alloc_pd().map(Pd::from))
    }

    /// A completion queue with room for at least `depth` completions.
    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        dispatch!(&self.0, d => d.create_cq(depth).map(Cq::from))
    }

    /// Listens on `addr` (port 0 picks a free port: see [`Listener::local_addr`]).
    pub fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        dispatch!(&self.0, d => d.listen(addr, backlog).map(Listener::from))
    }
}
