//! Interface queries: index, MAC, MTU, flags, hardware type, RX queue count
//! and driver, by ioctls on a socket of the calling thread's network
//! namespace (never `/sys/class/net`, which is not remounted after `setns`).
//!
//! Errors are the kernel's, bare, so that callers can classify them by errno:
//! `ENODEV` or `ENXIO` means no such interface (the link layer says so to the
//! user with what to do); anything else, the caller reports with the
//! interface and the question it asked.

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::{is_errno, with_context};

/// The error the kernel gives for an interface name it does not know
/// (`ENODEV`), also for a string that cannot be an interface name (empty, too
/// long, with a NUL): callers map both to "no such interface".
fn no_such_interface() -> io::Error {
    io::Error::from_raw_os_error(libc::ENODEV)
}

/// A datagram socket used only to ask the kernel about interfaces of the
/// calling thread's network namespace.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers.
    let fd = syscall!(socket(
        libc::AF_INET,
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
        0
    ))
    .map_err(|e| with_context("creating a control socket for interface ioctls", e))?;
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `ifreq` naming `name`, or `ENODEV` if the name cannot be one.
fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(no_such_interface());
    }
    // SAFETY: ifreq is plain old data (integers, arrays, a union of those and
    // a pointer) for which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(req)
}

/// Run the `SIOCGIF*` request `request` for interface `name`.
fn ifreq_get(name: &str, request: libc::c_ulong) -> io::Result<libc::ifreq> {
    let mut req = ifreq_for(name)?;
    let sock = control_socket()?;
    // SAFETY: `req` is a valid, writable ifreq that outlives the call; every
    // SIOCGIF* request reads the name and writes only inside the struct.
    syscall!(ioctl(
        sock.as_raw_fd(),
        request as _,
        &mut req as *mut libc::ifreq
    ))?;
    Ok(req)
}

/// Index of interface `name` in the calling thread's network namespace.
pub(crate) fn interface_index(name: &str) -> io::Result<u32> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(no_such_interface());
    }
    let cname = CString::new(name).map_err(|_| no_such_interface())?;
    // SAFETY: cname is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index != 0 {
        Ok(index)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hardware (MAC) address of interface `name`.
pub(crate) fn interface_mac(name: &str) -> io::Result<[u8; 6]> {
    let req = ifreq_get(name, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR succeeded, so the kernel filled `ifru_hwaddr`.
    let addr = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (dst, src) in mac.iter_mut().zip(addr.sa_data.iter()) {
        *dst = *src as u8;
    }
    Ok(mac)
}

/// MTU of interface `name`: the largest payload after the Ethernet header.
pub(crate) fn interface_mtu(name: &str) -> io::Result<usize> {
    let req = ifreq_get(name, libc::SIOCGIFMTU)?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel filled `ifru_mtu`.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as usize)
}

/// Names of the interfaces of the calling thread's network namespace.
pub(crate) fn interface_names() -> io::Result<Vec<String>> {
    // SAFETY: if_nameindex takes no arguments; a null result is an error.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut names = Vec::new();
    let mut entry = list;
    // SAFETY: the array ends with an entry whose index is 0 and name null;
    // every entry before it has a NUL-terminated name. It is freed once,
    // after the last read.
    unsafe {
        while (*entry).if_index != 0 && !(*entry).if_name.is_null() {
            let name = std::ffi::CStr::from_ptr((*entry).if_name);
            names.push(name.to_string_lossy().into_owned());
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
    }
    Ok(names)
}

/// Every IP address of the calling thread's network namespace, with the
/// interface that holds it (getifaddrs(3)).
pub(crate) fn interface_addresses() -> io::Result<Vec<(String, std::net::IpAddr)>> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `list` on success.
    syscall!(getifaddrs(&mut list))?;
    let mut out = Vec::new();
    let mut entry = list;
    // SAFETY: a null-terminated list from getifaddrs; each entry's name is
    // NUL-terminated and its address, when non-null, is a sockaddr of the
    // family it says (sockaddr_in or sockaddr_in6 for the two read here).
    // The list is freed once, after the last read.
    unsafe {
        while !entry.is_null() {
            let e = &*entry;
            let a = e.ifa_addr;
            if !a.is_null() && !e.ifa_name.is_null() {
                let ip = match i32::from((*a).sa_family) {
                    libc::AF_INET => {
                        let sin = &*a.cast::<libc::sockaddr_in>();
                        Some(std::net::IpAddr::from(
                            u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                        ))
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*a.cast::<libc::sockaddr_in6>();
                        Some(std::net::IpAddr::from(sin6.sin6_addr.s6_addr))
                    }
                    _ => None,
                };
                if let Some(ip) = ip {
                    let name = std::ffi::CStr::from_ptr(e.ifa_name);
                    out.push((name.to_string_lossy().into_owned(), ip));
                }
            }
            entry = e.ifa_next;
        }
        libc::freeifaddrs(list);
    }
    Ok(out)
}

