//! Bookings mirrored from other router replicas: they weigh on selection like local ones,
//! are released by the peer's events or by the TTL (counted), and never count as this
//! router's bookings; restored events leave the engine's event numbering alone.

mod router_fixtures;

use dynamo_kv_router::kv::sequence_hashes_for_tokens;
use dynamo_kv_router::plugins::WorkerLoad;
use dynamo_kv_router::router::{Role, Router, RouterMode, RouterOptions, WorkerId};
use router_fixtures::*;
use std::time::Duration;

fn load_of(router: &Router, id: WorkerId) -> WorkerLoad {
    router.load_of(id).unwrap_or_default()
}

fn least_loaded_router(options: RouterOptions) -> Router {
    let router = Router::new(setup(RouterMode::LeastLoaded, vec![]), options);
    for id in [1, 2] {
        router.register_worker(plain(id, Role::Decode)).unwrap();
    }
    router
}

#[test]
fn a_peer_booking_weighs_on_selection_and_its_events_release_it() {
    let router = least_loaded_router(RouterOptions::default());
    let prompt = tokens(16, 7);
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    router
        .record_peer_booking("peer-a:r1", worker(1), &hashes, 16)
        .unwrap();
    let load = load_of(&router, worker(1));
    assert_eq!(
        (
            load.active_prefill_tokens,
            load.active_blocks,
            load.active_requests
        ),
        (16, 4, 1)
    );
    // The least-loaded policy now avoids worker 1.
    let booking = router
        .book(&request("local", Role::Decode, tokens(8, 9)))
        .unwrap();
    assert_eq!(booking.worker, worker(2));
    assert_eq!(router.metrics().bookings, 1, "a peer booking is not ours");

    router.peer_prefill_complete("peer-a:r1");
    assert_eq!(load_of(&router, worker(1)).active_prefill_tokens, 0);
    assert_eq!(load_of(&router, worker(1)).active_blocks, 4);
    assert!(router.release_peer_booking("peer-a:r1"));
    assert!(
        !router.release_peer_booking("peer-a:r1"),
        "a repeat is harmless"
    );
    assert_eq!(load_of(&router, worker(1)), WorkerLoad::default());
    assert_eq!(router.peer_bookings(), 0);
    assert_eq!(router.peer_bookings_expired(), 0);
}

#[test]
fn a_lost_free_expires_by_the_ttl_and_is_counted() {
    let router = least_loaded_router(RouterOptions {
        booking_ttl: Duration::from_millis(20),
        ..RouterOptions::default()
    });
    let hashes = sequence_hashes_for_tokens(&tokens(8, 1), BLOCK_SIZE);
    router
        .record_peer_booking("peer-a:lost", worker(2), &hashes, 8)
        .unwrap();
    assert_eq!(router.peer_bookings(), 1);
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(router.expire_peer_bookings(), 1);
    assert_eq!(load_of(&router, worker(2)), WorkerLoad::default());
    assert_eq!(router.peer_bookings_expired(), 1);
    assert_eq!(router.peer_bookings(), 0);
}

#[test]
fn a_peer_booking_of_an_unknown_worker_reserves_nothing() {
    let router = least_loaded_router(RouterOptions::default());
    assert!(
        router
            .record_peer_booking("peer-a:x", worker(9), &[], 5)
            .is_err()
    );
    assert_eq!(router.peer_bookings(), 0);
}

#[test]
fn restored_events_rebuild_the_index_and_leave_event_numbering_alone() {
    let source = least_loaded_router(RouterOptions {
        index_lineage: true,
        ..RouterOptions::default()
    });
    let prompt = tokens(16, 3);
    source.apply_event(&stored(worker(1), 0, &prompt, 4));
    let copy = least_loaded_router(RouterOptions::default());
    assert_eq!(copy.restore_events(&source.export_events().unwrap()), 4);
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    assert_eq!(copy.cached_prefix(worker(1), &hashes), 4);
    // The engine's stream starts at its own numbering: its first event is not a duplicate.
    let state = copy.worker_index_state(worker(1)).unwrap();
    assert_eq!(state.last_event_id, None);
}

#[test]
fn a_router_built_without_index_lineage_refuses_to_export() {
    let router = least_loaded_router(RouterOptions::default());
    router.apply_event(&stored(worker(1), 0, &tokens(16, 3), 4));
    let error = router.export_events().unwrap_err();
    assert!(error.to_string().contains("index_lineage: true"), "{error}");
}
