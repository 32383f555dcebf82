//! The long-prompt workload: 64 workers caching 8,192-token contexts (512 blocks of 16
//! tokens) behind 4 shared system prompts, about 1.1 M (worker, block) memberships.

use crate::workload::{Block, Change, Event, Oracle, Query, Rng, Workload};
use indicatif::ProgressBar;
use ours::kv::{block_hashes, sequence_hashes};

pub const BLOCK_SIZE: u32 = 16;
pub const PROMPT_TOKENS: usize = 8192;
const SYSTEM_PROMPTS: usize = 4;
const SYSTEM_TOKENS: usize = 1024;
/// Blocks per stored event (engines report prefill progress in batches).
const EVENT_BLOCKS: usize = 32;

/// The synthetic workload's knobs.
pub struct SyntheticSpec {
    pub workers: u32,
    /// Distinct contexts in the cluster.
    pub contexts: usize,
    /// Contexts each worker caches (each to 30–100 % depth).
    pub contexts_per_worker: usize,
    pub queries: usize,
}

impl Default for SyntheticSpec {
    fn default() -> Self {
        Self {
            workers: 64,
            contexts: 1024,
            contexts_per_worker: 64,
            queries: 256,
        }
    }
}

fn random_tokens(rng: &mut Rng, n: usize) -> Vec<u32> {
    (0..n).map(|_| (rng.next_u64() % 128_000) as u32).collect()
}

/// A context's tokens, regenerated from its number.
fn context_tokens(systems: &[Vec<u32>], context: usize) -> Vec<u32> {
    let mut rng = Rng(0xC0_47E7 ^ (context as u64).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let mut tokens = systems[context % SYSTEM_PROMPTS].clone();
    tokens.extend(random_tokens(&mut rng, PROMPT_TOKENS - SYSTEM_TOKENS));
    tokens
}

fn blocks_of(tokens: &[u32]) -> Vec<Block> {
    let local = block_hashes(tokens, BLOCK_SIZE);
    let seq = sequence_hashes(&local);
    local
        .into_iter()
        .zip(seq)
        .map(|(local, seq)| Block {
            local: local.0,
            seq: seq.0,
        })
        .collect()
}

/// Builds the workload and its expected depths.
pub fn build(spec: &SyntheticSpec, progress: &ProgressBar) -> Workload {
    let mut rng = Rng(42);
    let systems: Vec<Vec<u32>> = (0..SYSTEM_PROMPTS)
        .map(|_| random_tokens(&mut rng, SYSTEM_TOKENS))
        .collect();
    progress.set_length(spec.contexts as u64);
    progress.set_message("hashing contexts");
    let contexts: Vec<Vec<Block>> = (0..spec.contexts)
        .map(|c| {
            progress.inc(1);
            blocks_of(&context_tokens(&systems, c))
        })
        .collect();
    let blocks = PROMPT_TOKENS / BLOCK_SIZE as usize;
    let mut events = Vec::new();
    let mut oracle = Oracle::default();
    for worker in 0..spec.workers {
        let mut event_id = 0;
        let mut chosen: Vec<usize> = Vec::with_capacity(spec.contexts_per_worker);
        while chosen.len() < spec.contexts_per_worker.min(spec.contexts) {
            let context = rng.below(spec.contexts as u64) as usize;
            if !chosen.contains(&context) {
                chosen.push(context);
            }
        }
        for context in chosen {
            let depth = blocks * 3 / 10 + rng.below((blocks * 7 / 10) as u64 + 1) as usize;
            for start in (0..depth).step_by(EVENT_BLOCKS) {
                let end = (start + EVENT_BLOCKS).min(depth);
                let event = Event {
                    worker,
                    event_id,
                    change: Change::Stored {
                        parent: start.checked_sub(1).map(|p| contexts[context][p].seq),
                        blocks: contexts[context][start..end].to_vec(),
                    },
                };
                oracle.apply(&event);
                events.push(event);
                event_id += 1;
            }
        }
    }
    progress.set_message("building queries");
    let queries: Vec<Query> = (0..spec.queries)
        .map(|_| {
            let context = rng.below(spec.contexts as u64) as usize;
            let shared = PROMPT_TOKENS / 2 + rng.below((PROMPT_TOKENS / 2) as u64) as usize;
            let mut tokens = context_tokens(&systems, context)[..shared].to_vec();
            tokens.extend(random_tokens(&mut rng, PROMPT_TOKENS - shared));
            let blocks = blocks_of(&tokens);
            Query {
                local: blocks.iter().map(|b| b.local).collect(),
                seq: blocks.iter().map(|b| b.seq).collect(),
                tokens: Some(tokens),
            }
        })
        .collect();
    let expected = queries
        .iter()
        .map(|q| oracle.depths(spec.workers, &q.seq))
        .collect();
    Workload {
        name: format!(
            "synthetic: {} workers, {}-token prompts, {} memberships",
            spec.workers,
            PROMPT_TOKENS,
            oracle.memberships()
        ),
        workers: spec.workers,
        block_size: BLOCK_SIZE,
        events,
        queries,
        checkpoints: None,
        expected,
        memberships: oracle.memberships(),
    }
}

/// Churn for the concurrent phase: `chains` fresh root chains of 32 blocks that workers store
/// and, eight stores later, remove again, so the index keeps its size.
pub fn churn_chains(chains: usize) -> Vec<Vec<Block>> {
    let mut rng = Rng(7);
    (0..chains)
        .map(|_| blocks_of(&random_tokens(&mut rng, EVENT_BLOCKS * BLOCK_SIZE as usize)))
        .collect()
}
