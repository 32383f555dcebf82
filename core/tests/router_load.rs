//! Load accounting: reservation, prefill completion, release, harmless repeats, TTL expiry.

mod router_fixtures;

use dynamo_kv_router::plugins::{
    PolicyError, Selection, WorkerLoad, WorkerSelectionContext, WorkerSelectionPolicy,
};
use dynamo_kv_router::router::{Role, Router, RouterMode, RouterOptions, WorkerId};
use router_fixtures::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn load_of(router: &Router, id: WorkerId) -> WorkerLoad {
    router
        .workers()
        .into_iter()
        .find(|(info, _)| info.id == id)
        .map(|(_, load)| load)
        .unwrap_or_default()
}

fn kv_router(options: RouterOptions) -> Router {
    let router = Router::new(
        setup(
            RouterMode::Kv,
            vec![
                (
                    Role::Prefill,
                    role_policies("longest", LongestPrefix, vec![]),
                ),
                (
                    Role::Decode,
                    role_policies("longest", LongestPrefix, vec![]),
                ),
            ],
        ),
        options,
    );
    assert!(router.register_worker(plain(1, Role::Prefill)).is_ok());
    assert!(router.register_worker(plain(2, Role::Decode)).is_ok());
    router
}

#[test]
fn booking_reserves_and_completion_and_release_give_back() {
    let router = kv_router(RouterOptions::default());
    let prompt = tokens(42, 3); // 10 full blocks of 4 (the partial eleventh is not tracked)
    let _ = router.apply_event(&stored(worker(1), 0, &prompt, 4));
    let booking = router
        .book(&request("r1", Role::Prefill, prompt.clone()))
        .expect("booked");
    assert_eq!(booking.stats.cached_blocks, 4);
    let expected = WorkerLoad {
        active_prefill_tokens: 42 - 16,
        active_blocks: 10,
        active_requests: 1,
        additional_active_blocks: 0,
    };
    assert_eq!(load_of(&router, worker(1)), expected);
    // The decode booking of the same request is a second booking, on its own worker.
    let _ = router
        .book(&request("r1", Role::Decode, prompt))
        .expect("booked");
    assert_eq!(load_of(&router, worker(2)).active_prefill_tokens, 42);
    assert_eq!(router.metrics().active_bookings, 2);

    router.prefill_complete("r1");
    router.prefill_complete("r1");
    router.prefill_complete("unknown");
    assert_eq!(
        load_of(&router, worker(1)),
        WorkerLoad {
            active_prefill_tokens: 0,
            ..expected
        }
    );
    router.release("r1");
    router.release("r1");
    router.release("never-booked");
    assert_eq!(load_of(&router, worker(1)), WorkerLoad::default());
    assert_eq!(load_of(&router, worker(2)), WorkerLoad::default());
    assert_eq!(router.metrics().active_bookings, 0);
}

#[test]
fn rebooking_a_request_in_a_role_replaces_its_reservation() {
    let router = kv_router(RouterOptions::default());
    let _ = router
        .book(&request("r", Role::Decode, tokens(8, 0)))
        .expect("booked");
    let _ = router
        .book(&request("r", Role::Decode, tokens(16, 0)))
        .expect("booked");
    let load = load_of(&router, worker(2));
    assert_eq!((load.active_requests, load.active_blocks), (1, 4));
    router.release("r");
    assert_eq!(load_of(&router, worker(2)), WorkerLoad::default());
}

#[test]
fn stale_bookings_expire_after_the_ttl() {
    let router = kv_router(RouterOptions {
        booking_ttl: Duration::from_millis(20),
        ..RouterOptions::default()
    });
    let _ = router
        .book(&request("old", Role::Decode, tokens(8, 0)))
        .expect("booked");
    std::thread::sleep(Duration::from_millis(40));
    let _ = router
        .book(&request("new", Role::Decode, tokens(4, 0)))
        .expect("booked");
    let load = load_of(&router, worker(2));
    assert_eq!((load.active_requests, load.active_blocks), (1, 1));
    let metrics = router.metrics();
    assert_eq!((metrics.bookings_expired, metrics.active_bookings), (1, 1));
    // Releasing an expired booking is harmless.
    router.release("old");
    std::thread::sleep(Duration::from_millis(40));
    router.expire_stale_bookings();
    assert_eq!(load_of(&router, worker(2)), WorkerLoad::default());
    assert_eq!(router.metrics().bookings_expired, 2);
}

