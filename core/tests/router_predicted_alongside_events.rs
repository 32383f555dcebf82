//! Predicting alongside KV events (upstream's `router_predicted_ttl_secs`): a booking counts
//! its prompt as cached on the booked worker for a short TTL, in a side index, so a burst of
//! requests sharing a new prefix sticks to the first worker before its events arrive; the
//! predictions never reach the event-driven index (dumps, engine ids of hints), expire by the
//! TTL, and give way to the engine's own removals.

mod router_fixtures;

use dynamo_kv_router::clock::ManualClock;
use dynamo_kv_router::kv::hashing::sequence_hashes_for_tokens;
use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, RouterEvent};
use dynamo_kv_router::plugins::{
    HintAction, HintContext, HintPolicy, PolicyError, Selection, WorkerSelectionContext,
    WorkerSelectionPolicy,
};
use dynamo_kv_router::router::{Role, Router, RouterMode, RouterOptions, WorkerId};
use router_fixtures::*;
use std::sync::Arc;
use std::time::Duration;

/// Upstream's cost shape, with the prefill weighed twice: `2 × uncached prompt blocks + active
/// prefill blocks`, the smallest wins (ties: smaller id). A worker already prefilling a prompt
/// is avoided unless it caches (or is predicted to cache) the request's prefix.
struct LeastPrefill;

impl WorkerSelectionPolicy for LeastPrefill {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let request = context.request();
        let blocks = request.block_count() as u64;
        let block_size = u64::from(request.block_size);
        let best = context
            .candidates()
            .iter()
            .min_by_key(|c| {
                let uncached = blocks.saturating_sub(c.cached_blocks as u64);
                (
                    2 * uncached + c.load.active_prefill_tokens / block_size,
                    c.worker,
                )
            })
            .ok_or_else(|| PolicyError::new("no candidates"))?;
        Ok(Selection::worker(best.worker))
    }
}

/// Names, in one action, the engine ids every other candidate is said to hold for the request's
/// blocks `0..its cached prefix`, as a fetch hint would look them up: the ids the pass lends and
/// the ids the index gives.
struct EngineIdProbe;

impl HintPolicy for EngineIdProbe {
    fn build_hints(&self, context: &HintContext<'_>) -> Result<Vec<HintAction>, PolicyError> {
        let request = context.request();
        let hashes = request.sequence_hashes;
        let probed: Vec<serde_json::Value> = context
            .candidates()
            .iter()
            .filter(|c| c.worker != context.worker())
            .map(|c| {
                let blocks = &hashes[..c.cached_blocks];
                let lent = request
                    .blocks
                    .recorded_engine_block_hashes(c.worker, 0, blocks)
                    .map(<[EngineBlockHash]>::to_vec);
                let looked_up = request.engine_block_hashes(c.worker, 0..c.cached_blocks);
                serde_json::json!({
                    "worker": c.worker.worker_id,
                    "cached": c.cached_blocks,
                    "lent": lent,
                    "looked_up": looked_up,
                })
            })
            .collect();
        Ok(vec![HintAction::new(
            "test.probe",
            "1.0",
            serde_json::json!({ "probed": probed }),
        )])
    }
}

fn predicting_router(
    predicted_ttl: Option<Duration>,
    policies: dynamo_kv_router::router::RolePolicies,
    workers: impl Fn(u64) -> dynamo_kv_router::router::WorkerInfo,
) -> (Router, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let router = Router::with_clock(
        setup(RouterMode::Kv, vec![(Role::Aggregated, policies)]),
        RouterOptions {
            predicted_ttl,
            index_lineage: true,
            ..RouterOptions::default()
        },
        Arc::clone(&clock) as _,
    );
    for id in 1..=3 {
        assert!(router.register_worker(workers(id)).is_ok());
    }
    (router, clock)
}

fn least_prefill_router(predicted_ttl: Option<Duration>) -> (Router, Arc<ManualClock>) {
    predicting_router(
        predicted_ttl,
        role_policies("least-prefill", LeastPrefill, vec![]),
        |id| plain(id, Role::Aggregated),
    )
}

const TTL: Duration = Duration::from_secs(5);

/// Two requests sharing a new 8-block prefix (each with its own last block).
fn burst() -> (Vec<u32>, Vec<u32>) {
    let shared = tokens(32, 7);
    let mut first = shared.clone();
    first.extend(tokens(4, 100));
    let mut second = shared;
    second.extend(tokens(4, 200));
    (first, second)
}

#[test]
fn without_predictions_a_burst_on_a_new_prefix_spreads() {
    let (router, _clock) = least_prefill_router(None);
    assert!(!router.predicts_alongside_events());
    let (first, second) = burst();
    let a = router.book(&request("a", Role::Aggregated, first)).unwrap();
    let b = router
        .book(&request("b", Role::Aggregated, second))
        .unwrap();
    // The first request's events have not arrived: the second sees no cache anywhere and
    // avoids the worker busy prefilling the first.
    assert_ne!(a.worker, b.worker);
    assert_eq!(b.stats.cached_blocks, 0);
    assert!(router.predicted_cache_stats().is_none());
    assert!(!router.prometheus_text().contains("kv_router_predicted_"));
}

