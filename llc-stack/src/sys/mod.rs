//! Every libc call of the crate, behind safe functions and owning types.
//!
//! This is the only module allowed to use `unsafe`. Each unsafe block is as
//! small as possible and carries a `// SAFETY:` line. System calls go through
//! [`syscall!`], which turns the C convention (-1 and `errno`) into
//! [`io::Error`]. Resources have owners that release them on drop: sockets are
//! [`OwnedFd`]s, the packet RX ring is an [`RxRing`] whose drop unmaps it,
//! and a [`FrameBatch`] owns the buffers its `sendmmsg` headers point into.
//!
//! The TPACKET_V2 ring protocol (who owns a slot, the status word's memory
//! ordering) lives here too, because lending a ring slot as a Rust slice is
//! only sound while the protocol is obeyed; the link backend above sees only
//! safe slot handles whose lifetimes enforce it.
//!
//! Interface lookups use ioctls on a socket of the calling thread's network
//! namespace, never `/sys/class/net` (sysfs is not remounted after `setns`).

pub(crate) mod crc;

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Call `libc::$fn(args)`, mapping a return value of -1 to the thread's
/// `errno` as an [`io::Error`]. The caller states why the call is sound in a
/// `// SAFETY:` comment above the macro use.
macro_rules! syscall {
    ($fn:ident ( $($arg:expr),* $(,)? )) => {{
        #[allow(unused_unsafe)]
        let res = unsafe { libc::$fn($($arg),*) };
        if res == -1 {
            Err(::std::io::Error::last_os_error())
        } else {
            Ok(res)
        }
    }};
}

pub(crate) mod xsk;

/// The TPACKET version whose ring layout this module implements.
const TPACKET_V2: libc::c_int = libc::tpacket_versions::TPACKET_V2 as libc::c_int;

/// Offset at which the kernel writes an Ethernet frame in an RX ring slot:
/// `TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14` (see `tpacket_rcv`, with
/// `tp_reserve` 0 and no virtio-net header).
pub(crate) const RX_MAC_OFFSET: usize =
    align_up(libc::TPACKET2_HDRLEN + 16, libc::TPACKET_ALIGNMENT) - ETH_HLEN;

/// Ethernet header length as the kernel's `maclen` for an Ethernet device.
const ETH_HLEN: usize = 14;

/// `x` rounded up to a multiple of the power of two `align`.
pub(crate) const fn align_up(x: usize, align: usize) -> usize {
    (x + align - 1) & !(align - 1)
}

/// `CLOCK_MONOTONIC` in nanoseconds (served by the vDSO, no system call).
pub(crate) fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC exists on
    // every Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

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

fn is_errno(err: &io::Error, codes: &[i32]) -> bool {
    err.raw_os_error().is_some_and(|e| codes.contains(&e))
}

/// `source` with what was being done prepended to its message. The kind is
/// kept; the errno is not (an [`io::Error`] carrying a message has none), so
/// only errors nobody classifies by errno get a context here. The others go
/// up bare and the caller, who knows what it asked for, says so.
fn with_context(context: &'static str, source: io::Error) -> io::Error {
    io::Error::new(source.kind(), Context { context, source })
}

/// What [`with_context`] wraps: a step and its error, the latter kept as the
/// [`source`](std::error::Error::source).
#[derive(Debug)]
struct Context {
    context: &'static str,
    source: io::Error,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.context, self.source)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The error the kernel gives for an interface name it does not know
/// (`ENODEV`), also for a string that cannot be an interface name (empty, too
/// long, with a NUL): callers map both to "no such interface".
fn no_such_interface() -> io::Error {
    io::Error::from_raw_os_error(libc::ENODEV)
}

// ---------------------------------------------------------------------------
// Interface lookups
// ---------------------------------------------------------------------------
//
// Errors are the kernel's, bare, so that callers can classify them by errno:
// `ENODEV` or `ENXIO` means no such interface (the link layer says so to the
// user with what to do); anything else, the caller reports with the
// interface and the question it asked.

