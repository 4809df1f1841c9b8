//! Packet sockets and socket options: the `AF_PACKET` socket, its filter,
//! binding, buffer sizes, counters and pending error, and the generic
//! `setsockopt` the other parts (the TPACKET ring, AF_XDP) use too.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::is_errno;

/// A raw `AF_PACKET` socket with protocol 0: it receives nothing until it is
/// bound with a protocol, so a filter can be attached first without a race.
/// Non-blocking and close-on-exec.
pub(crate) fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers.
    let fd = syscall!(socket(
        libc::AF_PACKET,
        libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        0
    ))?;
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Set socket option `name` at `level` to `value`.
pub(super) fn setsockopt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a readable T of the given size for the whole
    // call; the kernel copies it and keeps no reference.
    syscall!(setsockopt(
        fd.as_raw_fd(),
        level,
        name,
        (value as *const T).cast::<libc::c_void>(),
        mem::size_of::<T>() as libc::socklen_t,
    ))?;
    Ok(())
}

/// Set an integer socket option at `SOL_PACKET` level.
pub(crate) fn set_packet_option(
    fd: BorrowedFd<'_>,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    setsockopt(fd, libc::SOL_PACKET, name, &value)
}

/// Set the send buffer size: `SO_SNDBUFFORCE` (needs CAP_NET_ADMIN, may
/// exceed `wmem_max`) and, if that is refused, `SO_SNDBUF`.
pub(crate) fn set_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX / 2);
    match setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &value) {
        Ok(()) => Ok(()),
        Err(e) if is_errno(&e, &[libc::EPERM]) => {
            setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &value)
        }
        Err(e) => Err(e),
    }
}

/// Set the receive buffer size: `SO_RCVBUFFORCE` (needs CAP_NET_ADMIN, may
/// exceed `rmem_max`) and, if that is refused, `SO_RCVBUF`.
pub(crate) fn set_receive_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX / 2);
    match setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &value) {
        Ok(()) => Ok(()),
        Err(e) if is_errno(&e, &[libc::EPERM]) => {
            setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &value)
        }
        Err(e) => Err(e),
    }
}

/// Attach a classic BPF socket filter (`SO_ATTACH_FILTER`).
pub(crate) fn attach_filter(fd: BorrowedFd<'_>, program: &[libc::sock_filter]) -> io::Result<()> {
    let len = u16::try_from(program.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let prog = libc::sock_fprog {
        len,
        // The kernel only reads the program; the cast to *mut is the C API's.
        filter: program.as_ptr().cast_mut(),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
}

/// Bind a packet socket to interface `ifindex`, receiving `protocol`
/// (host order, e.g. `ETH_P_ALL`).
pub(crate) fn bind_packet(fd: BorrowedFd<'_>, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero bytes are valid.
    let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as libc::c_ushort;
    addr.sll_protocol = protocol.to_be();
    addr.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `addr` is a valid sockaddr_ll whose size is passed with it; the
    // kernel copies it.
    syscall!(bind(
        fd.as_raw_fd(),
        (&addr as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
        mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
    ))?;
    Ok(())
}

/// Read and reset the kernel's packet counters (`PACKET_STATISTICS`):
/// `(packets, drops)` since the previous read.
pub(crate) fn packet_statistics(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    let mut stats = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `stats` is writable for `len` bytes and `len` is writable; the
    // kernel writes at most `len` bytes and updates `len`.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::SOL_PACKET,
        libc::PACKET_STATISTICS,
        (&mut stats as *mut libc::tpacket_stats).cast::<libc::c_void>(),
        &mut len,
    ))?;
    Ok((stats.tp_packets, stats.tp_drops))
}

/// Read and clear the socket's pending error (`SO_ERROR`), if any.
pub(crate) fn take_socket_error(fd: BorrowedFd<'_>) -> io::Result<Option<io::Error>> {
    let mut err: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` is writable for `len` bytes and `len` is writable.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_ERROR,
        (&mut err as *mut libc::c_int).cast::<libc::c_void>(),
        &mut len,
    ))?;
    Ok((err != 0).then(|| io::Error::from_raw_os_error(err)))
}
