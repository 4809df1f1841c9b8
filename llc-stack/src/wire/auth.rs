//! Optional frame authentication: a keyed MAC in a trailer after the payload.
//!
//! With a per-job key configured, every transport frame carries the
//! [`flags::AUTH`](super::transport::flags::AUTH) flag, a zero CRC field and
//! a 16-byte tag after its payload. The tag is a hash-then-encrypt MAC whose
//! hash is POLYVAL, over NH (over GF(2)[x]) of a long frame's body:
//!
//! ```text
//! A   = dst MAC (6) || src MAC (6) || LLC header (3) || transport header (56,
//!       CRC field zero as sent) || SACK blocks || payload
//! short (|A| < 336): S = POLYVAL(H, A zero-padded to 16 bytes || le64(8 * |A|) || le64(0))
//! long:  D_1 .. D_k  = A[80..] in 1 KiB chunks, the last one shorter
//!        S = POLYVAL(H, A[..80] || NH(K_N, D_1) || .. || NH(K_N, D_k) || le64(8 * |A|) || le64(0))
//! tag = AES-128(K_E, S)
//! ```
//!
//! with `K_E` the first and `H` the last 16 bytes of the 256-bit job key,
//! and the 1 KiB NH key `K_N` derived from the job key once (BLAKE3 in
//! key-derivation mode, [`NH_KEY_CONTEXT`]). docs/PROTOCOL.md (section 3.12)
//! is normative; docs/SECURITY.md explains what this protects and why this
//! construction.
//!
//! Why this MAC: it has to be cheap enough to be on by default. POLYVAL (the
//! universal hash of AES-GCM-SIV, RFC 8452) runs on the carry-less multiplier
//! (`sys::polyval`: 32 blocks per reduction with AVX-512 VPCLMULQDQ, the
//! `polyval` crate's PCLMULQDQ code elsewhere) at many times BLAKE3's speed,
//! and a frame then costs one AES block (AES-NI) instead of a hash
//! finalisation. A long frame's body goes first through NH (`sys::nh`): one
//! carry-less multiply per 64 bytes instead of POLYVAL's three and its
//! reductions (docs/BENCHMARKS.md, issue 43). Its head, the first 80 bytes
//! (both headers whole), goes to POLYVAL directly: two frames the job signs
//! always differ there (sequence numbers, cookies, timestamps), so they never
//! collide through NH, and one NH pass (2^-64 per chunk) bounds each forgery
//! attempt by 2^-64 + 2^-120 however many frames were signed. It is
//! deterministic: a retransmitted frame needs no fresh nonce, where a
//! nonce-based MAC (GMAC, Poly1305) would give its hash key away to anyone
//! who saw two frames signed under one nonce.

use std::fmt;
use std::sync::Arc;

use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use aes::{Aes128Dec, Aes128Enc};

use crate::sys::nh::{self, Nh};
use crate::sys::polyval::Polyval;

use super::{ethernet, llc, transport};

/// Length of the authentication trailer (a transport header constant,
/// defined there; this module only imports from `transport`).
pub use super::transport::TAG_LEN;

/// BLAKE3 `derive_key` context that turns key material (a passphrase, the
/// `LLC_AUTH_KEY` variable of the tools) into a frame key. Changing it
/// changes every key: it is part of the protocol (version 4: NH, POLYVAL
/// and AES-128).
pub const KEY_CONTEXT: &str =
    "llc-stack 2026-11 transport frame authentication v4 nh-polyval-aes128";

/// BLAKE3 `derive_key` context that draws the NH key (1 KiB, the output's
/// first bytes) from the 32-byte frame key.
pub const NH_KEY_CONTEXT: &str = "llc-stack 2026-11 transport frame authentication v4 nh key";