/// A datagram socket used only to ask the kernel about interfaces of the
/// calling thread's network namespace.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers.
    let fd = syscall!(socket(
        libc::AF_INET,
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
        0
    ))
    .map_err(|e| with_context("creating a control socket for interface ioctls", e))?;
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `ifreq` naming `name`, or `ENODEV` if the name cannot be one.
fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(no_such_interface());
    }
    // SAFETY: ifreq is plain old data (integers, arrays, a union of those and
    // a pointer) for which all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(req)
}

/// Run the `SIOCGIF*` request `request` for interface `name`.
fn ifreq_get(name: &str, request: libc::c_ulong) -> io::Result<libc::ifreq> {
    let mut req = ifreq_for(name)?;
    let sock = control_socket()?;
    // SAFETY: `req` is a valid, writable ifreq that outlives the call; every
    // SIOCGIF* request reads the name and writes only inside the struct.
    syscall!(ioctl(
        sock.as_raw_fd(),
        request as _,
        &mut req as *mut libc::ifreq
    ))?;
    Ok(req)
}

/// Index of interface `name` in the calling thread's network namespace.
pub(crate) fn interface_index(name: &str) -> io::Result<u32> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(no_such_interface());
    }
    let cname = CString::new(name).map_err(|_| no_such_interface())?;
    // SAFETY: cname is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index != 0 {
        Ok(index)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Hardware (MAC) address of interface `name`.
pub(crate) fn interface_mac(name: &str) -> io::Result<[u8; 6]> {
    let req = ifreq_get(name, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR succeeded, so the kernel filled `ifru_hwaddr`.
    let addr = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (dst, src) in mac.iter_mut().zip(addr.sa_data.iter()) {
        *dst = *src as u8;
    }
    Ok(mac)
}

/// MTU of interface `name`: the largest payload after the Ethernet header.
pub(crate) fn interface_mtu(name: &str) -> io::Result<usize> {
    let req = ifreq_get(name, libc::SIOCGIFMTU)?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel filled `ifru_mtu`.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as usize)
}

/// Names of the interfaces of the calling thread's network namespace.
pub(crate) fn interface_names() -> io::Result<Vec<String>> {
    // SAFETY: if_nameindex takes no arguments; a null result is an error.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut names = Vec::new();
    let mut entry = list;
    // SAFETY: the array ends with an entry whose index is 0 and name null;
    // every entry before it has a NUL-terminated name. It is freed once,
    // after the last read.
    unsafe {
        while (*entry).if_index != 0 && !(*entry).if_name.is_null() {
            let name = std::ffi::CStr::from_ptr((*entry).if_name);
            names.push(name.to_string_lossy().into_owned());
            entry = entry.add(1);
        }
        libc::if_freenameindex(list);
    }
    Ok(names)
}

/// Interface flags (`IFF_*`) of interface `name`.
pub(crate) fn interface_flags(name: &str) -> io::Result<libc::c_int> {
    let req = ifreq_get(name, libc::SIOCGIFFLAGS)?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel filled `ifru_flags`.
    Ok(libc::c_int::from(unsafe { req.ifr_ifru.ifru_flags }))
}

/// Hardware type (`ARPHRD_*`) of interface `name`.
pub(crate) fn interface_hw_type(name: &str) -> io::Result<u16> {
    let req = ifreq_get(name, libc::SIOCGIFHWADDR)?;
    // SAFETY: SIOCGIFHWADDR succeeded, so the kernel filled `ifru_hwaddr`.
    Ok(unsafe { req.ifr_ifru.ifru_hwaddr }.sa_family)
}

