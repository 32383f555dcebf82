//! The index as upstream `RouterEvent`s, in the form upstream's indexers dump and read: per
//! worker rank, `stored` events whose blocks carry the worker's engine hash (`block_hash`) and
//! the block's local hash (`tokens_hash`), each event chained to the block before it through
//! `parent_hash` (the worker's engine hash of that block; `None` at the root). Applied in
//! order to an empty index of this project, or to upstream's `RadixTree` or
//! `ConcurrentRadixTreeCompressed`, the events rebuild every worker's overlap.
//!
//! Shape, as upstream's `dump_tree_as_events`: one event per chain segment (a run of blocks
//! each of which is its predecessor's only child on that worker), parents before children,
//! event ids numbered from 0 across the whole dump, the worker rank as `worker_id` and
//! `dp_rank`. A segment is cut where the worker's own tree branches (upstream cuts where any
//! worker's does, so its events can be shorter).
//!
//! Upstream's tree keeps one engine hash per block, the one of the first event that stored
//! it, and resolves a `parent_hash` only when the worker's engine hash of the parent is that
//! one. When it is not (engines that hash differently), the segment is written from the root
//! instead, its worker's whole path included, which upstream matches by local hash alone.
//! Workers that report every block under its canonical engine hash come first, so such
//! paths stay rare.
//!
//! Left out: blocks a worker holds without holding their parent (no lookup reaches them, here
//! or upstream), and workers awaiting a replay of lost events (lookups do not trust them).

use super::KvIndex;
use super::block_lineage::Parent;
use crate::block_identity::{EngineBlockHash, LocalBlockHash};
use crate::identity::WorkerId;
use crate::kv::event::{KvCacheEventData, RouterEvent};
use crate::kv::index_hasher::U64Map;

/// The parent key of root blocks in a worker's edge list.
const ROOT: u32 = u32::MAX;

/// Why the index could not be dumped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DumpError {
    /// The index does not record its blocks' lineage (local hashes and parents), without
    /// which the dump's events cannot be written.
    #[error(
        "the KV index was built without block lineage, so it cannot be dumped; build it with `KvIndex::with_lineage()` (or `IndexOptions {{ lineage: true, .. }}`), or a router with `RouterOptions {{ index_lineage: true, .. }}`"
    )]
    NoLineage,
}

impl KvIndex {
    /// The index as upstream stored events (see the module docs): workers that use canonical
    /// engine hashes first, each group sorted by worker rank. Fails when the index was built
    /// without lineage ([`KvIndex::with_lineage`]).
    pub fn dump_events(&self) -> Result<Vec<RouterEvent>, DumpError> {
        if !self.records_lineage() {
            return Err(DumpError::NoLineage);
        }
        let mut workers: Vec<(bool, WorkerId, u32)> = self
            .by_worker
            .iter()
            .filter_map(|(worker, slot)| {
                let state = self.slot_state(slot)?;
                (!state.cursor.awaiting()).then_some((state.overrides > 0, worker, slot))
            })
            .collect();
        workers.sort_unstable();
        let mut dump = Dump::default();
        for (_, worker, slot) in workers {
            dump.worker(self, worker, slot);
        }
        Ok(dump.events)
    }
}

/// A worker's reachable blocks as (parent, child) edges sorted by parent, so that a block's
/// children are one contiguous run.
struct WorkerTree {
    edges: Vec<(u32, u32)>,
}

impl WorkerTree {
    fn new(index: &KvIndex, slot: u32) -> Self {
        let mut edges: Vec<(u32, u32)> = index
            .held_blocks(slot)
            .into_iter()
            .filter_map(|block| match index.parent_of(block) {
                Parent::Root => Some((ROOT, block)),
                Parent::Block(parent) if index.holds(slot, parent) => Some((parent, block)),
                Parent::Block(_) | Parent::Gone => None,
            })
            .collect();
        edges.sort_unstable();
        Self { edges }
    }

