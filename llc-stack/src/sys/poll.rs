//! Waiting for a socket to become readable.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// What [`poll_in`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// Readable.
    Readable,
    /// A socket error is pending (read it with [`take_socket_error`]).
    Error,
    /// The timeout passed, or a signal interrupted the wait.
    Nothing,
}

/// Wait until `fd` is readable or has an error pending, or `timeout` passes
/// (`None`: forever; rounded up to whole milliseconds).
pub(crate) fn poll_in(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<Readiness> {
    poll_first_of(&[fd.as_raw_fd()], timeout)
}

/// Wait until one of `fds` is readable (or the first has an error) or
/// `timeout` passes. `Error` reports a pending error on the first
/// descriptor only: the others are plain sockets whose errors their
/// readers meet.
pub(crate) fn poll_first_of(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Readiness> {
    let timeout_ms = match timeout {
        None => -1,
        Some(t) => {
            // Round up so that a short non-zero timeout still blocks.
            let ms = t.as_nanos().div_ceil(1_000_000);
            libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
        }
    };
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    if pfds.is_empty() {
        return Ok(Readiness::Nothing);
    }
    // SAFETY: `pfds` is a valid, writable array of `len` pollfds for the
    // duration of the call.
    match syscall!(poll(
        pfds.as_mut_ptr(),
        pfds.len() as libc::nfds_t,
        timeout_ms
    )) {
        Ok(0) => Ok(Readiness::Nothing),
        Ok(_) if pfds[0].revents & libc::POLLERR != 0 => Ok(Readiness::Error),
        Ok(_) => Ok(Readiness::Readable),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Readiness::Nothing),
        Err(e) => Err(e),
    }
}
