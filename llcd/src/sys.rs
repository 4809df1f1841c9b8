//! The few system calls of the service itself: a privilege probe and
//! detaching from the terminal.

use std::io;

use llc_stack::link::grant;

/// Whether this process may create raw packet sockets (CAP_NET_RAW in its
/// network namespace's user namespace).
pub fn can_open_packet_sockets() -> bool {
    // SAFETY: socket() takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: fd was just returned by socket() and is closed once.
    unsafe { libc::close(fd) };
    true
}

/// The pid of the process holding the service's socket, if one answers.
pub fn holder_of_service() -> Option<i32> {
    grant::probe_service().ok().map(|c| c.pid)
}

/// Continue in a child process without a controlling terminal: the parent
/// exits at once (the socket is bound already, so clients can connect as
/// soon as the command returns); standard input and output go to
/// /dev/null.
pub fn detach() -> io::Result<()> {
    // SAFETY: the process is single-threaded here (before any thread is
    // started), so the child may go on running Rust code after fork.
    match unsafe { libc::fork() } {
        -1 => return Err(io::Error::last_os_error()),
        0 => {}
        _ => std::process::exit(0),
    }
    // SAFETY: setsid() takes no arguments.
    if unsafe { libc::setsid() } == -1 {
        return Err(io::Error::last_os_error());
    }
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for target in [0, 1, 2] {
        // SAFETY: dup2 on a descriptor we own onto the standard ones.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), target) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Raise the soft limit of open descriptors to the hard one: each client
/// connection holds one while its endpoint lives.
pub fn raise_descriptor_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit for the kernel to fill, then to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