/// Ethernet addresses at the start of every frame: destination, source.
const ADDRS_LEN: usize = 12;
/// POLYVAL's block.
const BLOCK: usize = crate::sys::polyval::BLOCK;
/// Frame bytes that fill the hash's first block after the addresses: the
/// LLC header and the transport header's first byte.
const FIRST_REST: usize = BLOCK - ADDRS_LEN;
/// Blocks of a long frame's covered string that POLYVAL hashes directly
/// after the first: with it, the first 80 bytes, which hold both headers
/// whole (71 bytes: every field that tells two frames of a job apart).
const HEAD_BLOCKS: usize = 4;
/// Covered bytes hashed directly in a long frame (the "head").
const HEAD: usize = (1 + HEAD_BLOCKS) * BLOCK;
/// Covered length from which the bytes after the head (the "body") go
/// through NH: below it, POLYVAL hashes the whole string (short frames'
/// latency), from it on NH is cheaper (docs/BENCHMARKS.md, issue 43).
const NH_FROM: usize = HEAD + 256;
/// Longest covered string: addresses, both headers, four SACK blocks and
/// the longest payload.
const MAX_COVERED: usize = ADDRS_LEN
    + llc::HEADER_LEN
    + transport::HEADER_LEN
    + transport::MAX_SACK_BLOCKS * transport::SACK_BLOCK_LEN
    + u16::MAX as usize;
/// Most NH chunks a frame has (65, the last one short).
const MAX_CHUNKS: usize = (MAX_COVERED - HEAD).div_ceil(nh::CHUNK);

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
    /// NH keyed with the keys derived from `bytes`.
    nh: Nh,
    /// POLYVAL keyed with `H = bytes[16..]` (its powers precomputed).
    hash: Polyval,
    /// AES-128 with `K_E = bytes[..16]`, encryption (signing).
    prf: Aes128Enc,
    /// The same key's decryption (checking: the received tag is decrypted
    /// while the hash is computed, instead of encrypting the hash after).
    inverse: Aes128Dec,
}

impl AuthKey {
    /// A key from 32 bytes used as they are (they must be uniformly random:
    /// the first 16 become the AES key, the last 16 the POLYVAL key; the NH
    /// keys are derived from all 32).
    pub fn from_bytes(key: [u8; 32]) -> Self {
        let (e, h) = key.split_at(16);
        let e: [u8; 16] = e.try_into().expect("16 bytes");
        let h: [u8; 16] = h.try_into().expect("16 bytes");
        let mut k = [0u8; nh::KEY_LEN];
        blake3::Hasher::new_derive_key(NH_KEY_CONTEXT)
            .update(&key)
            .finalize_xof()
            .fill(&mut k);
        AuthKey(Arc::new(Prepared {
            bytes: key,
            nh: Nh::new(k),
            hash: Polyval::new(&h),
            prf: Aes128Enc::new(&GenericArray::from(e)),
            inverse: Aes128Dec::new(&GenericArray::from(e)),
        }))
    }

