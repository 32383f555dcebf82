//! Bad KV events never panic, are counted, and leave the index as it was.

mod router_fixtures;

use dynamo_kv_router::kv::{
    EventOutcome, IgnoreReason, KvEvent, KvEventData, StoredBlock, sequence_hashes_for_tokens,
};
use dynamo_kv_router::router::{Role, Router, RouterMode};
use proptest::prelude::*;
use router_fixtures::*;

fn router_with_state() -> (Router, Vec<u64>) {
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
        router.apply_event(&stored(worker(1), 10, &prompt, 7)),
        EventOutcome::Applied
    );
    (router, sequence_hashes_for_tokens(&prompt, BLOCK_SIZE))
}

#[test]
fn anomalies_are_counted_and_change_nothing() {
    let (router, hashes) = router_with_state();
    let cases = [
        (
            KvEvent::new(worker(7), 0, KvEventData::Cleared),
            IgnoreReason::UnknownWorker,
        ),
        (
            KvEvent::new(worker(1), 10, KvEventData::Cleared),
            IgnoreReason::OutOfOrder,
        ),
        (
            KvEvent::new(
                worker(1),
                11,
                KvEventData::Removed {
                    block_hashes: vec![1, 2, 3],
                },
            ),
            IgnoreReason::UnknownBlocks,
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
    let metrics = router.metrics();
    for reason in [
        "unknown_worker",
        "out_of_order",
        "unknown_blocks",
        "malformed",
    ] {
        assert_eq!(metrics.events.ignored.get(reason), Some(&1), "{reason}");
    }
    assert_eq!(metrics.events.unknown_block_removals, 3);
    assert!(
        router
            .prometheus_text()
            .contains("kv_router_kv_events_ignored_total{reason=\"malformed\"} 1")
    );
}

#[test]
fn a_gap_drops_the_workers_state_until_it_reports_cleared() {
    let (router, hashes) = router_with_state();
    let prompt = tokens(40, 1);
    assert_eq!(
        router.apply_event(&stored(worker(1), 13, &prompt, 9)),
        EventOutcome::Ignored(IgnoreReason::Gap)
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 0);
    assert_eq!(
        router.apply_event(&stored(worker(1), 14, &prompt, 9)),
        EventOutcome::Ignored(IgnoreReason::Stale)
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 0);
    assert_eq!(
        router.apply_event(&KvEvent::new(worker(1), 20, KvEventData::Cleared)),
        EventOutcome::Applied
    );
    assert_eq!(
        router.apply_event(&stored(worker(1), 21, &prompt, 9)),
        EventOutcome::Applied
    );
    assert_eq!(router.cached_prefix(worker(1), &hashes), 9);
    let metrics = router.metrics();
    assert_eq!(metrics.events.ignored.get("gap"), Some(&1));
    assert_eq!(metrics.events.ignored.get("stale"), Some(&1));
    assert_eq!(metrics.events.clears, 1);
}

#[test]
fn removed_blocks_shorten_the_prefix() {
    let (router, hashes) = router_with_state();
    let event = KvEvent::new(
        worker(1),
        11,
        KvEventData::Removed {
            block_hashes: vec![engine_of(hashes[3]), 999],
        },
    );
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
            0 => KvEventData::Stored {
                parent_hash: parent,
                blocks: hashes.chunks(2).map(|pair| StoredBlock {
                    block_hash: pair[0],
                    tokens_hash: pair.get(1).copied().unwrap_or(pair[0]),
                }).collect(),
            },
            1 => KvEventData::Removed { block_hashes: hashes },
            _ => KvEventData::Cleared,
        };
        let event = KvEvent::new(dynamo_kv_router::router::WorkerId::new(worker_id, dp_rank), event_id, data);
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
