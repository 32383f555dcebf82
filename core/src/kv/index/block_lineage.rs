//! Each distinct block's lineage: its local hash (its own tokens, what upstream's events call
//! `tokens_hash`) and which block it follows, recorded when a store allocates the block and
//! read back by the dump ([`KvIndex::dump_events`]) to chain blocks through their parents as
//! upstream's radix trees need.
//!
//! A block's parent is kept as the 32-bit tag of the parent's sequence hash (the half of the
//! table hash that `by_seq` files it under), not as a slab index: a slab index is reused once
//! its block is freed, while the tag finds the parent through `by_seq` whenever a block with
//! the parent's sequence hash is live, and the candidate is confirmed by chaining: the parent
//! is the block whose sequence hash, chained with the child's local hash, gives the child's.
//! A root block is recognised by its sequence hash being its local hash. 12 bytes per distinct
//! block, in a slab parallel to the block slab.

use super::KvIndex;
use crate::block_identity::{LocalBlockHash, SequenceHash};
use crate::kv::block_slab::ChunkedSlab;
use crate::kv::block_table::key_hash;
use crate::kv::hashing::next_sequence_hash;

/// The bits of a table hash that the tag keeps.
const TAG_SHIFT: u32 = 32;

/// One block's lineage: local hash (low and high half) and the parent's sequence-hash tag,
/// as three `u32`s so that an entry takes 12 bytes rather than a padded 16.
#[derive(Clone, Copy, Debug, Default)]
struct Entry([u32; 3]);

/// Lineage entries, indexed like the block slab.
#[derive(Default)]
pub(super) struct BlockLineage {
    entries: ChunkedSlab<Entry>,
}

/// What a store knows of the block it stores: its local hash and its parent's sequence hash
/// (`None` at the root), kept if the store allocates the block.
#[derive(Clone, Copy, Debug)]
pub(super) struct Origin {
    local: u64,
    parent: Option<u64>,
}

impl Origin {
    /// A block of local hash `local` after the block of sequence hash `parent`.
    #[inline]
    pub(super) fn new(local: LocalBlockHash, parent: Option<u64>) -> Self {
        Self {
            local: local.0,
            parent,
        }
    }
}

/// Where a block hangs, per its lineage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Parent {
    /// At the root: the block starts a sequence.
    Root,
    /// After the live block at this slab index.
    Block(u32),
    /// After a block no worker holds any longer.
    Gone,
}

impl BlockLineage {
    /// Makes room for `additional` more entries.
    pub(super) fn reserve(&mut self, additional: usize) {
        self.entries.reserve(additional);
    }

    /// Records the lineage of the block just allocated at slab index `block`.
    #[inline]
    pub(super) fn record(&mut self, block: u32, origin: Origin) {
        let Origin { local, parent } = origin;
        let tag = parent.map_or(0, |seq| (key_hash(seq) >> TAG_SHIFT) as u32);
        let entry = Entry([local as u32, (local >> 32) as u32, tag]);
        if (block as usize) < self.entries.len() {
            *self.entries.get_mut(block) = entry;
            return;
        }
        // The block slab grew by one entry (the lineage slab grows and shrinks with it).
        while self.entries.len() < block as usize {
            self.entries.push(Entry::default());
        }
        self.entries.push(entry);
    }

    /// Forgets the last entry (the block slab dropped its last entry).
    pub(super) fn pop(&mut self) {
        self.entries.pop();
    }

    /// The local hash recorded for `block`.
    #[inline]
    pub(super) fn local(&self, block: u32) -> u64 {
        let [low, high, _] = self.entries.get(block).0;
        u64::from(low) | (u64::from(high) << 32)
    }

    /// The tag of the parent's sequence hash recorded for `block`.
    fn parent_tag(&self, block: u32) -> u32 {
        self.entries.get(block).0[2]
    }
}

impl KvIndex {
    /// The block that `block` follows.
    pub(super) fn parent_of(&self, block: u32) -> Parent {
        let seq = self.blocks.get(block).seq;
        let local = self.lineage.local(block);
        if seq == local {
            return Parent::Root;
        }
        let blocks = &self.blocks;
        let tag = u64::from(self.lineage.parent_tag(block)) << TAG_SHIFT;
        self.by_seq
            .find(tag, |candidate| {
                let parent = SequenceHash(blocks.get(candidate).seq);
                next_sequence_hash(Some(parent), LocalBlockHash(local)).0 == seq
            })
            .map_or(Parent::Gone, Parent::Block)
    }
}
