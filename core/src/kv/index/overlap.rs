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
        let hashes = std::iter::once(first).chain(hashes);
        let (group0, groups);
        let lengths: &[u32] = if self.slots.len() <= GROUP {
            group0 = self.pass_group0(hashes, first_block, mask, record);
            &group0
        } else {
            groups = self.pass_groups(hashes, out, record);
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
    /// of the slab rather than one random table probe per block.
    fn pass_group0(
        &self,
        hashes: impl Iterator<Item = u64>,
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
        for hash in hashes {
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
                record(position as usize, hash, self.canonical_engine(block));
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
}
