//! NH over GF(2)[x]: the frame MAC's first layer (`wire::auth`,
//! docs/PROTOCOL.md 3.12), which compresses each 1 KiB chunk of a long
//! frame's body to 16 bytes before POLYVAL (`sys::polyval`) hashes the
//! result.
//!
//! NH of a chunk `C` of at most 1 KiB, zero-padded to a multiple of 16 bytes
//! and read as 64-bit little-endian words `c_0 .. c_2m-1`, under the 1 KiB
//! key `K` of words `k_0 .. k_127` is
//!
//! ```text
//! NH(K, C) = (c_0 ^ k_0) * (c_1 ^ k_1) ^ (c_2 ^ k_2) * (c_3 ^ k_3) ^ .. ^ (c_2m-2 ^ k_2m-2) * (c_2m-1 ^ k_2m-1)
//! ```
//!
//! with `*` the carry-less product of two 64-bit polynomials over GF(2) (a
//! polynomial of degree at most 126, written as a 16-byte little-endian
//! block: bit i is the coefficient of x^i). This is UMAC's and Adiantum's NH
//! with XOR in place of addition and carry-less in place of integer
//! multiplication. Two chunks of one length that differ collide with
//! probability at most 2^-64 over the key (GF(2)[x] has no zero divisors;
//! docs/SECURITY.md, "Choice of MAC", says why one pass is enough there).
//!
//! Why carry-less: one 512-bit VPCLMULQDQ multiplies the two words of each
//! of its four 128-bit lanes (64 bytes, no shuffle), against one
//! VPMULUDQ per 64 bytes plus a shift to pair 32-bit words for integer NH,
//! which gives only 2^-32 per pass (docs/BENCHMARKS.md, issue 43).
//!
//! Paths: AVX-512 with VPCLMULQDQ (four lanes per instruction), PCLMULQDQ
//! (one lane), and a portable one (the carry-less product from integer
//! multiplies of operands with holes, free of secret-dependent branches and
//! table lookups). All compute the same function (tests below).

/// Bytes per chunk: NH's longest input, and the key's length.
pub(crate) const CHUNK: usize = 1024;
/// Key bytes.
pub(crate) const KEY_LEN: usize = CHUNK;
/// An output block.
pub(crate) type Block = [u8; 16];
/// Bytes per pair of words: a chunk is padded to a multiple of it.
const UNIT: usize = 16;

/// Which code computes NH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// AVX-512 and VPCLMULQDQ: four 128-bit lanes per multiply.
    Wide,
    /// PCLMULQDQ: one lane per multiply.
    Narrow,
    /// Integer arithmetic only (every CPU).
    Portable,
}

impl Path {
    /// The fastest path this CPU has.
    pub(crate) fn best() -> Path {
        [Path::Wide, Path::Narrow]
            .into_iter()
            .find(|p| p.usable())
            .unwrap_or(Path::Portable)
    }

    /// Whether this CPU can take the path.
    pub(crate) fn usable(self) -> bool {
        match self {
            Path::Wide => simd::wide_usable(),
            Path::Narrow => simd::narrow_usable(),
            Path::Portable => true,
        }
    }
}

/// An NH key and the path that uses it.
#[derive(Clone)]
pub(crate) struct Nh {
    key: Box<Key>,
    path: Path,
}

/// The key bytes, on cache-line boundaries: the wide path loads 64 bytes
/// of key per 64 bytes hashed, and a load that straddles two lines costs
/// two.
#[derive(Clone)]
#[repr(align(64))]
struct Key([u8; KEY_LEN]);

impl Nh {
    /// The key `key` on the fastest path this CPU has.
    pub(crate) fn new(key: [u8; KEY_LEN]) -> Self {
        Nh {
            key: Box::new(Key(key)),
            path: Path::best(),
        }
    }

    /// The same key on `path` (which must be usable here).
    #[cfg(test)]
    pub(crate) fn on(&self, path: Path) -> Self {
        assert!(path.usable(), "{path:?} not usable on this CPU");
        Nh {
            key: self.key.clone(),
            path,
        }
    }

