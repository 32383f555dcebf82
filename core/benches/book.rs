//! Booking latency: 8,192-token prompts (512 blocks of 16), 64 workers with shared prefixes, a
//! warm index, a cost-based selection policy and a `kv.fetch`-style hint policy; against the
//! floor of hashing plus the index probes alone.

mod workload;

use criterion::{Criterion, criterion_group, criterion_main};
use dynamo_kv_router::kv::{
    KvIndex, RecordedEngines, SequenceHash, sequence_hashes_for_tokens, sequence_hashes_iter,
};
use dynamo_kv_router::plugins::KvFetchPayload;
use dynamo_kv_router::plugins::prelude::*;
use dynamo_kv_router::plugins::registry::{ConstructedHintPolicy, ConstructedSelectionPolicy};
use dynamo_kv_router::router::{
    HintOrigin, Prompt, RoleHint, RolePolicies, RouteRequest, Router, RouterMode, RouterOptions,
    RouterSetup, WorkerCapabilities, WorkerInfo,
};
use std::collections::{BTreeMap, VecDeque};
use std::hint::black_box;
use std::time::{Duration, Instant};
use workload::*;

/// Upstream's default cost: uncached prefill blocks plus active decode blocks; lowest wins.
struct CostSelection;

impl WorkerSelectionPolicy for CostSelection {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let request = context.request();
        let block_size = f64::from(request.block_size.max(1));
        let cost = |c: &Candidate| {
            let prefill =
                (c.load.active_prefill_tokens as f64 + request.prompt_tokens as f64) / block_size;
            (prefill - c.cached_blocks as f64).max(0.0) + c.load.potential_decode_blocks() as f64
        };
        context
            .candidates()
            .iter()
            .min_by(|a, b| cost(a).total_cmp(&cost(b)).then(a.worker.cmp(&b.worker)))
            .map(|c| Selection::worker(c.worker))
            .ok_or_else(|| PolicyError::new("no candidates"))
    }
}

/// Best-effort `kv.fetch`: the longest eligible holder, if it adds at least one block, named
/// root-aligned as upstream's payload does.
struct FetchHint;

impl HintPolicy for FetchHint {
    fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        let booked = context.booked_cached_blocks();
        let Some(source) = context
            .candidates()
            .iter()
            .filter(|c| c.is_fetch_source_for(context.worker()) && c.cached_blocks > booked)
            .max_by_key(|c| (c.cached_blocks, std::cmp::Reverse(c.worker)))
        else {
            return Ok(Vec::new());
        };
        let Some(hashes) = context
            .request()
            .engine_block_hashes(source.worker, 0..source.cached_blocks)
        else {
            return Ok(Vec::new());
        };
        let endpoint = source.source_endpoint.as_deref().unwrap_or_default();
        Ok(vec![KvFetchPayload::action(endpoint, &hashes)])
    }

    fn commitments(&self) -> Commitments {
        Commitments::KV_COPY
    }
}

fn build_router(workload: &Workload, with_hint: bool) -> Router {
    let policies = RolePolicies {
        selection_type: "cost".into(),
        selection: ConstructedSelectionPolicy {
            instance: Arc::new(CostSelection),
            commitments: Commitments::NONE,
        },
        hints: [RoleHint {
            policy_type: "fetch".into(),
            name: None,
            origin: HintOrigin::Listed,
            constructed: ConstructedHintPolicy {
                instance: Arc::new(FetchHint),
                commitments: Commitments::KV_COPY,
            },
        }]
        .into_iter()
        .filter(|_| with_hint)
        .collect(),
    };
    let setup = RouterSetup {
        router_mode: RouterMode::Kv,
        block_size: BLOCK_SIZE,
        roles: BTreeMap::from([(Role::Decode, policies)]),
    };
    let router = Router::new(setup, RouterOptions::default());
    for w in 0..WORKERS {
        let info = WorkerInfo::new(
            worker(w),
            Role::Decode,
            WorkerCapabilities::hint_source(format!("tcp://10.0.{}.{}:23280", w / 256, w % 256)),
        );
        if let Err(error) = router.register_worker(info) {
            panic!("{error}");
        }
    }
    for event in &workload.warm_events {
        let _ = router.apply_event(event);
    }
    router
}

fn book_loop(router: &Router, requests: &[RouteRequest]) -> impl FnMut(u64) -> Duration {
    // Keep 32 bookings in flight so loads vary and the hint policy sometimes fetches.
    let mut in_flight: VecDeque<String> = VecDeque::new();
    let mut next = 0usize;
    move |iterations| {
        let mut total = Duration::ZERO;
        for _ in 0..iterations {
            let mut request = requests[next % requests.len()].clone();
            request.request_id = format!("req-{next}");
            next += 1;
            let start = Instant::now();
            let booking = router.book(black_box(&request));
            total += start.elapsed();
            black_box(&booking);
            in_flight.push_back(request.request_id);
            if in_flight.len() > 32
                && let Some(old) = in_flight.pop_front()
            {
                router.release(&old);
            }
        }
        total
    }
}

