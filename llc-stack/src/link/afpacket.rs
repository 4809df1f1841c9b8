//! `AfPacket`: a raw `AF_PACKET` socket on one interface, with mmap'd
//! TPACKET_V2 rings for both directions.
//!
//! # What the socket sees
//! One socket, bound to the interface with `ETH_P_ALL`, behind a classic BPF
//! filter that accepts only our LLC frames: the 802.3 length form (length/type
//! field <= 1500) or the jumbo form (EtherType 0x8870), with DSAP equal to our
//! SAP, addressed to this host (unicast to us, broadcast or multicast: frames
//! a bridge floods to other hosts are rejected) and without a VLAN tag.
//! The socket is created with protocol 0, so it receives nothing until it is
//! bound; the filter and rings are installed before the bind, which closes
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
//! See [`AfPacket`] for the choice of the TX ring over `sendmmsg`.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use crate::link::{Capabilities, Device, LinkError, RxToken, TxToken};
use crate::sys::{self, align_up, RingGeometry, RX_MAC_OFFSET, TX_DATA_OFFSET};
use crate::time::Instant;
use crate::wire::ethernet::{ETHERTYPE_JUMBO_LLC, HEADER_LEN, MAX_LENGTH_FIELD};

/// How to open an [`AfPacket`] device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfPacketConfig {
    /// Our LLC SAP: only frames whose DSAP equals it are received.
    pub sap: u8,
    /// RX ring slots (rounded up to fill whole ring blocks). Each slot holds
    /// one frame of MTU + 14 bytes plus about 80 bytes of kernel header, so
    /// the default costs about 1.6 MiB at MTU 1500 and 64 MiB at MTU 65000.
    pub rx_ring_frames: usize,
    /// TX ring slots (rounded up likewise): frames written but not yet
    /// completed by the kernel.
    pub tx_ring_frames: usize,
    /// Frames per TX kick: when this many are pending, the next
    /// [`Device::transmit`] pushes them out first. Also reported as
    /// [`Capabilities::max_burst`]. At most `tx_ring_frames`.
    pub tx_batch: usize,
    /// How frames are transmitted.
    pub tx_mode: TxMode,
}

/// How an [`AfPacket`] transmits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxMode {
    /// Write into the mmap'd TX ring; one `send` per batch.
    Ring,
    /// Write into a batch buffer; one `sendmmsg` per batch.
    Sendmmsg,
}

impl Default for AfPacketConfig {
    fn default() -> Self {
        AfPacketConfig {
            sap: 0x7C,
            rx_ring_frames: 1024,
            tx_ring_frames: 256,
            tx_batch: 64,
            tx_mode: TxMode::Ring,
        }
    }
}

