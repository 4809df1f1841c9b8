//! `AfXdp`: AF_XDP sockets on one interface, fed by the project's XDP
//! program (crate `xdp-prog`), which redirects only frames carrying our LLC
//! SAP and passes everything else (IP, ARP, IPv6 ND) to the kernel.
//!
//! # What is set up
//! 1. The XDP program, attached through a BPF link owned by this device (it
//!    detaches when the device is dropped and when the process dies, even by
//!    SIGKILL). Native XDP first, generic if the driver has none (or as
//!    [`AfXdpConfig::attach`] says); on veth `auto` takes generic XDP, the
//!    faster mode there, which also leaves other traffic its offloads. The `xdp.frags` variant when frames can
//!    span several buffers.
//! 2. One AF_XDP socket per RX queue in use ([`AfXdpConfig::queue`]: one queue,
//!    or all of the interface's RX queues), each with its own UMEM and rings
//!    (or, on an interface shared with other endpoints, the queue's shared
//!    buffer pool; see below), registered in the program's XSKMAP. Zero-copy is tried first in
//!    [`XdpMode::Auto`] (veth refuses it with EOPNOTSUPP; then copy mode).
//!
//! # Chunks and multi-buffer frames
//! UMEM chunks are 4096 bytes (a page: the largest aligned-mode chunk). A
//! received frame larger than a chunk minus the kernel's 256-byte headroom
//! (3840 bytes) arrives in several descriptors; the socket is then bound with
//! `XDP_USE_SG` and such frames are reassembled into a scratch buffer, while
//! single-buffer frames are lent in place. Transmit slots are runs of
//! consecutive chunks, so the TX token lends one contiguous buffer of a whole
//! frame in the UMEM (no copy) and a long frame leaves as one descriptor per
//! chunk, chained with `XDP_PKT_CONTD`: 3 descriptors at MTU 9000, 16 at
//! 65000 (within the kernel's 17 fragments per skb). Larger chunks would need
//! hugepage-backed unaligned UMEM; this keeps the kernel requirement at 6.6
//! for multi-buffer and needs nothing special at MTU 1500.
//!
//! # Transmit kicks
//! Copy mode transmits inside `sendto`, by default at most 32 descriptors
//! per call (the kernel's `TX_BATCH_SIZE`); on Linux 6.17+ the socket raises
//! that to its whole TX ring (`XDP_MAX_TX_SKB_BUDGET`), which matters for
//! multi-buffer frames (16 descriptors each at MTU 65000). Frames are batched
//! in the TX ring and pushed by [`Device::flush`] (or when
//! [`AfXdpConfig::tx_batch`] frames wait), which kicks until the ring is
//! drained or the kernel stops making progress. Zero-copy kicks only when the kernel sets `need_wakeup`.
//!
//! # Waiting
//! [`Device::wait`] spins on the RX rings for [`AfXdpConfig::busy_poll`],
//! then sleeps in `poll(2)` on the sockets.
//!
//! # An interface shared with other endpoints
//! With [`AfXdpConfig::port`] set, the device is one endpoint of several on
//! the interface (MPI ranks of a node): it claims its port
//! ([`crate::link::local`]), joins the interface's shared XDP program
//! (`xdp_prog::shared`: attached by the first endpoint, taken over by the
//! others, detached by the kernel when the last one exits or is killed) and
//! registers its sockets for its port, so the program hands it only its own
//! frames and passes the rest to the kernel, where endpoints on AF_PACKET
//! find theirs.
//!
//! The kernel keeps one buffer pool per (interface, RX queue), so all
//! endpoints on a queue share it (`XDP_SHARED_UMEM`; `sys::xsk` pool module
//! for the details). The first endpoint on a queue creates the pool: its
//! UMEM is a memfd mapped shared, it owns the fill and completion rings, and
//! it offers its socket and memfd descriptors under an abstract unix socket
//! name. Later endpoints take duplicates (`pidfd_getfd`), map the memfd and
//! the pool's fill and completion rings, and bind their own socket (own RX
//! and TX rings) with `XDP_SHARED_UMEM`; each then offers its own socket and
//! memfd too, so the pool outlives its creator. Many endpoints on a NIC
//! with one RX queue (veth, most virtio-net) thus all get AF_XDP.
//!
//! - **Lock**: the fill ring's producer and the completion ring's consumer
//!   are shared by the processes, serialised by a spinlock word in the pool
//!   header holding the holder's pid; a waiter steals it from a dead holder
//!   (`pidfd_open`: gone, or exited as a zombie). Ring updates publish their
//!   index last, and completions go through a one-entry journal, so a member
//!   killed at any instruction leaves both rings consistent.
//! - **TX**: every member has its own region of [`AfXdpConfig::tx_frames`]
//!   slots in the UMEM; completions (which all members' sockets post to the
//!   one completion ring) are attributed to their slot by whoever drains
//!   the ring, through per-slot counters in the pool header.
//! - **RX and flow control**: frames take chunks from the one fill ring.
//!   [`Capabilities::rx_queue_frames`] reports an equal share of the pool,
//!   `rx_chunks / pool_members` less a refill batch (32 chunks), so
//!   [`AfXdpConfig::pool_members`] endpoints with full credit windows cannot
//!   empty the fill ring. With the defaults (4096 chunks, 16 members) that is
//!   224 frames of up to 3840 bytes per endpoint, 74 at MTU 9000.
//! - **Cost**: the UMEM holds `rx_chunks + pool_members x tx_frames x
//!   chunks per frame` chunks, all pinned by the kernel: 32 MiB per queue at
//!   MTU 1500 with the defaults (the first endpoint's settings decide).
//! - **A member killed** loses to the pool the RX chunks it held (at most its
//!   RX ring, `2 x` its share, plus one refill batch) and any TX slots whose
//!   descriptors were still in its TX ring; the others do not notice. A
//!   queue bound by a socket that offers no pool (a device opened without a
//!   port, another AF_XDP program) is reported busy, and `auto` then opens
//!   that endpoint on AF_PACKET.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

