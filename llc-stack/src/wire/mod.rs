//! Wire formats: Ethernet, IEEE 802.2 LLC and the transport header.
//!
//! Views are zerocopy structs read in place from the received bytes; they are
//! unaligned and big-endian. [`parse`] is the one entry point for untrusted
//! input: it checks every length before it reads, verifies the CRC of
//! transport frames, and never panics on any input (property-tested and
//! fuzzed). The emit functions check the buffer size and return an error rather
//! than panic when it is too small.

pub mod auth;
pub mod ethernet;
pub mod llc;
pub mod transport;

use zerocopy::{FromBytes, IntoBytes};

pub use auth::{AuthKey, Trailer};
pub use ethernet::{EtherKind, EthernetHeader, MacAddr};
pub use llc::{Command, LlcHeader};
pub use transport::{FrameType, SackBlock, TransportHeader};

/// The end of a frame that stays where it lies, sent after the frame's
/// start (scatter-gather: [`emit_transport_head`],
/// [`crate::link::TxToken::consume_gather`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tail {
    /// The payload's end: part of a message, shared, not copied.
    pub body: bytes::Bytes,
    /// Bytes written into the frame's buffer right after its start (`n`
    /// bytes: `buf[n..n + trailer]`) that go after `body`: an
    /// authenticated frame's tag. 0 or [`auth::TAG_LEN`].
    pub trailer: usize,
}

impl Tail {
    /// Put the frame together in `buf`, whose first `n` bytes are its start
    /// and the next `trailer` bytes its trailer: the body goes after the
    /// start, the trailer after the body. Returns the frame's length, or
    /// `None` when it does not fit.
    pub fn join(&self, buf: &mut [u8], n: usize) -> Option<usize> {
        let t = self.trailer;
        let end = n + self.body.len() + t;
        if t > auth::TAG_LEN || end > buf.len() {
            return None;
        }
        let mut trailer = [0u8; auth::TAG_LEN];
        trailer[..t].copy_from_slice(&buf[n..n + t]);
        buf[n..n + self.body.len()].copy_from_slice(&self.body);
        buf[end - t..end].copy_from_slice(&trailer[..t]);
        Some(end)
    }
}

/// Why a frame was not accepted. Every variant is a drop reason the endpoint counts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than the headers it claims to have.
    #[error("frame truncated")]
    Truncated,
    /// The 802.3 length field disagrees with the frame.
    #[error("802.3 length field larger than the frame")]
    BadLength,
    /// An EtherType that is not ours.
    #[error("not an LLC frame")]
    NotLlc,
    /// LLC frame for another SAP.
    #[error("frame for another SAP")]
    OtherSap,
    /// An LLC control field we do not handle.
    #[error("unsupported LLC control field")]
    UnsupportedControl,
    /// Transport version we do not speak.
    #[error("unknown transport version")]
    BadVersion,
    /// More SACK blocks than allowed.
    #[error("too many SACK blocks")]
    BadSackCount,
    /// CRC32C mismatch: corrupted in transit or forged.
    #[error("checksum mismatch")]
    BadChecksum,
    /// The output buffer cannot hold the frame.
    #[error("buffer too small for the frame")]
    BufferTooSmall,
}

/// Addresses common to every frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Addresses {
    /// Destination MAC.
    pub dst: MacAddr,
    /// Source MAC.
    pub src: MacAddr,
    /// Destination SAP.
    pub dsap: u8,
    /// Source SAP, C/R bit removed.
    pub ssap: u8,
}

/// A parsed frame.
#[derive(Debug)]
pub struct Frame<'a> {
    /// MAC and SAP addresses.
    pub addr: Addresses,
    /// What the frame carries.
    pub body: Body<'a>,
}