impl AfPacketConfig {
    fn validate(&self) -> Result<(), LinkError> {
        let problem = if self.rx_ring_frames == 0 {
            Some("rx_ring_frames must be at least 1")
        } else if self.tx_ring_frames == 0 {
            Some("tx_ring_frames must be at least 1")
        } else if self.tx_batch == 0 || self.tx_batch > self.tx_ring_frames {
            Some("tx_batch must be between 1 and tx_ring_frames")
        } else {
            None
        };
        match problem {
            None => Ok(()),
            Some(msg) => Err(LinkError::Io {
                context: "invalid AfPacketConfig".into(),
                source: io::Error::new(io::ErrorKind::InvalidInput, msg),
            }),
        }
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
    /// Frames skipped because the ring slot held only part of them.
    pub rx_truncated: u64,
    /// Frames queued for transmission.
    pub tx_frames: u64,
    /// Bytes of those frames.
    pub tx_bytes: u64,
    /// TX ring kicks (`send` calls) made.
    pub tx_kicks: u64,
    /// Kicks the kernel answered with "try again" (`EAGAIN`, `ENOBUFS`);
    /// their frames stay queued and go out with a later kick.
    pub tx_kick_retries: u64,
    /// Frames refused (shorter than an Ethernet header or longer than the
    /// buffer) plus kicks that failed with a real error.
    pub tx_errors: u64,
}

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

/// TX ring layout for interface MTU `mtu`: each slot holds the header and a
/// frame of `mtu + 14` bytes. Slots larger than a page are made whole pages,
/// so the kernel (which attaches the ring's pages to the skb without copying)
/// needs the fewest page fragments: a 64 KiB frame fits the 17 allowed.
pub(crate) fn tx_geometry(mtu: usize, frames: usize, page: usize) -> RingGeometry {
    let mut frame_size = align_up(TX_DATA_OFFSET + HEADER_LEN + mtu, libc::TPACKET_ALIGNMENT);
    if frame_size > page {
        frame_size = align_up(frame_size, page);
    }
    ring_geometry(frame_size, frames, page)
}

// Classic BPF opcodes (linux/bpf_common.h, linux/filter.h).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_LD_H_ABS: u16 = 0x28;
const BPF_LD_B_ABS: u16 = 0x30;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGT_K: u16 = 0x25;
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

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
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

/// A raw packet socket on one interface carrying our LLC frames, with mmap'd
/// TPACKET_V2 rings for RX and TX.
///
/// # Why a TX ring rather than `sendmmsg`
/// Both were measured on a veth pair between namespaces (see
/// `examples/afpacket_pingpong.rs`). TODO(measure): fill in.
///
/// # Cost per frame
/// Receiving is a load of the slot's status word and a store to hand it
/// back: no syscall, lock or allocation. Transmitting writes into the ring
/// slot in place; one `send` per batch (at [`Device::flush`], or when
/// `tx_batch` frames are pending) pushes the batch out.
pub struct AfPacket {
    // Field order matters only for clarity: the rings are unmapped before
    // the socket is closed (either order is safe).
    rings: sys::PacketRings,
    fd: OwnedFd,
    ifname: String,
    ifindex: u32,
    mac: [u8; 6],
    mtu: usize,
    config: AfPacketConfig,
    counters: AfPacketStats,
    /// Kernel drops read so far (PACKET_STATISTICS resets on every read).
    kernel_drops: Cell<u64>,
    /// A kick error met inside `transmit`, reported by the next `flush`.
    pending_error: Option<io::Error>,
    /// The batch buffer in `TxMode::Sendmmsg`.
    batch: Option<sys::FrameBatch>,
}

impl AfPacket {
    /// Open a raw packet socket on interface `ifname` of the calling thread's
    /// network namespace.
    ///
    /// Errors: [`LinkError::NoSuchInterface`], [`LinkError::InterfaceDown`],
    /// [`LinkError::PermissionDenied`] without CAP_NET_RAW, and
    /// [`LinkError::Io`] for anything else (e.g. no memory for the rings).
    pub fn open(ifname: &str, config: AfPacketConfig) -> Result<AfPacket, LinkError> {
        config.validate()?;
        let ifindex = sys::interface_index(ifname)?;
        if !sys::interface_is_up(ifname)? {
            return Err(LinkError::InterfaceDown(ifname.to_owned()));
        }
        let mtu = sys::interface_mtu(ifname)?;
        let mac = sys::interface_mac(ifname)?;
        let io_err = |context: &str| {
            let context = format!("{context} on {ifname}");
            move |source| LinkError::Io { context, source }
        };

        let fd = sys::packet_socket().map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => LinkError::PermissionDenied {
                iface: ifname.to_owned(),
                what: "a raw packet socket",
                needs: "CAP_NET_RAW",
            },
            _ => LinkError::Io {
                context: format!("creating a packet socket for {ifname}"),
                source: e,
            },
        })?;
        sys::attach_filter(fd.as_fd(), &llc_filter(config.sap))
            .map_err(io_err("attaching the LLC socket filter"))?;

        let page = sys::page_size();
        let rx = rx_geometry(mtu, config.rx_ring_frames, page);
        let tx = tx_geometry(mtu, config.tx_ring_frames, page);
        let rings = sys::PacketRings::new(fd.as_fd(), rx, tx, config.tx_mode == TxMode::Ring)
            .map_err(io_err(&format!(
                "setting up {} KiB of TPACKET_V2 rings",
                (rx.ring_bytes() + tx.ring_bytes()) / 1024
            )))?;
        sys::set_packet_option(fd.as_fd(), libc::PACKET_IGNORE_OUTGOING, 1)
            .map_err(io_err("setting PACKET_IGNORE_OUTGOING"))?;
        sys::set_packet_option(fd.as_fd(), libc::PACKET_QDISC_BYPASS, 1)
            .map_err(io_err("setting PACKET_QDISC_BYPASS"))?;
        // Frames in flight count against the send buffer; let the whole TX
        // ring be in flight. Not fatal: a smaller buffer only means retries.
        if let Err(e) = sys::set_send_buffer(fd.as_fd(), tx.ring_bytes()) {
            tracing::debug!(%ifname, error = %e, "could not enlarge the send buffer");
        }
        sys::bind_packet(fd.as_fd(), ifindex, libc::ETH_P_ALL as u16)
            .map_err(io_err("binding the packet socket"))?;
        tracing::debug!(%ifname, ifindex, mtu, ?rx, ?tx, "opened AF_PACKET device");

        Ok(AfPacket {
            rings,
            fd,
            ifname: ifname.to_owned(),
            ifindex,
            mac,
            mtu,
            counters: AfPacketStats::default(),
            kernel_drops: Cell::new(0),
            pending_error: None,
            batch: (config.tx_mode == TxMode::Sendmmsg)
                .then(|| sys::FrameBatch::new(config.tx_batch, mtu + HEADER_LEN)),
            config,
        })
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

