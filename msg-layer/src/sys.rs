//! The one system call the endpoint makes itself: sleeping in poll(2).

use std::os::fd::RawFd;
use std::time::Duration;

/// Sleep until one of `fds` is readable (or has an error) or `timeout`
/// passes. With no descriptors this is a plain sleep. Interruptions and
/// errors end the sleep early, which callers treat as a spurious wake-up.
pub fn poll_readable(fds: &[RawFd], timeout: Duration) {
    if fds.is_empty() {
        std::thread::sleep(timeout);
        return;
    }
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // Round up so that a sub-millisecond timer does not become a busy loop.
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pfds` is a valid, exclusively borrowed array of `pfds.len()`
    // pollfd structures for the duration of the call; poll(2) writes only
    // their `revents` fields.
    unsafe {
        libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms);
    }
}