/// The part after the LLC header.
#[derive(Debug)]
pub enum Body<'a> {
    /// A UI frame carrying a transport header, verified by its CRC.
    Transport(TransportFrame<'a>),
    /// An LLC TEST command or response with its information field.
    Test {
        /// Response (SSAP C/R bit set) rather than command.
        response: bool,
        /// Poll/final bit.
        pf: bool,
        /// Information field, echoed in responses.
        info: &'a [u8],
    },
    /// An LLC XID command or response with its information field.
    Xid {
        /// Response rather than command.
        response: bool,
        /// Poll/final bit.
        pf: bool,
        /// Information field.
        info: &'a [u8],
    },
}

/// A transport frame, borrowed from the received bytes.
#[derive(Debug)]
pub struct TransportFrame<'a> {
    /// The fixed header.
    pub header: &'a TransportHeader,
    /// SACK blocks (at most [`transport::MAX_SACK_BLOCKS`]).
    pub sacks: &'a [SackBlock],
    /// Payload.
    pub payload: &'a [u8],
    /// The authentication tag after the payload, when the AUTH flag is set.
    /// The parser checks its presence, not its value: see [`AuthKey::verify`].
    pub auth_tag: Option<&'a [u8; auth::TAG_LEN]>,
}

impl TransportFrame<'_> {
    /// Length of the LLC header, transport header, SACK blocks and payload:
    /// the span an authentication tag covers (with the Ethernet addresses).
    pub fn signed_len(&self) -> usize {
        llc::HEADER_LEN + self.header.total_len()
    }
}

/// Parse a received Ethernet frame (no FCS). With `sap` set, LLC frames for
/// other DSAPs are rejected with [`WireError::OtherSap`] before anything else
/// is read. Never panics.
pub fn parse(frame: &[u8], sap: Option<u8>) -> Result<Frame<'_>, WireError> {
    let (eth, rest) = EthernetHeader::ref_from_prefix(frame).map_err(|_| WireError::Truncated)?;
    let rest = match eth.kind() {
        EtherKind::Length(n) => rest.get(..n as usize).ok_or(WireError::BadLength)?,
        EtherKind::JumboLlc => rest,
        EtherKind::Other(_) => return Err(WireError::NotLlc),
    };
    let llc_span = rest;
    let (llc, rest) = LlcHeader::ref_from_prefix(rest).map_err(|_| WireError::Truncated)?;
    if let Some(sap) = sap {
        if llc.dsap != sap {
            return Err(WireError::OtherSap);
        }
    }
    let addr = Addresses {
        dst: MacAddr(eth.dst),
        src: MacAddr(eth.src),
        dsap: llc.dsap,
        ssap: llc.source_sap(),
    };
    let response = llc.is_response();
    let body = match llc.command() {
        Command::Ui if !response => Body::Transport(parse_transport(llc_span)?),
        Command::Test { pf } => Body::Test {
            response,
            pf,
            info: rest,
        },
        Command::Xid { pf } => Body::Xid {
            response,
            pf,
            info: rest,
        },
        Command::Ui | Command::Unknown(_) => return Err(WireError::UnsupportedControl),
    };
    Ok(Frame { addr, body })
}

/// The LLC span of a frame in the 802.3 length form, as [`parse`] cuts
/// it; `None` for any other frame, and for one shorter than its length
/// field (which [`parse`] refuses).
#[inline(always)]
pub(crate) fn length_form_llc_span(frame: &[u8]) -> Option<&[u8]> {
    let n = u16::from_be_bytes([*frame.get(12)?, *frame.get(13)?]);
    if n > ethernet::MAX_LENGTH_FIELD {
        return None;
    }
    frame.get(ethernet::HEADER_LEN..ethernet::HEADER_LEN + n as usize)
}