pub use xdp_prog::shared::{ShareError, SharedProgram};
pub use xdp_prog::{AttachMode, Attached, Counters as ProgramCounters, LlcRedirect, XdpError};

use crate::link::grant;
use crate::link::interfaces;
use crate::link::local::{LocalPort, LocalStats};
use crate::link::{Capabilities, Device, LinkError, RxToken, TxToken};
use crate::sys::{self, xsk};
use crate::time::Instant;
use crate::wire::ethernet::HEADER_LEN;

/// Bytes per UMEM chunk (see the module documentation).
pub const CHUNK_SIZE: usize = 4096;
/// Headroom the kernel leaves in front of a received frame in copy mode
/// (`XDP_PACKET_HEADROOM`).
const RX_HEADROOM: usize = 256;
/// Most descriptors one frame may use on transmit (`MAX_SKB_FRAGS`).
const MAX_TX_DESCS: usize = 17;
/// Descriptors the kernel transmits per `sendto` in copy mode.
pub const COPY_MODE_KICK_BATCH: usize = 32;

/// Zero-copy or copy mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XdpMode {
    /// Zero-copy where the driver offers it, else copy.
    #[default]
    Auto,
    /// Zero-copy only: fails where the driver has no support (e.g. veth).
    ZeroCopy,
    /// Copy mode: the kernel copies frames between its buffers and the UMEM.
    Copy,
}

/// How to open an [`AfXdp`] device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// Our LLC SAP: frames whose DSAP equals it are redirected to us.
    pub sap: u8,
    /// Which transport port is ours: `None`, every port of the SAP (the
    /// interface's SAP to ourselves); `Some(p)`, port `p` (0: any free one)
    /// on an interface shared with other endpoints of the host, as
    /// [`crate::link::afpacket::AfPacketConfig::port`].
    pub port: Option<u16>,
    /// Zero-copy or copy.
    pub mode: XdpMode,
    /// Native or generic XDP.
    pub attach: AttachMode,
    /// The RX queue to serve; `None`: every RX queue of the interface.
    pub queue: Option<u32>,
    /// UMEM chunks for receiving, per socket. A frame takes one chunk per
    /// 3840 bytes; the default (16 MiB) holds a full credit window of the
    /// transport's default configuration at every MTU.
    pub rx_chunks: u32,
    /// TX slots (whole frames written but not yet completed), per socket.
    pub tx_frames: u32,
    /// Frames pending before [`Device::transmit`] kicks by itself; also
    /// [`Capabilities::max_burst`].
    pub tx_batch: usize,
    /// How long [`Device::wait`] spins on the RX rings before sleeping.
    pub busy_poll: Duration,
    /// How long to retry binding a queue that is still held (a socket on it
    /// closed less than about a second ago) before reporting it busy.
    pub bind_retry: Duration,
    /// Shared mode ([`AfXdpConfig::port`] set): most endpoints that can
    /// share one RX queue's buffer pool. Used by the endpoint that creates
    /// the pool (later ones take the pool's shape): each member gets a TX
    /// region of `tx_frames` slots (all pinned, whether used or not) and an
    /// equal share of the `rx_chunks` RX chunks for its flow control.
    pub pool_members: u32,
}

impl Default for AfXdpConfig {
    fn default() -> Self {
        AfXdpConfig {
            sap: crate::wire::llc::DEFAULT_SAP,
            port: None,
            mode: XdpMode::Auto,
            attach: AttachMode::Auto,
            queue: None,
            rx_chunks: 4096,
            tx_frames: 256,
            tx_batch: COPY_MODE_KICK_BATCH,
            busy_poll: Duration::from_micros(20),
            bind_retry: Duration::from_secs(2),
            pool_members: 16,
        }
    }
}

impl AfXdpConfig {
    fn validate(&self) -> Result<(), LinkError> {
        let problem = if self.rx_chunks < 64 {
            Some("rx_chunks must be at least 64")
        } else if self.tx_frames == 0 {
            Some("tx_frames must be at least 1")
        } else if self.tx_batch == 0 {
            Some("tx_batch must be at least 1")
        } else if !(1..=256).contains(&self.pool_members) {
            Some("pool_members must be between 1 and 256")
        } else if self.port.is_some() && self.rx_chunks / self.pool_members < 64 {
            Some("rx_chunks / pool_members must be at least 64 (each endpoint's share)")
        } else {
            None
        };
        problem.map_or(Ok(()), |msg| {
            Err(LinkError::invalid_config("AfXdpConfig", msg))
        })
    }
}

/// Counters of an [`AfXdp`] device since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AfXdpStats {
    /// Frames handed to the stack.
    pub rx_frames: u64,
    /// Bytes of those frames.
    pub rx_bytes: u64,
    /// Of those, frames that came in several buffers and were reassembled.
    pub rx_multi_buffer: u64,
    /// Frames the kernel dropped: no room in the RX ring, or no chunk in the
    /// fill ring, or too long (`XDP_STATISTICS`, all sockets).
    pub rx_kernel_drops: u64,
    /// Of those, drops because the fill ring was empty. With a shared
    /// buffer pool this is the pool's count, for all of its members (the
    /// kernel counts it per fill ring).
    pub rx_fill_ring_empty: u64,
    /// Malformed RX descriptors skipped.
    pub rx_bad_descs: u64,
    /// Frames queued for transmission.
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// `sendto` kicks made.
    pub tx_kicks: u64,
    /// Kicks answered with "try again" (their frames go with a later kick).
    pub tx_kick_retries: u64,
    /// TX descriptors the kernel rejected, plus frames refused for their length.
    pub tx_errors: u64,
}

