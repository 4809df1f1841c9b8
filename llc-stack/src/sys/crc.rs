//! CRC32C (Castagnoli) with the SSE4.2 `crc32` instruction when the CPU has
//! it. Short spans (a header, a small payload) take a plain 8-bytes-per-
//! instruction loop, which beats the general-purpose crate's set-up cost
//! there (that cost was 16% of a reliable round trip); long spans and other
//! CPUs use the `crc32c` crate.
//!
//! [`copy_update`] copies a payload into a frame and feeds it into the CRC
//! in the same pass: each word is loaded once, stored, and fed to one of
//! three `crc32` chains, so a jumbo frame's copy costs no more than its CRC.

use std::sync::OnceLock;

/// Spans at least this long go to the crate, which runs three `crc32`
/// chains at once (the instruction's latency is three cycles, so one chain
/// uses a third of the unit): a jumbo frame's CRC takes a third of the time.
/// Shorter spans take the plain loop, which has no set-up cost.
const PARALLEL_FROM: usize = 1024;

/// Running CRC state: start from [`INIT`], feed with [`update`], finish with [`finish`].
pub(crate) const INIT: u32 = !0;

/// Feed `data` into the running state.
#[inline]
pub(crate) fn update(state: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        static HW: OnceLock<bool> = OnceLock::new();
        if data.len() < PARALLEL_FROM
            && *HW.get_or_init(|| std::arch::is_x86_feature_detected!("sse4.2"))
        {
            // SAFETY: the CPU supports SSE4.2 (checked just above), which is
            // the only requirement of `update_sse42`.
            return unsafe { update_sse42(state, data) };
        }
    }
    // The crate works on finished values: undo and redo the final inversion.
    !crc32c::crc32c_append(!state, data)
}

/// The CRC of everything fed so far.
#[inline]
pub(crate) fn finish(state: u32) -> u32 {
    !state
}

/// Copy `src` into `dst` (same length) and feed it into the running state:
/// the same result as `dst.copy_from_slice(src); update(state, src)`.
#[inline]
pub(crate) fn copy_update(state: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    assert_eq!(dst.len(), src.len(), "copy_update needs equal lengths");
    #[cfg(target_arch = "x86_64")]
    if src.len() >= COPY_UPDATE_FROM {
        if let Some(shifts) = lane_shifts() {
            // SAFETY: `lane_shifts` only returns tables on a CPU with SSE4.2,
            // the only requirement of `copy_update_sse42`.
            return unsafe { copy_update_sse42(state, dst, src, shifts) };
        }
    }
    dst.copy_from_slice(src);
    update(state, dst)
}

/// Payloads at least this long are worth [`copy_update`]'s lanes.
pub(crate) const COPY_UPDATE_FROM: usize = 3 * SHORT_LANE;

/// Lane lengths of the three-chain copy: blocks of three long lanes, then of
/// three short ones; what is left (under three short lanes) goes through
/// the plain path.
const LONG_LANE: usize = 2048;
const SHORT_LANE: usize = 256;

/// "Append `n` zero bytes" as a linear map of the 32-bit CRC register, in
/// byte-indexed tables (the register's four bytes, looked up and XORed).
struct Shift([[u32; 256]; 4]);

impl Shift {
    /// Built from the images of the register's 32 basis vectors, each found
    /// by running the real CRC over `n` zero bytes.
    fn new(n: usize) -> Shift {
        let zeros = vec![0u8; n];
        let basis: Vec<u32> = (0..32).map(|i| update(1 << i, &zeros)).collect();
        let mut t = [[0u32; 256]; 4];
        for (k, table) in t.iter_mut().enumerate() {
            for (b, slot) in table.iter_mut().enumerate() {
                *slot = (0..8)
                    .filter(|bit| b & (1 << bit) != 0)
                    .fold(0, |acc, bit| acc ^ basis[8 * k + bit]);
            }
        }
        Shift(t)
    }

    #[inline]
    fn apply(&self, c: u32) -> u32 {
        let t = &self.0;
        t[0][(c & 0xFF) as usize]
            ^ t[1][((c >> 8) & 0xFF) as usize]
            ^ t[2][((c >> 16) & 0xFF) as usize]
            ^ t[3][(c >> 24) as usize]
    }
}

/// The shift tables for both lane lengths, when the CPU has SSE4.2.
#[cfg(target_arch = "x86_64")]
fn lane_shifts() -> Option<&'static (Shift, Shift)> {
    static SHIFTS: OnceLock<Option<(Shift, Shift)>> = OnceLock::new();
    SHIFTS
        .get_or_init(|| {
            std::arch::is_x86_feature_detected!("sse4.2")
                .then(|| (Shift::new(LONG_LANE), Shift::new(SHORT_LANE)))
        })
        .as_ref()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn copy_update_sse42(state: u32, dst: &mut [u8], src: &[u8], shifts: &(Shift, Shift)) -> u32 {
    let mut c = state;
    let (mut dst, mut src) = (dst, src);
    for (lane, shift) in [(LONG_LANE, &shifts.0), (SHORT_LANE, &shifts.1)] {
        while src.len() >= 3 * lane {
            let (block, src_rest) = src.split_at(3 * lane);
            let (out, dst_rest) = dst.split_at_mut(3 * lane);
            c = copy_block_sse42(c, out, block, lane, shift);
            (dst, src) = (dst_rest, src_rest);
        }
    }
    dst.copy_from_slice(src);
    update_sse42(c, dst)
}

