//! Index memory per (worker, block) membership, measured with a counting global allocator at
//! over a million memberships: 64 workers with shared prefixes (the common case), the same with
//! per-worker engine ids (the override maps) and with sequence hashes as engine ids (no
//! engine-id table), and no sharing at all (the worst case). Each
//! scenario is measured twice: the routing index (`KvIndex::new`, no lineage) and the
//! dumpable index (`KvIndex::with_lineage`, what the service builds).
//! Run with `cargo bench -p dynamo-kv-router --bench index_memory`; it prints a table.

mod workload;

use dynamo_kv_router::kv::{
    EngineBlockHash, KvCacheEventData, KvIndex, LocalBlockHash, RouterEvent, SequenceHash,
    mapped_bytes,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use workload::*;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap bytes live now, plus what the index maps straight from the kernel for its large tables
/// (which the allocator never sees).
fn live_bytes() -> usize {
    LIVE.load(Ordering::Relaxed) + mapped_bytes()
}

/// Chains of `blocks` pseudo-random local hashes.
fn chains(count: usize, blocks: usize, rng: &mut Rng) -> Vec<Chain> {
    (0..count)
        .map(|_| Chain::of_local((0..blocks).map(|_| LocalBlockHash(rng.next())).collect()))
        .collect()
}

/// How the workers' engines name blocks.
#[derive(Clone, Copy)]
enum Ids {
    /// Every worker reports a block under the same id of the engine's own.
    Shared,
    /// Every worker reports a block under its sequence hash (as upstream's mocker does).
    Sequence,
    /// Every worker reports a block under an id of its own.
    PerWorker,
}

/// The engine id worker `w` reports for the block with sequence hash `seq`.
fn engine_id(seq: SequenceHash, w: usize, ids: Ids) -> EngineBlockHash {
    match ids {
        Ids::Shared => engine_of(seq),
        Ids::Sequence => EngineBlockHash(seq.0),
        Ids::PerWorker => EngineBlockHash(engine_of(seq).0 ^ (w as u64).wrapping_mul(0x9E37_79B9)),
    }
}

/// Builds an index where worker `w` stores, for each `(chain, depth)` of `plan[w]`, the chain's
/// first `depth` blocks, and returns (bytes, memberships, distinct blocks).
fn measure(
    plan: &[Vec<(usize, usize)>],
    chains: &[Chain],
    ids: Ids,
    lineage: bool,
) -> (usize, usize, usize) {
    let before = live_bytes();
    let mut index = if lineage {
        KvIndex::with_lineage()
    } else {
        KvIndex::new()
    };
    for w in 0..plan.len() {
        index.add_worker(worker(w as u64));
    }
    for (w, items) in plan.iter().enumerate() {
        let mut event_id = 0;
        for &(chain, depth) in items {
            let chain = &chains[chain];
            for start in (0..depth).step_by(32) {
                let end = (start + 32).min(depth);
                let parent = start
                    .checked_sub(1)
                    .map(|p| engine_id(chain.seq[p], w, ids));
                let blocks =
                    (start..end).map(|i| (engine_id(chain.seq[i], w, ids), chain.local[i]));
                let event = RouterEvent::new(
                    worker(w as u64),
                    event_id,
                    KvCacheEventData::stored(parent, blocks),
                );
                event_id += 1;
                let _ = index.apply(&event);
            }
        }
    }
    let bytes = live_bytes() - before;
    let result = (bytes, index.memberships(), index.distinct_blocks());
    drop(index);
    result
}

/// Measures `plan` without and with lineage and prints one row.
fn report(name: &str, plan: &[Vec<(usize, usize)>], chains: &[Chain], ids: Ids) {
    let (bytes, memberships, distinct) = measure(plan, chains, ids, false);
    let (dumpable, _, _) = measure(plan, chains, ids, true);
    let per_member = |bytes: usize| bytes as f64 / memberships.max(1) as f64;
    println!(
        "{name:<44} {memberships:>10} {distinct:>10} {:>12.1} {:>10.1} {:>12.1} {:>10.1}",
        bytes as f64 / 1e6,
        per_member(bytes),
        dumpable as f64 / 1e6,
        per_member(dumpable)
    );
}

fn main() {
    let mut rng = Rng::seeded(99);
    let blocks = PROMPT_TOKENS / BLOCK_SIZE as usize;
    println!(
        "{:<44} {:>10} {:>10} {:>12} {:>10} {:>12} {:>10}",
        "scenario", "members", "blocks", "MB", "B/member", "MB lineage", "B lineage"
    );
    // Shared prefixes: each of 64 workers caches 52 contexts of 512 blocks, to 30-100 % depth,
    // drawn from a cluster-wide pool; the smaller the pool, the more holders per block.
    for pool in [384usize, 1024, 4096] {
        let shared = chains(pool, blocks, &mut rng);
        let plan: Vec<Vec<(usize, usize)>> = (0..WORKERS)
            .map(|_| {
                (0..52)
                    .map(|_| {
                        let chain = rng.below(shared.len() as u64) as usize;
                        (
                            chain,
                            blocks * 3 / 10 + rng.below((blocks * 7 / 10) as u64) as usize,
                        )
                    })
                    .collect()
            })
            .collect();
        report(
            &format!("64 workers, shared, pool of {pool} contexts"),
            &plan,
            &shared,
            Ids::Shared,
        );
        report(
            "  same, per-worker engine ids",
            &plan,
            &shared,
            Ids::PerWorker,
        );
        report(
            "  same, sequence hashes as ids",
            &plan,
            &shared,
            Ids::Sequence,
        );
    }
    // No sharing: every worker caches its own 32 contexts fully (1,048,576 memberships).
    let unique = chains(64 * 32, blocks, &mut rng);
    let plan: Vec<Vec<(usize, usize)>> = (0..WORKERS as usize)
        .map(|w| (0..32).map(|k| (w * 32 + k, blocks)).collect())
        .collect();
    report(
        "64 workers, no sharing (worst case)",
        &plan,
        &unique,
        Ids::Shared,
    );
    report(
        "  same, sequence hashes as ids",
        &plan,
        &unique,
        Ids::Sequence,
    );
}
