//! Engine-neutral workloads: KV events and overlap queries that every engine is fed alike, and
//! the brute-force oracle that says what every overlap depth must be.

use std::collections::{HashMap, HashSet};

/// One stored block: its local hash (the tokens of the block alone) and its sequence hash (the
/// block chained with every block before it).
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub local: u64,
    pub seq: u64,
}

/// What an event reports.
#[derive(Clone, Debug)]
pub enum Change {
    /// Blocks appended after the block whose sequence hash is `parent` (`None`: at the root).
    Stored {
        parent: Option<u64>,
        blocks: Vec<Block>,
    },
    /// Blocks evicted, named by sequence hash, children before parents.
    Removed { seqs: Vec<u64> },
}

/// One worker's event.
#[derive(Clone, Debug)]
pub struct Event {
    /// Worker index, `0..workers`.
    pub worker: u32,
    pub event_id: u64,
    pub change: Change,
}

impl Event {
    /// Blocks the event stores.
    pub fn stored_blocks(&self) -> usize {
        match &self.change {
            Change::Stored { blocks, .. } => blocks.len(),
            Change::Removed { .. } => 0,
        }
    }
}

/// One overlap query: the request's blocks, and its tokens when it has them.
#[derive(Clone, Debug)]
pub struct Query {
    pub local: Vec<u64>,
    pub seq: Vec<u64>,
    pub tokens: Option<Vec<u32>>,
}

/// How the engines of a workload name blocks in their events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlockIds {
    /// By sequence hash, as upstream's mocker and its own benches do. Upstream's
    /// `PositionalIndexer` needs it: it matches a block's reported id against the sequence hash
    /// it computes from the query's local hashes.
    #[default]
    Sequence,
    /// By an id of the engine's own, the same on every worker, never the sequence hash: engines
    /// that hash blocks their own way (vLLM, SGLang).
    Own,
}

impl BlockIds {
    /// The id an engine reports for the block of sequence hash `seq`.
    pub fn id(self, seq: u64) -> u64 {
        match self {
            BlockIds::Sequence => seq,
            // A bijection with no fixed point in practice (a rotation of a masked hash).
            BlockIds::Own => (seq ^ 0xA076_1D64_78BD_642F).rotate_left(29),
        }
    }
}

/// Which worker holds which sequence hash, by brute force.
#[derive(Default)]
pub struct Oracle {
    held: HashMap<u32, HashSet<u64>>,
}

impl Oracle {
    /// Applies `event`.
    pub fn apply(&mut self, event: &Event) {
        let held = self.held.entry(event.worker).or_default();
        match &event.change {
            Change::Stored { blocks, .. } => held.extend(blocks.iter().map(|b| b.seq)),
            Change::Removed { seqs } => {
                for seq in seqs {
                    held.remove(seq);
                }
            }
        }
    }

    /// The number of leading `seqs` held by `worker`.
    pub fn depth(&self, worker: u32, seqs: &[u64]) -> u32 {
        self.held.get(&worker).map_or(0, |held| {
            seqs.iter().take_while(|seq| held.contains(seq)).count() as u32
        })
    }

    /// Every worker's depth for `seqs`.
    pub fn depths(&self, workers: u32, seqs: &[u64]) -> Vec<u32> {
        (0..workers).map(|w| self.depth(w, seqs)).collect()
    }

    /// (worker, block) memberships.
    pub fn memberships(&self) -> usize {
        self.held.values().map(HashSet::len).sum()
    }

    /// Blocks held by `worker`.
    pub fn held_by(&self, worker: u32) -> usize {
        self.held.get(&worker).map_or(0, HashSet::len)
    }
}

/// A workload: events that build the index, then queries against the built index.
pub struct Workload {
    pub name: String,
    pub workers: u32,
    pub block_size: u32,
    /// Events applied in order before the queries (the ingest phase).
    pub events: Vec<Event>,
    /// Queries; when `interleaved` is set, query `i` runs after `events[..checkpoints[i]]`.
    pub queries: Vec<Query>,
    /// For replayed traces: how many events precede each query.
    pub checkpoints: Option<Vec<usize>>,
    /// The depth every engine must report, per query and worker.
    pub expected: Vec<Vec<u32>>,
    /// (worker, block) memberships after every event.
    pub memberships: usize,
}

/// SplitMix64: the same workload on every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::{BlockIds, Rng};
    use std::collections::HashSet;

    #[test]
    fn own_block_ids_are_distinct_and_never_the_sequence_hash() {
        let mut rng = Rng(3);
        let seqs: Vec<u64> = (0..100_000)
            .map(|_| rng.next_u64())
            .chain([0, 1, u64::MAX])
            .collect();
        let ids: HashSet<u64> = seqs.iter().map(|seq| BlockIds::Own.id(*seq)).collect();
        assert_eq!(ids.len(), seqs.len(), "two blocks got one id");
        for seq in &seqs {
            assert_ne!(
                BlockIds::Own.id(*seq),
                *seq,
                "block {seq:#x} is named by its hash"
            );
            assert_eq!(BlockIds::Sequence.id(*seq), *seq);
        }
    }
}
