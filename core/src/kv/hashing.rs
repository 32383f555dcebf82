//! Prompt hashing: tokens → per-block local hashes → chained sequence hashes (xxh3).
//!
//! A block's local hash covers its tokens only; its sequence hash chains in every block before
//! it, so equal sequence hashes mean equal prefixes. Only full blocks are hashed.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The xxh3 seed of every block and sequence hash (the upstream router's seed).
pub const HASH_SEED: u64 = 1337;

/// The local hash of each full block of `tokens`: xxh3 of the block's little-endian `u32`s.
/// A `block_size` of 0 yields no blocks.
pub fn block_hashes(tokens: &[u32], block_size: u32) -> Vec<u64> {
    let block_size = block_size as usize;
    if block_size == 0 {
        return Vec::new();
    }
    let mut hashes = Vec::with_capacity(tokens.len() / block_size);
    for_each_block_hash(tokens, block_size, |hash| hashes.push(hash));
    hashes
}

/// Chains local block hashes into sequence hashes: `seq[0] = local[0]`,
/// `seq[i] = xxh3(seq[i-1] ‖ local[i])`.
pub fn sequence_hashes(local: &[u64]) -> Vec<u64> {
    let mut hashes = Vec::with_capacity(local.len());
    let mut chain = SequenceChain::default();
    for &hash in local {
        hashes.push(chain.push(hash));
    }
    hashes
}

/// The sequence hashes of the full blocks of `tokens`, in one pass.
pub fn sequence_hashes_for_tokens(tokens: &[u32], block_size: u32) -> Vec<u64> {
    let block_size = block_size as usize;
    if block_size == 0 {
        return Vec::new();
    }
    let mut hashes = Vec::with_capacity(tokens.len() / block_size);
    let mut chain = SequenceChain::default();
    for_each_block_hash(tokens, block_size, |hash| hashes.push(chain.push(hash)));
    hashes
}

/// The sequence hashes of the full blocks of `tokens`, computed as the iterator is advanced
/// (so a consumer can probe each hash while the next one is computed).
pub fn sequence_hashes_iter(tokens: &[u32], block_size: u32) -> SequenceHashes<'_> {
    let (tokens, chunk) = match block_size as usize {
        0 => (&tokens[..0], 1),
        size => (tokens, size),
    };
    SequenceHashes {
        blocks: tokens.chunks_exact(chunk),
        chain: SequenceChain::default(),
    }
}

/// The iterator of [`sequence_hashes_iter`].
pub struct SequenceHashes<'a> {
    blocks: std::slice::ChunksExact<'a, u32>,
    chain: SequenceChain,
}

impl Iterator for SequenceHashes<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        let block = self.blocks.next()?;
        Some(self.chain.push(local_hash(block)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.blocks.size_hint()
    }
}

impl ExactSizeIterator for SequenceHashes<'_> {}

/// Sequence hashes for prompts that arrive as per-block ids (Mooncake `hash_ids`): the ids are
/// used as local hashes, as given, and chained.
pub fn sequence_hashes_from_block_ids(ids: &[u64]) -> Vec<u64> {
    sequence_hashes(ids)
}

/// Folds local hashes into sequence hashes one block at a time.
#[derive(Default)]
struct SequenceChain {
    previous: Option<u64>,
}

impl SequenceChain {
    fn push(&mut self, local: u64) -> u64 {
        let next = match self.previous {
            None => local,
            Some(previous) => {
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&previous.to_le_bytes());
                bytes[8..].copy_from_slice(&local.to_le_bytes());
                xxh3_64_with_seed(&bytes, HASH_SEED)
            }
        };
        self.previous = Some(next);
        next
    }
}

fn for_each_block_hash(tokens: &[u32], block_size: usize, mut emit: impl FnMut(u64)) {
    for block in tokens.chunks_exact(block_size) {
        emit(local_hash(block));
    }
}

/// The local hash of one block: xxh3 of its tokens' little-endian bytes.
#[inline]
fn local_hash(block: &[u32]) -> u64 {
    #[cfg(target_endian = "little")]
    {
        xxh3_64_with_seed(le_bytes(block), HASH_SEED)
    }
    #[cfg(not(target_endian = "little"))]
    {
        let bytes: Vec<u8> = block.iter().flat_map(|token| token.to_le_bytes()).collect();
        xxh3_64_with_seed(&bytes, HASH_SEED)
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

    fn le_bytes(tokens: &[u32]) -> Vec<u8> {
        tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
    }

    #[test]
    fn only_full_blocks_are_hashed() {
        let tokens: Vec<u32> = (0..37).collect();
        assert_eq!(block_hashes(&tokens, 16).len(), 2);
        assert_eq!(sequence_hashes_for_tokens(&tokens, 16).len(), 2);
        assert!(block_hashes(&tokens, 0).is_empty());
        assert!(block_hashes(&tokens[..15], 16).is_empty());
    }

    #[test]
    fn local_hash_is_xxh3_of_little_endian_tokens() {
        let tokens: Vec<u32> = (100..132).collect();
        let local = block_hashes(&tokens, 16);
        assert_eq!(
            local[0],
            xxh3_64_with_seed(&le_bytes(&tokens[..16]), HASH_SEED)
        );
        assert_eq!(
            local[1],
            xxh3_64_with_seed(&le_bytes(&tokens[16..]), HASH_SEED)
        );
    }

    #[test]
    fn sequence_hashes_chain_the_previous_hash() {
        let local = [7u64, 8, 9];
        let seq = sequence_hashes(&local);
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
        for block_size in [1, 16, 64, 65, 512] {
            assert_eq!(
                sequence_hashes_for_tokens(&tokens, block_size),
                sequence_hashes(&block_hashes(&tokens, block_size)),
                "block size {block_size}"
            );
        }
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
                sequence_hashes_for_tokens(&tokens, block_size),
                "block size {block_size}"
            );
        }
    }

    #[test]
    fn block_ids_are_used_as_local_hashes() {
        assert_eq!(
            sequence_hashes_from_block_ids(&[5, 6]),
            sequence_hashes(&[5, 6])
        );
        assert_eq!(sequence_hashes_from_block_ids(&[5])[0], 5);
    }
}