/// Interface flags (`IFF_*`) of interface `name`.
pub(crate) fn interface_flags(name: &str) -> io::Result<libc::c_int> {
    let req = ifreq_get(name, libc::SIOCGIFFLAGS)?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel filled `ifru_flags`.
    Ok(libc::c_int::from(unsafe { req.ifr_ifru.ifru_flags }))
}

/// Hardware type (`ARPHRD_*`) of interface `name`.
pub(crate) fn interface_hw_type(name: &str) -> io::Result<u16> {
    let req = ifreq_get(name, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR succeeded, so the kernel filled `ifru_hwaddr`.
    Ok(unsafe { req.ifr_ifru.ifru_hwaddr }.sa_family)
}

/// Number of RX queues of interface `name` (`ETHTOOL_GCHANNELS`: RX-only plus
/// combined channels). Drivers without the ethtool call count as one queue.
pub(crate) fn interface_rx_queues(name: &str) -> io::Result<u32> {
    /// `struct ethtool_channels` (linux/ethtool.h).
    #[repr(C)]
    #[derive(Default)]
    struct EthtoolChannels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx_count: u32,
        tx_count: u32,
        other_count: u32,
        combined_count: u32,
    }
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    // SAFETY: EthtoolChannels is the kernel's ethtool_channels, whose
    // `cmd` asks for exactly this struct.
    match unsafe { ethtool(name, &mut channels) } {
        Ok(()) => Ok((channels.rx_count + channels.combined_count).max(1)),
        // Only the ioctl's own errors carry an errno (a control socket's
        // failure comes with a context and none), so this is the driver
        // saying it has no channel count.
        Err(e) if is_errno(&e, &[libc::EOPNOTSUPP, libc::EINVAL]) => Ok(1),
        Err(e) => Err(e),
    }
}

/// One `SIOCETHTOOL` request on interface `name`: the kernel reads the
/// command in the first word of `data` and fills the rest.
///
/// # Safety
/// `T` must be the `#[repr(C)]` struct the command in its first field
/// expects, so that the kernel writes only inside it.
unsafe fn ethtool<T>(name: &str, data: &mut T) -> io::Result<()> {
    let mut req = ifreq_for(name)?;
    req.ifr_ifru.ifru_data = (data as *mut T).cast::<libc::c_char>();
    let sock = control_socket()?;
    // SAFETY: `req` names the interface and points `ifru_data` at `data`,
    // writable and alive for the call; the caller vouches that the command
    // makes the kernel write only inside it.
    syscall!(ioctl(
        sock.as_raw_fd(),
        libc::SIOCETHTOOL as _,
        &mut req as *mut libc::ifreq
    ))
    .map(drop)
}

/// The driver of interface `name` (`ETHTOOL_GDRVINFO`), e.g. `veth`,
/// `virtio_net`; `None` when the driver does not say.
pub(crate) fn interface_driver(name: &str) -> Option<String> {
    /// `struct ethtool_drvinfo` (linux/ethtool.h).
    #[repr(C)]
    struct EthtoolDrvinfo {
        cmd: u32,
        driver: [u8; 32],
        version: [u8; 32],
        fw_version: [u8; 32],
        bus_info: [u8; 32],
        erom_version: [u8; 32],
        reserved2: [u8; 12],
        n_priv_flags: u32,
        n_stats: u32,
        testinfo_len: u32,
        eedump_len: u32,
        regdump_len: u32,
    }
    const ETHTOOL_GDRVINFO: u32 = 0x03;
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    // SAFETY: EthtoolDrvinfo is the kernel's ethtool_drvinfo, whose `cmd`
    // asks for exactly this struct.
    unsafe { ethtool(name, &mut info) }.ok()?;
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    let driver = String::from_utf8_lossy(&info.driver[..end]).into_owned();
    (!driver.is_empty()).then_some(driver)
}
