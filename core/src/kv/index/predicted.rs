//! Blocks the router predicts rather than learns from events (routing without KV events, see
//! [`PredictedCache`](crate::kv::PredictedCache)): stored as a worker that names its blocks by
//! their sequence hashes would store them (upstream turns a routing decision into such a
//! `stored` event), and removed by sequence hash when their prediction expires.

use super::KvIndex;
use super::block_lineage::Origin;
use crate::block_identity::{EngineBlockHash, LocalBlockHash, SequenceHash};
use crate::identity::WorkerId;

impl KvIndex {
    /// Marks `blocks` (a prompt's sequence hashes, in order) as cached on `worker`, each named
    /// by its sequence hash. `locals` are the blocks' local hashes when the caller has them
    /// (the dump needs them to chain blocks; a block stored without them is left out of
    /// [`KvIndex::dump_events`]). Returns how many memberships were added (0 for an untracked
    /// worker; blocks it already holds are kept as they are).
    pub fn store_predicted(
        &mut self,
        worker: WorkerId,
        blocks: &[SequenceHash],
        locals: Option<&[LocalBlockHash]>,
    ) -> usize {
        let Some(slot) = self.by_worker.get(worker) else {
            return 0;
        };
        let before = self.memberships;
        let mut parent = None;
        for (n, block) in blocks.iter().enumerate() {
            // Without a local hash the lineage check (parent chained with the local hash gives
            // the block) fails, so the dump skips the block rather than write a wrong one.
            let local = locals
                .and_then(|locals| locals.get(n))
                .copied()
                .unwrap_or(LocalBlockHash(0));
            let held = self
                .find_block(block.0)
                .is_some_and(|existing| self.holds(slot, existing));
            if !held {
                self.store(slot, block.0, block.0, Origin::new(local, parent));
            }
            parent = Some(block.0);
        }
        self.memberships - before
    }

    /// Drops `worker`'s membership of the block with sequence hash `block`; returns whether it
    /// held it.
    pub fn remove_predicted(&mut self, worker: WorkerId, block: SequenceHash) -> bool {
        let Some(slot) = self.by_worker.get(worker) else {
            return false;
        };
        match self.find_block(block.0) {
            Some(found) if self.holds(slot, found) => {
                self.remove_membership(slot, found);
                true
            }
            _ => false,
        }
    }

    /// The sequence hash of the block `worker` holds under engine hash `engine`, if it holds
    /// one (what an engine's `removed` names, resolved before the removal is applied).
    pub fn held_sequence_hash(
        &self,
        worker: WorkerId,
        engine: EngineBlockHash,
    ) -> Option<SequenceHash> {
        let slot = self.by_worker.get(worker)?;
        let block = self.block_of_engine(slot, engine.0)?;
        Some(SequenceHash(self.blocks.get(block).seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::hashing::{block_hashes, sequence_hashes};

    #[test]
    fn predicted_blocks_give_a_prefix_and_expire_one_by_one() {
        let mut index = KvIndex::new();
        let worker = WorkerId::new(1, 0);
        index.add_worker(worker);
        let tokens: Vec<u32> = (0..64).collect();
        let hashes = sequence_hashes(&block_hashes(&tokens, 16));
        assert_eq!(index.store_predicted(worker, &hashes, None), 4);
        assert_eq!(
            index.store_predicted(worker, &hashes, None),
            0,
            "already held"
        );
        assert_eq!(index.prefix_length(&hashes, worker), 4);
        assert!(index.remove_predicted(worker, hashes[3]));
        assert!(!index.remove_predicted(worker, hashes[3]));
        assert_eq!(index.prefix_length(&hashes, worker), 3);
        assert_eq!(index.store_predicted(WorkerId::new(9, 0), &hashes, None), 0);
    }

    #[test]
    fn predicted_blocks_with_local_hashes_are_dumped_and_those_without_are_not() {
        let mut index = KvIndex::with_lineage();
        let (a, b) = (WorkerId::new(1, 0), WorkerId::new(2, 0));
        index.add_worker(a);
        index.add_worker(b);
        let locals = block_hashes(&(0..48).collect::<Vec<u32>>(), 16);
        let hashes = sequence_hashes(&locals);
        index.store_predicted(a, &hashes, Some(&locals));
        let other = sequence_hashes(&block_hashes(&(100..148).collect::<Vec<u32>>(), 16));
        index.store_predicted(b, &other, None);
        let dumped = index.dump_events().unwrap();
        let mut restored = KvIndex::new();
        restored.add_worker(a);
        restored.add_worker(b);
        for event in &dumped {
            restored.restore(event);
        }
        assert_eq!(restored.prefix_length(&hashes, a), 3);
        assert_eq!(restored.prefix_length(&other, b), 0);
    }
}
