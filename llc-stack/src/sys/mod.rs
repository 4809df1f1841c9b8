//! Every libc call of the crate, behind safe functions and owning types.
//!
//! This is the only module allowed to use `unsafe`. Each unsafe block is as
//! small as possible and carries a `// SAFETY:` line. System calls go through
//! [`syscall!`], which turns the C convention (-1 and `errno`) into
//! [`io::Error`]. Resources have owners that release them on drop: sockets are
//! [`OwnedFd`]s, the packet rings are a [`PacketRings`] whose drop unmaps them.
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
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::link::LinkError;

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

/// Offset of the frame data in a TX ring slot: TPACKET_V2 without
/// `PACKET_TX_HAS_OFF` puts it right after the aligned `tpacket2_hdr`.
pub(crate) const TX_DATA_OFFSET: usize =
    libc::TPACKET2_HDRLEN - mem::size_of::<libc::sockaddr_ll>();

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

fn io_error(context: impl Into<String>, source: io::Error) -> LinkError {
    LinkError::Io {
        context: context.into(),
        source,
    }
}

// ---------------------------------------------------------------------------
// Interface lookups
// ---------------------------------------------------------------------------

/// A datagram socket used only to ask the kernel about interfaces of the
/// calling thread's network namespace.
fn control_socket() -> Result<OwnedFd, LinkError> {
    // SAFETY: socket() takes no pointers.
    let fd = syscall!(socket(
        libc::AF_INET,
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
        0
    ))
    .map_err(|e| io_error("creating a control socket for interface ioctls", e))?;
    // SAFETY: fd was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An `ifreq` naming `name`, or `NoSuchInterface` if the name cannot be one.
fn ifreq_for(name: &str) -> Result<libc::ifreq, LinkError> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(LinkError::NoSuchInterface(name.to_owned()));
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
fn ifreq_get(name: &str, request: libc::c_ulong, what: &str) -> Result<libc::ifreq, LinkError> {
    let mut req = ifreq_for(name)?;
    let sock = control_socket()?;
    // SAFETY: `req` is a valid, writable ifreq that outlives the call; every
    // SIOCGIF* request reads the name and writes only inside the struct.
    match syscall!(ioctl(
        sock.as_raw_fd(),
        request as _,
        &mut req as *mut libc::ifreq
    )) {
        Ok(_) => Ok(req),
        Err(e) if is_errno(&e, &[libc::ENODEV, libc::ENXIO]) => {
            Err(LinkError::NoSuchInterface(name.to_owned()))
        }
        Err(e) => Err(io_error(
            format!("reading the {what} of interface {name}"),
            e,
        )),
    }
}

/// Index of interface `name` in the calling thread's network namespace.
pub(crate) fn interface_index(name: &str) -> Result<u32, LinkError> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(LinkError::NoSuchInterface(name.to_owned()));
    }
    let cname = CString::new(name).map_err(|_| LinkError::NoSuchInterface(name.to_owned()))?;
    // SAFETY: cname is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if index != 0 {
        return Ok(index);
    }
    let err = io::Error::last_os_error();
    if is_errno(&err, &[libc::ENODEV, libc::ENXIO]) {
        Err(LinkError::NoSuchInterface(name.to_owned()))
    } else {
        Err(io_error(format!("looking up interface {name}"), err))
    }
}

/// Hardware (MAC) address of interface `name`.
pub(crate) fn interface_mac(name: &str) -> Result<[u8; 6], LinkError> {
    let req = ifreq_get(name, libc::SIOCGIFHWADDR, "hardware address")?;
    // SAFETY: SIOCGIFHWADDR succeeded, so the kernel filled `ifru_hwaddr`.
    let addr = unsafe { req.ifr_ifru.ifru_hwaddr };
    let mut mac = [0u8; 6];
    for (dst, src) in mac.iter_mut().zip(addr.sa_data.iter()) {
        *dst = *src as u8;
    }
    Ok(mac)
}

/// MTU of interface `name`: the largest payload after the Ethernet header.
pub(crate) fn interface_mtu(name: &str) -> Result<usize, LinkError> {
    let req = ifreq_get(name, libc::SIOCGIFMTU, "MTU")?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel filled `ifru_mtu`.
    let mtu = unsafe { req.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as usize)
}

/// Whether interface `name` is administratively up (`IFF_UP`).
pub(crate) fn interface_is_up(name: &str) -> Result<bool, LinkError> {
    let req = ifreq_get(name, libc::SIOCGIFFLAGS, "flags")?;
    // SAFETY: SIOCGIFFLAGS succeeded, so the kernel filled `ifru_flags`.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    Ok(libc::c_int::from(flags) & libc::IFF_UP != 0)
}

