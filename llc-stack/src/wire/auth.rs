//! Optional frame authentication: a keyed MAC in a trailer after the payload.
//!
//! With a per-job key configured, every transport frame carries the
//! [`flags::AUTH`](super::transport::flags::AUTH) flag and a 16-byte tag after
//! its payload: the first 16 bytes of the BLAKE3 keyed hash (BLAKE3's MAC
//! mode) of the Ethernet destination and source addresses, the LLC header,
//! the transport header with the CRC field taken as zero, the SACK blocks and
//! the payload. The CRC32C then covers the trailer too. docs/PROTOCOL.md
//! (section 3.12) is normative; docs/SECURITY.md explains what this protects.
//!
//! Why BLAKE3: one well-kept crate (`blake3`, by the algorithm's authors) with
//! a keyed mode designed as a MAC (no HMAC double hashing), a key-derivation
//! mode for turning a job's passphrase into a key, and SIMD code paths; on
//! frames of 100 to 1500 bytes it costs less than HMAC-SHA-256 without SHA
//! extensions. 128-bit tags: a forger's chance per frame is 2^-128.

use std::fmt;

use super::{ethernet, llc, transport};

/// Length of the authentication trailer (a transport header constant,
/// defined there; this module only imports from `transport`).
pub use super::transport::TAG_LEN;

/// BLAKE3 `derive_key` context that turns key material (a passphrase, the
/// `LLC_AUTH_KEY` variable of the tools) into a frame key. Changing it
/// changes every key: it is part of the protocol.
pub const KEY_CONTEXT: &str = "llc-stack 2026-11 transport frame authentication v1";

/// A 256-bit frame authentication key. Its `Debug` output never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthKey([u8; 32]);

impl AuthKey {
    /// A key from 32 bytes used as they are.
    pub fn from_bytes(key: [u8; 32]) -> Self {
        AuthKey(key)
    }

    /// A key derived from arbitrary key material (a passphrase, or a random
    /// hex string shared by the job's ranks) with BLAKE3 `derive_key` and
    /// [`KEY_CONTEXT`]. Both ends derive the same key from the same bytes.
    pub fn derive(material: &[u8]) -> Self {
        AuthKey(blake3::derive_key(KEY_CONTEXT, material))
    }

    /// A short public fingerprint (first 4 bytes of the hash of the key) for
    /// logs, so that two ranks can compare keys without showing them.
    pub fn fingerprint(&self) -> String {
        let h = blake3::hash(&self.0);
        h.as_bytes()[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The tag of the frame whose Ethernet addresses are `eth_addrs` (12
    /// bytes: destination, source) and whose LLC header, transport header,
    /// SACK blocks and payload are `span` (without the trailer).
    fn tag(&self, eth_addrs: &[u8], span: &[u8]) -> [u8; TAG_LEN] {
        let crc_at = llc::HEADER_LEN + transport::CRC_OFFSET;
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(eth_addrs);
        h.update(&span[..crc_at]);
        h.update(&[0; 4]);
        h.update(&span[crc_at + 4..]);
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(&h.finalize().as_bytes()[..TAG_LEN]);
        out
    }

    /// Write the tag of a frame laid out in `frame` (Ethernet header, then the
    /// LLC span of `span_len` bytes, then room for the trailer).
    pub(crate) fn sign(&self, frame: &mut [u8], span_len: usize) {
        let at = ethernet::HEADER_LEN;
        let tag = self.tag(&frame[..12], &frame[at..at + span_len]);
        frame[at + span_len..at + span_len + TAG_LEN].copy_from_slice(&tag);
    }

    /// Check the trailer of a received frame: `frame` is the whole Ethernet
    /// frame, `span_len` the length of its LLC span without the trailer (as
    /// the parser found it). False on a wrong tag or a frame too short.
    pub fn verify(&self, frame: &[u8], span_len: usize) -> bool {
        let at = ethernet::HEADER_LEN;
        let (Some(addrs), Some(span), Some(tag)) = (
            frame.get(..12),
            frame.get(at..at + span_len),
            frame.get(at + span_len..at + span_len + TAG_LEN),
        ) else {
            return false;
        };
        if span.len() < llc::HEADER_LEN + transport::HEADER_LEN {
            return false;
        }
        constant_time_eq(&self.tag(addrs, span), tag)
    }
}

/// Compare without an early exit, so timing does not tell a forger how many
/// leading bytes of a guessed tag were right.
fn constant_time_eq(a: &[u8; TAG_LEN], b: &[u8]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0 && b.len() == TAG_LEN
}

impl fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuthKey(fingerprint {})", self.fingerprint())
    }
}

/// What follows the payload of an emitted transport frame.
#[derive(Copy, Clone, Debug)]
pub enum Trailer<'a> {
    /// Nothing: the AUTH flag is cleared.
    None,
    /// A tag computed with this key: the AUTH flag is set.
    Key(&'a AuthKey),
    /// These tag bytes as they are (re-emitting a parsed frame, or forging
    /// one in a test): the AUTH flag is set.
    Raw(&'a [u8; TAG_LEN]),
}

impl Trailer<'_> {
    /// Bytes the trailer occupies.
    pub fn len(&self) -> usize {
        match self {
            Trailer::None => 0,
            _ => TAG_LEN,
        }
    }

    /// True for [`Trailer::None`].
    pub fn is_empty(&self) -> bool {
        matches!(self, Trailer::None)
    }
}
