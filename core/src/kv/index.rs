//! The KV index: which worker caches which block, fed by KV events, queried per booking.
//!
//! Layout, chosen for memory (every (worker, block) membership costs one bit in the common case):
//! - `blocks`: sequence hash → the block's engine hash as first reported (its *canonical* engine
//!   hash) and a 64-bit holder mask for worker slots 0..63;
//! - `overflow`: (sequence hash, slot group) → holder mask, for slots 64 and up;
//! - `by_engine`: canonical engine hash → sequence hash, so removals (which name engine hashes)
//!   find their block;
//! - per worker slot, *override* maps only for the blocks whose engine hash differs from the
//!   canonical one (engines that hash differently, or reuse ids); empty when workers agree.
//!
//! A worker's cached prefix of a request is the longest run of the request's sequence hashes
//! that all hold the worker's bit, so one pass over the hashes, AND-ing holder masks, yields
//! every worker's prefix length and stops as soon as no worker continues the prefix.

use super::event::{KvEvent, KvEventData};
use super::event_outcome::{EventOutcome, IgnoreReason};
use super::index_hasher::{U64HashBuilder, U64Map};
use crate::plugins::BlockLookup;
use crate::router::worker::WorkerId;
use std::collections::HashMap;

/// Worker slots per holder mask.
const GROUP: usize = 64;

/// Event and block counts the index keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexCounters {
    /// Events applied.
    pub events_applied: u64,
    /// Events ignored, per [`IgnoreReason`] (in `IgnoreReason::ALL` order).
    pub events_ignored: [u64; IgnoreReason::ALL.len()],
    /// Blocks stored by applied events.
    pub stored_blocks: u64,
    /// Blocks removed by applied events.
    pub removed_blocks: u64,
    /// Removals that named a block the worker does not hold.
    pub unknown_block_removals: u64,
    /// Stored events whose parent the worker does not hold (their blocks are still stored: the
    /// sequence hashes chain the whole prefix, so prefix lookups stay correct).
    pub unknown_parents: u64,
    /// `cleared` events applied (including re-synchronisations after a gap).
    pub clears: u64,
}

impl IndexCounters {
    /// Events ignored for `reason`.
    pub fn ignored(&self, reason: IgnoreReason) -> u64 {
        self.events_ignored[reason.index()]
    }
}

/// What the index knows about one worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerIndexState {
    /// Blocks the worker holds in the index.
    pub blocks: usize,
    /// Whether events were lost and the worker's state awaits a `cleared`.
    pub stale: bool,
    /// The last event id accepted.
    pub last_event_id: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct BlockEntry {
    /// The engine hash the block was first reported with.
    engine: u64,
    /// Holders among slots 0..63.
    holders: u64,
}

struct SlotState {
    last_event_id: Option<u64>,
    stale: bool,
    blocks: usize,
    /// Engine hash → sequence hash, where the canonical maps cannot say it.
    engine_to_seq: U64Map<u64>,
    /// Sequence hash → engine hash, where the worker's engine hash is not the canonical one.
    seq_to_engine: U64Map<u64>,
}

impl SlotState {
    fn new() -> Self {
        Self {
            last_event_id: None,
            stale: false,
            blocks: 0,
            engine_to_seq: U64Map::default(),
            seq_to_engine: U64Map::default(),
        }
    }
}

/// Which registered worker caches which block.
#[derive(Default)]
pub struct KvIndex {
    blocks: U64Map<BlockEntry>,
    by_engine: U64Map<u64>,
    overflow: HashMap<(u64, u32), u64, U64HashBuilder>,
    slots: Vec<Option<SlotState>>,
    by_worker: HashMap<WorkerId, u32, U64HashBuilder>,
    memberships: usize,
    counters: IndexCounters,
}

impl KvIndex {
    /// An empty index with no workers.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index sized for `blocks` distinct blocks.
    pub fn with_capacity(blocks: usize) -> Self {
        Self {
            blocks: U64Map::with_capacity_and_hasher(blocks, U64HashBuilder),
            by_engine: U64Map::with_capacity_and_hasher(blocks, U64HashBuilder),
            ..Self::default()
        }
    }

    /// Starts tracking `worker`; returns `false` if it was already tracked.
    pub fn add_worker(&mut self, worker: WorkerId) -> bool {
        if self.by_worker.contains_key(&worker) {
            return false;
        }
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = Some(SlotState::new());
        self.by_worker.insert(worker, slot as u32);
        true
    }

    /// Stops tracking `worker` and drops every block it held; returns `false` if it was unknown.
    pub fn remove_worker(&mut self, worker: WorkerId) -> bool {
        let Some(slot) = self.by_worker.remove(&worker) else {
            return false;
        };
        self.clear_slot(slot);
        self.slots[slot as usize] = None;
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        true
    }

