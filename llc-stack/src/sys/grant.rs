//! What the endpoint service (`llcd`) and its clients need from the kernel:
//! `SOCK_SEQPACKET` unix sockets in the abstract namespace, descriptors
//! carried with `SCM_RIGHTS`, the peer's credentials (`SO_PEERCRED`), and a
//! socket filter the holder of the socket cannot change (`SO_LOCK_FILTER`).

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::setsockopt;

/// Most descriptors one message carries.
pub(crate) const MAX_FDS: usize = 4;

/// The `sockaddr_un` of abstract name `name` (no leading NUL in `name`)
/// and its length.
fn abstract_addr(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeros is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    if bytes.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "abstract socket name too long",
        ));
    }
    for (dst, src) in addr.sun_path[1..].iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((addr, len as libc::socklen_t))
}

fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers.
    let fd = syscall!(socket(
        libc::AF_UNIX,
        libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
        0
    ))?;
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A listening `SOCK_SEQPACKET` socket bound to abstract name `name` of the
/// calling thread's network namespace.
pub(crate) fn seqpacket_listen(name: &str, backlog: i32) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    let (addr, len) = abstract_addr(name)?;
    // SAFETY: addr is a valid sockaddr_un of `len` bytes for the call.
    syscall!(bind(
        fd.as_raw_fd(),
        (&addr as *const libc::sockaddr_un).cast(),
        len
    ))?;
    // SAFETY: listen() takes no pointers.
    syscall!(listen(fd.as_raw_fd(), backlog))?;
    Ok(fd)
}

/// A `SOCK_SEQPACKET` socket connected to abstract name `name`.
pub(crate) fn seqpacket_connect(name: &str) -> io::Result<OwnedFd> {
    let fd = seqpacket_socket()?;
    let (addr, len) = abstract_addr(name)?;
    // SAFETY: addr is a valid sockaddr_un of `len` bytes for the call.
    syscall!(connect(
        fd.as_raw_fd(),
        (&addr as *const libc::sockaddr_un).cast(),
        len
    ))?;
    Ok(fd)
}

/// Accept one connection (blocking, close-on-exec).
pub(crate) fn accept(listener: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // SAFETY: null address pointers are allowed: the peer address is not wanted.
    let fd = syscall!(accept4(
        listener.as_raw_fd(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        libc::SOCK_CLOEXEC
    ))?;
    // SAFETY: fd was just returned by accept4() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Process, user and group of the process at the other end of a unix
/// socket, as the kernel recorded them when it connected (`SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id (in the reader's pid namespace).
    pub pid: i32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// The credentials of `fd`'s peer.
pub(crate) fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred is writable for `len` bytes; len is updated by the kernel.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_PEERCRED,
        (&mut cred as *mut libc::ucred).cast(),
        &mut len
    ))?;
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Send `bytes` as one message carrying `fds` (`SCM_RIGHTS`; at most
/// [`MAX_FDS`]).
pub(crate) fn send_with_fds(
    fd: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    assert!(fds.len() <= MAX_FDS, "at most MAX_FDS descriptors");
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut control = [0u64; 8]; // 64 bytes, aligned for cmsghdr
                                 // SAFETY: msghdr is plain data; all zeros is a valid value.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !raw.is_empty() {
        let data_len = mem::size_of_val(raw.as_slice()) as u32;
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(data_len) } as usize;
        debug_assert!(space <= mem::size_of_val(&control));
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: msg_control points to `space` writable bytes, enough for
        // one cmsghdr with `data_len` bytes of data, so CMSG_FIRSTHDR is
        // non-null and CMSG_DATA points inside the buffer.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as usize;
            std::ptr::copy_nonoverlapping(
                raw.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(cmsg),
                data_len as usize,
            );
        }
    }
    // SAFETY: msg points to the iovec and control buffer above, alive for
    // the call; the kernel only reads them.
    syscall!(sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL))?;
    Ok(())
}

/// Receive one message into `buf`, with the descriptors it carries (owned
/// by the caller from now on, close-on-exec). Returns the message length (0:
/// the peer closed).
pub(crate) fn recv_with_fds(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain data; all zeros is a valid value.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = mem::size_of_val(&control);
    // SAFETY: msg points to `buf` and the control buffer, writable and alive
    // for the call.
    let n = syscall!(recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC))?;
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control/msg_controllen; the CMSG macros
    // walk only inside it, and each SCM_RIGHTS payload holds whole RawFds
    // that are now ours (each taken once into an OwnedFd).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - (data as usize - cmsg as usize);
                for i in 0..len / mem::size_of::<RawFd>() {
                    let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "message or its descriptors truncated",
        ));
    }
    Ok((n as usize, fds))
}

/// Lock the socket's filter: from now on nobody holding the socket can
/// replace or detach it (`SO_LOCK_FILTER`; it cannot be unlocked).
pub(crate) fn lock_filter(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_LOCK_FILTER,
        &1 as &libc::c_int,
    )
}

/// The socket's type (`SO_TYPE`) and domain (`SO_DOMAIN`), to check that a
/// descriptor received from elsewhere is what it claims to be.
pub(crate) fn socket_kind(fd: BorrowedFd<'_>) -> io::Result<(i32, i32)> {
    let get = |name| -> io::Result<i32> {
        let mut v: libc::c_int = 0;
        let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: v is writable for `len` bytes.
        syscall!(getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len
        ))?;
        Ok(v)
    };
    Ok((get(libc::SO_DOMAIN)?, get(libc::SO_TYPE)?))
}
