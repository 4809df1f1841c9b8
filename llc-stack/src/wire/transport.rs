//! The transport header that follows the LLC header in UI frames.
//!
//! Fixed 56 bytes, big-endian, no alignment assumed (it starts at frame offset
//! 17), then `sack_count` SACK blocks of 8 bytes, then `payload_len` bytes of
//! payload. The normative description of every field is `docs/PROTOCOL.md`.

use zerocopy::network_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Length of the fixed transport header.
pub const HEADER_LEN: usize = 56;
/// Protocol version carried in every frame. Version 4 (issue 43): the
/// authentication tag hashes a long frame's headers with POLYVAL and its
/// body, whole chunks and the last short one, with one NH pass, then AES-128
/// (docs/PROTOCOL.md 3.12); version 3 took two NH passes over whole chunks
/// only, from the first block on; version 2's tag was POLYVAL then AES-128;
/// all three replace the CRC on authenticated frames (3.3); version 1
/// tagged frames with BLAKE3 and checked the CRC on all.
pub const VERSION: u8 = 4;
/// Most SACK blocks a frame may carry. Four ranges describe the holes of any
/// loss pattern a window of frames is likely to see between two ACKs.
pub const MAX_SACK_BLOCKS: usize = 4;
/// Length of one SACK block.
pub const SACK_BLOCK_LEN: usize = 8;
/// Byte offset of the CRC field inside the header.
pub const CRC_OFFSET: usize = 52;
/// Length of the authentication trailer that follows the payload when the
/// [`flags::AUTH`] flag is set (its contents: [`super::auth`]).
pub const TAG_LEN: usize = 16;

/// The fixed transport header as it lies on the wire.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct TransportHeader {
    /// Protocol version, [`VERSION`].
    pub version: u8,
    /// Frame type, see [`FrameType`].
    pub kind: u8,
    /// Flag bits, see [`flags`].
    pub flags: u8,
    /// Number of SACK blocks after the header (0..=4).
    pub sack_count: u8,
    /// Sender's port.
    pub src_port: U16,
    /// Receiver's port.
    pub dst_port: U16,
    /// Sender's connection cookie (random per connection incarnation).
    pub src_cookie: U32,
    /// Receiver's connection cookie as the sender knows it (0 in SYN).
    pub dst_cookie: U32,
    /// Sequence number of this frame (sequenced types only).
    pub seq: U32,
    /// Cumulative acknowledgement: the next sequence number expected.
    pub ack: U32,
    /// Credit: the sender of this frame accepts sequence numbers below this.
    pub window_end: U32,
    /// Message this fragment belongs to (DATA).
    pub msg_id: U32,
    /// Total length of that message in bytes (DATA).
    pub msg_len: U32,
    /// Offset of this fragment's payload inside the message (DATA).
    pub frag_off: U32,
    /// Payload bytes after the SACK blocks.
    pub payload_len: U16,
    /// Microseconds the sender held the acknowledgement this frame carries:
    /// from the arrival of the frame whose timestamp `ts_ecr` echoes until
    /// this frame left (saturating; 0: not stated). The peer takes it out
    /// of its RTT sample, as QUIC's ACK delay.
    pub ack_delay: U16,
    /// Sender's timestamp in microseconds (for RTT measurement).
    pub ts_val: U32,
    /// Echo of the latest `ts_val` received from the peer.
    pub ts_ecr: U32,
    /// CRC32C (Castagnoli) over LLC header, transport header with this field
    /// zero, SACK blocks and payload; zero on an authenticated frame, whose
    /// tag checks all that instead.
    pub crc: U32,
}

const _: () = assert!(std::mem::size_of::<TransportHeader>() == HEADER_LEN);
const _: () = assert!(std::mem::offset_of!(TransportHeader, crc) == CRC_OFFSET);

/// A selectively acknowledged range of sequence numbers, `start..end`.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
)]
#[repr(C)]
pub struct SackBlock {
    /// First sequence number received.
    pub start: U32,
    /// One past the last sequence number received.
    pub end: U32,
}

const _: () = assert!(std::mem::size_of::<SackBlock>() == SACK_BLOCK_LEN);

impl SackBlock {
    /// The block `start..end`.
    pub fn new(start: u32, end: u32) -> Self {
        SackBlock {
            start: U32::new(start),
            end: U32::new(end),
        }
    }
}

