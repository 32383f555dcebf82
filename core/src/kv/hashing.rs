//! Prompt hashing, as upstream `compute_block_hash_for_seq` does it: tokens → per-block
//! [`LocalBlockHash`]es → chained [`SequenceHash`]es (xxh3).
//!
//! A block's local hash covers its own tokens, salted by the request identity (LoRA, cache
//! namespace), plus its multimodal objects; its sequence hash chains in every block before it,
//! so equal sequence hashes mean equal prefixes. Only full blocks are hashed.

use super::request_identity::RequestIdentity;
pub use super::sequence_hashes_iter::{SequenceHashes, sequence_hashes_iter};
use super::xxh3_block::token_hash;
pub use super::xxh3_block::{HASH_SEED, next_sequence_hash, salt_seed};
use crate::block_identity::{LocalBlockHash, SequenceHash};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The local hash of each full block of `tokens` for a plain request. A `block_size` of 0
/// yields no blocks.
pub fn block_hashes(tokens: &[u32], block_size: u32) -> Vec<LocalBlockHash> {
    local_block_hashes(tokens, block_size, &RequestIdentity::default())
}

/// The local hash of each full block of `tokens` under `identity`: xxh3, seeded with the
/// identity's [`salt_seed`], of the block's tokens as little-endian `u32`s followed by the
/// block's multimodal object hashes, sorted, as little-endian `u64`s. Eagle requests hash
/// `block_size + 1` tokens per block at stride `block_size`.
pub fn local_block_hashes(
    tokens: &[u32],
    block_size: u32,
    identity: &RequestIdentity,
) -> Vec<LocalBlockHash> {
    let mut hashes = Vec::with_capacity(full_blocks(tokens.len(), block_size, identity.eagle));
    for_each_local_hash(tokens, block_size, identity, |hash| hashes.push(hash));
    hashes
}

/// Number of full blocks `token_count` tokens make (one fewer window for Eagle).
pub fn full_blocks(token_count: usize, block_size: u32, eagle: bool) -> usize {
    match block_size as usize {
        0 => 0,
        stride if eagle => token_count.saturating_sub(1) / stride,
        stride => token_count / stride,
    }
}

/// Chains local block hashes from the root into sequence hashes.
pub fn sequence_hashes(local: &[LocalBlockHash]) -> Vec<SequenceHash> {
    let mut hashes = Vec::with_capacity(local.len());
    let mut parent = None;
    for &hash in local {
        let next = next_sequence_hash(parent, hash);
        hashes.push(next);
        parent = Some(next);
    }
    hashes
}

/// The sequence hashes of the full blocks of `tokens` for a plain request, in one pass.
pub fn sequence_hashes_for_tokens(tokens: &[u32], block_size: u32) -> Vec<SequenceHash> {
    let mut out = Vec::new();
    sequence_hashes_iter(tokens, block_size).append_to(&mut out);
    out
}

/// The sequence hashes of the full blocks of `tokens` under `identity`, in one pass.
pub fn sequence_hashes_for_request(
    tokens: &[u32],
    block_size: u32,
    identity: &RequestIdentity,
) -> Vec<SequenceHash> {
    let mut hashes = Vec::with_capacity(full_blocks(tokens.len(), block_size, identity.eagle));
    let mut parent = None;
    for_each_local_hash(tokens, block_size, identity, |local| {
        let next = next_sequence_hash(parent, local);
        hashes.push(next);
        parent = Some(next);
    });
    hashes
}

/// Sequence hashes for prompts that arrive as per-block ids (Mooncake `hash_ids`): the ids are
/// used as local hashes, as given, and chained.
pub fn sequence_hashes_from_block_ids(ids: &[u64]) -> Vec<SequenceHash> {
    sequence_hashes(LocalBlockHash::from_u64s(ids))
}

