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
    RouterSetup, ShadowPolicies, WorkerCapabilities, WorkerInfo,
};
use std::collections::{BTreeMap, VecDeque};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// The live policies (cost selection and, when `with_hint`, the fetch hint), with `shadows`
/// copies of them evaluated as shadows.
fn role_policies(with_hint: bool, shadows: usize) -> RolePolicies {
    let mut policies = live_policies(with_hint);
    policies.shadows = (0..shadows)
        .map(|n| ShadowPolicies {
            name: format!("shadow-{n}"),
            policies: live_policies(with_hint),
        })
        .collect();
    policies
}

fn live_policies(with_hint: bool) -> RolePolicies {
    RolePolicies {
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
        shadows: Vec::new(),
    }
}

fn build_router(workload: &Workload, with_hint: bool) -> Router {
    build_router_with(workload, role_policies(with_hint, 0))
}

fn build_router_with(workload: &Workload, policies: RolePolicies) -> Router {
    build_router_with_options(workload, policies, RouterOptions::default())
}

fn build_router_with_options(
    workload: &Workload,
    policies: RolePolicies,
    options: RouterOptions,
) -> Router {
    let setup = RouterSetup {
        router_mode: RouterMode::Kv,
        block_size: BLOCK_SIZE,
        roles: BTreeMap::from([(Role::Decode, policies)]),
    };
    let router = Router::new(setup, options);
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

/// Evaluates `router`'s shadows on a thread of its own until the returned flag is set, as the
/// service's evaluator does.
fn shadow_evaluator(router: &Arc<Router>) -> (Arc<AtomicBool>, std::thread::JoinHandle<usize>) {
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let (router, stop) = (Arc::clone(router), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut evaluated = 0;
            while !stop.load(Ordering::Relaxed) {
                evaluated += router.run_shadows_paced(
                    Duration::from_millis(5),
                    dynamo_kv_router::router::SHADOW_EVALUATOR_SHARE,
                );
            }
            evaluated
        })
    };
    (stop, thread)
}

/// Booking p50 without shadows and with one, on one router (one index in memory) whose
/// policies are swapped between turns of `per_turn` bookings ([`Router::replace_policies`]);
/// the median of each side's turn p50s. With one shadow it is measured twice: with its
/// evaluator thread running beside the bookings at its default share of a core (as in the
/// service; the evaluator runs during that turn only and what it left queued is evaluated,
/// untimed, after it), and with the queue evaluated every 256 bookings on the booking thread,
/// untimed (what a booking pays to leave its case).
fn shadow_cost(
    workload: &Workload,
    requests: &[RouteRequest],
    turns: usize,
    per_turn: u64,
) -> String {
    let router = Arc::new(build_router(workload, true));
    let setup = |shadows: usize| RouterSetup {
        router_mode: RouterMode::Kv,
        block_size: BLOCK_SIZE,
        roles: BTreeMap::from([(Role::Decode, role_policies(true, shadows))]),
    };
    let p50 = |drain: bool| {
        let mut one = book_loop(&router, requests);
        let mut latencies: Vec<Duration> = (0..per_turn)
            .map(|n| {
                if drain && n % 256 == 0 {
                    router.run_pending_shadows(None);
                }
                one(1)
            })
            .collect();
        latencies.sort_unstable();
        latencies[latencies.len() / 2].as_secs_f64() * 1e6
    };
    let swap = |shadows: usize| {
        if let Err(error) = router.replace_policies(setup(shadows)) {
            panic!("{error}");
        }
    };
    let (mut without, mut with_thread, mut capture_only) = (Vec::new(), Vec::new(), Vec::new());
    let (mut evaluated_beside, mut left_over) = (0, 0);
    for _ in 0..turns {
        swap(0);
        without.push(p50(false));
        swap(1);
        let (stop, evaluator) = shadow_evaluator(&router);
        with_thread.push(p50(false));
        stop.store(true, Ordering::Relaxed);
        evaluated_beside += evaluator.join().unwrap_or_default();
        left_over += router.run_pending_shadows(None);
        capture_only.push(p50(true));
        router.run_pending_shadows(None);
    }
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let without = median(&mut without);
    let with_thread = median(&mut with_thread);
    let capture_only = median(&mut capture_only);
    format!(
        "booking p50 without shadows {without:.2} µs; with one shadow, its evaluator running beside {with_thread:.2} µs ({:.3}×), evaluated between bookings {capture_only:.2} µs ({:.3}×); median of {turns} turns of {per_turn} bookings each; beside: {evaluated_beside} evaluated during the turns, {left_over} after them, {} dropped",
        with_thread / without,
        capture_only / without,
        router.shadow_cases_dropped()
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
    {
        let shadowed = Arc::new(build_router_with(&workload, role_policies(true, 1)));
        let (stop, evaluator) = shadow_evaluator(&shadowed);
        group.bench_function("book_with_one_shadow", |b| {
            b.iter_custom(book_loop(&shadowed, &requests));
        });
        stop.store(true, Ordering::Relaxed);
        let _ = evaluator.join();
    }
    // Predicting alongside KV events (`--router-predicted-ttl-secs 5`, as the gateway bench's
    // `ours-predicted` runs): every booking also records its 512 blocks as predicted.
    let predicting = build_router_with_options(
        &workload,
        role_policies(true, 0),
        RouterOptions {
            predicted_ttl: Some(Duration::from_secs(5)),
            ..RouterOptions::default()
        },
    );
    group.bench_function("book_predicting_alongside_events", |b| {
        b.iter_custom(book_loop(&predicting, &requests));
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
    // A prompt of one block that some worker holds: the pass maps every candidate to its slot.
    let mut lengths = Vec::with_capacity(workers.len());
    let held_first: Vec<SequenceHash> = all_hashes
        .iter()
        .map(|hashes| hashes[..1].to_vec())
        .find(|first| {
            index.prefix_lengths(first, &workers, &mut lengths);
            lengths.iter().any(|length| *length > 0)
        })
        .expect("a prompt whose first block some worker holds");
    group.bench_function("pass_over_one_held_block", |b| {
        // The pass's cost per booking that does not depend on the prompt's length: mapping
        // the 64 candidate workers to their slots and setting up the lengths.
        b.iter(|| {
            index.prefix_lengths(black_box(&held_first), black_box(&workers), &mut lengths);
            black_box(&lengths);
        });
    });
    let cold_first = [SequenceHash(held_first[0].0 ^ 1)];
    group.bench_function("pass_over_a_cold_prompt", |b| {
        // A prompt whose first block the index does not hold: answered from that one probe.
        b.iter(|| {
            index.prefix_lengths(black_box(&cold_first), black_box(&workers), &mut lengths);
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
    println!(
        "per-booking latency, book_predicting_alongside_events: {}",
        booking_percentiles(&predicting, &requests, 50_000)
    );
    println!(
        "shadow cost: {}",
        shadow_cost(&workload, &requests, 21, 3_000)
    );
    let metrics = router.metrics();
    println!(
        "bookings {}, hints sent {}, actions {}",
        metrics.bookings, metrics.hints_sent, metrics.hint_actions
    );
}

criterion_group!(benches, bench_book);
criterion_main!(benches);
