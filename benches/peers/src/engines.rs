//! The engines under comparison behind one interface: ours (`KvIndex`) and upstream's
//! `RadixTree`, `PositionalIndexer` and `ConcurrentRadixTreeCompressed` (behind its
//! `ThreadPoolIndexer`, which owns the per-worker lookup tables its events need).
//!
//! Each engine converts the neutral events and queries into its own types outside the timed
//! sections; the timed sections are the engine's apply and find calls.

use crate::workload::{BlockIds, Change, Event, Query, Workload};
use ours::kv::{
    EngineBlockHash as OurEngineHash, IndexOptions, KvCacheEventData as OurEventData, KvIndex,
    LocalBlockHash as OurLocalHash, RecordedEngines, RouterEvent as OurEvent, SequenceHash,
    sequence_hashes_iter,
};
use ours::router::WorkerId;
use rustc_hash::FxHashMap;
use upstream::indexer::positional::LevelIndex;
use upstream::indexer::{SyncIndexer, ThreadPoolIndexer};
use upstream::protocols::{
    BlockHashOptions, ExternalSequenceBlockHash, KvCacheEvent, KvCacheEventData, KvCacheRemoveData,
    KvCacheStoreData, KvCacheStoredBlockData, LocalBlockHash, OverlapScores, RouterEvent,
    WorkerWithDpRank, compute_block_hash_for_seq, compute_seq_hash_for_block,
};
use upstream::{ConcurrentRadixTreeCompressed, PositionalIndexer, RadixTree};

/// Worker ids start here on both sides.
const WORKER_BASE: u64 = 1000;

/// One engine under comparison.
pub trait Engine {
    /// Its events.
    type Event;
    /// A query's hashes as it takes them.
    type Hashes;
    /// What a find returns.
    type Answer;

    /// The engine's name in the tables.
    fn name(&self) -> &'static str;
    /// `event` in the engine's own types.
    fn convert(&self, event: &Event) -> Self::Event;
    /// Applies one event.
    fn apply(&mut self, event: Self::Event);
    /// Waits until every applied event is visible to finds.
    fn sync(&mut self) {}
    /// `query`'s hashes in the engine's own types.
    fn hashes(&self, query: &Query) -> Self::Hashes;
    /// Every worker's overlap depth, hashes given.
    fn find(&mut self, hashes: Self::Hashes) -> Self::Answer;
    /// Every worker's overlap depth, hashing the tokens first.
    fn find_tokens(&mut self, tokens: &[u32]) -> Self::Answer;
    /// `answer` as a depth per worker index.
    fn depths(&self, answer: &Self::Answer, out: &mut [u32]);
}

/// This project's index.
pub struct Ours {
    index: KvIndex,
    workers: Vec<WorkerId>,
    block_size: u32,
    ids: BlockIds,
    lengths: Vec<usize>,
    hashes: Vec<SequenceHash>,
    engines: RecordedEngines,
}

impl Ours {
    pub fn new(workers: u32, block_size: u32) -> Self {
        Self::with_capacity(workers, block_size, 0)
    }

    /// [`Ours::new`] with room for `blocks` distinct blocks made up front
    /// (`IndexOptions::capacity`), so that its tables do not grow while they fill.
    pub fn with_capacity(workers: u32, block_size: u32, blocks: usize) -> Self {
        let workers: Vec<WorkerId> = (0..workers)
            .map(|w| WorkerId::new(WORKER_BASE + u64::from(w), 0))
            .collect();
        // With lineage, as the service builds it: upstream's indexers can dump, so ours must
        // pay for dumping too for a fair comparison.
        let mut index = KvIndex::with_options(IndexOptions {
            capacity: blocks,
            lineage: true,
        });
        for worker in &workers {
            index.add_worker(*worker);
        }
        Self {
            index,
            lengths: Vec::with_capacity(workers.len()),
            workers,
            block_size,
            hashes: Vec::new(),
            engines: RecordedEngines::default(),
            ids: BlockIds::Sequence,
        }
    }

