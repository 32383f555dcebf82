//! The KV index: which worker caches which block, fed by KV events, queried per booking.
//!
//! Layout, chosen for memory (every (worker, block) membership costs one bit in the common case,
//! and a distinct block about 24 bytes plus two 8-byte hash-table slots):
//! - `blocks`: a slab of entries { sequence hash, the engine hash the block was first reported
//!   with (its *canonical* engine hash), a 64-bit holder mask for worker slots 0..63 }, with a
//!   free list; everything else refers to a block by its `u32` slab index;
//! - `by_seq`: sequence hash → slab index (an open-addressing table of tag + index slots; keys are
//!   read from the slab);
//! - `by_engine`: canonical engine hash → slab index, so removals (which name engine hashes)
//!   find their block;
//! - `overflow`: (slab index, slot group) → holder mask, for slots 64 and up;
//! - *overrides*: one 16-byte record per membership whose engine hash is not the canonical one
//!   (engines that hash differently, or reuse ids), indexed by (block, slot) and by
//!   (engine hash, slot); empty when workers agree.
//!
//! A worker's cached prefix of a request is the longest run of the request's sequence hashes
//! that all hold the worker's bit, so one pass over the hashes, AND-ing holder masks, yields
//! every worker's prefix length and stops as soon as no worker continues the prefix. The blocks
//! of a stored chain sit in consecutive slab entries, so the pass reads the entry after the
//! previous block's first and probes `by_seq` only when that entry is another block's.

use super::block_slab::ChunkedSlab;
use super::block_table::{BlockTable, key_hash};
use super::event::{EventPlacement, KvCacheEventData, KvCacheStoreData, RouterEvent};
use super::event_cursor::{Admission, EventCursor};
use super::event_outcome::{EventOutcome, IgnoreReason};
use super::hashing::next_sequence_hash;
use super::index_hasher::{U64HashBuilder, U64Map, mix};
use crate::block_identity::{EngineBlockHash, SequenceHash};
use crate::identity::WorkerId;
use crate::plugins::BlockLookup;
use hashbrown::HashTable;
use std::collections::HashMap;

/// Worker slots per holder mask.
const GROUP: usize = 64;

/// How many blocks of a stored event ahead of the one being stored the table slots are
/// prefetched.
const STORE_AHEAD: usize = 4;

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
    /// Stored events rejected because the worker does not hold their parent (also counted
    /// under [`IgnoreReason::UnknownParent`]).
    pub unknown_parents: u64,
    /// `cleared` events applied (including re-synchronisations after a gap).
    pub clears: u64,
    /// Engine restarts: a worker's numbering started over at 0, so its cache was cleared.
    pub restarts: u64,
    /// Gaps closed by a replay (or made moot by a `cleared`).
    pub recoveries: u64,
    /// Recoveries given up by the transport ([`KvIndex::abandon_recovery`]); the worker was reset.
    pub abandoned_recoveries: u64,
    /// Workers awaiting a replay of lost events now (a gauge).
    pub workers_awaiting_recovery: u64,
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
    /// The first event id the worker must replay, when events were lost; until they are
    /// replayed its cache state is not trusted (lookups give it no cached prefix).
    pub replay_from: Option<u64>,
    /// The last event id applied.
    pub last_event_id: Option<u64>,
}

/// A worker that lost events and the first event id it must replay: a transport asks the
/// engine to replay from there and feeds the replayed events to the index in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReplayRequest {
    /// The worker rank.
    pub worker: WorkerId,
    /// The first missing event id.
    pub from_event_id: u64,
}

/// One distinct block in the slab.
#[derive(Clone, Copy, Debug, Default)]
struct Block {
    /// The block's sequence hash.
    seq: u64,
    /// The engine hash the block was first reported with.
    engine: u64,
    /// Holders among slots 0..63.
    holders: u64,
}

/// A membership whose engine hash is not its block's canonical one.
#[derive(Clone, Copy, Debug)]
struct Override {
    engine: u64,
    block: u32,
    slot: u32,
}

struct SlotState {
    cursor: EventCursor,
    blocks: usize,
    /// Override records of this slot.
    overrides: usize,
}

impl SlotState {
    fn new() -> Self {
        Self {
            cursor: EventCursor::default(),
            blocks: 0,
            overrides: 0,
        }
    }
}

/// Which registered worker caches which block.
#[derive(Default)]
pub struct KvIndex {
    blocks: ChunkedSlab<Block>,
    free: Vec<u32>,
    by_seq: BlockTable,
    by_engine: BlockTable,
    overflow: U64Map<u64>,
    overrides: Vec<Override>,
    override_by_block: HashTable<u32>,
    override_by_engine: HashTable<u32>,
    slots: Vec<Option<SlotState>>,
    by_worker: HashMap<WorkerId, u32, U64HashBuilder>,
    memberships: usize,
    /// Live blocks whose canonical engine hash another block owns in `by_engine` (engines that
    /// reuse an id for other content); while there are none, a live block whose engine hash
    /// is `e` is the owner of `e`, which lets stores skip the `by_engine` probe.
    unowned: usize,
    counters: IndexCounters,
    /// The sequence hashes of the store being applied (kept to reuse its allocation).
    store_seqs: Vec<u64>,
}

