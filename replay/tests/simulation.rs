//! The simulated cluster against a scripted stand-in router: invariants checked against
//! independent records, KV events, fetch execution, eviction accounting, the router-view
//! figure, determinism.

use dynamo_kv_router::kv::{
    KvCacheEventData, LocalBlockHash, RouterEvent, SequenceHash, next_sequence_hash,
};
use dynamo_kv_router::plugins::HintAction;
use dynamo_kv_router::router::{
    BookError, Booking, BookingStats, Prompt, Role, RouteRequest, RouterError, WorkerId, WorkerInfo,
};
use dynamo_kv_router::wire::KvHint;
use kv_router_replay::engine_block::{engine_block_hash, sequence_hash_of};
use kv_router_replay::simulation::worker_endpoint;
use kv_router_replay::{
    ClusterConfig, ConfigReport, PreparedWorkload, RouterPort, SimulationResult, SyntheticWorkload,
    Workload, WorkloadRequest, simulate,
};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

/// What the stand-in router decides for one booking: the worker index and an optional fetch
/// (source index, sequence hashes to name).
type Decision = (usize, Option<(usize, Vec<u64>)>);

/// The stand-in's booking rule.
type Decide = Box<dyn Fn(&State, &RouteRequest) -> Decision>;

#[derive(Default)]
struct State {
    workers: Vec<WorkerInfo>,
    events: Vec<RouterEvent>,
    /// The router's view, from events: per worker, the sequence hashes it holds.
    view: HashMap<WorkerId, HashMap<u64, u64>>,
    bookings: usize,
    prefill_completed: Vec<String>,
    released: Vec<String>,
    extra_action: bool,
    /// Report, in each booking's stats, the booked worker's prefix from the view.
    predict: bool,
    /// Blocks added to the view's prefix when the simulation asks for it (a faulty view).
    view_error: usize,
}

impl State {
    /// The prefix of `blocks` the event-fed view says `worker` holds.
    fn view_prefix(&self, worker: WorkerId, blocks: &[u64]) -> usize {
        let held = self.view.get(&worker);
        blocks
            .iter()
            .take_while(|h| held.is_some_and(|held| held.contains_key(h)))
            .count()
    }
}

struct StandIn {
    state: RefCell<State>,
    decide: Decide,
}

impl StandIn {
    fn new(decide: impl Fn(&State, &RouteRequest) -> Decision + 'static) -> Self {
        Self {
            state: RefCell::new(State::default()),
            decide: Box::new(decide),
        }
    }
}

fn hashes(request: &RouteRequest) -> &[u64] {
    match &request.prompt {
        Prompt::Blocks {
            sequence_hashes, ..
        } => SequenceHash::as_u64s(sequence_hashes),
        Prompt::Tokens(_) => &[],
    }
}

/// Round robin over the role's workers, fetching from the peer whose (event-fed) view holds the
/// longest prefix beyond the booked worker's.
fn round_robin_with_fetch(state: &State, request: &RouteRequest) -> Decision {
    let role_workers: Vec<usize> = (0..state.workers.len())
        .filter(|i| state.workers[*i].role == request.role)
        .collect();
    let booked = role_workers[state.bookings % role_workers.len()];
    let blocks = hashes(request);
    let prefix = |worker: usize| state.view_prefix(state.workers[worker].id, blocks);
    let own = prefix(booked);
    let best = role_workers
        .iter()
        .copied()
        .filter(|w| *w != booked)
        .max_by_key(|w| (prefix(*w), std::cmp::Reverse(*w)));
    let fetch = best
        .filter(|w| prefix(*w) > own)
        .map(|w| (w, blocks[..prefix(w)].to_vec()));
    (booked, fetch)
}

impl RouterPort for StandIn {
    fn register_worker(&self, info: WorkerInfo) -> Result<(), RouterError> {
        self.state.borrow_mut().workers.push(info);
        Ok(())
    }

    fn apply_event(&self, event: &RouterEvent) {
        let mut state = self.state.borrow_mut();
        let view = state.view.entry(event.worker()).or_default();
        match &event.event.data {
            KvCacheEventData::Stored(store) => {
                let mut parent = store
                    .parent_hash
                    .map(|p| SequenceHash(sequence_hash_of(p.0)));
                for block in &store.blocks {
                    let seq = next_sequence_hash(parent, block.tokens_hash);
                    view.insert(seq.0, block.block_hash.0);
                    parent = Some(seq);
                }
            }
            KvCacheEventData::Removed(remove) => {
                for hash in &remove.block_hashes {
                    view.remove(&sequence_hash_of(hash.0));
                }
            }
            KvCacheEventData::Cleared => view.clear(),
        }
        state.events.push(event.clone());
    }

