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

use crate::link::grant;
use crate::link::interfaces;
use crate::link::local::{LocalPort, LocalStats, CONTROL_OFFSET, DST_PORT_OFFSET};
use crate::link::{Capabilities, Device, LinkError, RxToken, Tail, TxToken};
use crate::sys::{self, align_up, RingGeometry, RX_MAC_OFFSET};
use crate::time::Instant;
use crate::wire::auth::TAG_LEN;
use crate::wire::ethernet::{ETHERTYPE_JUMBO_LLC, HEADER_LEN, MAX_LENGTH_FIELD};
use crate::wire::llc::{CONTROL_TEST, CONTROL_UI, PF_BIT, SAP_RESPONSE_BIT};

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

// Classic BPF opcodes (linux/bpf_common.h, linux/filter.h).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_LD_H_ABS: u16 = 0x28;
const BPF_LD_B_ABS: u16 = 0x30;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGT_K: u16 = 0x25;
const BPF_JSET_K: u16 = 0x45;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_RET_K: u16 = 0x06;
/// Ancillary load of `skb->pkt_type` (`SKF_AD_OFF + SKF_AD_PKTTYPE`).
const ANC_PKTTYPE: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32;
/// Ancillary load of "the skb carries a VLAN tag".
const ANC_VLAN_PRESENT: u32 = (libc::SKF_AD_OFF + libc::SKF_AD_VLAN_TAG_PRESENT) as u32;
/// Largest `pkt_type` we accept: PACKET_HOST (0), BROADCAST (1), MULTICAST (2).
const PKTTYPE_MAX_ACCEPTED: u32 = libc::PACKET_MULTICAST as u32;
/// Offset of the length/type field in the Ethernet header.
const LENGTH_TYPE_OFFSET: u32 = 12;
/// Offset of the DSAP: the first byte after the Ethernet header.
const DSAP_OFFSET: u32 = HEADER_LEN as u32;
/// Offset of the SSAP.
const SSAP_OFFSET: u32 = HEADER_LEN as u32 + 1;
/// Offset of a TEST frame's information field.
const INFO_OFFSET: u32 = HEADER_LEN as u32 + 3;

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The filter of an endpoint that shares the interface: [`llc_filter`]'s
/// checks, then only UI frames whose transport `dst_port` is `port`, and
/// TEST answers to a reachability probe of `port` (information field
/// "LLCR" + port, `proto::PROBE_MAGIC`); other LLC commands (TEST, XID)
/// only when `link_role` says this endpoint answers them.
///
/// ```text
/// 0-8: as llc_filter, up to the DSAP check
/// 9:  ldb [16]            ; LLC control
/// 10: jeq #0x03    -> 11 else 13
/// 11: ldh [23]            ; UI: transport dst_port
/// 12: jeq #port    -> ACCEPT else REJECT
/// 13: and #0xef           ; control without P/F
/// 14: jeq #0xe3    -> 15 else OTHER
/// 15: ldb [15]            ; SSAP
/// 16: jset #1      -> 17 else OTHER  (a TEST response)
/// 17: ld [17]             ; information field
/// 18: jeq #"LLCR"  -> 19 else OTHER
/// 19: ldh [21]            ; the prober's port
/// 20: jeq #port    -> ACCEPT else REJECT
/// 21: OTHER: ret #(link_role ? -1 : 0)
/// 22: ACCEPT: ret #-1
/// 23: REJECT: ret #0
/// ```
pub(crate) fn endpoint_filter(sap: u8, port: u16, link_role: bool) -> [libc::sock_filter; 24] {
    const OTHER: u8 = 21;
    const ACCEPT: u8 = 22;
    const REJECT: u8 = 23;
    let to = |from: u8, target: u8| target - from - 1;
    let magic = u32::from_be_bytes(crate::proto::PROBE_MAGIC);
    [
        insn(BPF_LD_W_ABS, 0, 0, ANC_PKTTYPE),
        insn(BPF_JGT_K, to(1, REJECT), 0, PKTTYPE_MAX_ACCEPTED),
        insn(BPF_LD_W_ABS, 0, 0, ANC_VLAN_PRESENT),
        insn(BPF_JEQ_K, 0, to(3, REJECT), 0),
        insn(BPF_LD_H_ABS, 0, 0, LENGTH_TYPE_OFFSET),
        insn(BPF_JGT_K, 0, 1, MAX_LENGTH_FIELD as u32),
        insn(BPF_JEQ_K, 0, to(6, REJECT), ETHERTYPE_JUMBO_LLC as u32),
        insn(BPF_LD_B_ABS, 0, 0, DSAP_OFFSET),
        insn(BPF_JEQ_K, 0, to(8, REJECT), sap as u32),
        insn(BPF_LD_B_ABS, 0, 0, CONTROL_OFFSET as u32),
        insn(BPF_JEQ_K, 0, to(10, 13), CONTROL_UI as u32),
        insn(BPF_LD_H_ABS, 0, 0, DST_PORT_OFFSET as u32),
        insn(BPF_JEQ_K, to(12, ACCEPT), to(12, REJECT), port as u32),
        insn(BPF_ALU_AND_K, 0, 0, !u32::from(PF_BIT) & 0xff),
        insn(BPF_JEQ_K, 0, to(14, OTHER), CONTROL_TEST as u32),
        insn(BPF_LD_B_ABS, 0, 0, SSAP_OFFSET),
        insn(BPF_JSET_K, 0, to(16, OTHER), SAP_RESPONSE_BIT as u32),
        insn(BPF_LD_W_ABS, 0, 0, INFO_OFFSET),
        insn(BPF_JEQ_K, 0, to(18, OTHER), magic),
        insn(BPF_LD_H_ABS, 0, 0, INFO_OFFSET + 4),
        insn(BPF_JEQ_K, to(20, ACCEPT), to(20, REJECT), port as u32),
        insn(BPF_RET_K, 0, 0, if link_role { u32::MAX } else { 0 }),
        insn(BPF_RET_K, 0, 0, u32::MAX),
        insn(BPF_RET_K, 0, 0, 0),
    ]
}

