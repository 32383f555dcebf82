//! A simulated worker and the work it queues.

use crate::block_cache::BlockCache;
use crate::outcome::StageOutcome;
use dynamo_kv_router::kv::EngineBlockHash;
use dynamo_kv_router::router::WorkerId;
use std::collections::VecDeque;

/// A `kv.fetch` to execute: the source worker and its engine hashes, root-aligned (entry `i`
/// names request block `i`).
pub(super) struct FetchOrder {
    /// The source worker's index.
    pub(super) source: u32,
    /// The engine hashes it names, entry `i` for request block `i`.
    pub(super) block_hashes: Vec<EngineBlockHash>,
}

/// A booked request stage queued on its worker.
pub(super) struct Job {
    pub(super) request: u32,
    pub(super) stage: u8,
    pub(super) arrived_us: u64,
    pub(super) fetches: Vec<FetchOrder>,
    /// The prefix the router said the worker cached when it booked it.
    pub(super) predicted_local: u32,
}

/// One simulated worker: its cache, queue, event numbering and usage.
pub(super) struct SimWorker {
    pub(super) id: WorkerId,
    pub(super) stage: u8,
    pub(super) cache: BlockCache,
    pub(super) next_event_id: u64,
    pub(super) queue: VecDeque<Job>,
    pub(super) running: Option<StageOutcome>,
    pub(super) busy_us: u64,
    pub(super) served: u64,
    /// Blocks named by this worker's `stored` events.
    pub(super) stored_blocks: u64,
    /// Blocks named by this worker's `removed` events.
    pub(super) removed_blocks: u64,
}

impl SimWorker {
    /// An idle worker `id` of `stage` with an empty cache of `capacity_blocks`.
    pub(super) fn new(id: WorkerId, stage: u8, capacity_blocks: usize) -> Self {
        SimWorker {
            id,
            stage,
            cache: BlockCache::new(capacity_blocks),
            next_event_id: 0,
            queue: VecDeque::new(),
            running: None,
            busy_us: 0,
            served: 0,
            stored_blocks: 0,
            removed_blocks: 0,
        }
    }
}
