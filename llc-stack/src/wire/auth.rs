//! Optional frame authentication: a keyed MAC in a trailer after the payload.
//!
//! With a per-job key configured, every transport frame carries the
//! [`flags::AUTH`](super::transport::flags::AUTH) flag, a zero CRC field and
//! a 16-byte tag after its payload. The tag is a hash-then-encrypt MAC:
//!
//! ```text
//! A   = dst MAC (6) || src MAC (6) || LLC header (3) || transport header (56,
//!       CRC field zero as sent) || SACK blocks || payload
//! S   = POLYVAL(H, A zero-padded to 16 bytes || le64(8 * |A|) || le64(0))
//! tag = AES-128(K_E, S)
//! ```
//!
//! with `K_E` the first and `H` the last 16 bytes of the 256-bit job key.
//! docs/PROTOCOL.md (section 3.12) is normative; docs/SECURITY.md explains
//! what this protects and why this construction.
//!
//! Why this MAC: it has to be cheap enough to be on by default. POLYVAL (the
//! universal hash of AES-GCM-SIV, RFC 8452) runs on the carry-less multiplier
//! (`sys::polyval`: 32 blocks per reduction with AVX-512 VPCLMULQDQ, the
//! `polyval` crate's PCLMULQDQ code elsewhere) at many times BLAKE3's speed,
//! and a frame then costs one AES block (AES-NI) instead of a hash
//! finalisation; the tag replaces the CRC32C on authenticated frames, which
//! pays for part of it (docs/BENCHMARKS.md, issue 43). It is deterministic:
//! a retransmitted frame needs no fresh nonce, where a nonce-based MAC (GMAC,
//! Poly1305) would give its hash key away to anyone who saw two frames
//! signed under one nonce. Forging a tag succeeds with probability at most
//! `(q + 1) * 2^-116 + 2^-128` per attempt after `q` frames signed with the
//! key (a 65,535-byte payload makes under 2^12 blocks): under 2^-64 for any
//! job that sends fewer than 2^52 frames.

use std::fmt;
use std::sync::Arc;

use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128Enc;

use crate::sys::polyval::Polyval;

use super::{ethernet, llc, transport};

/// Length of the authentication trailer (a transport header constant,
/// defined there; this module only imports from `transport`).
pub use super::transport::TAG_LEN;

/// BLAKE3 `derive_key` context that turns key material (a passphrase, the
/// `LLC_AUTH_KEY` variable of the tools) into a frame key. Changing it
/// changes every key: it is part of the protocol (version 2: POLYVAL and
/// AES-128).
pub const KEY_CONTEXT: &str = "llc-stack 2026-11 transport frame authentication v2 polyval-aes128";

/// Ethernet addresses at the start of every frame: destination, source.
const ADDRS_LEN: usize = 12;
/// Frame bytes that fill the hash's first block after the addresses: the
/// LLC header and the transport header's first byte.
const FIRST_REST: usize = crate::sys::polyval::BLOCK - ADDRS_LEN;

/// A 256-bit frame authentication key, with its two halves prepared for the
/// MAC (the POLYVAL key's powers, the AES key schedule) behind one shared
/// pointer: cloning a configuration that holds it copies no key material,
/// and the configuration stays small. Its `Debug` output never shows the
/// key.
#[derive(Clone)]
pub struct AuthKey(Arc<Prepared>);

/// What [`AuthKey`] shares.
struct Prepared {
    /// The key as given or derived (compared, fingerprinted).
    bytes: [u8; 32],
    /// POLYVAL keyed with `H = bytes[16..]` (its powers precomputed).
    hash: Polyval,
    /// AES-128 with `K_E = bytes[..16]`, encryption only.
    prf: Aes128Enc,
}

