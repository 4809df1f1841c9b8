//! The two raw calls the loader makes outside libbpf-rs' safe API.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Create a BPF link attaching XDP program `prog` to interface `ifindex`
/// with `XDP_FLAGS_*` mode `flags` (`BPF_LINK_CREATE`). The link lives as
/// long as the returned descriptor: closing it, or the process dying, detaches
/// the program.
pub(crate) fn xdp_link_create(
    prog: BorrowedFd<'_>,
    ifindex: u32,
    flags: u32,
) -> io::Result<OwnedFd> {
    let opts = libbpf_sys::bpf_link_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _,
        flags,
        // SAFETY: the bindgen struct is plain data (integers, null pointers
        // and a union of those) for which all-zero is the documented default.
        ..unsafe { std::mem::zeroed() }
    };
    // SAFETY: `opts` is a valid, initialised options struct whose `sz` is its
    // size; libbpf reads it during the call only. The program descriptor is
    // borrowed for the call.
    let fd = unsafe {
        libbpf_sys::bpf_link_create(
            prog.as_raw_fd(),
            ifindex as libc::c_int,
            libbpf_sys::BPF_XDP,
            &opts,
        )
    };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: libbpf returned a fresh link descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
