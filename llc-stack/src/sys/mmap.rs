//! Memory mappings: owned, unmapped on drop. The one place that calls
//! `mmap`: the TPACKET ring and the AF_XDP rings (a socket's memory), the
//! UMEM of a private AF_XDP socket (anonymous), the UMEM of a pool shared
//! between processes (a memfd) and the statistics page (a file in /dev/shm).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;

/// The page size of this machine.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

const RW: libc::c_int = libc::PROT_READ | libc::PROT_WRITE;

/// A memory mapping (readable and writable unless made read-only);
/// unmapped on drop. Its owner (a ring, a socket) decides who may touch which bytes, and
/// lends no slice into it that outlives itself.
pub(crate) struct Mapping {
    /// First byte (page-aligned).
    pub(super) ptr: NonNull<u8>,
    /// Length in bytes.
    pub(super) len: usize,
}

impl Mapping {
    /// Map `len` bytes of `fd` from byte `offset` shared with the kernel and
    /// other processes: a socket's ring (the offset selects which ring) or a
    /// memfd.
    pub(super) fn shared(fd: BorrowedFd<'_>, len: usize, offset: libc::off_t) -> io::Result<Self> {
        Self::map(
            len,
            RW,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            offset,
        )
    }

    /// A private anonymous mapping of `len` bytes.
    pub(super) fn anonymous(len: usize) -> io::Result<Self> {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        Self::map(len, RW, flags, -1, 0)
    }

    /// `len` bytes of a regular file shared with other processes, writable
    /// or read-only, not populated (a sparse statistics page allocates only
    /// the pages written).
    pub(super) fn file(fd: BorrowedFd<'_>, len: usize, writable: bool) -> io::Result<Self> {
        let prot = if writable { RW } else { libc::PROT_READ };
        Self::map(len, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0)
    }

    fn map(
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
        fd: RawFd,
        offset: libc::off_t,
    ) -> io::Result<Self> {
        // SAFETY: a fresh mapping at an address the kernel chooses (no fixed
        // address), so no existing memory is affected; `fd` is open for the
        // call (a borrowed descriptor) or -1 with MAP_ANONYMOUS. Rings and
        // UMEMs are populated now (MAP_POPULATE) so the first frames do not
        // fault.
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, offset) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap: null"))?;
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping made by `Mapping::map` and not
        // unmapped before; the owner lends no slice into it beyond its own
        // life, so nothing refers to it any more.
        let _ = syscall!(munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len));
    }
}
