//! Socket addresses across the librdmacm boundary: `SocketAddr` to the `sockaddr` its calls
//! take, and the `sockaddr_storage` it fills back to `SocketAddr`.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::fabric::verbs::sys;

/// A sockaddr_in / sockaddr_in6 for librdmacm calls.
pub(super) struct SockAddr(libc::sockaddr_storage);

impl From<SocketAddr> for SockAddr {
    fn from(addr: SocketAddr) -> Self {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from(*a.ip()).to_be(),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                unsafe { std::ptr::write(std::ptr::addr_of_mut!(ss).cast(), sin) };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                unsafe { std::ptr::write(std::ptr::addr_of_mut!(ss).cast(), sin6) };
            }
        }
        SockAddr(ss)
    }
}

impl SockAddr {
    pub(super) fn as_mut_ptr(&mut self) -> *mut sys::sockaddr {
        std::ptr::addr_of_mut!(self.0).cast()
    }
}

/// A bindgen sockaddr_storage -> SocketAddr (None for other families or unset).
pub(super) fn sockaddr_to_std(ss: &sys::sockaddr_storage) -> Option<SocketAddr> {
    let p: *const sys::sockaddr_storage = ss;
    // SAFETY: sockaddr_storage starts with the family field, like every sockaddr.
    let family = unsafe { (*p.cast::<libc::sockaddr>()).sa_family } as i32;
    match family {
        libc::AF_INET => {
            // SAFETY: the family says it holds a sockaddr_in, and the storage is big enough.
            let sin = unsafe { &*p.cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddrV4::new(ip, u16::from_be(sin.sin_port)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: as above for sockaddr_in6.
            let sin6 = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(
                SocketAddrV6::new(
                    ip,
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )
                .into(),
            )
        }
        _ => None,
    }
}
