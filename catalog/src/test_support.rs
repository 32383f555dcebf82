//! Hand-built clusters and request views for the unit tests.

use dynamo_kv_router::kv::{EngineBlockHash, SequenceHash};
use dynamo_kv_router::plugins::{
    BlockLookup, Candidate, HintContext, KvCopy, RequestView, SessionContext, WorkerLoad,
    WorkerSelectionContext,
};
use dynamo_kv_router::router::{Role, WorkerId};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// Tokens per block in every test cluster.
pub const BLOCK_SIZE: u32 = 16;

/// Worker `id` at rank 0.
pub fn worker(id: u64) -> WorkerId {
    WorkerId::new(id, 0)
}

/// The engine hash a test worker reports for block `index`: recognisable in assertions.
pub fn engine_hash(worker: WorkerId, index: usize) -> EngineBlockHash {
    EngineBlockHash(worker.worker_id * 1_000 + u64::from(worker.dp_rank) * 100 + index as u64)
}

/// An index that knows the engine hashes the test cluster registered.
#[derive(Default)]
pub struct MapLookup(HashMap<(WorkerId, SequenceHash), EngineBlockHash>);

impl BlockLookup for MapLookup {
    fn engine_block_hash(
        &self,
        worker: WorkerId,
        sequence_hash: SequenceHash,
    ) -> Option<EngineBlockHash> {
        self.0.get(&(worker, sequence_hash)).copied()
    }
}

/// A request of `blocks` full blocks and the role's workers.
pub struct Cluster {
    sequence_hashes: Vec<SequenceHash>,
    candidates: Vec<Candidate>,
    lookup: MapLookup,
    session: SessionContext,
    /// Prompt length in tokens (defaults to `blocks * BLOCK_SIZE`).
    pub prompt_tokens: usize,
    /// Tokens per block.
    pub block_size: u32,
}

/// A candidate being added to a [`Cluster`].
pub struct CandidateMut<'a>(&'a mut Candidate);

impl CandidateMut<'_> {
    /// Advertises `router_hint` with source endpoint `endpoint`.
    pub fn hint(self, endpoint: &str) -> Self {
        self.0.router_hint = true;
        self.0.source_endpoint = Some(Arc::from(endpoint));
        self
    }

    /// Advertises `router_hint` without a source endpoint.
    pub fn hint_without_endpoint(self) -> Self {
        self.0.router_hint = true;
        self.0.source_endpoint = None;
        self
    }

    /// Sets the worker's reserved load.
    pub fn load(
        self,
        active_prefill_tokens: u64,
        active_blocks: u64,
        active_requests: u64,
    ) -> Self {
        self.0.load = WorkerLoad {
            active_prefill_tokens,
            active_blocks,
            active_requests,
            additional_active_blocks: 0,
        };
        self
    }
}

impl Cluster {
    /// A request of `blocks` full blocks and no workers yet.
    pub fn new(blocks: usize) -> Self {
        Self {
            sequence_hashes: (0..blocks as u64)
                .map(|i| SequenceHash(0xA000_0000 + i))
                .collect(),
            candidates: Vec::new(),
            lookup: MapLookup::default(),
            session: SessionContext::default(),
            prompt_tokens: blocks * BLOCK_SIZE as usize,
            block_size: BLOCK_SIZE,
        }
    }

    /// Adds worker `id` (rank 0) caching the first `cached` blocks, idle, without `router_hint`.
    pub fn add(&mut self, id: u64, cached: usize) -> CandidateMut<'_> {
        self.add_worker(worker(id), cached)
    }

    /// Adds `worker` caching the first `cached` blocks, idle, without `router_hint`.
    pub fn add_worker(&mut self, worker: WorkerId, cached: usize) -> CandidateMut<'_> {
        for (index, hash) in self.sequence_hashes.iter().take(cached).enumerate() {
            self.lookup
                .0
                .insert((worker, *hash), engine_hash(worker, index));
        }
        self.candidates.push(Candidate {
            worker,
            cached_blocks: cached,
            load: WorkerLoad::default(),
            router_hint: false,
            source_endpoint: None,
        });
        let last = self.candidates.len() - 1;
        CandidateMut(&mut self.candidates[last])
    }

    /// Makes the index forget worker `id`'s engine hash of block `index`.
    pub fn forget(&mut self, id: u64, index: usize) {
        let hash = self.sequence_hashes[index];
        self.lookup.0.remove(&(worker(id), hash));
    }

    /// Worker `id`'s engine hashes of `blocks`.
    pub fn engine_hashes(&self, id: u64, blocks: Range<usize>) -> Vec<EngineBlockHash> {
        blocks.map(|index| engine_hash(worker(id), index)).collect()
    }

    /// The candidates as policies see them.
    pub fn candidates(&self) -> Vec<Candidate> {
        self.candidates.clone()
    }

    /// Calls `f` with the request view of this cluster.
    pub fn with_view<R>(&self, f: impl FnOnce(&RequestView<'_>) -> R) -> R {
        let view = RequestView {
            request_id: "req-1",
            role: Role::Decode,
            prompt_tokens: self.prompt_tokens,
            block_size: self.block_size,
            session: &self.session,
            sequence_hashes: &self.sequence_hashes,
            candidates: &self.candidates,
            blocks: &self.lookup,
        };
        f(&view)
    }

    /// Calls `f` with a selection context for this cluster.
    pub fn with_selection<R>(&self, f: impl FnOnce(&WorkerSelectionContext<'_>) -> R) -> R {
        self.with_view(|view| f(&WorkerSelectionContext::new(*view)))
    }

    /// Calls `f` with a hint context for a booking on `booked` with `copy` committed.
    pub fn with_hint<R>(
        &self,
        booked: WorkerId,
        copy: Option<&KvCopy>,
        f: impl FnOnce(&HintContext<'_>) -> R,
    ) -> R {
        self.with_view(|view| f(&HintContext::new(*view, booked, copy)))
    }
}