    /// Whether `worker` is tracked.
    pub fn contains_worker(&self, worker: WorkerId) -> bool {
        self.by_worker.contains_key(&worker)
    }

    /// What the index knows about `worker`, if it is tracked.
    pub fn worker_state(&self, worker: WorkerId) -> Option<WorkerIndexState> {
        let state = self.slot_state(*self.by_worker.get(&worker)?)?;
        Some(WorkerIndexState {
            blocks: state.blocks,
            stale: state.stale,
            last_event_id: state.last_event_id,
        })
    }

    /// Applies one event, counting anomalies. Events of untracked workers change nothing.
    pub fn apply(&mut self, event: &KvEvent) -> EventOutcome {
        let outcome = self.apply_inner(event);
        match outcome {
            EventOutcome::Applied => self.counters.events_applied += 1,
            EventOutcome::Ignored(reason) => self.counters.events_ignored[reason.index()] += 1,
        }
        outcome
    }

    /// Counts an event that could not be read.
    pub fn note_malformed(&mut self) {
        self.counters.events_ignored[IgnoreReason::Malformed.index()] += 1;
    }

    /// For each of `workers`, the number of leading `sequence_hashes` it caches, computed in one
    /// pass over the hashes that stops when no worker continues the prefix. Untracked workers get 0.
    pub fn prefix_lengths(
        &self,
        sequence_hashes: &[u64],
        workers: &[WorkerId],
        out: &mut Vec<usize>,
    ) {
        out.clear();
        out.resize(workers.len(), 0);
        let slots: Vec<Option<u32>> = workers
            .iter()
            .map(|worker| self.by_worker.get(worker).copied())
            .collect();
        let groups = self.slots.len().div_ceil(GROUP);
        for group in 0..groups {
            let mut mask = 0u64;
            for slot in slots.iter().flatten() {
                if *slot as usize / GROUP == group {
                    mask |= 1 << (*slot as usize % GROUP);
                }
            }
            if mask == 0 {
                continue;
            }
            let lengths = if group == 0 {
                prefix_pass(sequence_hashes, mask, |hash| {
                    self.blocks.get(&hash).map_or(0, |entry| entry.holders)
                })
            } else {
                let group = group as u32;
                prefix_pass(sequence_hashes, mask, |hash| {
                    self.overflow.get(&(hash, group)).copied().unwrap_or(0)
                })
            };
            for (length, slot) in out.iter_mut().zip(&slots) {
                if let Some(slot) = slot
                    && *slot as usize / GROUP == group
                {
                    *length = lengths[*slot as usize % GROUP];
                }
            }
        }
    }

    /// The number of leading `sequence_hashes` that `worker` caches.
    pub fn prefix_length(&self, sequence_hashes: &[u64], worker: WorkerId) -> usize {
        let mut out = Vec::with_capacity(1);
        self.prefix_lengths(sequence_hashes, &[worker], &mut out);
        out.first().copied().unwrap_or(0)
    }

    /// (worker, block) memberships held.
    pub fn memberships(&self) -> usize {
        self.memberships
    }

    /// Distinct blocks held by at least one worker.
    pub fn distinct_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The counters.
    pub fn counters(&self) -> &IndexCounters {
        &self.counters
    }

    fn apply_inner(&mut self, event: &KvEvent) -> EventOutcome {
        let Some(&slot) = self.by_worker.get(&event.worker) else {
            return EventOutcome::Ignored(IgnoreReason::UnknownWorker);
        };
        let Some(state) = self.slot_state_mut(slot) else {
            return EventOutcome::Ignored(IgnoreReason::UnknownWorker);
        };
        let cleared = matches!(event.data, KvEventData::Cleared);
        if state.stale && !cleared {
            return EventOutcome::Ignored(IgnoreReason::Stale);
        }
        if let Some(last) = state.last_event_id
            && !state.stale
        {
            if event.event_id <= last {
                return EventOutcome::Ignored(IgnoreReason::OutOfOrder);
            }
            if event.event_id - last > 1 && !cleared {
                state.stale = true;
                state.last_event_id = Some(event.event_id);
                tracing::warn!(
                    worker = %event.worker,
                    last_event_id = last,
                    event_id = event.event_id,
                    "KV events lost; dropping the worker's cache state until it reports `cleared`"
                );
                self.clear_slot(slot);
                return EventOutcome::Ignored(IgnoreReason::Gap);
            }
        }
        state.last_event_id = Some(event.event_id);
        match &event.data {
            KvEventData::Cleared => {
                if let Some(state) = self.slot_state_mut(slot) {
                    state.stale = false;
                }
                self.clear_slot(slot);
                self.counters.clears += 1;
                EventOutcome::Applied
            }
            KvEventData::Stored {
                parent_hash,
                blocks,
            } => {
                if let Some(parent) = parent_hash
                    && self.seq_of_engine(slot, *parent).is_none()
                {
                    self.counters.unknown_parents += 1;
                }
                for block in blocks {
                    self.store(slot, block.block_hash, block.tokens_hash);
                }
                self.counters.stored_blocks += blocks.len() as u64;
                EventOutcome::Applied
            }
            KvEventData::Removed { block_hashes } => {
                let mut removed = 0u64;
                for &engine in block_hashes {
                    match self.seq_of_engine(slot, engine) {
                        Some(seq) => {
                            self.remove_membership(slot, seq);
                            removed += 1;
                        }
                        None => self.counters.unknown_block_removals += 1,
                    }
                }
                self.counters.removed_blocks += removed;
                if removed == 0 && !block_hashes.is_empty() {
                    EventOutcome::Ignored(IgnoreReason::UnknownBlocks)
                } else {
                    EventOutcome::Applied
                }
            }
        }
    }