    /// NH of each [`CHUNK`]-byte chunk of `bytes`, the last one possibly
    /// shorter, into `out` (which must hold one block per chunk); returns
    /// the number of chunks.
    #[inline]
    pub(crate) fn hash(&self, bytes: &[u8], out: &mut [Block]) -> usize {
        let n = bytes.len().div_ceil(CHUNK);
        let out = &mut out[..n];
        let key = &self.key.0;
        match self.path {
            // SAFETY: `Path::Wide` is only chosen (`best`, `on`) where
            // `simd::wide_usable()` said the CPU has its features.
            Path::Wide => unsafe { simd::wide(key, bytes, out) },
            // SAFETY: likewise with `simd::narrow_usable()`.
            Path::Narrow => unsafe { simd::narrow(key, bytes, out) },
            Path::Portable => {
                for (c, o) in bytes.chunks(CHUNK).zip(out) {
                    *o = portable(key, c).to_le_bytes();
                }
            }
        }
        n
    }

    /// [`Nh::hash`] of `a || b` where each lies, without putting them
    /// together (a gathered frame: the payload's start in the frame's
    /// head, the rest in the message): the chunk that straddles the two is
    /// summed from its part in `a`, the one 16-byte unit that straddles
    /// (assembled), and its part in `b` (NH is a sum over units).
    pub(crate) fn hash_joined(&self, a: &[u8], b: &[u8], out: &mut [Block]) -> usize {
        let whole = a.len() / CHUNK * CHUNK;
        let mut n = self.hash(&a[..whole], out);
        let a = &a[whole..];
        if a.is_empty() || b.is_empty() {
            return n + self.hash(if a.is_empty() { b } else { a }, &mut out[n..]);
        }
        let take = b.len().min(CHUNK - a.len());
        let (mut b_in, b_rest) = b.split_at(take);
        let in_a = a.len() / UNIT * UNIT;
        let mut sum = self.part(0, &a[..in_a]);
        let mut at = in_a;
        if in_a < a.len() {
            let mut u = [0u8; UNIT];
            let from_a = a.len() - in_a;
            let from_b = b_in.len().min(UNIT - from_a);
            u[..from_a].copy_from_slice(&a[in_a..]);
            u[from_a..from_a + from_b].copy_from_slice(&b_in[..from_b]);
            sum ^= self.part(at, &u[..from_a + from_b]);
            at += UNIT;
            b_in = &b_in[from_b..];
        }
        sum ^= self.part(at, b_in);
        out[n] = sum.to_le_bytes();
        n += 1;
        n + self.hash(b_rest, &mut out[n..])
    }

    /// The sum over the 16-byte units of `bytes` (the last one zero-padded)
    /// under the key from byte `at` of a chunk (`at` a multiple of 16, `at
    /// + bytes.len() <= CHUNK`).
    fn part(&self, at: usize, bytes: &[u8]) -> u128 {
        assert!(
            at.is_multiple_of(UNIT) && at + bytes.len() <= CHUNK,
            "NH part out of its chunk"
        );
        let key = &self.key.0[at..];
        match self.path {
            // SAFETY: as in `hash`; `key` holds `bytes.len()` rounded up to
            // 16 (checked above: `CHUNK` is a multiple of 16).
            Path::Wide => unsafe { simd::wide_part(key, bytes) },
            // SAFETY: likewise.
            Path::Narrow => unsafe { simd::narrow_part(key, bytes) },
            Path::Portable => portable(key, bytes),
        }
    }
}

/// A little-endian word of `b` at byte `at`.
#[inline(always)]
fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The 16 bytes of `c` from `at`, zero-padded past its end.
#[inline(always)]
fn unit(c: &[u8], at: usize) -> [u8; UNIT] {
    let mut u = [0u8; UNIT];
    let end = c.len().min(at + UNIT);
    u[..end - at].copy_from_slice(&c[at..end]);
    u
}