/// An RX queue's buffer pool shared with other endpoints (`XDP_SHARED_UMEM`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedPool {
    /// The RX queue.
    pub queue: u32,
    /// This device's socket created the pool (the others joined it).
    pub created: bool,
    /// This device's TX region (member index).
    pub member: u32,
    /// Most members of the pool.
    pub members: u32,
    /// RX chunks this device may have in flight (its flow-control share).
    pub share_chunks: u32,
    /// Times a member took the pool lock over from a dead holder.
    pub lock_steals: u32,
    /// Times this device gave up waiting for the pool lock.
    pub lock_timeouts: u64,
}

struct Queue {
    xsk: xsk::Xsk,
    id: u32,
}

/// AF_XDP sockets on one interface carrying our LLC frames.
///
/// Receiving reads the RX ring without a syscall and lends the frame in its
/// UMEM chunk; transmitting writes into a UMEM slot in place and kicks once
/// per batch. The device owns the XDP program (shared with other devices on
/// the same interface when opened with [`AfXdp::open_with_program`]).
pub struct AfXdp {
    // Sockets are closed before the program is detached.
    queues: Vec<Queue>,
    program: Program,
    /// The claimed port and the same-host path, when the interface is
    /// shared with other endpoints (`config.port` is `Some`).
    local: Option<LocalPort>,
    ifname: String,
    ifindex: u32,
    mac: [u8; 6],
    mtu: usize,
    config: AfXdpConfig,
    backend: String,
    fallbacks: Vec<String>,
    rx_cursor: usize,
    counters: AfXdpStats,
    pending_error: Option<io::Error>,
}

