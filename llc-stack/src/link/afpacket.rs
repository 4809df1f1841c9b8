//! `AfPacket`: a raw `AF_PACKET` socket on one interface, with an mmap'd
//! TPACKET_V2 RX ring and `sendmmsg` batches for TX.
//!
//! # What the socket sees
//! One socket, bound to the interface with `ETH_P_ALL`, behind a classic BPF
//! filter that accepts only our LLC frames: the 802.3 length form (length/type
//! field <= 1500) or the jumbo form (EtherType 0x8870), with DSAP equal to our
//! SAP, addressed to this host (unicast to us, broadcast or multicast: frames
//! a bridge floods to other hosts are rejected) and without a VLAN tag.
//! The socket is created with protocol 0, so it receives nothing until it is
//! bound; the filter and the ring are installed before the bind, which closes
//! the window in which foreign frames could slip in. `PACKET_IGNORE_OUTGOING`
//! keeps our own transmissions out of our RX ring and `PACKET_QDISC_BYPASS`
//! sends straight to the driver.
//!
//! # RX
//! A TPACKET_V2 ring (not V3: V3 hands a block to userspace only when it is
//! full or its timer expires, which ruins latency). [`Device::receive`] looks
//! at the status word of the slot under the cursor, without a syscall; the
//! token lends the frame in place and hands the slot back when consumed or
//! dropped. Frames the slot could not hold whole are skipped and counted.
//!
//! # TX
//! [`Device::transmit`] lends a slot of a batch buffer; one `sendmmsg` per
//! batch sends it (see [`AfPacket`] for why not a TX ring).

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use crate::link::filter::{endpoint_filter, granted_filter, llc_filter};
use crate::link::grant;
use crate::link::interfaces;
use crate::link::local::{LocalPort, LocalStats};
use crate::link::{Capabilities, Device, LinkError, RxToken, Tail, TxToken};
use crate::sys::{self, align_up, RingGeometry, RX_MAC_OFFSET};
use crate::time::Instant;
use crate::wire::auth::TAG_LEN;
use crate::wire::ethernet::HEADER_LEN;

/// How to open an [`AfPacket`] device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Our LLC SAP: only frames whose DSAP equals it are received.
    pub sap: u8,
    /// Which transport port is ours. `None`: every port of the SAP, for a
    /// process that has the interface's SAP to itself (a tool, a test).
    /// `Some(p)`: claim port `p` (0: any free port) on the interface, shared
    /// with other endpoints of the host; the kernel then hands this socket
    /// only the frames for that port (and TEST/XID while this endpoint holds
    /// the link role), and frames to our own MAC take the same-host path
    /// (see [`crate::link::local`]).
    pub port: Option<u16>,
    /// Most RX ring slots (rounded up to fill whole ring blocks). Each slot
    /// holds one frame of MTU + 14 bytes plus about 80 bytes of kernel
    /// header: 1024 slots are about 1.6 MiB at MTU 1500.
    pub rx_ring_frames: usize,
    /// Most bytes the RX ring spans: at a large MTU it gets fewer slots than
    /// `rx_ring_frames`, but never fewer than [`MIN_RX_RING_FRAMES`] (nor
    /// more than `rx_ring_frames`). A ring that fits the caches is faster:
    /// on veth the kernel writes every frame into a slot on the sender's
    /// core, and a slot last touched 64 MiB ago costs a miss per line (see
    /// docs/BENCHMARKS.md, issue 24).
    pub rx_ring_bytes: usize,
    /// Most frames per `sendmmsg`: the size of the TX batch buffer. When it
    /// is full, the next [`Device::transmit`] sends it first. Also reported
    /// as [`Capabilities::max_burst`].
    pub tx_batch: usize,
    /// Most bytes the TX batch buffer spans: at a large MTU a batch holds
    /// fewer frames than `tx_batch`, but at least [`MIN_TX_BATCH`] (nor more
    /// than `tx_batch`), for the same reason as `rx_ring_bytes`.
    pub tx_batch_bytes: usize,
}

