//! Local hashes of four 16-token blocks at once, in the four 64-bit lanes of an AVX2 register.
//!
//! A 16-token block is 64 bytes, which XXH3 hashes on its 17-to-128-byte path: four 16-byte
//! *mixes*, each the 64×64→128-bit product of two input words (each XORed with a word of the
//! secret and the seed) folded to 64 bits, summed with the length times a prime, then the
//! avalanche. The scalar hash spends four 128-bit multiplies per block on the same multiplier
//! the sequence-hash chain waits on; here the four mixes of a block share one vector register
//! (the 128-bit products assembled from 32-bit ones), and four blocks are hashed together, so
//! a prompt's local hashes run on the vector unit beside the chain. The result is bit for bit
//! `xxh3_64_with_seed` of the block's little-endian bytes (tested against it).
//!
//! Used only where the CPU has AVX2 (checked at run time) and only for 16-token blocks; every
//! other case takes the scalar hash.

use super::xxh3_block::xxh3_secret_word;

/// Tokens per block this path hashes.
pub(crate) const LANE_BLOCK_TOKENS: usize = 16;

/// Blocks hashed together, one per lane.
pub(crate) const LANES: usize = 4;

/// Tokens of the four blocks hashed together.
pub(crate) const GROUP_TOKENS: usize = LANES * LANE_BLOCK_TOKENS;

/// Hashes 16-token blocks four at a time under one seed, on a CPU with AVX2.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LocalHashLanes {
    /// The seed of the hashes. Each call derives the word keys from it (two vector additions):
    /// keys built by the caller and passed in memory would be stored as words and loaded as
    /// vectors, a load the CPU cannot forward from those stores, which stalled every call.
    seed: u64,
}

impl LocalHashLanes {
    /// The lanes for blocks of `block_size` tokens hashed under `seed`, when this CPU can run
    /// them and the blocks are 16 tokens; `None` otherwise (hash each block with the scalar
    /// function).
    pub(crate) fn for_blocks(block_size: usize, seed: u64) -> Option<Self> {
        (block_size == LANE_BLOCK_TOKENS && avx2_available()).then_some(Self { seed })
    }

    /// Writes the local hashes of the four 16-token blocks `tokens` holds to `out`, in order.
    #[inline]
    pub(crate) fn hash(&self, tokens: &[u32; GROUP_TOKENS], out: &mut [u64; LANES]) {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: a `LocalHashLanes` exists only where `avx2_available()` said so.
            unsafe { avx2::hash_four(tokens, self.seed, out) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (tokens, out);
            unreachable!("local hash lanes are only built on x86_64 with AVX2")
        }
    }
}

/// The secret words each of a 64-byte input's eight words is keyed with, in word order:
/// XXH3 mixes words (0, 1) with secret words (0, 1), words (6, 7) with (2, 3), words (2, 3)
/// with (4, 5) and words (4, 5) with (6, 7). The first word of each pair is XORed with its
/// secret word plus the seed, the second with its secret word minus the seed.
const WORD_SECRETS: [u64; 8] = [
    xxh3_secret_word(0),
    xxh3_secret_word(1),
    xxh3_secret_word(4),
    xxh3_secret_word(5),
    xxh3_secret_word(6),
    xxh3_secret_word(7),
    xxh3_secret_word(2),
    xxh3_secret_word(3),
];