/// Number of RX queues of interface `name` (`ETHTOOL_GCHANNELS`: RX-only plus
/// combined channels). Drivers without the ethtool call count as one queue.
pub(crate) fn interface_rx_queues(name: &str) -> io::Result<u32> {
    /// `struct ethtool_channels` (linux/ethtool.h).
    #[repr(C)]
    #[derive(Default)]
    struct EthtoolChannels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx_count: u32,
        tx_count: u32,
        other_count: u32,
        combined_count: u32,
    }
    const ETHTOOL_GCHANNELS: u32 = 0x3c;
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..Default::default()
    };
    // SAFETY: EthtoolChannels is the kernel's ethtool_channels, whose
    // `cmd` asks for exactly this struct.
    match unsafe { ethtool(name, &mut channels) } {
        Ok(()) => Ok((channels.rx_count + channels.combined_count).max(1)),
        // Only the ioctl's own errors carry an errno (a control socket's
        // failure comes with a context and none), so this is the driver
        // saying it has no channel count.
        Err(e) if is_errno(&e, &[libc::EOPNOTSUPP, libc::EINVAL]) => Ok(1),
        Err(e) => Err(e),
    }
}

/// One `SIOCETHTOOL` request on interface `name`: the kernel reads the
/// command in the first word of `data` and fills the rest.
///
/// # Safety
/// `T` must be the `#[repr(C)]` struct the command in its first field
/// expects, so that the kernel writes only inside it.
unsafe fn ethtool<T>(name: &str, data: &mut T) -> io::Result<()> {
    let mut req = ifreq_for(name)?;
    req.ifr_ifru.ifru_data = (data as *mut T).cast::<libc::c_char>();
    let sock = control_socket()?;
    // SAFETY: `req` names the interface and points `ifru_data` at `data`,
    // writable and alive for the call; the caller vouches that the command
    // makes the kernel write only inside it.
    syscall!(ioctl(
        sock.as_raw_fd(),
        libc::SIOCETHTOOL as _,
        &mut req as *mut libc::ifreq
    ))
    .map(drop)
}

/// The driver of interface `name` (`ETHTOOL_GDRVINFO`), e.g. `veth`,
/// `virtio_net`; `None` when the driver does not say.
pub(crate) fn interface_driver(name: &str) -> Option<String> {
    /// `struct ethtool_drvinfo` (linux/ethtool.h).
    #[repr(C)]
    struct EthtoolDrvinfo {
        cmd: u32,
        driver: [u8; 32],
        version: [u8; 32],
        fw_version: [u8; 32],
        bus_info: [u8; 32],
        erom_version: [u8; 32],
        reserved2: [u8; 12],
        n_priv_flags: u32,
        n_stats: u32,
        testinfo_len: u32,
        eedump_len: u32,
        regdump_len: u32,
    }
    const ETHTOOL_GDRVINFO: u32 = 0x03;
    let mut info = EthtoolDrvinfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        version: [0; 32],
        fw_version: [0; 32],
        bus_info: [0; 32],
        erom_version: [0; 32],
        reserved2: [0; 12],
        n_priv_flags: 0,
        n_stats: 0,
        testinfo_len: 0,
        eedump_len: 0,
        regdump_len: 0,
    };
    // SAFETY: EthtoolDrvinfo is the kernel's ethtool_drvinfo, whose `cmd`
    // asks for exactly this struct.
    unsafe { ethtool(name, &mut info) }.ok()?;
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    let driver = String::from_utf8_lossy(&info.driver[..end]).into_owned();
    (!driver.is_empty()).then_some(driver)
}

// ---------------------------------------------------------------------------
// Packet sockets
// ---------------------------------------------------------------------------

/// A raw `AF_PACKET` socket with protocol 0: it receives nothing until it is
/// bound with a protocol, so a filter can be attached first without a race.
/// Non-blocking and close-on-exec.
pub(crate) fn packet_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers.
    let fd = syscall!(socket(
        libc::AF_PACKET,
        libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        0
    ))?;
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn setsockopt<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a readable T of the given size for the whole
    // call; the kernel copies it and keeps no reference.
    syscall!(setsockopt(
        fd.as_raw_fd(),
        level,
        name,
        (value as *const T).cast::<libc::c_void>(),
        mem::size_of::<T>() as libc::socklen_t,
    ))?;
    Ok(())
}

