//! The KV index: which worker caches which block, fed by KV events, queried per booking.

use super::event::KvEvent;
use super::event_outcome::{EventOutcome, IgnoreReason};
use crate::plugins::BlockLookup;
use crate::router::worker::WorkerId;

/// A worker's position in the index's holder sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerSlot(pub u32);

/// Event and block counts the index keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexCounters {
    /// Events applied.
    pub events_applied: u64,
    /// Events ignored, per [`IgnoreReason`] (indexed by `IgnoreReason::ALL` order).
    pub events_ignored: [u64; IgnoreReason::ALL.len()],
    /// Blocks stored by applied events.
    pub stored_blocks: u64,
    /// Blocks removed by applied events.
    pub removed_blocks: u64,
    /// Removals that named a block the worker does not hold.
    pub unknown_block_removals: u64,
    /// Stored events whose parent the worker does not hold (blocks are still stored).
    pub unknown_parents: u64,
    /// `cleared` events applied.
    pub clears: u64,
}

/// Which registered worker caches which block.
#[derive(Default)]
pub struct KvIndex {
    counters: IndexCounters,
}

impl KvIndex {
    /// An empty index with no workers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts tracking `worker`; returns `false` if it was already tracked.
    pub fn add_worker(&mut self, _worker: WorkerId) -> bool {
        true
    }

    /// Stops tracking `worker` and drops every block it held; returns `false` if it was unknown.
    pub fn remove_worker(&mut self, _worker: WorkerId) -> bool {
        true
    }

    /// Applies one event, counting anomalies.
    pub fn apply(&mut self, _event: &KvEvent) -> EventOutcome {
        EventOutcome::Applied
    }

    /// Counts an event that could not be read.
    pub fn note_malformed(&mut self) {
        self.counters.events_ignored[IgnoreReason::Malformed.index()] += 1;
    }

    /// For each of `workers`, the number of leading `sequence_hashes` it caches, in one pass.
    pub fn prefix_lengths(
        &self,
        sequence_hashes: &[u64],
        workers: &[WorkerId],
        out: &mut Vec<usize>,
    ) {
        let _ = sequence_hashes;
        out.clear();
        out.resize(workers.len(), 0);
    }

    /// (worker, block) memberships held.
    pub fn memberships(&self) -> usize {
        0
    }

    /// The counters.
    pub fn counters(&self) -> &IndexCounters {
        &self.counters
    }
}

impl BlockLookup for KvIndex {
    fn engine_block_hash(&self, _worker: WorkerId, _sequence_hash: u64) -> Option<u64> {
        None
    }
}
