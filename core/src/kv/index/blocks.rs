//! Block storage and membership: the slab entries, the tables that find them by sequence and
//! engine hash, the override records of engine hashes that are not canonical, and the
//! bookkeeping of which worker slot holds which block.

use super::block_lineage::Origin;
use super::{GROUP, KvIndex};
use crate::block_identity::{EngineBlockHash, SequenceHash};
use crate::identity::WorkerId;
use crate::kv::block_table::{Vacancy, key_hash};
use crate::kv::index_hasher::mix;

/// One distinct block in the slab: what the overlap pass reads for every block of a prompt
/// (16 bytes, four to a cache line). The engine hash the block was first reported with, which
/// the pass reads only for a booking's hints, is the entry's side value in the slab, kept in an
/// array of its own ([`KvIndex::canonical_engine`]).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Block {
    /// The block's sequence hash.
    pub(super) seq: u64,
    /// Holders among slots 0..63.
    pub(super) holders: u64,
}

/// A membership whose engine hash is not its block's canonical one.
#[derive(Clone, Copy, Debug)]
pub(super) struct Override {
    pub(super) engine: u64,
    pub(super) block: u32,
    pub(super) slot: u32,
}

impl KvIndex {
    /// The blocks `worker` holds, in no particular order: each block's sequence hash and the
    /// engine hash the worker reported for it. Empty for an unknown worker.
    pub fn worker_blocks(&self, worker: WorkerId) -> Vec<(SequenceHash, EngineBlockHash)> {
        let Some(slot) = self.by_worker.get(worker) else {
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

    /// The slab index of the block with sequence hash `seq`.
    #[inline]
    pub(super) fn find_block(&self, seq: u64) -> Option<u32> {
        let blocks = &self.blocks;
        self.by_seq
            .find(key_hash(seq), |block| blocks.get(block).seq == seq)
    }

    /// [`KvIndex::find_block`], or where `by_seq` would file `seq`.
    #[inline]
    pub(super) fn find_block_or_vacancy(&self, seq: u64) -> Result<u32, Vacancy> {
        let blocks = &self.blocks;
        self.by_seq
            .find_or_vacancy(key_hash(seq), |block| blocks.get(block).seq == seq)
    }

    /// The block that owns engine hash `engine`: the one `by_engine` files under it, else the
    /// live self-named block whose sequence hash is `engine` (see `KvIndex::self_named`).
    pub(super) fn canonical_block(&self, engine: u64) -> Option<u32> {
        self.canonical_block_or_vacancy(engine).ok()
    }

    /// [`KvIndex::canonical_block`], or where `by_engine` would file `engine`.
    #[inline]
    pub(super) fn canonical_block_or_vacancy(&self, engine: u64) -> Result<u32, Vacancy> {
        let vacancy = match self.filed_block_or_vacancy(engine) {
            Ok(block) => return Ok(block),
            Err(vacancy) => vacancy,
        };
        self.self_named_block(engine).ok_or(vacancy)
    }

    /// The block `by_engine` files under `engine`, or where it would file it (without reading
    /// a slot while it files nothing, as while every block is self-named, even when it was
    /// sized up front).
    #[inline]
    fn filed_block_or_vacancy(&self, engine: u64) -> Result<u32, Vacancy> {
        if self.by_engine.len() == 0 {
            return Err(Vacancy::UNPROBED);
        }
        let blocks = &self.blocks;
        self.by_engine
            .find_or_vacancy(key_hash(engine), |block| blocks.side(block) == engine)
    }

    /// Whether `by_engine` files a block under `engine`.
    #[inline]
    pub(super) fn files_engine(&self, engine: u64) -> bool {
        self.filed_block_or_vacancy(engine).is_ok()
    }

    /// The live self-named block whose sequence (and engine) hash is `engine`, looked up only
    /// while the index holds self-named blocks.
    #[inline]
    fn self_named_block(&self, engine: u64) -> Option<u32> {
        if self.self_named == 0 {
            return None;
        }
        self.find_self_named(engine)
    }

    /// [`KvIndex::self_named_block`]'s probe, whatever the count says. Kept out of line, so
    /// that [`KvIndex::canonical_block_or_vacancy`] stays small enough to be inlined into the
    /// store's fast path.
    #[inline(never)]
    fn find_self_named(&self, engine: u64) -> Option<u32> {
        self.find_block(engine)
            .filter(|&block| self.canonical_engine(block) == engine)
    }

    pub(super) fn overflow_mask(&self, block: u32, group: u32) -> u64 {
        self.overflow.get(block, group)
    }

    pub(super) fn holds(&self, slot: u32, block: u32) -> bool {
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
        self.holds(slot, block)
            .then(|| self.engine_of_held(slot, block))
    }

    /// The engine hash `slot` reported for `block`, which it holds.
    pub(super) fn engine_of_held(&self, slot: u32, block: u32) -> u64 {
        if self
            .slot_state(slot)
            .is_some_and(|state| state.overrides > 0)
            && let Some(record) = self.override_of(slot, block)
        {
            return self.overrides[record].engine;
        }
        self.canonical_engine(block)
    }

    /// The canonical engine hash of `block`: the one it was first reported with.
    #[inline]
    pub(super) fn canonical_engine(&self, block: u32) -> u64 {
        self.blocks.side(block)
    }

    /// The block `slot` holds under engine hash `engine`, if any.
    pub(super) fn block_of_engine(&self, slot: u32, engine: u64) -> Option<u32> {
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

    /// A new slab entry for `seq`, indexed by sequence hash, with its lineage.
    pub(super) fn alloc_block(
        &mut self,
        seq: u64,
        engine: u64,
        holders: u64,
        origin: Origin,
    ) -> u32 {
        self.alloc_block_at(seq, engine, holders, origin, None)
    }

    /// [`KvIndex::alloc_block`], filing `seq` in `by_seq` at `vacancy` when a probe for it
    /// just found it absent there.
    pub(super) fn alloc_block_at(
        &mut self,
        seq: u64,
        engine: u64,
        holders: u64,
        origin: Origin,
        vacancy: Option<Vacancy>,
    ) -> u32 {
        let entry = Block { seq, holders };
        let index = match self.free.pop() {
            Some(index) => {
                self.blocks.set(index, entry, engine);
                index
            }
            None => self.blocks.push_with_side(entry, engine),
        };
        match vacancy {
            Some(vacancy) => self.by_seq.fill(vacancy, key_hash(seq), index),
            None => self.by_seq.insert(key_hash(seq), index),
        }
        if seq == engine {
            self.self_named += 1;
        }
        self.lineage.record(index, origin);
        index
    }

    /// Settles who owns the canonical engine hash of `block`, just allocated: `block` owns it
    /// unless another block does (a block that is not self-named is then filed in
    /// `by_engine`), and is counted as unowned otherwise. Returns whether `block` owns it.
    pub(super) fn settle_engine(&mut self, block: u32) -> bool {
        let engine = self.canonical_engine(block);
        let owned = match self.canonical_block(engine) {
            // A self-named block finds itself unless `by_engine` files its engine hash.
            Some(owner) => owner == block,
            None => {
                self.by_engine.insert(key_hash(engine), block);
                true
            }
        };
        if !owned {
            self.unowned += 1;
        }
        owned
    }

    /// Records `block`, live, as the owner of its canonical engine hash if no block owns it
    /// (its owner may have been freed since it was allocated); returns whether `block` owns it.
    pub(super) fn claim_engine(&mut self, block: u32) -> bool {
        let engine = self.canonical_engine(block);
        match self.canonical_block(engine) {
            Some(owner) => owner == block,
            None => {
                // A self-named block always finds itself, so `block` is not self-named.
                self.by_engine.insert(key_hash(engine), block);
                self.unowned -= 1;
                true
            }
        }
    }

    /// Drops the slab entry `block` (held by no one) and its index entries.
    fn free_block(&mut self, block: u32) {
        let seq = self.blocks.get(block).seq;
        let engine = self.canonical_engine(block);
        self.by_seq.remove(key_hash(seq), block);
        if seq == engine {
            self.self_named -= 1;
            // It owned its engine hash unless `by_engine` files another block under it.
            if self.files_engine(engine) {
                self.unowned -= 1;
            }
        } else if !self.by_engine.remove(key_hash(engine), block) {
            self.unowned -= 1;
        } else if self.self_named_block(engine).is_some() {
            // The self-named block whose sequence hash is this engine hash owns it now.
            self.unowned -= 1;
        }
        // A freed entry reads as sequence hash 0 held by no one: the overlap passes rely on it
        // to tell a freed entry from a live one.
        self.blocks.set(block, Block::default(), 0);
        if block as usize + 1 == self.blocks.len() {
            self.blocks.pop();
            self.lineage.pop();
        } else {
            self.free.push(block);
        }
    }

    pub(super) fn add_override(&mut self, slot: u32, engine: u64, block: u32) {
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

    /// Drops `slot`'s membership of `block`; the caller checked that it holds it.
    pub(super) fn remove_membership(&mut self, slot: u32, block: u32) {
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
            self.overflow.remove(block, group, bit);
            self.blocks.get(block).holders == 0
        };
        if empty && !self.held_in_overflow(block) {
            self.free_block(block);
        }
    }

    fn held_in_overflow(&self, block: u32) -> bool {
        self.overflow.holds_any(block)
    }

    /// The slab indices of the blocks `slot` holds, ascending.
    pub(super) fn held_blocks(&self, slot: u32) -> Vec<u32> {
        let (group, bit) = split(slot);
        if group == 0 {
            return self
                .blocks
                .iter()
                .filter(|(_, entry)| entry.holders & bit != 0)
                .map(|(block, _)| block)
                .collect();
        }
        self.overflow.blocks_with(group, bit)
    }

    /// Drops every block `slot` holds.
    pub(super) fn clear_slot(&mut self, slot: u32) {
        for block in self.held_blocks(slot) {
            self.remove_membership(slot, block);
        }
        if let Some(state) = self.slot_state_mut(slot) {
            state.blocks = 0;
        }
    }
}

impl KvIndex {
    /// Recounts, block by block, who owns which engine hash, and checks the counts the fast
    /// paths trust (`unowned`, `self_named`) and that no self-named block is filed in
    /// `by_engine`. For tests; it reads the whole slab.
    #[doc(hidden)]
    pub fn check_engine_ownership(&self) -> Result<(), String> {
        let live = |index: u32, block: &Block| self.find_block(block.seq) == Some(index);
        let (mut unowned, mut self_named) = (0, 0);
        for (index, block) in self.blocks.iter().filter(|(i, b)| live(*i, b)) {
            let engine = self.canonical_engine(index);
            let filed = self.filed_block_or_vacancy(engine).ok();
            if block.seq == engine {
                self_named += 1;
                if filed == Some(index) {
                    return Err(format!("self-named block {index} is filed in by_engine"));
                }
            }
            // Not `canonical_block`: it trusts the self-named count this recount checks.
            let owner = filed.or_else(|| self.find_self_named(engine));
            if owner != Some(index) {
                unowned += 1;
            }
        }
        if (unowned, self_named) != (self.unowned, self.self_named) {
            return Err(format!(
                "counted {} unowned and {} self-named blocks, recounted {unowned} and {self_named}",
                self.unowned, self.self_named
            ));
        }
        Ok(())
    }

    /// The engine hash `worker` reported for the block `sequence_hash`, if it holds the block
    /// (what a booking's `BlockLookup` answers).
    pub fn engine_block_hash(
        &self,
        worker: WorkerId,
        sequence_hash: SequenceHash,
    ) -> Option<EngineBlockHash> {
        self.engine_of(self.by_worker.get(worker)?, sequence_hash.0)
            .map(EngineBlockHash)
    }
}

pub(super) fn split(slot: u32) -> (u32, u64) {
    (slot / GROUP as u32, 1u64 << (slot % GROUP as u32))
}

/// The hash of a (key, slot) pair of the override tables.
fn pair_hash(key: u64, slot: u32) -> u64 {
    mix(key
        ^ u64::from(slot)
            .wrapping_add(1)
            .wrapping_mul(0xA24B_AED4_963E_E407))
}
