//! Bad KV events never panic, are counted, and leave the index as it was; lost events are
//! replayed, engine restarts clear the worker.

mod router_fixtures;

use dynamo_kv_router::kv::{
    EngineBlockHash, EventOutcome, IgnoreReason, KvCacheEventData, LocalBlockHash, RouterEvent,
    SequenceHash, StorageTier, sequence_hashes_for_tokens,
};
use dynamo_kv_router::router::{BATCH_PART_BLOCKS, ReplayRequest, Role, Router, RouterMode};
use proptest::prelude::*;
use router_fixtures::*;

fn router_with_state() -> (Router, Vec<SequenceHash>) {
    let router = router(
        RouterMode::Kv,
        vec![(
            Role::Decode,
            role_policies("longest", LongestPrefix, vec![]),
        )],
    );
    assert!(router.register_worker(hinting(1, Role::Decode)).is_ok());
    let prompt = tokens(40, 1);
    assert_eq!(
        router.apply_event(&stored(worker(1), 0, &prompt, 7)),
        EventOutcome::Applied
    );
    (router, sequence_hashes_for_tokens(&prompt, BLOCK_SIZE))
}

fn removed(event_id: u64, hashes: &[EngineBlockHash]) -> RouterEvent {
    RouterEvent::new(
        worker(1),
        event_id,
        KvCacheEventData::removed(hashes.iter().copied()),
    )
}

#[test]
fn anomalies_are_counted_and_change_nothing() {
    let (router, hashes) = router_with_state();
    let prompt = tokens(40, 1);
    let unknown_parent = RouterEvent::new(
        worker(1),
        2,
        KvCacheEventData::stored(
            Some(EngineBlockHash(4242)),
            [(EngineBlockHash(77), LocalBlockHash(78))],
        ),
    );
    let mut self_parent = stored_range(worker(1), 3, &prompt, 7..9);
    if let KvCacheEventData::Stored(store) = &mut self_parent.event.data {
        store.parent_hash = Some(store.blocks[1].block_hash);
    }
    let cases = [
        (
            RouterEvent::new(worker(7), 0, KvCacheEventData::Cleared),
            IgnoreReason::UnknownWorker,
        ),
        (
            removed(1, &[1, 2, 3].map(EngineBlockHash)),
            IgnoreReason::UnknownBlocks,
        ),
        (
            RouterEvent::new(worker(1), 1, KvCacheEventData::Cleared),
            IgnoreReason::OutOfOrder,
        ),
        (unknown_parent, IgnoreReason::UnknownParent),
        (self_parent, IgnoreReason::InvalidBlockSequence),
        (
            stored_range(worker(1), 4, &prompt, 7..9).with_storage_tier(StorageTier::HostPinned),
            IgnoreReason::NonDeviceTier,
        ),
    ];
    for (event, reason) in cases {
        assert_eq!(router.apply_event(&event), EventOutcome::Ignored(reason));
        assert_eq!(router.cached_prefix(worker(1), &hashes), 7);
    }
    assert_eq!(
        router.apply_event_json("{not json"),
        EventOutcome::Ignored(IgnoreReason::Malformed)
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 7);
    // The rejected events still counted in the worker's numbering: event 5 follows.
    assert_eq!(
        router.apply_event(&stored_range(worker(1), 5, &prompt, 7..9)),
        EventOutcome::Applied
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 9);
    let metrics = router.metrics();
    for reason in [
        "unknown_worker",
        "out_of_order",
        "unknown_blocks",
        "unknown_parent",
        "invalid_block_sequence",
        "non_device_tier",
        "malformed",
    ] {
        assert_eq!(metrics.events.ignored.get(reason), Some(&1), "{reason}");
    }
    assert_eq!(metrics.events.unknown_block_removals, 3);
    assert_eq!(metrics.events.unknown_parents, 1);
    let text = router.prometheus_text();
    for line in [
        "kv_router_kv_events_ignored_total{reason=\"malformed\"} 1",
        "kv_router_kv_events_ignored_total{reason=\"unknown_parent\"} 1",
        "kv_router_kv_events_ignored_total{reason=\"non_device_tier\"} 1",
    ] {
        assert!(text.contains(line), "{line}");
    }
}

