//! POLYVAL (RFC 8452, section 3) of a frame's authenticated bytes, the
//! universal hash of the frame MAC (`wire::auth`, docs/PROTOCOL.md 3.12).
//!
//! CPUs with AVX-512 and VPCLMULQDQ (this project's VMs) take a wide path:
//! 32 blocks (512 bytes) per step, four blocks per carry-less multiply
//! instruction, three multiplies per block (Karatsuba), each block multiplied
//! by its own power of H and the 32 products summed before one reduction, so
//! the chain from one step to the next is a single reduction. The `polyval` crate's PCLMULQDQ code does 4
//! blocks per reduction, one block per instruction, and is the path of every
//! other CPU. Both compute the same function (tests below, and the known
//! answers of `wire::auth` computed by an independent implementation); the
//! wide path also saves the crate's per-call set-up on short frames.
//!
//! Arithmetic: POLYVAL's product is `dot(a, b) = a * b * x^-128` modulo
//! `x^128 + x^127 + x^126 + x^121 + 1`, with bit i of a little-endian
//! 16-byte block the coefficient of x^i, and `POLYVAL(H, X_1..X_n) = S_n`
//! with `S_i = dot(S_{i-1} + X_i, H)`. Unrolled, `S_n = sum dot(X_i, H^(n-i+1))`
//! (`S_0` added into `X_1`) where `H^k` is the k-th power under `dot`; `dot`
//! is a carry-less product followed by a Montgomery reduction, which is
//! linear, so products are summed unreduced and reduced once.

use ::polyval::universal_hash::{KeyInit, UniversalHash};

/// POLYVAL's block.
pub(crate) const BLOCK: usize = 16;
/// Blocks per step of the wide path (512 bytes), and powers of H kept (1
/// KiB with their Karatsuba halves). Steps of 1 KiB were no faster (25.5
/// against 26.7 GB/s on 64 KB frames): the multiplier is then probably the
/// limit, three 512-bit carry-less multiplies per 64 bytes.
const WIDE: usize = 32;

/// A POLYVAL key with what each path needs precomputed.
#[derive(Clone)]
pub(crate) struct Polyval {
    /// `H^32, H^31, .., H^1` (powers under `dot`) when the wide path is
    /// usable; `None` otherwise.
    powers: Option<Box<wide::Powers>>,
    /// The crate's hash keyed with H, nothing hashed yet.
    fallback: ::polyval::Polyval,
}

impl Polyval {
    /// The key `h` prepared for the best path this CPU has.
    pub(crate) fn new(h: &[u8; BLOCK]) -> Self {
        Polyval {
            powers: wide::usable().then(|| {
                // SAFETY: `usable()` checked the CPU features `powers` needs.
                Box::new(unsafe { wide::powers(h) })
            }),
            fallback: ::polyval::Polyval::new_from_slice(h).expect("16-byte key"),
        }
    }

    /// The same key on the crate's path only.
    #[cfg(test)]
    pub(crate) fn without_wide(&self) -> Self {
        Polyval {
            powers: None,
            fallback: self.fallback.clone(),
        }
    }

    /// POLYVAL of `first || mid || rest || last`, `rest` padded with zeros
    /// to a whole number of blocks; `first` and `last` are blocks given as
    /// little-endian integers (so that a caller assembles them in
    /// registers), `mid` whole blocks (a long frame's NH outputs, or none).
    #[inline]
    pub(crate) fn hash(
        &self,
        first: u128,
        mid: &[[u8; BLOCK]],
        rest: &[u8],
        last: u128,
    ) -> [u8; BLOCK] {
        if let Some(p) = &self.powers {
            // SAFETY: `powers` is only set when `wide::usable()` said the CPU
            // has every feature `wide::hash` needs.
            return unsafe { wide::hash(p, first, mid, rest, last) };
        }
        self.hash_fallback(first, mid, rest, last)
    }

    /// [`Polyval::hash`] with the crate (every CPU).
    pub(crate) fn hash_fallback(
        &self,
        first: u128,
        mid: &[[u8; BLOCK]],
        rest: &[u8],
        last: u128,
    ) -> [u8; BLOCK] {
        let mut h = self.fallback.clone();
        h.update(&[first.to_le_bytes().into()]);
        for b in mid {
            h.update(&[(*b).into()]);
        }
        h.update_padded(rest);
        h.update(&[last.to_le_bytes().into()]);
        h.finalize().into()
    }
}