    fn slot_state(&self, slot: u32) -> Option<&SlotState> {
        self.slots.get(slot as usize)?.as_ref()
    }

    fn slot_state_mut(&mut self, slot: u32) -> Option<&mut SlotState> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    fn holds(&self, slot: u32, seq: u64) -> bool {
        let (group, bit) = split(slot);
        let mask = if group == 0 {
            self.blocks.get(&seq).map_or(0, |entry| entry.holders)
        } else {
            self.overflow.get(&(seq, group)).copied().unwrap_or(0)
        };
        mask & bit != 0
    }

    /// The engine hash `slot` reported for `seq`, if it holds the block.
    fn engine_of(&self, slot: u32, seq: u64) -> Option<u64> {
        let (group, bit) = split(slot);
        let entry = self.blocks.get(&seq)?;
        let held = if group == 0 {
            entry.holders & bit != 0
        } else {
            self.overflow
                .get(&(seq, group))
                .is_some_and(|mask| mask & bit != 0)
        };
        if !held {
            return None;
        }
        let state = self.slot_state(slot)?;
        if !state.seq_to_engine.is_empty()
            && let Some(engine) = state.seq_to_engine.get(&seq)
        {
            return Some(*engine);
        }
        Some(entry.engine)
    }

    /// The block `slot` holds under engine hash `engine`, if any.
    fn seq_of_engine(&self, slot: u32, engine: u64) -> Option<u64> {
        let state = self.slot_state(slot)?;
        if !state.engine_to_seq.is_empty()
            && let Some(seq) = state.engine_to_seq.get(&engine)
        {
            return Some(*seq);
        }
        let seq = *self.by_engine.get(&engine)?;
        (self.holds(slot, seq) && !state.seq_to_engine.contains_key(&seq)).then_some(seq)
    }

    fn store(&mut self, slot: u32, engine: u64, seq: u64) {
        if self.store_common(slot, engine, seq) {
            return;
        }
        if let Some(previous) = self.seq_of_engine(slot, engine) {
            if previous == seq {
                return;
            }
            // The engine reused the id for other content: the old block is gone.
            self.remove_membership(slot, previous);
        }
        if self.holds(slot, seq) {
            // Held under another engine id: the new id replaces it.
            self.remove_membership(slot, seq);
        }
        let (canonical_seq, canonical_engine) = match self.blocks.get(&seq) {
            None => {
                self.blocks.insert(seq, BlockEntry { engine, holders: 0 });
                (seq_owner(&mut self.by_engine, engine, seq), true)
            }
            Some(entry) if entry.engine == engine => {
                (seq_owner(&mut self.by_engine, engine, seq), true)
            }
            Some(_) => (false, false),
        };
        let (group, bit) = split(slot);
        if group == 0 {
            if let Some(entry) = self.blocks.get_mut(&seq) {
                entry.holders |= bit;
            }
        } else {
            *self.overflow.entry((seq, group)).or_insert(0) |= bit;
        }
        let Some(state) = self.slot_state_mut(slot) else {
            return;
        };
        if !canonical_seq {
            state.engine_to_seq.insert(engine, seq);
        }
        if !canonical_engine {
            state.seq_to_engine.insert(seq, engine);
        }
        state.blocks += 1;
        self.memberships += 1;
    }