/// Set an integer socket option at `SOL_PACKET` level.
pub(crate) fn set_packet_option(
    fd: BorrowedFd<'_>,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    setsockopt(fd, libc::SOL_PACKET, name, &value)
}

/// Set the send buffer size: `SO_SNDBUFFORCE` (needs CAP_NET_ADMIN, may
/// exceed `wmem_max`) and, if that is refused, `SO_SNDBUF`.
pub(crate) fn set_send_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX / 2);
    match setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &value) {
        Ok(()) => Ok(()),
        Err(e) if is_errno(&e, &[libc::EPERM]) => {
            setsockopt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &value)
        }
        Err(e) => Err(e),
    }
}

/// Set the receive buffer size: `SO_RCVBUFFORCE` (needs CAP_NET_ADMIN, may
/// exceed `rmem_max`) and, if that is refused, `SO_RCVBUF`.
pub(crate) fn set_receive_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX / 2);
    match setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &value) {
        Ok(()) => Ok(()),
        Err(e) if is_errno(&e, &[libc::EPERM]) => {
            setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &value)
        }
        Err(e) => Err(e),
    }
}

/// Attach a classic BPF socket filter (`SO_ATTACH_FILTER`).
pub(crate) fn attach_filter(fd: BorrowedFd<'_>, program: &[libc::sock_filter]) -> io::Result<()> {
    let len = u16::try_from(program.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    let prog = libc::sock_fprog {
        len,
        // The kernel only reads the program; the cast to *mut is the C API's.
        filter: program.as_ptr().cast_mut(),
    };
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
}

/// Bind a packet socket to interface `ifindex`, receiving `protocol`
/// (host order, e.g. `ETH_P_ALL`).
pub(crate) fn bind_packet(fd: BorrowedFd<'_>, ifindex: u32, protocol: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero bytes are valid.
    let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as libc::c_ushort;
    addr.sll_protocol = protocol.to_be();
    addr.sll_ifindex = ifindex as libc::c_int;
    // SAFETY: `addr` is a valid sockaddr_ll whose size is passed with it; the
    // kernel copies it.
    syscall!(bind(
        fd.as_raw_fd(),
        (&addr as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
        mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
    ))?;
    Ok(())
}

/// Read and reset the kernel's packet counters (`PACKET_STATISTICS`):
/// `(packets, drops)` since the previous read.
pub(crate) fn packet_statistics(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    let mut stats = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `stats` is writable for `len` bytes and `len` is writable; the
    // kernel writes at most `len` bytes and updates `len`.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::SOL_PACKET,
        libc::PACKET_STATISTICS,
        (&mut stats as *mut libc::tpacket_stats).cast::<libc::c_void>(),
        &mut len,
    ))?;
    Ok((stats.tp_packets, stats.tp_drops))
}

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

/// Read and clear the socket's pending error (`SO_ERROR`), if any.
pub(crate) fn take_socket_error(fd: BorrowedFd<'_>) -> io::Result<Option<io::Error>> {
    let mut err: libc::c_int = 0;
    let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `err` is writable for `len` bytes and `len` is writable.
    syscall!(getsockopt(
        fd.as_raw_fd(),
        libc::SOL_SOCKET,
        libc::SO_ERROR,
        (&mut err as *mut libc::c_int).cast::<libc::c_void>(),
        &mut len,
    ))?;
    Ok((err != 0).then(|| io::Error::from_raw_os_error(err)))
}

// ---------------------------------------------------------------------------
// TPACKET_V2 rings
// ---------------------------------------------------------------------------