#[test]
fn with_predictions_a_burst_on_a_new_prefix_sticks_to_the_first_worker() {
    let (router, _clock) = least_prefill_router(Some(TTL));
    assert!(router.predicts_alongside_events());
    assert!(!router.predicts_caches());
    let (first, second) = burst();
    let a = router
        .book(&request("a", Role::Aggregated, first.clone()))
        .unwrap();
    assert_eq!(a.stats.cached_blocks, 0);
    let b = router
        .book(&request("b", Role::Aggregated, second))
        .unwrap();
    assert_eq!(b.worker, a.worker, "no event arrived, yet the burst sticks");
    assert_eq!(
        b.stats.cached_blocks, 8,
        "the shared prefix counts as cached"
    );

    // The predictions stay out of the event-driven index: no engine-reported block, nothing to
    // dump, and the index's own counters are untouched.
    let hashes = sequence_hashes_for_tokens(&first, BLOCK_SIZE);
    assert_eq!(router.cached_prefix(a.worker, &hashes), 0);
    assert_eq!(router.predicted_prefix(a.worker, &hashes), 9);
    assert!(router.export_events().unwrap().is_empty());
    assert_eq!(router.worker_index_state(a.worker).unwrap().blocks, 0);
    let stats = router.predicted_cache_stats().unwrap();
    assert_eq!(stats.bookings, 2);
    assert_eq!(
        stats.entries,
        9 + 1,
        "8 shared blocks, renewed, and two own last blocks"
    );

    // The engine's events arrive: they count as they would without predictions.
    assert_eq!(
        router.apply_event(&stored(a.worker, 0, &first, 9)),
        dynamo_kv_router::kv::EventOutcome::Applied
    );
    assert_eq!(router.cached_prefix(a.worker, &hashes), 9);
    assert_eq!(router.export_events().unwrap().len(), 1);
}

#[test]
fn predictions_expire_after_the_ttl() {
    let (router, clock) = least_prefill_router(Some(TTL));
    let (first, second) = burst();
    let a = router
        .book(&request("a", Role::Aggregated, first.clone()))
        .unwrap();
    let hashes = sequence_hashes_for_tokens(&first, BLOCK_SIZE);
    clock.set(TTL - Duration::from_millis(1));
    assert_eq!(router.predicted_prefix(a.worker, &hashes), 9);
    clock.set(TTL);
    assert_eq!(router.predicted_prefix(a.worker, &hashes), 0);
    // Expired predictions count for nothing at once; they leave the table at its next sweep,
    // a quarter of a TTL after the last, or when asked.
    let stats = router.predicted_cache_stats().unwrap();
    assert_eq!((stats.entries, stats.expired_blocks), (9, 0));
    router.expire_predicted_blocks();
    let stats = router.predicted_cache_stats().unwrap();
    assert_eq!((stats.entries, stats.expired_blocks), (0, 9));
    let text = router.prometheus_text();
    for sample in [
        "kv_router_predicted_bookings_total{mode=\"alongside_events\"} 1\n",
        "kv_router_predicted_blocks_expired_total{mode=\"alongside_events\"} 9\n",
        "kv_router_predicted_entries{mode=\"alongside_events\"} 0\n",
    ] {
        assert!(text.contains(sample), "{sample} in\n{text}");
    }
    // Past the TTL, with the first still prefilling and no event, the second spreads again.
    let b = router
        .book(&request("b", Role::Aggregated, second))
        .unwrap();
    assert_ne!(b.worker, a.worker);
    assert_eq!(b.stats.cached_blocks, 0);
}

/// A `removed` event of the blocks `range` of `prompt` on `worker`.
fn removed(
    worker: WorkerId,
    event_id: u64,
    prompt: &[u32],
    range: std::ops::Range<usize>,
) -> RouterEvent {
    let seq = sequence_hashes_for_tokens(prompt, BLOCK_SIZE);
    RouterEvent::new(
        worker,
        event_id,
        KvCacheEventData::Removed(dynamo_kv_router::kv::KvCacheRemoveData {
            block_hashes: seq[range].iter().map(|s| engine_of(*s)).collect(),
        }),
    )
}

