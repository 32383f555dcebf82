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
    let router = hinting_router();
    let first = tokens(16, 3);
    let second = tokens(12, 4);
    router.apply_event(&stored(worker(1), 0, &first, 4));
    router.apply_event(&stored(worker(2), 0, &second, 2));
    let events = router.export_events();
    assert_eq!(events.len(), 6);
    assert!(events.iter().all(|event| event.block_count() == 1));

    let copy = hinting_router();
    for event in &events {
        assert_eq!(
            copy.apply_event(event),
            dynamo_kv_router::router::EventOutcome::Applied
        );
    }
    for (prompt, id) in [(&first, 1), (&second, 2)] {
        let hashes = dynamo_kv_router::kv::sequence_hashes_for_tokens(prompt, BLOCK_SIZE);
        assert_eq!(
            copy.cached_prefix(worker(id), &hashes),
            router.cached_prefix(worker(id), &hashes)
        );
        assert!(copy.cached_prefix(worker(id), &hashes) > 0);
    }
    let reread: Vec<_> = events
        .iter()
        .map(|event| dynamo_kv_router::kv::RouterEvent::from_json(&event.to_json()).ok())
        .collect();
    assert!(
        reread
            .iter()
            .zip(&events)
            .all(|(again, event)| again.as_ref() == Some(event))
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
