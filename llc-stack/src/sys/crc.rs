//! CRC32C (Castagnoli) with the SSE4.2 `crc32` instruction when the CPU has
//! it. Short spans (a header, a small payload) take a plain 8-bytes-per-
//! instruction loop, which beats any general-purpose implementation's
//! set-up cost there (that cost was 16% of a reliable round trip); long
//! spans and other CPUs use the `crc-fast` crate, which folds the data with
//! carry-less multiplies (VPCLMULQDQ on AVX-512 CPUs): 60-65 GB/s on this
//! project's VM against 27-32 GB/s for three `crc32` chains, and 1.2-2.2x
//! with payloads read from memory (docs/BENCHMARKS.md, issue 24).

use std::sync::OnceLock;

/// Spans at least this long go to the crate. Below it the plain loop wins
/// (no set-up; measured crossover between 384 and 512 bytes).
const PARALLEL_FROM: usize = 512;

/// Running CRC state: start from [`INIT`], feed with [`update`], finish with [`finish`].
pub(crate) const INIT: u32 = !0;

/// True when the CPU has the `crc32` instruction (SSE4.2).
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_sse42() -> bool {
    static HW: OnceLock<bool> = OnceLock::new();
    *HW.get_or_init(|| std::arch::is_x86_feature_detected!("sse4.2"))
}

/// Feed `data` into the running state.
#[inline]
pub(crate) fn update(state: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < PARALLEL_FROM && has_sse42() {
        // SAFETY: the CPU supports SSE4.2 (checked just above), which is
        // the only requirement of `update_sse42`.
        return unsafe { update_sse42(state, data) };
    }
    update_long(state, data)
}

/// The crate's path, out of line: the short spans' callers stay small.
#[inline(never)]
fn update_long(state: u32, data: &[u8]) -> u32 {
    let mut d =
        crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, u64::from(state));
    d.update(data);
    d.get_state() as u32
}

/// Feed `head ++ rest` into the running state, each little-endian word of
/// `head` ANDed with its mask first: a field inside `head` counts as zero
/// without a copy of `head` to clear it in, and in one pass.
#[inline]
pub(crate) fn update_masked(state: u32, head: &[u8; 64], rest: &[u8], masks: &[u64; 8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if rest.len() < PARALLEL_FROM && has_sse42() {
        // SAFETY: the CPU supports SSE4.2 (checked just above), which is
        // the only requirement of `update_masked_sse42`.
        return unsafe { update_masked_sse42(state, head, rest, masks) };
    }
    let mut h = *head;
    for (w, m) in h.as_chunks_mut::<8>().0.iter_mut().zip(masks) {
        *w = (u64::from_le_bytes(*w) & m).to_le_bytes();
    }
    update(update(state, &h), rest)
}

/// The CRC of everything fed so far.
#[inline]
pub(crate) fn finish(state: u32) -> u32 {
    !state
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn update_sse42(state: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    // Four words per turn of the loop: one chain still (each step needs the
    // last), but a quarter of the loop's own instructions.
    let (quads, mut rest) = data.as_chunks::<32>();
    let mut c = state as u64;
    for q in quads {
        let (w, _) = q.as_chunks::<8>();
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[0]));
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[1]));
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[2]));
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[3]));
    }
    // The last 0-31 bytes without a loop: one step for each bit set in
    // their count (a frame's span rarely ends on a word).
    if let Some((w, r)) = rest.split_first_chunk::<16>() {
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[..8].try_into().expect("8 bytes")));
        c = _mm_crc32_u64(c, u64::from_le_bytes(w[8..].try_into().expect("8 bytes")));
        rest = r;
    }
    if let Some((w, r)) = rest.split_first_chunk::<8>() {
        c = _mm_crc32_u64(c, u64::from_le_bytes(*w));
        rest = r;
    }
    let mut c = c as u32;
    if let Some((w, r)) = rest.split_first_chunk::<4>() {
        c = _mm_crc32_u32(c, u32::from_le_bytes(*w));
        rest = r;
    }
    if let Some((w, r)) = rest.split_first_chunk::<2>() {
        c = _mm_crc32_u16(c, u16::from_le_bytes(*w));
        rest = r;
    }
    if let Some(&b) = rest.first() {
        c = _mm_crc32_u8(c, b);
    }
    c
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn update_masked_sse42(state: u32, head: &[u8; 64], rest: &[u8], masks: &[u64; 8]) -> u32 {
    use std::arch::x86_64::_mm_crc32_u64;
    let mut c = state as u64;
    for (w, m) in head.as_chunks::<8>().0.iter().zip(masks) {
        c = _mm_crc32_u64(c, u64::from_le_bytes(*w) & m);
    }
    update_sse42(c as u32, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_matches_a_cleared_copy() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 37 + 11) as u8).collect();
        // Bytes 13..15 and 55..59 (a word's end and the next one's start).
        let mut masks = [u64::MAX; 8];
        for i in [13, 14, 55, 56, 57, 58] {
            masks[i / 8] &= !(0xff << (8 * (i % 8)));
        }
        for len in [64, 65, 71, 72, 100, 1087, 1088, 1089, 3000] {
            let (head, rest) = data[..len].split_first_chunk::<64>().unwrap();
            let mut cleared = data[..len].to_vec();
            for i in [13, 14, 55, 56, 57, 58] {
                cleared[i] = 0;
            }
            assert_eq!(
                update_masked(INIT, head, rest, &masks),
                update(INIT, &cleared),
                "{len}"
            );
        }
    }

    #[test]
    fn matches_the_reference() {
        // RFC 3720 B.4 test vector: 32 bytes of zeros.
        assert_eq!(finish(update(INIT, &[0u8; 32])), 0x8A91_36AA);
        assert_eq!(finish(update(INIT, b"123456789")), 0xE306_9283);
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
        for cut in [
            0, 1, 7, 8, 9, 500, 511, 512, 513, 999, 1000, 1023, 1024, 2500, 3977, 4488, 4489, 4999,
            5000,
        ] {
            let split = update(update(INIT, &data[..cut]), &data[cut..]);
            assert_eq!(finish(split), crc32c::crc32c(&data), "cut {cut}");
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // The plain loop and the crate's folding code agree on a span
            // long enough for the latter.
            // SAFETY: the CPU has SSE4.2 (checked just above).
            let plain = unsafe { update_sse42(INIT, &data) };
            assert_eq!(finish(plain), crc32c::crc32c(&data));
            // Every tail length (0-7 bytes after the last word) at odd
            // alignments.
            for start in 0..8 {
                for len in 0..=100 {
                    let span = &data[start..start + len];
                    // SAFETY: as above.
                    let plain = unsafe { update_sse42(INIT, span) };
                    assert_eq!(finish(plain), crc32c::crc32c(span), "{start}+{len}");
                }
            }
        }
    }
}