/// Fewest RX slots [`AfPacketConfig::rx_ring_bytes`] leaves a ring.
pub const MIN_RX_RING_FRAMES: usize = 64;
/// Fewest frames [`AfPacketConfig::tx_batch_bytes`] leaves a batch.
pub const MIN_TX_BATCH: usize = 8;

impl Default for AfPacketConfig {
    fn default() -> Self {
        AfPacketConfig {
            sap: 0x7C,
            port: None,
            rx_ring_frames: 1024,
            rx_ring_bytes: 2 << 20,
            tx_batch: 64,
            tx_batch_bytes: 256 << 10,
        }
    }
}

impl AfPacketConfig {
    /// RX slots for slots of `slot_bytes` each: `rx_ring_frames`, or fewer
    /// to stay within `rx_ring_bytes`, but not below the floor.
    pub fn rx_frames_for(&self, slot_bytes: usize) -> usize {
        let fit = self.rx_ring_bytes / slot_bytes.max(1);
        fit.max(MIN_RX_RING_FRAMES).min(self.rx_ring_frames)
    }

    /// Frames per TX batch for frames of up to `frame_bytes`: `tx_batch`, or
    /// fewer to stay within `tx_batch_bytes`, but not below the floor.
    pub fn tx_batch_for(&self, frame_bytes: usize) -> usize {
        let fit = self.tx_batch_bytes / frame_bytes.max(1);
        fit.max(MIN_TX_BATCH).min(self.tx_batch)
    }

    fn validate(&self) -> Result<(), LinkError> {
        let problem = if self.rx_ring_frames == 0 {
            Some("rx_ring_frames must be at least 1")
        } else if self.tx_batch == 0 || self.tx_batch > MAX_TX_BATCH {
            Some("tx_batch must be between 1 and 1024 (UIO_MAXIOV)")
        } else {
            None
        };
        problem.map_or(Ok(()), |msg| {
            Err(LinkError::invalid_config("AfPacketConfig", msg))
        })
    }
}

/// Counters of an [`AfPacket`] device since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AfPacketStats {
    /// Frames handed to the stack.
    pub rx_frames: u64,
    /// Bytes of those frames (Ethernet header included).
    pub rx_bytes: u64,
    /// Frames the kernel dropped because the RX ring was full
    /// (`PACKET_STATISTICS`).
    pub rx_kernel_drops: u64,
    /// Frames skipped because the RX ring slot held only part of them.
    pub rx_truncated: u64,
    /// Frames written for transmission.
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// `sendmmsg` calls made.
    pub tx_kicks: u64,
    /// Calls the kernel answered with "try again" (`EAGAIN`, `ENOBUFS`, or
    /// fewer frames sent than pending); the rest stay in the batch and go
    /// out with a later call.
    pub tx_kick_retries: u64,
    /// Frames refused (shorter than an Ethernet header or longer than the
    /// buffer) plus calls that failed with a real error.
    pub tx_errors: u64,
}

/// Most messages one `sendmmsg` takes (`UIO_MAXIOV`).
const MAX_TX_BATCH: usize = 1024;

/// Largest ring block the geometry picks to reduce slot waste (128 KiB), unless
/// one frame needs more.
const MAX_BLOCK: usize = 128 * 1024;

/// The smallest power-of-two block (at least a page and a frame) that wastes
/// at most 1/8 of itself on the tail after its last whole frame, but not above
/// `MAX_BLOCK`; as many blocks as `frames` needs.
fn ring_geometry(frame_size: usize, frames: usize, page: usize) -> RingGeometry {
    let mut block_size = page.max(frame_size.next_power_of_two());
    let cap = MAX_BLOCK.max(block_size);
    while block_size < cap && block_size % frame_size > block_size / 8 {
        block_size *= 2;
    }
    let per_block = block_size / frame_size;
    let block_nr = frames.max(1).div_ceil(per_block);
    RingGeometry {
        block_size,
        block_nr,
        frame_size,
        frame_nr: block_nr * per_block,
    }
}