impl AuthKey {
    /// A key from 32 bytes used as they are (they must be uniformly random:
    /// the first 16 become the AES key, the last 16 the POLYVAL key).
    pub fn from_bytes(key: [u8; 32]) -> Self {
        let (e, h) = key.split_at(16);
        let e: [u8; 16] = e.try_into().expect("16 bytes");
        let h: [u8; 16] = h.try_into().expect("16 bytes");
        AuthKey(Arc::new(Prepared {
            bytes: key,
            hash: Polyval::new(&h),
            prf: Aes128Enc::new(&GenericArray::from(e)),
        }))
    }

    /// A key derived from arbitrary key material (a passphrase, or a random
    /// hex string shared by the job's ranks) with BLAKE3 `derive_key` and
    /// [`KEY_CONTEXT`]. Both ends derive the same key from the same bytes.
    pub fn derive(material: &[u8]) -> Self {
        Self::from_bytes(blake3::derive_key(KEY_CONTEXT, material))
    }

    /// A short public fingerprint (first 4 bytes of the hash of the key) for
    /// logs, so that two ranks can compare keys without showing them.
    pub fn fingerprint(&self) -> String {
        let h = blake3::hash(&self.0.bytes);
        h.as_bytes()[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The tag of the frame laid out in `frame`: Ethernet header, then the
    /// LLC span of `span_len` bytes that the tag covers (LLC header,
    /// transport header, SACK blocks, payload). The caller has checked that
    /// `frame` holds them and that the span holds both headers.
    #[inline]
    fn tag(&self, frame: &[u8], span_len: usize) -> [u8; TAG_LEN] {
        let at = ethernet::HEADER_LEN;
        // The covered string starts with the addresses, without the
        // length/type field: its first block is put together here (in
        // registers), the rest is hashed where it lies.
        let word =
            |from: usize| u32::from_le_bytes(frame[from..from + 4].try_into().expect("4 bytes"));
        let first = u128::from(word(0))
            | u128::from(word(4)) << 32
            | u128::from(word(8)) << 64
            | u128::from(word(at)) << 96;
        let bits = 8 * (ADDRS_LEN + span_len) as u128;
        let mut s = self
            .0
            .hash
            .hash(first, &frame[at + FIRST_REST..at + span_len], bits);
        self.0
            .prf
            .encrypt_block(GenericArray::from_mut_slice(&mut s[..]));
        s
    }

    /// Write the tag of a frame laid out in `frame` (Ethernet header, then the
    /// LLC span of `span_len` bytes with the CRC field zero, then room for
    /// the trailer).
    pub(crate) fn sign(&self, frame: &mut [u8], span_len: usize) {
        let at = ethernet::HEADER_LEN + span_len;
        let tag = self.tag(frame, span_len);
        frame[at..at + TAG_LEN].copy_from_slice(&tag);
    }

    /// Check the trailer of a received frame: `frame` is the whole Ethernet
    /// frame, `span_len` the length of its LLC span without the trailer (as
    /// the parser found it). False on a wrong tag or a frame too short. This
    /// is the only integrity check of an authenticated frame beyond the
    /// parser's test that its CRC field is zero (docs/PROTOCOL.md 3.3).
    pub fn verify(&self, frame: &[u8], span_len: usize) -> bool {
        let at = ethernet::HEADER_LEN + span_len;
        let Some(tag) = frame.get(at..at + TAG_LEN) else {
            return false;
        };
        if span_len < llc::HEADER_LEN + transport::HEADER_LEN {
            return false;
        }
        constant_time_eq(&self.tag(frame, span_len), tag)
    }
}

impl PartialEq for AuthKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.bytes == other.0.bytes
    }
}

impl Eq for AuthKey {}

