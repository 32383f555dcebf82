//! `Router::preview` chooses without reserving or hinting; `Router::book_on` books a worker the
//! caller chose, with the prefill less the prefix that worker caches; `Router::export_events`
//! dumps the index as events that rebuild it.

mod router_fixtures;

use dynamo_kv_router::plugins::WorkerLoad;
use dynamo_kv_router::router::{BookError, Role, Router, RouterMode, RouterOptions, WorkerId};
use router_fixtures::*;

fn load_of(router: &Router, id: WorkerId) -> WorkerLoad {
    router.load_of(id).unwrap_or_default()
}

fn hinting_router() -> Router {
    let router = Router::new(
        setup(
            RouterMode::Kv,
            vec![(
                Role::Aggregated,
                role_policies(
                    "longest",
                    LongestPrefix,
                    vec![hint("emit", Emit::new("t", 1))],
                ),
            )],
        ),
        RouterOptions::default(),
    );
    assert!(router.register_worker(hinting(1, Role::Aggregated)).is_ok());
    assert!(router.register_worker(hinting(2, Role::Aggregated)).is_ok());
    router
}

#[test]
fn preview_chooses_the_booked_worker_without_load_or_hint() {
    let router = hinting_router();
    let prompt = tokens(16, 7);
    router.apply_event(&stored(worker(2), 0, &prompt, 3));
    let preview = router.preview(&request("q", Role::Aggregated, prompt.clone()));
    let preview = preview.expect("preview");
    assert_eq!(preview.worker, worker(2));
    assert_eq!(preview.stats.cached_blocks, 3);
    assert!(preview.hint.is_none());
    assert_eq!(load_of(&router, worker(2)), WorkerLoad::default());
    assert_eq!(router.metrics().bookings, 0);

    let booked = router.book(&request("b", Role::Aggregated, prompt));
    let booked = booked.expect("booking");
    assert_eq!(booked.worker, preview.worker);
    assert!(booked.hint.is_some());
    assert_eq!(load_of(&router, worker(2)).active_requests, 1);
}

#[test]
fn book_on_reserves_the_uncached_prefill_on_the_named_worker() {
    let router = hinting_router();
    let prompt = tokens(16, 9);
    router.apply_event(&stored(worker(1), 0, &prompt, 2));
    let booking = router.book_on(
        &request("r", Role::Aggregated, prompt.clone()),
        worker(1),
        None,
    );
    let booking = booking.expect("booking");
    assert_eq!(booking.worker, worker(1));
    assert_eq!(booking.stats.cached_blocks, 2);
    assert!(booking.hint.is_none());
    let load = load_of(&router, worker(1));
    assert_eq!(load.active_prefill_tokens, 16 - 2 * u64::from(BLOCK_SIZE));
    assert_eq!(load.active_blocks, 4);
    router.release("r");
    assert_eq!(load_of(&router, worker(1)), WorkerLoad::default());

    let booking = router.book_on(&request("s", Role::Aggregated, prompt), worker(1), Some(5));
    assert!(booking.is_ok());
    assert_eq!(
        router.load_of(worker(1)).map(|l| l.active_prefill_tokens),
        Some(5)
    );
    assert_eq!(router.load_of(worker(9)), None);
}

#[test]
fn book_on_an_unknown_worker_or_other_role_reserves_nothing() {
    let router = hinting_router();
    let error = router.book_on(
        &request("x", Role::Aggregated, tokens(8, 1)),
        worker(9),
        None,
    );
    assert!(matches!(error, Err(BookError::NotRegistered { .. })));
    let error = router.book_on(&request("y", Role::Prefill, tokens(8, 1)), worker(1), None);
    assert!(matches!(
        error,
        Err(BookError::NotRegistered {
            role: Role::Prefill,
            ..
        })
    ));
    assert_eq!(load_of(&router, worker(1)), WorkerLoad::default());
}

#[test]
fn exported_events_rebuild_the_same_lookups() {
    use dynamo_kv_router::kv::{KvCacheEventData, RouterEvent, block_hashes, sequence_hashes};
    let router = hinting_router();
    // Worker 1 caches 4 blocks of `first`, stored in two events; worker 2 caches its first 3
    // blocks and, after the second, a branch of 2 blocks of `second`.
    let first = tokens(16, 3);
    let mut second = first[..8].to_vec();
    second.extend(tokens(8, 4));
    router.apply_event(&stored_range(worker(1), 0, &first, 0..2));
    router.apply_event(&stored_range(worker(1), 1, &first, 2..4));
    router.apply_event(&stored(worker(2), 0, &first, 2));
    router.apply_event(&stored_range(worker(2), 1, &second, 2..4));
    router.apply_event(&stored_range(worker(2), 2, &first, 2..3));
    let events = router.export_events();

    // Upstream's form: one event per chain segment, local hashes as `tokens_hash`, chained
    // through the worker's engine hashes, ids counting from 0 across the dump.
    let local = |prompt: &[u32]| block_hashes(prompt, BLOCK_SIZE);
    let engines = |prompt: &[u32]| -> Vec<_> {
        sequence_hashes(&local(prompt))
            .into_iter()
            .map(engine_of)
            .collect()
    };
    let expected = [
        RouterEvent::new(
            worker(1),
            0,
            KvCacheEventData::stored(None, engines(&first).into_iter().zip(local(&first))),
        ),
        RouterEvent::new(
            worker(2),
            1,
            KvCacheEventData::stored(None, engines(&first).into_iter().zip(local(&first)).take(2)),
        ),
        RouterEvent::new(
            worker(2),
            2,
            KvCacheEventData::stored(
                Some(engines(&first)[1]),
                engines(&first)
                    .into_iter()
                    .zip(local(&first))
                    .skip(2)
                    .take(1),
            ),
        ),
        RouterEvent::new(
            worker(2),
            3,
            KvCacheEventData::stored(
                Some(engines(&first)[1]),
                engines(&second).into_iter().zip(local(&second)).skip(2),
            ),
        ),
    ];
    assert_eq!(events, expected);

    // Dump ids number the dump, not each engine's stream, so a copy restores them outside the
    // engines' numbering.
    let copy = hinting_router();
    let reread: Vec<RouterEvent> = events
        .iter()
        .map(|event| RouterEvent::from_json(&event.to_json()).expect("the dump reads back"))
        .collect();
    assert_eq!(copy.restore_events(&reread), 4 + 5);
    for prompt in [&first, &second] {
        let hashes = dynamo_kv_router::kv::sequence_hashes_for_tokens(prompt, BLOCK_SIZE);
        for id in [1, 2] {
            assert_eq!(
                copy.cached_prefix(worker(id), &hashes),
                router.cached_prefix(worker(id), &hashes)
            );
        }
    }
    assert_eq!(
        copy.cached_prefix(
            worker(2),
            &dynamo_kv_router::kv::sequence_hashes_for_tokens(&second, BLOCK_SIZE)
        ),
        4
    );
}

#[test]
fn output_blocks_add_active_blocks_until_the_booking_is_released() {
    let router = hinting_router();
    let prompt = tokens(16, 5);
    let booking = router.book(&request("o", Role::Aggregated, prompt));
    let worker = booking.expect("booking").worker;
    let before = load_of(&router, worker).active_blocks;
    assert!(router.add_output_blocks("o", 1));
    assert!(router.add_output_blocks("o", 2));
    assert_eq!(load_of(&router, worker).active_blocks, before + 3);
    assert!(!router.add_output_blocks("unknown", 1));
    router.release("o");
    assert_eq!(load_of(&router, worker), WorkerLoad::default());
    assert!(!router.add_output_blocks("o", 1));
}
