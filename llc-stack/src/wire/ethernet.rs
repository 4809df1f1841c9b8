//! Ethernet framing: the 802.3 length form and the jumbo form.
//!
//! A frame whose LLC payload fits in 1500 bytes uses the IEEE 802.3 length form:
//! the length/type field holds the number of bytes after the Ethernet header, so
//! a receiver can strip the padding a NIC adds to short frames. Larger payloads
//! (jumbo MTUs) cannot be expressed as an 802.3 length, so they use EtherType
//! [`ETHERTYPE_JUMBO_LLC`] (0x8870, the EtherType used for LLC over jumbo
//! frames) followed directly by the same LLC header.

use std::fmt;
use std::str::FromStr;

use zerocopy::network_endian::U16;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Length of the Ethernet header (destination, source, length/type).
pub const HEADER_LEN: usize = 14;
/// EtherType of the jumbo form: LLC frames whose payload exceeds 1500 bytes.
pub const ETHERTYPE_JUMBO_LLC: u16 = 0x8870;
/// Largest value of the length/type field that is a length (IEEE 802.3).
pub const MAX_LENGTH_FIELD: u16 = 1500;
/// Smallest Ethernet frame without FCS; shorter frames are padded on the wire.
pub const MIN_FRAME_LEN: usize = 60;

/// A 48-bit MAC address.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);

    /// True for group (multicast and broadcast) addresses.
    pub fn is_group(&self) -> bool {
        self.0[0] & 1 == 1
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a MAC address did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid MAC address {0:?}: expected six hex bytes like 02:00:00:00:00:01")]
pub struct ParseMacError(pub String);

impl FromStr for MacAddr {
    type Err = ParseMacError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseMacError(s.to_string());
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in out.iter_mut() {
            let p = parts.next().ok_or_else(err)?;
            if p.is_empty() || p.len() > 2 {
                return Err(err());
            }
            *byte = u8::from_str_radix(p, 16).map_err(|_| err())?;
        }
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(MacAddr(out))
    }
}

/// The Ethernet header as it lies on the wire.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct EthernetHeader {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// 802.3 length (<= 1500) or EtherType.
    pub len_or_type: U16,
}

const _: () = assert!(std::mem::size_of::<EthernetHeader>() == HEADER_LEN);

/// How the length/type field reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EtherKind {
    /// 802.3 length form: this many bytes follow the header.
    Length(u16),
    /// Jumbo LLC form (EtherType 0x8870): the LLC header follows, no length.
    JumboLlc,
    /// Any other EtherType (not ours), or a reserved value 1501..1535.
    Other(u16),
}

impl EthernetHeader {
    /// Classify the length/type field.
    pub fn kind(&self) -> EtherKind {
        match self.len_or_type.get() {
            n if n <= MAX_LENGTH_FIELD => EtherKind::Length(n),
            ETHERTYPE_JUMBO_LLC => EtherKind::JumboLlc,
            n => EtherKind::Other(n),
        }
    }
}

/// The length/type field for an LLC payload of `payload_len` bytes: the
/// length form when it fits, the jumbo form otherwise.
#[inline]
pub fn len_or_type(payload_len: usize) -> U16 {
    U16::new(if payload_len <= MAX_LENGTH_FIELD as usize {
        payload_len as u16
    } else {
        ETHERTYPE_JUMBO_LLC
    })
}

/// Write an Ethernet header for an LLC payload of `payload_len` bytes, choosing
/// the length form when it fits and the jumbo form otherwise. Returns
/// [`HEADER_LEN`]. `buf` must hold at least [`HEADER_LEN`] bytes.
pub fn emit_header(buf: &mut [u8], dst: MacAddr, src: MacAddr, payload_len: usize) -> usize {
    let hdr = EthernetHeader {
        dst: dst.0,
        src: src.0,
        len_or_type: len_or_type(payload_len),
    };
    buf[..HEADER_LEN].copy_from_slice(hdr.as_bytes());
    HEADER_LEN
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_round_trip_and_errors() {
        let m: MacAddr = "02:00:0a:ff:00:01".parse().unwrap();
        assert_eq!(m.0, [2, 0, 0x0a, 0xff, 0, 1]);
        assert_eq!(m.to_string(), "02:00:0a:ff:00:01");
        assert!(!m.is_group());
        assert!(MacAddr::BROADCAST.is_group());
        for bad in [
            "",
            "02:00:00:00:00",
            "02:00:00:00:00:01:02",
            "0g:00:00:00:00:01",
            "002:0:0:0:0:1",
        ] {
            assert!(bad.parse::<MacAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn header_forms() {
        let mut buf = [0u8; 14];
        emit_header(&mut buf, MacAddr([1; 6]), MacAddr([2; 6]), 100);
        assert_eq!(buf, [1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 0, 100]);
        let h = EthernetHeader::read_from_bytes(&buf[..]).unwrap();
        assert_eq!(h.kind(), EtherKind::Length(100));
        emit_header(&mut buf, MacAddr([1; 6]), MacAddr([2; 6]), 1501);
        assert_eq!(&buf[12..], &[0x88, 0x70]);
        let h = EthernetHeader::read_from_bytes(&buf[..]).unwrap();
        assert_eq!(h.kind(), EtherKind::JumboLlc);
        buf[12..].copy_from_slice(&[0x08, 0x00]);
        let h = EthernetHeader::read_from_bytes(&buf[..]).unwrap();
        assert_eq!(h.kind(), EtherKind::Other(0x0800));
    }
}