fn for_each_local_hash(
    tokens: &[u32],
    block_size: u32,
    identity: &RequestIdentity,
    mut emit: impl FnMut(LocalBlockHash),
) {
    let stride = block_size as usize;
    if stride == 0 {
        return;
    }
    let seed = identity.salt_seed();
    let window = if identity.eagle { stride + 1 } else { stride };
    let mut bytes = Vec::new();
    let mut mm = Vec::new();
    let mut start = 0;
    let mut index = 0;
    while start + window <= tokens.len() {
        let block = &tokens[start..start + window];
        let objects = identity.mm_hashes_of(index);
        if objects.is_empty() {
            emit(LocalBlockHash(token_hash(block, seed)));
        } else {
            bytes.clear();
            bytes.extend(block.iter().flat_map(|token| token.to_le_bytes()));
            mm.clear();
            mm.extend_from_slice(objects);
            mm.sort_unstable();
            bytes.extend(mm.iter().flat_map(|hash| hash.to_le_bytes()));
            emit(LocalBlockHash(xxh3_64_with_seed(&bytes, seed)));
        }
        start += stride;
        index += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le_bytes(tokens: &[u32]) -> Vec<u8> {
        tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
    }

    fn raw(hashes: &[SequenceHash]) -> Vec<u64> {
        hashes.iter().map(|h| h.0).collect()
    }

    #[test]
    fn only_full_blocks_are_hashed() {
        let tokens: Vec<u32> = (0..37).collect();
        assert_eq!(block_hashes(&tokens, 16).len(), 2);
        assert_eq!(sequence_hashes_for_tokens(&tokens, 16).len(), 2);
        assert!(block_hashes(&tokens, 0).is_empty());
        assert!(block_hashes(&tokens[..15], 16).is_empty());
        let eagle = RequestIdentity::plain().with_eagle(true);
        assert_eq!(local_block_hashes(&tokens[..32], 16, &eagle).len(), 1);
        assert_eq!(local_block_hashes(&tokens[..33], 16, &eagle).len(), 2);
        assert_eq!(full_blocks(33, 16, true), 2);
        assert_eq!(full_blocks(0, 16, true), 0);
    }

    #[test]
    fn local_hash_is_xxh3_of_little_endian_tokens() {
        let tokens: Vec<u32> = (100..132).collect();
        let local = block_hashes(&tokens, 16);
        assert_eq!(
            local[0].0,
            xxh3_64_with_seed(&le_bytes(&tokens[..16]), HASH_SEED)
        );
        assert_eq!(
            local[1].0,
            xxh3_64_with_seed(&le_bytes(&tokens[16..]), HASH_SEED)
        );
    }

    #[test]
    fn sequence_hashes_chain_the_previous_hash() {
        let local = [LocalBlockHash(7), LocalBlockHash(8), LocalBlockHash(9)];
        let seq = raw(&sequence_hashes(&local));
        assert_eq!(seq[0], 7);
        let mut bytes = 7u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(&8u64.to_le_bytes());
        assert_eq!(seq[1], xxh3_64_with_seed(&bytes, HASH_SEED));
        let mut bytes = seq[1].to_le_bytes().to_vec();
        bytes.extend_from_slice(&9u64.to_le_bytes());
        assert_eq!(seq[2], xxh3_64_with_seed(&bytes, HASH_SEED));
    }

    #[test]
    fn token_path_equals_two_step_path_for_any_block_size() {
        let tokens: Vec<u32> = (0..1000).map(|t| t * 7 + 3).collect();
        let identity = RequestIdentity::plain()
            .with_lora("adapter")
            .with_block_mm_hashes(vec![vec![], vec![5, 1]]);
        for block_size in [1, 16, 64, 65, 512] {
            assert_eq!(
                sequence_hashes_for_tokens(&tokens, block_size),
                sequence_hashes(&block_hashes(&tokens, block_size)),
                "block size {block_size}"
            );
            assert_eq!(
                sequence_hashes_for_request(&tokens, block_size, &identity),
                sequence_hashes(&local_block_hashes(&tokens, block_size, &identity)),
                "block size {block_size}"
            );
        }
    }

    #[test]
    fn the_iterator_equals_the_two_step_path_at_every_length() {
        // 16-token blocks take the four-block lanes where the CPU has them: every count of
        // blocks (whole groups of four, and the scalar blocks after them) and any number of
        // tokens after the last full block must give the two-step path's hashes.
        let tokens: Vec<u32> = (0..16 * 40 + 9u32)
            .map(|t| t.wrapping_mul(2_654_435_761))
            .collect();
        for len in 0..tokens.len() {
            let tokens = &tokens[..len];
            let expected = sequence_hashes(&block_hashes(tokens, 16));
            let mut iter = sequence_hashes_iter(tokens, 16);
            assert_eq!(iter.len(), expected.len(), "{len} tokens");
            let mut got = Vec::new();
            while let Some(hash) = iter.next() {
                got.push(hash);
                assert_eq!(iter.len(), expected.len() - got.len(), "{len} tokens");
            }
            assert_eq!(got, expected, "{len} tokens");
        }
    }

    #[test]
    fn folding_after_any_number_of_steps_yields_the_rest() {
        // `fold` (what `for_each` and `collect` run) takes over from `next` wherever it stopped:
        // inside a group of four, at a group's end, or in the blocks hashed one at a time.
        let tokens: Vec<u32> = (0..16 * 23 + 5u32).map(|t| t ^ 0x5bd1_e995).collect();
        let expected = sequence_hashes(&block_hashes(&tokens, 16));
        for steps in 0..=expected.len() {
            let mut iter = sequence_hashes_iter(&tokens, 16);
            let mut got: Vec<SequenceHash> = iter.by_ref().take(steps).collect();
            iter.for_each(|hash| got.push(hash));
            assert_eq!(got, expected, "after {steps} steps");
        }
    }

    #[test]
    fn salts_separate_requests_and_empty_salts_are_absent() {
        let tokens: Vec<u32> = (0..64).collect();
        let plain = block_hashes(&tokens, 16);
        let empty = RequestIdentity::plain()
            .with_lora("")
            .with_cache_namespace("");
        assert!(empty.is_plain());
        assert_eq!(local_block_hashes(&tokens, 16, &empty), plain);
        let variants = [
            RequestIdentity::plain().with_lora("a"),
            RequestIdentity::plain().with_lora("b"),
            RequestIdentity::plain().with_cache_namespace("a"),
            RequestIdentity::plain()
                .with_lora("a")
                .with_cache_namespace("a"),
        ];
        let mut all = vec![plain];
        for identity in &variants {
            assert!(!identity.is_plain());
            all.push(local_block_hashes(&tokens, 16, identity));
        }
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert!(a.iter().zip(b).all(|(x, y)| x != y));
            }
        }
    }

    #[test]
    fn mm_hashes_are_order_independent_and_change_only_their_block() {
        let tokens: Vec<u32> = (0..48).collect();
        let a = RequestIdentity::plain().with_block_mm_hashes(vec![vec![], vec![3, 9]]);
        let b = RequestIdentity::plain().with_block_mm_hashes(vec![vec![], vec![9, 3]]);
        let (ha, hb) = (
            local_block_hashes(&tokens, 16, &a),
            local_block_hashes(&tokens, 16, &b),
        );
        assert_eq!(ha, hb);
        let plain = block_hashes(&tokens, 16);
        assert_eq!(ha[0], plain[0]);
        assert_ne!(ha[1], plain[1]);
        assert_eq!(ha[2], plain[2]);
    }

    #[test]
    fn shared_prefixes_share_sequence_hashes_and_diverge_after() {
        let a: Vec<u32> = (0..64).collect();
        let mut b = a.clone();
        b[40] = 9999;
        let (ha, hb) = (
            sequence_hashes_for_tokens(&a, 16),
            sequence_hashes_for_tokens(&b, 16),
        );
        assert_eq!(ha[..2], hb[..2]);
        assert_ne!(ha[2], hb[2]);
        assert_ne!(ha[3], hb[3]);
    }

    #[test]
    fn the_iterator_yields_the_sequence_hashes() {
        let tokens: Vec<u32> = (0..1000).map(|t| t * 13 + 1).collect();
        for block_size in [0, 1, 16, 64, 512, 2000] {
            assert_eq!(
                sequence_hashes_iter(&tokens, block_size).collect::<Vec<_>>(),
                sequence_hashes(&block_hashes(&tokens, block_size)),
                "block size {block_size}"
            );
        }
    }

    #[test]
    fn block_ids_are_used_as_local_hashes() {
        assert_eq!(
            raw(&sequence_hashes_from_block_ids(&[5, 6])),
            raw(&sequence_hashes(&[LocalBlockHash(5), LocalBlockHash(6)]))
        );
        assert_eq!(sequence_hashes_from_block_ids(&[5])[0], SequenceHash(5));
    }
}