    /// What every booking does before its policies run, and no more: hash *every* block of
    /// `tokens` (the policies' `RequestView::sequence_hashes` holds one hash per full block,
    /// and the booking's active chain needs them all) into a reused buffer, then one pass that
    /// records the engine ids `kv_fetch` names. The floor of `Router::book`.
    pub fn booking_floor(&mut self, tokens: &[u32]) {
        self.hashes.clear();
        sequence_hashes_iter(tokens, self.block_size).append_to(&mut self.hashes);
        self.index.prefix_lengths_and_engines(
            &self.hashes,
            &self.workers,
            &mut self.lengths,
            &mut self.engines,
        );
    }

    /// This index fed events whose blocks are named as `ids` says.
    pub fn with_ids(self, ids: BlockIds) -> Self {
        Self { ids, ..self }
    }
}

/// The distinct blocks our index holds after every event of `workload`.
pub fn distinct_blocks_at_end(workload: &Workload) -> usize {
    let mut ours = Ours::new(workload.workers, workload.block_size);
    for event in &workload.events {
        let _ = ours.index.apply(&our_event(event, BlockIds::Sequence));
    }
    ours.index.distinct_blocks()
}

/// `event` as this project's KV event (upstream's form: local hashes chained by parent), its
/// blocks named as `ids` says.
pub fn our_event(event: &Event, ids: BlockIds) -> OurEvent {
    let id = |seq: u64| OurEngineHash(ids.id(seq));
    let data = match &event.change {
        Change::Stored { parent, blocks } => OurEventData::stored(
            parent.map(id),
            blocks.iter().map(|b| (id(b.seq), OurLocalHash(b.local))),
        ),
        Change::Removed { seqs } => OurEventData::removed(seqs.iter().map(|s| id(*s))),
    };
    OurEvent::new(
        WorkerId::new(WORKER_BASE + u64::from(event.worker), 0),
        event.event_id,
        data,
    )
}

impl Engine for Ours {
    type Event = OurEvent;
    type Hashes = Vec<SequenceHash>;
    type Answer = ();

    fn name(&self) -> &'static str {
        "ours KvIndex"
    }

    fn convert(&self, event: &Event) -> OurEvent {
        our_event(event, self.ids)
    }

    fn apply(&mut self, event: OurEvent) {
        let _ = self.index.apply(&event);
    }

    fn hashes(&self, query: &Query) -> Vec<SequenceHash> {
        query.seq.iter().copied().map(SequenceHash).collect()
    }

    fn find(&mut self, hashes: Vec<SequenceHash>) {
        self.index
            .prefix_lengths(&hashes, &self.workers, &mut self.lengths);
    }

    fn find_tokens(&mut self, tokens: &[u32]) {
        // Hashes only as far as some worker continues the prefix.
        self.index.prefix_lengths_streamed(
            sequence_hashes_iter(tokens, self.block_size),
            &self.workers,
            &mut self.lengths,
            &mut self.hashes,
        );
    }

    fn depths(&self, _: &(), out: &mut [u32]) {
        for (depth, length) in out.iter_mut().zip(&self.lengths) {
            *depth = *length as u32;
        }
    }
}

/// `event` as upstream's router event, its blocks named as `ids` says.
pub fn upstream_event(event: &Event, ids: BlockIds) -> RouterEvent {
    let data = match &event.change {
        Change::Stored { parent, blocks } => KvCacheEventData::Stored(KvCacheStoreData {
            parent_hash: parent.map(|p| ExternalSequenceBlockHash(ids.id(p))),
            start_position: None,
            blocks: blocks
                .iter()
                .map(|b| KvCacheStoredBlockData {
                    block_hash: ExternalSequenceBlockHash(ids.id(b.seq)),
                    tokens_hash: LocalBlockHash(b.local),
                    mm_extra_info: None,
                })
                .collect(),
        }),
        Change::Removed { seqs } => KvCacheEventData::Removed(KvCacheRemoveData {
            block_hashes: seqs
                .iter()
                .map(|s| ExternalSequenceBlockHash(ids.id(*s)))
                .collect(),
        }),
    };
    RouterEvent::new(
        WORKER_BASE + u64::from(event.worker),
        KvCacheEvent {
            event_id: event.event_id,
            data,
            dp_rank: 0,
        },
    )
}

