//! Link devices: where frames enter and leave the stack.
//!
//! The [`Device`] trait follows smoltcp's `phy::Device`: the stack asks for a
//! token, and the token lends it a buffer. A TX token hands out the device's own
//! transmit buffer (an mmap ring slot, a UMEM frame, a batch slot) so the
//! protocol writes headers and payload in place; an RX token lends the received
//! frame for the duration of a closure. Nothing is copied by the trait itself.
//!
//! Backends: [`sim::Sim`] (in-memory wire for deterministic tests),
//! [`afpacket::AfPacket`] (raw socket on one interface) and
//! [`afxdp::AfXdp`] (AF_XDP sockets fed by our XDP program). Middleware wraps any device:
//! [`fault::FaultInjector`] (seeded loss, duplication, reordering, corruption,
//! delay, partition) and [`pcap::PcapWriter`] (a capture that tshark reads).
//!
//! [`any::AnyLink`] is the backend chosen at run time (AF_XDP, falling back
//! to AF_PACKET with the reason, through [`any::open`]); [`local`] gives each
//! endpoint of a shared interface its port and carries frames between the
//! endpoints of one host; [`interfaces`] lists the host's interfaces and
//! which can carry LLC.
//!
//! Calls are generic over the device, so there is no dynamic dispatch per frame.

use std::io;
use std::os::fd::RawFd;

pub use crate::wire::Tail;
use std::time::Duration;

use crate::time::Instant;

#[cfg(target_os = "linux")]
pub mod afpacket;
#[cfg(target_os = "linux")]
pub mod afxdp;
#[cfg(target_os = "linux")]
pub mod any;
pub mod fault;
mod filter;
#[cfg(target_os = "linux")]
pub mod grant;
#[cfg(target_os = "linux")]
pub mod interfaces;
#[cfg(target_os = "linux")]
pub mod local;
pub mod pcap;
pub mod sim;
pub mod test_ping;

/// What a device can carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Largest Ethernet payload (everything after the 14-byte Ethernet header),
    /// i.e. the interface MTU.
    pub mtu: usize,
    /// Frames the device moves per syscall or ring kick; the stack sizes its
    /// polling bursts to it.
    pub max_burst: usize,
    /// Short human name of the backend and its mode, e.g. `af_packet/mmap`.
    pub backend: String,
    /// Frames the device can hold received but not yet taken (its RX ring),
    /// if bounded: more arriving in a burst are dropped by the kernel. The
    /// stack keeps its credit window below it, so that a peer never sends
    /// more than the receiver can hold.
    pub rx_queue_frames: Option<usize>,
}

impl Capabilities {
    /// Largest whole frame (Ethernet header included, FCS excluded).
    pub fn max_frame_len(&self) -> usize {
        self.mtu + crate::wire::ethernet::HEADER_LEN
    }
}

/// A received frame, lent to the consumer for the duration of a closure.
pub trait RxToken {
    /// Run `f` over the frame's bytes (Ethernet header first, no FCS).
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R;
}

/// Permission to transmit one frame.
pub trait TxToken {
    /// The device sends a frame's end from where it lies
    /// ([`TxToken::consume_gather`] is its own). When false, the default
    /// copies the end in, and a caller hands it the frame whole through
    /// [`TxToken::consume`] instead: the same bytes, without the tail's
    /// round trip.
    const GATHERS: bool = false;

    /// Lend `f` a buffer of [`Capabilities::max_frame_len`] bytes; `f` writes a
    /// frame at its start and returns the frame's length. Returning 0 cancels
    /// the transmission and gives the slot back.
    fn consume<F: FnOnce(&mut [u8]) -> usize>(self, f: F) -> usize;

    /// [`TxToken::consume`] for a frame whose end stays where it lies: `f`
    /// writes the frame's start and returns its length `n` and the rest of
    /// the frame ([`Tail`]: part of a message the caller holds, shared, not
    /// copied, then the tail's `trailer` bytes, which `f` wrote at
    /// `buf[n..]`). A device that sends from several places (AF_PACKET's
    /// `sendmmsg`) sends the rest from there; the default copies it in
    /// after the start. `f` keeps the whole frame within the buffer it is
    /// lent. Returns the whole frame's length (0: cancelled).
    fn consume_gather<F: FnOnce(&mut [u8]) -> (usize, Option<Tail>)>(self, f: F) -> usize
    where
        Self: Sized,
    {
        self.consume(|buf| match f(buf) {
            (0, _) => 0,
            (n, None) => n,
            (n, Some(tail)) => tail.join(buf, n).unwrap_or(0),
        })
    }
}