#[test]
fn a_gap_waits_for_the_replay_then_the_worker_is_trusted_again() {
    let (router, hashes) = router_with_state();
    let prompt = tokens(40, 1);
    // Events 1 and 2 are lost; 3 reveals the gap and is not applied.
    let lost = [
        removed(1, &[engine_of(hashes[6])]),
        stored_range(worker(1), 2, &prompt, 6..8),
    ];
    let live = [
        stored_range(worker(1), 3, &prompt, 8..9),
        removed(4, &[engine_of(hashes[8])]),
    ];
    assert_eq!(
        router.apply_event(&live[0]),
        EventOutcome::Ignored(IgnoreReason::Gap)
    );
    assert_eq!(router.replay_request(worker(1)), Some(1));
    assert_eq!(
        router.replay_requests(),
        [ReplayRequest {
            worker: worker(1),
            from_event_id: 1
        }]
    );
    // Not trusted meanwhile; later live events wait for the replay.
    assert_eq!(router.cached_prefix(worker(1), &hashes), 0);
    assert_eq!(
        router.apply_event(&live[1]),
        EventOutcome::Ignored(IgnoreReason::AwaitingRecovery)
    );
    let metrics = router.metrics();
    assert_eq!(metrics.events.workers_awaiting_recovery, 1);
    assert!(
        router
            .prometheus_text()
            .contains("kv_router_kv_workers_awaiting_recovery 1")
    );
    // The engine replays from event 1 through its newest; duplicates of the replay are ignored.
    for event in lost.iter().chain(&live) {
        assert_eq!(
            router.apply_event(event),
            EventOutcome::Applied,
            "{event:?}"
        );
    }
    assert_eq!(
        router.apply_event(&live[0]),
        EventOutcome::Ignored(IgnoreReason::OutOfOrder)
    );
    assert_eq!(router.replay_request(worker(1)), None);
    assert_eq!(router.cached_prefix(worker(1), &hashes), 8);
    let metrics = router.metrics();
    assert_eq!(metrics.events.ignored.get("gap"), Some(&1));
    assert_eq!(metrics.events.ignored.get("awaiting_recovery"), Some(&1));
    assert_eq!(metrics.events.recoveries, 1);
    assert_eq!(metrics.events.workers_awaiting_recovery, 0);
}

#[test]
fn a_restart_at_zero_clears_the_worker_and_continues() {
    let (router, hashes) = router_with_state();
    let prompt = tokens(40, 1);
    assert_eq!(
        router.apply_event(&stored_range(worker(1), 1, &prompt, 7..8)),
        EventOutcome::Applied
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 8);
    assert_eq!(
        router.apply_event(&stored(worker(1), 0, &prompt, 2)),
        EventOutcome::Applied
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 2);
    assert_eq!(
        router.apply_event(&stored_range(worker(1), 1, &prompt, 2..4)),
        EventOutcome::Applied
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 4);
    assert_eq!(router.metrics().events.restarts, 1);
}

#[test]
fn a_cleared_past_a_gap_or_an_abandoned_replay_resynchronises() {
    let (router, hashes) = router_with_state();
    let prompt = tokens(40, 1);
    assert_eq!(
        router.apply_event(&stored(worker(1), 5, &prompt, 9)),
        EventOutcome::Ignored(IgnoreReason::Gap)
    );
    assert_eq!(
        router.apply_event(&RouterEvent::new(worker(1), 6, KvCacheEventData::Cleared)),
        EventOutcome::Applied
    );
    assert_eq!(router.replay_request(worker(1)), None);
    assert_eq!(
        router.apply_event(&stored(worker(1), 7, &prompt, 9)),
        EventOutcome::Applied
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 9);

    // The engine cannot replay: the transport gives up, the worker is reset and its next
    // event, whatever its id, starts its stream again.
    assert_eq!(
        router.apply_event(&stored(worker(1), 20, &prompt, 9)),
        EventOutcome::Ignored(IgnoreReason::Gap)
    );
    assert!(router.abandon_recovery(worker(1)));
    assert!(!router.abandon_recovery(worker(9)));
    assert_eq!(router.cached_prefix(worker(1), &hashes), 0);
    assert_eq!(
        router.apply_event(&stored(worker(1), 23, &prompt, 3)),
        EventOutcome::Applied
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 3);
    assert_eq!(router.metrics().events.abandoned_recoveries, 1);
}