/// RX ring layout for interface MTU `mtu`: each slot holds the kernel's header
/// and a whole frame of `mtu + 14` bytes at the offset where `tpacket_rcv`
/// puts it, so no frame of a legal size is truncated.
pub(crate) fn rx_geometry(mtu: usize, frames: usize, page: usize) -> RingGeometry {
    let frame_size = align_up(RX_MAC_OFFSET + HEADER_LEN + mtu, libc::TPACKET_ALIGNMENT);
    ring_geometry(frame_size, frames, page)
}

/// A raw packet socket on one interface carrying our LLC frames: an mmap'd
/// TPACKET_V2 ring for RX, a `sendmmsg` batch for TX.
///
/// # Why `sendmmsg` rather than a TX ring
/// Both were built and measured on a veth pair between namespaces
/// (`bench/examples/afpacket_pingpong.rs`, 2-core VM; the TX-ring version is in
/// this file's git history). In quiet periods, with payload copies:
///
/// | measure                        | `sendmmsg`     | TX ring        |
/// |--------------------------------|----------------|----------------|
/// | 64 B one-way latency, median   | 2.2-2.6 µs     | 2.7-3.6 µs     |
/// | streaming at MTU 1500          | 3.9-4.0 Gbit/s | 2.3-3.6 Gbit/s |
/// | streaming at MTU 9000          | 15-17 Gbit/s   | 9 Gbit/s       |
/// | streaming at MTU 65000         | 36-42 Gbit/s   | 26 Gbit/s      |
///
/// The reason shows in `perf`: a TX-ring skb borrows the ring's pages, and
/// veth must copy such "zero-copy" fragments into fresh pages before the
/// peer may keep them (`skb_copy_ubufs`: page allocation, clearing,
/// copying), so the ring saves no copy and adds work; `sendmmsg` copies once
/// into a plain skb. The `sendmmsg` path is also simpler: no TX slot
/// ownership protocol, and no `PACKET_LOSS` subtleties for frames the kernel
/// rejects. A TX ring could win on a NIC that transmits from the ring's
/// pages.
///
/// # Cost per frame
/// Receiving is a load of the slot's status word and a store to hand it
/// back: no syscall, lock or allocation. Transmitting writes into the batch
/// buffer in place; one `sendmmsg` per batch (at [`Device::flush`], or when
/// the batch is full) sends it.
pub struct AfPacket {
    // The ring is unmapped before the socket is closed (either order is safe).
    rx: sys::RxRing,
    tx: sys::FrameBatch,
    fd: OwnedFd,
    ifname: String,
    ifindex: u32,
    mac: [u8; 6],
    mtu: usize,
    /// Slots of the RX ring (the configured number rounded up to whole blocks).
    rx_ring_frames: usize,
    config: AfPacketConfig,
    counters: AfPacketStats,
    /// Kernel drops read so far (PACKET_STATISTICS resets on every read).
    kernel_drops: Cell<u64>,
    /// A send error met inside `transmit`, reported by the next `flush`.
    pending_error: Option<io::Error>,
    /// The claimed port and the same-host path, when the interface is
    /// shared with other endpoints (`config.port` is `Some`).
    local: Option<LocalPort>,
    /// The connection to the endpoint service that granted the socket,
    /// kept open for the device's life (the service counts the endpoint
    /// against its user's limit until it closes).
    session: Option<OwnedFd>,
}

