//! The raw calls the loader makes outside libbpf-rs' safe API: creating an
//! XDP link, BPF map operations on descriptors libbpf-rs did not create
//! (taken from another process), pidfd_open/pidfd_getfd, if_nametoindex, and
//! an AF_XDP socket for the tests.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

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

/// Pin the BPF object `fd` (a link or a map) at `path` in a BPF file system
/// (`BPF_OBJ_PIN`): it then lives until the file is removed, beyond the
/// process.
pub(crate) fn obj_pin(fd: BorrowedFd<'_>, path: &std::path::Path) -> io::Result<()> {
    let path = path_cstring(path)?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call; the
    // descriptor is borrowed for the call.
    let rc = unsafe { libbpf_sys::bpf_obj_pin(fd.as_raw_fd(), path.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::from_raw_os_error(-rc));
    }
    Ok(())
}

/// A descriptor of the BPF object pinned at `path` (`BPF_OBJ_GET`).
pub(crate) fn obj_get(path: &std::path::Path) -> io::Result<OwnedFd> {
    let path = path_cstring(path)?;
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    let fd = unsafe { libbpf_sys::bpf_obj_get(path.as_ptr()) };
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(-fd));
    }
    // SAFETY: libbpf returned a fresh descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn path_cstring(path: &std::path::Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with a NUL byte"))
}

/// A BPF map known by a descriptor alone (for instance one taken from
/// another process with `pidfd_getfd`). The key and value sizes come from
/// the kernel (`BPF_OBJ_GET_INFO_BY_FD`), and every operation checks the
/// caller's buffers against them, so the kernel never reads or writes past a
/// buffer.
#[derive(Debug)]
pub(crate) struct RawMap {
    fd: OwnedFd,
    /// The map's name as the kernel holds it (at most 15 bytes).
    pub(crate) name: String,
    /// `BPF_MAP_TYPE_*`.
    pub(crate) map_type: u32,
    pub(crate) key_size: u32,
    pub(crate) value_size: u32,
    pub(crate) max_entries: u32,
}