/// Number of RX queues of interface `name` (`ETHTOOL_GCHANNELS`: RX-only plus
/// combined channels). Drivers without the ethtool call count as one queue.
pub(crate) fn interface_rx_queues(name: &str) -> Result<u32, LinkError> {
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
    let mut req = ifreq_for(name)?;
    req.ifr_ifru.ifru_data = (&mut channels as *mut EthtoolChannels).cast::<libc::c_char>();
    let sock = control_socket()?;
    // SAFETY: `req` names the interface and points `ifru_data` at
    // `channels`, a writable ethtool_channels that outlives the call; the
    // kernel reads `cmd` and writes only inside that struct.
    match syscall!(ioctl(
        sock.as_raw_fd(),
        libc::SIOCETHTOOL as _,
        &mut req as *mut libc::ifreq
    )) {
        Ok(_) => Ok((channels.rx_count + channels.combined_count).max(1)),
        Err(e) if is_errno(&e, &[libc::EOPNOTSUPP, libc::EINVAL]) => Ok(1),
        Err(e) if is_errno(&e, &[libc::ENODEV, libc::ENXIO]) => {
            Err(LinkError::NoSuchInterface(name.to_owned()))
        }
        Err(e) => Err(io_error(
            format!("reading the channel count of interface {name}"),
            e,
        )),
    }
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

/// Ask the kernel to transmit every `TP_STATUS_SEND_REQUEST` slot of the TX
/// ring, without waiting for completions. Returns the bytes it queued.
pub(crate) fn kick_tx_ring(fd: BorrowedFd<'_>) -> io::Result<usize> {
    // SAFETY: a zero-length send with a null buffer reads no user memory;
    // with a TX ring the kernel takes the frames from the ring instead.
    let sent = syscall!(send(
        fd.as_raw_fd(),
        std::ptr::null(),
        0,
        libc::MSG_DONTWAIT
    ))?;
    Ok(sent as usize)
}

/// Wait until `fd` is readable or `timeout` passes (`None`: forever).
/// Returns whether it is readable; `EINTR` counts as a spurious wake-up.
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    let timeout_ms = match timeout {
        None => -1,
        Some(t) => {
            // Round up so that a short non-zero timeout still blocks.
            let ms = t.as_nanos().div_ceil(1_000_000);
            libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
        }
    };
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `pfd` is one valid, writable pollfd for the duration of the call.
    match syscall!(poll(&mut pfd, 1, timeout_ms)) {
        Ok(n) => Ok(n > 0 && pfd.revents & (libc::POLLIN | libc::POLLERR) != 0),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(e) => Err(e),
    }
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

    /// Offset of slot `index` from the start of the ring.
    #[inline]
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

/// A shared memory mapping of a socket's rings; unmapped on drop.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe a mapping created by mmap in
        // `PacketRings::new` and not unmapped before; no slice into it
        // outlives `PacketRings` (slot handles borrow it).
        let _ = syscall!(munmap(self.ptr.as_ptr().cast::<libc::c_void>(), self.len));
    }
}

/// The RX and TX rings of one packet socket, mapped into this process.
///
/// The kernel and this process share each slot; the slot's status word says
/// who owns it. This type reads a slot's bytes only while this process owns
/// it, and hands ownership back with release ordering after the last access.
pub(crate) struct PacketRings {
    map: Mapping,
    rx: RingGeometry,
    tx: RingGeometry,
    /// RX frames per block.
    rx_per_block: usize,
    /// Next RX slot to look at.
    rx_cursor: Cursor,
    /// TX frames handed to the kernel (`TP_STATUS_SEND_REQUEST`), ever.
    tx_written: u64,
    /// TX frames the kernel has picked up (no longer `SEND_REQUEST`), ever.
    tx_taken: u64,
}

// SAFETY: the mapping is process-wide memory with no thread affinity; moving
// the owner to another thread moves the only handle to it.
unsafe impl Send for PacketRings {}