impl AfPacket {
    /// Open a raw packet socket on interface `ifname` of the calling thread's
    /// network namespace.
    ///
    /// Errors: [`LinkError::NoSuchInterface`], [`LinkError::InterfaceDown`],
    /// without CAP_NET_RAW [`LinkError::NoService`] when the host's endpoint
    /// service cannot be asked or [`LinkError::Refused`] when it refuses,
    /// and
    /// [`LinkError::Io`] for anything else (e.g. no memory for the rings).
    pub fn open(ifname: &str, config: AfPacketConfig) -> Result<AfPacket, LinkError> {
        config.validate()?;
        let iface = Self::interface(ifname)?;
        let (_, mtu, mac) = iface;
        let io_err = |context: &str| {
            let context = format!("{context} on {ifname}");
            move |source| LinkError::Io { context, source }
        };

        let max_frame = mtu + HEADER_LEN;
        let (fd, local, session) = match sys::packet_socket() {
            Ok(fd) => {
                let local = match config.port {
                    Some(port) => Some(LocalPort::claim(ifname, config.sap, port, mac, max_frame)?),
                    None => None,
                };
                match &local {
                    Some(l) => sys::attach_filter(
                        fd.as_fd(),
                        &endpoint_filter(config.sap, l.port(), l.has_link_role()),
                    ),
                    None => sys::attach_filter(fd.as_fd(), &llc_filter(config.sap)),
                }
                .map_err(io_err("attaching the LLC socket filter"))?;
                (fd, local, None)
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) => {
                // No CAP_NET_RAW: the host's endpoint service opens the
                // socket, with a filter of its own this process cannot
                // change, always for one port (0 when the caller wanted
                // the whole SAP: a port is then taken for it).
                let grant = grant::request(ifname, config.sap, config.port.unwrap_or(0))?;
                let local = grant.local_port(ifname, config.sap, mac, max_frame)?;
                tracing::debug!(%ifname, port = grant.port, "AF_PACKET socket granted by llcd");
                (grant.packet, Some(local), Some(grant.session))
            }
            Err(e) => {
                return Err(LinkError::Io {
                    context: format!("creating a packet socket for {ifname}"),
                    source: e,
                })
            }
        };
        Self::set_up(ifname, iface, config, fd, local, session)
    }

    /// The link role's endpoint of `sap` on `ifname`, if no endpoint of the
    /// host holds the role: it receives only the interface's TEST and XID
    /// commands (and those of this host, through the role's claim), for a
    /// [`crate::Stack`] that answers them. The endpoint service runs one
    /// per interface and SAP it serves, so that the hosts' reachability
    /// probes are answered by root's process, not by whichever user's
    /// endpoint opened first. Needs CAP_NET_RAW. `Ok(None)`: the role is
    /// held (by an endpoint opened with privileges, which answers).
    pub fn open_link_responder(ifname: &str, sap: u8) -> Result<Option<AfPacket>, LinkError> {
        let iface = Self::interface(ifname)?;
        let (ifindex, mtu, mac) = iface;
        let Some(role) = LocalPort::claim_link_role(ifname, sap) else {
            return Ok(None);
        };
        let fd = sys::packet_socket().map_err(|source| LinkError::Io {
            context: format!("creating a packet socket for {ifname}"),
            source,
        })?;
        // Port 0 is never an endpoint's: UI frames pass only to port 0.
        sys::attach_filter(fd.as_fd(), &granted_filter(sap, 0, true, ifindex)).map_err(
            |source| LinkError::Io {
                context: format!("attaching the link role's filter on {ifname}"),
                source,
            },
        )?;
        let local = LocalPort::from_claim(role, ifname, sap, 0, mac, mtu + HEADER_LEN, false)?;
        let config = AfPacketConfig {
            sap,
            port: Some(0),
            rx_ring_frames: MIN_RX_RING_FRAMES,
            tx_batch: MIN_TX_BATCH,
            ..AfPacketConfig::default()
        };
        Self::set_up(ifname, iface, config, fd, Some(local), None).map(Some)
    }

    /// Index, MTU and MAC of `ifname`, which must be up.
    fn interface(ifname: &str) -> Result<(u32, usize, [u8; 6]), LinkError> {
        let ifindex = interfaces::index(ifname)?;
        if !interfaces::is_up(ifname)? {
            return Err(LinkError::InterfaceDown(ifname.to_owned()));
        }
        Ok((ifindex, interfaces::mtu(ifname)?, interfaces::mac(ifname)?))
    }