impl std::fmt::Debug for AfXdp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdp")
            .field("ifname", &self.ifname)
            .field("backend", &self.backend)
            .field(
                "queues",
                &self.queues.iter().map(|q| q.id).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The XDP program a device receives through.
enum Program {
    /// A program of this process (attached by the device, or shared with
    /// other devices of the process through [`AfXdp::open_with_program`]).
    Own(Arc<LlcRedirect>),
    /// The interface's program, shared with other endpoint processes.
    Shared(Box<SharedProgram>),
    /// The interface's program as the endpoint service holds it for a
    /// process without privileges (`link::grant`): the service made the
    /// sockets and steers the port to them.
    Granted(Box<grant::XdpGrant>),
}

impl Program {
    fn attached(&self) -> Attached {
        match self {
            Program::Own(p) => p.attached(),
            Program::Shared(p) => p.attached(),
            Program::Granted(g) if g.attached == "native" => Attached::Native,
            Program::Granted(_) => Attached::Generic,
        }
    }

    /// Who makes the sockets, when this process may not.
    fn provider(&self) -> Option<&dyn xsk::Provider> {
        match self {
            Program::Granted(g) => Some(g.as_ref()),
            _ => None,
        }
    }
}

/// The shared program's settings for endpoints of `sap` on `ifname`, as
/// [`AfXdp::open`] chooses them with the default attach mode: the endpoint
/// service attaches the program its granted endpoints share with these.
pub fn shared_program_config(ifname: &str, sap: u8) -> Result<xdp_prog::XdpConfig, LinkError> {
    let config = AfXdpConfig {
        sap,
        ..AfXdpConfig::default()
    };
    Ok(xdp_prog::XdpConfig {
        sap,
        mac: Some(interfaces::mac(ifname)?),
        attach: if auto_on_veth(ifname, &config) {
            AttachMode::Generic
        } else {
            config.attach
        },
        frags: needs_multi_buffer(interfaces::mtu(ifname)?),
    })
}

fn share_error(iface: &str, e: ShareError) -> LinkError {
    match e {
        ShareError::Xdp(e) => xdp_error(iface, e),
        ShareError::NoAccess { .. } => LinkError::PermissionDenied {
            iface: iface.to_owned(),
            what: "the interface's shared XDP program",
            needs: "PTRACE_MODE_ATTACH over the endpoint process holding it (the same user; \
                    CAP_SYS_PTRACE under Yama ptrace_scope >= 1)",
        },
        e @ (ShareError::NoSlot { .. } | ShareError::PortTaken { .. }) => LinkError::Busy {
            iface: iface.to_owned(),
            what: e.to_string(),
        },
        e => LinkError::Unsupported(e.to_string()),
    }
}

fn xdp_error(iface: &str, e: XdpError) -> LinkError {
    match e {
        XdpError::PermissionDenied { .. } => LinkError::PermissionDenied {
            iface: iface.to_owned(),
            what: "an XDP program and AF_XDP socket",
            needs: "CAP_BPF, CAP_NET_ADMIN and CAP_NET_RAW",
        },
        XdpError::Busy { detail, .. } => LinkError::Busy {
            iface: iface.to_owned(),
            what: format!(
                "another XDP program is attached ({detail}); see it with \
                 `ip -d link show {iface}` and remove it with `ip link set dev {iface} xdp off` \
                 (or `xdpgeneric off`)"
            ),
        },
        XdpError::Unsupported { .. } => LinkError::Unsupported(e.to_string()),
        XdpError::Other { context, detail } => LinkError::Io {
            context,
            source: io::Error::other(detail),
        },
    }
}

/// Whether frames of `mtu` need more than one RX buffer.
pub fn needs_multi_buffer(mtu: usize) -> bool {
    mtu + HEADER_LEN > CHUNK_SIZE - RX_HEADROOM
}

/// UMEM chunks one received frame of `mtu` spans (the first holds the
/// headroom too).
pub fn chunks_per_frame(mtu: usize) -> usize {
    (mtu + HEADER_LEN + RX_HEADROOM).div_ceil(CHUNK_SIZE)
}

/// Whether `AfXdp::open(ifname, config)` would attach generic (skb-mode)
/// XDP: asked for, or `auto` on a veth (see [`AfXdp::open`]). `None` when
/// only opening can tell (a NIC's driver may or may not have native XDP).
pub fn takes_generic(ifname: &str, config: &AfXdpConfig) -> Option<bool> {
    match config.attach {
        AttachMode::Generic => Some(true),
        AttachMode::Native => Some(false),
        AttachMode::Auto => auto_on_veth(ifname, config).then_some(true),
    }
}

/// `auto` asked for on a veth, where [`AfXdp::open`] takes generic XDP:
/// veth's "native" XDP is a software path too, slower for our frames
/// (docs/BENCHMARKS.md), and while a native program is attached the kernel
/// takes the veth's segmentation offloads away from all other traffic on it.
fn auto_on_veth(ifname: &str, config: &AfXdpConfig) -> bool {
    config.attach == AttachMode::Auto && interfaces::driver(ifname).as_deref() == Some("veth")
}

impl AfXdp {
    /// The XDP program runs in generic (skb) mode, where the kernel copies
    /// every frame into the UMEM.
    pub fn generic(&self) -> bool {
        self.program.attached() == Attached::Generic
    }

    /// Open AF_XDP sockets on interface `ifname` of the calling thread's
    /// network namespace, with our XDP program attached.
    ///
    /// Errors: [`LinkError::NoSuchInterface`], [`LinkError::InterfaceDown`],
    /// [`LinkError::PermissionDenied`] (CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW),
    /// [`LinkError::Busy`] (another XDP program on the interface, another
    /// AF_XDP socket on the queue), [`LinkError::Unsupported`] (no XDP in
    /// the requested mode, no zero-copy, MTU too large) and [`LinkError::Io`].
    pub fn open(ifname: &str, config: AfXdpConfig) -> Result<AfXdp, LinkError> {
        config.validate()?;
        let ifindex = interfaces::index(ifname)?;
        if !interfaces::is_up(ifname)? {
            return Err(LinkError::InterfaceDown(ifname.to_owned()));
        }
        let mtu = interfaces::mtu(ifname)?;
        let mac = interfaces::mac(ifname)?;
        let veth = auto_on_veth(ifname, &config);
        let xcfg = xdp_prog::XdpConfig {
            sap: config.sap,
            mac: Some(mac),
            attach: if veth {
                AttachMode::Generic
            } else {
                config.attach
            },
            frags: needs_multi_buffer(mtu),
        };
        let mut dev = match config.port {
            // No privileges: the endpoint service holds the program and
            // makes the sockets, always for one port.
            port if grant::needs_service() => {
                Self::open_granted(ifname, config, port.unwrap_or(0))?
            }
            None => {
                let program = LlcRedirect::attach(ifname, ifindex, &xcfg)
                    .map_err(|e| xdp_error(ifname, e))?;
                Self::open_with_program(ifname, config, Arc::new(program))?
            }
            Some(port) => Self::open_shared(ifname, config, &xcfg, port)?,
        };
        if veth {
            dev.fallbacks.insert(
                0,
                format!(
                    "{ifname} is a veth: generic XDP rather than native (faster for LLC on \
                     veth, and leaves TCP its segmentation offloads)"
                ),
            );
        }
        Ok(dev)
    }

    /// Open AF_XDP sockets on `ifname` that receive through an XDP program
    /// already attached there (e.g. by another device serving other queues).
    /// The program must have been loaded with this config's SAP, and with
    /// `frags` if the MTU needs multi-buffer frames.
    pub fn open_with_program(
        ifname: &str,
        config: AfXdpConfig,
        program: Arc<LlcRedirect>,
    ) -> Result<AfXdp, LinkError> {
        config.validate()?;
        let ifindex = interfaces::index(ifname)?;
        if !interfaces::is_up(ifname)? {
            return Err(LinkError::InterfaceDown(ifname.to_owned()));
        }
        if program.ifindex() != ifindex {
            return Err(LinkError::Io {
                context: format!("opening AF_XDP on {ifname}"),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the XDP program is attached to another interface",
                ),
            });
        }
        if needs_multi_buffer(interfaces::mtu(ifname)?) && !program.frags() {
            return Err(LinkError::Unsupported(format!(
                "MTU {} on {ifname} needs the multi-buffer (xdp.frags) XDP program",
                interfaces::mtu(ifname)?
            )));
        }
        let dev = Self::bind_sockets(ifname, ifindex, config, Program::Own(program), None)?;
        for q in &dev.queues {
            if let Program::Own(p) = &dev.program {
                p.register(q.id, q.xsk.fd())
                    .map_err(|e| xdp_error(ifname, e))?;
            }
        }
        Ok(dev)
    }

    /// Open the endpoint of `port` (0: any free port) on an interface shared
    /// with other endpoints of the host: claim the port, join the shared
    /// program, bind our sockets and register them for the port.
    fn open_shared(
        ifname: &str,
        mut config: AfXdpConfig,
        xcfg: &xdp_prog::XdpConfig,
        port: u16,
    ) -> Result<AfXdp, LinkError> {
        let ifindex = interfaces::index(ifname)?;
        let mtu = interfaces::mtu(ifname)?;
        let mac = interfaces::mac(ifname)?;
        let local = LocalPort::claim(ifname, config.sap, port, mac, mtu + HEADER_LEN)?;
        let program = SharedProgram::join(ifname, xcfg).map_err(|e| share_error(ifname, e))?;
        // Only a queue that is bound without an offered pool (a device opened
        // without a port, another AF_XDP program) or whose pool is full stays
        // busy; `auto` then opens this endpoint on AF_PACKET.
        config.bind_retry = config.bind_retry.min(Duration::from_secs(1));
        let dev = Self::bind_sockets(
            ifname,
            ifindex,
            config,
            Program::Shared(Box::new(program)),
            Some(local),
        )
        .map_err(|e| match e {
            LinkError::Busy { iface, what } => LinkError::Busy {
                what: format!(
                    "{what}; endpoints sharing {iface} over AF_XDP share each RX queue's \
                         buffer pool, which needs every socket on the queue to be one of them: \
                         use AF_PACKET for this endpoint (backend auto does)"
                ),
                iface,
            },
            e => e,
        })?;
        let (Program::Shared(p), Some(l)) = (&dev.program, &dev.local) else {
            unreachable!("opened as shared");
        };
        for q in &dev.queues {
            p.register_socket(q.id, q.xsk.fd())
                .map_err(|e| share_error(ifname, e))?;
        }
        p.register_port(l.port())
            .map_err(|e| share_error(ifname, e))?;
        if l.has_link_role() {
            p.set_link_responder(true)
                .map_err(|e| share_error(ifname, e))?;
        }
        Ok(dev)
    }

    /// Open the endpoint of `port` (0: any free port) through the endpoint
    /// service: it claims the port, holds the interface's shared program
    /// and makes the sockets of each queue's pool; this process maps their
    /// rings and runs the data path.
    fn open_granted(ifname: &str, mut config: AfXdpConfig, port: u16) -> Result<AfXdp, LinkError> {
        let ifindex = interfaces::index(ifname)?;
        let mtu = interfaces::mtu(ifname)?;
        let mac = interfaces::mac(ifname)?;
        let grant = grant::request_xdp(ifname, config.sap, port)?;
        let local = grant.local_port(config.sap, mac, mtu + HEADER_LEN)?;
        tracing::debug!(%ifname, port = grant.port, attached = %grant.attached, "AF_XDP endpoint granted by llcd");
        config.bind_retry = config.bind_retry.min(Duration::from_secs(1));
        let dev = Self::bind_sockets(
            ifname,
            ifindex,
            config,
            Program::Granted(Box::new(grant)),
            Some(local),
        )?;
        let Program::Granted(g) = &dev.program else {
            unreachable!("opened as granted");
        };
        for q in &dev.queues {
            g.steer(q.id, q.xsk.fd())?;
        }
        g.ready()?;
        Ok(dev)
    }

    /// Whether the endpoint service made this device's sockets (this
    /// process has no CAP_NET_RAW; `link::grant`).
    pub fn granted(&self) -> bool {
        matches!(self.program, Program::Granted(_))
    }

    /// Bind one socket per RX queue in use, each with its own UMEM.
    fn bind_sockets(
        ifname: &str,
        ifindex: u32,
        config: AfXdpConfig,
        program: Program,
        local: Option<LocalPort>,
    ) -> Result<AfXdp, LinkError> {
        let mtu = interfaces::mtu(ifname)?;
        let mac = interfaces::mac(ifname)?;
        let max_frame = mtu + HEADER_LEN;
        let sg = needs_multi_buffer(mtu);
        let slot_chunks = max_frame.div_ceil(CHUNK_SIZE);
        if slot_chunks > MAX_TX_DESCS {
            return Err(LinkError::Unsupported(format!(
                "MTU {mtu} on {ifname} is too large for AF_XDP: a frame would need {slot_chunks} \
                 buffers of {CHUNK_SIZE} bytes, the kernel takes at most {MAX_TX_DESCS}"
            )));
        }
        let params = xsk::XskParams {
            chunk: CHUNK_SIZE,
            rx_chunks: config.rx_chunks,
            tx_slots: config.tx_frames,
            slot_chunks: slot_chunks as u32,
            max_frame,
        };
        let queue_ids: Vec<u32> = match config.queue {
            Some(q) => vec![q],
            None => (0..interfaces::rx_queues(ifname)?).collect(),
        };
        let mut fallbacks = Vec::new();
        let mut queues = Vec::with_capacity(queue_ids.len());
        for &id in &queue_ids {
            let xsk = bind_queue(
                ifname,
                ifindex,
                id,
                params,
                sg,
                &config,
                local.is_some(),
                program.provider(),
                &mut fallbacks,
            )?;
            queues.push(Queue { xsk, id });
        }
        let zc = queues.iter().all(|q| q.xsk.zero_copy());
        let backend = format!(
            "af_xdp/{}/{}",
            if zc { "zerocopy" } else { "copy" },
            program.attached().name()
        );
        tracing::debug!(%ifname, ifindex, mtu, sg, queues = ?queue_ids, %backend, ?fallbacks, "opened AF_XDP device");
        Ok(AfXdp {
            queues,
            program,
            local,
            ifname: ifname.to_owned(),
            ifindex,
            mac,
            mtu,
            config,
            backend,
            fallbacks,
            rx_cursor: 0,
            counters: AfXdpStats::default(),
            pending_error: None,
        })
    }

    /// The transport port this device receives when it shares its
    /// interface (`AfXdpConfig::port`); the claimed one when 0 was asked.
    pub fn port(&self) -> Option<u16> {
        self.local.as_ref().map(LocalPort::port)
    }

    /// Whether this device answers link-level TEST and XID for the
    /// interface and SAP (always, when it has the SAP to itself).
    pub fn link_role(&self) -> bool {
        self.local.as_ref().is_none_or(LocalPort::has_link_role)
    }

    /// Counters of the same-host path (zero when the interface is not shared).
    pub fn local_stats(&self) -> LocalStats {
        self.local
            .as_ref()
            .map(LocalPort::stats)
            .unwrap_or_default()
    }

    /// The interface's shared XDP program, when this device shares its
    /// interface with other endpoints.
    pub fn shared_program(&self) -> Option<&SharedProgram> {
        match &self.program {
            Program::Shared(p) => Some(p),
            Program::Own(_) | Program::Granted(_) => None,
        }
    }

    /// No RX ring has a frame: look at the same-host socket, and take the
    /// link role over when its holder left.
    fn receive_local(&mut self, force: bool) -> Option<AfXdpRxToken<'_>> {
        let local = self.local.as_mut()?;
        match local.poll(force) {
            Some(len) => Some(AfXdpRxToken(XdpRxFrom::Local(local.frame(len)))),
            None => {
                if local.take_role_change() {
                    if let Program::Shared(p) = &self.program {
                        if let Err(e) = p.set_link_responder(true) {
                            tracing::warn!(ifname = %self.ifname, error = %e, "could not take the link responder role");
                        }
                    }
                }
                None
            }
        }
    }

    /// The interface's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface's name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interface's MTU when the device was opened.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// The configuration the device was opened with.
    pub fn config(&self) -> &AfXdpConfig {
        &self.config
    }

    /// The RX queues served.
    pub fn queues(&self) -> Vec<u32> {
        self.queues.iter().map(|q| q.id).collect()
    }

    /// The XDP program of this process (shareable with
    /// [`AfXdp::open_with_program`]); `None` when the device uses the
    /// interface's shared program ([`AfXdp::shared_program`]).
    pub fn program(&self) -> Option<&Arc<LlcRedirect>> {
        match &self.program {
            Program::Own(p) => Some(p),
            Program::Shared(_) | Program::Granted(_) => None,
        }
    }

    /// Why the preferred modes were not obtained (e.g. "zero-copy refused on
    /// queue 0: ..."), in the order they were tried. Empty if nothing fell back.
    pub fn fallbacks(&self) -> &[String] {
        &self.fallbacks
    }

    /// The buffer pools this device shares with other endpoints, one per
    /// RX queue (empty unless opened with [`AfXdpConfig::port`]).
    pub fn shared_pools(&self) -> Vec<SharedPool> {
        self.queues
            .iter()
            .filter_map(|q| {
                let p = q.xsk.pool_info()?;
                Some(SharedPool {
                    queue: q.id,
                    created: p.created,
                    member: p.member,
                    members: p.members,
                    share_chunks: p.share_chunks,
                    lock_steals: p.steals,
                    lock_timeouts: p.lock_timeouts,
                })
            })
            .collect()
    }

    /// Whether frames arrive and leave in several buffers (`XDP_USE_SG`).
    pub fn multi_buffer(&self) -> bool {
        needs_multi_buffer(self.mtu)
    }

    /// Counters since the device was opened (reads the kernel's counters:
    /// one `getsockopt` per socket).
    pub fn stats(&self) -> AfXdpStats {
        let mut s = self.counters;
        for q in &self.queues {
            if let Ok(k) = q.xsk.kernel_stats() {
                s.rx_kernel_drops += k.rx_dropped + k.rx_ring_full + k.rx_fill_ring_empty;
                s.rx_fill_ring_empty += k.rx_fill_ring_empty;
                s.tx_errors += k.tx_invalid_descs;
            }
            s.rx_bad_descs += q.xsk.rx_bad;
        }
        s
    }

    fn tx_queue(&mut self) -> &mut xsk::Xsk {
        &mut self.queues[0].xsk
    }

    fn kick(&mut self) -> io::Result<()> {
        let result = self.queues[0].xsk.kick();
        self.counters.tx_kicks += 1;
        match result {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.counters.tx_kick_retries += 1;
                Ok(())
            }
            Err(e) => {
                self.counters.tx_errors += 1;
                Err(e)
            }
        }
    }

    fn any_rx_ready(&mut self) -> bool {
        self.queues.iter_mut().any(|q| q.xsk.rx_ready())
    }
}