#[test]
fn deregistered_workers_bookings_release_harmlessly() {
    let router = kv_router(RouterOptions::default());
    let _ = router
        .book(&request("r", Role::Decode, tokens(8, 0)))
        .expect("booked");
    assert!(router.deregister_worker(worker(2)).is_ok());
    assert!(router.register_worker(plain(2, Role::Decode)).is_ok());
    assert_eq!(load_of(&router, worker(2)), WorkerLoad::default());
    router.release("r");
    assert_eq!(load_of(&router, worker(2)), WorkerLoad::default());
    assert_eq!(router.metrics().active_bookings, 0);
}

/// Books the first candidate and records every candidate's load.
struct RecordLoads(Arc<Mutex<Vec<WorkerLoad>>>);

impl WorkerSelectionPolicy for RecordLoads {
    fn select(&self, context: &WorkerSelectionContext<'_>) -> Result<Selection, PolicyError> {
        let candidates = context.candidates();
        if let Ok(mut seen) = self.0.lock() {
            *seen = candidates.iter().map(|c| c.load).collect();
        }
        let first = candidates
            .first()
            .ok_or_else(|| PolicyError::new("no candidates"))?;
        Ok(Selection::worker(first.worker))
    }
}

#[test]
fn decode_load_counts_blocks_shared_by_active_requests_once() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let router = Router::new(
        setup(
            RouterMode::Kv,
            vec![(
                Role::Decode,
                role_policies("record", RecordLoads(Arc::clone(&seen)), vec![]),
            )],
        ),
        RouterOptions::default(),
    );
    assert!(router.register_worker(plain(2, Role::Decode)).is_ok());
    let loads = || seen.lock().map(|s| s.clone()).unwrap_or_default();
    // A: 8 blocks. B: A's first 4 blocks, then 4 of its own (blocks of 4 tokens).
    let a = tokens(32, 0);
    let mut b = a[..16].to_vec();
    b.extend(tokens(16, 9));
    let _ = router
        .book(&request("a", Role::Decode, a.clone()))
        .expect("booked");
    assert_eq!(loads()[0].additional_active_blocks, 8, "nothing active yet");
    assert_eq!(load_of(&router, worker(2)).active_blocks, 8);
    let _ = router
        .book(&request("b", Role::Decode, b.clone()))
        .expect("booked");
    // B shares 4 blocks with A: 4 more blocks; potential was 8 + 4.
    assert_eq!(loads()[0].active_blocks, 8);
    assert_eq!(loads()[0].additional_active_blocks, 4);
    assert_eq!(loads()[0].potential_decode_blocks(), 12);
    assert_eq!(load_of(&router, worker(2)).active_blocks, 12);
    // A again shares all 8 blocks: nothing more.
    let _ = router
        .book(&request("a2", Role::Decode, a.clone()))
        .expect("booked");
    assert_eq!(loads()[0].additional_active_blocks, 0);
    assert_eq!(load_of(&router, worker(2)).active_blocks, 12);
    // A request under another LoRA shares nothing, though its tokens are A's.
    let lora = request("l", Role::Decode, a.clone())
        .with_identity(dynamo_kv_router::kv::RequestIdentity::plain().with_lora("adapter-1"));
    let _ = router.book(&lora).expect("booked");
    assert_eq!(loads()[0].additional_active_blocks, 8);
    assert_eq!(load_of(&router, worker(2)).active_blocks, 20);
    router.release("l");
    // Releasing A keeps its blocks active while A2 runs; releasing A2 leaves B's 8.
    router.release("a");
    assert_eq!(load_of(&router, worker(2)).active_blocks, 12);
    router.release("a2");
    assert_eq!(load_of(&router, worker(2)).active_blocks, 8);
    router.release("b");
    assert_eq!(load_of(&router, worker(2)), WorkerLoad::default());
}
