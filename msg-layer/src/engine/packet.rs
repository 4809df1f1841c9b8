//! A packet on its way to a peer: the queued [`Out`], its head (header and
//! prefix) built on the stack, and whether the queue's first packets may
//! leave together in a `Bundle`. Peers (`peers.rs`) queue and send them.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::wire::{Header, Kind, BUNDLE_ITEM_MAX, BUNDLE_ITEM_PREFIX, HEADER_LEN};

/// A packet in a peer's send queue.
#[derive(Debug)]
pub(super) struct Out {
    pub hdr: Header,
    pub body: Bytes,
    /// Bytes sent between the header and `body` (usually none): a layer
    /// above's own header, so that a body it lends is sent without being
    /// copied behind it first.
    pub prefix: Bytes,
    /// Eager credit this packet uses.
    pub cost: u32,
    /// Request complete once the packet is handed to the transport.
    pub completes: Option<u64>,
    /// The caller waits for the transport to release `body` (lent): the
    /// transport asks the peer for a prompt acknowledgement.
    pub awaited: bool,
}

impl Out {
    /// Bytes of the whole packet: header, prefix, body.
    pub(super) fn packet_len(&self) -> usize {
        HEADER_LEN + self.prefix.len() + self.body.len()
    }

    /// May travel in a `Bundle`: a small message (tagged or active) whose
    /// sender does not wait for the transport to let go of its body.
    pub(super) fn bundles(&self) -> bool {
        matches!(self.hdr.kind, Kind::Eager | Kind::Am)
            && !self.awaited
            && self.packet_len() <= BUNDLE_ITEM_MAX
    }

    /// Append this packet to a bundle's body, its credit left to the
    /// bundle's header.
    pub(super) fn append_to(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(&(self.packet_len() as u16).to_le_bytes());
        let mut hdr = self.hdr;
        hdr.credit = 0;
        buf.extend_from_slice(&hdr.encode());
        buf.extend_from_slice(&self.prefix);
        buf.extend_from_slice(&self.body);
    }

    /// A control packet: no body, no credit, no request.
    pub fn control(hdr: Header) -> Out {
        Out::with_body(hdr, Bytes::new())
    }

    /// A packet carrying `body`, using no credit and completing nothing.
    pub fn with_body(hdr: Header, body: Bytes) -> Out {
        Out {
            hdr,
            body,
            prefix: Bytes::new(),
            cost: 0,
            completes: None,
            awaited: false,
        }
    }
}

/// Prefixes up to this long go into a packet's head on the stack (the
/// transport copies the head into its own message anyway, inline up to
/// this much behind the header).
pub(crate) const SHORT_PREFIX: usize = 64;

/// `dst.copy_from_slice(src)` for a prefix of at most 64 bytes, as two
/// overlapping fixed-size copies: no libc `memcpy` call (which cost more
/// than such a copy), and the head it copies into is cleared whole in a few
/// stores rather than by a `memset` call for the part past the prefix.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    match n {
        33..=64 => {
            dst[..32].copy_from_slice(&src[..32]);
            dst[n - 32..n].copy_from_slice(&src[n - 32..]);
        }
        16..=32 => {
            dst[..16].copy_from_slice(&src[..16]);
            dst[n - 16..n].copy_from_slice(&src[n - 16..]);
        }
        8..=15 => {
            dst[..8].copy_from_slice(&src[..8]);
            dst[n - 8..n].copy_from_slice(&src[n - 8..]);
        }
        4..=7 => {
            dst[..4].copy_from_slice(&src[..4]);
            dst[n - 4..n].copy_from_slice(&src[n - 4..]);
        }
        1..=3 => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        0 => {}
        _ => dst.copy_from_slice(src),
    }
    debug_assert_eq!(dst.len(), n);
}

/// A packet's head: its header encoded, then its prefix. On the stack
/// unless the prefix is long, so that the common message costs no
/// allocation.
pub(super) enum PacketHead {
    Short {
        len: usize,
        bytes: [u8; HEADER_LEN + SHORT_PREFIX],
    },
    Long(Vec<u8>),
}

impl PacketHead {
    #[inline(always)]
    pub fn new(hdr: &Header, prefix: &[u8]) -> Self {
        let len = HEADER_LEN + prefix.len();
        if prefix.len() <= SHORT_PREFIX {
            let mut bytes = [0u8; HEADER_LEN + SHORT_PREFIX];
            bytes[..HEADER_LEN].copy_from_slice(&hdr.encode());
            copy_short(&mut bytes[HEADER_LEN..len], prefix);
            PacketHead::Short { len, bytes }
        } else {
            let mut head = Vec::with_capacity(len);
            head.extend_from_slice(&hdr.encode());
            head.extend_from_slice(prefix);
            PacketHead::Long(head)
        }
    }

    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            PacketHead::Short { len, bytes } => &bytes[..*len],
            PacketHead::Long(v) => v,
        }
    }
}

/// The two packets at the head of `queue` may leave in one bundle of at
/// most `max` bytes of body.
pub(super) fn starts_bundle(queue: &VecDeque<Out>, max: usize) -> bool {
    match (queue.front(), queue.get(1)) {
        (Some(a), Some(b)) => {
            a.bundles()
                && b.bundles()
                && a.packet_len() + b.packet_len() + 2 * BUNDLE_ITEM_PREFIX <= max
        }
        _ => false,
    }
}

#[cfg(test)]
mod copy_tests {
    #[test]
    fn copy_short_copies_every_length() {
        for n in 0..=80usize {
            let src: Vec<u8> = (0..n).map(|i| (i as u8).wrapping_mul(37) ^ 0x5a).collect();
            let mut dst = vec![0u8; n];
            super::copy_short(&mut dst, &src);
            assert_eq!(dst, src, "length {n}");
        }
    }
}