    /// One `send` on the TX ring if frames are waiting, then account for the
    /// slots the kernel picked up. "Try again" answers are not errors.
    fn kick(&mut self) -> io::Result<()> {
        if self.unkicked() == 0 {
            return Ok(());
        }
        let result = match &mut self.batch {
            Some(batch) => batch.send(self.fd.as_fd()),
            None => {
                let r = sys::kick_tx_ring(self.fd.as_fd());
                self.rings.tx_reap();
                r
            }
        };
        self.counters.tx_kicks += 1;
        match result {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::ENOBUFS)) => {
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

impl AfPacket {
    fn unkicked(&self) -> usize {
        match &self.batch {
            Some(b) => b.pending(),
            None => self.rings.tx_unkicked(),
        }
    }
}

/// A received frame lent in place from the RX ring; the slot goes back to the
/// kernel when the token is consumed or dropped.
pub struct AfPacketRxToken<'a> {
    slot: sys::RxSlot<'a>,
}

impl RxToken for AfPacketRxToken<'_> {
    #[inline]
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(self.slot.frame())
    }
}

/// A free TX ring slot; the frame written into it is queued for the next kick.
pub struct AfPacketTxToken<'a> {
    slot: TxInner<'a>,
    counters: &'a mut AfPacketStats,
}

enum TxInner<'a> {
    Ring(sys::TxSlot<'a>),
    Batch(&'a mut sys::FrameBatch, usize),
}

impl TxToken for AfPacketTxToken<'_> {
    #[inline]
    fn consume<F: FnOnce(&mut [u8]) -> usize>(self, f: F) -> usize {
        let mut slot = self.slot;
        let (len, capacity) = match &mut slot {
            TxInner::Ring(slot) => {
                let buf = slot.buf();
                let capacity = buf.len();
                (f(buf), capacity)
            }
            TxInner::Batch(batch, max) => {
                let buf = &mut batch.next().expect("checked in transmit")[..*max];
                let capacity = buf.len();
                (f(buf), capacity)
            }
        };
        if len == 0 {
            return 0;
        }
        if !(HEADER_LEN..=capacity).contains(&len) {
            tracing::warn!(len, capacity, "refusing a TX frame of impossible length");
            self.counters.tx_errors += 1;
            return 0;
        }
        match slot {
            TxInner::Ring(slot) => slot.send(len),
            TxInner::Batch(batch, _) => batch.commit(len),
        }
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
        let (slot, skipped) = self.rings.rx_next();
        if skipped > 0 {
            self.counters.rx_truncated += u64::from(skipped);
        }
        let slot = slot?;
        self.counters.rx_frames += 1;
        self.counters.rx_bytes += slot.frame().len() as u64;
        Some(AfPacketRxToken { slot })
    }

    #[inline]
    fn transmit(&mut self, _now: Instant) -> Option<AfPacketTxToken<'_>> {
        let has_room = match &mut self.batch {
            Some(b) => b.next().is_some(),
            None => self.rings.tx_has_room(),
        };
        if self.unkicked() >= self.config.tx_batch || !has_room {
            if let Err(e) = self.kick() {
                self.pending_error.get_or_insert(e);
            }
        }
        let max = self.mtu + HEADER_LEN;
        let slot = match &mut self.batch {
            Some(b) => {
                b.next()?;
                TxInner::Batch(b, max)
            }
            None => TxInner::Ring(self.rings.tx_next(max)?),
        };
        Some(AfPacketTxToken {
            slot,
            counters: &mut self.counters,
        })
    }

    fn flush(&mut self, _now: Instant) -> io::Result<()> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        // One kick normally takes everything; repeat while the kernel makes
        // progress (it stops early when the send buffer is full).
        loop {
            let before = self.unkicked();
            self.kick()?;
            let after = self.unkicked();
            if after == 0 || after == before {
                return Ok(());
            }
        }
    }

    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        if self.rings.rx_ready() {
            return Ok(());
        }
        sys::poll_readable(self.fd.as_fd(), timeout).map(|_| ())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            mtu: self.mtu,
            max_burst: self.config.tx_batch,
            backend: "af_packet/mmap".into(),
        }
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
        assert_eq!(TX_DATA_OFFSET, 32);
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
    fn tx_geometry_at_common_mtus() {
        for mtu in [60, 1500, 9000, 65000, 65521] {
            let g = tx_geometry(mtu, 256, PAGE);
            check(g, TX_DATA_OFFSET + HEADER_LEN + mtu, 256);
        }
        let g = tx_geometry(1500, 256, PAGE);
        assert_eq!((g.frame_size, g.block_size), (1552, 8192));
        // Big slots are whole pages: the frame data of a 65000-byte payload
        // then spans 16 pages, within the kernel's 17 skb fragments.
        let g = tx_geometry(65000, 256, PAGE);
        assert_eq!(
            (g.frame_size, g.block_size, g.frame_nr),
            (65536, 65536, 256)
        );
        let first = TX_DATA_OFFSET + HEADER_LEN;
        assert!((first + 65000).div_ceil(PAGE) - first / PAGE <= 17);
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
    fn config_is_checked() {
        assert!(AfPacketConfig::default().validate().is_ok());
        let bad = AfPacketConfig {
            tx_batch: 1000,
            ..AfPacketConfig::default()
        };
        assert!(bad.validate().is_err());
    }
}