    fn book(&self, request: &RouteRequest) -> Result<Booking, BookError> {
        let (worker, fetch) = (self.decide)(&self.state.borrow(), request);
        let mut state = self.state.borrow_mut();
        state.bookings += 1;
        let mut actions = Vec::new();
        if let Some((source, blocks)) = fetch {
            let engine: Vec<u64> = blocks.iter().map(|h| engine_block_hash(*h)).collect();
            actions.push(HintAction::new(
                "kv.fetch",
                "1.0",
                serde_json::json!({
                    "source_control_endpoint": worker_endpoint(source),
                    "block_hashes": engine,
                }),
            ));
        }
        if state.extra_action {
            actions.push(HintAction::new("kv.prefetch", "1.0", serde_json::json!({})));
        }
        let hint = (!actions.is_empty()).then(|| KvHint::numbered(&request.request_id, actions));
        let id = state.workers[worker].id;
        let cached_blocks = if state.predict {
            state.view_prefix(id, hashes(request))
        } else {
            0
        };
        Ok(Booking {
            request_id: request.request_id.clone(),
            role: request.role,
            worker: id,
            hint,
            committed_kv_copy: None,
            stats: BookingStats {
                cached_blocks,
                ..BookingStats::default()
            },
        })
    }

    fn prefill_complete(&self, request_id: &str) {
        self.state
            .borrow_mut()
            .prefill_completed
            .push(request_id.to_owned());
    }

    fn release(&self, request_id: &str) {
        self.state.borrow_mut().released.push(request_id.to_owned());
    }

    fn cached_prefix(&self, worker: WorkerId, sequence_hashes: &[SequenceHash]) -> usize {
        let state = self.state.borrow();
        let prefix = state.view_prefix(worker, SequenceHash::as_u64s(sequence_hashes));
        (prefix + state.view_error).min(sequence_hashes.len())
    }
}

fn small_workload(seed: u64) -> PreparedWorkload {
    SyntheticWorkload {
        seed,
        sessions: 80,
        ..SyntheticWorkload::default()
    }
    .generate()
    .prepare()
}

fn run(
    router: &StandIn,
    workload: &PreparedWorkload,
    cluster: ClusterConfig,
    stages: &[Role],
) -> SimulationResult {
    let resolved = cluster.resolve(workload.block_size).unwrap();
    simulate(router, workload, &resolved, stages, &mut |_| {}).unwrap()
}

fn tight_cluster() -> ClusterConfig {
    ClusterConfig {
        workers_per_role: 4,
        kv_capacity_blocks: Some(1_500),
        ..ClusterConfig::default()
    }
}

#[test]
fn every_request_conserves_its_blocks_and_fetches_are_measured() {
    let workload = small_workload(1);
    let router = StandIn::new(round_robin_with_fetch);
    let result = run(&router, &workload, tight_cluster(), &[Role::Aggregated]);
    assert_eq!(result.stage_outcomes.len(), workload.requests.len());
    assert!(result.invariants.hold(), "{:?}", result.invariants);
    let (mut local, mut fetched, mut recomputed) = (0u64, 0u64, 0u64);
    for outcome in &result.stage_outcomes {
        assert!(outcome.held_at_start <= outcome.local, "{outcome:?}");
        assert_eq!(
            outcome.blocks as usize,
            workload.requests[outcome.request as usize]
                .sequence_hashes
                .len()
        );
        assert!(outcome.start_us >= outcome.arrived_us && outcome.done_us > outcome.start_us);
        local += u64::from(outcome.local);
        fetched += u64::from(outcome.fetched);
        recomputed += u64::from(outcome.recomputed);
    }
    assert!(
        local > 0 && fetched > 0 && recomputed > 0,
        "{local} {fetched} {recomputed}"
    );
    assert!(result.requests.iter().all(|r| r.ttft_us.is_some()));
    let state = router.state.borrow();
    assert_eq!(state.prefill_completed.len(), workload.requests.len());
    assert_eq!(state.released.len(), workload.requests.len());
    assert!(result.bookings.iter().any(|b| b.fetch_actions == 1));
}

