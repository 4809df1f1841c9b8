//! A small seeded random generator (SplitMix64).
//!
//! The protocol draws cookies and initial sequence numbers from it, and the
//! fault injector draws its decisions from it. A home-grown generator keeps a
//! failing simulation seed replayable across dependency upgrades; real
//! endpoints seed it from the OS ([`Rng::from_entropy`]).

/// SplitMix64: tiny, fast, statistically fine for simulation and for values
/// that only need to be unpredictable to an off-path observer.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator that replays the same sequence for the same seed.
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// A generator seeded from the operating system's random source.
    pub fn from_entropy() -> Self {
        let mut seed = [0u8; 8];
        // getrandom never fails for 8 bytes on Linux >= 3.17; fall back to the clock.
        if rand::RngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut seed).is_err() {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            seed = (t ^ std::process::id() as u64).to_le_bytes();
        }
        Rng::new(u64::from_le_bytes(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A non-zero 32-bit value (cookies use 0 for "unknown").
    pub fn nonzero_u32(&mut self) -> u32 {
        loop {
            let v = self.next_u32();
            if v != 0 {
                return v;
            }
        }
    }

    /// True with probability `p` (0.0..=1.0).
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64) < p * (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replayable_and_roughly_fair() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        assert_eq!(a.next_u64(), b.next_u64());
        let hits = (0..100_000).filter(|_| a.chance(0.2)).count();
        assert!((19_000..21_000).contains(&hits), "{hits}");
        assert!((0..1000).all(|_| a.below(10) < 10));
        assert!(!a.chance(0.0));
        assert!(a.chance(1.0));
    }
}