#[cfg(target_arch = "x86_64")]
mod wide {
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    use super::{BLOCK, WIDE};

    /// True when the CPU has what the wide path uses: PCLMULQDQ, AVX2,
    /// AVX-512 (F, BW, VL) and VPCLMULQDQ.
    pub(super) fn usable() -> bool {
        static HW: OnceLock<bool> = OnceLock::new();
        *HW.get_or_init(|| {
            is_x86_feature_detected!("pclmulqdq")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("vpclmulqdq")
        })
    }

    /// POLYVAL's reduction constant: `x^127 + x^126 + x^121` in the high
    /// word, 1 in the low word.
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2")]
    fn poly() -> __m128i {
        _mm_set_epi64x(0xc200_0000_0000_0000_u64 as i64, 1)
    }

    /// `(hi * x^128 + lo) * x^-128` modulo POLYVAL's polynomial (Gueron's
    /// two-fold Montgomery reduction, as in the AES-GCM-SIV reference code).
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2")]
    fn reduce(lo: __m128i, hi: __m128i) -> __m128i {
        let p = poly();
        let t = _mm_clmulepi64_si128::<0x10>(lo, p);
        let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
        let t = _mm_clmulepi64_si128::<0x10>(lo, p);
        let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
        _mm_xor_si128(lo, hi)
    }

    /// The unreduced product's three parts (low, high and middle words) of a
    /// sum of products, and its reduction.
    #[derive(Clone, Copy)]
    struct Sum {
        lo: __m128i,
        hi: __m128i,
        mid: __m128i,
    }

    impl Sum {
        #[inline]
        #[target_feature(enable = "pclmulqdq,avx2")]
        fn zero() -> Sum {
            Sum {
                lo: _mm_setzero_si128(),
                hi: _mm_setzero_si128(),
                mid: _mm_setzero_si128(),
            }
        }

        /// Add `a * b` (carry-less, unreduced).
        #[inline]
        #[target_feature(enable = "pclmulqdq,avx2")]
        fn add(&mut self, a: __m128i, b: __m128i) {
            self.lo = _mm_xor_si128(self.lo, _mm_clmulepi64_si128::<0x00>(a, b));
            self.hi = _mm_xor_si128(self.hi, _mm_clmulepi64_si128::<0x11>(a, b));
            self.mid = _mm_xor_si128(self.mid, _mm_clmulepi64_si128::<0x01>(a, b));
            self.mid = _mm_xor_si128(self.mid, _mm_clmulepi64_si128::<0x10>(a, b));
        }

        /// The sum times `x^-128`, reduced.
        #[inline]
        #[target_feature(enable = "pclmulqdq,avx2")]
        fn reduce(self) -> __m128i {
            let lo = _mm_xor_si128(self.lo, _mm_slli_si128::<8>(self.mid));
            let hi = _mm_xor_si128(self.hi, _mm_srli_si128::<8>(self.mid));
            reduce(lo, hi)
        }
    }