#[test]
fn kv_events_are_consistent_numbered_and_chained() {
    let workload = small_workload(2);
    let router = StandIn::new(round_robin_with_fetch);
    let cluster = tight_cluster();
    let result = run(&router, &workload, cluster.clone(), &[Role::Aggregated]);
    let state = router.state.borrow();
    assert_eq!(result.events as usize, state.events.len());
    let mut next_id: HashMap<WorkerId, u64> = HashMap::new();
    let mut held: HashMap<WorkerId, HashSet<u64>> = HashMap::new();
    let (mut stored, mut removed) = (0, 0);
    let locals: HashSet<LocalBlockHash> = workload
        .requests
        .iter()
        .flat_map(|r| r.local_hashes.iter().copied())
        .collect();
    for event in &state.events {
        let expected = next_id.entry(event.worker()).or_insert(0);
        assert_eq!(
            event.event_id(),
            *expected,
            "event ids are per worker and gap-free"
        );
        *expected += 1;
        let blocks = held.entry(event.worker()).or_default();
        match &event.event.data {
            KvCacheEventData::Stored(store) => {
                let mut parent = None;
                if let Some(engine) = store.parent_hash {
                    assert!(blocks.contains(&engine.0), "a parent is a held block");
                    parent = Some(SequenceHash(sequence_hash_of(engine.0)));
                }
                for block in &store.blocks {
                    // `tokens_hash` is the block's local hash; chained onto the parent it
                    // gives the block's sequence hash, which the engine id encodes.
                    assert!(locals.contains(&block.tokens_hash), "a local hash");
                    let seq = next_sequence_hash(parent, block.tokens_hash);
                    assert_eq!(sequence_hash_of(block.block_hash.0), seq.0);
                    parent = Some(seq);
                    assert!(
                        blocks.insert(block.block_hash.0),
                        "stored twice without removal"
                    );
                    stored += 1;
                }
            }
            KvCacheEventData::Removed(remove) => {
                for hash in &remove.block_hashes {
                    assert!(blocks.remove(&hash.0), "removed a block that was not held");
                    removed += 1;
                }
            }
            KvCacheEventData::Cleared => panic!("the simulation never clears"),
        }
        assert!(blocks.len() <= 1_500, "capacity respected");
    }
    assert!(stored > 0 && removed > 0, "the tight cluster evicts");
    assert_eq!(next_id.len(), 4);
}

fn request(arrival_us: u64, ids: std::ops::Range<u64>) -> WorkloadRequest {
    WorkloadRequest {
        arrival_us,
        prompt_tokens: ids.clone().count() * 16,
        output_tokens: 1,
        block_ids: ids.collect(),
        session: Default::default(),
    }
}

#[test]
fn fetching_blocks_the_source_evicted_is_counted_and_recomputed() {
    // r0 fills worker 0 with blocks 0..8; r1 (other blocks) evicts them all; r2 repeats r0's
    // prompt on worker 1 with a hint naming worker 0, whose copy is gone.
    let workload = Workload {
        name: "evicted".into(),
        block_size: 16,
        requests: vec![
            request(0, 0..8),
            request(1_000_000, 100..108),
            request(2_000_000, 0..8),
        ],
    }
    .prepare();
    let first = SequenceHash::as_u64s(&workload.requests[0].sequence_hashes).to_vec();
    let router = StandIn::new(move |state, _request| match state.bookings {
        0 | 1 => (0, None),
        _ => (1, Some((0, first.clone()))),
    });
    let cluster = ClusterConfig {
        workers_per_role: 2,
        kv_capacity_blocks: Some(8),
        ..ClusterConfig::default()
    };
    let result = run(&router, &workload, cluster, &[Role::Aggregated]);
    let last = result
        .stage_outcomes
        .iter()
        .find(|o| o.request == 2)
        .unwrap();
    assert_eq!(last.hint_blocks_evicted, 8);
    assert_eq!((last.local, last.fetched, last.recomputed), (0, 0, 8));
}

