//! RDMA devices: listing, opening (by name or by the local address that routes to them) and
//! their attributes.

use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use super::sys;
use super::{cm, cq::Cq, errno, errno_err, pd::Pd, rc_err};
use crate::fabric::{DeviceAttr, FabricError, Result};

/// The port rdmablk uses (RNICs and rxe expose one port per device; RDMA CM picks it from the
/// address, so this only matters for `attr`).
const PORT: u8 = 1;

/// An open device: one of librdmacm's contexts plus a reference on it. Cheap to clone.
#[derive(Clone)]
pub struct Device {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    ctx: *mut sys::ibv_context,
    /// The `rdma_get_devices` array this context came from; freeing it drops librdmacm's
    /// reference on the device, so it lives exactly as long as this value.
    list: *mut *mut sys::ibv_context,
    name: String,
    /// `ibv_query_device`, queried once at open (the limits are static).
    attr: sys::ibv_device_attr,
}

// SAFETY: the context pointer is only passed to libibverbs calls, which are thread-safe; the
// cached attributes are plain data written once before the value is shared.
unsafe impl Send for DeviceInner {}
// SAFETY: as above; no method mutates through `&self`.
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        // SAFETY: `list` came from rdma_get_devices and is freed exactly once, here. Every
        // child (PD, CQ, id) holds an Arc of this device, so none outlives the reference.
        unsafe { sys::rdma_free_devices(self.list) };
    }
}

/// Names of the devices libibverbs sees (`ibv_devices`).
fn ibv_device_names() -> Result<Vec<String>> {
    let mut n: libc::c_int = 0;
    // SAFETY: `n` is a valid out-parameter; the list is freed below.
    let list = unsafe { sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        // ENOSYS: the kernel has no RDMA support at all; that is "no devices", not an error.
        return match errno() {
            libc::ENOSYS | libc::ENODEV | libc::ENOENT => Ok(Vec::new()),
            _ => Err(errno_err("ibv_get_device_list")),
        };
    }
    let mut names = Vec::with_capacity(n.max(0) as usize);
    for i in 0..n.max(0) as usize {
        // SAFETY: the list has `n` valid entries; the name is a NUL-terminated string owned by
        // the device, copied before the list is freed.
        let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(*list.add(i))) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: freed once; nothing from it is used afterwards.
    unsafe { sys::ibv_free_device_list(list) };
    Ok(names)
}

/// Hint for a user whose machine has devices but no RDMA CM.
const NO_RDMA_CM: &str =
    "rdma_get_devices: the RDMA connection manager is not available (load it: modprobe rdma_ucm; \
     /dev/infiniband/rdma_cm must exist)";

impl Device {
    /// Device names (`ibv_get_device_list`). Empty, not an error, on a machine without RDMA.
    pub fn list() -> Result<Vec<String>> {
        ibv_device_names()
    }

    /// Opens `name`, or the first device.
    pub fn open(name: Option<&str>) -> Result<Device> {
        let what = || match name {
            Some(n) => format!("named {n:?}"),
            None => "found".to_string(),
        };
        let names = ibv_device_names()?;
        if names.is_empty() || name.is_some_and(|n| !names.iter().any(|x| x == n)) {
            return Err(FabricError::NoDevice { what: what() });
        }
        Self::find(|ctx_name, _| name.map_or(true, |n| n == ctx_name))?.ok_or_else(|| {
            FabricError::NoDevice {
                what: format!(
                    "{} (libibverbs lists {names:?}, librdmacm does not)",
                    what()
                ),
            }
        })
    }

    /// Opens the device that owns local address `addr`: binds a CM id to it and takes the
    /// device the kernel chose.
    pub fn open_for_addr(addr: IpAddr) -> Result<Device> {
        let id = cm::CmId::new("open_for_addr")?;
        id.bind(SocketAddr::new(addr, 0)).map_err(|e| match e {
            FabricError::Os { ref source, .. }
                if matches!(
                    source.raw_os_error(),
                    Some(libc::EADDRNOTAVAIL) | Some(libc::ENODEV) | Some(libc::EINVAL)
                ) =>
            {
                FabricError::NoDevice {
                    what: format!(
                        "owns address {addr} (is the address configured on an RDMA-capable \
                         interface? `rdma link` shows which netdev each device uses)"
                    ),
                }
            }
            e => e,
        })?;
        let ctx = id.verbs();
        if ctx.is_null() {
            return Err(FabricError::NoDevice {
                what: format!("owns address {addr} (it is not on an RDMA interface)"),
            });
        }
        Self::from_ctx(ctx)
    }

    /// The device object for a context librdmacm handed out (a CM id's `verbs`).
    pub(crate) fn from_ctx(ctx: *mut sys::ibv_context) -> Result<Device> {
        Self::find(|_, c| c == ctx)?.ok_or_else(|| FabricError::NoDevice {
            what: "for a connection's context (device removed?)".into(),
        })
    }