    /// `dot(a, b)`.
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2")]
    fn dot(a: __m128i, b: __m128i) -> __m128i {
        let mut s = Sum::zero();
        s.add(a, b);
        s.reduce()
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2")]
    fn load(b: &[u8; BLOCK]) -> __m128i {
        // SAFETY: `b` is 16 readable bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2")]
    fn store(v: __m128i) -> [u8; BLOCK] {
        let mut b = [0u8; BLOCK];
        // SAFETY: `b` is 16 writable bytes; the store is unaligned.
        unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), v) };
        b
    }

    /// The powers of H, highest first, as 16 little-endian bytes each, and
    /// for Karatsuba each power's two halves XORed (in both halves): 1 KiB.
    #[derive(Clone)]
    pub(crate) struct Powers {
        /// `H^32, .., H^1`.
        h: [[u8; BLOCK]; WIDE],
        /// `h[i]`'s low word XOR its high word, twice.
        k: [[u8; BLOCK]; WIDE],
    }

    /// The powers of the key `h`.
    ///
    /// # Safety
    /// The CPU must have the features [`usable`] checks.
    #[target_feature(enable = "pclmulqdq,avx2")]
    pub(super) unsafe fn powers(h: &[u8; BLOCK]) -> Powers {
        let h1 = load(h);
        let mut out = Powers {
            h: [[0u8; BLOCK]; WIDE],
            k: [[0u8; BLOCK]; WIDE],
        };
        let mut p = h1;
        for k in 1..=WIDE {
            out.h[WIDE - k] = store(p);
            out.k[WIDE - k] = store(_mm_xor_si128(p, _mm_shuffle_epi32::<0x4e>(p)));
            p = dot(p, h1);
        }
        out
    }

    /// A block given as a little-endian integer.
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2")]
    fn block(v: u128) -> __m128i {
        _mm_set_epi64x((v >> 64) as u64 as i64, v as u64 as i64)
    }

    /// Fold one chunk of at most 32 blocks into `acc`: `head` (if any), the
    /// whole blocks `mem`, `partial` zero-padded (if not empty), `tail` (if
    /// any). With `b_0 .. b_(n-1)` those blocks,
    /// `acc' = dot(acc + b_0, H^n) + .. + dot(b_(n-1), H^1)`, with one
    /// reduction: with `GROUPS`, four of `mem`'s blocks per wide multiply
    /// (Karatsuba), the others one by one; without, all one by one. A short
    /// frame takes the latter: its handful of blocks then costs less latency
    /// (no 512-bit lanes to fold back together; a one-way message's frame
    /// 16 to 22 ns of sign and check instead of 35, `cargo bench -p
    /// llc-stack --bench frames -- one_way`, with `wire::auth` decrypting
    /// the received tag beside the hash).
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2,avx512f,avx512bw,avx512vl,vpclmulqdq")]
    fn fold<const GROUPS: bool>(
        acc: __m128i,
        head: Option<u128>,
        mem: &[[u8; BLOCK]],
        partial: &[u8],
        tail: Option<u128>,
        powers: &Powers,
    ) -> __m128i {
        let n = usize::from(head.is_some())
            + mem.len()
            + usize::from(!partial.is_empty())
            + usize::from(tail.is_some());
        debug_assert!(n > 0 && n <= WIDE && partial.len() < BLOCK);
        // Block i is multiplied by H^(n-i): the powers from `WIDE - n` on.
        let ph = &powers.h[WIDE - n..];
        let pk = &powers.k[WIDE - n..];
        let mut s = Sum::zero();
        // `acc` goes into the first block.
        let mut acc = Some(acc);
        let mut i = 0;
        if let Some(h) = head {
            s.add(
                _mm_xor_si128(block(h), acc.take().unwrap_or(_mm_setzero_si128())),
                load(&ph[0]),
            );
            i = 1;
        }
        let (groups, singles) = if GROUPS {
            mem.as_chunks::<4>()
        } else {
            (&[][..], mem)
        };
        if !groups.is_empty() {
            let mut lo = _mm512_setzero_si512();
            let mut hi = _mm512_setzero_si512();
            let mut mid = _mm512_setzero_si512();
            for g in groups {
                // SAFETY: 64 readable bytes at `g`, and at `ph[i..]` and
                // `pk[i..]` (i + 4 <= n blocks); unaligned loads.
                let (mut m, p, k) = unsafe {
                    (
                        _mm512_loadu_si512(g.as_ptr().cast()),
                        _mm512_loadu_si512(ph[i..].as_ptr().cast()),
                        _mm512_loadu_si512(pk[i..].as_ptr().cast()),
                    )
                };
                if let Some(a) = acc.take() {
                    m = _mm512_xor_si512(m, _mm512_zextsi128_si512(a));
                }
                let mx = _mm512_xor_si512(m, _mm512_shuffle_epi32::<0x4e>(m));
                lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128::<0x00>(m, p));
                hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128::<0x11>(m, p));
                mid = _mm512_xor_si512(mid, _mm512_clmulepi64_epi128::<0x00>(mx, k));
                i += 4;
            }
            let (l, h) = (lanes_xor(lo), lanes_xor(hi));
            s.lo = _mm_xor_si128(s.lo, l);
            s.hi = _mm_xor_si128(s.hi, h);
            s.mid = _mm_xor_si128(s.mid, _mm_xor_si128(lanes_xor(mid), _mm_xor_si128(l, h)));
        }
        for b in singles {
            let x = _mm_xor_si128(load(b), acc.take().unwrap_or(_mm_setzero_si128()));
            s.add(x, load(&ph[i]));
            i += 1;
        }
        if !partial.is_empty() {
            let mask = (1u16 << partial.len()) - 1;
            // SAFETY: the mask selects the `partial.len()` readable bytes at
            // `partial`; masked-out bytes are neither read nor faulted on
            // (AVX-512 fault suppression) and load as zero.
            let x = unsafe { _mm_maskz_loadu_epi8(mask, partial.as_ptr().cast()) };
            s.add(
                _mm_xor_si128(x, acc.take().unwrap_or(_mm_setzero_si128())),
                load(&ph[i]),
            );
            i += 1;
        }
        if let Some(t) = tail {
            s.add(
                _mm_xor_si128(block(t), acc.take().unwrap_or(_mm_setzero_si128())),
                load(&ph[i]),
            );
        }
        s.reduce()
    }

    /// XOR of a 512-bit register's four 128-bit lanes.
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2,avx512f,avx512bw,avx512vl,vpclmulqdq")]
    fn lanes_xor(z: __m512i) -> __m128i {
        let y = _mm256_xor_si256(_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64::<1>(z));
        _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y))
    }

    /// Fold one step (32 blocks, 512 bytes) into `acc`: three wide carry-less
    /// multiplies per four blocks (Karatsuba), one reduction. The four
    /// blocks that depend on `acc` come last, so the rest overlaps the
    /// previous step's reduction.
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2,avx512f,avx512bw,avx512vl,vpclmulqdq")]
    fn fold_step(acc: __m128i, step: &[[u8; BLOCK]; WIDE], powers: &Powers) -> __m128i {
        let mut lo = _mm512_setzero_si512();
        let mut hi = _mm512_setzero_si512();
        let mut mid = _mm512_setzero_si512();
        for i in (1..WIDE / 4).chain([0]) {
            // SAFETY: 64 readable bytes at `step[4 i..]`, `powers.h[4 i..]`
            // and `powers.k[4 i..]` (32 blocks each, i < 8); unaligned loads.
            let (mut m, p, k) = unsafe {
                (
                    _mm512_loadu_si512(step[4 * i..].as_ptr().cast()),
                    _mm512_loadu_si512(powers.h[4 * i..].as_ptr().cast()),
                    _mm512_loadu_si512(powers.k[4 * i..].as_ptr().cast()),
                )
            };
            if i == 0 {
                m = _mm512_xor_si512(m, _mm512_zextsi128_si512(acc));
            }
            let mx = _mm512_xor_si512(m, _mm512_shuffle_epi32::<0x4e>(m));
            lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128::<0x00>(m, p));
            hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128::<0x11>(m, p));
            mid = _mm512_xor_si512(mid, _mm512_clmulepi64_epi128::<0x00>(mx, k));
        }
        let lo = lanes_xor(lo);
        let hi = lanes_xor(hi);
        let mid = _mm_xor_si128(lanes_xor(mid), _mm_xor_si128(lo, hi));
        Sum { lo, hi, mid }.reduce()
    }

    /// POLYVAL of `first || mid || rest (zero-padded) || last`.
    ///
    /// # Safety
    /// The CPU must have the features [`usable`] checks.
    #[target_feature(enable = "pclmulqdq,avx2,avx512f,avx512bw,avx512vl,vpclmulqdq")]
    pub(super) unsafe fn hash(
        powers: &Powers,
        first: u128,
        mid: &[[u8; BLOCK]],
        rest: &[u8],
        last: u128,
    ) -> [u8; BLOCK] {
        let (blocks, partial) = rest.as_chunks::<BLOCK>();
        let zero = _mm_setzero_si128();
        if mid.is_empty() && blocks.len() + 3 <= WIDE {
            // A short frame: one chunk, one reduction, 128-bit multiplies.
            return store(fold::<false>(
                zero,
                Some(first),
                blocks,
                partial,
                Some(last),
                powers,
            ));
        }
        // For `mid`, then `rest`'s whole blocks: the blocks that do not
        // fill a step (after `first`, the first time), then the steps; then
        // the partial block and `last`.
        let mut acc = zero;
        let mut first = Some(first);
        for part in [mid, blocks] {
            let (head, steps) = part.split_at(part.len() % WIDE);
            if first.is_some() || !head.is_empty() {
                acc = fold::<true>(acc, first.take(), head, &[], None, powers);
            }
            for step in steps.as_chunks::<WIDE>().0 {
                acc = fold_step(acc, step, powers);
            }
        }
        store(fold::<true>(acc, None, &[], partial, Some(last), powers))
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod wide {
    use super::BLOCK;

    pub(super) fn usable() -> bool {
        false
    }

    #[derive(Clone)]
    pub(crate) struct Powers;

    pub(super) unsafe fn powers(_: &[u8; BLOCK]) -> Powers {
        unreachable!("the wide path is x86-64 only")
    }

    pub(super) unsafe fn hash(
        _: &Powers,
        _: u128,
        _: &[[u8; BLOCK]],
        _: &[u8],
        _: u128,
    ) -> [u8; BLOCK] {
        unreachable!("the wide path is x86-64 only")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8)
            .collect()
    }

    /// RFC 8452, appendix A: POLYVAL(H, X_1, X_2) (no third block here:
    /// `rest` is X_2, `last` a zero block would change it, so the vector is
    /// checked through the crate and then the crate against our path).
    #[test]
    fn rfc_8452_vector_through_the_fallback() {
        let h = hex16("25629347589242761d31f826ba4b757b");
        let mut p = ::polyval::Polyval::new_from_slice(&h).unwrap();
        p.update(&[
            hex16("4f4f95668c83dfb6401762bb2d01a262").into(),
            hex16("d1a24ddd2721d006bbe45f20d3c9f362").into(),
        ]);
        let want: [u8; 16] = p.finalize().into();
        assert_eq!(want, hex16("f7a3b47b846119fae5b7866cf5e5b77e"));
    }

    fn hex16(s: &str) -> [u8; 16] {
        std::array::from_fn(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
    }

    /// The wide path and the crate agree on every length around the
    /// block and step boundaries, up to a jumbo frame's.
    #[test]
    fn wide_path_matches_the_crate() {
        if !wide::usable() {
            println!("SKIPPED wide_path_matches_the_crate: no AVX-512 VPCLMULQDQ here");
            return;
        }
        let data = bytes(70_010, 1);
        for seed in 0..4u32 {
            let key = Polyval::new(&std::array::from_fn(|i| (i as u32 * 29 + seed) as u8));
            assert!(key.powers.is_some());
            let first = u128::from_le_bytes(std::array::from_fn(|i| i as u8 ^ seed as u8));
            let last = u128::from_le_bytes(std::array::from_fn(|i| 0xf0 ^ i as u8));
            let mut lens: Vec<usize> = (0..1200).collect();
            lens.extend([
                1023, 1024, 1025, 1039, 1500, 4095, 4096, 9000, 65_000, 65_535, 69_999,
            ]);
            lens.extend((1..40).map(|i| i * 1024 + 16 * i - 1));
            lens.extend([2047, 2048, 2049, 2095]);
            for len in lens {
                let rest = &data[(seed as usize)..][..len];
                assert_eq!(
                    key.hash(first, &[], rest, last),
                    key.hash_fallback(first, &[], rest, last),
                    "seed {seed} len {len}"
                );
            }
            // With blocks before `rest` (a long frame's NH outputs: up to
            // 128), around the step boundaries of both parts.
            let blocks: Vec<[u8; BLOCK]> = data[..130 * BLOCK]
                .as_chunks::<BLOCK>()
                .0
                .iter()
                .map(|b| b.map(|x| x ^ seed as u8))
                .collect();
            for mid in [0, 1, 2, 30, 31, 32, 33, 64, 100, 128, 130] {
                for len in [0, 1, 15, 16, 17, 480, 495, 496, 511, 512, 513, 1023, 1500] {
                    let rest = &data[1000 + seed as usize..][..len];
                    assert_eq!(
                        key.hash(first, &blocks[..mid], rest, last),
                        key.hash_fallback(first, &blocks[..mid], rest, last),
                        "seed {seed} mid {mid} len {len}"
                    );
                }
            }
        }
    }
}
