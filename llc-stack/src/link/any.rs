//! Backend choice: AF_XDP or AF_PACKET behind one device type, for code that
//! picks the backend at run time (tools, the message layer).
//!
//! `auto` tries AF_XDP (zero-copy then copy, native then generic XDP, as
//! [`AfXdpConfig`] says) and falls back to AF_PACKET unless the interface
//! itself is the problem; what was not obtained, and why, is returned as
//! notes for the user. It takes AF_PACKET at once for frames that would span
//! more than [`AUTO_GENERIC_MAX_CHUNKS`] UMEM chunks in generic XDP, and for
//! frames of more than one chunk there when the caller knows the endpoint is
//! alone on the interface ([`Sharing::Alone`]). Dispatch is one predictable
//! branch per call.

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::str::FromStr;
use std::time::Duration;

use super::afpacket::{AfPacket, AfPacketConfig, AfPacketRxToken, AfPacketTxToken};
use super::afxdp::{self, AfXdp, AfXdpConfig, AfXdpRxToken, AfXdpTxToken};
use super::interfaces;
use super::{Capabilities, Device, LinkError, RxToken, Tail, TxToken};
use crate::time::Instant;
use crate::wire::MacAddr;

/// Which backend to open.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// AF_XDP when it can be set up, else AF_PACKET.
    #[default]
    Auto,
    /// AF_XDP only.
    Xdp,
    /// AF_PACKET only.
    Packet,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::Xdp => "xdp",
            Backend::Packet => "packet",
        })
    }
}

impl FromStr for Backend {
    type Err = LinkError;
    fn from_str(s: &str) -> Result<Self, LinkError> {
        match s {
            "auto" => Ok(Backend::Auto),
            "xdp" => Ok(Backend::Xdp),
            "packet" => Ok(Backend::Packet),
            _ => Err(LinkError::invalid_config(
                "backend",
                &format!("{s:?}: expected auto, xdp or packet"),
            )),
        }
    }
}

/// Most UMEM chunks a frame may span for `auto` to pick AF_XDP in generic
/// (skb) mode. Generic AF_XDP copies every frame into a chain of 4 KiB
/// chunks (and on veth copies a multi-page frame once more before the
/// program sees it); AF_PACKET copies it once into its ring. Measured on
/// veth (docs/BENCHMARKS.md, issue 24): at 65000 (16 chunks) AF_PACKET
/// moves 1 MiB messages at twice the rate with the same small-message
/// latency; at MTU 9000 (3 chunks) AF_PACKET is ahead too, by less, and
/// AF_XDP's steering decides where many endpoints share the interface, so
/// there `auto` leaves AF_XDP unless the endpoint is alone
/// ([`Sharing::Alone`]). Native and zero-copy AF_XDP are not affected.
pub const AUTO_GENERIC_MAX_CHUNKS: usize = 3;

/// What the caller knows of the other endpoints on the interface, for
/// `auto`'s choice.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Sharing {
    /// Nothing: other endpoints may open the interface too (the ranks of
    /// an MPI job on a host, a file system's clients), where AF_XDP's
    /// steering hands each its own frames.
    #[default]
    Unknown,
    /// This endpoint is the only one of its job on the interface (one MPI
    /// rank per host, or one per NIC).
    Alone,
}

/// Why `auto` skips generic AF_XDP on an interface of `mtu`, if it does.
/// Beyond [`AUTO_GENERIC_MAX_CHUNKS`] chunks per frame always; from two
/// chunks on for an endpoint alone on the interface: there copy-mode AF_XDP
/// copies a jumbo frame once more than AF_PACKET on each side and chains
/// it, and its steering, which is what pays when many endpoints share the
/// interface, has nobody to steer (docs/BENCHMARKS.md, "`auto` for an
/// endpoint alone on its interface").
fn generic_skipped(mtu: usize, sharing: Sharing) -> Option<String> {
    let chunks = afxdp::chunks_per_frame(mtu);
    if chunks > AUTO_GENERIC_MAX_CHUNKS {
        return Some(format!(
            "backend auto: at MTU {mtu} a frame spans {chunks} AF_XDP chunks in generic (copy) \
             mode, where AF_PACKET moves large frames at about twice the rate; using AF_PACKET \
             (backend=xdp forces AF_XDP)"
        ));
    }
    (chunks > 1 && sharing == Sharing::Alone).then(|| {
        format!(
            "backend auto: the only endpoint on the interface at MTU {mtu}, where a frame spans \
             {chunks} AF_XDP chunks in generic (copy) mode and AF_PACKET moves large messages \
             faster; using AF_PACKET (backend=xdp forces AF_XDP)"
        )
    })
}