/// Compare without an early exit, so timing does not tell a forger how many
/// leading bytes of a guessed tag were right: one 128-bit XOR, tested whole.
fn constant_time_eq(a: &[u8; TAG_LEN], b: &[u8]) -> bool {
    let Ok(b) = <[u8; TAG_LEN]>::try_from(b) else {
        return false;
    };
    std::hint::black_box(u128::from_ne_bytes(*a) ^ u128::from_ne_bytes(b)) == 0
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The frames of the known answers: byte i is (7 i + 3) mod 256, an LLC
    /// span of both headers and `payload_len` bytes, then the trailer.
    fn frame(payload_len: usize) -> (Vec<u8>, usize) {
        let span = llc::HEADER_LEN + transport::HEADER_LEN + payload_len;
        let n = ethernet::HEADER_LEN + span + TAG_LEN;
        ((0..n).map(|i| (7 * i + 3) as u8).collect(), span)
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Tags computed by scripts/frame_mac_reference.py (POLYVAL in plain
    /// Python field arithmetic, AES from the `cryptography` package) with
    /// the key 00 01 .. 1f: block boundaries inside the first block, a
    /// partial last block, whole blocks, and every MTU the tools use.
    #[test]
    fn known_answers_from_an_independent_implementation() {
        let key = AuthKey::from_bytes(std::array::from_fn(|i| i as u8));
        for (payload_len, want) in [
            (0, "ab9dfaf7aa3060afa4f370cd1d9fb8cd"),
            (1, "8a39471895ce41a611eeed0a6b864d11"),
            (5, "06c381232376f70ecb377c8944526fd0"),
            (13, "710514807edf1c2f33af6678c06399bf"),
            (64, "dd1f7e7066d4a3c38ac7eb7a30684053"),
            (1441, "42ca75d39a3013ac41f5cfd1ba865658"),
            (8941, "1fb83d3a9fbd894a03a71b2e44899f3d"),
            (65000, "73df00ccf6d49c0c2c9580e6e3c1b1ed"),
        ] {
            let (mut f, span) = frame(payload_len);
            key.sign(&mut f, span);
            let at = ethernet::HEADER_LEN + span;
            assert_eq!(hex(&f[at..at + TAG_LEN]), want, "payload {payload_len}");
            assert!(key.verify(&f, span));
        }
    }

    /// Every covered bit counts: a flip anywhere in the addresses, headers,
    /// payload or tag fails, and so does any other key or a shorter span.
    /// The 802.3 length field is not covered (the header's lengths are).
    #[test]
    fn any_flipped_bit_or_another_key_fails() {
        let key = AuthKey::derive(b"flip");
        let other = AuthKey::derive(b"flip ");
        for payload_len in [0, 3, 40, 200] {
            let (mut f, span) = frame(payload_len);
            key.sign(&mut f, span);
            assert!(key.verify(&f, span));
            assert!(!other.verify(&f, span), "another key");
            assert!(!AuthKey::from_bytes(key.0.bytes).verify(&f[..f.len() - 1], span));
            for byte in (0..f.len()).filter(|b| !(12..14).contains(b)) {
                for bit in 0..8 {
                    let mut g = f.clone();
                    g[byte] ^= 1 << bit;
                    assert!(
                        !key.verify(&g, span),
                        "{payload_len}: byte {byte} bit {bit}"
                    );
                }
            }
            let mut g = f.clone();
            g[12] ^= 0x80;
            assert!(key.verify(&g, span), "length field not covered");
        }
    }

    /// The tag is a function of the frame alone: a retransmission of the same
    /// bytes carries the same tag (no nonce to keep unique), and a frame one
    /// byte longer with a zero last byte (same padded blocks) does not.
    #[test]
    fn deterministic_and_length_bound() {
        let key = AuthKey::derive(b"det");
        let (mut f, span) = frame(20);
        let at = ethernet::HEADER_LEN + span;
        key.sign(&mut f, span);
        let first = f[at..at + TAG_LEN].to_vec();
        key.sign(&mut f, span);
        assert_eq!(f[at..at + TAG_LEN], first[..]);
        f[at - 1] = 0;
        key.sign(&mut f, span - 1);
        let shorter = key.tag(&f, span - 1);
        assert_ne!(shorter, key.tag(&f, span));
        assert_eq!(key, AuthKey::from_bytes(key.0.bytes));
        assert_ne!(key, AuthKey::derive(b"det2"));
    }
}