/// `llc_span` runs from the LLC header to the end of the LLC payload.
pub(crate) fn parse_transport(llc_span: &[u8]) -> Result<TransportFrame<'_>, WireError> {
    let rest = llc_span
        .get(llc::HEADER_LEN..)
        .ok_or(WireError::Truncated)?;
    let (header, after) =
        TransportHeader::ref_from_prefix(rest).map_err(|_| WireError::Truncated)?;
    if header.version != transport::VERSION {
        return Err(WireError::BadVersion);
    }
    let sack_count = header.sack_count as usize;
    if sack_count > transport::MAX_SACK_BLOCKS {
        return Err(WireError::BadSackCount);
    }
    // Most frames carry no SACK block: skip the slice-layout computation then.
    let (sacks, after): (&[SackBlock], &[u8]) = if sack_count == 0 {
        (&[], after)
    } else {
        <[SackBlock]>::ref_from_prefix_with_elems(after, sack_count)
            .map_err(|_| WireError::Truncated)?
    };
    let payload = after
        .get(..header.payload_len.get() as usize)
        .ok_or(WireError::Truncated)?;
    let signed_len = llc::HEADER_LEN + header.total_len();
    let span = llc_span
        .get(..signed_len + header.trailer_len())
        .ok_or(WireError::Truncated)?;
    // An authenticated frame's integrity is its tag's to check (by the
    // receiver, which has the key): its CRC field must be zero, and is not
    // computed.
    let auth_tag = if header.has(transport::flags::AUTH) {
        if header.crc.get() != 0 {
            return Err(WireError::BadChecksum);
        }
        span[signed_len..].try_into().ok()
    } else {
        if checksum(span) != header.crc.get() {
            return Err(WireError::BadChecksum);
        }
        None
    };
    Ok(TransportFrame {
        header,
        sacks,
        payload,
        auth_tag,
    })
}

/// CRC32C of an LLC+transport span, with the CRC field taken as zero.
///
/// The headers (the first 64 bytes, which hold the field at 55..59) are
/// read as whole words with the field masked out, so the CRC runs over
/// whole words in one piece instead of three that end mid-word (a short
/// frame's CRC is a visible part of its cost).
fn checksum(span: &[u8]) -> u32 {
    use crate::sys::crc;
    const CRC_AT: usize = llc::HEADER_LEN + transport::CRC_OFFSET;
    const HEAD: usize = 64;
    const _: () = assert!(CRC_AT + 4 <= HEAD);
    /// The masks of the header's words that clear the CRC field.
    const MASKS: [u64; HEAD / 8] = {
        let mut m = [u64::MAX; HEAD / 8];
        let mut i = CRC_AT;
        while i < CRC_AT + 4 {
            m[i / 8] &= !(0xff << (8 * (i % 8)));
            i += 1;
        }
        m
    };
    if let Some((head, rest)) = span.split_first_chunk::<HEAD>() {
        return crc::finish(crc::update_masked(crc::INIT, head, rest, &MASKS));
    }
    // Under 64 bytes from the LLC header on: under 5 bytes of payload and no
    // SACK block.
    let state = crc::update(crc::INIT, &span[..CRC_AT]);
    let state = crc::update(state, &[0; 4]);
    crc::finish(crc::update(state, &span[CRC_AT + 4..]))
}

/// [`checksum`] of a span whose CRC field is already zero (one piece).
fn checksum_zeroed(span: &[u8]) -> u32 {
    use crate::sys::crc;
    crc::finish(crc::update(crc::INIT, span))
}

/// Bytes of the transport header that one connection's frames all share:
/// the ports and cookies, after version, type, flags and SACK count.
const SHARED_FIELDS: std::ops::Range<usize> = 4..16;

/// Length of a [`FramePrefix`]: the Ethernet and LLC headers and the
/// transport header up to its shared fields' end.
pub const PREFIX_LEN: usize = ethernet::HEADER_LEN + llc::HEADER_LEN + SHARED_FIELDS.end;

/// The start of every transport frame one connection sends (addresses, SAPs,
/// ports, cookies), encoded once: a frame copies it and writes only what
/// changes (the length field, the transport header's first four bytes and
/// the fields from `seq` on). In it the Ethernet length field and those four
/// bytes are zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FramePrefix([u8; PREFIX_LEN]);