/// One block of three lanes of `lane` bytes: each chain copies and feeds
/// its lane; the first continues from `state`, the others start from zero,
/// and shifting by a lane joins them (CRC is linear in the register).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn copy_block_sse42(state: u32, out: &mut [u8], block: &[u8], lane: usize, shift: &Shift) -> u32 {
    use std::arch::x86_64::_mm_crc32_u64;
    let (s0, rest) = block.split_at(lane);
    let (s1, s2) = rest.split_at(lane);
    let (d0, rest) = out.split_at_mut(lane);
    let (d1, d2) = rest.split_at_mut(lane);
    let (s0, s1, s2) = (
        s0.as_chunks::<8>().0,
        s1.as_chunks::<8>().0,
        s2.as_chunks::<8>().0,
    );
    let (d0, d1, d2) = (
        d0.as_chunks_mut::<8>().0,
        d1.as_chunks_mut::<8>().0,
        d2.as_chunks_mut::<8>().0,
    );
    let (mut c0, mut c1, mut c2) = (u64::from(state), 0u64, 0u64);
    let words = s0.iter().zip(s1).zip(s2);
    let outs = d0.iter_mut().zip(d1.iter_mut()).zip(d2.iter_mut());
    for (((w0, w1), w2), ((o0, o1), o2)) in words.zip(outs) {
        *o0 = *w0;
        *o1 = *w1;
        *o2 = *w2;
        c0 = _mm_crc32_u64(c0, u64::from_le_bytes(*w0));
        c1 = _mm_crc32_u64(c1, u64::from_le_bytes(*w1));
        c2 = _mm_crc32_u64(c2, u64::from_le_bytes(*w2));
    }
    let c = shift.apply(c0 as u32) ^ c1 as u32;
    shift.apply(c) ^ c2 as u32
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn update_sse42(state: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let (words, tail) = data.as_chunks::<8>();
    let mut c = state as u64;
    for w in words {
        c = _mm_crc32_u64(c, u64::from_le_bytes(*w));
    }
    let mut c = c as u32;
    for &b in tail {
        c = _mm_crc32_u8(c, b);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_update_copies_and_matches_the_plain_crc() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 131 + i / 7) as u8).collect();
        let mut lens: Vec<usize> = (0..40).collect();
        lens.extend([
            767, 768, 769, 1535, 1536, 6143, 6144, 6145, 6911, 8958, 9000, 20_000, 65_000,
        ]);
        for &len in &lens {
            for start in [0, 1, 5] {
                for state in [INIT, 0, 0x1234_5678] {
                    let src = &data[start..start + len];
                    let mut dst = vec![0xEEu8; len];
                    let got = copy_update(state, &mut dst, src);
                    assert_eq!(dst, src, "copy, {start}+{len}");
                    assert_eq!(
                        got,
                        update(state, src),
                        "crc, {start}+{len} from {state:#x}"
                    );
                }
            }
        }
        // A whole frame fed in pieces, one of them copied.
        let (head, payload) = data[..9_100].split_at(100);
        let mut frame = vec![0u8; 9_100];
        frame[..100].copy_from_slice(head);
        let state = update(INIT, &frame[..100]);
        let state = copy_update(state, &mut frame[100..], payload);
        assert_eq!(finish(state), crc32c::crc32c(&data[..9_100]));
    }

    #[test]
    fn matches_the_reference() {
        // RFC 3720 B.4 test vector: 32 bytes of zeros.
        assert_eq!(finish(update(INIT, &[0u8; 32])), 0x8A91_36AA);
        assert_eq!(finish(update(INIT, b"123456789")), 0xE306_9283);
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
        for cut in [
            0, 1, 7, 8, 9, 500, 999, 1000, 1023, 1024, 2500, 3977, 4999, 5000,
        ] {
            let split = update(update(INIT, &data[..cut]), &data[cut..]);
            assert_eq!(finish(split), crc32c::crc32c(&data), "cut {cut}");
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("sse4.2") {
            // The plain loop and the crate's three-chain code agree on a
            // span long enough for the latter.
            // SAFETY: the CPU has SSE4.2 (checked just above).
            let plain = unsafe { update_sse42(INIT, &data) };
            assert_eq!(finish(plain), crc32c::crc32c(&data));
            // Every tail shape (words, half word, byte) at odd alignments.
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