#[test]
fn a_batch_numbered_once_applies_together() {
    let (router, hashes) = router_with_state();
    let prompt = tokens(40, 1);
    let batch = [
        removed(1, &[engine_of(hashes[6])]),
        stored_range(worker(1), 1, &prompt, 6..9),
    ];
    assert_eq!(
        router.apply_event_batch(&batch),
        [EventOutcome::Applied, EventOutcome::Applied]
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 9);
    // Delivered again, the whole batch is a duplicate.
    assert_eq!(
        router.apply_event_batch(&batch),
        [EventOutcome::Ignored(IgnoreReason::OutOfOrder); 2]
    );
}

#[test]
fn a_long_batch_numbered_once_applies_together_across_lock_parts() {
    let (router, _) = router_with_state();
    let prompt = tokens(800, 1);
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    // One-block stores of blocks 7.., all numbered 1: more blocks than one hold of the lock.
    let batch: Vec<RouterEvent> = (7..hashes.len())
        .map(|block| stored_range(worker(1), 1, &prompt, block..block + 1))
        .collect();
    assert!(batch.len() > 2 * BATCH_PART_BLOCKS);
    let outcomes = router.apply_event_batch(&batch);
    assert_eq!(outcomes, vec![EventOutcome::Applied; batch.len()]);
    assert_eq!(router.cached_prefix(worker(1), &hashes), hashes.len());
    // Delivered again, every part of it is a duplicate.
    assert_eq!(
        router.apply_event_batch(&batch),
        vec![EventOutcome::Ignored(IgnoreReason::OutOfOrder); batch.len()]
    );
}

#[test]
fn removed_blocks_shorten_the_prefix() {
    let (router, hashes) = router_with_state();
    let event = removed(1, &[engine_of(hashes[3]), EngineBlockHash(999)]);
    assert_eq!(router.apply_event(&event), EventOutcome::Applied);
    assert_eq!(router.cached_prefix(worker(1), &hashes), 3);
    assert_eq!(router.metrics().events.unknown_block_removals, 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}") {
        let (router, hashes) = router_with_state();
        let outcome = router.apply_event_json(&text);
        prop_assert!(matches!(outcome, EventOutcome::Ignored(_)));
        prop_assert_eq!(router.cached_prefix(worker(1), &hashes), 7);
    }

    #[test]
    fn arbitrary_typed_events_never_panic(
        worker_id in 0u64..3,
        dp_rank in 0u32..2,
        event_id in proptest::num::u64::ANY,
        kind in 0u8..3,
        hashes in proptest::collection::vec(proptest::num::u64::ANY, 0..20),
        parent in proptest::option::of(proptest::num::u64::ANY),
    ) {
        let (router, _) = router_with_state();
        let data = match kind {
            0 => KvCacheEventData::stored(
                parent.map(EngineBlockHash),
                hashes.chunks(2).map(|pair| {
                    (EngineBlockHash(pair[0]), LocalBlockHash(pair.get(1).copied().unwrap_or(pair[0])))
                }),
            ),
            1 => KvCacheEventData::removed(hashes.into_iter().map(EngineBlockHash)),
            _ => KvCacheEventData::Cleared,
        };
        let event = RouterEvent::new(dynamo_kv_router::router::WorkerId::new(worker_id, dp_rank), event_id, data);
        let _ = router.apply_event(&event);
        let _ = router.apply_event_json(&event.to_json());
        let _ = router.book(&request("r", Role::Decode, tokens(40, 1)));
        let metrics = router.metrics();
        prop_assert_eq!(
            metrics.events.applied + metrics.events.ignored.values().sum::<u64>(),
            3
        );
    }
}