/// The portable path: the sum over the units of `bytes` (the last one
/// zero-padded) under `key` (which holds them).
fn portable(key: &[u8], bytes: &[u8]) -> u128 {
    let mut acc = 0u128;
    for at in (0..bytes.len()).step_by(UNIT) {
        let u = unit(bytes, at);
        acc ^= clmul(word(&u, 0) ^ word(key, at), word(&u, 8) ^ word(key, at + 8));
    }
    acc
}

/// Bits `i, i + 5, i + 10, ..` of a 64-bit word, for `i` in 0..5.
const HOLES_64: [u64; 5] = holes::<5>();
/// The same classes over 128 bits.
const HOLES_128: [u128; 5] = {
    let mut m = [0u128; 5];
    let mut bit = 0;
    while bit < 128 {
        m[bit % 5] |= 1 << bit;
        bit += 1;
    }
    m
};

const fn holes<const N: usize>() -> [u64; N] {
    let mut m = [0u64; N];
    let mut bit = 0;
    while bit < 64 {
        m[bit % N] |= 1 << bit;
        bit += 1;
    }
    m
}

/// The carry-less product of `a` and `b` from 25 integer multiplies. Each
/// operand is split into five classes of bits five positions apart (at most
/// 13 bits each); in the integer product of two classes, each position of
/// the product's class sums at most 13 one-bit terms, whose carries stay
/// within the four positions above it, so the bits of that class are the
/// carry-less product's (the "multiplication with holes" of constant-time
/// GHASH implementations, with five classes because 64-bit operands have
/// too many bits per class for four). No branch or table depends on the
/// operands.
#[inline]
pub(crate) fn clmul(a: u64, b: u64) -> u128 {
    let x: [u128; 5] = std::array::from_fn(|i| u128::from(a & HOLES_64[i]));
    let y: [u128; 5] = std::array::from_fn(|i| u128::from(b & HOLES_64[i]));
    let mut z = 0u128;
    for (c, mask) in HOLES_128.iter().enumerate() {
        let mut s = 0u128;
        for (i, xi) in x.iter().enumerate() {
            s ^= xi.wrapping_mul(y[(c + 5 - i) % 5]);
        }
        z |= s & mask;
    }
    z
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    use super::{unit, Block, CHUNK, KEY_LEN, UNIT};

    /// True when the CPU has what [`wide`] uses: PCLMULQDQ, AVX2, AVX-512
    /// (F, BW, VL) and VPCLMULQDQ (as `sys::polyval`'s wide path).
    pub(super) fn wide_usable() -> bool {
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

    /// True when the CPU has PCLMULQDQ (and SSE2, which x86-64 always has).
    pub(super) fn narrow_usable() -> bool {
        is_x86_feature_detected!("pclmulqdq")
    }

    /// XOR of a 512-bit register's four 128-bit lanes.
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2,avx512f,avx512bw,avx512vl,vpclmulqdq")]
    fn lanes_xor(z: __m512i) -> __m128i {
        let y = _mm256_xor_si256(_mm512_castsi512_si256(z), _mm512_extracti64x4_epi64::<1>(z));
        _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y))
    }

    /// The product of each lane's two words (the chunk's word pairs lie in
    /// the lanes) of `m ^ k`.
    #[inline]
    #[target_feature(enable = "pclmulqdq,avx2,avx512f,avx512bw,avx512vl,vpclmulqdq")]
    fn products(m: __m512i, k: __m512i) -> __m512i {
        let x = _mm512_xor_si512(m, k);
        _mm512_clmulepi64_epi128::<0x01>(x, x)
    }

    /// NH with four lanes per carry-less multiply: per 128 bytes, two XORs
    /// with the key, two multiplies and one three-way XOR into the sum; a
    /// chunk's last 64 bytes or less are loaded masked (zeros past its end,
    /// and past the end of its last 16-byte unit in the key too, so that
    /// those lanes multiply zero by zero).
    ///
    /// # Safety
    /// The CPU must have the features [`wide_usable`] checks.
    #[target_feature(enable = "pclmulqdq,avx2,avx512f,avx512bw,avx512vl,vpclmulqdq")]
    pub(super) unsafe fn wide(key: &[u8; KEY_LEN], bytes: &[u8], out: &mut [Block]) {
        let (whole, tail) = bytes.as_chunks::<CHUNK>();
        let (out_whole, out_tail) = out.split_at_mut(whole.len());
        if !whole.is_empty() {
            // The 1 KiB key in 16 of the 32 registers for all whole chunks:
            // per 64 bytes one load (the data's) instead of two.
            let k: [__m512i; CHUNK / 64] = std::array::from_fn(|i| {
                // SAFETY: `64 * i + 64 <= KEY_LEN`; unaligned load.
                unsafe { _mm512_loadu_si512(key.as_ptr().add(64 * i).cast()) }
            });
            for (c, o) in whole.iter().zip(out_whole) {
                let c_at = c.as_ptr();
                let mut s = _mm512_setzero_si512();
                for i in (0..CHUNK / 64).step_by(2) {
                    // SAFETY: `64 * i + 128 <= CHUNK`: 128 readable bytes at
                    // `c[64 * i..]`; unaligned loads.
                    let (m, n) = unsafe {
                        (
                            _mm512_loadu_si512(c_at.add(64 * i).cast()),
                            _mm512_loadu_si512(c_at.add(64 * i + 64).cast()),
                        )
                    };
                    // 0x96: a ^ b ^ c.
                    s = _mm512_ternarylogic_epi64::<0x96>(
                        s,
                        products(m, k[i]),
                        products(n, k[i + 1]),
                    );
                }
                // SAFETY: `o` is 16 writable bytes; unaligned store.
                unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), lanes_xor(s)) };
            }
        }
        if !tail.is_empty() {
            // SAFETY: the caller's features; the key holds a chunk.
            let sum = unsafe { wide_part(key, tail) };
            out_tail[0] = sum.to_le_bytes();
        }
    }

    /// The sum over the units of `bytes` under `key` (one chunk's part, the
    /// key from the part's start): four lanes per multiply, the last 64
    /// bytes or less loaded masked (zeros past the end, and past the end of
    /// the last 16-byte unit in the key too, so that those lanes multiply
    /// zero by zero).
    ///
    /// # Safety
    /// The CPU must have the features [`wide_usable`] checks, and `key` must
    /// hold `bytes.len()` rounded up to 16 bytes.
    #[target_feature(enable = "pclmulqdq,avx2,avx512f,avx512bw,avx512vl,vpclmulqdq")]
    pub(super) unsafe fn wide_part(key: &[u8], bytes: &[u8]) -> u128 {
        debug_assert!(key.len() >= bytes.len().div_ceil(UNIT) * UNIT);
        let (c_at, k_at) = (bytes.as_ptr(), key.as_ptr());
        let mut s = _mm512_setzero_si512();
        let mut at = 0;
        while at < bytes.len() {
            let left = bytes.len() - at;
            let (m, k) = if left >= 64 {
                // SAFETY: 64 readable bytes at `bytes[at..]` and `key[at..]`
                // (`at + 64 <= bytes.len() <= key.len()`); unaligned loads.
                unsafe {
                    (
                        _mm512_loadu_si512(c_at.add(at).cast()),
                        _mm512_loadu_si512(k_at.add(at).cast()),
                    )
                }
            } else {
                let data = (1u64 << left) - 1;
                let units = left.div_ceil(UNIT) * UNIT;
                let keyed = if units == 64 {
                    u64::MAX
                } else {
                    (1u64 << units) - 1
                };
                // SAFETY: masked loads read only the bytes their mask
                // selects: `left` bytes of `bytes` from `at`, and `units`
                // bytes of the key, which holds `bytes.len()` rounded up to
                // 16 (the caller's promise).
                unsafe {
                    (
                        _mm512_maskz_loadu_epi8(data, c_at.add(at).cast()),
                        _mm512_maskz_loadu_epi8(keyed, k_at.add(at).cast()),
                    )
                }
            };
            s = _mm512_xor_si512(s, products(m, k));
            at += 64;
        }
        let mut o = [0u8; 16];
        // SAFETY: `o` is 16 writable bytes; unaligned store.
        unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), lanes_xor(s)) };
        u128::from_le_bytes(o)
    }

    /// NH with one lane per multiply (x86-64 CPUs without AVX-512).
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ ([`narrow_usable`]).
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) unsafe fn narrow(key: &[u8; KEY_LEN], bytes: &[u8], out: &mut [Block]) {
        for (c, o) in bytes.chunks(CHUNK).zip(out) {
            // SAFETY: the caller's features; the key holds a chunk.
            *o = unsafe { narrow_part(key, c) }.to_le_bytes();
        }
    }

    /// [`wide_part`] with one lane per multiply.
    ///
    /// # Safety
    /// The CPU must have PCLMULQDQ ([`narrow_usable`]), and `key` must hold
    /// `bytes.len()` rounded up to 16 bytes.
    #[target_feature(enable = "pclmulqdq,sse2")]
    pub(super) unsafe fn narrow_part(key: &[u8], bytes: &[u8]) -> u128 {
        let mut s = [_mm_setzero_si128(); 4];
        let whole = bytes.len() / UNIT * UNIT;
        for at in (0..bytes.len()).step_by(UNIT) {
            let padded;
            let m = if at < whole {
                &bytes[at..at + UNIT]
            } else {
                padded = unit(bytes, at);
                &padded[..]
            };
            let k = &key[at..at + UNIT];
            // SAFETY: `m` and `k` hold 16 readable bytes; unaligned loads.
            let x = unsafe {
                _mm_xor_si128(
                    _mm_loadu_si128(m.as_ptr().cast()),
                    _mm_loadu_si128(k.as_ptr().cast()),
                )
            };
            let lane = &mut s[at / UNIT % 4];
            *lane = _mm_xor_si128(*lane, _mm_clmulepi64_si128::<0x01>(x, x));
        }
        let s = _mm_xor_si128(_mm_xor_si128(s[0], s[1]), _mm_xor_si128(s[2], s[3]));
        let mut o = [0u8; 16];
        // SAFETY: `o` is 16 writable bytes; unaligned store.
        unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), s) };
        u128::from_le_bytes(o)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod simd {
    use super::{Block, KEY_LEN};

    pub(super) fn wide_usable() -> bool {
        false
    }

    pub(super) fn narrow_usable() -> bool {
        false
    }

    pub(super) unsafe fn wide(_: &[u8; KEY_LEN], _: &[u8], _: &mut [Block]) {
        unreachable!("x86-64 only")
    }

    pub(super) unsafe fn narrow(_: &[u8; KEY_LEN], _: &[u8], _: &mut [Block]) {
        unreachable!("x86-64 only")
    }

    pub(super) unsafe fn wide_part(_: &[u8], _: &[u8]) -> u128 {
        unreachable!("x86-64 only")
    }

    pub(super) unsafe fn narrow_part(_: &[u8], _: &[u8]) -> u128 {
        unreachable!("x86-64 only")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random byte stream (xorshift64*).
    fn bytes(n: usize, seed: u64) -> Vec<u8> {
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

    /// The carry-less product bit by bit, as its definition reads.
    fn clmul_by_bits(a: u64, b: u64) -> u128 {
        (0..64)
            .filter(|i| b >> i & 1 == 1)
            .fold(0u128, |z, i| z ^ u128::from(a) << i)
    }

    #[test]
    fn clmul_matches_its_definition() {
        let r = bytes(16 * 4000, 7);
        let mut pairs: Vec<(u64, u64)> = r
            .chunks_exact(16)
            .map(|p| (word(p, 0), word(p, 8)))
            .collect();
        pairs.extend([
            (0, 0),
            (1, 1),
            (u64::MAX, u64::MAX),
            (u64::MAX, 1),
            (1 << 63, 1 << 63),
            (0x8000_0000_0000_0001, u64::MAX),
        ]);
        for (a, b) in pairs {
            assert_eq!(clmul(a, b), clmul_by_bits(a, b), "{a:#x} * {b:#x}");
        }
        // (x + 1)^2 = x^2 + 1 and x^63 * x^63 = x^126.
        assert_eq!(clmul(3, 3), 5);
        assert_eq!(clmul(1 << 63, 1 << 63), 1 << 126);
    }

    /// Every path this CPU has gives the portable path's blocks, on random
    /// keys and inputs of every length up to three chunks and a half (each
    /// masked tail, each partial unit).
    #[test]
    fn paths_agree() {
        let paths: Vec<Path> = [Path::Wide, Path::Narrow]
            .into_iter()
            .filter(|p| p.usable())
            .collect();
        if paths.is_empty() {
            println!("SKIPPED nh paths_agree: no PCLMULQDQ here");
            return;
        }
        for seed in 0..3 {
            let key = Nh::new(bytes(KEY_LEN, seed).try_into().unwrap()).on(Path::Portable);
            let data = bytes(CHUNK * 9, 100 + seed);
            for len in (0..=3 * CHUNK + CHUNK / 2).chain([9 * CHUNK]) {
                let mut want = vec![[0u8; 16]; 9];
                let n = key.hash(&data[..len], &mut want);
                assert_eq!(n, len.div_ceil(CHUNK));
                for &p in &paths {
                    let mut got = vec![[0u8; 16]; 9];
                    key.on(p).hash(&data[..len], &mut got);
                    assert_eq!(got, want, "{p:?}, seed {seed}, length {len}");
                }
            }
        }
    }

    /// Two pieces hash as their concatenation, wherever the cut falls
    /// (inside a unit, on a unit or chunk boundary, at either end), on
    /// every path.
    #[test]
    fn pieces_hash_as_one() {
        let data = bytes(3 * CHUNK + 100, 5);
        let key = Nh::new(bytes(KEY_LEN, 6).try_into().unwrap());
        let paths = [Path::Wide, Path::Narrow, Path::Portable];
        for nh in paths.into_iter().filter(|p| p.usable()).map(|p| key.on(p)) {
            for len in [0, 1, 40, CHUNK, CHUNK + 9, 3 * CHUNK + 100] {
                let mut want = vec![[0u8; 16]; 5];
                let n = nh.hash(&data[..len], &mut want);
                for cut in [0, 1, 7, 16, 17, 100, CHUNK - 1, CHUNK, CHUNK + 5, len]
                    .into_iter()
                    .filter(|&c| c <= len)
                {
                    let (a, b) = data[..len].split_at(cut);
                    let mut got = vec![[0u8; 16]; 5];
                    assert_eq!(nh.hash_joined(a, b, &mut got), n, "{len}/{cut}");
                    assert_eq!(got, want, "{:?} {len}/{cut}", nh.path);
                }
            }
        }
    }

    /// NH checked on its definition: a chunk equal to its key hashes to
    /// zero, one word changed in a pair changes the output by that word's
    /// difference times the pair's other word (XOR key), and a short chunk
    /// is its zero-padding to 16 bytes.
    #[test]
    fn nh_by_definition() {
        let key: [u8; KEY_LEN] = bytes(KEY_LEN, 3).try_into().unwrap();
        let nh = Nh::new(key);
        let mut out = [[0u8; 16]; 1];
        nh.hash(&key, &mut out);
        assert_eq!(out[0], [0; 16]);
        let mut other = key;
        other[8] ^= 0x01; // c_1 ^= 1: the product becomes (c_0 ^ k_0) * 1 = 0
        nh.hash(&other, &mut out);
        assert_eq!(out[0], [0; 16]);
        other[0] ^= 0x02; // c_0 ^= x: (x) * (1)
        nh.hash(&other, &mut out);
        assert_eq!(u128::from_le_bytes(out[0]), 2);
        // 9 bytes are a unit padded with 7 zeros: (c_0 ^ k_0) * (c_1 ^ k_1)
        // with c_1 = the ninth byte.
        let short = [5u8; 9];
        nh.hash(&short, &mut out);
        let c0 = u64::from_le_bytes([5; 8]) ^ word(&key, 0);
        let c1 = 5 ^ word(&key, 8);
        assert_eq!(u128::from_le_bytes(out[0]), clmul(c0, c1));
    }
}
