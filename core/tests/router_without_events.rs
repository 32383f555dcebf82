//! Routing without KV events: a booking predicts that its worker caches the prompt's blocks
//! for the TTL, the prediction steers the next booking that shares the prefix, and it expires
//! (or is pruned) by the router's clock.

mod router_fixtures;

use dynamo_kv_router::clock::ManualClock;
use dynamo_kv_router::kv::ApproximateConfig;
use dynamo_kv_router::kv::hashing::sequence_hashes_for_tokens;
use dynamo_kv_router::router::{Role, Router, RouterMode, RouterOptions};
use router_fixtures::*;
use std::sync::Arc;
use std::time::Duration;

fn approximate_router(config: ApproximateConfig) -> (Router, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new());
    let router = Router::with_clock(
        setup(
            RouterMode::Kv,
            vec![(
                Role::Aggregated,
                role_policies("longest", LongestPrefix, vec![]),
            )],
        ),
        RouterOptions {
            approximate: Some(config),
            index_lineage: true,
            ..RouterOptions::default()
        },
        Arc::clone(&clock) as _,
    );
    for id in 1..=3 {
        assert!(router.register_worker(plain(id, Role::Aggregated)).is_ok());
    }
    (router, clock)
}

fn ttl(secs: u64) -> ApproximateConfig {
    ApproximateConfig {
        ttl: Duration::from_secs(secs),
        ..ApproximateConfig::default()
    }
}

#[test]
fn a_booking_is_predicted_cached_until_its_ttl() {
    let (router, clock) = approximate_router(ttl(120));
    assert!(router.predicts_caches());
    let prompt = tokens(32, 5);
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    // Cold everywhere: LongestPrefix breaks the tie towards the smallest id... then worker 1.
    let first = router
        .book(&request("a", Role::Aggregated, prompt.clone()))
        .unwrap();
    assert_eq!(first.stats.cached_blocks, 0);
    assert_eq!(router.cached_prefix(first.worker, &hashes), hashes.len());

    // A request sharing the first half lands where the first was booked, its prefix counted.
    let mut second_prompt = prompt[..16].to_vec();
    second_prompt.extend(tokens(16, 99));
    clock.set(Duration::from_secs(119));
    let second = router
        .book(&request("b", Role::Aggregated, second_prompt))
        .unwrap();
    assert_eq!(second.worker, first.worker);
    assert_eq!(second.stats.cached_blocks, 4);

    // The shared half was renewed at 119 s; the rest of the first prompt expires at 120 s.
    clock.set(Duration::from_secs(120));
    router.expire_predicted_blocks();
    assert_eq!(router.cached_prefix(first.worker, &hashes), 4);
    clock.set(Duration::from_secs(239));
    router.expire_predicted_blocks();
    assert_eq!(router.cached_prefix(first.worker, &hashes), 0);
    let stats = router.predicted_cache_stats().unwrap();
    assert_eq!(stats.bookings, 2);
    assert_eq!(stats.entries, 0);
    assert_eq!(stats.expired_blocks, stats.recorded_blocks - 4);
    let text = router.prometheus_text();
    for sample in [
        "kv_router_predicted_bookings_total{mode=\"without_events\"} 2\n".to_owned(),
        format!(
            "kv_router_predicted_blocks_expired_total{{mode=\"without_events\"}} {}\n",
            stats.expired_blocks
        ),
        "kv_router_predicted_entries{mode=\"without_events\"} 0\n".to_owned(),
    ] {
        assert!(text.contains(&sample), "{sample} in\n{text}");
    }
}

#[test]
fn predictions_are_pruned_to_the_target_size() {
    let config = ApproximateConfig {
        ttl: Duration::from_secs(600),
        max_tree_size: 10,
        prune_target_ratio: 0.5,
    };
    let (router, clock) = approximate_router(config);
    let older = tokens(24, 1); // 6 blocks
    let newer = tokens(24, 2); // 6 blocks: 12 > 10, pruned down to 5
    let a = router
        .book(&request("a", Role::Aggregated, older.clone()))
        .unwrap();
    clock.advance(Duration::from_secs(1));
    let b = router
        .book(&request("b", Role::Aggregated, newer.clone()))
        .unwrap();
    let stats = router.predicted_cache_stats().unwrap();
    assert_eq!(
        (stats.entries, stats.pruned_blocks, stats.prunes),
        (5, 7, 1)
    );
    let older_hashes = sequence_hashes_for_tokens(&older, BLOCK_SIZE);
    let newer_hashes = sequence_hashes_for_tokens(&newer, BLOCK_SIZE);
    assert_eq!(router.cached_prefix(a.worker, &older_hashes), 0);
    // The newest prediction is shortened from its end: what is left is still a prefix.
    assert_eq!(router.cached_prefix(b.worker, &newer_hashes), 5);
}

#[test]
fn a_router_trusting_events_predicts_nothing() {
    let router = router(
        RouterMode::Kv,
        vec![(
            Role::Aggregated,
            role_policies("longest", LongestPrefix, vec![]),
        )],
    );
    assert!(router.register_worker(plain(1, Role::Aggregated)).is_ok());
    let prompt = tokens(16, 3);
    let booked = router
        .book(&request("a", Role::Aggregated, prompt.clone()))
        .unwrap();
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    assert_eq!(router.cached_prefix(booked.worker, &hashes), 0);
    assert!(router.predicted_cache_stats().is_none());
}

#[test]
fn deregistering_a_worker_drops_its_predictions_and_dumps_carry_them() {
    let (router, _clock) = approximate_router(ttl(120));
    let prompt = tokens(16, 8);
    let booked = router
        .book(&request("a", Role::Aggregated, prompt))
        .unwrap();
    let events = router.export_events().unwrap();
    assert_eq!(
        events.len(),
        1,
        "the prediction dumps as one stored chain: {events:?}"
    );
    assert!(router.deregister_worker(booked.worker).is_ok());
    assert_eq!(router.predicted_cache_stats().unwrap().entries, 0);
}
