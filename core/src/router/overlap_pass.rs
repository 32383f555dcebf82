//! The overlap pass of one booking (REFERENCE §3): one walk over the index that gives each
//! candidate's cached prefix and records the canonical engine id of every block some candidate
//! caches. Its result is also the booking's [`BlockLookup`]: it serves the request's engine
//! block hashes from what the pass recorded (a slice copy), and asks the index only for
//! workers that report their own engine ids or for blocks outside what the pass saw (the pass's
//! [`RecordedEngines`] says which).

use crate::block_identity::{EngineBlockHash, SequenceHash};
use crate::identity::WorkerId;
use crate::kv::{KvIndex, PredictedBlocks, RecordedEngines};
use crate::plugins::BlockLookup;
use std::time::Duration;

/// What one booking's overlap pass saw, with the index for everything else.
pub(crate) struct OverlapPass<'a> {
    /// The index, under the booking's read lock.
    pub(crate) index: &'a KvIndex,
    /// The request's sequence hashes.
    pub(crate) sequence_hashes: &'a [SequenceHash],
    /// The canonical engine hash of each block below the longest cached prefix, and whether
    /// they are each candidate's own.
    pub(crate) engines: &'a RecordedEngines,
    /// The candidates, sorted by id.
    pub(crate) workers: &'a [WorkerId],
    /// Each candidate's cached prefix length, in `workers` order.
    pub(crate) lengths: &'a [usize],
    /// With predictions alongside KV events: each candidate's longer of its `lengths` and its
    /// predicted prefix. Only [`OverlapPass::cached_blocks`] reads it; the engine ids stay
    /// those of `lengths`, the event-driven prefixes.
    merged: Option<&'a [usize]>,
}

impl<'a> OverlapPass<'a> {
    /// Runs the pass of `sequence_hashes` over `workers` (sorted by id), into the booking's
    /// reused `lengths` and `engines` buffers.
    pub(crate) fn run(
        index: &'a KvIndex,
        sequence_hashes: &'a [SequenceHash],
        workers: &'a [WorkerId],
        lengths: &'a mut Vec<usize>,
        engines: &'a mut RecordedEngines,
    ) -> Self {
        index.prefix_lengths_and_engines(sequence_hashes, workers, lengths, engines);
        OverlapPass {
            index,
            sequence_hashes,
            engines,
            workers,
            lengths,
            merged: None,
        }
    }

    /// Counts, per candidate, the longer of its event-driven prefix and the one `predicted`
    /// (the side table of predictions alongside KV events) gives it at `now`, into the reused
    /// `merged`. Engine ids are still looked up in the event-driven index only.
    pub(crate) fn with_predictions(
        self,
        predicted: &PredictedBlocks,
        now: Duration,
        merged: &'a mut Vec<usize>,
    ) -> Self {
        predicted.prefix_lengths(self.sequence_hashes, self.workers, now, merged);
        for (merged, event_driven) in merged.iter_mut().zip(self.lengths) {
            *merged = (*merged).max(*event_driven);
        }
        OverlapPass {
            merged: Some(merged),
            ..self
        }
    }

    /// Each candidate's cached prefix length, in candidate (id) order.
    pub(crate) fn cached_blocks(&self) -> &'a [usize] {
        self.merged.unwrap_or(self.lengths)
    }

    /// The recorded engine hashes of blocks `first..first + hashes.len()`, when they are
    /// `worker`'s own: the blocks are within its cached prefix, `hashes` are the request's, and
    /// the pass found that the worker holds every block under its canonical engine id.
    fn recorded(
        &self,
        worker: WorkerId,
        first: usize,
        hashes: &[SequenceHash],
    ) -> Option<&[EngineBlockHash]> {
        let end = first.checked_add(hashes.len())?;
        let position = self.workers.binary_search(&worker).ok()?;
        if end > *self.lengths.get(position)? {
            return None;
        }
        let ours = self.sequence_hashes.get(first..end)?;
        if !(std::ptr::eq(ours.as_ptr(), hashes.as_ptr()) || ours == hashes) {
            return None;
        }
        self.engines.own(position, first..end)
    }
}