    /// The rest of an open, on socket `fd` with its filter attached: the
    /// RX ring, the options, the bind. `iface`: [`Self::interface`]'s answer.
    fn set_up(
        ifname: &str,
        (ifindex, mtu, mac): (u32, usize, [u8; 6]),
        config: AfPacketConfig,
        fd: OwnedFd,
        local: Option<LocalPort>,
        session: Option<OwnedFd>,
    ) -> Result<AfPacket, LinkError> {
        let max_frame = mtu + HEADER_LEN;
        let io_err = |context: &str| {
            let context = format!("{context} on {ifname}");
            move |source| LinkError::Io { context, source }
        };
        let slot = rx_geometry(mtu, 1, sys::page_size()).frame_size;
        let geometry = rx_geometry(mtu, config.rx_frames_for(slot), sys::page_size());
        let tx_batch = config.tx_batch_for(max_frame);
        let rx = sys::RxRing::new(fd.as_fd(), geometry).map_err(io_err(&format!(
            "setting up a {} KiB TPACKET_V2 RX ring",
            geometry.ring_bytes() / 1024
        )))?;
        sys::set_packet_option(fd.as_fd(), libc::PACKET_IGNORE_OUTGOING, 1)
            .map_err(io_err("setting PACKET_IGNORE_OUTGOING"))?;
        sys::set_packet_option(fd.as_fd(), libc::PACKET_QDISC_BYPASS, 1)
            .map_err(io_err("setting PACKET_QDISC_BYPASS"))?;
        // Frames the driver has not completed count against the send buffer:
        // room for a few batches. Not fatal: a smaller buffer means retries.
        if let Err(e) = sys::set_send_buffer(fd.as_fd(), 4 * tx_batch * (max_frame + 1024)) {
            tracing::debug!(%ifname, error = %e, "could not enlarge the send buffer");
        }
        sys::bind_packet(fd.as_fd(), ifindex, libc::ETH_P_ALL as u16)
            .map_err(io_err("binding the packet socket"))?;
        tracing::debug!(%ifname, ifindex, mtu, ?geometry, "opened AF_PACKET device");

        Ok(AfPacket {
            rx,
            tx: sys::FrameBatch::new(tx_batch, max_frame),
            fd,
            ifname: ifname.to_owned(),
            ifindex,
            mac,
            mtu,
            rx_ring_frames: geometry.frame_nr,
            counters: AfPacketStats::default(),
            kernel_drops: Cell::new(0),
            pending_error: None,
            local,
            session,
            config,
        })
    }

    /// The transport port this device receives, when it shares the
    /// interface (`AfPacketConfig::port`); the claimed one when 0 was asked.
    pub fn port(&self) -> Option<u16> {
        self.local.as_ref().map(LocalPort::port)
    }