/// Layout of one packet ring, as passed to `PACKET_RX_RING`/`PACKET_TX_RING`.
/// Frames never straddle blocks: block `b` holds frames
/// `b * frames_per_block .. (b + 1) * frames_per_block`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct RingGeometry {
    /// Bytes per block: a multiple of the page size.
    pub block_size: usize,
    /// Number of blocks.
    pub block_nr: usize,
    /// Bytes per frame slot: a multiple of `TPACKET_ALIGNMENT`.
    pub frame_size: usize,
    /// Number of frame slots: `block_nr * frames_per_block()`.
    pub frame_nr: usize,
}

impl RingGeometry {
    /// Frame slots per block.
    pub fn frames_per_block(&self) -> usize {
        self.block_size / self.frame_size
    }

    /// Bytes of the whole ring.
    pub fn ring_bytes(&self) -> usize {
        self.block_size * self.block_nr
    }

    /// Offset of slot `index` from the start of the ring (the RX cursor
    /// steps there without dividing; this is the reference it is tested
    /// against).
    #[cfg(test)]
    pub fn slot_offset(&self, index: usize) -> usize {
        let per_block = self.frames_per_block();
        (index / per_block) * self.block_size + (index % per_block) * self.frame_size
    }

    /// Whether the kernel accepts this layout (see `packet_set_ring`), with
    /// slots of at least `min_frame` bytes.
    // `is_multiple_of` is newer than the workspace's rust-version (1.80).
    #[allow(clippy::manual_is_multiple_of)]
    pub fn is_valid(&self, page: usize, min_frame: usize) -> bool {
        self.block_size > 0
            && self.block_size % page == 0
            && self.frame_size >= min_frame
            && self.frame_size >= libc::TPACKET2_HDRLEN
            && self.frame_size % libc::TPACKET_ALIGNMENT == 0
            && self.frame_size <= self.block_size
            && self.block_nr > 0
            && self.frame_nr == self.block_nr * self.frames_per_block()
            && u32::try_from(self.block_size).is_ok()
            && u32::try_from(self.frame_nr).is_ok()
            && self.block_size.checked_mul(self.block_nr).is_some()
    }

    fn to_req(self) -> io::Result<libc::tpacket_req> {
        let conv = |v: usize| {
            libc::c_uint::try_from(v)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "ring geometry too large"))
        };
        Ok(libc::tpacket_req {
            tp_block_size: conv(self.block_size)?,
            tp_block_nr: conv(self.block_nr)?,
            tp_frame_size: conv(self.frame_size)?,
            tp_frame_nr: conv(self.frame_nr)?,
        })
    }
}

/// A position in a ring that steps from slot to slot without dividing.
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    /// Slot index.
    index: usize,
    /// Slot position within its block.
    in_block: usize,
    /// Byte offset of the slot from the start of the ring.
    offset: usize,
}

impl Cursor {
    #[inline]
    fn advance(&mut self, geometry: &RingGeometry, per_block: usize) {
        self.index += 1;
        self.in_block += 1;
        if self.index == geometry.frame_nr {
            *self = Cursor::default();
        } else if self.in_block == per_block {
            self.in_block = 0;
            // The next block starts at a block boundary, not after the last
            // frame (blocks may end in a gap).
            self.offset = self.offset - (per_block - 1) * geometry.frame_size + geometry.block_size;
        } else {
            self.offset += geometry.frame_size;
        }
    }
}

/// A shared memory mapping of a socket's ring; unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping created by mmap in
        // `RxRing::new` and not unmapped before; no slice into it outlives
        // the `RxRing` (slot handles borrow it).
        let _ = syscall!(munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len));
    }
}

/// The TPACKET_V2 RX ring of a packet socket, mapped into this process.
///
/// The kernel and this process share each slot; the slot's status word says
/// who owns it. This type reads a slot's bytes only while this process owns
/// it (after an acquire load sees `TP_STATUS_USER`), and hands it back with a
/// release store of `TP_STATUS_KERNEL` after the last access.
pub(crate) struct RxRing {
    map: Mapping,
    geometry: RingGeometry,
    per_block: usize,
    /// Next slot to look at.
    cursor: Cursor,
}

