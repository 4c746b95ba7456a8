//! Socket options of the egress gate's redirected connections.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

use super::os_err;

/// `SO_ORIGINAL_DST` (linux/netfilter_ipv4.h) and `IP6T_SO_ORIGINAL_DST`
/// (linux/netfilter_ipv6/ip6_tables.h) share the number 80.
const SO_ORIGINAL_DST: libc::c_int = 80;

/// The pre-NAT destination of the accepted connection `fd`.
pub(crate) fn original_destination(fd: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    let level = if local_family(fd)? == libc::AF_INET6 {
        libc::SOL_IPV6
    } else {
        libc::SOL_IP
    };
    // SAFETY: a zeroed sockaddr_storage is valid; getsockopt writes at most `len` bytes into it
    // and `len` is its size.
    let (ss, len) = unsafe {
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getsockopt(
            fd.as_raw_fd(),
            level,
            SO_ORIGINAL_DST,
            std::ptr::from_mut(&mut ss).cast(),
            &mut len,
        ) != 0
        {
            return Err(os_err());
        }
        (ss, len as usize)
    };
    to_socket_addr(&ss, len)
}

/// The address family of the socket `fd` is bound to.
fn local_family(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    // SAFETY: as above, getsockname writes at most `len` bytes into a zeroed storage.
    unsafe {
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getsockname(fd.as_raw_fd(), std::ptr::from_mut(&mut ss).cast(), &mut len) != 0 {
            return Err(os_err());
        }
        Ok(libc::c_int::from(ss.ss_family))
    }
}

/// A `sockaddr_in`/`sockaddr_in6` the kernel wrote, as a Rust address.
pub(crate) fn to_socket_addr(ss: &libc::sockaddr_storage, len: usize) -> io::Result<SocketAddr> {
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and it is large enough.
            let sin = unsafe { &*std::ptr::from_ref(ss).cast::<libc::sockaddr_in>() };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*std::ptr::from_ref(ss).cast::<libc::sockaddr_in6>() };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the kernel returned no IPv4 or IPv6 address",
        )),
    }
}
