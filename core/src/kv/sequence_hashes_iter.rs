//! A plain prompt's sequence hashes, computed as they are iterated: [`sequence_hashes_iter`]
//! and its iterator, [`SequenceHashes`] (re-exported by `hashing`). A consumer can stop early
//! (the overlap pass stops where no worker continues the prefix) or take them all in one loop
//! (`for_each`, which runs the iterator's `fold`).

use super::local_hash_lanes::{GROUP_TOKENS, LANES, LocalHashLanes};
use super::xxh3_block::{HASH_SEED, next_sequence_hash, token_hash};
use crate::block_identity::{LocalBlockHash, SequenceHash};

/// The sequence hashes of the full blocks of `tokens` for a plain request, computed as the
/// iterator is advanced (so a consumer can probe each hash while the next one is computed).
pub fn sequence_hashes_iter(tokens: &[u32], block_size: u32) -> SequenceHashes<'_> {
    let block = block_size as usize;
    let tokens = match block {
        0 => &tokens[..0],
        size => &tokens[..tokens.len() / size * size],
    };
    let mut hashes = SequenceHashes {
        unhashed: tokens,
        block: block.max(1),
        lanes: None,
        linked: Linked::default(),
        parent: None,
    };
    if let Some(lanes) = LocalHashLanes::for_blocks(block, HASH_SEED) {
        hashes.lanes = LanesAhead::start(lanes, &mut hashes.unhashed);
    }
    hashes
}

/// The iterator of [`sequence_hashes_iter`].
///
/// With 16-token blocks on a CPU with AVX2, it hashes blocks four at a time (see
/// `local_hash_lanes`), one group ahead of the group it links: the vector unit hashes the next
/// four blocks while the chain links the current four.
pub struct SequenceHashes<'a> {
    /// The full blocks whose local hash is not computed yet.
    unhashed: &'a [u32],
    /// Tokens per block (at least 1).
    block: usize,
    /// The lanes and the group they hashed ahead, while four or more blocks were left.
    lanes: Option<LanesAhead>,
    /// Sequence hashes linked and not yielded yet.
    linked: Linked,
    parent: Option<SequenceHash>,
}

/// The lanes and the local hashes of the group after the one being linked.
struct LanesAhead {
    lanes: LocalHashLanes,
    group: [u64; LANES],
}

impl LanesAhead {
    /// Hashes the first group of `unhashed` (which it then skips), if it holds four blocks.
    fn start(lanes: LocalHashLanes, unhashed: &mut &[u32]) -> Option<Self> {
        let (group, rest) = unhashed.split_first_chunk::<GROUP_TOKENS>()?;
        let mut ahead = Self {
            lanes,
            group: [0; LANES],
        };
        lanes.hash(group, &mut ahead.group);
        *unhashed = rest;
        Some(ahead)
    }
}

/// Up to four sequence hashes linked together, and how many of them were yielded.
#[derive(Default)]
struct Linked {
    hashes: [u64; LANES],
    yielded: usize,
    len: usize,
}

impl SequenceHashes<'_> {
    /// Takes the local hashes of the group the lanes hashed ahead, after setting the lanes to
    /// hash the group after it (when four blocks remain; else the lanes stop, and the blocks
    /// left are hashed one at a time). `None` once the lanes stopped.
    #[inline]
    fn take_group(&mut self) -> Option<[u64; LANES]> {
        let ahead = self.lanes.as_mut()?;
        let locals = ahead.group;
        match self.unhashed.split_first_chunk::<GROUP_TOKENS>() {
            Some((group, rest)) => {
                ahead.lanes.hash(group, &mut ahead.group);
                self.unhashed = rest;
            }
            None => self.lanes = None,
        }
        Some(locals)
    }

    /// The next block's sequence hash, hashing it alone (after the lanes stopped).
    #[inline]
    fn next_alone(&mut self) -> Option<SequenceHash> {
        let (block, rest) = self.unhashed.split_at_checked(self.block)?;
        self.unhashed = rest;
        Some(self.link(token_hash(block, HASH_SEED)))
    }

    /// Chains the block whose local hash is `local` onto the chain.
    #[inline]
    fn link(&mut self, local: u64) -> SequenceHash {
        let next = next_sequence_hash(self.parent, LocalBlockHash(local));
        self.parent = Some(next);
        next
    }
}

impl SequenceHashes<'_> {
    /// Appends every hash left to `out`, in the iterator's own loop (`fold`, tighter than one
    /// `next` a hash), with room made first.
    pub fn append_to(self, out: &mut Vec<SequenceHash>) {
        out.reserve(self.len());
        self.for_each(|hash| out.push(hash));
    }
}

impl Iterator for SequenceHashes<'_> {
    type Item = SequenceHash;

    #[inline]
    fn next(&mut self) -> Option<SequenceHash> {
        if self.linked.yielded == self.linked.len {
            let Some(locals) = self.take_group() else {
                return self.next_alone();
            };
            for (n, local) in locals.into_iter().enumerate() {
                self.linked.hashes[n] = self.link(local).0;
            }
            self.linked.yielded = 0;
            self.linked.len = LANES;
        }
        let hash = self.linked.hashes.get(self.linked.yielded).copied()?;
        self.linked.yielded += 1;
        Some(SequenceHash(hash))
    }

    /// Every hash left, in a loop without `next`'s bookkeeping between them: what `for_each`
    /// and most collecting adapters run.
    #[inline]
    fn fold<B, F>(mut self, init: B, mut f: F) -> B
    where
        F: FnMut(B, SequenceHash) -> B,
    {
        let mut acc = init;
        while let Some(hash) = self.linked.hashes[..self.linked.len].get(self.linked.yielded) {
            self.linked.yielded += 1;
            acc = f(acc, SequenceHash(*hash));
        }
        while let Some(locals) = self.take_group() {
            for local in locals {
                let next = self.link(local);
                acc = f(acc, next);
            }
        }
        while let Some(next) = self.next_alone() {
            acc = f(acc, next);
        }
        acc
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let ahead = if self.lanes.is_some() { LANES } else { 0 };
        let blocks =
            self.linked.len - self.linked.yielded + ahead + self.unhashed.len() / self.block;
        (blocks, Some(blocks))
    }
}

impl ExactSizeIterator for SequenceHashes<'_> {}