/// Bind one socket to queue `id`: zero-copy first if allowed, then copy;
/// retry while the queue is still held by a socket that just closed.
/// `shared`: join the queue's pool that another endpoint offers, or create
/// one that later endpoints can join.
#[allow(clippy::too_many_arguments)]
fn bind_queue(
    ifname: &str,
    ifindex: u32,
    id: u32,
    params: xsk::XskParams,
    sg: bool,
    config: &AfXdpConfig,
    shared: bool,
    provider: Option<&dyn xsk::Provider>,
    fallbacks: &mut Vec<String>,
) -> Result<xsk::Xsk, LinkError> {
    let mut base = libc::XDP_USE_NEED_WAKEUP;
    if sg {
        base |= libc::XDP_USE_SG;
    }
    let modes: &[u16] = match config.mode {
        XdpMode::Auto => &[libc::XDP_ZEROCOPY, libc::XDP_COPY],
        XdpMode::ZeroCopy => &[libc::XDP_ZEROCOPY],
        XdpMode::Copy => &[libc::XDP_COPY],
    };
    let deadline = std::time::Instant::now() + config.bind_retry;
    for (i, &mode) in modes.iter().enumerate() {
        let last = i + 1 == modes.len();
        let name = if mode == libc::XDP_ZEROCOPY {
            "zero-copy"
        } else {
            "copy"
        };
        loop {
            let attempt = if shared {
                xsk::Xsk::join_or_create_pool(
                    ifindex,
                    id,
                    params,
                    config.pool_members,
                    base | mode,
                    provider,
                )
            } else {
                xsk::Xsk::new(ifindex, id, params, base | mode)
            };
            match attempt {
                Ok(x) => return Ok(x),
                Err((xsk::XskStep::Join, e)) if e.raw_os_error() == Some(libc::EPERM) => {
                    return Err(LinkError::PermissionDenied {
                        iface: ifname.to_owned(),
                        what: "the AF_XDP buffer pool another endpoint shares on this queue",
                        needs: "PTRACE_MODE_ATTACH over the endpoint process offering it (the \
                                same user; CAP_SYS_PTRACE under Yama ptrace_scope >= 1)",
                    })
                }
                // The pool's members are all taken (not an errno: EBUSY is
                // a queue held by a socket, retried below).
                Err((_, e))
                    if e.raw_os_error().is_none() && e.kind() == io::ErrorKind::ResourceBusy =>
                {
                    return Err(LinkError::Busy {
                        iface: ifname.to_owned(),
                        what: format!("RX queue {id}: {e}"),
                    })
                }
                Err((xsk::XskStep::Join, e)) if e.kind() == io::ErrorKind::TimedOut => {
                    return Err(LinkError::Busy {
                        iface: ifname.to_owned(),
                        what: format!("RX queue {id}: {e}"),
                    })
                }
                Err((xsk::XskStep::Join, e)) => {
                    return Err(LinkError::Unsupported(format!(
                        "cannot join the AF_XDP buffer pool of RX queue {id} on {ifname}: {e}"
                    )))
                }
                Err((xsk::XskStep::Socket, e))
                    if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) =>
                {
                    return Err(LinkError::PermissionDenied {
                        iface: ifname.to_owned(),
                        what: "an AF_XDP socket",
                        needs: "CAP_NET_RAW (and CAP_BPF, CAP_NET_ADMIN for the XDP program)",
                    })
                }
                Err((xsk::XskStep::Socket, e))
                    if matches!(e.raw_os_error(), Some(libc::EAFNOSUPPORT)) =>
                {
                    return Err(LinkError::Unsupported(format!(
                        "this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS): {e}"
                    )))
                }
                Err((xsk::XskStep::Bind, e)) if e.raw_os_error() == Some(libc::EBUSY) => {
                    if std::time::Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    return Err(LinkError::Busy {
                        iface: ifname.to_owned(),
                        what: if shared {
                            format!(
                                "RX queue {id} is bound to an AF_XDP socket that offers no \
                                 shared buffer pool (a device opened without a port, or \
                                 another AF_XDP program)"
                            )
                        } else {
                            format!(
                                "RX queue {id} is already bound to another AF_XDP socket \
                                 (another llc-stack device or AF_XDP program on this queue; \
                                 choose another queue or stop it)"
                            )
                        },
                    });
                }
                Err((xsk::XskStep::Bind, e))
                    if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL))
                        && !last =>
                {
                    let why = format!("{name} refused on queue {id}: {e}");
                    tracing::debug!(%ifname, "{why}");
                    fallbacks.push(why);
                    break;
                }
                Err((xsk::XskStep::Bind, e))
                    if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP)) =>
                {
                    return Err(LinkError::Unsupported(format!(
                        "{ifname} cannot bind an AF_XDP socket to queue {id} in {name} mode: {e}{}",
                        if mode == libc::XDP_ZEROCOPY {
                            " (the driver has no zero-copy support; use copy or auto mode)"
                        } else {
                            ""
                        }
                    )))
                }
                Err((xsk::XskStep::Bind, e)) if e.raw_os_error() == Some(libc::EINVAL) => {
                    return Err(LinkError::Unsupported(format!(
                        "{ifname} refused an AF_XDP socket on queue {id} in {name} mode: {e} \
                         (does the queue exist? multi-buffer needs Linux 6.6)"
                    )))
                }
                Err((xsk::XskStep::Rings, e))
                    if provider.is_some() && e.raw_os_error() == Some(libc::EBUSY) =>
                {
                    return Err(LinkError::Unsupported(format!(
                        "this kernel cannot map the rings of an AF_XDP socket the llcd service                          bound (Linux 6.5 and later can), so AF_XDP without privileges is not                          available on {ifname}; AF_PACKET is ({e})"
                    )))
                }
                Err((step, e)) => {
                    return Err(LinkError::Io {
                        context: format!(
                            "setting up the AF_XDP socket of queue {id} on {ifname} ({step:?})"
                        ),
                        source: e,
                    })
                }
            }
        }
    }
    unreachable!("the last mode returns")
}