impl BlockLookup for OverlapPass<'_> {
    fn engine_block_hash(
        &self,
        worker: WorkerId,
        sequence_hash: SequenceHash,
    ) -> Option<EngineBlockHash> {
        self.index.engine_block_hash(worker, sequence_hash)
    }

    fn engine_block_hashes(
        &self,
        worker: WorkerId,
        first_block: usize,
        sequence_hashes: &[SequenceHash],
    ) -> Option<Vec<EngineBlockHash>> {
        if let Some(recorded) = self.recorded(worker, first_block, sequence_hashes) {
            return Some(recorded.to_vec());
        }
        self.index
            .engine_block_hashes(worker, first_block, sequence_hashes)
    }

    fn recorded_engine_block_hashes(
        &self,
        worker: WorkerId,
        first_block: usize,
        sequence_hashes: &[SequenceHash],
    ) -> Option<&[EngineBlockHash]> {
        self.recorded(worker, first_block, sequence_hashes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_identity::LocalBlockHash;
    use crate::kv::{KvCacheEventData, RouterEvent, sequence_hashes};

    fn worker(n: u64) -> WorkerId {
        WorkerId::new(n, 0)
    }

    /// Worker `w` stores blocks `(engine id, local hash)` from the root.
    fn store(index: &mut KvIndex, w: u64, blocks: &[(u64, u64)]) {
        let event = RouterEvent::new(
            worker(w),
            0,
            KvCacheEventData::stored(
                None,
                blocks
                    .iter()
                    .map(|(engine, local)| (EngineBlockHash(*engine), LocalBlockHash(*local))),
            ),
        );
        let _ = index.apply(&event);
    }

    fn engines(ids: &[u64]) -> Vec<EngineBlockHash> {
        ids.iter().copied().map(EngineBlockHash).collect()
    }

    #[test]
    fn recorded_ids_agree_with_the_index_for_canonical_and_own_engine_ids() {
        let mut index = KvIndex::new();
        for w in 1..=3 {
            index.add_worker(worker(w));
        }
        let seqs = sequence_hashes(&[10, 11, 12, 13].map(LocalBlockHash));
        // Worker 1 reports canonical ids, worker 2 its own for blocks 1 and 2, worker 3 holds
        // only the first two blocks.
        store(&mut index, 1, &[(100, 10), (101, 11), (102, 12), (103, 13)]);
        store(&mut index, 2, &[(100, 10), (901, 11), (902, 12)]);
        store(&mut index, 3, &[(100, 10), (101, 11)]);
        let workers = [worker(1), worker(2), worker(3)];
        let (mut lengths, mut recorded) = (Vec::new(), RecordedEngines::default());
        let lookup = OverlapPass::run(&index, &seqs, &workers, &mut lengths, &mut recorded);
        assert_eq!(lookup.cached_blocks(), [4, 3, 2]);
        assert_eq!(lookup.engines.hashes(), engines(&[100, 101, 102, 103]));
        // Workers 1 and 3 hold their blocks under the canonical ids, worker 2 does not.
        assert_eq!(
            lookup.engines.own(0, 0..4),
            Some(&engines(&[100, 101, 102, 103])[..])
        );
        assert_eq!(lookup.engines.own(1, 0..1), None);
        assert_eq!(lookup.engines.own(2, 0..2), Some(&engines(&[100, 101])[..]));
        for w in &workers {
            for first in 0..=seqs.len() {
                for end in first..=seqs.len() {
                    let expected: Option<Vec<EngineBlockHash>> = seqs[first..end]
                        .iter()
                        .map(|seq| index.engine_block_hash(*w, *seq))
                        .collect();
                    // The request's own slice and an equal copy of it.
                    let copy = seqs[first..end].to_vec();
                    for hashes in [&seqs[first..end], &copy[..]] {
                        assert_eq!(
                            lookup.engine_block_hashes(*w, first, hashes),
                            expected,
                            "{w} {first}..{end}"
                        );
                        // What the pass lends is what it would copy.
                        if let Some(lent) = lookup.recorded_engine_block_hashes(*w, first, hashes) {
                            assert_eq!(Some(lent.to_vec()), expected, "{w} {first}..{end}");
                        }
                    }
                }
            }
        }
        assert_eq!(
            lookup.engine_block_hashes(worker(2), 1, &seqs[1..3]),
            Some(engines(&[901, 902]))
        );
        // A first block that does not match the hashes falls back to the index.
        assert_eq!(
            lookup.engine_block_hashes(worker(1), 0, &seqs[2..4]),
            Some(engines(&[102, 103]))
        );
        assert_eq!(lookup.engine_block_hashes(worker(9), 0, &seqs[..1]), None);
        // The pass lends canonical ids its workers hold, never a worker's own.
        assert_eq!(
            lookup.recorded_engine_block_hashes(worker(1), 1, &seqs[1..4]),
            Some(&engines(&[101, 102, 103])[..])
        );
        assert_eq!(
            lookup.recorded_engine_block_hashes(worker(2), 1, &seqs[1..3]),
            None
        );
        assert_eq!(
            lookup.recorded_engine_block_hashes(worker(9), 0, &seqs[..1]),
            None
        );
    }
}