#[test]
fn a_fetch_from_a_holding_peer_copies_and_costs_fetch_time() {
    let workload = Workload {
        name: "fetch".into(),
        block_size: 16,
        requests: vec![request(0, 0..40), request(10_000_000, 0..48)],
    }
    .prepare();
    let first = SequenceHash::as_u64s(&workload.requests[0].sequence_hashes).to_vec();
    let router = StandIn::new(move |state, _request| match state.bookings {
        0 => (0, None),
        _ => (1, Some((0, first.clone()))),
    });
    let two_workers = |router: &StandIn| {
        let cluster = ClusterConfig {
            workers_per_role: 2,
            ..ClusterConfig::default()
        };
        run(router, &workload, cluster, &[Role::Aggregated])
    };
    let result = two_workers(&router);
    let second = result.stage_outcomes[1];
    assert_eq!(
        (second.local, second.fetched, second.recomputed),
        (0, 40, 8)
    );
    // 40 blocks at 2,500 blocks/s + 2 ms latency, then 8 blocks (128 tokens) at 10,000 tokens/s.
    assert_eq!(second.done_us - second.start_us, 16_000 + 2_000 + 12_800);
    assert_eq!(result.workers[1].busy_us, 30_800);
    // The first request computes its 40 blocks (640 tokens) from scratch.
    let first = result.stage_outcomes[0];
    assert_eq!(first.done_us - first.start_us, 64_000);
    // Without the hint the same second request is computed from scratch: 768 tokens.
    let unhinted = StandIn::new(|state, _request| (state.bookings.min(1), None));
    let result = two_workers(&unhinted);
    let second = result.stage_outcomes[1];
    assert_eq!(
        (
            second.worker,
            second.local,
            second.fetched,
            second.recomputed
        ),
        (1, 0, 0, 48)
    );
    assert_eq!(second.done_us - second.start_us, 76_800);
}

#[test]
fn a_root_aligned_fetch_copies_only_the_suffix_the_worker_lacks() {
    // r0 puts blocks 0..8 on worker 0, r1 blocks 0..4 on worker 1; r2 (blocks 0..10) goes to
    // worker 1 with a fetch naming worker 0's blocks 0..8 from the root.
    let workload = Workload {
        name: "suffix".into(),
        block_size: 16,
        requests: vec![
            request(0, 0..8),
            request(1_000_000, 0..4),
            request(2_000_000, 0..10),
        ],
    }
    .prepare();
    let first = SequenceHash::as_u64s(&workload.requests[0].sequence_hashes).to_vec();
    let router = StandIn::new(move |state, _request| match state.bookings {
        0 => (0, None),
        1 => (1, None),
        _ => (1, Some((0, first.clone()))),
    });
    let cluster = ClusterConfig {
        workers_per_role: 2,
        ..ClusterConfig::default()
    };
    let result = run(&router, &workload, cluster, &[Role::Aggregated]);
    let last = result
        .stage_outcomes
        .iter()
        .find(|o| o.request == 2)
        .unwrap();
    assert_eq!(
        (last.local, last.fetched, last.recomputed, last.fetch_wasted),
        (4, 4, 2, 0)
    );
    // 4 blocks at 2,500 blocks/s + 2 ms latency, then 2 blocks (32 tokens) at 10,000 tokens/s.
    assert_eq!(last.done_us - last.start_us, 1_600 + 2_000 + 3_200);
}

#[test]
fn a_payload_that_is_not_root_aligned_is_wasted() {
    // The fetch names worker 0's blocks from block 1, not from the root: entry 0 is not the
    // request's block 0, so nothing of it is usable.
    let workload = Workload {
        name: "misaligned".into(),
        block_size: 16,
        requests: vec![request(0, 0..8), request(1_000_000, 0..8)],
    }
    .prepare();
    let suffix = SequenceHash::as_u64s(&workload.requests[0].sequence_hashes)[1..].to_vec();
    let router = StandIn::new(move |state, _request| match state.bookings {
        0 => (0, None),
        _ => (1, Some((0, suffix.clone()))),
    });
    let cluster = ClusterConfig {
        workers_per_role: 2,
        ..ClusterConfig::default()
    };
    let result = run(&router, &workload, cluster, &[Role::Aggregated]);
    let second = result.stage_outcomes[1];
    assert_eq!(
        (
            second.local,
            second.fetched,
            second.recomputed,
            second.fetch_wasted
        ),
        (0, 0, 8, 7)
    );
}

#[test]
fn other_action_types_are_counted_and_ignored() {
    let workload = small_workload(3);
    let router = StandIn::new(|state, request| {
        let workers = state
            .workers
            .iter()
            .filter(|w| w.role == request.role)
            .count();
        (state.bookings % workers, None)
    });
    router.state.borrow_mut().extra_action = true;
    let result = run(&router, &workload, tight_cluster(), &[Role::Aggregated]);
    assert!(
        result
            .bookings
            .iter()
            .all(|b| b.hint && b.other_actions == 1 && b.fetch_actions == 0)
    );
    assert!(result.stage_outcomes.iter().all(|o| o.fetched == 0));
}