impl RawMap {
    /// Take ownership of `fd`, which must be a BPF map.
    pub(crate) fn from_fd(fd: OwnedFd) -> io::Result<RawMap> {
        let info = libbpf_rs::MapInfo::new(fd.as_fd()).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("not a BPF map: {e:#}"))
        })?;
        let name = info.name().unwrap_or("").to_owned();
        Ok(RawMap {
            name,
            map_type: info.info.type_,
            key_size: info.info.key_size,
            value_size: info.info.value_size,
            max_entries: info.info.max_entries,
            fd,
        })
    }

    fn is_percpu(&self) -> bool {
        matches!(
            self.map_type,
            libbpf_sys::BPF_MAP_TYPE_PERCPU_ARRAY
                | libbpf_sys::BPF_MAP_TYPE_PERCPU_HASH
                | libbpf_sys::BPF_MAP_TYPE_LRU_PERCPU_HASH
                | libbpf_sys::BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE
        )
    }

    /// Bytes of a value as the syscall moves it: per-CPU maps hold one value,
    /// rounded up to 8 bytes, per possible CPU.
    pub(crate) fn value_len(&self) -> io::Result<usize> {
        if self.is_percpu() {
            Ok(possible_cpus()? * (self.value_size as usize).next_multiple_of(8))
        } else {
            Ok(self.value_size as usize)
        }
    }

    fn check(&self, key: &[u8], value: Option<usize>) -> io::Result<()> {
        let bad = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        if key.len() != self.key_size as usize {
            return bad(format!(
                "map {}: key of {} bytes, the map's are {}",
                self.name,
                key.len(),
                self.key_size
            ));
        }
        if let Some(len) = value {
            let want = self.value_len()?;
            if len != want {
                return bad(format!(
                    "map {}: value of {len} bytes, the map's are {want}",
                    self.name
                ));
            }
        }
        Ok(())
    }

    /// `BPF_MAP_UPDATE_ELEM` with `BPF_ANY`/`BPF_NOEXIST`/`BPF_EXIST` `flags`.
    pub(crate) fn update(&self, key: &[u8], value: &[u8], flags: u64) -> io::Result<()> {
        self.check(key, Some(value.len()))?;
        // SAFETY: `key` and `value` are live buffers of exactly the map's key
        // and value sizes (checked above), which is what the kernel reads.
        let ret = unsafe {
            libbpf_sys::bpf_map_update_elem(
                self.fd.as_raw_fd(),
                key.as_ptr().cast(),
                value.as_ptr().cast(),
                flags,
            )
        };
        if ret < 0 {
            return Err(io::Error::from_raw_os_error(-ret));
        }
        Ok(())
    }

    /// `BPF_MAP_LOOKUP_ELEM` into `value`; `Ok(false)` when there is no such
    /// entry.
    pub(crate) fn lookup(&self, key: &[u8], value: &mut [u8]) -> io::Result<bool> {
        self.check(key, Some(value.len()))?;
        // SAFETY: `key` is a live buffer of the map's key size and `value` a
        // live, writable buffer of exactly the size the kernel writes
        // (checked above).
        let ret = unsafe {
            libbpf_sys::bpf_map_lookup_elem(
                self.fd.as_raw_fd(),
                key.as_ptr().cast(),
                value.as_mut_ptr().cast(),
            )
        };
        match ret {
            0 => Ok(true),
            e if e == -libc::ENOENT => Ok(false),
            e => Err(io::Error::from_raw_os_error(-e)),
        }
    }

    /// `BPF_MAP_DELETE_ELEM`; `Ok(false)` when there was no such entry.
    pub(crate) fn delete(&self, key: &[u8]) -> io::Result<bool> {
        self.check(key, None)?;
        // SAFETY: `key` is a live buffer of the map's key size (checked).
        let ret =
            unsafe { libbpf_sys::bpf_map_delete_elem(self.fd.as_raw_fd(), key.as_ptr().cast()) };
        match ret {
            0 => Ok(true),
            e if e == -libc::ENOENT => Ok(false),
            e => Err(io::Error::from_raw_os_error(-e)),
        }
    }

    /// The map's descriptor.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The number of possible CPUs (the per-CPU maps' value count).
pub(crate) fn possible_cpus() -> io::Result<usize> {
    // SAFETY: no arguments; libbpf parses /sys/devices/system/cpu/possible
    // once and caches the result.
    let n = unsafe { libbpf_sys::libbpf_num_possible_cpus() };
    if n < 1 {
        return Err(io::Error::from_raw_os_error(-n));
    }
    Ok(n as usize)
}

/// The index of interface `name` in the calling thread's network namespace.
pub(crate) fn if_nametoindex(name: &str) -> io::Result<u32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name has a NUL"))?;
    // SAFETY: `c` is a NUL-terminated string that lives across the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(index)
}

/// `pidfd_open(pid, 0)`: a descriptor naming process `pid` (of the caller's
/// PID namespace) for as long as the descriptor lives, even if the pid is
/// reused after that process dies.
pub(crate) fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes two integers and touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// `pidfd_getfd(pidfd, fd, 0)`: a duplicate (close-on-exec) of descriptor
/// `fd` of the process `pidfd` names. Needs PTRACE_MODE_ATTACH_REALCREDS
/// over that process (EPERM otherwise); EBADF when it has no such
/// descriptor (also while it exits), ESRCH when it is gone.
pub(crate) fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes three integers and touches no memory of
    // ours; `pidfd` is borrowed for the call.
    let new = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel installed a fresh descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new as libc::c_int) })
}

/// An unbound AF_XDP socket (close-on-exec). An XSKMAP entry may name any
/// AF_XDP socket, bound or not: enough for the tests to make
/// `bpf_redirect_map` find an entry under `BPF_PROG_TEST_RUN`.
#[cfg(test)]
pub(crate) fn xdp_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes three integers and touches no memory of ours.
    let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh descriptor that nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