impl FramePrefix {
    /// The prefix of frames between `addr` with `header`'s ports and
    /// cookies (its other fields are not read).
    pub fn new(addr: &Addresses, header: &TransportHeader) -> Self {
        let mut b = [0u8; PREFIX_LEN];
        ethernet::emit_header(&mut b, addr.dst, addr.src, 0);
        let llc_hdr = LlcHeader::new(addr.dsap, addr.ssap, false, Command::Ui);
        let at = ethernet::HEADER_LEN;
        b[at..at + llc::HEADER_LEN].copy_from_slice(llc_hdr.as_bytes());
        let at = at + llc::HEADER_LEN;
        b[at + SHARED_FIELDS.start..].copy_from_slice(&header.as_bytes()[SHARED_FIELDS]);
        FramePrefix(b)
    }
}

/// How a frame's first bytes are written.
#[derive(Clone, Copy)]
enum Start<'a> {
    /// From the addresses and the whole header.
    Addresses(&'a Addresses),
    /// Copied from a connection's prefix (the header's ports and cookies
    /// are not read).
    Prefix(&'a FramePrefix),
}

/// Write a whole transport frame: Ethernet (length or jumbo form), LLC UI
/// header, `header` (its `sack_count`, `payload_len`, `version` and `crc`
/// fields are filled in here, and its AUTH flag cleared), `sacks` and
/// `payload`. Returns the frame length.
pub fn emit_transport(
    buf: &mut [u8],
    addr: &Addresses,
    header: &TransportHeader,
    sacks: &[SackBlock],
    payload: &[u8],
) -> Result<usize, WireError> {
    emit_transport_gather(buf, addr, header, sacks, [payload, &[]], Trailer::None)
}

/// [`emit_transport`] with an authentication trailer: with anything but
/// [`Trailer::None`] the AUTH flag is set and the tag follows the payload.
pub fn emit_transport_with(
    buf: &mut [u8],
    addr: &Addresses,
    header: &TransportHeader,
    sacks: &[SackBlock],
    payload: &[u8],
    trailer: Trailer<'_>,
) -> Result<usize, WireError> {
    emit_transport_gather(buf, addr, header, sacks, [payload, &[]], trailer)
}

/// [`emit_transport_with`] with the payload in two pieces, written one after
/// the other (a message's header and body meet inside some fragment).
#[inline]
pub fn emit_transport_gather(
    buf: &mut [u8],
    addr: &Addresses,
    header: &TransportHeader,
    sacks: &[SackBlock],
    payload: [&[u8]; 2],
    trailer: Trailer<'_>,
) -> Result<usize, WireError> {
    emit(
        buf,
        Start::Addresses(addr),
        header,
        sacks,
        payload,
        trailer,
        false,
    )
}

/// [`emit_transport_gather`] of a frame that starts with `prefix`; the
/// header's ports and cookies are the prefix's (`header`'s are not read).
#[inline]
pub fn emit_transport_prefixed(
    buf: &mut [u8],
    prefix: &FramePrefix,
    header: &TransportHeader,
    sacks: &[SackBlock],
    payload: [&[u8]; 2],
    trailer: Trailer<'_>,
) -> Result<usize, WireError> {
    emit(
        buf,
        Start::Prefix(prefix),
        header,
        sacks,
        payload,
        trailer,
        false,
    )
}

/// [`emit_transport_gather`] that leaves `payload[1]` out of `buf`: returns
/// the length `n` of what was written, and the frame is `buf[..n]` followed
/// by `payload[1]`, which a device sends from where it lies (scatter-gather)
/// instead of copying it in. The CRC covers it as usual.
#[inline]
pub fn emit_transport_head(
    buf: &mut [u8],
    addr: &Addresses,
    header: &TransportHeader,
    sacks: &[SackBlock],
    payload: [&[u8]; 2],
) -> Result<usize, WireError> {
    emit(
        buf,
        Start::Addresses(addr),
        header,
        sacks,
        payload,
        Trailer::None,
        true,
    )
}

/// [`emit_transport_head`] of a frame that starts with `prefix` (see
/// [`emit_transport_prefixed`]), with a trailer: when there is one, it is
/// written at `buf[n..n + trailer.len()]` and goes after `payload[1]` (a
/// tag is computed over `payload[1]` where it lies), so the frame is
/// `buf[..n]`, `payload[1]`, then those bytes ([`Tail`]).
#[inline]
pub fn emit_transport_head_prefixed(
    buf: &mut [u8],
    prefix: &FramePrefix,
    header: &TransportHeader,
    sacks: &[SackBlock],
    payload: [&[u8]; 2],
    trailer: Trailer<'_>,
) -> Result<usize, WireError> {
    emit(
        buf,
        Start::Prefix(prefix),
        header,
        sacks,
        payload,
        trailer,
        true,
    )
}

/// Inlined into each frame builder, so that the header it was handed is
/// written to the frame as built, not copied and patched first.
#[inline(always)]
fn emit(
    buf: &mut [u8],
    start: Start<'_>,
    header: &TransportHeader,
    sacks: &[SackBlock],
    payload: [&[u8]; 2],
    trailer: Trailer<'_>,
    tail_out_of_line: bool,
) -> Result<usize, WireError> {
    let payload_len = payload[0].len() + payload[1].len();
    if sacks.len() > transport::MAX_SACK_BLOCKS || payload_len > u16::MAX as usize {
        return Err(WireError::BufferTooSmall);
    }
    let signed_len = llc::HEADER_LEN
        + transport::HEADER_LEN
        + sacks.len() * transport::SACK_BLOCK_LEN
        + payload_len;
    let llc_len = signed_len + trailer.len();
    let total = ethernet::HEADER_LEN + llc_len;
    // The whole frame must fit the buffer either way: the device sends at
    // most a buffer's worth.
    if buf.len() < total {
        return Err(WireError::BufferTooSmall);
    }
    let written = if tail_out_of_line {
        total - payload[1].len()
    } else {
        total
    };
    let buf = &mut buf[..written];
    let mut at = ethernet::HEADER_LEN + llc::HEADER_LEN;
    match start {
        Start::Addresses(addr) => {
            ethernet::emit_header(buf, addr.dst, addr.src, llc_len);
            let llc_hdr = LlcHeader::new(addr.dsap, addr.ssap, false, Command::Ui);
            buf[ethernet::HEADER_LEN..at].copy_from_slice(llc_hdr.as_bytes());
        }
        Start::Prefix(p) => {
            buf[..PREFIX_LEN].copy_from_slice(&p.0);
            buf[ethernet::HEADER_LEN - 2..ethernet::HEADER_LEN]
                .copy_from_slice(ethernet::len_or_type(llc_len).as_bytes());
        }
    }
    let mut h = *header;
    h.version = transport::VERSION;
    h.flags = if trailer.is_empty() {
        h.flags & !transport::flags::AUTH
    } else {
        h.flags | transport::flags::AUTH
    };
    h.sack_count = sacks.len() as u8;
    h.payload_len = (payload_len as u16).into();
    h.crc = 0.into();
    let hb = h.as_bytes();
    match start {
        Start::Addresses(_) => buf[at..at + transport::HEADER_LEN].copy_from_slice(hb),
        Start::Prefix(_) => {
            buf[at..at + SHARED_FIELDS.start].copy_from_slice(&hb[..SHARED_FIELDS.start]);
            buf[at + SHARED_FIELDS.end..at + transport::HEADER_LEN]
                .copy_from_slice(&hb[SHARED_FIELDS.end..]);
        }
    }
    at += transport::HEADER_LEN;
    // Empty pieces (no SACK block, a payload in one part) are common: each
    // skipped copy is a library call saved.
    let sack_bytes = sacks.as_bytes();
    if !sack_bytes.is_empty() {
        buf[at..at + sack_bytes.len()].copy_from_slice(sack_bytes);
        at += sack_bytes.len();
    }
    let (first, rest) = buf[at..].split_at_mut(payload[0].len());
    copy_short(first, payload[0]);
    // `h.crc` was written as zero above. An authenticated frame keeps it
    // zero: the tag, computed over it, is its integrity check.
    let crc = if tail_out_of_line {
        // The trailer, if any, is written after the start (`head` bytes),
        // and sent after `payload[1]`.
        let head = written - trailer.len();
        match trailer {
            Trailer::None => {
                use crate::sys::crc;
                let state = crc::update(crc::INIT, &buf[ethernet::HEADER_LEN..]);
                crc::finish(crc::update(state, payload[1]))
            }
            Trailer::Key(key) => {
                let tag = key.tag_gathered(&buf[..head], payload[1]);
                buf[head..].copy_from_slice(&tag);
                return Ok(head);
            }
            Trailer::Raw(tag) => {
                buf[head..].copy_from_slice(tag);
                return Ok(head);
            }
        }
    } else {
        if !payload[1].is_empty() {
            rest[..payload[1].len()].copy_from_slice(payload[1]);
        }
        match trailer {
            Trailer::None => checksum_zeroed(&buf[ethernet::HEADER_LEN..]),
            Trailer::Key(key) => {
                key.sign(buf, signed_len);
                return Ok(written);
            }
            Trailer::Raw(tag) => {
                buf[at + payload_len..].copy_from_slice(tag);
                return Ok(written);
            }
        }
    };
    let crc_at = ethernet::HEADER_LEN + llc::HEADER_LEN + transport::CRC_OFFSET;
    buf[crc_at..crc_at + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(written)
}

/// `dst.copy_from_slice(src)` (equal lengths), without a library call for
/// 16 to 64 bytes (a short message's payload): two fixed-size copies,
/// overlapping in the middle, cover any length in that range.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if !(16..=64).contains(&n) || dst.len() != n {
        if n > 0 {
            dst.copy_from_slice(src);
        }
    } else if n >= 32 {
        dst[..32].copy_from_slice(&src[..32]);
        dst[n - 32..].copy_from_slice(&src[n - 32..]);
    } else {
        dst[..16].copy_from_slice(&src[..16]);
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    }
}