#[test]
fn an_engine_removal_is_not_contradicted_by_a_prediction() {
    let (router, clock) = least_prefill_router(Some(TTL));
    let prompt = tokens(32, 3); // 8 blocks
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    let a = router
        .book(&request("a", Role::Aggregated, prompt.clone()))
        .unwrap();
    router.apply_event(&stored(a.worker, 0, &prompt, 8));
    // The engine evicts the prompt's last four blocks, well within the prediction's TTL.
    router.apply_event(&removed(a.worker, 1, &prompt, 4..8));
    assert_eq!(router.cached_prefix(a.worker, &hashes), 4);
    assert_eq!(router.predicted_prefix(a.worker, &hashes), 4);
    let preview = router
        .preview(&request("p", Role::Aggregated, prompt.clone()))
        .unwrap();
    assert_eq!((preview.worker, preview.stats.cached_blocks), (a.worker, 4));
    // Beyond the TTL the rest of the prediction is gone and the engine's count stands.
    clock.set(TTL * 2);
    assert_eq!(router.predicted_prefix(a.worker, &hashes), 0);
    let preview = router
        .preview(&request("q", Role::Aggregated, prompt.clone()))
        .unwrap();
    assert_eq!(preview.stats.cached_blocks, 4);

    // A `cleared` drops every prediction of its worker.
    router
        .book_on(
            &request("c", Role::Aggregated, prompt.clone()),
            a.worker,
            None,
        )
        .unwrap();
    assert_eq!(router.predicted_prefix(a.worker, &hashes), 8);
    router.apply_event(&RouterEvent::new(a.worker, 2, KvCacheEventData::Cleared));
    assert_eq!(router.predicted_prefix(a.worker, &hashes), 0);
    assert_eq!(router.cached_prefix(a.worker, &hashes), 0);
}

#[test]
fn a_worker_that_leaves_takes_its_waiting_predictions_with_it() {
    let (router, _clock) = least_prefill_router(Some(TTL));
    let prompt = tokens(32, 5);
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    let a = router
        .book(&request("a", Role::Aggregated, prompt.clone()))
        .unwrap();
    // Nothing read the side table since the booking: its prediction still waits.
    router.deregister_worker(a.worker).unwrap();
    router
        .register_worker(plain(a.worker.worker_id, Role::Aggregated))
        .unwrap();
    assert_eq!(router.predicted_prefix(a.worker, &hashes), 0);
    let again = router
        .book(&request("b", Role::Aggregated, prompt.clone()))
        .unwrap();
    assert_eq!(
        again.stats.cached_blocks, 0,
        "no prediction outlived its worker"
    );
    // A prediction settled early counts as one the next booking would have settled.
    router.settle_predictions();
    assert_eq!(router.predicted_prefix(again.worker, &hashes), 8);
    assert_eq!(router.predicted_cache_stats().unwrap().bookings, 2);
}

#[test]
fn a_removal_in_a_batch_supersedes_predictions_as_a_single_event_does() {
    let (router, _clock) = least_prefill_router(Some(TTL));
    let prompt = tokens(32, 4);
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    let a = router
        .book(&request("a", Role::Aggregated, prompt.clone()))
        .unwrap();
    // Stored and removed in one engine batch (the same event id numbers the whole batch).
    let outcomes = router.apply_event_batch(&[
        stored(a.worker, 0, &prompt, 8),
        removed(a.worker, 0, &prompt, 2..8),
    ]);
    assert_eq!(outcomes.len(), 2);
    assert_eq!(router.cached_prefix(a.worker, &hashes), 2);
    assert_eq!(router.predicted_prefix(a.worker, &hashes), 2);
    // An event that reveals lost events is not applied and changes no prediction.
    let other = router
        .book_on(
            &request("b", Role::Aggregated, prompt.clone()),
            worker(2),
            None,
        )
        .unwrap();
    assert_eq!(other.worker, worker(2));
    router.apply_event(&stored(worker(2), 0, &prompt, 8));
    router.apply_event(&removed(worker(2), 5, &prompt, 0..8));
    assert_eq!(router.predicted_prefix(worker(2), &hashes), 8);
}

#[test]
fn hints_name_only_engine_reported_ids_never_predicted_blocks() {
    let (router, _clock) = predicting_router(
        Some(TTL),
        role_policies(
            "fixed",
            Fixed(worker(3), None),
            vec![hint("probe", EngineIdProbe)],
        ),
        |id| hinting(id, Role::Aggregated),
    );
    let prompt = tokens(16, 9); // 4 blocks
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    // Worker 1 reports the four blocks; worker 2 is only predicted to hold them.
    router.apply_event(&stored(worker(1), 0, &prompt, 4));
    router
        .book_on(
            &request("seed", Role::Aggregated, prompt.clone()),
            worker(2),
            None,
        )
        .unwrap();
    let booked = router
        .book(&request("probe", Role::Aggregated, prompt))
        .unwrap();
    assert_eq!(booked.worker, worker(3));
    let hint = booked
        .hint
        .unwrap_or_else(|| panic!("the probe ran: {:?}", booked.stats));
    let probed = serde_json::to_value(&hint).unwrap();
    let probed = probed.to_string();
    let engine_ids: Vec<EngineBlockHash> = hashes.iter().map(|s| engine_of(*s)).collect();
    let expected = serde_json::json!([
        {"worker": 1, "cached": 4, "lent": engine_ids, "looked_up": engine_ids},
        {"worker": 2, "cached": 4, "lent": null, "looked_up": null},
    ]);
    assert!(
        probed.contains(&expected.to_string()),
        "predicted blocks lend no engine ids: {probed}"
    );
    // Only the engine-reported blocks are dumped.
    let dumped = router.export_events().unwrap();
    assert_eq!(dumped.len(), 1);
    assert_eq!(dumped[0].worker(), worker(1));
}