impl PacketRings {
    /// Switch `fd` to TPACKET_V2 with `PACKET_LOSS` (malformed TX frames are
    /// skipped rather than stalling the ring), install an RX and a TX ring
    /// with these layouts, and map both. Must run before the socket is bound.
    pub fn new(
        fd: BorrowedFd<'_>,
        rx: RingGeometry,
        tx: RingGeometry,
        with_tx: bool,
    ) -> io::Result<PacketRings> {
        let page = page_size();
        if !rx.is_valid(page, libc::TPACKET2_HDRLEN) || !tx.is_valid(page, libc::TPACKET2_HDRLEN) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "invalid packet ring geometry",
            ));
        }
        set_packet_option(fd, libc::PACKET_VERSION, TPACKET_V2)?;
        set_packet_option(fd, libc::PACKET_LOSS, 1)?;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &rx.to_req()?)?;
        if with_tx {
            setsockopt(fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &tx.to_req()?)?;
        }
        let len = rx.ring_bytes() + if with_tx { tx.ring_bytes() } else { 0 };
        // SAFETY: a fresh shared mapping of the socket's rings at an address
        // chosen by the kernel; the length is exactly both rings, as the
        // kernel requires. No existing memory is affected.
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
        Ok(PacketRings {
            map: Mapping { ptr, len },
            rx,
            tx,
            rx_per_block: rx.frames_per_block(),
            rx_cursor: Cursor::default(),
            tx_written: 0,
            tx_taken: 0,
        })
    }

    /// The status word of the slot at byte `offset` of the mapping.
    #[inline]
    fn status(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + mem::size_of::<libc::tpacket2_hdr>() <= self.map.len);
        debug_assert_eq!(offset % libc::TPACKET_ALIGNMENT, 0);
        // SAFETY: `offset` is a slot start inside the mapping (slot offsets
        // come from a validated geometry), slots are 16-byte aligned in a
        // page-aligned mapping, and `tp_status` is the slot's first u32.
        // AtomicU32 has u32's layout; the kernel updates the word
        // concurrently, which is why it is only accessed atomically.
        unsafe { &*self.map.ptr.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// The `tpacket2_hdr` of the slot at `offset`, copied out. Only valid to
    /// call while this process owns the slot.
    #[inline]
    fn header(&self, offset: usize) -> libc::tpacket2_hdr {
        // SAFETY: as in `status`, a whole header lies at `offset`; this
        // process owns the slot (caller's contract, after an acquire load of
        // the status), so the kernel does not write it concurrently.
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

    // --- RX -------------------------------------------------------------

    /// The next complete received frame, if any, and the number of frames
    /// that were skipped (and returned to the kernel) on the way because the
    /// slot held only part of them (`tp_snaplen < tp_len`, `TP_STATUS_COPY`).
    #[inline]
    pub fn rx_next(&mut self) -> (Option<RxSlot<'_>>, u32) {
        let mut skipped = 0u32;
        loop {
            let offset = self.rx_cursor.offset;
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
                    .is_some_and(|end| end <= self.rx.frame_size);
            if complete {
                return (
                    Some(RxSlot {
                        rings: self,
                        offset,
                        start,
                        len,
                    }),
                    skipped,
                );
            }
            self.rx_release(offset);
            skipped += 1;
            if skipped as usize >= self.rx.frame_nr {
                return (None, skipped);
            }
        }
    }

    /// Whether the RX slot under the cursor holds a frame (cheap, no syscall).
    pub fn rx_ready(&self) -> bool {
        let offset = self.rx_cursor.offset;
        self.status(offset).load(Ordering::Acquire) & libc::TP_STATUS_USER != 0
    }

    /// Hand the slot at `offset` (the cursor's) back to the kernel and advance.
    #[inline]
    fn rx_release(&mut self, offset: usize) {
        // Release: all reads of the slot happen before the kernel may reuse it.
        self.status(offset)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.rx_cursor.advance(&self.rx, self.rx_per_block);
    }

    // --- TX -------------------------------------------------------------

    /// TX frames handed to the kernel that it has not picked up yet (as of
    /// the last [`PacketRings::tx_reap`]).
    #[inline]
    pub fn tx_unkicked(&self) -> usize {
        (self.tx_written - self.tx_taken) as usize
    }

    /// After a kick: advance past the slots the kernel has picked up.
    pub fn tx_reap(&mut self) {
        while self.tx_taken < self.tx_written {
            let index = (self.tx_taken % self.tx.frame_nr as u64) as usize;
            let offset = self.tx_base() + self.tx.slot_offset(index);
            let status = self.status(offset).load(Ordering::Acquire);
            if status & libc::TP_STATUS_SEND_REQUEST != 0 {
                break;
            }
            self.tx_taken += 1;
        }
    }

    /// Whether the next TX slot is free for writing.
    #[inline]
    pub fn tx_has_room(&self) -> bool {
        if self.tx_unkicked() >= self.tx.frame_nr {
            return false;
        }
        let index = (self.tx_written % self.tx.frame_nr as u64) as usize;
        let offset = self.tx_base() + self.tx.slot_offset(index);
        let busy =
            libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING | libc::TP_STATUS_WRONG_FORMAT;
        // Free is TP_STATUS_AVAILABLE (0), possibly with timestamp flags.
        self.status(offset).load(Ordering::Acquire) & busy == 0
    }

    /// The next free TX slot, lent for writing one frame of at most
    /// `max_len` bytes (`max_len` is capped to what the slot holds).
    #[inline]
    pub fn tx_next(&mut self, max_len: usize) -> Option<TxSlot<'_>> {
        if !self.tx_has_room() {
            return None;
        }
        let index = (self.tx_written % self.tx.frame_nr as u64) as usize;
        let offset = self.tx.slot_offset(index);
        let len = max_len.min(self.tx.frame_size - TX_DATA_OFFSET);
        Some(TxSlot {
            rings: self,
            offset,
            len,
        })
    }

    fn tx_base(&self) -> usize {
        self.rx.ring_bytes()
    }
}