    /// Whether the host's endpoint service opened the socket (this process
    /// has no CAP_NET_RAW; `link::grant`).
    pub fn granted(&self) -> bool {
        self.session.is_some()
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

    /// No ring frame is waiting: look at the same-host socket, and take the
    /// link role over when its holder left.
    fn receive_local(&mut self, force: bool) -> Option<AfPacketRxToken<'_>> {
        let local = self.local.as_mut()?;
        match local.poll(force) {
            Some(len) => Some(AfPacketRxToken(RxFrom::Local(local.frame(len)))),
            None => {
                if local.take_role_change() {
                    let filter = endpoint_filter(self.config.sap, local.port(), true);
                    if let Err(e) = sys::attach_filter(self.fd.as_fd(), &filter) {
                        tracing::warn!(ifname = %self.ifname, error = %e, "could not widen the filter for the link role");
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
    pub fn config(&self) -> &AfPacketConfig {
        &self.config
    }

    /// Counters since the device was opened. Reads the kernel's drop counter
    /// (one `getsockopt`).
    pub fn stats(&self) -> AfPacketStats {
        if let Ok((_, drops)) = sys::packet_statistics(self.fd.as_fd()) {
            self.kernel_drops
                .set(self.kernel_drops.get() + u64::from(drops));
        }
        AfPacketStats {
            rx_kernel_drops: self.kernel_drops.get(),
            ..self.counters
        }
    }

    /// One `sendmmsg` of the pending frames, if any. "Try again" answers are
    /// not errors: unsent frames stay in the batch.
    fn kick(&mut self) -> io::Result<()> {
        let pending = self.tx.pending();
        if pending == 0 {
            return Ok(());
        }
        let mut result = self.tx.send(self.fd.as_fd());
        self.counters.tx_kicks += 1;
        if matches!(&result, Err(e) if !is_try_again(e)) {
            // A socket error recorded earlier (the link went down and came
            // back up; a previous batch failed part-way) is returned, and
            // cleared, by the next send, which then sends nothing. Only a
            // second failure is news.
            result = self.tx.send(self.fd.as_fd());
            self.counters.tx_kicks += 1;
        }
        match result {
            Ok(sent) if sent == pending => Ok(()),
            Ok(_) => {
                self.counters.tx_kick_retries += 1;
                Ok(())
            }
            Err(e) if is_try_again(&e) => {
                self.counters.tx_kick_retries += 1;
                Ok(())
            }
            Err(e) => {
                self.counters.tx_errors += 1;
                Err(e)
            }
        }
    }
}

/// "Try again later" from a send: the socket buffer or the driver's queue
/// is full (`EAGAIN`, `ENOBUFS`); nothing is wrong.
fn is_try_again(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS))
}

/// A received frame lent in place: from the RX ring (the slot goes back to
/// the kernel when the token is consumed or dropped), or from the same-host
/// path.
pub struct AfPacketRxToken<'a>(RxFrom<'a>);

enum RxFrom<'a> {
    /// A slot of the RX ring.
    Ring(sys::RxSlot<'a>),
    /// A frame from another endpoint of this host.
    Local(&'a [u8]),
}

impl RxToken for AfPacketRxToken<'_> {
    #[inline]
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self.0 {
            RxFrom::Ring(slot) => f(slot.frame()),
            RxFrom::Local(frame) => f(frame),
        }
    }
}

/// A free slot of the TX batch; the frame written into it is sent with the
/// batch.
pub struct AfPacketTxToken<'a> {
    batch: &'a mut sys::FrameBatch,
    counters: &'a mut AfPacketStats,
    local: Option<&'a mut LocalPort>,
}

impl TxToken for AfPacketTxToken<'_> {
    const GATHERS: bool = true;

    #[inline]
    fn consume<F: FnOnce(&mut [u8]) -> usize>(self, f: F) -> usize {
        self.consume_gather(|buf| (f(buf), None))
    }

    /// The tail goes out from where it lies, as a second I/O vector of the
    /// frame's `sendmmsg` message (its trailer, left in the slot after the
    /// frame's start, as a third): the copy into the batch is saved.
    #[inline]
    fn consume_gather<F: FnOnce(&mut [u8]) -> (usize, Option<Tail>)>(self, f: F) -> usize {
        let Some(buf) = self.batch.next() else {
            // `transmit` only hands out a token when the batch has room.
            return 0;
        };
        let capacity = buf.len();
        let (head, tail) = f(buf);
        if head == 0 {
            return 0;
        }
        let len = head + tail.as_ref().map_or(0, |t| t.body.len() + t.trailer);
        if !(HEADER_LEN..=capacity).contains(&len)
            || head < HEADER_LEN
            || tail.as_ref().is_some_and(|t| t.trailer > TAG_LEN)
        {
            tracing::warn!(len, capacity, "refusing a TX frame of impossible length");
            self.counters.tx_errors += 1;
            return 0;
        }
        if let Some(local) = self.local {
            if local.is_local(&buf[..head]) {
                // To an endpoint of this host: the slot stays free, the
                // frame goes whole.
                if let Some(t) = &tail {
                    t.join(buf, head);
                }
                local.send(&buf[..len]);
                return len;
            }
        }
        let trailer = tail.as_ref().map_or(0, |t| t.trailer);
        self.batch
            .commit_gather(head, tail.map(|t| t.body), trailer);
        self.counters.tx_frames += 1;
        self.counters.tx_bytes += len as u64;
        len
    }
}