/// The socket filter: accept whole frames that are ours, reject the rest.
///
/// ```text
/// 0: ld  pkttype          ; reject frames for other hosts (and our own)
/// 1: jgt #2        -> 10
/// 2: ld  vlan_present     ; reject VLAN-tagged frames
/// 3: jeq #0        -> 4 else 10
/// 4: ldh [12]             ; length/type
/// 5: jgt #1500     -> 6 else 7
/// 6: jeq #0x8870   -> 7 else 10
/// 7: ldb [14]             ; DSAP (a frame too short to have one aborts: reject)
/// 8: jeq #sap      -> 9 else 10
/// 9: ret #-1              ; accept, whole frame
/// 10: ret #0              ; reject
/// ```
pub(crate) fn llc_filter(sap: u8) -> [libc::sock_filter; 11] {
    [
        insn(BPF_LD_W_ABS, 0, 0, ANC_PKTTYPE),
        insn(BPF_JGT_K, 8, 0, PKTTYPE_MAX_ACCEPTED),
        insn(BPF_LD_W_ABS, 0, 0, ANC_VLAN_PRESENT),
        insn(BPF_JEQ_K, 0, 6, 0),
        insn(BPF_LD_H_ABS, 0, 0, LENGTH_TYPE_OFFSET),
        insn(BPF_JGT_K, 0, 1, MAX_LENGTH_FIELD as u32),
        insn(BPF_JEQ_K, 0, 3, ETHERTYPE_JUMBO_LLC as u32),
        insn(BPF_LD_B_ABS, 0, 0, DSAP_OFFSET),
        insn(BPF_JEQ_K, 0, 1, sap as u32),
        insn(BPF_RET_K, 0, 0, u32::MAX),
        insn(BPF_RET_K, 0, 0, 0),
    ]
}