// SAFETY: the mapping is process-wide memory with no thread affinity; moving
// the owner to another thread moves the only handle to it.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Switch `fd` to TPACKET_V2, install an RX ring with this layout and map
    /// it. Must run before the socket is bound.
    pub fn new(fd: BorrowedFd<'_>, geometry: RingGeometry) -> io::Result<RxRing> {
        if !geometry.is_valid(page_size(), libc::TPACKET2_HDRLEN) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "invalid packet ring geometry",
            ));
        }
        set_packet_option(fd, libc::PACKET_VERSION, TPACKET_V2)?;
        setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_RX_RING,
            &geometry.to_req()?,
        )?;
        let len = geometry.ring_bytes();
        // SAFETY: a fresh shared mapping of the socket's ring at an address
        // chosen by the kernel; the length is exactly the ring, as the kernel
        // requires. No existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(RxRing {
            map: Mapping { ptr, len },
            geometry,
            per_block: geometry.frames_per_block(),
            cursor: Cursor::default(),
        })
    }

    /// The status word of the slot at byte `offset` of the ring.
    #[inline]
    fn status(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + mem::size_of::<libc::tpacket2_hdr>() <= self.map.len);
        debug_assert_eq!(offset % libc::TPACKET_ALIGNMENT, 0);
        // SAFETY: `offset` is a slot start inside the mapping (cursor offsets
        // come from a validated geometry), slots are 16-byte aligned in a
        // page-aligned mapping, and `tp_status` is the slot's first u32.
        // AtomicU32 has u32's layout; the kernel updates the word
        // concurrently, which is why it is only accessed atomically.
        unsafe { &*self.map.ptr.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// The `tpacket2_hdr` of the slot at `offset`, copied out. Only called
    /// while this process owns the slot.
    #[inline]
    fn header(&self, offset: usize) -> libc::tpacket2_hdr {
        // SAFETY: as in `status`, a whole header lies at `offset`; this
        // process owns the slot (its status was acquire-loaded as
        // TP_STATUS_USER), so the kernel does not write it concurrently.
        unsafe {
            std::ptr::read(
                self.map
                    .ptr
                    .as_ptr()
                    .add(offset)
                    .cast::<libc::tpacket2_hdr>(),
            )
        }
    }

    /// The next complete received frame, if any, and the number of frames
    /// that were skipped (and returned to the kernel) on the way because the
    /// slot held only part of them (`tp_snaplen < tp_len`, `TP_STATUS_COPY`).
    #[inline]
    pub fn next(&mut self) -> (Option<RxSlot<'_>>, u32) {
        let mut skipped = 0u32;
        loop {
            let offset = self.cursor.offset;
            let status = self.status(offset).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                return (None, skipped);
            }
            let hdr = self.header(offset);
            let start = usize::from(hdr.tp_mac);
            let len = hdr.tp_snaplen as usize;
            let complete = status & libc::TP_STATUS_COPY == 0
                && hdr.tp_snaplen == hdr.tp_len
                && start >= mem::size_of::<libc::tpacket2_hdr>()
                && start
                    .checked_add(len)
                    .is_some_and(|end| end <= self.geometry.frame_size);
            if complete {
                return (
                    Some(RxSlot {
                        ring: self,
                        offset,
                        start,
                        len,
                    }),
                    skipped,
                );
            }
            self.release(offset);
            skipped += 1;
            if skipped as usize >= self.geometry.frame_nr {
                return (None, skipped);
            }
        }
    }

    /// Whether the slot under the cursor holds a frame (no syscall).
    #[inline]
    pub fn ready(&self) -> bool {
        self.status(self.cursor.offset).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Hand the slot at `offset` (the cursor's) back to the kernel and advance.
    #[inline]
    fn release(&mut self, offset: usize) {
        // Release: all reads of the slot happen before the kernel may reuse it.
        self.status(offset)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.cursor.advance(&self.geometry, self.per_block);
    }
}

/// A received frame in an RX ring slot owned by this process. Dropping it
/// returns the slot to the kernel.
pub(crate) struct RxSlot<'a> {
    ring: &'a mut RxRing,
    offset: usize,
    start: usize,
    len: usize,
}

