//! The few libc calls the test beds need: entering a network namespace, reading
//! interface attributes with ioctls, tying a child's life to its parent's and
//! signalling processes. Everything unsafe in the crate's library lives here.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Moves the calling thread (only it) into the network namespace behind `fd`.
pub(crate) fn setns_net(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setns only reads the fd number and the flag; `fd` is a valid open descriptor
    // for the duration of the call because it is borrowed.
    let rc = unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An AF_INET datagram socket in the calling thread's network namespace, used for ioctls.
fn ioctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with constant arguments; no pointers involved.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(), is valid and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `ifreq` with `ifr_name` set to `ifname` (checked: 1..=15 bytes, no NUL).
fn ifreq_for(ifname: &str) -> io::Result<libc::ifreq> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid interface name {ifname:?} (1..=15 bytes, no NUL)"),
        ));
    }
    // SAFETY: ifreq is a plain C struct (name array plus a union of integers, sockaddrs and
    // pointers); the all-zero bit pattern is a valid value for every field.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    Ok(req)
}

/// Issues a SIOCGIF* `request` for `ifname` and returns the filled `ifreq`.
fn ifreq_ioctl(ifname: &str, request: libc::c_ulong) -> io::Result<libc::ifreq> {
    let sock = ioctl_socket()?;
    let mut req = ifreq_for(ifname)?;
    // SAFETY: `sock` is a valid socket; `req` is a properly initialised ifreq that lives
    // across the call, which is what the SIOCGIF* requests read and write.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), request as _, &mut req as *mut libc::ifreq) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("ioctl on {ifname}: {err}"),
        ));
    }
    Ok(req)
}

/// MTU of `ifname` in the calling thread's network namespace (SIOCGIFMTU).
pub(crate) fn if_mtu(ifname: &str) -> io::Result<u32> {
    let req = ifreq_ioctl(ifname, libc::SIOCGIFMTU)?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote the `ifru_mtu` member of the union.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "negative MTU"))
}

/// Hardware (MAC) address of the Ethernet interface `ifname` (SIOCGIFHWADDR).
pub(crate) fn if_hwaddr(ifname: &str) -> io::Result<[u8; 6]> {
    let req = ifreq_ioctl(ifname, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR succeeded, so the kernel wrote the `ifru_hwaddr` sockaddr member.
    let addr = unsafe { req.ifr_ifru.ifru_hwaddr };
    if addr.sa_family != libc::ARPHRD_ETHER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{ifname} is not an Ethernet device (hw type {})",
                addr.sa_family
            ),
        ));
    }
    let mut mac = [0u8; 6];
    for (dst, &src) in mac.iter_mut().zip(addr.sa_data.iter()) {
        *dst = src as u8;
    }
    Ok(mac)
}

/// Arranges for the child that `cmd` starts to be killed (SIGKILL) when the thread that
/// spawns it exits, so a test process that dies without unwinding (a second panic, SIGKILL)
/// leaves no QEMU behind; with `netns`, the child also enters that network namespace
/// before it executes the program (QEMU then opens its tap devices there).
pub(crate) fn child_dies_with_parent(cmd: &mut std::process::Command, netns: Option<OwnedFd>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (prctl, getppid, setns) on values it owns;
    // it allocates nothing (the io::Error paths carry only an errno).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have exited between fork and prctl: then nobody would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if let Some(fd) = &netns {
                if libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Sends `signal` to every process of the process group `pgid` (`kill(-pgid, signal)`).
/// Refuses pgid 0 and 1: `kill(0)` would hit our own group and `kill(-1)` every process.
pub(crate) fn kill_process_group(pgid: u32, signal: libc::c_int) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pgid)
        .ok()
        .filter(|&p| p > 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "process group id <= 1"))?;
    // SAFETY: kill takes plain integers; a negative pid names a process group.
    let rc = unsafe { libc::kill(-pgid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `signal` to process `pid` (not 0 or 1, which `kill` reads as groups or init).
pub(crate) fn kill_process(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|&p| p > 1)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "pid <= 1"))?;
    // SAFETY: kill takes plain integers.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