    /// Opens the first of librdmacm's devices that `pick` accepts.
    fn find(pick: impl Fn(&str, *mut sys::ibv_context) -> bool) -> Result<Option<Device>> {
        let mut n: libc::c_int = 0;
        // SAFETY: `n` is a valid out-parameter; the list is kept (or freed) below.
        let list = unsafe { sys::rdma_get_devices(&mut n) };
        if list.is_null() {
            return match errno() {
                libc::ENODEV | libc::ENOENT => Ok(None),
                _ => Err(FabricError::os(NO_RDMA_CM, std::io::Error::last_os_error())),
            };
        }
        let mut found = None;
        for i in 0..n.max(0) as usize {
            // SAFETY: the array has `n` valid context pointers while the list is held.
            let ctx = unsafe { *list.add(i) };
            // SAFETY: a live context points at its device; the name is NUL-terminated.
            let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name((*ctx).device)) };
            let name = name.to_string_lossy().into_owned();
            if pick(&name, ctx) {
                found = Some((ctx, name));
                break;
            }
        }
        let Some((ctx, name)) = found else {
            // SAFETY: freed once; none of its contexts is kept.
            unsafe { sys::rdma_free_devices(list) };
            return Ok(None);
        };
        let mut attr = sys::ibv_device_attr::default();
        // SAFETY: `ctx` is live (the list holds it) and `attr` is a valid out-parameter.
        let rc = unsafe { sys::ibv_query_device(ctx, &mut attr) };
        if rc != 0 {
            // SAFETY: as above, freed once.
            unsafe { sys::rdma_free_devices(list) };
            return Err(rc_err("ibv_query_device", rc));
        }
        Ok(Some(Device {
            inner: Arc::new(DeviceInner {
                ctx,
                list,
                name,
                attr,
            }),
        }))
    }

    pub fn name(&self) -> String {
        self.inner.name.clone()
    }

    pub(crate) fn ctx(&self) -> *mut sys::ibv_context {
        self.inner.ctx
    }

    /// The cached `ibv_device_attr`.
    pub(crate) fn raw_attr(&self) -> &sys::ibv_device_attr {
        &self.inner.attr
    }

    /// Largest initiator depth (outstanding RDMA READs as requester) a QP may have.
    pub(crate) fn max_initiator_depth(&self) -> u8 {
        self.inner.attr.max_qp_init_rd_atom.clamp(0, 255) as u8
    }

    /// Largest responder resources (RDMA READs served) a QP may have.
    pub(crate) fn max_responder_resources(&self) -> u8 {
        self.inner.attr.max_qp_rd_atom.clamp(0, 255) as u8
    }

    /// Whether type-2 windows exist: the device says so in its capability flags. (rxe reports
    /// MEM_WINDOW | MEM_WINDOW_TYPE_2B and max_mw 524287; a device with only type-1 windows has
    /// max_mw > 0 but neither 2A nor 2B, so max_mw alone is not enough.)
    pub(crate) fn has_mw_type2(&self) -> bool {
        let caps = self.inner.attr.device_cap_flags;
        let type2 = sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2A
            | sys::ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B;
        caps & type2 != 0 && self.inner.attr.max_mw > 0
    }

    /// Soft-RoCE (`rdma_rxe`, vendor id 0xFFFFFF): its completions carry the *kernel's*
    /// `ib_wc_flags` values (see `cq::convert_wc`).
    pub(crate) fn is_rxe(&self) -> bool {
        self.inner.attr.vendor_id == 0x00FF_FFFF
    }

    /// State of `port`.
    pub(crate) fn port_state(&self, port: u8) -> Result<sys::ibv_port_state::Type> {
        let mut pa = sys::ibv_port_attr::default();
        // SAFETY: the context is live (held by `self`) and `pa` is a valid out-parameter.
        let rc = unsafe { sys::rdmablk_shim_query_port(self.inner.ctx, port, &mut pa) };
        if rc != 0 {
            return Err(rc_err("ibv_query_port", rc));
        }
        Ok(pa.state)
    }

    /// `PortDown` unless `port` is ACTIVE.
    pub(crate) fn check_port(&self, port: u8) -> Result<()> {
        if self.port_state(port)? != sys::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(FabricError::PortDown {
                device: self.name(),
                port,
            });
        }
        Ok(())
    }

    pub fn attr(&self) -> Result<DeviceAttr> {
        let a = &self.inner.attr;
        let caps = a.device_cap_flags;
        let nonneg = |v: libc::c_int| v.max(0) as u32;
        Ok(DeviceAttr {
            name: self.name(),
            max_qp: nonneg(a.max_qp),
            max_qp_wr: nonneg(a.max_qp_wr),
            max_sge: nonneg(a.max_sge),
            max_cqe: nonneg(a.max_cqe),
            max_cq: nonneg(a.max_cq),
            max_mr: nonneg(a.max_mr),
            max_mr_size: a.max_mr_size,
            max_mw: nonneg(a.max_mw),
            max_qp_rd_atom: nonneg(a.max_qp_rd_atom),
            max_qp_init_rd_atom: nonneg(a.max_qp_init_rd_atom),
            mw_type2: self.has_mw_type2(),
            mem_mgt_extensions: caps & sys::ibv_device_cap_flags::IBV_DEVICE_MEM_MGT_EXTENSIONS
                != 0,
            port_active: self.port_state(PORT)? == sys::ibv_port_state::IBV_PORT_ACTIVE,
            max_srq: nonneg(a.max_srq),
            max_srq_wr: nonneg(a.max_srq_wr),
            max_srq_sge: nonneg(a.max_srq_sge),
        })
    }

    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::new(self)
    }

    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        Cq::new(self, depth)
    }

    pub fn listen(&self, addr: SocketAddr, backlog: u32) -> Result<cm::Listener> {
        cm::Listener::new(Some(self), addr, backlog)
    }

    /// Whether `ctx` is this device's context (objects of one device only work together).
    pub(crate) fn same_ctx(&self, ctx: *mut sys::ibv_context) -> bool {
        self.inner.ctx == ctx
    }
}
