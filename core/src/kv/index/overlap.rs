//! The overlap pass: one walk over a request's sequence hashes that gives every worker its
//! cached prefix length, stopping as soon as no worker continues the prefix; and what it
//! records for a booking's engine block hashes ([`RecordedEngines`]).

use super::{GROUP, KvIndex};
use crate::block_identity::{EngineBlockHash, SequenceHash};
use crate::identity::WorkerId;
use std::ops::Range;

/// What [`KvIndex::prefix_lengths_and_engines`] records besides the prefix lengths: the
/// canonical engine hash of every block below the longest cached prefix, and for each worker of
/// the pass whether those hashes are its own. Kept between passes to reuse its allocations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedEngines {
    /// The canonical engine hash of each block below the longest cached prefix.
    hashes: Vec<EngineBlockHash>,
    /// Per worker of the pass, in its order: whether it is tracked and holds every block under
    /// the block's canonical engine hash (the one the block was first reported with).
    canonical: Vec<bool>,
}

impl RecordedEngines {
    /// The canonical engine hash of each block below the longest cached prefix: `hashes()[i]`
    /// is block `i`'s, and `hashes().len()` is that longest prefix.
    pub fn hashes(&self) -> &[EngineBlockHash] {
        &self.hashes
    }

    /// The recorded hashes of `blocks` when they are the engine hashes the pass's worker at
    /// `position` reported itself: it holds every block under the canonical hash. `None` when
    /// it does not, or when `blocks` reach past the recorded ones; `blocks` should lie within
    /// that worker's cached prefix (beyond it, the worker holds none of them).
    pub fn own(&self, position: usize, blocks: Range<usize>) -> Option<&[EngineBlockHash]> {
        if !*self.canonical.get(position)? {
            return None;
        }
        self.hashes.get(blocks)
    }

    /// How many block hashes it holds room for.
    pub fn capacity(&self) -> usize {
        self.hashes.capacity()
    }
}

/// Why a run of the overlap pass ([`KvIndex::run_of_held_blocks`]) stopped.
enum RunEnd {
    /// The request's hashes ran out.
    Hashes,
    /// This hash's block is not the next entry, or some worker still in the prefix does not
    /// hold it.
    Block(u64),
    /// The run reached the end of its chunk, or the last entry in use.
    Entries,
}

impl RunEnd {
    /// The hash the pass's general step takes after the run: the one the run stopped at, the
    /// next of `hashes` when the run ran out of entries, `None` when the hashes ran out.
    #[inline(always)]
    fn next_hash(self, hashes: &mut impl Iterator<Item = u64>) -> Option<u64> {
        match self {
            RunEnd::Hashes => None,
            RunEnd::Block(hash) => Some(hash),
            RunEnd::Entries => hashes.next(),
        }
    }
}

impl KvIndex {
    /// For each of `workers`, the number of leading `sequence_hashes` it caches, computed in one
    /// pass over the hashes that stops when no worker continues the prefix. Untracked workers get 0.
    pub fn prefix_lengths(
        &self,
        sequence_hashes: &[SequenceHash],
        workers: &[WorkerId],
        out: &mut Vec<usize>,
    ) {
        self.pass::<false>(
            SequenceHash::as_u64s(sequence_hashes).iter().copied(),
            workers,
            out,
            |_| {},
            |_, _, _| {},
        );
    }

