//! KV event ingest on one thread: `stored` events of 16 blocks (and of 1 block) applied through
//! `Router::apply_event` to a warm index of 64 workers; removals that keep the index at a
//! steady size run outside the timed section. Throughput is in stored blocks. Each store
//! extends what its worker holds at its frontier (its parent is the last block the worker holds
//! of that chain, or the root), as an engine's stores do, so every store is chained, applied
//! and new to its worker. Each bench runs twice: on a router without the index's block lineage
//! (the library default) and on one with it (`RouterOptions::index_lineage`, what the service
//! builds so that it can dump its index).

mod workload;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, RouterEvent};
use dynamo_kv_router::router::{
    Role, Router, RouterMode, RouterOptions, RouterSetup, WorkerCapabilities, WorkerInfo,
};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};
use workload::*;

const EVENTS_PER_BATCH: usize = WORKERS as usize;

fn bench_ingest(c: &mut Criterion) {
    let workload = build();
    for index_lineage in [false, true] {
        bench_ingest_into(c, &workload, index_lineage);
    }
}

/// The ingest benches on a warm router, with or without the index's block lineage.
fn bench_ingest_into(c: &mut Criterion, workload: &Workload, index_lineage: bool) {
    let setup = RouterSetup {
        router_mode: RouterMode::Kv,
        block_size: BLOCK_SIZE,
        roles: BTreeMap::new(),
    };
    let options = RouterOptions {
        index_lineage,
        ..RouterOptions::default()
    };
    let router = Router::new(setup, options);
    for w in 0..WORKERS {
        let info = WorkerInfo::new(worker(w), Role::Decode, WorkerCapabilities::none());
        if let Err(error) = router.register_worker(info) {
            panic!("{error}");
        }
    }
    for event in &workload.warm_events {
        let _ = router.apply_event(event);
    }
    // A pool of chains: half are the warm contexts (blocks other workers already hold), half new.
    let mut chains: Vec<Chain> = workload
        .contexts
        .iter()
        .map(|tokens| Chain::of_tokens(tokens))
        .collect();
    let mut rng = Rng::seeded(7);
    for _ in 0..chains.len() {
        let fresh: Vec<u32> = (0..PROMPT_TOKENS)
            .map(|_| rng.below(128_000) as u32)
            .collect();
        chains.push(Chain::of_tokens(&fresh));
    }
    let mut next_id = workload.next_event_id.clone();
    let suffix = if index_lineage { "_with_lineage" } else { "" };
    let mut group = c.benchmark_group("event_ingest");
    for blocks_per_event in [16usize, 1] {
        group.throughput(Throughput::Elements(
            (EVENTS_PER_BATCH * blocks_per_event) as u64,
        ));
        group.bench_function(
            format!("stored_{blocks_per_event}_blocks_per_event{suffix}"),
            |b| {
                b.iter_custom(|iterations| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iterations {
                        let mut stores = Vec::with_capacity(EVENTS_PER_BATCH);
                        let mut removes = Vec::with_capacity(EVENTS_PER_BATCH);
                        // One event per worker per batch, so each worker's store (id n) is applied
                        // before its removal (id n + 1) even though all stores run first.
                        for (w, event_id) in next_id.iter_mut().enumerate() {
                            let chain = &chains[rng.below(chains.len() as u64) as usize];
                            let last_start = chain.seq.len() - blocks_per_event;
                            let held = router.cached_prefix(worker(w as u64), &chain.seq);
                            // Extend at the worker's frontier, so the stored blocks are new to it.
                            let start = held.min(last_start);
                            let window = start..start + blocks_per_event;
                            // Blocks this worker already holds stay held: only its new ones are
                            // removed again, so the warm state is kept.
                            let new: Vec<EngineBlockHash> = window
                                .clone()
                                .filter(|i| *i >= held)
                                .map(|i| engine_of(chain.seq[i]))
                                .collect();
                            stores.push(chain.stored(worker(w as u64), *event_id, window));
                            removes.push(RouterEvent::new(
                                worker(w as u64),
                                *event_id + 1,
                                KvCacheEventData::removed(new),
                            ));
                            *event_id += 2;
                        }
                        let start = Instant::now();
                        for event in &stores {
                            black_box(router.apply_event(event));
                        }
                        total += start.elapsed();
                        for event in &removes {
                            let _ = router.apply_event(event);
                        }
                    }
                    total
                });
            },
        );
    }
    group.finish();
    let metrics = router.metrics();
    println!(
        "events applied {}, ignored {:?}, memberships {}",
        metrics.events.applied, metrics.events.ignored, metrics.index_memberships
    );
}

criterion_group!(benches, bench_ingest);
criterion_main!(benches);
