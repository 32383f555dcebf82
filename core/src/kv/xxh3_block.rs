//! XXH3 as the router applies it to one block, as upstream does: the seed a request's local
//! hashes use ([`salt_seed`]), a block's local hash of its tokens ([`token_hash`]) and the
//! link that chains it to its parent ([`next_sequence_hash`]). [`hashing`](super::hashing)
//! builds a prompt's hashes from these; the index and the four-lane hasher use them directly.

use crate::block_identity::{LocalBlockHash, SequenceHash};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The xxh3 seed of unsalted local hashes and of every sequence-hash link (upstream's seed).
pub const HASH_SEED: u64 = 1337;

/// The seed of a request's local block hashes: [`HASH_SEED`], plus (wrapping)
/// `xxh3_64(lora_name, seed 0)` for a non-empty `lora_name`, plus `xxh3_64(cache_namespace,
/// seed 1)` for a non-empty cache namespace (upstream `compute_salt_hash`).
pub fn salt_seed(lora_name: Option<&str>, cache_namespace: Option<&str>) -> u64 {
    let mut seed = HASH_SEED;
    if let Some(name) = lora_name.filter(|name| !name.is_empty()) {
        seed = seed.wrapping_add(xxh3_64_with_seed(name.as_bytes(), 0));
    }
    if let Some(namespace) = cache_namespace.filter(|namespace| !namespace.is_empty()) {
        seed = seed.wrapping_add(xxh3_64_with_seed(namespace.as_bytes(), 1));
    }
    seed
}

/// XXH3's default secret, bytes 0..64: the words the link hash reads (3..7) and those the
/// local hash of a 16-token block reads (all eight; see `local_hash_lanes`).
const XXH3_SECRET: [u8; 64] = [
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
];

/// The multiplier of XXH3's avalanche.
pub(super) const XXH3_AVALANCHE: u64 = 0x1656_6791_9E37_79F9;

/// Word `i` (little-endian, `i` < 8) of XXH3's default secret.
pub(super) const fn xxh3_secret_word(i: usize) -> u64 {
    let b = &XXH3_SECRET;
    let o = i * 8;
    u64::from_le_bytes([
        b[o],
        b[o + 1],
        b[o + 2],
        b[o + 3],
        b[o + 4],
        b[o + 5],
        b[o + 6],
        b[o + 7],
    ])
}

/// The sequence hash of a block whose local hash is `local` and whose parent block has
/// sequence hash `parent` (`None` at the root): `local` itself at the root, else
/// `xxh3(parent as LE u64 ‖ local as LE u64, seed 1337)`.
#[inline]
pub fn next_sequence_hash(parent: Option<SequenceHash>, local: LocalBlockHash) -> SequenceHash {
    match parent {
        None => SequenceHash(local.0),
        Some(parent) => SequenceHash(link_hash(parent.0, local.0)),
    }
}

/// `xxh3_64(parent as LE u64 ‖ local as LE u64, seed HASH_SEED)`, written out for its one
/// input length (XXH3's 9-to-16-byte path, with the seed folded into constants): the chain
/// link is computed once per stored block and per prompt block, and the general function
/// spends much of its time choosing the path by length.
#[inline]
fn link_hash(parent: u64, local: u64) -> u64 {
    // The secret words this path reads: XXH3's default secret, bytes 24..56.
    const SECRET_24: u64 = xxh3_secret_word(3);
    const SECRET_32: u64 = xxh3_secret_word(4);
    const SECRET_40: u64 = xxh3_secret_word(5);
    const SECRET_48: u64 = xxh3_secret_word(6);
    const FLIP_LO: u64 = (SECRET_24 ^ SECRET_32).wrapping_add(HASH_SEED);
    const FLIP_HI: u64 = (SECRET_40 ^ SECRET_48).wrapping_sub(HASH_SEED);
    const LEN: u64 = 16;
    let lo = parent ^ FLIP_LO;
    let hi = local ^ FLIP_HI;
    let product = u128::from(lo) * u128::from(hi);
    let acc = LEN
        .wrapping_add(lo.swap_bytes())
        .wrapping_add(hi)
        .wrapping_add((product as u64) ^ ((product >> 64) as u64));
    // XXH3's avalanche.
    let acc = (acc ^ (acc >> 37)).wrapping_mul(XXH3_AVALANCHE);
    acc ^ (acc >> 32)
}

/// xxh3 of the tokens' little-endian bytes under `seed`.
#[inline]
pub(super) fn token_hash(block: &[u32], seed: u64) -> u64 {
    #[cfg(target_endian = "little")]
    {
        xxh3_64_with_seed(le_bytes(block), seed)
    }
    #[cfg(not(target_endian = "little"))]
    {
        let bytes: Vec<u8> = block.iter().flat_map(|token| token.to_le_bytes()).collect();
        xxh3_64_with_seed(&bytes, seed)
    }
}

/// The tokens' bytes, which on a little-endian target already are their little-endian encoding.
#[cfg(target_endian = "little")]
fn le_bytes(tokens: &[u32]) -> &[u8] {
    // SAFETY: a `u32` slice is initialised memory of `4 * len` bytes, and `u8` has no
    // alignment requirement; the returned slice borrows `tokens`.
    unsafe {
        std::slice::from_raw_parts(tokens.as_ptr().cast::<u8>(), std::mem::size_of_val(tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_link_hash_is_xxh3_of_the_two_words() {
        let mut state = 0x0123_4567_89AB_CDEFu64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let edges = [0, 1, u64::MAX, HASH_SEED, 1 << 63];
        let mut pairs: Vec<(u64, u64)> = edges
            .iter()
            .flat_map(|a| edges.iter().map(move |b| (*a, *b)))
            .collect();
        pairs.extend((0..10_000).map(|_| (next(), next())));
        for (parent, local) in pairs {
            let mut bytes = parent.to_le_bytes().to_vec();
            bytes.extend_from_slice(&local.to_le_bytes());
            assert_eq!(
                link_hash(parent, local),
                xxh3_64_with_seed(&bytes, HASH_SEED),
                "parent {parent:#x}, local {local:#x}"
            );
        }
    }
}
