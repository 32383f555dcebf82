//! The KV index: which worker caches which block, fed by KV events, queried per booking.
//!
//! Layout, chosen for memory (every (worker, block) membership costs one bit in the common case,
//! and a distinct block about 24 bytes plus two 8-byte hash-table slots, one when the engine
//! names the block by its sequence hash):
//! - `blocks`: a slab of entries { sequence hash, a 64-bit holder mask for worker slots 0..63 },
//!   with a free list; everything else refers to a block by its `u32` slab index. Each entry's
//!   side value is the engine hash the block was first reported with (its *canonical* engine
//!   hash), kept in an array apart so that the overlap pass reads 16 bytes a block;
//! - `by_seq`: sequence hash → slab index (an open-addressing table of tag + index slots; keys are
//!   read from the slab);
//! - `by_engine`: canonical engine hash → slab index, so removals (which name engine hashes)
//!   find their block; a *self-named* block (its engine hash is its sequence hash) is found
//!   through `by_seq` instead and not filed here;
//! - `overflow`: for slots 64 and up, one holder mask per slab entry and slot group, in dense
//!   arrays (`group_masks`);
//! - `lineage`, only in an index built to be dumped ([`KvIndex::with_lineage`]): each block's
//!   local hash and parent tag, 12 bytes per distinct block;
//! - *overrides*: one 16-byte record per membership whose engine hash is not the canonical one
//!   (engines that hash differently, or reuse ids), indexed by (block, slot) and by
//!   (engine hash, slot); empty when workers agree.
//!
//! A worker's cached prefix of a request is the longest run of the request's sequence hashes
//! that all hold the worker's bit, so one pass over the hashes, AND-ing holder masks, yields
//! every worker's prefix length and stops as soon as no worker continues the prefix (a prompt
//! whose first block the index does not hold, the usual cold find, is answered from that one
//! probe). The blocks of a stored chain sit in consecutive slab entries, so the pass reads the
//! entry after the previous block's first and probes `by_seq` only when that entry is another
//! block's; a stretch of such entries that every worker still in the prefix holds is read as a
//! run, straight from its chunk's array.
//!
//! `KvIndex` is defined here; its methods live with their concept: `blocks` (the slab, its
//! tables, override records and who holds which block), `overlap` (the overlap pass and what
//! it records), `ingest` (admitting and applying events), `workers` (worker slots and recovery
//! state), `slot_directory` (each tracked worker's slot, in worker order) and `counters`.

mod block_lineage;
mod blocks;
mod counters;
mod dump;
mod group_masks;
mod ingest;
mod overlap;
mod predicted;
mod slot_directory;
mod workers;

use super::block_slab::ChunkedSlab;
use super::block_table::BlockTable;
use block_lineage::BlockLineage;
use blocks::{Block, Override};
use group_masks::GroupMasks;
use hashbrown::HashTable;
use slot_directory::SlotDirectory;
use workers::SlotState;

pub use counters::IndexCounters;
pub use dump::DumpError;
pub use ingest::BatchProgress;
pub use overlap::RecordedEngines;
pub use workers::{ReplayRequest, WorkerIndexState};

/// Worker slots per holder mask.
const GROUP: usize = 64;

/// Which registered worker caches which block.
#[derive(Default)]
pub struct KvIndex {
    /// The blocks, each with its canonical engine hash as the side value (apart from the
    /// entries, so that the overlap pass reads 16 bytes per block, not 24).
    blocks: ChunkedSlab<Block, u64>,
    /// Each slab entry's local hash and parent (see `block_lineage`), for the dump; empty
    /// unless the index was built with lineage.
    lineage: BlockLineage,
    free: Vec<u32>,
    by_seq: BlockTable,
    by_engine: BlockTable,
    overflow: GroupMasks,
    overrides: Vec<Override>,
    override_by_block: HashTable<u32>,
    override_by_engine: HashTable<u32>,
    slots: Vec<Option<SlotState>>,
    by_worker: SlotDirectory,
    memberships: usize,
    /// Live blocks whose canonical engine hash another block owns (engines that reuse an id
    /// for other content); while there are none, a live block whose engine hash is `e` is the
    /// owner of `e`, which lets stores skip the `by_engine` probe.
    unowned: usize,
    /// Live *self-named* blocks: blocks whose canonical engine hash is their sequence hash (the
    /// engine names blocks by the router's own sequence hash, as upstream's mocker does).
    /// `by_seq` already finds such a block by its engine hash, so it is never filed in
    /// `by_engine`: a new block costs one table slot and one probe instead of two. The owner
    /// of an engine hash `e` is the block `by_engine` files under `e`, else the live
    /// self-named block whose sequence hash is `e`.
    self_named: usize,
    counters: IndexCounters,
    /// The sequence hashes of the store being applied (kept to reuse its allocation).
    store_seqs: Vec<u64>,
}

/// How to build a [`KvIndex`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexOptions {
    /// Distinct blocks to make room for up front.
    pub capacity: usize,
    /// Record each block's lineage (local hash and parent, 12 bytes per distinct block), which
    /// [`KvIndex::dump_events`] needs; without it the index routes but cannot be dumped.
    pub lineage: bool,
}

impl KvIndex {
    /// An empty index with no workers, without lineage (it routes but cannot be dumped).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index that records lineage, so that [`KvIndex::dump_events`] works.
    pub fn with_lineage() -> Self {
        Self::with_options(IndexOptions {
            lineage: true,
            ..IndexOptions::default()
        })
    }

    /// An empty index sized for `blocks` distinct blocks, without lineage.
    pub fn with_capacity(blocks: usize) -> Self {
        Self::with_options(IndexOptions {
            capacity: blocks,
            lineage: false,
        })
    }

    /// An empty index built as `options` says.
    pub fn with_options(options: IndexOptions) -> Self {
        let IndexOptions { capacity, lineage } = options;
        let mut slab = ChunkedSlab::default();
        slab.reserve(capacity);
        Self {
            blocks: slab,
            lineage: BlockLineage::new(lineage, capacity),
            by_seq: BlockTable::with_capacity(capacity),
            by_engine: BlockTable::with_capacity(capacity),
            ..Self::default()
        }
    }

    /// Whether the index records lineage (and so can be dumped).
    pub fn records_lineage(&self) -> bool {
        self.lineage.enabled()
    }
}