    /// [`KvIndex::prefix_lengths`] over hashes computed as the pass pulls them (such as
    /// [`sequence_hashes_iter`](crate::kv::sequence_hashes_iter)): the pass stops pulling once no
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
        self.pass::<false>(
            sequence_hashes.map(|hash| hash.0),
            workers,
            out,
            |_| {},
            |_, hash, _| prefix.push(SequenceHash(hash)),
        );
    }

    /// [`KvIndex::prefix_lengths`], also recording into `engines` the canonical engine hash of
    /// every block the pass probed while some worker still continued the prefix (one store per
    /// probed block: the pass reads the block's entry anyway), and for each worker whether
    /// those hashes are its own (see [`RecordedEngines`]).
    pub fn prefix_lengths_and_engines(
        &self,
        sequence_hashes: &[SequenceHash],
        workers: &[WorkerId],
        out: &mut Vec<usize>,
        engines: &mut RecordedEngines,
    ) {
        let RecordedEngines {
            hashes: engines,
            canonical,
        } = engines;
        canonical.clear();
        // The pass records positions in order from 0, each into the next slot of the room made
        // up front (no zero-filling of a buffer most of which the pass never reaches).
        engines.clear();
        engines.reserve(sequence_hashes.len());
        let hashes = SequenceHash::as_u64s(sequence_hashes);
        let room = &mut engines.spare_capacity_mut()[..hashes.len()];
        let mut recorded = 0;
        self.pass::<true>(
            hashes.iter().copied(),
            workers,
            out,
            |own| canonical.push(own),
            // Written in place: a push per block stored the length back on every block.
            |position, _, engine| {
                if position == recorded
                    && let Some(slot) = room.get_mut(position)
                {
                    slot.write(EngineBlockHash(engine));
                    recorded += 1;
                }
            },
        );
        let longest = out.iter().copied().max().unwrap_or(0).min(recorded);
        // SAFETY: slots 0..recorded were written above, one after the other, and longest <= recorded.
        unsafe { engines.set_len(longest) };
    }

    /// The number of leading `sequence_hashes` that `worker` caches.
    pub fn prefix_length(&self, sequence_hashes: &[SequenceHash], worker: WorkerId) -> usize {
        let mut out = Vec::with_capacity(1);
        self.prefix_lengths(sequence_hashes, &[worker], &mut out);
        out.first().copied().unwrap_or(0)
    }

    /// The overlap pass: `out[i]` becomes the prefix length of `workers[i]`; `canonical` gets,
    /// for each worker in order, whether it holds its blocks under their canonical engine
    /// hashes (`CANONICAL` says whether the caller reads that, so that the early answer below
    /// can skip mapping the workers to their slots when it does not); `record` gets the
    /// canonical engine hash of each position some worker continues.
    ///
    /// A prompt whose first block the index does not hold is cached by no worker. That is the
    /// most common find on a cold prefix (more than half of the Mooncake trace's requests), and
    /// it is answered from that one probe: every length is 0, without resolving the workers'
    /// slots or setting up the per-slot lengths.
    fn pass<const CANONICAL: bool>(
        &self,
        hashes: impl Iterator<Item = u64>,
        workers: &[WorkerId],
        out: &mut Vec<usize>,
        mut canonical: impl FnMut(bool),
        record: impl FnMut(usize, u64, u64),
    ) {
        out.clear();
        let mut hashes = hashes;
        let first = hashes
            .next()
            .and_then(|hash| Some((hash, self.find_block(hash)?)));
        if first.is_none() && !CANONICAL {
            out.resize(workers.len(), 0);
            return;
        }
        // Each worker's slot written in place (no push, so no capacity check or length store
        // per worker), and the holder mask of the slots below 64 gathered on the way.
        let all_trusted = self.counters.workers_awaiting_recovery == 0 && self.overrides.is_empty();
        out.resize(workers.len(), usize::MAX);
        let mut slots = out.iter_mut();
        let mut mask = 0u64;
        self.by_worker.resolve(workers, |slot| {
            let (slot, own) = self.trusted_slot(slot, all_trusted);
            canonical(own);
            if slot < GROUP {
                mask |= 1 << slot;
            }
            if let Some(out) = slots.next() {
                *out = slot;
            }
        });
        let Some((first, first_block)) = first else {
            out.fill(0);
            return;
        };
        let (group0, groups);
        let lengths: &[u32] = if self.slots.len() <= GROUP {
            group0 = self.pass_group0(first, hashes, first_block, mask, record);
            &group0
        } else {
            groups = self.pass_groups(first, hashes, first_block, out, record);
            &groups
        };
        for length in out.iter_mut() {
            *length = lengths.get(*length).map_or(0, |l| *l as usize);
        }
    }

    /// The pass when every slot is below 64: one holder mask per block.
    ///
    /// Blocks of one stored chain get consecutive slab entries (events store a prefix in
    /// order, and a chain removed leaf-first is reused in order from the free list), so the
    /// pass first tries the entry after the previous block's and probes the sequence-hash
    /// table only when that entry holds another block: a prefix is mostly a sequential scan
    /// of the slab rather than one random table probe per block. Most of that scan is taken in
    /// runs ([`KvIndex::run_of_held_blocks`]): consecutive entries that every worker still in
    /// the prefix holds, read from their chunk's array with nothing to write but the position.
    ///
    /// The first hash, `first`, whose block (`first_block`) the caller found, comes apart from
    /// the rest, `hashes`, and takes the general step: the runs then read the rest straight
    /// from its iterator (an iterator chained after the first hash kept its state check in the
    /// runs' loop).
    fn pass_group0(
        &self,
        first: u64,
        mut hashes: impl Iterator<Item = u64>,
        first_block: u32,
        mask: u64,
        mut record: impl FnMut(usize, u64, u64),
    ) -> [u32; GROUP] {
        let mut lengths = [0u32; GROUP];
        let mut active = mask;
        if active == 0 {
            return lengths;
        }
        // The first block was found before the pass: its entry passes as the first guess.
        let mut guess = first_block;
        let mut position = 0;
        let mut hash = first;
        loop {
            let block = match self.blocks.try_get(guess) {
                // Freed entries hold no one, so they never pass for a block.
                Some(entry) if entry.seq == hash && entry.holders != 0 => Some(guess),
                _ => self.find_block(hash),
            };
            let (held, engine) = match block {
                Some(block) => {
                    guess = block.wrapping_add(1);
                    (self.blocks.get(block).holders, self.canonical_engine(block))
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
            let (ran, end) =
                self.run_of_held_blocks(guess, active, &mut hashes, &mut position, &mut record);
            guess = guess.wrapping_add(ran);
            match end.next_hash(&mut hashes) {
                Some(next) => hash = next,
                None => break,
            }
        }
        let position = position as u32;
        while active != 0 {
            lengths[active.trailing_zeros() as usize] = position;
            active &= active - 1;
        }
        lengths
    }

    /// A run of [`KvIndex::pass_group0`]: from entry `guess` to the end of its chunk, takes
    /// each entry whose block is the next of `hashes` and held by every worker in `active`,
    /// recording it at `position`, which it advances. Returns how many entries it took and why
    /// it stopped; a block it stopped at (another block's entry, or one some worker left)
    /// comes back with its hash, for the pass's general step.
    #[inline(always)]
    fn run_of_held_blocks(
        &self,
        guess: u32,
        active: u64,
        hashes: &mut impl Iterator<Item = u64>,
        position: &mut usize,
        record: &mut impl FnMut(usize, u64, u64),
    ) -> (u32, RunEnd) {
        self.run(guess, active, |_| true, hashes, position, record)
    }

    /// The loop of every run: takes the entries from `guess` to the end of its chunk while
    /// each is the next of `hashes`, holds every worker of group 0 in `active0`, and passes
    /// `held_beyond` (given the entry's offset in the run: the other groups' check).
    #[inline(always)]
    fn run(
        &self,
        guess: u32,
        active0: u64,
        held_beyond: impl Fn(usize) -> bool,
        hashes: &mut impl Iterator<Item = u64>,
        position: &mut usize,
        record: &mut impl FnMut(usize, u64, u64),
    ) -> (u32, RunEnd) {
        let (entries, engines) = self.blocks.run_from(guess);
        let mut ran = 0;
        for (at, (entry, engine)) in entries.iter().zip(engines).enumerate() {
            let Some(hash) = hashes.next() else {
                return (ran, RunEnd::Hashes);
            };
            // A freed entry holds no one, so it ends the run too.
            if entry.seq != hash || active0 & !entry.holders != 0 || !held_beyond(at) {
                return (ran, RunEnd::Block(hash));
            }
            record(*position, hash, *engine);
            *position += 1;
            ran += 1;
        }
        (ran, RunEnd::Entries)
    }

    /// The pass with slots of 64 and up: one holder mask per block and slot group. Like
    /// [`KvIndex::pass_group0`], it takes most of a long walk in runs
    /// ([`KvIndex::run_in_groups`]) and tries the entry after the previous block's before the
    /// table. The first hash and its block come apart from the rest, as in
    /// [`KvIndex::pass_group0`].
    fn pass_groups(
        &self,
        first: u64,
        mut hashes: impl Iterator<Item = u64>,
        first_block: u32,
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
        let mut position = 0;
        // The entry after the previous block's is tried first. Its own mask cannot say whether
        // it is live (its holders may all sit in slots 64 and up), but a freed entry is reset
        // to sequence hash 0, so only a hash of 0 needs the table. The first block was found
        // before the pass: its entry passes as the first guess.
        let mut guess = first_block;
        let mut group_runs = Vec::with_capacity(groups);
        let mut hash = first;
        loop {
            let block = match self.blocks.try_get(guess) {
                Some(entry) if entry.seq == hash && (hash != 0 || entry.holders != 0) => {
                    Some(guess)
                }
                _ => self.find_block(hash),
            };
            guess = block.map_or(u32::MAX, |block| block.wrapping_add(1));
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
                    lengths[group * GROUP + dropped.trailing_zeros() as usize] = position as u32;
                    dropped &= dropped - 1;
                }
                *mask &= held;
                continues |= *mask != 0;
            }
            if !continues {
                return lengths;
            }
            if let Some(block) = block {
                record(position, hash, self.canonical_engine(block));
            }
            position += 1;
            let (ran, end) = self.run_in_groups(
                guess,
                &active,
                &mut group_runs,
                &mut hashes,
                &mut position,
                &mut record,
            );
            guess = guess.wrapping_add(ran);
            match end.next_hash(&mut hashes) {
                Some(next) => hash = next,
                None => break,
            }
        }
        for (group, mask) in active.iter_mut().enumerate() {
            while *mask != 0 {
                lengths[group * GROUP + mask.trailing_zeros() as usize] = position as u32;
                *mask &= *mask - 1;
            }
        }
        lengths
    }

    /// A run of [`KvIndex::pass_groups`]: [`KvIndex::run_of_held_blocks`] with a holder mask
    /// per slot group (a freed entry holds no one in any group, so it ends the run too). Each
    /// group with workers still in the prefix (`active`, per group) contributes its masks over
    /// the run to `group_runs` (kept between runs for its allocation); a group none of whose
    /// blocks in the chunk ever had a holder ends the run at once.
    #[inline(always)]
    fn run_in_groups<'a>(
        &'a self,
        guess: u32,
        active: &[u64],
        group_runs: &mut Vec<(u64, &'a [u64])>,
        hashes: &mut impl Iterator<Item = u64>,
        position: &mut usize,
        record: &mut impl FnMut(usize, u64, u64),
    ) -> (u32, RunEnd) {
        group_runs.clear();
        for (group, &mask) in active.iter().enumerate().skip(1) {
            if mask == 0 {
                continue;
            }
            match self.overflow.run_from(guess, group as u32) {
                Some(masks) => group_runs.push((mask, masks)),
                None => return (0, RunEnd::Entries),
            }
        }
        let held_beyond = |at: usize| {
            group_runs
                .iter()
                .all(|(mask, masks)| masks.get(at).is_some_and(|held| mask & !held == 0))
        };
        self.run(guess, active[0], held_beyond, hashes, position, record)
    }

    /// The slot for lookups of a worker whose slot is `slot` (`None`: untracked): `usize::MAX`
    /// (no cached prefix) when it is untracked or awaits a replay, since its cache state is not
    /// trusted then; and whether it is tracked and holds every block under the block's
    /// canonical engine hash. `all_trusted` says that no worker awaits a replay and the index
    /// holds no override records (both tracked exactly): then no worker's state needs reading.
    fn trusted_slot(&self, slot: Option<u32>, all_trusted: bool) -> (usize, bool) {
        if all_trusted {
            let trusted = (
                slot.map_or(usize::MAX, |slot| slot as usize),
                slot.is_some(),
            );
            debug_assert_eq!(trusted, self.trusted_slot(slot, false));
            return trusted;
        }
        let Some((slot, state)) = slot.and_then(|slot| Some((slot, self.slot_state(slot)?))) else {
            return (usize::MAX, false);
        };
        let trusted = if state.cursor.awaiting() {
            usize::MAX
        } else {
            slot as usize
        };
        (trusted, state.overrides == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::hashing::{block_hashes, sequence_hashes};

    /// A prompt whose first block the index does not hold ends the pass at its first probe:
    /// every pass gives every worker 0 (even when later hashes name blocks the index holds),
    /// the streamed pass pulls only the first hash, and the recording pass still says which
    /// workers hold their blocks under canonical ids.
    #[test]
    fn a_prompt_whose_first_block_no_one_holds_is_answered_from_one_probe() {
        let mut index = KvIndex::new();
        let (a, b, untracked) = (
            WorkerId::new(1, 0),
            WorkerId::new(2, 0),
            WorkerId::new(3, 0),
        );
        index.add_worker(a);
        index.add_worker(b);
        let held = sequence_hashes(&block_hashes(&(0..64).collect::<Vec<u32>>(), 16));
        assert_eq!(index.store_predicted(a, &held, None), 4);
        let workers = [a, untracked, b];
        let mut out = Vec::new();
        index.prefix_lengths(&held, &workers, &mut out);
        assert_eq!(out, [4, 0, 0], "the held prompt itself");

        let mut cold = held.clone();
        cold[0] = SequenceHash(cold[0].0 ^ 1);
        for query in [&cold[..], &[]] {
            index.prefix_lengths(query, &workers, &mut out);
            assert_eq!(out, [0, 0, 0], "{query:?}");
            let (mut streamed, mut prefix, mut pulled) = (Vec::new(), vec![held[0]], 0);
            index.prefix_lengths_streamed(
                query.iter().inspect(|_| pulled += 1).copied(),
                &workers,
                &mut streamed,
                &mut prefix,
            );
            assert_eq!(
                (streamed.as_slice(), prefix.as_slice()),
                (&[0, 0, 0][..], &[][..])
            );
            assert_eq!(pulled, query.len().min(1));
            let mut engines = RecordedEngines::default();
            index.prefix_lengths_and_engines(query, &workers, &mut out, &mut engines);
            assert_eq!(out, [0, 0, 0]);
            assert!(engines.hashes().is_empty());
            assert_eq!(engines.own(0, 0..0), Some(&[][..]), "a uses canonical ids");
            assert_eq!(engines.own(1, 0..0), None, "an untracked worker");
            assert_eq!(engines.own(2, 0..0), Some(&[][..]), "b uses canonical ids");
        }
    }

    /// Every worker's prefix of `query`, counted block by block against the blocks it holds
    /// (the oracle the passes are checked against).
    fn held_prefixes(index: &KvIndex, query: &[SequenceHash], workers: &[WorkerId]) -> Vec<usize> {
        workers
            .iter()
            .map(|worker| {
                let held: std::collections::HashSet<SequenceHash> = index
                    .worker_blocks(*worker)
                    .into_iter()
                    .map(|(seq, _)| seq)
                    .collect();
                query.iter().take_while(|hash| held.contains(hash)).count()
            })
            .collect()
    }

    /// The chains of the long-walk tests: `blocks(seed, n)` is a chain of `n` blocks.
    fn blocks(seed: u32, n: u32) -> Vec<SequenceHash> {
        let tokens: Vec<u32> = (0..n * 16).map(|t| t.wrapping_mul(31) ^ seed).collect();
        sequence_hashes(&block_hashes(&tokens, 16))
    }

    /// An index of `count` workers where the workers at `a`, `b` and `c` hold long chains:
    /// `a` a chain of 9,000 blocks (across two slab chunk ends) but for ten blocks it dropped
    /// in its middle and then stored five of again, `b` its first 5,000 blocks, and `c` a
    /// chain of 4,000 stored in two parts with another chain in between (so its entries jump
    /// after block 2,000). Returns the index, the workers, and the two chains.
    fn long_chains(
        count: u64,
        [a, b, c]: [usize; 3],
    ) -> (KvIndex, Vec<WorkerId>, Vec<SequenceHash>, Vec<SequenceHash>) {
        let chain = blocks(1, 9_000);
        let (other, split) = (blocks(2, 500), blocks(3, 4_000));
        let workers: Vec<WorkerId> = (1..=count).map(|w| WorkerId::new(w, 0)).collect();
        let mut index = KvIndex::new();
        for worker in &workers {
            index.add_worker(*worker);
        }
        let (a, b, c) = (workers[a], workers[b], workers[c]);
        index.store_predicted(a, &chain, None);
        index.store_predicted(b, &chain[..5_000], None);
        index.store_predicted(c, &split[..2_000], None);
        index.store_predicted(c, &other, None);
        index.store_predicted(c, &split, None);
        for hash in &chain[7_000..7_010] {
            assert!(index.remove_predicted(a, *hash));
        }
        // `a` stores the first five again: they take freed entries from the free list, last
        // freed first, so this stretch of its chain runs backwards through the slab.
        index.store_predicted(a, &chain[7_000..7_005], None);
        (index, workers, chain, split)
    }

    /// Checks all three passes against the oracle on each of `queries`: the same lengths, the
    /// streamed pass pulling no hash past the longest prefix, and the recording pass recording
    /// each block's engine hash (here its sequence hash).
    fn check_passes(index: &KvIndex, workers: &[WorkerId], queries: &[&[SequenceHash]]) {
        let (mut out, mut streamed, mut prefix) = (Vec::new(), Vec::new(), Vec::new());
        let mut engines = RecordedEngines::default();
        for query in queries {
            let expected = held_prefixes(index, query, workers);
            index.prefix_lengths(query, workers, &mut out);
            assert_eq!(out, expected, "{} blocks", query.len());
            let longest = expected.iter().copied().max().unwrap_or(0);
            let mut pulled = 0;
            index.prefix_lengths_streamed(
                query.iter().inspect(|_| pulled += 1).copied(),
                workers,
                &mut streamed,
                &mut prefix,
            );
            assert_eq!(streamed, expected, "streamed, {} blocks", query.len());
            assert_eq!(prefix, query[..longest], "streamed prefix");
            assert_eq!(pulled, query.len().min(longest + 1), "hashes pulled");
            index.prefix_lengths_and_engines(query, workers, &mut out, &mut engines);
            assert_eq!(out, expected, "recording, {} blocks", query.len());
            let recorded: Vec<u64> = engines.hashes().iter().map(|engine| engine.0).collect();
            let seqs: Vec<u64> = query[..longest].iter().map(|seq| seq.0).collect();
            assert_eq!(recorded, seqs, "recorded engine hashes");
        }
    }

    /// Long walks take runs of consecutive slab entries: a chain longer than two slab chunks,
    /// workers leaving it inside a run, a run that ends at a chunk's end or where a chain was
    /// stored elsewhere, freed entries, and a query that ends inside a run.
    #[test]
    fn long_walks_over_runs_of_entries_stop_where_each_worker_does() {
        let (index, workers, chain, split) = long_chains(4, [0, 1, 2]);
        let queries = [
            &chain[..],
            &chain[..4_500],
            &split[..],
            &split[..3_333],
            &chain[..1],
        ];
        check_passes(&index, &workers, &queries);
        let mut out = Vec::new();
        index.prefix_lengths(&chain, &workers, &mut out);
        assert_eq!(
            out,
            [7_005, 5_000, 0, 0],
            "the oracle's answer, spelled out"
        );
        index.prefix_lengths(&split, &workers, &mut out);
        assert_eq!(out, [0, 0, 4_000, 0]);
    }

    /// The same walks with slots of 64 and up, taken in runs over every group's masks: the
    /// pass tries the entry after the previous block's even when its own mask is empty (all
    /// its holders sit in slots 64 and up), as long as the hash is not 0.
    #[test]
    fn long_walks_with_slots_above_64_stop_where_each_worker_does() {
        // The holders of the long chain in group 1 and group 0, then both in group 1 (the
        // shorter prefix ends inside a run of group 1's masks), then across two groups past
        // the first.
        for (count, [a, b, c]) in [(70, [66, 0, 69]), (70, [0, 67, 69]), (128, [100, 64, 127])] {
            let (index, workers, chain, split) = long_chains(count, [a, b, c]);
            let queries = [&chain[..], &chain[..4_500], &split[..], &split[..3_333]];
            check_passes(&index, &workers, &queries);
            let mut out = Vec::new();
            index.prefix_lengths(&chain, &workers, &mut out);
            assert_eq!(
                (out[a], out[b], out[c]),
                (7_005, 5_000, 0),
                "{count} workers"
            );
            index.prefix_lengths(&split, &workers, &mut out);
            assert_eq!((out[a], out[b], out[c]), (0, 0, 4_000), "{count} workers");
        }
    }

    /// A freed entry reads as sequence hash 0: the entry after the previous block's, freed,
    /// never passes for a live block whose sequence hash is 0, with or without slots of 64
    /// and up.
    #[test]
    fn a_freed_entry_never_passes_for_a_block_hashed_0() {
        for (count, at) in [(4, 0), (70, 66)] {
            let workers: Vec<WorkerId> = (1..=count).map(|w| WorkerId::new(w, 0)).collect();
            let mut index = KvIndex::new();
            for worker in &workers {
                index.add_worker(*worker);
            }
            let worker = workers[at];
            let [first, second, third, fourth] = [11, 12, 13, 14].map(SequenceHash);
            index.store_predicted(worker, &[first, second, third, fourth], None);
            // The entries of `second` and then `third` are freed; a block hashed 0 takes the
            // last freed, `third`'s, so the entry after `first`'s is a freed one.
            assert!(index.remove_predicted(worker, second));
            assert!(index.remove_predicted(worker, third));
            index.store_predicted(worker, &[SequenceHash(0)], None);
            let mut out = Vec::new();
            index.prefix_lengths(&[first, SequenceHash(0)], &workers, &mut out);
            assert_eq!(out[at], 2, "{count} workers");
            check_passes(&index, &workers, &[&[first, SequenceHash(0), fourth]]);
        }
    }
}