impl Device for AfPacket {
    type RxToken<'a> = AfPacketRxToken<'a>;
    type TxToken<'a> = AfPacketTxToken<'a>;

    #[inline]
    fn receive(&mut self, _now: Instant) -> Option<AfPacketRxToken<'_>> {
        if self.local.is_some() && !self.rx.ready() {
            return self.receive_local(false);
        }
        let (slot, skipped) = self.rx.next();
        if skipped > 0 {
            self.counters.rx_truncated += u64::from(skipped);
        }
        let slot = slot?;
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += slot.frame().len() as u64;
        Some(AfPacketRxToken(RxFrom::Ring(slot)))
    }

    #[inline]
    fn transmit(&mut self, _now: Instant) -> Option<AfPacketTxToken<'_>> {
        if self.tx.is_full() {
            if let Err(e) = self.kick() {
                self.pending_error.get_or_insert(e);
            }
            if self.tx.is_full() {
                return None;
            }
        }
        Some(AfPacketTxToken {
            batch: &mut self.tx,
            counters: &mut self.counters,
            local: self.local.as_mut(),
        })
    }

    #[inline]
    fn flush(&mut self, _now: Instant) -> io::Result<()> {
        // The busy-poll loop flushes on every pass: nothing to do is the
        // common case, kept inline.
        if self.pending_error.is_none() && self.tx.pending() == 0 {
            return Ok(());
        }
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        // One kick normally takes everything; repeat while the kernel makes
        // progress (it stops early when the send buffer is full).
        loop {
            let before = self.tx.pending();
            self.kick()?;
            let after = self.tx.pending();
            if after == 0 || after == before {
                return Ok(());
            }
        }
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if self.rx.ready() {
            return Ok(());
        }
        let readiness = match &mut self.local {
            None => sys::poll_in(self.fd.as_fd(), timeout)?,
            Some(local) => {
                local.woke();
                let mut fds = vec![self.fd.as_raw_fd()];
                local.push_fds(&mut fds);
                sys::poll_first_of(&fds, timeout)?
            }
        };
        match readiness {
            sys::Readiness::Readable | sys::Readiness::Nothing => Ok(()),
            // A pending socket error makes every poll return at once until
            // it is read, so read it here. The kernel records the link going
            // down (ENETDOWN), which the caller should hear about, and the
            // error of a partly sent batch, which is no news (`kick` keeps
            // the unsent frames).
            sys::Readiness::Error => match sys::take_socket_error(self.fd.as_fd())? {
                Some(e) if !is_try_again(&e) => Err(e),
                _ => Ok(()),
            },
        }
    }

    fn prepare_wait(&mut self, fds: &mut Vec<RawFd>) -> Option<Duration> {
        if self.rx.ready() {
            return Some(Duration::ZERO);
        }
        fds.push(self.fd.as_raw_fd());
        if let Some(local) = &mut self.local {
            local.woke();
            local.push_fds(fds);
        }
        None
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            mtu: self.mtu,
            max_burst: self.tx.capacity(),
            backend: "af_packet/mmap".into(),
            rx_queue_frames: Some(self.rx_ring_frames),
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![
            ("rx_kernel_drops", s.rx_kernel_drops),
            ("rx_truncated", s.rx_truncated),
            ("tx_kicks", s.tx_kicks),
            ("tx_kick_retries", s.tx_kick_retries),
            ("tx_errors", s.tx_errors),
        ]
    }

    fn kernel_drops(&self) -> u64 {
        self.stats().rx_kernel_drops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    fn check(g: RingGeometry, min_frame: usize, frames: usize) {
        assert!(g.is_valid(PAGE, min_frame), "{g:?}");
        assert!(g.block_size.is_power_of_two(), "{g:?}");
        assert!(g.frame_nr >= frames, "{g:?}");
        assert!(g.frame_nr < frames + g.frames_per_block(), "{g:?}");
        let last = g.slot_offset(g.frame_nr - 1);
        assert!(last + g.frame_size <= g.ring_bytes(), "{g:?}");
    }

    #[test]
    fn rx_slot_holds_a_whole_frame() {
        // Where tpacket_rcv writes the MAC header in a V2 slot.
        assert_eq!(RX_MAC_OFFSET, 66);
        for mtu in [1500, 9000, 65000] {
            let g = rx_geometry(mtu, 1024, PAGE);
            check(g, RX_MAC_OFFSET + HEADER_LEN + mtu, 1024);
        }
    }

    #[test]
    fn rx_geometry_at_common_mtus() {
        assert_eq!(
            rx_geometry(1500, 1024, PAGE),
            RingGeometry {
                block_size: 8192,
                block_nr: 205,
                frame_size: 1584,
                frame_nr: 1025,
            }
        );
        assert_eq!(
            rx_geometry(9000, 1024, PAGE),
            RingGeometry {
                block_size: 65536,
                block_nr: 147,
                frame_size: 9088,
                frame_nr: 1029,
            }
        );
        // 65000 + 14 + 66 fits a 64 KiB block with one frame.
        assert_eq!(
            rx_geometry(65000, 64, PAGE),
            RingGeometry {
                block_size: 65536,
                block_nr: 64,
                frame_size: 65088,
                frame_nr: 64,
            }
        );
        // The largest veth MTU needs a bigger block.
        let g = rx_geometry(65521, 8, PAGE);
        assert_eq!(g.block_size, 131072);
        check(g, RX_MAC_OFFSET + HEADER_LEN + 65521, 8);
    }

    #[test]
    fn geometry_wastes_little() {
        for mtu in (64..=65000).step_by(499) {
            let g = rx_geometry(mtu, 100, PAGE);
            let used = g.frames_per_block() * g.frame_size;
            if g.block_size < MAX_BLOCK {
                assert!(g.block_size - used <= g.block_size / 8, "mtu {mtu}: {g:?}");
            }
        }
    }

    #[test]
    fn large_frames_get_fewer_slots_within_the_byte_budgets() {
        let c = AfPacketConfig::default();
        let slot = |mtu| rx_geometry(mtu, 1, PAGE).frame_size;
        // MTU 1500: the slot count decides (1024 slots are 1.6 MiB).
        assert_eq!(c.rx_frames_for(slot(1500)), 1024);
        assert_eq!(c.tx_batch_for(1514), 64);
        // MTU 9000: 2 MiB of 9088-byte slots; 256 KiB of 9014-byte frames.
        assert_eq!(c.rx_frames_for(slot(9000)), (2 << 20) / 9088);
        assert_eq!(c.tx_batch_for(9014), (256 << 10) / 9014);
        // MTU 65000: the floors.
        assert_eq!(c.rx_frames_for(slot(65000)), MIN_RX_RING_FRAMES);
        assert_eq!(c.tx_batch_for(65014), MIN_TX_BATCH);
        // A smaller slot count than the floor is kept as asked.
        let small = AfPacketConfig {
            rx_ring_frames: 8,
            tx_batch: 1,
            ..AfPacketConfig::default()
        };
        assert_eq!(small.rx_frames_for(slot(65000)), 8);
        assert_eq!(small.tx_batch_for(65014), 1);
    }

    #[test]
    fn config_is_checked() {
        assert!(AfPacketConfig::default().validate().is_ok());
        for tx_batch in [0, 1025] {
            let bad = AfPacketConfig {
                tx_batch,
                ..AfPacketConfig::default()
            };
            assert!(bad.validate().is_err());
        }
        let bad = AfPacketConfig {
            rx_ring_frames: 0,
            ..AfPacketConfig::default()
        };
        assert!(bad.validate().is_err());
    }
}