impl RxSlot<'_> {
    /// The frame, Ethernet header first.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        // SAFETY: `start + len <= frame_size` was checked in `RxRing::next`,
        // so the bytes lie inside this slot of the mapping. The slot's status
        // is TP_STATUS_USER (acquire-loaded), so the kernel does not write it
        // until `Drop` stores TP_STATUS_KERNEL, which needs `&mut self` and
        // therefore ends every borrow of this slice first.
        unsafe {
            std::slice::from_raw_parts(
                self.ring.map.ptr.as_ptr().add(self.offset + self.start),
                self.len,
            )
        }
    }
}

impl Drop for RxSlot<'_> {
    #[inline]
    fn drop(&mut self) {
        self.ring.release(self.offset);
    }
}

// ---------------------------------------------------------------------------
// sendmmsg batches
// ---------------------------------------------------------------------------

/// A batch of frames in one owned buffer, sent with one `sendmmsg`.
///
/// The I/O vectors and message headers are allocated once; `send` points
/// them at the pending frames just before the call, so they never hold a
/// pointer across a borrow of the buffer.
pub(crate) struct FrameBatch {
    buf: Box<[u8]>,
    stride: usize,
    iov: Box<[libc::iovec]>,
    msgs: Box<[libc::mmsghdr]>,
    /// Frames written.
    count: usize,
    /// Frames already sent (a partial `sendmmsg` leaves the rest).
    sent: usize,
}

// SAFETY: the raw pointers in `iov` and `msgs` only ever point into this
// batch's own heap allocations (set in `send`, used during that call).
unsafe impl Send for FrameBatch {}