    /// The children of `parent` (`ROOT`: the roots).
    fn children(&self, parent: u32) -> impl DoubleEndedIterator<Item = u32> + '_ {
        let start = self.edges.partition_point(|edge| edge.0 < parent);
        let end = self.edges.partition_point(|edge| edge.0 <= parent);
        self.edges[start..end].iter().map(|edge| edge.1)
    }

    /// The only child of `parent`, if it has exactly one.
    fn only_child(&self, parent: u32) -> Option<u32> {
        let mut children = self.children(parent);
        match (children.next(), children.next()) {
            (Some(child), None) => Some(child),
            _ => None,
        }
    }
}

/// The events written so far, and what upstream's tree would hold after applying them: which
/// blocks some event stored, and under which engine hash each was first stored.
#[derive(Default)]
struct Dump {
    events: Vec<RouterEvent>,
    /// One bit per slab entry: stored by an earlier event.
    emitted: Vec<u64>,
    /// Stored blocks first stored under an engine hash other than their canonical one.
    first_engine: U64Map<u64>,
}

impl Dump {
    /// Writes `worker`'s segments, parents before children.
    fn worker(&mut self, index: &KvIndex, worker: WorkerId, slot: u32) {
        let tree = WorkerTree::new(index, slot);
        let mut pending: Vec<(u32, Option<u32>)> =
            tree.children(ROOT).rev().map(|root| (root, None)).collect();
        while let Some((start, parent)) = pending.pop() {
            let mut segment = vec![start];
            let mut tail = start;
            while let Some(child) = tree.only_child(tail) {
                segment.push(child);
                tail = child;
            }
            pending.extend(tree.children(tail).rev().map(|child| (child, Some(tail))));
            self.segment(index, worker, slot, parent, segment);
        }
    }

    /// Writes one segment of `worker` after `parent`: chained to it when upstream's tree
    /// would resolve the worker's engine hash of it, else from the root.
    fn segment(
        &mut self,
        index: &KvIndex,
        worker: WorkerId,
        slot: u32,
        parent: Option<u32>,
        segment: Vec<u32>,
    ) {
        let (parent_hash, blocks) = match parent {
            None => (None, segment),
            Some(parent) => {
                let engine = index.engine_of_held(slot, parent);
                if self.resolves(index, parent, engine) {
                    (Some(engine), segment)
                } else {
                    let mut path = path_to(index, parent);
                    path.extend(segment);
                    (None, path)
                }
            }
        };
        let blocks: Vec<(EngineBlockHash, LocalBlockHash)> = blocks
            .into_iter()
            .map(|block| {
                let engine = index.engine_of_held(slot, block);
                self.note(index, block, engine);
                (
                    EngineBlockHash(engine),
                    LocalBlockHash(index.lineage.local(block)),
                )
            })
            .collect();
        let id = self.events.len() as u64;
        self.events.push(RouterEvent::new(
            worker,
            id,
            KvCacheEventData::stored(parent_hash.map(EngineBlockHash), blocks),
        ));
    }

    /// Whether upstream's tree, after the events so far, holds `block` under `engine`.
    fn resolves(&self, index: &KvIndex, block: u32, engine: u64) -> bool {
        let stored = self
            .emitted
            .get(block as usize / 64)
            .is_some_and(|word| word & (1 << (block % 64)) != 0);
        let first = self
            .first_engine
            .get(&u64::from(block))
            .copied()
            .unwrap_or(index.canonical_engine(block));
        stored && first == engine
    }

    /// Notes that an event stored `block` under `engine`.
    fn note(&mut self, index: &KvIndex, block: u32, engine: u64) {
        let word = block as usize / 64;
        if self.emitted.len() <= word {
            self.emitted.resize(word + 1, 0);
        }
        let bit = 1 << (block % 64);
        if self.emitted[word] & bit != 0 {
            return;
        }
        self.emitted[word] |= bit;
        if engine != index.canonical_engine(block) {
            self.first_engine.insert(u64::from(block), engine);
        }
    }
}

/// The blocks from the root to `block`, which the worker holds and reaches from the root.
fn path_to(index: &KvIndex, block: u32) -> Vec<u32> {
    let mut path = vec![block];
    let mut at = block;
    while let Parent::Block(parent) = index.parent_of(at) {
        path.push(parent);
        at = parent;
    }
    path.reverse();
    path
}
