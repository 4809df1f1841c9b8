//! The system calls std does not offer: non-blocking connect, socket options
//! beyond `TCP_NODELAY`, `sendmsg` with `MSG_NOSIGNAL`, epoll. All `unsafe`
//! of the socket transport is here; the io_uring transport keeps its own
//! (submissions) in `uring.rs`.

use std::io::{self, IoSlice};
use std::mem;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Returns the error of the last system call when `ret` is negative.
fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// `addr` as a C socket address and its length.
fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data for which all-zero bytes
    // are a valid (unspecified-family) value.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is larger than and aligned at least
            // as strictly as sockaddr_in, and we own it exclusively here.
            let sin = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&mut ss as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A non-blocking, close-on-exec TCP socket for `to`'s family, with the
/// connection to `to` started. `Ok((stream, true))`: connected already;
/// `false`: in progress (wait for writability, then `take_error`).
pub(crate) fn connect_nonblocking(to: &SocketAddr) -> io::Result<(TcpStream, bool)> {
    let domain = if to.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: socket(2) takes no pointers; the result is checked.
    let fd = check(unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::IPPROTO_TCP,
        )
    })?;
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let stream = TcpStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let (ss, len) = sockaddr(to);
    // SAFETY: `ss` is a valid socket address of `len` bytes that outlives
    // the call; the descriptor is open.
    let ret = unsafe { libc::connect(fd, &ss as *const _ as *const libc::sockaddr, len) };
    if ret == 0 {
        return Ok((stream, true));
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINPROGRESS) | Some(libc::EINTR) => Ok((stream, false)),
        _ => Err(e),
    }
}

/// setsockopt with an `int` value.
pub(crate) fn set_int_opt(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is an int that outlives the call, and its
    // size is passed; the descriptor is open (borrowed from its owner).
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &value as *const libc::c_int as *const libc::c_void,
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// getsockopt of an `int` option.
pub(crate) fn get_int_opt(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len are valid for writes of the sizes given and
    // outlive the call; the descriptor is open.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            &mut value as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok(value)
}

/// A gather write that never raises SIGPIPE (a peer that reset gives
/// `EPIPE` instead), for hosts such as MPI programs that keep the default
/// SIGPIPE action.
pub(crate) fn send_vectored(fd: &impl AsRawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: all-zero bytes are a valid msghdr (no name, no control data).
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    // IoSlice is guaranteed ABI-compatible with iovec on Unix.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: msg points at `bufs.len()` valid iovecs describing readable
    // memory borrowed for the duration of the call; the kernel only reads.
    let n = unsafe {
        libc::sendmsg(
            fd.as_raw_fd(),
            &msg,
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// An all-zero `msghdr`, to be filled in by the io_uring transport.
pub(crate) fn empty_msghdr() -> libc::msghdr {
    // SAFETY: all-zero bytes are a valid msghdr (null pointers, zero lengths).
    unsafe { mem::zeroed() }
}

/// Level-triggered epoll with `u64` tokens.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 takes no pointers; the result is checked.
        let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a valid epoll_event that outlives the call (the
        // kernel copies it); both descriptors are open.
        check(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    pub(crate) fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    pub(crate) fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    pub(crate) fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Ready events without waiting, into `out` (its capacity is the batch).
    pub(crate) fn poll_now(&self, out: &mut Vec<libc::epoll_event>) -> io::Result<()> {
        out.clear();
        let cap = out.capacity().clamp(1, i32::MAX as usize);
        // SAFETY: `out` has room for `cap` events; the kernel writes at most
        // that many and returns how many, which is then the length.
        let n = check(unsafe {
            libc::epoll_wait(self.fd.as_raw_fd(), out.as_mut_ptr(), cap as libc::c_int, 0)
        });
        match n {
            Ok(n) => {
                // SAFETY: the kernel initialised the first `n` <= cap entries.
                unsafe { out.set_len(n as usize) };
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Wraps an accepted descriptor from io_uring.
pub(crate) fn stream_from_accepted(fd: RawFd) -> TcpStream {
    // SAFETY: the accept completion handed us a fresh descriptor that
    // nothing else owns; from here the stream owns it.
    TcpStream::from(unsafe { OwnedFd::from_raw_fd(fd) })
}
