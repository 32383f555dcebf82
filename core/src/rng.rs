//! The small seedable random source of the router: the blind `random` mode, the catalog's
//! pickers and the replay's generated workloads draw from it.
//!
//! SplitMix64 (Steele, Lea and Flood, 2014): one 64-bit counter advanced by a fixed odd
//! increment, with a bijective mixer on the output. It passes BigCrush, needs no dependency,
//! and its whole state is one `AtomicU64`, so a policy shared by every booking thread draws
//! without a lock. With a fixed seed and one booking thread the sequence is reproducible.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A thread-safe SplitMix64 generator.
#[derive(Debug)]
pub struct SplitMix64 {
    state: AtomicU64,
}

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }

    /// A generator seeded from the process's random hashing keys (different in every run).
    pub fn from_entropy() -> Self {
        Self::seeded(RandomState::new().hash_one(0x5eed_u64))
    }

    /// The generator seeded with `seed`, or from entropy when `seed` is `None`.
    pub fn new(seed: Option<u64>) -> Self {
        seed.map_or_else(Self::from_entropy, Self::seeded)
    }

    /// The next 64 random bits.
    pub fn next_u64(&self) -> u64 {
        let state = self
            .state
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in `[0, 1)`.
    pub fn next_f64(&self) -> f64 {
        // The top 53 bits fill an f64 mantissa exactly.
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform index in `0..n` (`0` when `n` is 0). Multiply-shift: the bias is below 2⁻⁵⁰
    /// for any `n` a router sees.
    pub fn below(&self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// An integer in `low..=high` (`low` when `high <= low`), by remainder: the bias is below
    /// `(high - low + 1) / 2⁶⁴`, fine for generated workloads.
    pub fn range(&self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low + 1)
    }

    /// An exponentially distributed value with the given mean.
    pub fn exponential(&self, mean: f64) -> f64 {
        // 1 - u is in (0, 1], so the logarithm is finite.
        -(1.0 - self.next_f64()).ln() * mean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // First outputs of the reference C implementation seeded with 0.
        let rng = SplitMix64::seeded(0);
        assert_eq!(rng.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(rng.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(rng.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn same_seed_same_sequence() {
        let a = SplitMix64::seeded(42);
        let b = SplitMix64::seeded(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn floats_and_indices_stay_in_range() {
        let rng = SplitMix64::seeded(7);
        let mut seen = [0usize; 5];
        for _ in 0..10_000 {
            let x = rng.next_f64();
            assert!((0.0..1.0).contains(&x));
            seen[rng.below(5)] += 1;
        }
        // Each count is Binomial(10000, 1/5): mean 2,000, σ = √(10000 · 1/5 · 4/5) = 40; a uniform
        // `below` stays within 5σ (200) except with probability below 10⁻⁶.
        assert!(
            seen.iter().all(|&count| count.abs_diff(2_000) <= 200),
            "{seen:?}"
        );
        assert_eq!(rng.below(0), 0);
    }

    #[test]
    fn ranges_and_exponentials_hold() {
        let a = SplitMix64::seeded(7);
        assert_ne!(
            SplitMix64::seeded(7).next_u64(),
            SplitMix64::seeded(8).next_u64()
        );
        for _ in 0..1000 {
            let x = a.range(3, 9);
            assert!((3..=9).contains(&x));
            assert!(a.exponential(2.0) >= 0.0);
        }
        assert_eq!(a.range(5, 5), 5);
        assert_eq!(a.range(5, 2), 5);
    }
}
