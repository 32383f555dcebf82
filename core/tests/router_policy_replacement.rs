//! `Router::replace_policies`: a swap keeps the index, the workers and the loads, is refused
//! whole when it cannot apply, and never splits a booking between two configurations, even
//! with bookings running on other threads through 100 swaps.

mod router_fixtures;

use dynamo_kv_router::plugins::WorkerLoad;
use dynamo_kv_router::router::{
    Booking, PolicyReplaceError, Role, Router, RouterMode, RouterOptions, RouterSetup,
};
use router_fixtures::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A decode setup that books every request on `worker_id` and tags its one hint action `tag`.
fn fixed_setup(worker_id: u64, tag: &'static str) -> RouterSetup {
    let policies = role_policies(
        "fixed",
        Fixed(worker(worker_id), None),
        vec![hint("emit", Emit::new(tag, 1))],
    );
    setup(RouterMode::Kv, vec![(Role::Decode, policies)])
}

/// Version 1 and every odd version book on worker 1 with tag `a`; even versions on worker 2
/// with tag `b`.
fn setup_of_version(version: u64) -> RouterSetup {
    if version % 2 == 1 {
        fixed_setup(1, "a")
    } else {
        fixed_setup(2, "b")
    }
}

/// The tag of the booking's hint action.
fn tag_of(booking: &Booking) -> &str {
    let hint = booking.hint.as_ref().expect("the worker takes hints");
    hint.actions[0].payload["tag"]
        .as_str()
        .expect("the action carries its tag")
}

/// The booking ran wholly under the policies of the version it reports.
fn assert_consistent(booking: &Booking) {
    let version = booking.stats.policy_version;
    let (worker_id, tag) = if version % 2 == 1 { (1, "a") } else { (2, "b") };
    assert_eq!(
        (booking.worker, tag_of(booking)),
        (worker(worker_id), tag),
        "booking {} mixed two configurations (version {version})",
        booking.request_id
    );
}

fn decode_router() -> Router {
    let router = Router::new(setup_of_version(1), RouterOptions::default());
    for id in 1..=2 {
        router
            .register_worker(hinting(id, Role::Decode))
            .expect("a new worker registers");
    }
    router
}

#[test]
fn a_replacement_books_with_the_new_policies_and_keeps_index_workers_and_loads() {
    let router = decode_router();
    let prompt = tokens(32, 1);
    router.apply_event(&stored(worker(1), 0, &prompt, 8));
    let first = router
        .book(&request("r1", Role::Decode, prompt.clone()))
        .expect("books");
    assert_eq!((first.worker, first.stats.policy_version), (worker(1), 1));
    assert_eq!(first.stats.cached_blocks, 8);

    assert_eq!(router.replace_policies(setup_of_version(2)), Ok(2));
    assert_eq!(router.policy_version(), 2);
    let second = router
        .book(&request("r2", Role::Decode, prompt.clone()))
        .expect("books");
    assert_eq!((second.worker, second.stats.policy_version), (worker(2), 2));
    assert_eq!(tag_of(&second), "b");
    // The index survived the swap: worker 1 still caches the prompt.
    assert_eq!(
        router.cached_prefix(worker(1), &second_hashes(&prompt)),
        8,
        "the index is kept"
    );
    // The first booking's load is still reserved, and releases as before.
    assert_eq!(
        router.load_of(worker(1)).map(|l| l.active_requests),
        Some(1)
    );
    router.release("r1");
    router.release("r2");
    assert_eq!(router.load_of(worker(1)), Some(WorkerLoad::default()));
    assert_eq!(router.load_of(worker(2)), Some(WorkerLoad::default()));
    assert_eq!(router.workers().len(), 2);
}

fn second_hashes(prompt: &[u32]) -> Vec<dynamo_kv_router::kv::SequenceHash> {
    dynamo_kv_router::kv::sequence_hashes_for_tokens(prompt, BLOCK_SIZE)
}

#[test]
fn a_replacement_with_another_block_size_is_refused_and_changes_nothing() {
    let router = decode_router();
    let mut other = setup_of_version(2);
    other.block_size = BLOCK_SIZE * 2;
    assert_eq!(
        router.replace_policies(other),
        Err(PolicyReplaceError::BlockSizeChanged {
            running: BLOCK_SIZE,
            requested: BLOCK_SIZE * 2
        })
    );
    assert_eq!(router.policy_version(), 1);
    let booking = router
        .book(&request("r", Role::Decode, tokens(16, 0)))
        .expect("books");
    assert_eq!(booking.worker, worker(1), "the old policies still book");
}

