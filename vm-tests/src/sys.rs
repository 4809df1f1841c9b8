//! The libc calls of the harness beyond the test beds' own (those live in `testbed`):
//! tying a child's life to its parent's and signalling process groups. Everything unsafe
//! in the crate lives here.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

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