/// A received frame lent from a UMEM chunk (or the reassembly buffer), or
/// from the same-host path.
pub struct AfXdpRxToken<'a>(XdpRxFrom<'a>);

enum XdpRxFrom<'a> {
    Umem(xsk::RxFrame<'a>),
    Local(&'a [u8]),
}

impl RxToken for AfXdpRxToken<'_> {
    #[inline]
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self.0 {
            XdpRxFrom::Umem(frame) => f(frame.frame()),
            XdpRxFrom::Local(frame) => f(frame),
        }
    }
}

/// A free TX slot in the UMEM; the frame written into it is queued for the
/// next kick.
pub struct AfXdpTxToken<'a> {
    slot: xsk::TxSlot<'a>,
    counters: &'a mut AfXdpStats,
    local: Option<&'a mut LocalPort>,
}

impl TxToken for AfXdpTxToken<'_> {
    #[inline]
    fn consume<F: FnOnce(&mut [u8]) -> usize>(self, f: F) -> usize {
        let mut slot = self.slot;
        let buf = slot.buf();
        let capacity = buf.len();
        let len = f(buf);
        if len == 0 {
            return 0;
        }
        if !(HEADER_LEN..=capacity).contains(&len) {
            tracing::warn!(len, capacity, "refusing a TX frame of impossible length");
            self.counters.tx_errors += 1;
            return 0;
        }
        if let Some(local) = self.local {
            if local.is_local(&buf[..len]) {
                // To an endpoint of this host: the slot is not sent.
                local.send(&buf[..len]);
                return len;
            }
        }
        slot.send(len);
        self.counters.tx_frames += 1;
        self.counters.tx_bytes += len as u64;
        len
    }
}