/// Write an LLC TEST or XID frame (`command` must be `Test` or `Xid`) with
/// information field `info`. Frames shorter than the Ethernet minimum are
/// padded with zeros; the 802.3 length field tells the receiver where the
/// information field ends. Returns the frame length.
pub fn emit_llc_control(
    buf: &mut [u8],
    addr: &Addresses,
    response: bool,
    command: Command,
    info: &[u8],
) -> Result<usize, WireError> {
    let llc_len = llc::HEADER_LEN + info.len();
    let len = ethernet::HEADER_LEN + llc_len;
    let total = len.max(ethernet::MIN_FRAME_LEN);
    if buf.len() < total {
        return Err(WireError::BufferTooSmall);
    }
    ethernet::emit_header(buf, addr.dst, addr.src, llc_len);
    let llc_hdr = LlcHeader::new(addr.dsap, addr.ssap, response, command);
    buf[ethernet::HEADER_LEN..ethernet::HEADER_LEN + llc::HEADER_LEN]
        .copy_from_slice(llc_hdr.as_bytes());
    buf[ethernet::HEADER_LEN + llc::HEADER_LEN..len].copy_from_slice(info);
    buf[len..total].fill(0);
    Ok(total)
}

/// The XID information field we answer with: basic format, type 1 LLC only,
/// receive window 0 (meaningless for type 1), as 802.2 §5.4.1.1.2 lays out.
pub const XID_INFO: [u8; 3] = [llc::XID_FORMAT_BASIC, llc::XID_CLASS_1, 0];

/// Read a header-only view without checks beyond length; for tools that
/// inspect frames they built themselves.
pub fn transport_header(frame: &[u8]) -> Option<TransportHeader> {
    let at = ethernet::HEADER_LEN + llc::HEADER_LEN;
    TransportHeader::read_from_prefix(frame.get(at..)?)
        .ok()
        .map(|(h, _)| h)
}

#[cfg(test)]
mod tests;