    /// The same key computed with the portable NH and the `polyval`
    /// crate's POLYVAL (the fallbacks of CPUs without AVX-512).
    #[cfg(test)]
    fn portable(&self) -> Self {
        let p = &self.0;
        AuthKey(Arc::new(Prepared {
            bytes: p.bytes,
            nh: p.nh.on(nh::Path::Portable),
            hash: p.hash.without_wide(),
            prf: p.prf.clone(),
            inverse: p.inverse.clone(),
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
    /// `frame` holds them, that the span holds both headers and that it is
    /// no longer than a frame's longest.
    #[inline]
    fn tag(&self, frame: &[u8], span_len: usize) -> [u8; TAG_LEN] {
        self.tag_of(&frame[..ethernet::HEADER_LEN + span_len], &[])
    }

    /// The tag of a frame whose LLC span ends in `body`, which lies
    /// elsewhere: `head` is the frame up to it (Ethernet header, both
    /// headers, SACK blocks, the payload's start). The frame is sent as
    /// `head`, `body`, then the tag ([`super::Tail`]).
    pub(crate) fn tag_gathered(&self, head: &[u8], body: &[u8]) -> [u8; TAG_LEN] {
        self.tag_of(head, body)
    }

    /// The tag of the frame `head || body` (`head` holds at least the
    /// Ethernet and LLC headers and the transport header's first byte).
    #[inline(always)]
    fn tag_of(&self, head: &[u8], body: &[u8]) -> [u8; TAG_LEN] {
        let mut s = self.hash_of(head, body);
        self.0
            .prf
            .encrypt_block(GenericArray::from_mut_slice(&mut s[..]));
        s
    }

    /// The hash `S` of the frame `head || body`, which the tag encrypts.
    #[inline(always)]
    fn hash_of(&self, head: &[u8], body: &[u8]) -> [u8; TAG_LEN] {
        let at = ethernet::HEADER_LEN;
        let covered = ADDRS_LEN + head.len() - at + body.len();
        debug_assert!(covered <= MAX_COVERED);
        // The covered string starts with the addresses, without the
        // length/type field: its first block is put together here (in
        // registers), the rest is hashed where it lies.
        let word =
            |from: usize| u32::from_le_bytes(head[from..from + 4].try_into().expect("4 bytes"));
        let first = u128::from(word(0))
            | u128::from(word(4)) << 32
            | u128::from(word(8)) << 64
            | u128::from(word(at)) << 96;
        let bits = 8 * covered as u128;
        let rest = &head[at + FIRST_REST..];
        if covered >= NH_FROM {
            self.long_hash(first, rest, body, bits)
        } else if body.is_empty() {
            self.0.hash.hash(first, &[], rest, bits)
        } else {
            let mut joint = [0u8; NH_FROM];
            let n = rest.len() + body.len();
            joint[..rest.len()].copy_from_slice(rest);
            joint[rest.len()..n].copy_from_slice(body);
            self.0.hash.hash(first, &[], &joint[..n], bits)
        }
    }

    /// The hash of a long frame: POLYVAL of `first`, the header blocks
    /// (`rest`'s start), NH of each chunk of the body (the rest of `rest`,
    /// then `body`) and `last`. The outputs' buffer (zeroed first) is sized
    /// for frames up to MTU 9000 when that is enough: zeroing 1 KiB would be
    /// a tenth of an MTU 1500 frame's tag.
    #[inline(always)]
    fn long_hash(&self, first: u128, rest: &[u8], body: &[u8], last: u128) -> [u8; TAG_LEN] {
        if rest.len() + body.len() <= HEAD - BLOCK + 9 * nh::CHUNK {
            self.nh_polyval::<{ HEAD_BLOCKS + 9 }>(first, rest, body, last)
        } else {
            self.nh_polyval::<{ HEAD_BLOCKS + MAX_CHUNKS }>(first, rest, body, last)
        }
    }

    /// [`AuthKey::long_hash`] with room for `N` blocks. A body may lie in
    /// two pieces (a gathered frame: the payload's start in `rest`, the
    /// message's bytes in `body`): NH hashes both where they lie.
    #[inline(always)]
    fn nh_polyval<const N: usize>(
        &self,
        first: u128,
        rest: &[u8],
        body: &[u8],
        last: u128,
    ) -> [u8; TAG_LEN] {
        let mut out = [[0u8; BLOCK]; N];
        // The header blocks: from `rest`, and from `body` when a gathered
        // frame's `rest` ends before them.
        let header = out[..HEAD_BLOCKS].as_flattened_mut();
        let from_rest = rest.len().min(header.len());
        let (from_body, body) = body.split_at(header.len() - from_rest);
        header[..from_rest].copy_from_slice(&rest[..from_rest]);
        header[from_rest..].copy_from_slice(from_body);
        let a = &rest[from_rest..];
        let done = HEAD_BLOCKS + self.0.nh.hash_joined(a, body, &mut out[HEAD_BLOCKS..]);
        self.0.hash.hash(first, &out[..done], &[], last)
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
        if span_len < llc::HEADER_LEN + transport::HEADER_LEN || ADDRS_LEN + span_len > MAX_COVERED
        {
            return false;
        }
        // tag = AES(S) exactly when AES^-1(tag) = S (AES is a
        // permutation): decrypting the received tag does not wait for the
        // hash, so the two run side by side and the check costs the longer
        // of them, not their sum (one AES block of latency per frame).
        let mut expected = [0u8; TAG_LEN];
        expected.copy_from_slice(tag);
        self.0
            .inverse
            .decrypt_block(GenericArray::from_mut_slice(&mut expected[..]));
        let s = self.hash_of(&frame[..at], &[]);
        constant_time_eq(&s, &expected)
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

    /// Tags computed by scripts/frame_mac_reference.py (NH and POLYVAL in
    /// plain Python integer arithmetic, AES from the `cryptography` package)
    /// with the key 00 01 .. 1f: block boundaries inside the first block, a
    /// partial last block, whole blocks (all hashed by POLYVAL alone, as in
    /// version 3: same tags), the first frame hashed with NH (payload 265:
    /// 336 covered bytes, a body of 256) and its neighbours, a body of one
    /// chunk less 64 bytes (968), of one chunk and 255, 256 or 257 bytes
    /// (1288-1290), and every MTU the tools use up to the longest payload.
    #[test]
    fn known_answers_from_an_independent_implementation() {
        let key = AuthKey::from_bytes(std::array::from_fn(|i| i as u8));
        for (payload_len, want) in [
            (0, "ab9dfaf7aa3060afa4f370cd1d9fb8cd"),
            (1, "8a39471895ce41a611eeed0a6b864d11"),
            (5, "06c381232376f70ecb377c8944526fd0"),
            (13, "710514807edf1c2f33af6678c06399bf"),
            (64, "dd1f7e7066d4a3c38ac7eb7a30684053"),
            (264, "a18eaaaa0f68db33e1325a3ada673528"),
            (265, "6a7ab3d1dc0d00711746c4f114e06fb4"),
            (266, "8dce6fc7e7c2a159ebcb7bf3586e8256"),
            (281, "c1525e2fbbbe5e042b46902f86501c37"),
            (968, "217eafa4ba5edf7433f775cb0ec33aa2"),
            (969, "f84a1e1ba87dd4fa3323cde445788c11"),
            (1288, "4568762811dd1dda595b11090fab0aec"),
            (1289, "5904ce26cb67dda8c484b14ef403dfa2"),
            (1290, "0ce3d273028cf198354e48ad405659b7"),
            (1441, "004f03f21e63250adf0e744f1763d6c5"),
            (8941, "b056ed5e11e5fb2407ddeb3d29baf82c"),
            (65000, "3805aab69128eeb37c8b4a210987707f"),
            (65535, "cc4811b43022f0f1a9e223e64d9dc05e"),
        ] {
            let (mut f, span) = frame(payload_len);
            for k in [&key, &key.portable()] {
                k.sign(&mut f, span);
                let at = ethernet::HEADER_LEN + span;
                assert_eq!(hex(&f[at..at + TAG_LEN]), want, "payload {payload_len}");
                assert!(key.verify(&f, span));
            }
        }
    }

    /// A deterministic pseudo-random byte stream (xorshift64*).
    fn random(n: usize, seed: u64) -> Vec<u8> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s >> 12;
                s ^= s << 25;
                s ^= s >> 27;
                (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }

    /// The CPU's fastest paths (AVX-512 NH and POLYVAL here) and the
    /// portable ones give the same tag on random frames of every payload
    /// length from 0 to 3000 bytes and on the longest.
    #[test]
    fn fast_and_portable_paths_agree() {
        let data = random(70_000, 9);
        for seed in 0..2u64 {
            let key = AuthKey::from_bytes(random(32, seed).try_into().unwrap());
            let portable = key.portable();
            for payload_len in (0..=3000).chain([65_535]) {
                let span = llc::HEADER_LEN + transport::HEADER_LEN + payload_len;
                let n = ethernet::HEADER_LEN + span + TAG_LEN;
                let f = &data[(payload_len * 7 + seed as usize) % 4000..][..n];
                assert_eq!(
                    key.tag(f, span),
                    portable.tag(f, span),
                    "seed {seed} payload {payload_len}"
                );
            }
        }
    }

    /// In a frame with NH chunks, a flipped bit anywhere (in a chunk, in
    /// the short last chunk, in the head, in the tag) or swapped chunks
    /// fail.
    #[test]
    fn tampered_long_frames_fail() {
        let key = AuthKey::derive(b"long");
        for payload_len in [265, 969, 2500, 8941, 65_535] {
            let span = llc::HEADER_LEN + transport::HEADER_LEN + payload_len;
            let mut f = random(ethernet::HEADER_LEN + span + TAG_LEN, payload_len as u64);
            key.sign(&mut f, span);
            assert!(key.verify(&f, span));
            for byte in (0..f.len())
                .step_by(97)
                .chain([0, 17, 18, f.len() - 17, f.len() - 1])
            {
                if (12..14).contains(&byte) {
                    continue;
                }
                let mut g = f.clone();
                g[byte] ^= 1 << (byte % 8);
                assert!(!key.verify(&g, span), "{payload_len}: byte {byte}");
            }
            if payload_len > 2 * nh::CHUNK {
                // Chunks 1 and 2 of the body, swapped.
                let mut g = f.clone();
                let c = ethernet::HEADER_LEN + HEAD - ADDRS_LEN;
                let (a, b) = g[c..c + 2 * nh::CHUNK].split_at_mut(nh::CHUNK);
                a.swap_with_slice(b);
                assert!(!key.verify(&g, span), "{payload_len}: chunks swapped");
            }
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
