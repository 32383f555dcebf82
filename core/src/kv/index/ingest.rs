//! Event ingest: each event moves its worker's cursor (admission), and admitted events store,
//! remove or clear blocks (application), with a fast path for stores that need no override.

use super::KvIndex;
use super::block_lineage::Origin;
use super::blocks::split;
use crate::block_identity::SequenceHash;
use crate::identity::WorkerId;
use crate::kv::block_table::key_hash;
use crate::kv::event::{KvCacheEventData, KvCacheStoreData, KvCacheStoredBlockData, RouterEvent};
use crate::kv::event_cursor::Admission;
use crate::kv::event_outcome::{EventOutcome, IgnoreReason};
use crate::kv::event_placement::EventPlacement;
use crate::kv::hashing::next_sequence_hash;

/// How many blocks ahead of the one being stored (or removed) an event's table slots are
/// prefetched.
const STORE_AHEAD: usize = 4;

/// Where an engine batch applied in parts ([`KvIndex::apply_batch_part`]) stands: the
/// delivery being applied (its worker and id) and the cursor's verdict on it (the worker's
/// slot when admitted).
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchProgress {
    delivery: Option<(WorkerId, u64, Result<u32, EventOutcome>)>,
}

impl KvIndex {
    /// Applies one event, counting anomalies. Events of untracked workers change nothing;
    /// an event that reveals lost events is not applied and the worker awaits a replay
    /// ([`KvIndex::replay_request`]); replayed events are applied through this same method.
    pub fn apply(&mut self, event: &RouterEvent) -> EventOutcome {
        let outcome = match self.admit(event) {
            Ok(slot) => self.apply_admitted(slot, event),
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
        self.apply_batch_part(
            events,
            &mut BatchProgress::default(),
            &mut outcomes,
            usize::MAX,
        );
        outcomes
    }

    /// [`KvIndex::apply_batch`] a part at a time, so a caller can let others at the index
    /// between parts: applies events from the start of `events` until they have named
    /// `max_blocks` blocks (at least one event), pushes their outcomes to `outcomes`, and
    /// returns how many it applied. `progress` carries the delivery being applied from one
    /// part of the batch to the next.
    pub fn apply_batch_part(
        &mut self,
        events: &[RouterEvent],
        progress: &mut BatchProgress,
        outcomes: &mut Vec<EventOutcome>,
        max_blocks: usize,
    ) -> usize {
        let mut blocks = 0usize;
        let mut applied = 0;
        for event in events {
            if applied > 0 && blocks >= max_blocks {
                break;
            }
            blocks = blocks.saturating_add(event.block_count().max(1));
            let key = (event.worker(), event.event_id());
            let verdict = match progress.delivery {
                Some((worker, id, verdict)) if (worker, id) == key => verdict,
                _ => self.admit(event),
            };
            progress.delivery = Some((key.0, key.1, verdict));
            let outcome = match verdict {
                Ok(slot) => self.apply_admitted(slot, event),
                Err(outcome) => outcome,
            };
            self.count(outcome);
            outcomes.push(outcome);
            applied += 1;
        }
        applied
    }

    /// Applies `event`'s blocks without consulting or moving the worker's event cursor: for
    /// state copied from elsewhere (a peer replica's dump, a snapshot), whose event ids are not
    /// positions in the engine's stream. The engine's own events, numbered as it numbers them,
    /// then follow as if nothing had been applied.
    pub fn restore(&mut self, event: &RouterEvent) -> EventOutcome {
        let outcome = match self.by_worker.get(event.worker()) {
            Some(slot) => self.apply_admitted(slot, event),
            None => EventOutcome::Ignored(IgnoreReason::UnknownWorker),
        };
        self.count(outcome);
        outcome
    }

    /// Moves the worker's cursor for `event` (every event of its stream counts, whatever its
    /// tier): the worker's slot, or `Err` with the outcome of an event that must not be applied.
    fn admit(&mut self, event: &RouterEvent) -> Result<u32, EventOutcome> {
        let worker = event.worker();
        let Some(slot) = self.by_worker.get(worker) else {
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
        Ok(slot)
    }

    /// Applies an event of the worker in `slot` that its cursor admitted.
    fn apply_admitted(&mut self, slot: u32, event: &RouterEvent) -> EventOutcome {
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
                // A removal finds each block through `by_engine` (or `by_seq`, for a
                // self-named block): its slots are prefetched some blocks ahead, as a store's
                // are.
                for engine in remove.block_hashes.iter().take(STORE_AHEAD) {
                    self.prefetch_engine_slots(engine.0);
                }
                for (n, engine) in remove.block_hashes.iter().enumerate() {
                    if let Some(later) = remove.block_hashes.get(n + STORE_AHEAD) {
                        self.prefetch_engine_slots(later.0);
                    }
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
                match self.parent_block(slot, parent.0) {
                    Some(block) => Some((block, SequenceHash(self.blocks.get(block).seq))),
                    None => {
                        self.counters.unknown_parents += 1;
                        tracing::debug!(worker = %event.worker(), event_id = event.event_id(), %parent, "KV store of an unknown parent; rejected");
                        return EventOutcome::Ignored(IgnoreReason::UnknownParent);
                    }
                }
            }
        };
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
        // An engine that names blocks by sequence hash names every block so: a store whose
        // first block is self-named takes a loop whose fast path probes `by_seq` alone (a block
        // in it that is not self-named takes the general path).
        let self_named = store
            .blocks
            .first()
            .zip(seqs.first())
            .is_some_and(|(block, &seq)| block.block_hash.0 == seq);
        let guess = if self_named {
            self.store_blocks::<true>(slot, store, &seqs, parent)
        } else {
            self.store_blocks::<false>(slot, store, &seqs, parent)
        };
        if let Some(state) = self.slot_state_mut(slot) {
            // `guess` follows the last block stored on the fast path (`u32::MAX` otherwise).
            state.last_stored = if guess == u32::MAX {
                u32::MAX
            } else {
                guess.wrapping_sub(1)
            };
        }
        self.store_seqs = seqs;
        self.counters.stored_blocks += store.blocks.len() as u64;
        EventOutcome::Applied
    }

    /// Stores the blocks of `store`, whose sequence hashes are `seqs`, after `parent` (its slab
    /// index and sequence hash; `None` at the root), for the worker in `slot`. `SELF_NAMED`
    /// says that the store's first block is self-named, and so most likely all of them (the
    /// loop is compiled once for each case, so that stores of blocks with ids of the engine's
    /// own pay nothing for self-named ones). Returns the slab entry after the last block stored
    /// on the fast path (`u32::MAX` if the last took the general path).
    fn store_blocks<const SELF_NAMED: bool>(
        &mut self,
        slot: u32,
        store: &KvCacheStoreData,
        seqs: &[u64],
        parent: Option<(u32, SequenceHash)>,
    ) -> u32 {
        // The slab entry after the previous block's (the parent's, for the first): where a
        // chain's next block usually is.
        let mut guess = parent.map_or(u32::MAX, |(block, _)| block.wrapping_add(1));
        // Whether the previous block missed its guess (a new block, or one stored elsewhere):
        // then the next ones likely miss too, and their table slots are worth prefetching.
        let mut probing = true;
        let mut previous = parent.map(|(_, seq)| seq.0);
        // The first blocks' slots now: the loop prefetches each block `STORE_AHEAD` ahead.
        for (block, &seq) in store.blocks.iter().zip(seqs).take(STORE_AHEAD) {
            self.prefetch_slots::<SELF_NAMED>(block.block_hash.0, seq);
        }
        let mut n = 0;
        while let Some((block, &seq)) = store.blocks.get(n).zip(seqs.get(n)) {
            if !probing {
                // The previous block was at its guess: the blocks after it may be too, and
                // are taken as a run.
                let ran = self.store_run(slot, &store.blocks[n..], &seqs[n..], guess);
                if ran > 0 {
                    n += ran;
                    guess = guess.wrapping_add(ran as u32);
                    previous = Some(seqs[n - 1]);
                    continue;
                }
            }
            let origin = Origin::new(block.tokens_hash, previous);
            previous = Some(seq);
            if probing && let Some(later) = store.blocks.get(n + STORE_AHEAD) {
                self.prefetch_slots::<SELF_NAMED>(later.block_hash.0, seqs[n + STORE_AHEAD]);
            }
            // A store may add an override, after which the fast path no longer applies.
            let stored = self
                .plain_slot(slot)
                .then(|| {
                    self.store_on_fast_path::<SELF_NAMED>(
                        slot,
                        block.block_hash.0,
                        seq,
                        origin,
                        guess,
                    )
                })
                .flatten();
            (guess, probing) = match stored {
                Some((stored, guessed)) => (stored.wrapping_add(1), !guessed),
                None => {
                    self.store(slot, block.block_hash.0, seq, origin);
                    (u32::MAX, true)
                }
            };
            n += 1;
        }
        guess
    }

    /// Stores, for the worker in `slot`, the leading `blocks` (with sequence hashes `seqs`)
    /// that sit in consecutive slab entries from `guess` on, each live and the owner of the
    /// engine hash it is stored under: the run of a chain others stored before, where a store
    /// only sets the worker's bit. Returns how many blocks it stored (0 when the fast path
    /// does not apply: a slot of 64 and up, a slot with overrides, or unowned blocks about).
    fn store_run(
        &mut self,
        slot: u32,
        blocks: &[KvCacheStoredBlockData],
        seqs: &[u64],
        guess: u32,
    ) -> usize {
        if self.unowned != 0 || !self.plain_slot(slot) {
            return 0;
        }
        let (_, bit) = split(slot);
        let (entries, engines) = self.blocks.run_from_mut(guess);
        let (mut ran, mut added) = (0, 0);
        for ((entry, &engine), (block, &seq)) in
            entries.iter_mut().zip(engines).zip(blocks.iter().zip(seqs))
        {
            if entry.seq != seq || entry.holders == 0 || engine != block.block_hash.0 {
                break;
            }
            added += usize::from(entry.holders & bit == 0);
            entry.holders |= bit;
            ran += 1;
        }
        if let Some(state) = self.slot_state_mut(slot) {
            state.blocks += added;
        }
        self.memberships += added;
        ran
    }

    /// Whether stores by the worker in `slot` may take the fast paths: a slot below 64 with no
    /// override records.
    fn plain_slot(&self, slot: u32) -> bool {
        split(slot).0 == 0
            && self
                .slot_state(slot)
                .is_some_and(|state| state.overrides == 0)
    }

    /// Hints the CPU to load the table slots a store of the block with engine hash `engine`
    /// and sequence hash `seq` probes (`by_seq` alone for a self-named block while
    /// `by_engine` files nothing).
    #[inline]
    fn prefetch_slots<const SELF_NAMED: bool>(&self, engine: u64, seq: u64) {
        if !SELF_NAMED || self.by_engine.len() > 0 {
            self.by_engine.prefetch(key_hash(engine));
        }
        self.by_seq.prefetch(key_hash(seq));
    }

    /// Hints the CPU to load the table slots that finding the owner of `engine` probes.
    #[inline]
    fn prefetch_engine_slots(&self, engine: u64) {
        if self.by_engine.len() > 0 {
            self.by_engine.prefetch(key_hash(engine));
        }
        if self.self_named > 0 {
            self.by_seq.prefetch(key_hash(engine));
        }
    }

    /// The block `slot` holds under engine hash `parent` ([`KvIndex::block_of_engine`]),
    /// trying the block it stored last first: while every live block owns its engine hash
    /// and the slot has no overrides, a live block with that engine hash that the slot holds
    /// is the one `by_engine` would name, so the probe is spared.
    fn parent_block(&self, slot: u32, parent: u64) -> Option<u32> {
        let state = self.slot_state(slot)?;
        let (group, bit) = split(slot);
        if self.unowned == 0
            && state.overrides == 0
            && group == 0
            && let Some(entry) = self.blocks.try_get(state.last_stored)
            && entry.holders & bit != 0
            && self.canonical_engine(state.last_stored) == parent
        {
            return Some(state.last_stored);
        }
        self.block_of_engine(slot, parent)
    }

    pub(super) fn store(&mut self, slot: u32, engine: u64, seq: u64, origin: Origin) {
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
                let block = self.alloc_block(seq, engine, 0, origin);
                (block, self.settle_engine(block))
            }
            Some(block) if self.canonical_engine(block) == engine => {
                (block, self.claim_engine(block))
            }
            Some(block) => (block, false),
        };
        let (group, bit) = split(slot);
        if group == 0 {
            self.blocks.get_mut(block).holders |= bit;
        } else {
            self.overflow.insert(block, group, bit);
        }
        if !canonical {
            self.add_override(slot, engine, block);
        }
        self.count_membership(slot);
    }

    /// The two-probe paths of a store by a worker in slots 0..63 without overrides: a block
    /// others hold under the same engine id, or a new block with a new engine id. `guess` is
    /// the slab entry to try first for the block (the one after the previous block's: a chain
    /// others stored sits in consecutive entries), which spares the `by_engine` probe when it
    /// is right. In a store whose blocks are self-named (`SELF_NAMED`), a block the guess
    /// misses takes [`KvIndex::store_self_named_on_fast_path`]. Returns the stored block and
    /// whether the guess was it, or `None` when the general path must decide.
    fn store_on_fast_path<const SELF_NAMED: bool>(
        &mut self,
        slot: u32,
        engine: u64,
        seq: u64,
        origin: Origin,
        guess: u32,
    ) -> Option<(u32, bool)> {
        let (_, bit) = split(slot);
        let guessed = match self.blocks.try_get(guess) {
            // Live (someone holds it) and, with no unowned blocks, the owner of its engine id.
            Some(entry) => {
                self.unowned == 0 && entry.holders != 0 && self.canonical_engine(guess) == engine
            }
            None => false,
        };
        let canonical = if guessed {
            Ok(guess)
        } else if SELF_NAMED {
            if engine != seq {
                return None;
            }
            return self.store_self_named_on_fast_path(slot, seq, origin);
        } else {
            self.canonical_block_or_vacancy(engine)
        };
        let block = match canonical {
            Ok(block) => {
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
            Err(engine_vacancy) => {
                if engine == seq {
                    // A new self-named block in a store of other blocks: the general path
                    // leaves it out of `by_engine`.
                    return None;
                }
                // Both probes ended at the empty slots the new block's entries go to.
                let seq_vacancy = self.find_block_or_vacancy(seq).err()?;
                let block = self.alloc_block_at(seq, engine, bit, origin, Some(seq_vacancy));
                self.by_engine.fill(engine_vacancy, key_hash(engine), block);
                block
            }
        };
        self.count_membership(slot);
        Some((block, guessed))
    }

    /// [`KvIndex::store_on_fast_path`] for a block the engine names by its sequence hash `seq`:
    /// one `by_seq` probe finds the block, which owns its engine hash when it is self-named and
    /// `by_engine` files no other block under that hash, or ends where a new block goes.
    fn store_self_named_on_fast_path(
        &mut self,
        slot: u32,
        seq: u64,
        origin: Origin,
    ) -> Option<(u32, bool)> {
        let (_, bit) = split(slot);
        let block = match self.find_block_or_vacancy(seq) {
            Ok(block) => {
                let owned = self.canonical_engine(block) == seq
                    && (self.unowned == 0 || !self.files_engine(seq));
                if !owned {
                    return None;
                }
                let entry = self.blocks.get_mut(block);
                if entry.holders & bit != 0 {
                    return Some((block, false));
                }
                entry.holders |= bit;
                block
            }
            Err(seq_vacancy) => {
                if self.files_engine(seq) {
                    return None;
                }
                self.alloc_block_at(seq, seq, bit, origin, Some(seq_vacancy))
            }
        };
        self.count_membership(slot);
        Some((block, false))
    }

    /// Counts a membership just added for `slot`.
    #[inline]
    fn count_membership(&mut self, slot: u32) {
        if let Some(state) = self.slot_state_mut(slot) {
            state.blocks += 1;
        }
        self.memberships += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_identity::{EngineBlockHash, LocalBlockHash};

    const BLOCKS: u64 = 12;

    /// A store of the chain's blocks `0..BLOCKS` from the root, block `n` named `engine(n)`.
    fn store_chain(worker: WorkerId, event_id: u64, engine: impl Fn(u64) -> u64) -> RouterEvent {
        RouterEvent::new(
            worker,
            event_id,
            KvCacheEventData::stored(
                None,
                (0..BLOCKS).map(|n| (EngineBlockHash(engine(n)), LocalBlockHash(1_000 + n))),
            ),
        )
    }

    fn prefix(index: &KvIndex, worker: WorkerId) -> usize {
        let locals: Vec<LocalBlockHash> = (0..BLOCKS).map(|n| LocalBlockHash(1_000 + n)).collect();
        index.prefix_length(&crate::kv::hashing::sequence_hashes(&locals), worker)
    }

    /// A second worker storing a chain another stored before takes most of it as a run of
    /// consecutive slab entries: its memberships are counted once each, a repeated store adds
    /// none, and blocks it names by other engine ids than the first worker's are not taken in
    /// the run but held under its own ids (so its removals find them).
    #[test]
    fn a_store_over_a_chain_others_stored_takes_it_as_a_run() {
        let (a, b) = (WorkerId::new(1, 0), WorkerId::new(2, 0));
        let mut index = KvIndex::new();
        index.add_worker(a);
        index.add_worker(b);
        let same = |n| 500 + n;
        assert_eq!(index.apply(&store_chain(a, 0, same)), EventOutcome::Applied);
        assert_eq!(index.apply(&store_chain(b, 0, same)), EventOutcome::Applied);
        assert_eq!(index.memberships(), 2 * BLOCKS as usize);
        assert_eq!(
            index.worker_state(b).map(|state| state.blocks),
            Some(BLOCKS as usize)
        );
        assert_eq!(prefix(&index, b), BLOCKS as usize);
        // Stored again: nothing new.
        assert_eq!(index.apply(&store_chain(b, 1, same)), EventOutcome::Applied);
        assert_eq!(index.memberships(), 2 * BLOCKS as usize);
        assert_eq!(
            index.worker_state(b).map(|state| state.blocks),
            Some(BLOCKS as usize)
        );

        // A third worker names blocks 6 and up its own way.
        let c = WorkerId::new(3, 0);
        index.add_worker(c);
        let own_from_6 = |n| if n < 6 { 500 + n } else { 900 + n };
        assert_eq!(
            index.apply(&store_chain(c, 0, own_from_6)),
            EventOutcome::Applied
        );
        assert_eq!(index.distinct_blocks(), BLOCKS as usize);
        assert_eq!(prefix(&index, c), BLOCKS as usize);
        let removal = KvCacheEventData::removed([EngineBlockHash(900 + 8)]);
        assert_eq!(
            index.apply(&RouterEvent::new(c, 1, removal)),
            EventOutcome::Applied
        );
        assert_eq!(prefix(&index, c), 8, "c's own id for block 8 finds it");
        assert_eq!(prefix(&index, a), BLOCKS as usize, "a keeps block 8");
        assert_eq!(index.memberships(), 3 * BLOCKS as usize - 1);
    }
}