#[test]
fn dropping_a_role_that_registered_workers_serve_is_refused() {
    let router = decode_router();
    let prefill_only = setup(
        RouterMode::Kv,
        vec![(
            Role::Prefill,
            role_policies("fixed", Fixed(worker(1), None), Vec::new()),
        )],
    );
    let refused = router.replace_policies(prefill_only.clone());
    assert_eq!(
        refused,
        Err(PolicyReplaceError::RoleInUse {
            role: Role::Decode,
            workers: vec![worker(1), worker(2)]
        })
    );
    let message = refused.unwrap_err().to_string();
    assert!(
        message.contains("role `decode`") && message.contains("2 registered worker(s)"),
        "{message}"
    );
    assert_eq!(router.policy_version(), 1);
    // Once its workers are gone, the role can go.
    router.deregister_worker(worker(1)).expect("registered");
    router.deregister_worker(worker(2)).expect("registered");
    assert_eq!(router.replace_policies(prefill_only), Ok(2));
}

#[test]
fn hint_failure_counters_survive_a_replacement_that_keeps_the_policy() {
    let broken = |setup_tag: &'static str| {
        let policies = role_policies(
            "fixed",
            Fixed(worker(1), None),
            vec![
                hint("broken", BrokenHint { panic: false }),
                hint(setup_tag, Emit::new(setup_tag, 1)),
            ],
        );
        setup(RouterMode::Kv, vec![(Role::Decode, policies)])
    };
    let router = Router::new(broken("a"), RouterOptions::default());
    router
        .register_worker(hinting(1, Role::Decode))
        .expect("registers");
    router
        .book(&request("r1", Role::Decode, tokens(8, 0)))
        .expect("books");
    router
        .replace_policies(broken("b"))
        .expect("same block size");
    router
        .book(&request("r2", Role::Decode, tokens(8, 0)))
        .expect("books");
    let failures = router.metrics().hint_policy_failures;
    let labels: Vec<(&str, u64)> = failures
        .iter()
        .map(|f| (f.name.as_str(), f.errors))
        .collect();
    assert_eq!(labels, vec![("broken", 2), ("b", 0)]);
}

#[test]
fn one_hundred_replacements_under_concurrent_bookings_split_and_lose_no_booking() {
    const THREADS: usize = 3;
    const SWAPS: u64 = 100;
    let router = Arc::new(decode_router());
    let stop = Arc::new(AtomicBool::new(false));
    let booked = Arc::new(AtomicU64::new(0));
    let bookers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let router = Arc::clone(&router);
            let stop = Arc::clone(&stop);
            let booked = Arc::clone(&booked);
            std::thread::spawn(move || {
                let mut last_version = 0;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) || n < 50 {
                    let id = format!("t{thread}-{n}");
                    let booking = router
                        .book(&request(&id, Role::Decode, tokens(16, n as u32 % 4)))
                        .unwrap_or_else(|error| panic!("booking {id} failed: {error}"));
                    assert_consistent(&booking);
                    assert!(
                        booking.stats.policy_version >= last_version,
                        "versions went backwards on one thread"
                    );
                    last_version = booking.stats.policy_version;
                    router.release(&id);
                    booked.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        })
        .collect();
    for expected in 2..=SWAPS + 1 {
        let version = router
            .replace_policies(setup_of_version(expected))
            .expect("the same block size and roles");
        assert_eq!(version, expected);
        // Every booking that starts after the swap returned uses the new policies.
        let id = format!("main-{version}");
        let booking = router
            .book(&request(&id, Role::Decode, tokens(16, 0)))
            .expect("books");
        assert_eq!(booking.stats.policy_version, version);
        assert_consistent(&booking);
        router.release(&id);
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    for booker in bookers {
        booker.join().expect("a booking thread panicked");
    }
    let bookings = booked.load(Ordering::Relaxed) + SWAPS;
    let metrics = router.metrics();
    assert_eq!(metrics.bookings, bookings, "every booking counted once");
    assert_eq!(metrics.active_bookings, 0, "every booking released once");
    for id in 1..=2 {
        assert_eq!(router.load_of(worker(id)), Some(WorkerLoad::default()));
    }
}