    /// The two-probe paths of a store by a worker in slots 0..63 without override maps: a
    /// block others hold under the same engine id, or a new block with a new engine id.
    /// Returns `false` when the general path must decide.
    fn store_common(&mut self, slot: u32, engine: u64, seq: u64) -> bool {
        let (group, bit) = split(slot);
        let plain = group == 0
            && self.slot_state(slot).is_some_and(|state| {
                state.seq_to_engine.is_empty() && state.engine_to_seq.is_empty()
            });
        if !plain {
            return false;
        }
        match self.by_engine.get(&engine) {
            Some(&owner) if owner == seq => {
                let Some(entry) = self.blocks.get_mut(&seq) else {
                    return false;
                };
                if entry.holders & bit != 0 {
                    return true;
                }
                entry.holders |= bit;
            }
            Some(_) => return false,
            None => match self.blocks.entry(seq) {
                std::collections::hash_map::Entry::Occupied(_) => return false,
                std::collections::hash_map::Entry::Vacant(vacant) => {
                    vacant.insert(BlockEntry {
                        engine,
                        holders: bit,
                    });
                    self.by_engine.insert(engine, seq);
                }
            },
        }
        if let Some(state) = self.slot_state_mut(slot) {
            state.blocks += 1;
        }
        self.memberships += 1;
        true
    }

    /// Drops `slot`'s membership of `seq`; the caller checked that it holds it.
    fn remove_membership(&mut self, slot: u32, seq: u64) {
        let Some(canonical) = self.blocks.get(&seq).map(|entry| entry.engine) else {
            return;
        };
        let Some(state) = self.slot_state_mut(slot) else {
            return;
        };
        let engine = state.seq_to_engine.remove(&seq).unwrap_or(canonical);
        if state.engine_to_seq.get(&engine) == Some(&seq) {
            state.engine_to_seq.remove(&engine);
        }
        state.blocks = state.blocks.saturating_sub(1);
        self.memberships = self.memberships.saturating_sub(1);
        let (group, bit) = split(slot);
        let empty = if group == 0 {
            match self.blocks.get_mut(&seq) {
                Some(entry) => {
                    entry.holders &= !bit;
                    entry.holders == 0
                }
                None => false,
            }
        } else {
            if let Some(mask) = self.overflow.get_mut(&(seq, group)) {
                *mask &= !bit;
                if *mask == 0 {
                    self.overflow.remove(&(seq, group));
                }
            }
            self.blocks
                .get(&seq)
                .is_some_and(|entry| entry.holders == 0)
        };
        if empty && !self.held_in_overflow(seq) {
            self.blocks.remove(&seq);
            if self.by_engine.get(&canonical) == Some(&seq) {
                self.by_engine.remove(&canonical);
            }
        }
    }

    fn held_in_overflow(&self, seq: u64) -> bool {
        let groups = self.slots.len().div_ceil(GROUP) as u32;
        (1..groups).any(|group| self.overflow.contains_key(&(seq, group)))
    }

    /// Drops every block `slot` holds.
    fn clear_slot(&mut self, slot: u32) {
        let (group, bit) = split(slot);
        let held: Vec<u64> = if group == 0 {
            self.blocks
                .iter()
                .filter(|(_, entry)| entry.holders & bit != 0)
                .map(|(seq, _)| *seq)
                .collect()
        } else {
            self.overflow
                .iter()
                .filter(|((_, g), mask)| *g == group && *mask & bit != 0)
                .map(|((seq, _), _)| *seq)
                .collect()
        };
        for seq in held {
            self.remove_membership(slot, seq);
        }
        if let Some(state) = self.slot_state_mut(slot) {
            state.engine_to_seq = U64Map::default();
            state.seq_to_engine = U64Map::default();
            state.blocks = 0;
        }
    }
}

impl BlockLookup for KvIndex {
    fn engine_block_hash(&self, worker: WorkerId, sequence_hash: u64) -> Option<u64> {
        self.engine_of(*self.by_worker.get(&worker)?, sequence_hash)
    }
}

/// Records `engine → seq` as canonical unless another block owns the engine hash; returns
/// whether `seq` owns it.
fn seq_owner(by_engine: &mut U64Map<u64>, engine: u64, seq: u64) -> bool {
    *by_engine.entry(engine).or_insert(seq) == seq
}

fn split(slot: u32) -> (u32, u64) {
    (slot / GROUP as u32, 1u64 << (slot % GROUP as u32))
}

/// For each bit of `mask`, the number of leading hashes whose holder mask has the bit.
fn prefix_pass(hashes: &[u64], mask: u64, holders: impl Fn(u64) -> u64) -> [usize; GROUP] {
    let mut lengths = [0usize; GROUP];
    let mut active = mask;
    for (position, &hash) in hashes.iter().enumerate() {
        let held = holders(hash);
        let mut dropped = active & !held;
        while dropped != 0 {
            lengths[dropped.trailing_zeros() as usize] = position;
            dropped &= dropped - 1;
        }
        active &= held;
        if active == 0 {
            return lengths;
        }
    }
    while active != 0 {
        lengths[active.trailing_zeros() as usize] = hashes.len();
        active &= active - 1;
    }
    lengths
}