impl FrameBatch {
    /// Room for `capacity` frames of up to `stride` bytes.
    pub fn new(capacity: usize, stride: usize) -> FrameBatch {
        let iov = (0..capacity)
            .map(|_| libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            })
            .collect();
        let msgs = (0..capacity)
            .map(|_| {
                // SAFETY: mmsghdr is plain old data; all-zero is valid (no
                // address, no control data, no I/O vector yet).
                let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        FrameBatch {
            buf: vec![0u8; capacity * stride].into_boxed_slice(),
            stride,
            iov,
            msgs,
            count: 0,
            sent: 0,
        }
    }

    /// Frames written and not yet sent.
    pub fn pending(&self) -> usize {
        self.count - self.sent
    }

    /// Whether every buffer holds a frame not yet sent.
    pub fn is_full(&self) -> bool {
        self.count == self.iov.len()
    }

    /// The next free frame buffer, if the batch has room.
    pub fn next(&mut self) -> Option<&mut [u8]> {
        if self.count == self.iov.len() {
            return None;
        }
        let start = self.count * self.stride;
        Some(&mut self.buf[start..start + self.stride])
    }

    /// Keep the first `len` bytes of the buffer `next` returned as a frame.
    pub fn commit(&mut self, len: usize) {
        assert!(len <= self.stride && self.count < self.iov.len());
        self.iov[self.count].iov_len = len;
        self.count += 1;
    }

    /// Send the pending frames with one `sendmmsg`; returns how many went.
    pub fn send(&mut self, fd: BorrowedFd<'_>) -> io::Result<usize> {
        let n = self.pending();
        if n == 0 {
            return Ok(0);
        }
        // Point the vectors and headers at the pending frames.
        let base = self.buf.as_mut_ptr();
        for i in self.sent..self.count {
            self.iov[i].iov_base = base.wrapping_add(i * self.stride).cast();
        }
        let iov = self.iov.as_mut_ptr();
        for i in self.sent..self.count {
            self.msgs[i].msg_hdr.msg_iov = iov.wrapping_add(i);
        }
        let msgs = &mut self.msgs[self.sent..self.count];
        // SAFETY: `msgs` are valid message headers whose single iovec each
        // points to `iov_len <= stride` bytes inside `buf`, all alive and not
        // otherwise borrowed during the call; the kernel writes only msg_len.
        let done = syscall!(sendmmsg(
            fd.as_raw_fd(),
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT
        ))? as usize;
        self.sent += done;
        if self.sent == self.count {
            self.sent = 0;
            self.count = 0;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A non-blocking pair of connected Unix datagram sockets: `sendmmsg`
    /// works on them as on a packet socket, without privileges.
    fn datagram_pair() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a writable array of two ints.
        syscall!(socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr()
        ))
        .expect("socketpair");
        // SAFETY: both fds were just created and are owned by nobody else.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    fn recv_one(fd: &OwnedFd) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        // SAFETY: `buf` is writable for its length during the call.
        match syscall!(recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0)) {
            Ok(n) => {
                buf.truncate(n as usize);
                Some(buf)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(e) => panic!("recv: {e}"),
        }
    }

    #[test]
    fn frame_batch_sends_every_frame_once_in_order() {
        use std::os::fd::AsFd;
        let (tx, rx) = datagram_pair();
        let mut batch = FrameBatch::new(8, 100);
        let (mut written, mut sent, mut partial) = (0u32, 0usize, 0);
        let mut received = Vec::new();
        // Write far more than the peer queues, so sends come back partial or
        // with EAGAIN and the rest must go out later, in order.
        while written < 2000 {
            while let Some(buf) = batch.next() {
                let len = 4 + (written % 50) as usize;
                buf[..4].copy_from_slice(&written.to_be_bytes());
                batch.commit(len);
                written += 1;
            }
            assert!(batch.is_full());
            let pending = batch.pending();
            let n = match batch.send(tx.as_fd()) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                Err(e) => panic!("sendmmsg: {e}"),
            };
            sent += n;
            if n < pending {
                // The peer's queue is full: drain it (only then).
                partial += 1;
                while let Some(f) = recv_one(&rx) {
                    received.push(f);
                }
            }
        }
        while batch.pending() > 0 {
            while let Some(f) = recv_one(&rx) {
                received.push(f);
            }
            sent += batch.send(tx.as_fd()).unwrap_or(0);
        }
        while let Some(f) = recv_one(&rx) {
            received.push(f);
        }
        assert!(
            partial > 0,
            "the peer queue never filled; test proves nothing"
        );
        assert_eq!(sent, written as usize);
        assert_eq!(received.len(), written as usize);
        for (i, f) in received.iter().enumerate() {
            assert_eq!(f.len(), 4 + i % 50);
            assert_eq!(u32::from_be_bytes(f[..4].try_into().unwrap()), i as u32);
        }
    }

    #[test]
    fn cursor_visits_every_slot_in_order() {
        for (block_size, frame_size, block_nr) in
            [(8192, 1584, 3), (4096, 4096, 4), (65536, 9088, 2)]
        {
            let g = RingGeometry {
                block_size,
                block_nr,
                frame_size,
                frame_nr: block_nr * (block_size / frame_size),
            };
            let mut c = Cursor::default();
            for round in 0..2 {
                for i in 0..g.frame_nr {
                    assert_eq!(
                        (c.index, c.offset),
                        (i, g.slot_offset(i)),
                        "{g:?} round {round}"
                    );
                    c.advance(&g, g.frames_per_block());
                }
            }
            assert_eq!(c.index, 0);
        }
    }
}