/// Per-booking latency percentiles over `samples` single calls, booked as in [`book_loop`]:
/// criterion reports the mean of batches, the target is stated as the p50 of one booking.
fn booking_percentiles(router: &Router, requests: &[RouteRequest], samples: u64) -> String {
    let mut one = book_loop(router, requests);
    let mut latencies: Vec<Duration> = (0..samples).map(|_| one(1)).collect();
    latencies.sort_unstable();
    let at = |q: f64| {
        let index = ((latencies.len() - 1) as f64 * q).round() as usize;
        latencies[index].as_secs_f64() * 1e6
    };
    format!(
        "p50 {:.2} µs, p90 {:.2} µs, p99 {:.2} µs over {samples} bookings",
        at(0.50),
        at(0.90),
        at(0.99)
    )
}

fn bench_book(c: &mut Criterion) {
    let workload = build();
    let router = build_router(&workload, true);
    let router_without_hint = build_router(&workload, false);
    let requests: Vec<RouteRequest> = workload
        .requests
        .iter()
        .enumerate()
        .map(|(n, tokens)| {
            RouteRequest::new(
                format!("req-{n}"),
                Role::Decode,
                Prompt::Tokens(tokens.clone()),
            )
        })
        .collect();
    let mut index = KvIndex::new();
    for w in 0..WORKERS {
        index.add_worker(worker(w));
    }
    for event in &workload.warm_events {
        let _ = index.apply(event);
    }
    let workers: Vec<WorkerId> = (0..WORKERS).map(worker).collect();
    println!(
        "warm index: {} memberships, {} distinct blocks",
        index.memberships(),
        index.distinct_blocks()
    );

    let mut group = c.benchmark_group("book");
    group.bench_function("book_8192_tokens_64_workers", |b| {
        b.iter_custom(book_loop(&router, &requests));
    });
    group.bench_function("book_without_hint_policy", |b| {
        b.iter_custom(book_loop(&router_without_hint, &requests));
    });
    let mut next = 0usize;
    group.bench_function("floor_hash_and_probe", |b| {
        // What the router does before its policies run: hash into a reused buffer, then one
        // index pass that also records the canonical engine ids.
        let mut lengths = Vec::with_capacity(workers.len());
        let mut hashes = Vec::with_capacity(PROMPT_TOKENS / BLOCK_SIZE as usize);
        let mut engines = RecordedEngines::default();
        b.iter(|| {
            let tokens = &workload.requests[next % workload.requests.len()];
            next += 1;
            hashes.clear();
            // As the router hashes: the iterator's own loop, into a reused buffer.
            sequence_hashes_iter(black_box(tokens), BLOCK_SIZE).append_to(&mut hashes);
            index.prefix_lengths_and_engines(&hashes, &workers, &mut lengths, &mut engines);
            black_box((&hashes, &lengths, &engines));
        });
    });
    group.bench_function("hash_only", |b| {
        b.iter(|| {
            let tokens = &workload.requests[next % workload.requests.len()];
            next += 1;
            black_box(sequence_hashes_for_tokens(black_box(tokens), BLOCK_SIZE));
        });
    });
    let all_hashes: Vec<Vec<SequenceHash>> = workload
        .requests
        .iter()
        .map(|tokens| sequence_hashes_for_tokens(tokens, BLOCK_SIZE))
        .collect();
    group.bench_function("probe_only", |b| {
        let mut lengths = Vec::with_capacity(workers.len());
        b.iter(|| {
            let hashes = &all_hashes[next % all_hashes.len()];
            next += 1;
            index.prefix_lengths(black_box(hashes), &workers, &mut lengths);
            black_box(&lengths);
        });
    });
    group.bench_function("pass_without_blocks", |b| {
        // The pass's cost per booking that does not depend on the prompt: mapping the 64
        // candidate workers to their slots and setting up the lengths.
        let mut lengths = Vec::with_capacity(workers.len());
        b.iter(|| {
            index.prefix_lengths(black_box(&[]), black_box(&workers), &mut lengths);
            black_box(&lengths);
        });
    });
    group.finish();
    println!(
        "per-booking latency, book_8192_tokens_64_workers: {}",
        booking_percentiles(&router, &requests, 50_000)
    );
    println!(
        "per-booking latency, book_without_hint_policy: {}",
        booking_percentiles(&router_without_hint, &requests, 50_000)
    );
    let metrics = router.metrics();
    println!(
        "bookings {}, hints sent {}, actions {}",
        metrics.bookings, metrics.hints_sent, metrics.hint_actions
    );
}

criterion_group!(benches, bench_book);
criterion_main!(benches);