fn local_hashes(query: &Query) -> Vec<LocalBlockHash> {
    query.local.iter().copied().map(LocalBlockHash).collect()
}

/// Upstream's local block hashes of `tokens` (what its `find_matches_for_request` computes).
pub fn upstream_hash(tokens: &[u32], block_size: u32) -> Vec<LocalBlockHash> {
    compute_block_hash_for_seq(tokens, block_size, BlockHashOptions::default())
}

/// Checks that upstream hashes `workload`'s queries as the workload does: the local hashes of
/// its tokens and the sequence hashes chained from its local hashes.
pub fn check_hashing(workload: &Workload) -> Result<(), String> {
    for (n, query) in workload.queries.iter().enumerate().take(8) {
        let local: Vec<LocalBlockHash> = query.local.iter().copied().map(LocalBlockHash).collect();
        if compute_seq_hash_for_block(&local) != query.seq {
            return Err(format!(
                "query {n}: upstream chains the local hashes differently"
            ));
        }
        if let Some(tokens) = &query.tokens
            && upstream_hash(tokens, workload.block_size) != local
        {
            return Err(format!("query {n}: upstream hashes the tokens differently"));
        }
    }
    Ok(())
}

fn scores_to_depths(scores: &OverlapScores, out: &mut [u32]) {
    out.fill(0);
    for (worker, score) in &scores.scores {
        if let Some(slot) = out.get_mut((worker.worker_id - WORKER_BASE) as usize) {
            *slot = *score;
        }
    }
}

/// Upstream's single-threaded radix tree.
pub struct UpstreamRadix {
    tree: RadixTree,
    block_size: u32,
    ids: BlockIds,
}

impl UpstreamRadix {
    pub fn new(block_size: u32) -> Self {
        Self {
            tree: RadixTree::new(),
            block_size,
            ids: BlockIds::Sequence,
        }
    }

    /// This tree fed events whose blocks are named as `ids` says.
    pub fn with_ids(self, ids: BlockIds) -> Self {
        Self { ids, ..self }
    }
}

impl Engine for UpstreamRadix {
    type Event = RouterEvent;
    type Hashes = Vec<LocalBlockHash>;
    type Answer = OverlapScores;

    fn name(&self) -> &'static str {
        "upstream RadixTree"
    }

    fn convert(&self, event: &Event) -> RouterEvent {
        upstream_event(event, self.ids)
    }

    fn apply(&mut self, event: RouterEvent) {
        let _ = self.tree.apply_event(event);
    }

    fn hashes(&self, query: &Query) -> Vec<LocalBlockHash> {
        local_hashes(query)
    }

    fn find(&mut self, hashes: Vec<LocalBlockHash>) -> OverlapScores {
        self.tree.find_matches(hashes, false)
    }

    fn find_tokens(&mut self, tokens: &[u32]) -> OverlapScores {
        self.tree
            .find_matches(upstream_hash(tokens, self.block_size), false)
    }

    fn depths(&self, answer: &OverlapScores, out: &mut [u32]) {
        scores_to_depths(answer, out);
    }
}

/// Upstream's positional (nested map) indexer; the per-worker block table its events need is
/// kept here, as its worker thread would keep it.
pub struct UpstreamPositional {
    index: PositionalIndexer,
    worker_blocks: FxHashMap<WorkerWithDpRank, LevelIndex>,
    block_size: u32,
}