/// A received frame in an RX ring slot owned by this process. Dropping it
/// returns the slot to the kernel.
pub(crate) struct RxSlot<'a> {
    rings: &'a mut PacketRings,
    offset: usize,
    start: usize,
    len: usize,
}

impl RxSlot<'_> {
    /// The frame, Ethernet header first.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        // SAFETY: `start + len <= frame_size` was checked in `rx_next`, so the
        // bytes lie inside this slot of the mapping. The slot's status is
        // TP_STATUS_USER (acquire-loaded), so the kernel does not write it
        // until `Drop` stores TP_STATUS_KERNEL, which needs `&mut self` and
        // therefore ends every borrow of this slice first.
        unsafe {
            std::slice::from_raw_parts(
                self.rings.map.ptr.as_ptr().add(self.offset + self.start),
                self.len,
            )
        }
    }
}

impl Drop for RxSlot<'_> {
    #[inline]
    fn drop(&mut self) {
        self.rings.rx_release(self.offset);
    }
}

/// A free TX ring slot owned by this process. [`TxSlot::send`] hands the
/// written frame to the kernel (transmitted at the next kick); dropping the
/// slot without sending leaves it free.
pub(crate) struct TxSlot<'a> {
    rings: &'a mut PacketRings,
    /// Offset of the slot inside the TX ring.
    offset: usize,
    /// Usable bytes of the data area.
    len: usize,
}

impl TxSlot<'_> {
    /// The slot's data area for one frame, Ethernet header first.
    #[inline]
    pub fn buf(&mut self) -> &mut [u8] {
        let start = self.rings.tx_base() + self.offset + TX_DATA_OFFSET;
        // SAFETY: `TX_DATA_OFFSET + len <= frame_size` (see `tx_next`), so the
        // bytes lie inside this slot of the mapping. The slot's status is
        // TP_STATUS_AVAILABLE (acquire-loaded), so the kernel neither reads
        // nor writes it until `send` stores TP_STATUS_SEND_REQUEST, which
        // consumes `self` and so ends this borrow first.
        unsafe { std::slice::from_raw_parts_mut(self.rings.map.ptr.as_ptr().add(start), self.len) }
    }

    /// Queue the first `len` bytes of the data area for transmission.
    #[inline]
    pub fn send(self, len: usize) {
        assert!(len <= self.len, "TX frame longer than its slot");
        let slot = self.rings.tx_base() + self.offset;
        // SAFETY: `tp_len` lies inside the slot's header, which this process
        // owns (status TP_STATUS_AVAILABLE) until the release store below.
        unsafe {
            let hdr = self
                .rings
                .map
                .ptr
                .as_ptr()
                .add(slot)
                .cast::<libc::tpacket2_hdr>();
            std::ptr::addr_of_mut!((*hdr).tp_len).write(len as u32);
        }
        // Release: the frame bytes and tp_len are visible before the kernel
        // sees the request.
        self.rings
            .status(slot)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.rings.tx_written += 1;
    }
}

// ---------------------------------------------------------------------------
// sendmmsg batches
// ---------------------------------------------------------------------------

/// A batch of frames in one owned buffer, sent with one `sendmmsg`.
///
/// The message headers point into the buffer once, at construction; heap
/// memory of a boxed slice does not move when the batch does.
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

// SAFETY: the raw pointers in `iov` and `msgs` point into this batch's own
// heap allocations, which move with it; nothing is shared with other threads.
unsafe impl Send for FrameBatch {}

impl FrameBatch {
    /// Room for `capacity` frames of up to `stride` bytes.
    pub fn new(capacity: usize, stride: usize) -> FrameBatch {
        let mut buf = vec![0u8; capacity * stride].into_boxed_slice();
        let base = buf.as_mut_ptr();
        let mut iov: Box<[libc::iovec]> = (0..capacity)
            .map(|i| libc::iovec {
                // In bounds: i < capacity, so i * stride < buf.len() (or 0).
                iov_base: base.wrapping_add(i * stride).cast(),
                iov_len: 0,
            })
            .collect();
        let iov_base = iov.as_mut_ptr();
        let msgs = (0..capacity)
            .map(|i| {
                // SAFETY: mmsghdr is plain old data; all-zero is valid (no
                // address, no control data).
                let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
                m.msg_hdr.msg_iov = iov_base.wrapping_add(i);
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        FrameBatch {
            buf,
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
        // Re-derive the pointers from the current borrows of the buffers, so
        // they are valid after the `&mut` accesses made while writing frames.
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
