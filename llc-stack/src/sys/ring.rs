//! The TPACKET_V2 RX ring of a packet socket: its geometry, the cursor that
//! walks it, and slot ownership.
//!
//! The ring protocol (who owns a slot, the status word's memory ordering)
//! lives here, beside the unsafe code, because lending a ring slot as a Rust
//! slice is only sound while the protocol is obeyed; the link backend above
//! sees only safe slot handles whose lifetimes enforce it.

use std::io;
use std::mem;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};

use super::align_up;
use super::mmap::{page_size, Mapping};
use super::packet::{set_packet_option, setsockopt};

/// The TPACKET version whose ring layout this module implements.
const TPACKET_V2: libc::c_int = libc::tpacket_versions::TPACKET_V2 as libc::c_int;

/// Offset at which the kernel writes an Ethernet frame in an RX ring slot:
/// `TPACKET_ALIGN(TPACKET2_HDRLEN + 16) - 14` (see `tpacket_rcv`, with
/// `tp_reserve` 0 and no virtio-net header).
pub(crate) const RX_MAC_OFFSET: usize =
    align_up(libc::TPACKET2_HDRLEN + 16, libc::TPACKET_ALIGNMENT) - ETH_HLEN;

/// Ethernet header length as the kernel's `maclen` for an Ethernet device.
const ETH_HLEN: usize = 14;

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
        // The whole ring, exactly: the kernel maps no less.
        let map = Mapping::shared(fd, geometry.ring_bytes(), 0)?;
        Ok(RxRing {
            map,
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