impl Device for AfXdp {
    type RxToken<'a> = AfXdpRxToken<'a>;
    type TxToken<'a> = AfXdpTxToken<'a>;

    #[inline]
    fn receive(&mut self, _now: Instant) -> Option<AfXdpRxToken<'_>> {
        if self.local.is_some() && !self.any_rx_ready() {
            return self.receive_local(false);
        }
        let n = self.queues.len();
        let index = if n == 1 {
            0
        } else {
            // Round robin over the queues that have something.
            let start = self.rx_cursor;
            let i = (0..n)
                .map(|k| (start + k) % n)
                .find(|&i| self.queues[i].xsk.rx_ready())?;
            self.rx_cursor = (i + 1) % n;
            i
        };
        let frame = self.queues[index].xsk.rx_next()?;
        let len = frame.frame().len();
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += len as u64;
        if len + RX_HEADROOM > CHUNK_SIZE {
            self.counters.rx_multi_buffer += 1;
        }
        Some(AfXdpRxToken(XdpRxFrom::Umem(frame)))
    }

    #[inline]
    fn transmit(&mut self, _now: Instant) -> Option<AfXdpTxToken<'_>> {
        let batch = self.config.tx_batch as u32;
        let full = self.tx_queue().tx_unkicked() >= batch;
        if full || !self.tx_queue().tx_has_room() {
            if let Err(e) = self.kick() {
                self.pending_error.get_or_insert(e);
            }
            self.tx_queue().reap();
        }
        let slot = self.queues[0].xsk.tx_next()?;
        Some(AfXdpTxToken {
            slot,
            counters: &mut self.counters,
            local: self.local.as_mut(),
        })
    }

    fn flush(&mut self, _now: Instant) -> io::Result<()> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        // Copy mode may send only 32 descriptors per kick: repeat while the
        // kernel makes progress.
        loop {
            let before = self.tx_queue().tx_outstanding();
            if before == 0 {
                self.tx_queue().reap();
                return Ok(());
            }
            self.kick()?;
            let after = self.tx_queue().tx_outstanding();
            if after == before {
                self.tx_queue().reap();
                return Ok(());
            }
        }
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        let spin_until =
            std::time::Instant::now() + self.config.busy_poll.min(timeout.unwrap_or(Duration::MAX));
        loop {
            if self.any_rx_ready() {
                return Ok(());
            }
            if std::time::Instant::now() >= spin_until {
                break;
            }
            std::hint::spin_loop();
        }
        for q in &self.queues {
            q.xsk.wake_rx_if_needed();
        }
        if let Some(local) = &mut self.local {
            local.woke();
            let mut fds: Vec<RawFd> = self.queues.iter().map(|q| q.xsk.fd().as_raw_fd()).collect();
            local.push_fds(&mut fds);
            return sys::poll_first_of(&fds, timeout).map(drop);
        }
        let fds: Vec<BorrowedFd<'_>> = self.queues.iter().map(|q| q.xsk.fd()).collect();
        xsk::poll_any(&fds, timeout)
    }

    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration> {
        if self.any_rx_ready() {
            return Some(Duration::ZERO);
        }
        for q in &self.queues {
            q.xsk.wake_rx_if_needed();
            fds.push(q.xsk.fd().as_raw_fd());
        }
        if let Some(local) = &mut self.local {
            local.woke();
            local.push_fds(fds);
        }
        None
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            mtu: self.mtu,
            max_burst: self.config.tx_batch,
            backend: self.backend.clone(),
            // Each socket's fill ring holds `rx_chunks` chunks; a frame
            // takes one chunk per CHUNK_SIZE bytes. A shared pool's chunks
            // are split equally between its members (see `sys::xsk` pool).
            rx_queue_frames: Some(
                self.queues
                    .iter()
                    .map(|q| {
                        q.xsk
                            .pool_info()
                            .map_or(self.config.rx_chunks, |p| p.share_chunks)
                    })
                    .min()
                    .unwrap_or(self.config.rx_chunks) as usize
                    / (self.mtu + HEADER_LEN).div_ceil(CHUNK_SIZE),
            ),
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![
            ("rx_kernel_drops", s.rx_kernel_drops),
            ("rx_fill_ring_empty", s.rx_fill_ring_empty),
            ("rx_bad_descs", s.rx_bad_descs),
            ("tx_kicks", s.tx_kicks),
            ("tx_kick_retries", s.tx_kick_retries),
            ("tx_errors", s.tx_errors),
        ]
    }

    fn kernel_drops(&self) -> u64 {
        self.stats().rx_kernel_drops
    }
}

impl Drop for AfXdp {
    fn drop(&mut self) {
        if let Program::Own(p) = &self.program {
            for q in &self.queues {
                p.unregister(q.id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_buffer_threshold() {
        assert!(!needs_multi_buffer(1500));
        assert!(!needs_multi_buffer(3826));
        assert!(needs_multi_buffer(3827));
        assert!(needs_multi_buffer(9000));
        // 65000 + 14 bytes in 4 KiB slots: 16 descriptors, within the limit.
        assert_eq!((65000 + HEADER_LEN).div_ceil(CHUNK_SIZE), 16);
        assert!((65535 + HEADER_LEN).div_ceil(CHUNK_SIZE) <= MAX_TX_DESCS);
    }

    #[test]
    fn device_can_move_to_another_thread() {
        fn is_send<T: Send>() {}
        is_send::<AfXdp>();
    }

    #[test]
    fn config_is_checked() {
        assert!(AfXdpConfig::default().validate().is_ok());
        let bad = AfXdpConfig {
            rx_chunks: 8,
            ..AfXdpConfig::default()
        };
        assert!(bad.validate().is_err());
    }
}