/// Frame types. Unknown values parse as [`FrameType::Unknown`] so that a newer
/// peer's frames are counted and dropped rather than misread.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FrameType {
    /// Opens a connection; carries the initiator's cookie and first sequence number.
    Syn,
    /// Accepts a SYN; carries the acceptor's cookie and first sequence number.
    SynAck,
    /// A message fragment; sequenced.
    Data,
    /// Acknowledgement and credit only.
    Ack,
    /// The connection named by the cookies does not exist (any more).
    Reset,
    /// Keepalive probe: the receiver answers with an ACK at once.
    Ping,
    /// Orderly close after all data; sequenced.
    Close,
    /// A type this version does not know.
    Unknown(u8),
}

impl From<u8> for FrameType {
    fn from(v: u8) -> Self {
        match v {
            1 => FrameType::Syn,
            2 => FrameType::SynAck,
            3 => FrameType::Data,
            4 => FrameType::Ack,
            5 => FrameType::Reset,
            6 => FrameType::Ping,
            7 => FrameType::Close,
            other => FrameType::Unknown(other),
        }
    }
}

impl From<FrameType> for u8 {
    fn from(t: FrameType) -> u8 {
        match t {
            FrameType::Syn => 1,
            FrameType::SynAck => 2,
            FrameType::Data => 3,
            FrameType::Ack => 4,
            FrameType::Reset => 5,
            FrameType::Ping => 6,
            FrameType::Close => 7,
            FrameType::Unknown(v) => v,
        }
    }
}

impl FrameType {
    /// Sequenced frames occupy a sequence number and are retransmitted until acknowledged.
    pub fn is_sequenced(self) -> bool {
        matches!(self, FrameType::Data | FrameType::Close)
    }
}

/// Flag bits of [`TransportHeader::flags`]. Unknown bits are ignored.
pub mod flags {
    /// This DATA frame carries the last fragment of its message.
    pub const LAST_FRAGMENT: u8 = 0x01;
    /// The receiver should acknowledge at once instead of delaying (the
    /// sender has more to send but no window or congestion window left).
    pub const ACK_NOW: u8 = 0x02;
    /// An authentication trailer of [`TAG_LEN`](super::TAG_LEN)
    /// bytes follows the payload (docs/PROTOCOL.md, section 3.12).
    pub const AUTH: u8 = 0x04;
    /// The sender has sent everything it has and waits for the
    /// acknowledgement (a send completes on it): the receiver should
    /// acknowledge within a short delay (`ack_soon_delay`), or earlier on a
    /// frame going back anyway, e.g. the reply to a request. Without it the
    /// receiver may hold the acknowledgement up to the `max_ack_delay` it
    /// announced in the handshake.
    pub const ACK_SOON: u8 = 0x08;
}

impl TransportHeader {
    /// The frame type.
    pub fn frame_type(&self) -> FrameType {
        FrameType::from(self.kind)
    }

    /// True when `flag` (from [`flags`]) is set.
    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Length of header, SACK blocks and payload (the part an authentication
    /// tag covers; the trailer, if any, follows).
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.sack_count as usize * SACK_BLOCK_LEN + self.payload_len.get() as usize
    }

    /// Length of the authentication trailer the frame declares (0 or 16).
    #[inline]
    pub fn trailer_len(&self) -> usize {
        if self.has(flags::AUTH) {
            TAG_LEN
        } else {
            0
        }
    }
}

/// Largest payload a frame can carry on a link of `mtu` with `sack_count` SACK blocks.
pub fn max_payload(mtu: usize, sack_count: usize) -> usize {
    mtu.saturating_sub(super::llc::HEADER_LEN + HEADER_LEN + sack_count * SACK_BLOCK_LEN)
        .min(u16::MAX as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_type_round_trip() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(FrameType::from(v)), v);
        }
        assert!(FrameType::Data.is_sequenced());
        assert!(!FrameType::Ack.is_sequenced());
    }

    #[test]
    fn layout_is_big_endian() {
        let h = TransportHeader {
            version: VERSION,
            kind: 3,
            src_port: U16::new(0x0102),
            seq: U32::new(0x0a0b0c0d),
            ..Default::default()
        };
        let b = h.as_bytes();
        assert_eq!(&b[0..2], &[4, 3]);
        assert_eq!(&b[4..6], &[1, 2]);
        assert_eq!(&b[16..20], &[0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(max_payload(1500, 0), 1500 - 59);
        assert_eq!(max_payload(9000, 4), 9000 - 59 - 32);
        assert_eq!(max_payload(65535, 0), 65535 - 59);
        assert_eq!(max_payload(10, 0), 0);
    }
}