/// A link: a source and sink of whole Ethernet frames.
pub trait Device {
    /// Token lending one received frame.
    type RxToken<'a>: RxToken
    where
        Self: 'a;
    /// Token lending one transmit buffer.
    type TxToken<'a>: TxToken
    where
        Self: 'a;

    /// The next received frame, if one is ready. Never blocks.
    fn receive(&mut self, now: Instant) -> Option<Self::RxToken<'_>>;

    /// A transmit buffer, if the device has room. Never blocks. Frames written
    /// through tokens may be held in a batch until [`Device::flush`].
    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>>;

    /// Push every frame written so far onto the wire (one syscall or ring kick
    /// per batch). Cheap when nothing is pending.
    fn flush(&mut self, now: Instant) -> io::Result<()>;

    /// Block until a frame may be ready to receive, or `timeout` passes
    /// (`None`: no limit). Spurious wake-ups are allowed. Devices that cannot
    /// block (simulations) return at once.
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let _ = timeout;
        Ok(())
    }

    /// Get ready for a sleep outside the device (a progress thread polling
    /// several sources without holding the device): push the descriptors
    /// whose readability means a frame may be ready, and return the longest
    /// sleep the device allows (`None`: no limit; `Some(Duration::ZERO)`: a
    /// frame is ready now). Devices that cannot block (simulations) return
    /// `Some(Duration::ZERO)`.
    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration> {
        let _ = fds;
        Some(Duration::ZERO)
    }

    /// What this device can carry.
    fn capabilities(&self) -> Capabilities;

    /// The device's own counters since it was opened, named for reports:
    /// above all what the kernel dropped on receive (a ring with no room),
    /// which a reliable transport above sees only as loss. None by default.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// Frames the kernel dropped before this device could read them (its
    /// receive ring had no room): the one counter of [`Device::counters`]
    /// every report above needs by meaning, not by name. None by default.
    fn kernel_drops(&self) -> u64 {
        0
    }
}

/// Why a link could not be opened or used. Every variant says what to do.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The named interface does not exist in this network namespace.
    #[error("no such interface: {0:?} (list interfaces with `ip link`)")]
    NoSuchInterface(String),
    /// The process lacks a capability the backend needs.
    #[error("not permitted to open {what} on {iface}: needs {needs} (run as root or grant it with `setcap cap_net_raw,cap_net_admin,cap_bpf+ep`)")]
    PermissionDenied {
        /// Interface name.
        iface: String,
        /// What was being opened, e.g. "a raw packet socket".
        what: &'static str,
        /// The capabilities required, e.g. "CAP_NET_RAW".
        needs: &'static str,
    },
    /// Not permitted to open the socket, and the host's endpoint service,
    /// which opens it for ordinary users, cannot be asked (`link::grant`).
    #[error("not permitted to open a raw packet socket on {iface} (needs CAP_NET_RAW), and {why}: ask the administrator to install the stack once as root (scripts/install.sh) and start its service (`systemctl start llcd`, or `llcd --foreground`), or run as root")]
    NoService {
        /// Interface name.
        iface: String,
        /// Why the service could not be asked.
        why: String,
    },
    /// The host's endpoint service refused the request (its policy, a
    /// limit, a port held by another endpoint).
    #[error("the llcd service refused an endpoint on {iface}: {why}")]
    Refused {
        /// Interface name.
        iface: String,
        /// The service's reason.
        why: String,
    },
    /// Something else holds what the backend needs: another XDP program on
    /// the interface, another AF_XDP socket on the queue.
    #[error("{iface} is busy: {what}")]
    Busy {
        /// Interface name.
        iface: String,
        /// What is taken, by whom if known, and how to free it.
        what: String,
    },
    /// The interface exists but is administratively down.
    #[error("interface {0} is down (bring it up with `ip link set {0} up`)")]
    InterfaceDown(String),
    /// A backend feature is not available here (kernel, driver or mode).
    #[error("{0}")]
    Unsupported(String),
    /// Any other system error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What the backend was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl LinkError {
    /// A backend configuration value out of range.
    pub(crate) fn invalid_config(config: &str, problem: &str) -> LinkError {
        LinkError::Io {
            context: format!("invalid {config}"),
            source: io::Error::new(io::ErrorKind::InvalidInput, problem.to_string()),
        }
    }
}
