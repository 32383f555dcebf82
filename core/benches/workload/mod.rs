//! A deterministic workload for the benches: 64 workers caching long shared-prefix contexts.
#![allow(dead_code)]

use dynamo_kv_router::kv::{
    EngineBlockHash, KvCacheEventData, LocalBlockHash, RouterEvent, SequenceHash, block_hashes,
    sequence_hashes,
};
use dynamo_kv_router::rng::SplitMix64;
use dynamo_kv_router::router::WorkerId;

pub const BLOCK_SIZE: u32 = 16;
pub const PROMPT_TOKENS: usize = 8192;
pub const WORKERS: u64 = 64;
/// System prompts shared by families of contexts (1,024 tokens each).
pub const SYSTEM_PROMPTS: usize = 4;
pub const SYSTEM_TOKENS: usize = 1024;
/// Distinct long contexts (documents, conversations) in the cluster.
pub const CONTEXTS: usize = 48;
/// Contexts each worker caches.
pub const CONTEXTS_PER_WORKER: usize = 6;

/// The router's SplitMix64 with a fixed seed, so the workload is the same on every run.
pub struct Rng(SplitMix64);

impl Rng {
    pub fn seeded(seed: u64) -> Self {
        Self(SplitMix64::seeded(seed))
    }

    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

pub fn worker(n: u64) -> WorkerId {
    WorkerId::new(1000 + n, 0)
}

/// The engine's id for a block: differs from the sequence hash, agrees across workers.
pub fn engine_of(seq: SequenceHash) -> EngineBlockHash {
    EngineBlockHash(seq.0.rotate_left(21) ^ 0x5bd1_e995)
}

/// A chain of blocks: each block's local hash and sequence hash.
pub struct Chain {
    pub local: Vec<LocalBlockHash>,
    pub seq: Vec<SequenceHash>,
}

impl Chain {
    /// The chain of `tokens`.
    pub fn of_tokens(tokens: &[u32]) -> Self {
        Self::of_local(block_hashes(tokens, BLOCK_SIZE))
    }

    /// The chain of these local hashes.
    pub fn of_local(local: Vec<LocalBlockHash>) -> Self {
        let seq = sequence_hashes(&local);
        Self { local, seq }
    }

    /// A `stored` event of `worker` for blocks `range` of the chain, chained to the block before.
    pub fn stored(
        &self,
        worker: WorkerId,
        event_id: u64,
        range: std::ops::Range<usize>,
    ) -> RouterEvent {
        let parent = range.start.checked_sub(1).map(|p| engine_of(self.seq[p]));
        let blocks = range
            .clone()
            .map(|i| (engine_of(self.seq[i]), self.local[i]));
        RouterEvent::new(worker, event_id, KvCacheEventData::stored(parent, blocks))
    }
}

fn random_tokens(rng: &mut Rng, n: usize) -> Vec<u32> {
    (0..n).map(|_| (rng.next() % 128_000) as u32).collect()
}

pub struct Workload {
    /// Every context's 8,192 tokens.
    pub contexts: Vec<Vec<u32>>,
    /// `stored` events that warm the index: each worker's cached contexts, to random depths.
    pub warm_events: Vec<RouterEvent>,
    /// Next event id per worker after the warm events.
    pub next_event_id: Vec<u64>,
    /// Requests: a context's prefix (50–100 %) and a fresh suffix, 8,192 tokens in all.
    pub requests: Vec<Vec<u32>>,
}

pub fn build() -> Workload {
    let mut rng = Rng::seeded(42);
    let systems: Vec<Vec<u32>> = (0..SYSTEM_PROMPTS)
        .map(|_| random_tokens(&mut rng, SYSTEM_TOKENS))
        .collect();
    let contexts: Vec<Vec<u32>> = (0..CONTEXTS)
        .map(|c| {
            let mut tokens = systems[c % SYSTEM_PROMPTS].clone();
            tokens.extend(random_tokens(&mut rng, PROMPT_TOKENS - SYSTEM_TOKENS));
            tokens
        })
        .collect();
    let chains: Vec<Chain> = contexts
        .iter()
        .map(|tokens| Chain::of_tokens(tokens))
        .collect();
    let blocks = PROMPT_TOKENS / BLOCK_SIZE as usize;
    let mut warm_events = Vec::new();
    let mut next_event_id = vec![0u64; WORKERS as usize];
    for w in 0..WORKERS {
        for _ in 0..CONTEXTS_PER_WORKER {
            let context = rng.below(CONTEXTS as u64) as usize;
            let depth = blocks * 3 / 10 + rng.below((blocks * 7 / 10) as u64) as usize;
            // Engines report stored blocks in batches as prefill proceeds.
            for chunk_start in (0..depth).step_by(32) {
                let chunk_end = (chunk_start + 32).min(depth);
                warm_events.push(chains[context].stored(
                    worker(w),
                    next_event_id[w as usize],
                    chunk_start..chunk_end,
                ));
                next_event_id[w as usize] += 1;
            }
        }
    }
    let requests = (0..64)
        .map(|_| {
            let context = &contexts[rng.below(CONTEXTS as u64) as usize];
            let shared = PROMPT_TOKENS / 2 + rng.below((PROMPT_TOKENS / 2) as u64) as usize;
            let mut tokens = context[..shared].to_vec();
            tokens.extend(random_tokens(&mut rng, PROMPT_TOKENS - shared));
            tokens
        })
        .collect();
    Workload {
        contexts,
        warm_events,
        next_event_id,
        requests,
    }
}
