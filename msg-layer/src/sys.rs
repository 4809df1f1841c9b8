//! The one system call the endpoint makes itself: sleeping in ppoll(2).

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
    // ppoll(2) takes the timeout to the nanosecond: a delayed
    // acknowledgement due in 10 µs is sent then, not a millisecond later.
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfds` is a valid, exclusively borrowed array of `pfds.len()`
    // pollfd structures and `ts` a valid timespec for the duration of the
    // call; ppoll(2) writes only the `revents` fields; a null signal mask
    // leaves the thread's mask as it is.
    unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        );
    }
}