/// Whether this CPU runs AVX2 (std caches the answer).
fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{GROUP_TOKENS, LANE_BLOCK_TOKENS, LANES, WORD_SECRETS};
    use crate::kv::xxh3_block::XXH3_AVALANCHE as AVALANCHE;
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi64, _mm256_and_si256, _mm256_loadu_si256, _mm256_mul_epu32,
        _mm256_or_si256, _mm256_permute2x128_si256, _mm256_set_epi64x, _mm256_set1_epi64x,
        _mm256_slli_epi64, _mm256_srli_epi64, _mm256_storeu_si256, _mm256_unpackhi_epi64,
        _mm256_unpacklo_epi64, _mm256_xor_si256,
    };

    /// XXH3's `PRIME64_1` times the input length (64 bytes).
    const LENGTH_TERM: u64 = 64u64.wrapping_mul(0x9E37_79B1_85EB_CA87);

    /// Per lane, the 64×64→128-bit product of `a` and `b` with its halves XORed (XXH3's
    /// `mul128_fold64`), from four 32×32→64-bit products.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn fold_product(a: __m256i, b: __m256i) -> __m256i {
        let low32 = _mm256_set1_epi64x(0xFFFF_FFFF);
        let a_high = _mm256_srli_epi64::<32>(a);
        let b_high = _mm256_srli_epi64::<32>(b);
        let low_low = _mm256_mul_epu32(a, b);
        let low_high = _mm256_mul_epu32(a, b_high);
        let high_low = _mm256_mul_epu32(a_high, b);
        let high_high = _mm256_mul_epu32(a_high, b_high);
        // The high half as Hacker's Delight's `mulhu` assembles it (no sum can overflow):
        // the middle column in two steps, each passing its carries up.
        let first = _mm256_add_epi64(high_low, _mm256_srli_epi64::<32>(low_low));
        let second = _mm256_add_epi64(_mm256_and_si256(first, low32), low_high);
        let high = _mm256_add_epi64(
            _mm256_add_epi64(high_high, _mm256_srli_epi64::<32>(first)),
            _mm256_srli_epi64::<32>(second),
        );
        let low = _mm256_or_si256(
            _mm256_slli_epi64::<32>(second),
            _mm256_and_si256(low_low, low32),
        );
        _mm256_xor_si256(low, high)
    }

    /// One block's four mixes, one per lane: its words 0..4 and 4..8 keyed, then paired as
    /// XXH3 pairs them ((0, 1), (4, 5), (2, 3), (6, 7) after the unpack).
    #[target_feature(enable = "avx2")]
    #[inline]
    fn block_mixes(words: [__m256i; 2], keys: [__m256i; 2]) -> __m256i {
        let low = _mm256_xor_si256(words[0], keys[0]);
        let high = _mm256_xor_si256(words[1], keys[1]);
        fold_product(
            _mm256_unpacklo_epi64(low, high),
            _mm256_unpackhi_epi64(low, high),
        )
    }

    /// Per lane, `x * AVALANCHE` modulo 2^64 from 32×32→64-bit products.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn times_avalanche(x: __m256i) -> __m256i {
        let low = _mm256_set1_epi64x(AVALANCHE as i64);
        let high = _mm256_set1_epi64x((AVALANCHE >> 32) as i64);
        let cross = _mm256_add_epi64(
            _mm256_mul_epu32(x, high),
            _mm256_mul_epu32(_mm256_srli_epi64::<32>(x), low),
        );
        _mm256_add_epi64(_mm256_mul_epu32(x, low), _mm256_slli_epi64::<32>(cross))
    }

    /// Block `n` (< 4) of `tokens`, its eight words in two registers.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn block_words(tokens: &[u32; GROUP_TOKENS], n: usize) -> [__m256i; 2] {
        let block = &tokens[n * LANE_BLOCK_TOKENS..(n + 1) * LANE_BLOCK_TOKENS];
        let (low, high) = block.split_at(LANE_BLOCK_TOKENS / 2);
        // SAFETY: each load reads the 32 bytes of an 8-token half of the block.
        unsafe {
            [
                _mm256_loadu_si256(low.as_ptr().cast::<__m256i>()),
                _mm256_loadu_si256(high.as_ptr().cast::<__m256i>()),
            ]
        }
    }

    /// The local hashes of the four 16-token blocks in `tokens` under the word `keys`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn hash_four(
        tokens: &[u32; GROUP_TOKENS],
        seed: u64,
        out: &mut [u64; LANES],
    ) {
        let (secrets_low, secrets_high) = WORD_SECRETS.split_at(4);
        // The seed added to the first word of each pair, subtracted from the second.
        let seeds = _mm256_set_epi64x(
            seed.wrapping_neg() as i64,
            seed as i64,
            seed.wrapping_neg() as i64,
            seed as i64,
        );
        // SAFETY: each load reads the 32 bytes of four secret words.
        let keys = unsafe {
            [
                _mm256_add_epi64(
                    _mm256_loadu_si256(secrets_low.as_ptr().cast::<__m256i>()),
                    seeds,
                ),
                _mm256_add_epi64(
                    _mm256_loadu_si256(secrets_high.as_ptr().cast::<__m256i>()),
                    seeds,
                ),
            ]
        };
        let m0 = block_mixes(block_words(tokens, 0), keys);
        let m1 = block_mixes(block_words(tokens, 1), keys);
        let m2 = block_mixes(block_words(tokens, 2), keys);
        let m3 = block_mixes(block_words(tokens, 3), keys);
        // Sum each block's four mixes: pairwise within 128-bit halves, then across them.
        let pairs01 =
            _mm256_add_epi64(_mm256_unpacklo_epi64(m0, m1), _mm256_unpackhi_epi64(m0, m1));
        let pairs23 =
            _mm256_add_epi64(_mm256_unpacklo_epi64(m2, m3), _mm256_unpackhi_epi64(m2, m3));
        let sums = _mm256_add_epi64(
            _mm256_permute2x128_si256::<0x20>(pairs01, pairs23),
            _mm256_permute2x128_si256::<0x31>(pairs01, pairs23),
        );
        let mut acc = _mm256_add_epi64(sums, _mm256_set1_epi64x(LENGTH_TERM as i64));
        acc = _mm256_xor_si256(acc, _mm256_srli_epi64::<37>(acc));
        acc = times_avalanche(acc);
        acc = _mm256_xor_si256(acc, _mm256_srli_epi64::<32>(acc));
        // SAFETY: `out` is 32 writable bytes.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast::<__m256i>(), acc) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use xxhash_rust::xxh3::xxh3_64_with_seed;

    fn bytes(tokens: &[u32]) -> Vec<u8> {
        tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
    }

    #[test]
    fn equals_xxh3_of_each_block_for_any_seed_and_tokens() {
        if !avx2_available() {
            eprintln!("skipped: this CPU has no AVX2, so the lanes are never used");
            return;
        }
        let random = SplitMix64::seeded(0x9E37_79B9_7F4A_7C15);
        let next = || random.next_u64();
        let seeds = [0, 1, 1337, u64::MAX, 1 << 63, next(), next()];
        for seed in seeds {
            let lanes = LocalHashLanes::for_blocks(16, seed).expect("AVX2 is available");
            for round in 0..2_000 {
                // Edge words (all zeros, all ones) as well as random ones.
                let tokens: [u32; GROUP_TOKENS] = std::array::from_fn(|_| match round % 3 {
                    0 => next() as u32,
                    1 => u32::MAX - (next() % 3) as u32,
                    _ => (next() % 3) as u32,
                });
                let mut hashes = [0; LANES];
                lanes.hash(&tokens, &mut hashes);
                for (n, hash) in hashes.iter().enumerate() {
                    let block = &tokens[n * 16..n * 16 + 16];
                    assert_eq!(*hash, xxh3_64_with_seed(&bytes(block), seed), "seed {seed}");
                }
            }
        }
    }

    #[test]
    fn only_sixteen_token_blocks_take_the_lanes() {
        assert!(LocalHashLanes::for_blocks(32, 1337).is_none());
        assert!(LocalHashLanes::for_blocks(15, 1337).is_none());
        assert_eq!(
            LocalHashLanes::for_blocks(16, 1337).is_some(),
            avx2_available()
        );
    }
}
