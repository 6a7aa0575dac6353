//! The software RDMA provider: RC queue pairs emulated over TCP. (Stub: being built.)
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;
use std::time::Duration;

use crate::fabric::{
    Access, CmEvent, ConnParam, DeviceAttr, FabricError, MemBuf, QpCaps, QpInit, RecvWr, Result,
    SendWr, Wc,
};

fn unsupported<T>() -> Result<T> {
    Err(FabricError::Unsupported {
        what: "soft provider (not built yet)",
    })
}

#[derive(Clone)]
pub struct Device(());
#[derive(Clone)]
pub struct Pd(());
pub struct Mr(());
pub struct Mw(());
#[derive(Clone)]
pub struct Cq(());
pub struct Qp(());
pub struct Listener(());
pub struct ConnRequest(());
pub struct Resolved(());

impl Device {
    pub fn list() -> Result<Vec<String>> {
        unsupported()
    }
    pub fn open(_name: Option<&str>) -> Result<Device> {
        unsupported()
    }
    pub fn open_for_addr(_addr: IpAddr) -> Result<Device> {
        unsupported()
    }
    pub fn name(&self) -> String {
        unreachable!()
    }
    pub fn attr(&self) -> Result<DeviceAttr> {
        unsupported()
    }
    pub fn alloc_pd(&self) -> Result<Pd> {
        unsupported()
    }
    pub fn create_cq(&self, _depth: u32) -> Result<Cq> {
        unsupported()
    }
    pub fn listen(&self, _addr: SocketAddr, _backlog: u32) -> Result<Listener> {
        unsupported()
    }
}
impl Pd {
    pub fn register(&self, _buf: MemBuf, _access: Access) -> Result<Mr> {
        unsupported()
    }
    /// # Safety
    /// See `fabric::Pd::register_raw`.
    pub unsafe fn register_raw(&self, _addr: *mut u8, _len: usize, _access: Access) -> Result<Mr> {
        unsupported()
    }
    pub fn alloc_mw(&self) -> Result<Mw> {
        unsupported()
    }
}
impl Mr {
    pub fn addr(&self) -> u64 {
        unreachable!()
    }
    pub fn len(&self) -> usize {
        unreachable!()
    }
    pub fn lkey(&self) -> u32 {
        unreachable!()
    }
    pub fn rkey(&self) -> u32 {
        unreachable!()
    }
    pub fn access(&self) -> Access {
        unreachable!()
    }
}
impl Mw {
    pub fn rkey(&self) -> u32 {
        unreachable!()
    }
}
impl Cq {
    pub fn poll(&self, _wcs: &mut [Wc]) -> Result<usize> {
        unsupported()
    }
    pub fn arm(&self) -> Result<()> {
        unsupported()
    }
    pub fn wait(&self, _timeout: Option<Duration>) -> Result<bool> {
        unsupported()
    }
    pub fn fd(&self) -> RawFd {
        unreachable!()
    }
}
impl Qp {
    pub fn qp_num(&self) -> u32 {
        unreachable!()
    }
    pub fn caps(&self) -> QpCaps {
        unreachable!()
    }
    pub fn peer_addr(&self) -> SocketAddr {
        unreachable!()
    }
    pub fn initiator_depth(&self) -> u8 {
        unreachable!()
    }
    pub fn responder_resources(&self) -> u8 {
        unreachable!()
    }
    pub fn post_send(&self, _wrs: &[SendWr<'_>]) -> Result<()> {
        unsupported()
    }
    pub fn post_recv(&self, _wrs: &[RecvWr<'_>]) -> Result<()> {
        unsupported()
    }
    pub fn accept(&self, _param: &ConnParam) -> Result<()> {
        unsupported()
    }
    pub fn disconnect(&self) -> Result<()> {
        unsupported()
    }
    pub fn cm_event(&self, _timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        unsupported()
    }
    pub fn cm_fd(&self) -> RawFd {
        unreachable!()
    }
}
impl Listener {
    pub fn local_addr(&self) -> SocketAddr {
        unreachable!()
    }
    pub fn get_request(&self, _timeout: Option<Duration>) -> Result<Option<ConnRequest>> {
        unsupported()
    }
    pub fn fd(&self) -> RawFd {
        unreachable!()
    }
}
impl ConnRequest {
    pub fn private_data(&self) -> &[u8] {
        unreachable!()
    }
    pub fn peer_addr(&self) -> SocketAddr {
        unreachable!()
    }
    pub fn initiator_depth(&self) -> u8 {
        unreachable!()
    }
    pub fn responder_resources(&self) -> u8 {
        unreachable!()
    }
    pub fn device(&self) -> Device {
        unreachable!()
    }
    pub fn create_qp(self, _init: &QpInit<'_>) -> Result<Qp> {
        unsupported()
    }
    pub fn reject(self, _private_data: &[u8]) -> Result<()> {
        unsupported()
    }
}
impl Resolved {
    pub fn resolve(_addr: SocketAddr, _timeout: Duration) -> Result<Resolved> {
        unsupported()
    }
    pub fn device(&self) -> Device {
        unreachable!()
    }
    pub fn connect(
        self,
        _init: &QpInit<'_>,
        _param: &ConnParam,
        _timeout: Duration,
    ) -> Result<(Qp, Vec<u8>)> {
        unsupported()
    }
}