/// A raw packet socket on one interface carrying our LLC frames: an mmap'd
/// TPACKET_V2 ring for RX, a `sendmmsg` batch for TX.
///
/// # Why `sendmmsg` rather than a TX ring
/// Both were built and measured on a veth pair between namespaces
/// (`examples/afpacket_pingpong.rs`, 2-core VM; the TX-ring version is in
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
        sys::attach_filter(fd.as_fd(), &grant::granted_filter(sap, 0, true, ifindex)).map_err(
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

    /// Packet types as the kernel's `skb->pkt_type`.
    const HOST: u32 = 0;
    const BROADCAST: u32 = 1;
    const OTHERHOST: u32 = 3;
    const OUTGOING: u32 = 4;

    /// What a filter sees besides the bytes.
    struct Meta {
        pkttype: u32,
        vlan: bool,
    }

    const PLAIN: Meta = Meta {
        pkttype: HOST,
        vlan: false,
    };

    /// A classic BPF interpreter for the instructions `llc_filter` uses, with
    /// the kernel's rules: out-of-bounds loads abort with 0, forward jumps
    /// only, the program must end in a return.
    fn run(prog: &[libc::sock_filter], pkt: &[u8], meta: &Meta) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let i = prog[pc];
            pc += 1;
            let load = |size: usize| -> Option<u32> {
                match i.k {
                    ANC_PKTTYPE => Some(meta.pkttype),
                    ANC_VLAN_PRESENT => Some(meta.vlan as u32),
                    k if k >= (libc::SKF_AD_OFF as u32) => panic!("unknown ancillary load {k:#x}"),
                    k => {
                        let k = k as usize;
                        let bytes = pkt.get(k..k.checked_add(size)?)?;
                        Some(bytes.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b)))
                    }
                }
            };
            match i.code {
                BPF_LD_W_ABS | BPF_LD_H_ABS | BPF_LD_B_ABS => {
                    let size = match i.code {
                        BPF_LD_W_ABS => 4,
                        BPF_LD_H_ABS => 2,
                        _ => 1,
                    };
                    match load(size) {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                BPF_JEQ_K | BPF_JGT_K => {
                    let taken = if i.code == BPF_JEQ_K {
                        a == i.k
                    } else {
                        a > i.k
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                BPF_RET_K => return i.k,
                other => panic!("opcode {other:#x} not modelled"),
            }
            assert!(pc < prog.len(), "fell off the end of the program");
        }
    }

    /// A frame of `total` bytes (cut short if under 17) with this
    /// length/type field and DSAP.
    fn frame(length_type: u16, dsap: u8, total: usize) -> Vec<u8> {
        let mut f = vec![0u8; total.max(17)];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&length_type.to_be_bytes());
        f[14] = dsap;
        f[15] = dsap;
        f[16] = 0x03;
        f.truncate(total);
        f
    }

    #[test]
    fn filter_accepts_exactly_our_llc_frames() {
        let prog = llc_filter(0x7C);
        let accept = |f: &[u8], m: &Meta| run(&prog, f, m) != 0;

        // Length form, any length value up to 1500, our DSAP.
        assert!(accept(&frame(46, 0x7C, 60), &PLAIN));
        assert!(accept(&frame(1500, 0x7C, 1514), &PLAIN));
        assert!(accept(&frame(0, 0x7C, 60), &PLAIN));
        assert!(accept(&frame(3, 0x7C, 17), &PLAIN));
        // Jumbo form.
        assert!(accept(&frame(0x8870, 0x7C, 9014), &PLAIN));
        // Broadcast and multicast are for us too.
        let bcast = Meta {
            pkttype: BROADCAST,
            vlan: false,
        };
        assert!(accept(&frame(46, 0x7C, 60), &bcast));

        // Another SAP, in either form.
        assert!(!accept(&frame(46, 0x42, 60), &PLAIN));
        assert!(!accept(&frame(0x8870, 0x7D, 9014), &PLAIN));
        // Length/type values just above 1500 are EtherTypes (or invalid).
        assert!(!accept(&frame(1501, 0x7C, 1515), &PLAIN));
        assert!(!accept(&frame(1536, 0x7C, 60), &PLAIN));
        // Other protocols whose byte 14 happens to equal our SAP.
        for ethertype in [0x0800u16, 0x0806, 0x86DD, 0x88CC, 0x8871, 0x8100] {
            assert!(
                !accept(&frame(ethertype, 0x7C, 60), &PLAIN),
                "{ethertype:#x}"
            );
        }
        // Runts without a DSAP byte.
        assert!(!accept(&frame(46, 0x7C, 14), &PLAIN));
        assert!(!accept(&frame(46, 0x7C, 12), &PLAIN));
        assert!(!accept(&[], &PLAIN));
        // Not addressed to this host, our own outgoing frames, VLAN-tagged.
        for m in [
            Meta {
                pkttype: OTHERHOST,
                vlan: false,
            },
            Meta {
                pkttype: OUTGOING,
                vlan: false,
            },
            Meta {
                pkttype: HOST,
                vlan: true,
            },
        ] {
            assert!(!accept(&frame(46, 0x7C, 60), &m));
        }
    }

    #[test]
    fn filter_keeps_whole_frames_and_follows_the_sap() {
        for sap in [0x00u8, 0x7C, 0xAA, 0xFE, 0xFF] {
            let prog = llc_filter(sap);
            assert_eq!(run(&prog, &frame(46, sap, 60), &PLAIN), u32::MAX);
            assert_eq!(run(&prog, &frame(46, sap.wrapping_add(1), 60), &PLAIN), 0);
        }
    }

    #[test]
    fn filter_is_well_formed() {
        let prog = llc_filter(0x7C);
        assert_eq!(prog.last().unwrap().code, BPF_RET_K);
        for (pc, i) in prog.iter().enumerate() {
            if matches!(i.code, BPF_JEQ_K | BPF_JGT_K) {
                for off in [i.jt, i.jf] {
                    assert!(
                        pc + 1 + usize::from(off) < prog.len(),
                        "jump out of program at {pc}"
                    );
                }
            }
        }
    }

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