impl KvIndex {
    /// An empty index with no workers.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index sized for `blocks` distinct blocks.
    pub fn with_capacity(blocks: usize) -> Self {
        let mut slab = ChunkedSlab::default();
        slab.reserve(blocks);
        Self {
            blocks: slab,
            by_seq: BlockTable::with_capacity(blocks),
            by_engine: BlockTable::with_capacity(blocks),
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
        let was_awaiting = self
            .slot_state(slot)
            .is_some_and(|state| state.cursor.awaiting());
        self.note_awaiting_change(was_awaiting, false);
        self.clear_slot(slot);
        self.slots[slot as usize] = None;
        while matches!(self.slots.last(), Some(None)) {
            self.slots.pop();
        }
        true
    }

    /// What the index knows about `worker`, if it is tracked.
    pub fn worker_state(&self, worker: WorkerId) -> Option<WorkerIndexState> {
        let state = self.slot_state(*self.by_worker.get(&worker)?)?;
        Some(WorkerIndexState {
            blocks: state.blocks,
            replay_from: state.cursor.replay_from(),
            last_event_id: state.cursor.last(),
        })
    }

    /// The first event id `worker` must replay, if it lost events (see [`ReplayRequest`]).
    pub fn replay_request(&self, worker: WorkerId) -> Option<u64> {
        self.worker_state(worker)?.replay_from
    }

    /// Every worker awaiting a replay, sorted by worker.
    pub fn replay_requests(&self) -> Vec<ReplayRequest> {
        let mut requests: Vec<ReplayRequest> = self
            .by_worker
            .iter()
            .filter_map(|(worker, slot)| {
                let from_event_id = self.slot_state(*slot)?.cursor.replay_from()?;
                Some(ReplayRequest {
                    worker: *worker,
                    from_event_id,
                })
            })
            .collect();
        requests.sort_unstable();
        requests
    }

    /// Number of workers awaiting a replay.
    pub fn workers_awaiting_recovery(&self) -> usize {
        self.slots
            .iter()
            .flatten()
            .filter(|state| state.cursor.awaiting())
            .count()
    }

    /// Gives up on replaying `worker`'s lost events (the engine could not replay them): its
    /// cache state is dropped and its next event, whatever its id, starts its stream again.
    /// Returns `false` if the worker is not tracked.
    pub fn abandon_recovery(&mut self, worker: WorkerId) -> bool {
        let Some(&slot) = self.by_worker.get(&worker) else {
            return false;
        };
        self.clear_slot(slot);
        if let Some(state) = self.slot_state_mut(slot) {
            let was_awaiting = state.cursor.awaiting();
            state.cursor.resync();
            self.note_awaiting_change(was_awaiting, false);
        }
        self.counters.abandoned_recoveries += 1;
        tracing::warn!(%worker, "KV event replay abandoned; the worker's cache state was reset");
        true
    }

    /// Whether `worker` is tracked and holds every block under the block's canonical engine
    /// hash (the one the block was first reported with), so the canonical hashes recorded by
    /// [`KvIndex::prefix_lengths_and_engines`] are its own.
    pub fn uses_canonical_engine_ids(&self, worker: WorkerId) -> bool {
        self.by_worker
            .get(&worker)
            .and_then(|slot| self.slot_state(*slot))
            .is_some_and(|state| state.overrides == 0)
    }

    /// Applies one event, counting anomalies. Events of untracked workers change nothing;
    /// an event that reveals lost events is not applied and the worker awaits a replay
    /// ([`KvIndex::replay_request`]); replayed events are applied through this same method.
    pub fn apply(&mut self, event: &RouterEvent) -> EventOutcome {
        let outcome = match self.admit(event) {
            Ok(()) => self.apply_admitted(event),
            Err(outcome) => outcome,
        };
        self.count(outcome);
        outcome
    }

    /// Applies events that arrived together, in order. Consecutive events of one worker that
    /// share an `event_id` count as one numbered delivery (upstream numbers a whole engine
    /// batch by its sequence number): the first decides whether they all apply.
    pub fn apply_batch(&mut self, events: &[RouterEvent]) -> Vec<EventOutcome> {
        let mut outcomes = Vec::with_capacity(events.len());
        // The delivery being applied: its worker and id, and the cursor's verdict on it.
        let mut delivery: Option<(WorkerId, u64, Result<(), EventOutcome>)> = None;
        for event in events {
            let key = (event.worker(), event.event_id());
            let verdict = match delivery {
                Some((worker, id, verdict)) if (worker, id) == key => verdict,
                _ => self.admit(event),
            };
            delivery = Some((key.0, key.1, verdict));
            let outcome = match verdict {
                Ok(()) => self.apply_admitted(event),
                Err(outcome) => outcome,
            };
            self.count(outcome);
            outcomes.push(outcome);
        }
        outcomes
    }

    /// Applies `event`'s blocks without consulting or moving the worker's event cursor: for
    /// state copied from elsewhere (a peer replica's dump, a snapshot), whose event ids are not
    /// positions in the engine's stream. The engine's own events, numbered as it numbers them,
    /// then follow as if nothing had been applied.
    pub fn restore(&mut self, event: &RouterEvent) -> EventOutcome {
        let outcome = self.apply_admitted(event);
        self.count(outcome);
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
        sequence_hashes: &[SequenceHash],
        workers: &[WorkerId],
        out: &mut Vec<usize>,
    ) {
        self.pass(
            SequenceHash::as_u64s(sequence_hashes).iter().copied(),
            workers,
            out,
            |_, _, _| {},
        );
    }

    /// [`KvIndex::prefix_lengths`] over hashes computed as the pass pulls them (such as
    /// [`sequence_hashes_iter`](super::sequence_hashes_iter)): the pass stops pulling once no
    /// worker continues the prefix, so the hashes after that block are never computed, and a
    /// block's lookup overlaps the hashing of the next. `prefix` receives the hashes of the
    /// longest cached prefix.
    pub fn prefix_lengths_streamed(
        &self,
        sequence_hashes: impl Iterator<Item = SequenceHash>,
        workers: &[WorkerId],
        out: &mut Vec<usize>,
        prefix: &mut Vec<SequenceHash>,
    ) {
        prefix.clear();
        self.pass(
            sequence_hashes.map(|hash| hash.0),
            workers,
            out,
            |_, hash, _| prefix.push(SequenceHash(hash)),
        );
    }

    /// [`KvIndex::prefix_lengths`], also recording into `engines` the canonical engine hash of
    /// every block the pass probed while some worker still continued the prefix: `engines[i]` is
    /// the canonical engine hash of block `i` for every `i` below the longest prefix, and
    /// `engines.len()` is that longest prefix (one store per probed block: the pass reads the
    /// block's entry anyway).
    pub fn prefix_lengths_and_engines(
        &self,
        sequence_hashes: &[SequenceHash],
        workers: &[WorkerId],
        out: &mut Vec<usize>,
        engines: &mut Vec<EngineBlockHash>,
    ) {
        // Stores by position into a buffer sized up front keep the pass's loop tight.
        engines.clear();
        engines.resize(sequence_hashes.len(), EngineBlockHash(0));
        let hashes = SequenceHash::as_u64s(sequence_hashes);
        self.pass(
            hashes.iter().copied(),
            workers,
            out,
            |position, _, engine| {
                if let Some(slot) = engines.get_mut(position) {
                    *slot = EngineBlockHash(engine);
                }
            },
        );
        engines.truncate(out.iter().copied().max().unwrap_or(0));
    }

    /// The number of leading `sequence_hashes` that `worker` caches.
    pub fn prefix_length(&self, sequence_hashes: &[SequenceHash], worker: WorkerId) -> usize {
        let mut out = Vec::with_capacity(1);
        self.prefix_lengths(sequence_hashes, &[worker], &mut out);
        out.first().copied().unwrap_or(0)
    }

    /// The blocks `worker` holds, in no particular order: each block's sequence hash and the
    /// engine hash the worker reported for it. Empty for an unknown worker.
    pub fn worker_blocks(&self, worker: WorkerId) -> Vec<(SequenceHash, EngineBlockHash)> {
        let Some(&slot) = self.by_worker.get(&worker) else {
            return Vec::new();
        };
        self.blocks
            .iter()
            .filter(|(index, _)| self.holds(slot, *index))
            .filter_map(|(_, block)| {
                let engine = self.engine_of(slot, block.seq)?;
                Some((SequenceHash(block.seq), EngineBlockHash(engine)))
            })
            .collect()
    }

    /// (worker, block) memberships held.
    pub fn memberships(&self) -> usize {
        self.memberships
    }

    /// Distinct blocks held by at least one worker.
    pub fn distinct_blocks(&self) -> usize {
        self.by_seq.len()
    }

    /// The counters.
    pub fn counters(&self) -> &IndexCounters {
        &self.counters
    }

    /// The overlap pass: `out[i]` becomes the prefix length of `workers[i]`; `record` gets the
    /// canonical engine hash of each position some worker continues.
    fn pass(
        &self,
        hashes: impl Iterator<Item = u64>,
        workers: &[WorkerId],
        out: &mut Vec<usize>,
        record: impl FnMut(usize, u64, u64),
    ) {
        out.clear();
        out.extend(workers.iter().map(|worker| self.trusted_slot(*worker)));
        if self.slots.len() <= GROUP {
            let mask = out
                .iter()
                .filter(|slot| **slot != usize::MAX)
                .fold(0u64, |mask, slot| mask | (1 << *slot));
            let lengths = self.pass_group0(hashes, mask, record);
            for length in out.iter_mut() {
                *length = lengths.get(*length).map_or(0, |l| *l as usize);
            }
        } else {
            let lengths = self.pass_groups(hashes, out, record);
            for length in out.iter_mut() {
                *length = lengths.get(*length).map_or(0, |l| *l as usize);
            }
        }
    }

    /// The pass when every slot is below 64: one holder mask per block.
    ///
    /// Blocks of one stored chain get consecutive slab entries (events store a prefix in
    /// order, and a chain removed leaf-first is reused in order from the free list), so the
    /// pass first tries the entry after the previous block's and probes the sequence-hash
    /// table only when that entry holds another block: a prefix is mostly a sequential scan
    /// of the slab rather than one random table probe per block.
    fn pass_group0(
        &self,
        hashes: impl Iterator<Item = u64>,
        mask: u64,
        mut record: impl FnMut(usize, u64, u64),
    ) -> [u32; GROUP] {
        let mut lengths = [0u32; GROUP];
        let mut active = mask;
        if active == 0 {
            return lengths;
        }
        let mut guess = u32::MAX;
        let mut position = 0;
        for hash in hashes {
            let block = match self.blocks.try_get(guess) {
                // Freed entries hold no one, so they never pass for a block.
                Some(entry) if entry.seq == hash && entry.holders != 0 => Some(guess),
                _ => self.find_block(hash),
            };
            let (held, engine) = match block {
                Some(block) => {
                    guess = block.wrapping_add(1);
                    let entry = self.blocks.get(block);
                    (entry.holders, entry.engine)
                }
                None => (0, 0),
            };
            let mut dropped = active & !held;
            while dropped != 0 {
                lengths[dropped.trailing_zeros() as usize] = position as u32;
                dropped &= dropped - 1;
            }
            active &= held;
            if active == 0 {
                return lengths;
            }
            record(position, hash, engine);
            position += 1;
        }
        let position = position as u32;
        while active != 0 {
            lengths[active.trailing_zeros() as usize] = position;
            active &= active - 1;
        }
        lengths
    }

    /// The pass with slots of 64 and up: one holder mask per block and slot group.
    fn pass_groups(
        &self,
        hashes: impl Iterator<Item = u64>,
        slots: &[usize],
        mut record: impl FnMut(usize, u64, u64),
    ) -> Vec<u32> {
        let groups = self.slots.len().div_ceil(GROUP);
        let mut lengths = vec![0u32; groups * GROUP];
        let mut active = vec![0u64; groups];
        for slot in slots.iter().filter(|slot| **slot != usize::MAX) {
            active[slot / GROUP] |= 1 << (slot % GROUP);
        }
        if active.iter().all(|mask| *mask == 0) {
            return lengths;
        }
        let mut position = 0u32;
        for hash in hashes {
            let block = self.find_block(hash);
            let mut continues = false;
            for (group, mask) in active.iter_mut().enumerate() {
                if *mask == 0 {
                    continue;
                }
                let held = match block {
                    None => 0,
                    Some(block) if group == 0 => self.blocks.get(block).holders,
                    Some(block) => self.overflow_mask(block, group as u32),
                };
                let mut dropped = *mask & !held;
                while dropped != 0 {
                    lengths[group * GROUP + dropped.trailing_zeros() as usize] = position;
                    dropped &= dropped - 1;
                }
                *mask &= held;
                continues |= *mask != 0;
            }
            if !continues {
                return lengths;
            }
            if let Some(block) = block {
                record(position as usize, hash, self.blocks.get(block).engine);
            }
            position += 1;
        }
        for (group, mask) in active.iter_mut().enumerate() {
            while *mask != 0 {
                lengths[group * GROUP + mask.trailing_zeros() as usize] = position;
                *mask &= *mask - 1;
            }
        }
        lengths
    }

    /// The slot of `worker` for lookups: `usize::MAX` (no cached prefix) when it is untracked
    /// or awaits a replay, since its cache state is not trusted then.
    fn trusted_slot(&self, worker: WorkerId) -> usize {
        match self.by_worker.get(&worker) {
            Some(&slot) if self.slot_state(slot).is_some_and(|s| !s.cursor.awaiting()) => {
                slot as usize
            }
            _ => usize::MAX,
        }
    }

    /// Keeps the awaiting-recovery gauge in step with one worker's cursor.
    fn note_awaiting_change(&mut self, before: bool, after: bool) {
        let gauge = &mut self.counters.workers_awaiting_recovery;
        match (before, after) {
            (false, true) => *gauge += 1,
            (true, false) => *gauge = gauge.saturating_sub(1),
            _ => {}
        }
    }

    fn count(&mut self, outcome: EventOutcome) {
        match outcome {
            EventOutcome::Applied => self.counters.events_applied += 1,
            EventOutcome::Ignored(reason) => self.counters.events_ignored[reason.index()] += 1,
        }
    }

    /// Moves the worker's cursor for `event` (every event of its stream counts, whatever its
    /// tier); `Err` is the outcome of an event that must not be applied.
    fn admit(&mut self, event: &RouterEvent) -> Result<(), EventOutcome> {
        let worker = event.worker();
        let Some(&slot) = self.by_worker.get(&worker) else {
            return Err(EventOutcome::Ignored(IgnoreReason::UnknownWorker));
        };
        let Some(state) = self.slot_state_mut(slot) else {
            return Err(EventOutcome::Ignored(IgnoreReason::UnknownWorker));
        };
        let id = event.event_id();
        let cleared = matches!(event.event.data, KvCacheEventData::Cleared)
            && event.placement() == EventPlacement::Device;
        let last = state.cursor.last();
        let was_awaiting = state.cursor.awaiting();
        let admission = state.cursor.admit(id, cleared);
        let awaiting = state.cursor.awaiting();
        self.note_awaiting_change(was_awaiting, awaiting);
        match admission {
            Admission::Apply { recovered } => {
                if recovered {
                    self.counters.recoveries += 1;
                    tracing::info!(%worker, event_id = id, "KV events replayed; worker trusted again");
                }
            }
            Admission::Restart => {
                self.clear_slot(slot);
                self.counters.restarts += 1;
                tracing::info!(%worker, "KV event numbering restarted at 0: engine restart, cache cleared");
            }
            Admission::Duplicate => return Err(EventOutcome::Ignored(IgnoreReason::OutOfOrder)),
            Admission::Gap => {
                tracing::warn!(
                    %worker,
                    last_event_id = ?last,
                    event_id = id,
                    "KV events lost; the worker awaits a replay and is not trusted until then"
                );
                return Err(EventOutcome::Ignored(IgnoreReason::Gap));
            }
            Admission::Waiting => {
                return Err(EventOutcome::Ignored(IgnoreReason::AwaitingRecovery));
            }
        }
        Ok(())
    }

    /// Applies an event the worker's cursor admitted.
    fn apply_admitted(&mut self, event: &RouterEvent) -> EventOutcome {
        let Some(&slot) = self.by_worker.get(&event.worker()) else {
            return EventOutcome::Ignored(IgnoreReason::UnknownWorker);
        };
        match event.placement() {
            EventPlacement::Device => {}
            EventPlacement::OtherTier => return EventOutcome::Ignored(IgnoreReason::NonDeviceTier),
            EventPlacement::Unsupported => {
                return EventOutcome::Ignored(IgnoreReason::UnsupportedResidency);
            }
        }
        match &event.event.data {
            KvCacheEventData::Cleared => {
                self.clear_slot(slot);
                self.counters.clears += 1;
                EventOutcome::Applied
            }
            KvCacheEventData::Stored(store) => self.apply_stored(slot, event, store),
            KvCacheEventData::Removed(remove) => {
                let mut removed = 0u64;
                for engine in &remove.block_hashes {
                    match self.block_of_engine(slot, engine.0) {
                        Some(block) => {
                            self.remove_membership(slot, block);
                            removed += 1;
                        }
                        None => self.counters.unknown_block_removals += 1,
                    }
                }
                self.counters.removed_blocks += removed;
                if removed == 0 && !remove.block_hashes.is_empty() {
                    EventOutcome::Ignored(IgnoreReason::UnknownBlocks)
                } else {
                    EventOutcome::Applied
                }
            }
        }
    }

    /// Stores blocks chained from their parent: each block's sequence hash is its local hash
    /// chained onto the sequence hash of the block before it on this worker. A store whose
    /// parent the worker does not hold, or that names its own parent among its blocks, is
    /// rejected whole (as upstream does).
    fn apply_stored(
        &mut self,
        slot: u32,
        event: &RouterEvent,
        store: &KvCacheStoreData,
    ) -> EventOutcome {
        let parent = match store.parent_hash {
            None => None,
            Some(parent) => {
                if store.blocks.iter().any(|block| block.block_hash == parent) {
                    tracing::warn!(worker = %event.worker(), event_id = event.event_id(), %parent, "KV store names its own parent; rejected");
                    return EventOutcome::Ignored(IgnoreReason::InvalidBlockSequence);
                }
                match self.block_of_engine(slot, parent.0) {
                    Some(block) => Some((block, SequenceHash(self.blocks.get(block).seq))),
                    None => {
                        self.counters.unknown_parents += 1;
                        tracing::debug!(worker = %event.worker(), event_id = event.event_id(), %parent, "KV store of an unknown parent; rejected");
                        return EventOutcome::Ignored(IgnoreReason::UnknownParent);
                    }
                }
            }
        };
        let (group, _) = split(slot);
        // Every sequence hash first (a chain of cheap hashes), so the table slots of a block
        // some blocks ahead can be prefetched while this one is stored.
        let mut seqs = std::mem::take(&mut self.store_seqs);
        seqs.clear();
        let mut chain = parent.map(|(_, seq)| seq);
        seqs.extend(store.blocks.iter().map(|block| {
            let seq = next_sequence_hash(chain, block.tokens_hash);
            chain = Some(seq);
            seq.0
        }));
        // The slab entry after the previous block's (the parent's, for the first): where a
        // chain's next block usually is.
        let mut guess = parent.map_or(u32::MAX, |(block, _)| block.wrapping_add(1));
        // Whether the previous block missed its guess (a new block, or one stored elsewhere):
        // then the next ones likely miss too, and their table slots are worth prefetching.
        let mut probing = true;
        for (n, (block, &seq)) in store.blocks.iter().zip(&seqs).enumerate() {
            if probing && let Some(later) = store.blocks.get(n + STORE_AHEAD) {
                self.by_engine.prefetch(key_hash(later.block_hash.0));
                self.by_seq.prefetch(key_hash(seqs[n + STORE_AHEAD]));
            }
            // A store may add an override, after which the fast path no longer applies.
            let plain = group == 0
                && self
                    .slot_state(slot)
                    .is_some_and(|state| state.overrides == 0);
            let stored = plain
                .then(|| self.store_on_fast_path(slot, block.block_hash.0, seq, guess))
                .flatten();
            (guess, probing) = match stored {
                Some((stored, guessed)) => (stored.wrapping_add(1), !guessed),
                None => {
                    self.store(slot, block.block_hash.0, seq);
                    (u32::MAX, true)
                }
            };
        }
        self.store_seqs = seqs;
        self.counters.stored_blocks += store.blocks.len() as u64;
        EventOutcome::Applied
    }

    fn slot_state(&self, slot: u32) -> Option<&SlotState> {
        self.slots.get(slot as usize)?.as_ref()
    }

    fn slot_state_mut(&mut self, slot: u32) -> Option<&mut SlotState> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    /// The slab index of the block with sequence hash `seq`.
    #[inline]
    fn find_block(&self, seq: u64) -> Option<u32> {
        let blocks = &self.blocks;
        self.by_seq
            .find(key_hash(seq), |block| blocks.get(block).seq == seq)
    }

    /// The block whose canonical engine hash is `engine` and that owns it in `by_engine`.
    fn canonical_block(&self, engine: u64) -> Option<u32> {
        let blocks = &self.blocks;
        self.by_engine
            .find(key_hash(engine), |block| blocks.get(block).engine == engine)
    }

    fn overflow_mask(&self, block: u32, group: u32) -> u64 {
        self.overflow
            .get(&overflow_key(block, group))
            .copied()
            .unwrap_or(0)
    }

    fn holds(&self, slot: u32, block: u32) -> bool {
        let (group, bit) = split(slot);
        let mask = if group == 0 {
            self.blocks.get(block).holders
        } else {
            self.overflow_mask(block, group)
        };
        mask & bit != 0
    }

    /// The override record of `slot` for `block`.
    fn override_of(&self, slot: u32, block: u32) -> Option<usize> {
        let overrides = &self.overrides;
        self.override_by_block
            .find(pair_hash(u64::from(block), slot), |&i| {
                let record = &overrides[i as usize];
                record.block == block && record.slot == slot
            })
            .map(|i| *i as usize)
    }

    /// The override record of `slot` under engine hash `engine`.
    fn override_of_engine(&self, slot: u32, engine: u64) -> Option<usize> {
        let overrides = &self.overrides;
        self.override_by_engine
            .find(pair_hash(engine, slot), |&i| {
                let record = &overrides[i as usize];
                record.engine == engine && record.slot == slot
            })
            .map(|i| *i as usize)
    }

    /// The engine hash `slot` reported for `seq`, if it holds the block.
    fn engine_of(&self, slot: u32, seq: u64) -> Option<u64> {
        let block = self.find_block(seq)?;
        if !self.holds(slot, block) {
            return None;
        }
        let state = self.slot_state(slot)?;
        if state.overrides > 0
            && let Some(record) = self.override_of(slot, block)
        {
            return Some(self.overrides[record].engine);
        }
        Some(self.blocks.get(block).engine)
    }

    /// The block `slot` holds under engine hash `engine`, if any.
    fn block_of_engine(&self, slot: u32, engine: u64) -> Option<u32> {
        let state = self.slot_state(slot)?;
        if state.overrides > 0
            && let Some(record) = self.override_of_engine(slot, engine)
        {
            return Some(self.overrides[record].block);
        }
        let block = self.canonical_block(engine)?;
        (self.holds(slot, block)
            && (state.overrides == 0 || self.override_of(slot, block).is_none()))
        .then_some(block)
    }

    /// A new slab entry for `seq`, indexed by sequence hash.
    fn alloc_block(&mut self, seq: u64, engine: u64, holders: u64) -> u32 {
        let entry = Block {
            seq,
            engine,
            holders,
        };
        let index = match self.free.pop() {
            Some(index) => {
                *self.blocks.get_mut(index) = entry;
                index
            }
            None => self.blocks.push(entry),
        };
        self.by_seq.insert(key_hash(seq), index);
        index
    }

    /// Records `block` as the owner of its canonical engine hash unless another block owns it;
    /// returns whether `block` owns it.
    fn claim_engine(&mut self, block: u32) -> bool {
        let engine = self.blocks.get(block).engine;
        match self.canonical_block(engine) {
            Some(owner) => owner == block,
            None => {
                self.by_engine.insert(key_hash(engine), block);
                // Every block `store` allocates starts out counted as unowned.
                self.unowned -= 1;
                true
            }
        }
    }

    /// Drops the slab entry `block` (held by no one) and its index entries.
    fn free_block(&mut self, block: u32) {
        let entry = *self.blocks.get(block);
        self.by_seq.remove(key_hash(entry.seq), block);
        let owned = self.by_engine.remove(key_hash(entry.engine), block);
        if !owned {
            self.unowned -= 1;
        }
        *self.blocks.get_mut(block) = Block::default();
        if block as usize + 1 == self.blocks.len() {
            self.blocks.pop();
        } else {
            self.free.push(block);
        }
    }

    fn add_override(&mut self, slot: u32, engine: u64, block: u32) {
        let index = self.overrides.len() as u32;
        self.overrides.push(Override {
            engine,
            block,
            slot,
        });
        let overrides = &self.overrides;
        self.override_by_block
            .insert_unique(pair_hash(u64::from(block), slot), index, |&i| {
                let record = &overrides[i as usize];
                pair_hash(u64::from(record.block), record.slot)
            });
        self.override_by_engine
            .insert_unique(pair_hash(engine, slot), index, |&i| {
                let record = &overrides[i as usize];
                pair_hash(record.engine, record.slot)
            });
        if let Some(state) = self.slot_state_mut(slot) {
            state.overrides += 1;
        }
    }

    fn remove_override(&mut self, index: usize) {
        let record = self.overrides[index];
        let target = index as u32;
        if let Ok(found) = self
            .override_by_block
            .find_entry(pair_hash(u64::from(record.block), record.slot), |&i| {
                i == target
            })
        {
            found.remove();
        }
        if let Ok(found) = self
            .override_by_engine
            .find_entry(pair_hash(record.engine, record.slot), |&i| i == target)
        {
            found.remove();
        }
        let last = (self.overrides.len() - 1) as u32;
        if target != last {
            let moved = self.overrides[last as usize];
            if let Some(i) = self
                .override_by_block
                .find_mut(pair_hash(u64::from(moved.block), moved.slot), |&i| {
                    i == last
                })
            {
                *i = target;
            }
            if let Some(i) = self
                .override_by_engine
                .find_mut(pair_hash(moved.engine, moved.slot), |&i| i == last)
            {
                *i = target;
            }
        }
        self.overrides.swap_remove(index);
        if let Some(state) = self.slot_state_mut(record.slot) {
            state.overrides = state.overrides.saturating_sub(1);
        }
    }

    fn store(&mut self, slot: u32, engine: u64, seq: u64) {
        if let Some(previous) = self.block_of_engine(slot, engine) {
            if self.blocks.get(previous).seq == seq {
                return;
            }
            // The engine reused the id for other content: the old block is gone.
            self.remove_membership(slot, previous);
        }
        if let Some(block) = self.find_block(seq)
            && self.holds(slot, block)
        {
            // Held under another engine id: the new id replaces it.
            self.remove_membership(slot, block);
        }
        let (block, canonical) = match self.find_block(seq) {
            None => {
                let block = self.alloc_block(seq, engine, 0);
                self.unowned += 1;
                (block, self.claim_engine(block))
            }
            Some(block) if self.blocks.get(block).engine == engine => {
                (block, self.claim_engine(block))
            }
            Some(block) => (block, false),
        };
        let (group, bit) = split(slot);
        if group == 0 {
            self.blocks.get_mut(block).holders |= bit;
        } else {
            *self.overflow.entry(overflow_key(block, group)).or_insert(0) |= bit;
        }
        if !canonical {
            self.add_override(slot, engine, block);
        }
        if let Some(state) = self.slot_state_mut(slot) {
            state.blocks += 1;
        }
        self.memberships += 1;
    }

    /// The two-probe paths of a store by a worker in slots 0..63 without overrides: a block
    /// others hold under the same engine id, or a new block with a new engine id. `guess` is
    /// the slab entry to try first for the block (the one after the previous block's: a chain
    /// others stored sits in consecutive entries), which spares the `by_engine` probe when it
    /// is right. Returns the stored block and whether the guess was it, or `None` when the
    /// general path must decide.
    fn store_on_fast_path(
        &mut self,
        slot: u32,
        engine: u64,
        seq: u64,
        guess: u32,
    ) -> Option<(u32, bool)> {
        let (_, bit) = split(slot);
        let guessed = match self.blocks.try_get(guess) {
            // Live (someone holds it) and, with no unowned blocks, the owner of its engine id.
            Some(entry) => self.unowned == 0 && entry.holders != 0 && entry.engine == engine,
            None => false,
        };
        let canonical = if guessed {
            Some(guess)
        } else {
            self.canonical_block(engine)
        };
        let block = match canonical {
            Some(block) => {
                let entry = self.blocks.get_mut(block);
                if entry.seq != seq {
                    return None;
                }
                if entry.holders & bit != 0 {
                    return Some((block, guessed));
                }
                entry.holders |= bit;
                block
            }
            None => {
                if self.find_block(seq).is_some() {
                    return None;
                }
                let block = self.alloc_block(seq, engine, bit);
                self.by_engine.insert(key_hash(engine), block);
                block
            }
        };
        if let Some(state) = self.slot_state_mut(slot) {
            state.blocks += 1;
        }
        self.memberships += 1;
        Some((block, guessed))
    }

    /// Drops `slot`'s membership of `block`; the caller checked that it holds it.
    fn remove_membership(&mut self, slot: u32, block: u32) {
        let Some(state) = self.slot_state(slot) else {
            return;
        };
        if state.overrides > 0
            && let Some(record) = self.override_of(slot, block)
        {
            self.remove_override(record);
        }
        if let Some(state) = self.slot_state_mut(slot) {
            state.blocks = state.blocks.saturating_sub(1);
        }
        self.memberships = self.memberships.saturating_sub(1);
        let (group, bit) = split(slot);
        let empty = if group == 0 {
            let entry = self.blocks.get_mut(block);
            entry.holders &= !bit;
            entry.holders == 0
        } else {
            let key = overflow_key(block, group);
            if let Some(mask) = self.overflow.get_mut(&key) {
                *mask &= !bit;
                if *mask == 0 {
                    self.overflow.remove(&key);
                }
            }
            self.blocks.get(block).holders == 0
        };
        if empty && !self.held_in_overflow(block) {
            self.free_block(block);
        }
    }

    fn held_in_overflow(&self, block: u32) -> bool {
        if self.overflow.is_empty() {
            return false;
        }
        let groups = self.slots.len().div_ceil(GROUP) as u32;
        (1..groups).any(|group| self.overflow.contains_key(&overflow_key(block, group)))
    }

    /// Drops every block `slot` holds.
    fn clear_slot(&mut self, slot: u32) {
        let (group, bit) = split(slot);
        let held: Vec<u32> = if group == 0 {
            self.blocks
                .iter()
                .filter(|(_, entry)| entry.holders & bit != 0)
                .map(|(block, _)| block)
                .collect()
        } else {
            self.overflow
                .iter()
                .filter(|(key, mask)| (**key as u32) == group && *mask & bit != 0)
                .map(|(key, _)| (*key >> 32) as u32)
                .collect()
        };
        for block in held {
            self.remove_membership(slot, block);
        }
        if let Some(state) = self.slot_state_mut(slot) {
            state.blocks = 0;
        }
    }
}

impl BlockLookup for KvIndex {
    fn engine_block_hash(
        &self,
        worker: WorkerId,
        sequence_hash: SequenceHash,
    ) -> Option<EngineBlockHash> {
        self.engine_of(*self.by_worker.get(&worker)?, sequence_hash.0)
            .map(EngineBlockHash)
    }
}

fn split(slot: u32) -> (u32, u64) {
    (slot / GROUP as u32, 1u64 << (slot % GROUP as u32))
}

fn overflow_key(block: u32, group: u32) -> u64 {
    (u64::from(block) << 32) | u64::from(group)
}

/// The hash of a (key, slot) pair of the override tables.
fn pair_hash(key: u64, slot: u32) -> u64 {
    mix(key
        ^ u64::from(slot)
            .wrapping_add(1)
            .wrapping_mul(0xA24B_AED4_963E_E407))
}