impl UpstreamPositional {
    pub fn new(block_size: u32) -> Self {
        Self {
            index: PositionalIndexer::new(32),
            worker_blocks: FxHashMap::default(),
            block_size,
        }
    }
}

impl Engine for UpstreamPositional {
    type Event = RouterEvent;
    type Hashes = Vec<LocalBlockHash>;
    type Answer = OverlapScores;

    fn name(&self) -> &'static str {
        "upstream PositionalIndexer"
    }

    fn convert(&self, event: &Event) -> RouterEvent {
        // It can take no other ids (see `BlockIds::Sequence`).
        upstream_event(event, BlockIds::Sequence)
    }

    fn apply(&mut self, event: RouterEvent) {
        let _ = self.index.apply_event(&mut self.worker_blocks, event, None);
    }

    fn hashes(&self, query: &Query) -> Vec<LocalBlockHash> {
        local_hashes(query)
    }

    fn find(&mut self, hashes: Vec<LocalBlockHash>) -> OverlapScores {
        self.index.find_matches(&hashes, false)
    }

    fn find_tokens(&mut self, tokens: &[u32]) -> OverlapScores {
        self.index
            .find_matches(&upstream_hash(tokens, self.block_size), false)
    }

    fn depths(&self, answer: &OverlapScores, out: &mut [u32]) {
        scores_to_depths(answer, out);
    }
}

/// Upstream's concurrent compressed radix tree behind its thread-pool indexer with one event
/// thread (finds run on the caller's thread, as upstream's `find_matches` does).
pub struct UpstreamCrtc {
    pool: ThreadPoolIndexer<ConcurrentRadixTreeCompressed>,
    runtime: tokio::runtime::Runtime,
    block_size: u32,
    ids: BlockIds,
}

impl UpstreamCrtc {
    pub fn new(block_size: u32) -> Self {
        Self {
            pool: ThreadPoolIndexer::new(ConcurrentRadixTreeCompressed::new(), 1, block_size),
            runtime: current_thread_runtime(),
            block_size,
            ids: BlockIds::Sequence,
        }
    }

    /// This indexer fed events whose blocks are named as `ids` says.
    pub fn with_ids(self, ids: BlockIds) -> Self {
        Self { ids, ..self }
    }

    /// The thread-pool indexer.
    pub fn pool(&self) -> &ThreadPoolIndexer<ConcurrentRadixTreeCompressed> {
        &self.pool
    }
}

/// A runtime for upstream's async calls.
pub fn current_thread_runtime() -> tokio::runtime::Runtime {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("cannot start a tokio runtime: {error}"),
    }
}

impl Engine for UpstreamCrtc {
    type Event = RouterEvent;
    type Hashes = Vec<LocalBlockHash>;
    type Answer = OverlapScores;

    fn name(&self) -> &'static str {
        "upstream CRTC"
    }

    fn convert(&self, event: &Event) -> RouterEvent {
        upstream_event(event, self.ids)
    }

    fn apply(&mut self, event: RouterEvent) {
        if let Err(error) = self.pool.enqueue_event(event) {
            panic!("upstream thread pool refused an event: {error}");
        }
    }

    fn sync(&mut self) {
        if let Err(error) = self.runtime.block_on(self.pool.flush_and_wait()) {
            panic!("upstream thread pool did not flush: {error}");
        }
    }

    fn hashes(&self, query: &Query) -> Vec<LocalBlockHash> {
        local_hashes(query)
    }

    fn find(&mut self, hashes: Vec<LocalBlockHash>) -> OverlapScores {
        self.pool.backend().find_matches(&hashes, false)
    }

    fn find_tokens(&mut self, tokens: &[u32]) -> OverlapScores {
        self.pool
            .backend()
            .find_matches(&upstream_hash(tokens, self.block_size), false)
    }

    fn depths(&self, answer: &OverlapScores, out: &mut [u32]) {
        scores_to_depths(answer, out);
    }
}
