//! Every libc call of the crate, behind safe functions and owning types.
//!
//! This is the only module allowed to use `unsafe`. Each unsafe block is as
//! small as possible and carries a `// SAFETY:` line. System calls go through
//! [`syscall!`], which turns the C convention (-1 and `errno`) into
//! [`io::Error`]. Resources have owners that release them on drop: sockets are
//! [`OwnedFd`](std::os::fd::OwnedFd)s, mappings are [`Mapping`]s (the packet
//! RX ring, AF_XDP rings and UMEMs hold one), and a [`FrameBatch`] owns the
//! buffers its `sendmmsg` headers point into.
//!
//! Nothing here names a type of the layers above: errors are [`io::Error`]s,
//! which the link layer turns into its own errors.
//!
//! One file per concern: the clock ([`clock`]), interface queries
//! ([`iface`]), packet sockets and socket options ([`packet`]), the
//! endpoint service's unix sockets and descriptor passing ([`grant`]), readiness
//! ([`poll`]), memory mappings ([`mmap`]), the TPACKET_V2 RX ring ([`ring`]),
//! `sendmmsg` batches ([`batch`]), AF_XDP sockets ([`xsk`]), the shared
//! statistics page ([`shm`]), CRC32C ([`crc`]) and the frame MAC's NH and
//! POLYVAL ([`nh`], [`polyval`]; CPU intrinsics, no libc, but the same
//! rules). What
//! the rest of the crate uses is re-exported here.

use std::io;

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

mod batch;
mod clock;
pub(crate) mod crc;
mod grant;
mod iface;
mod mmap;
pub(crate) mod nh;
mod packet;
mod poll;
pub(crate) mod polyval;
mod ring;
mod shm;
pub(crate) mod xsk;

pub(crate) use batch::FrameBatch;
pub(crate) use clock::monotonic_nanos;
pub use grant::PeerCred;
pub(crate) use grant::{
    accept, lock_filter, peer_cred, recv_with_fds, send_with_fds, seqpacket_connect,
    seqpacket_listen, socket_kind,
};
pub(crate) use iface::{
    interface_addresses, interface_driver, interface_flags, interface_hw_type, interface_index,
    interface_mac, interface_mtu, interface_names, interface_rx_queues,
};
pub(crate) use mmap::page_size;
use mmap::Mapping;
use packet::setsockopt;
pub(crate) use packet::{
    attach_filter, bind_packet, packet_socket, packet_statistics, set_packet_option,
    set_receive_buffer, set_send_buffer, take_socket_error,
};
pub(crate) use poll::{poll_first_of, poll_in, Readiness};
pub(crate) use ring::{RingGeometry, RxRing, RxSlot, RX_MAC_OFFSET};
pub(crate) use shm::{ReadOnlyWords, SharedWords};

/// `x` rounded up to a multiple of the power of two `align`.
pub(crate) const fn align_up(x: usize, align: usize) -> usize {
    (x + align - 1) & !(align - 1)
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
