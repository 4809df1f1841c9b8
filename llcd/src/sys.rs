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

/// The file system type (`statfs` magic) of `path`, if it can be read.
pub fn fs_magic(path: &std::path::Path) -> Option<i64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: statfs is plain old data; all-zero is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` writable for the call.
    if unsafe { libc::statfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_type as i64)
}

/// Mount a BPF file system at `path` (root only), mode 0700.
pub fn mount_bpf_fs(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let target = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with a NUL byte"))?;
    // SAFETY: every pointer is a NUL-terminated string alive for the call.
    let rc = unsafe {
        libc::mount(
            c"bpf".as_ptr(),
            target.as_ptr(),
            c"bpf".as_ptr(),
            0,
            c"mode=0700".as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The (device, inode) of the file behind `fd`.
pub fn file_identity(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    use std::os::fd::AsRawFd;
    // SAFETY: stat is plain old data; all-zero is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is writable for the call; the descriptor is borrowed.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// Whether this process runs in a mount namespace other than pid 1's
/// (`ip netns exec` makes one); `false` when that cannot be read.
pub fn in_private_mount_ns() -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = |p: &str| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    match (ino("/proc/self/ns/mnt"), ino("/proc/1/ns/mnt")) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}