#[test]
fn prefill_then_decode_books_both_roles_and_transfers_the_rest() {
    let workload = small_workload(4);
    let router = StandIn::new(round_robin_with_fetch);
    let result = run(
        &router,
        &workload,
        tight_cluster(),
        &[Role::Prefill, Role::Decode],
    );
    assert_eq!(result.stage_outcomes.len(), 2 * workload.requests.len());
    assert_eq!(result.workers.len(), 8);
    assert!(result.invariants.hold(), "{:?}", result.invariants);
    for outcome in &result.stage_outcomes {
        let role = router.state.borrow().workers[outcome.worker as usize].role;
        assert_eq!(role, [Role::Prefill, Role::Decode][outcome.stage as usize]);
    }
    let state = router.state.borrow();
    // The prefill booking is released when its KV is handed on; the decode booking at the end.
    assert_eq!(state.released.len(), 2 * workload.requests.len());
    assert!(state.released.iter().any(|id| id.ends_with(".1")));
}

#[test]
fn same_seed_same_replay() {
    let once = || {
        let workload = small_workload(5);
        let router = StandIn::new(round_robin_with_fetch);
        let result = run(&router, &workload, tight_cluster(), &[Role::Aggregated]);
        (
            result.stage_outcomes,
            result.requests,
            router.state.into_inner().events,
        )
    };
    assert_eq!(once(), once());
}

#[test]
fn failed_bookings_are_counted_and_the_replay_goes_on() {
    struct Refuses;
    impl RouterPort for Refuses {
        fn register_worker(&self, _: WorkerInfo) -> Result<(), RouterError> {
            Ok(())
        }
        fn apply_event(&self, _: &RouterEvent) {}
        fn book(&self, request: &RouteRequest) -> Result<Booking, BookError> {
            Err(BookError::NoRoleConfig { role: request.role })
        }
        fn prefill_complete(&self, _: &str) {}
        fn release(&self, _: &str) {}
        fn cached_prefix(&self, _: WorkerId, _: &[SequenceHash]) -> usize {
            0
        }
    }
    let workload = small_workload(6);
    let resolved = tight_cluster().resolve(16).unwrap();
    let result = simulate(
        &Refuses,
        &workload,
        &resolved,
        &[Role::Aggregated],
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(
        result.book_failures["no_role_config"],
        workload.requests.len()
    );
    assert!(result.stage_outcomes.is_empty());
}

#[test]
fn a_router_view_that_disagrees_with_the_caches_is_reported() {
    let workload = small_workload(7);
    let router = StandIn::new(round_robin_with_fetch);
    router.state.borrow_mut().view_error = 1;
    let result = run(&router, &workload, tight_cluster(), &[Role::Aggregated]);
    let invariants = result.invariants;
    assert!(
        invariants.router_view_mismatches_at_end > 0,
        "{invariants:?}"
    );
    assert_eq!(invariants.stored_not_held, 0);
    assert_eq!(invariants.ledger_mismatches, 0);
    assert!(!invariants.hold());
    assert!(invariants.violations()[0].contains("router's final index"));
}

#[test]
fn how_often_the_routers_view_was_right_compares_its_prediction_with_the_worker() {
    // r0 fills worker 0; r1 arrives while r0 is still computing, so its booking sees no event
    // yet (the view lags); r2 arrives after both finished and sees r0's blocks.
    let workload = Workload {
        name: "lag".into(),
        block_size: 16,
        requests: vec![
            request(0, 0..20),
            request(1_000, 0..20),
            request(10_000_000, 0..20),
        ],
    }
    .prepare();
    let router = StandIn::new(|_state, _request| (0, None));
    router.state.borrow_mut().predict = true;
    let cluster = ClusterConfig {
        workers_per_role: 1,
        ..ClusterConfig::default()
    };
    let result = run(&router, &workload, cluster, &[Role::Aggregated]);
    assert!(result.invariants.hold(), "{:?}", result.invariants);
    let by_request = |r: u32| {
        let o = result
            .stage_outcomes
            .iter()
            .find(|o| o.request == r)
            .unwrap();
        (o.predicted_local, o.held_at_start)
    };
    assert_eq!(by_request(0), (0, 0));
    assert_eq!(by_request(1), (0, 20), "booked before r0's events arrived");
    assert_eq!(by_request(2), (20, 20));
    let report = ConfigReport::from_result("lag", "kv", &result);
    let stage = &report.stages[0];
    assert_eq!(stage.router_view_exact, 2);
    assert!((stage.router_view_exact_rate - 2.0 / 3.0).abs() < 1e-12);
    assert!((stage.router_view_mean_error_blocks - 20.0 / 3.0).abs() < 1e-12);
    assert!((stage.router_view_mean_bias_blocks + 20.0 / 3.0).abs() < 1e-12);
}