/// An opened AF_XDP or AF_PACKET link.
pub enum AnyLink {
    /// AF_PACKET raw socket.
    Packet(AfPacket),
    /// AF_XDP socket(s) with the project's XDP program.
    Xdp(AfXdp),
}

/// Open `backend` on `ifname`. Returns the link and notes on what was not
/// obtained and why (zero-copy refused, AF_XDP unavailable...).
pub fn open(
    ifname: &str,
    backend: Backend,
    packet: AfPacketConfig,
    xdp: AfXdpConfig,
) -> Result<(AnyLink, Vec<String>), LinkError> {
    open_shared(ifname, backend, Sharing::Unknown, packet, xdp)
}

/// [`open`], for an endpoint whose company on the interface the caller
/// knows (`sharing`), which `auto` takes into account.
pub fn open_shared(
    ifname: &str,
    backend: Backend,
    sharing: Sharing,
    packet: AfPacketConfig,
    xdp: AfXdpConfig,
) -> Result<(AnyLink, Vec<String>), LinkError> {
    let xdp_notes = |dev: &AfXdp| -> Vec<String> {
        dev.fallbacks()
            .iter()
            .map(|f| format!("AF_XDP: {f}; using {}", dev.capabilities().backend))
            .collect()
    };
    if backend == Backend::Auto && afxdp::takes_generic(ifname, &xdp) == Some(true) {
        // Known before opening (a veth, or generic asked for): no program
        // attached only to be taken away again.
        let skip = |mtu| generic_skipped(mtu, sharing);
        if let Some(why) = interfaces::mtu(ifname).ok().and_then(skip) {
            return Ok((AnyLink::Packet(AfPacket::open(ifname, packet)?), vec![why]));
        }
    }
    match backend {
        Backend::Packet => Ok((AnyLink::Packet(AfPacket::open(ifname, packet)?), vec![])),
        Backend::Xdp => {
            let dev = AfXdp::open(ifname, xdp)?;
            let notes = xdp_notes(&dev);
            Ok((AnyLink::Xdp(dev), notes))
        }
        Backend::Auto => match AfXdp::open(ifname, xdp) {
            Ok(dev) => {
                // Generic mode was known only once opened (no native XDP).
                if dev.generic() {
                    if let Some(why) = generic_skipped(dev.mtu(), sharing) {
                        drop(dev);
                        let dev = AfPacket::open(ifname, packet)?;
                        return Ok((AnyLink::Packet(dev), vec![why]));
                    }
                }
                let notes = xdp_notes(&dev);
                Ok((AnyLink::Xdp(dev), notes))
            }
            Err(e @ (LinkError::NoSuchInterface(_) | LinkError::InterfaceDown(_))) => Err(e),
            Err(e) => {
                let dev = AfPacket::open(ifname, packet)?;
                let note = match (&e, dev.granted()) {
                    (LinkError::PermissionDenied { .. }, true) => format!(
                        "backend auto: AF_XDP needs privileges this process lacks; using {} \
                         opened by the llcd service",
                        dev.capabilities().backend
                    ),
                    _ => format!(
                        "backend auto: AF_XDP unavailable ({e}); using {}",
                        dev.capabilities().backend
                    ),
                };
                Ok((AnyLink::Packet(dev), vec![note]))
            }
        },
    }
}

impl fmt::Debug for AnyLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnyLink({})", self.capabilities().backend)
    }
}

impl AnyLink {
    /// The interface's MAC address.
    pub fn mac(&self) -> MacAddr {
        MacAddr(match self {
            AnyLink::Packet(d) => d.mac(),
            AnyLink::Xdp(d) => d.mac(),
        })
    }

    /// The transport port the link receives when it shares its interface
    /// with other endpoints (the configs' `port`); the claimed one when 0
    /// was asked. `None`: every port of the SAP.
    pub fn port(&self) -> Option<u16> {
        match self {
            AnyLink::Packet(d) => d.port(),
            AnyLink::Xdp(d) => d.port(),
        }
    }

    /// The interface's MTU.
    pub fn mtu(&self) -> usize {
        match self {
            AnyLink::Packet(d) => d.mtu(),
            AnyLink::Xdp(d) => d.mtu(),
        }
    }
}

/// A received frame of either backend.
pub enum AnyRxToken<'a> {
    /// From AF_PACKET.
    Packet(AfPacketRxToken<'a>),
    /// From AF_XDP.
    Xdp(AfXdpRxToken<'a>),
}

impl RxToken for AnyRxToken<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self {
            AnyRxToken::Packet(t) => t.consume(f),
            AnyRxToken::Xdp(t) => t.consume(f),
        }
    }
}

/// A transmit buffer of either backend.
pub enum AnyTxToken<'a> {
    /// From AF_PACKET.
    Packet(AfPacketTxToken<'a>),
    /// From AF_XDP.
    Xdp(AfXdpTxToken<'a>),
}

impl TxToken for AnyTxToken<'_> {
    /// AF_PACKET's tokens gather (AF_XDP's copy, as the default would).
    const GATHERS: bool = true;

    fn consume<F: FnOnce(&mut [u8]) -> usize>(self, f: F) -> usize {
        match self {
            AnyTxToken::Packet(t) => t.consume(f),
            AnyTxToken::Xdp(t) => t.consume(f),
        }
    }

    fn consume_gather<F: FnOnce(&mut [u8]) -> (usize, Option<Tail>)>(self, f: F) -> usize {
        match self {
            AnyTxToken::Packet(t) => t.consume_gather(f),
            AnyTxToken::Xdp(t) => t.consume_gather(f),
        }
    }
}

impl Device for AnyLink {
    type RxToken<'a> = AnyRxToken<'a>;
    type TxToken<'a> = AnyTxToken<'a>;

    fn receive(&mut self, now: Instant) -> Option<AnyRxToken<'_>> {
        match self {
            AnyLink::Packet(d) => d.receive(now).map(AnyRxToken::Packet),
            AnyLink::Xdp(d) => d.receive(now).map(AnyRxToken::Xdp),
        }
    }

    fn transmit(&mut self, now: Instant) -> Option<AnyTxToken<'_>> {
        match self {
            AnyLink::Packet(d) => d.transmit(now).map(AnyTxToken::Packet),
            AnyLink::Xdp(d) => d.transmit(now).map(AnyTxToken::Xdp),
        }
    }

    fn flush(&mut self, now: Instant) -> io::Result<()> {
        match self {
            AnyLink::Packet(d) => d.flush(now),
            AnyLink::Xdp(d) => d.flush(now),
        }
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        match self {
            AnyLink::Packet(d) => d.wait(timeout),
            AnyLink::Xdp(d) => d.wait(timeout),
        }
    }

    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration> {
        match self {
            AnyLink::Packet(d) => d.prepare_wait(fds),
            AnyLink::Xdp(d) => d.prepare_wait(fds),
        }
    }

    fn capabilities(&self) -> Capabilities {
        match self {
            AnyLink::Packet(d) => d.capabilities(),
            AnyLink::Xdp(d) => d.capabilities(),
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        match self {
            AnyLink::Packet(d) => d.counters(),
            AnyLink::Xdp(d) => d.counters(),
        }
    }

    fn kernel_drops(&self) -> u64 {
        match self {
            AnyLink::Packet(d) => d.kernel_drops(),
            AnyLink::Xdp(d) => d.kernel_drops(),
        }
    }
}
