//! A request's `CandidateFilter` (upstream's `allowed_worker_ids`): the selection policy
//! chooses among the allowed workers only, in every router mode, and a filter that allows none
//! of the role's workers books nothing.

mod router_fixtures;

use dynamo_kv_router::plugins::WorkerLoad;
use dynamo_kv_router::router::{
    BookError, CandidateFilter, Role, Router, RouterMode, RouterOptions,
};
use router_fixtures::*;

/// A router in `mode` with aggregated workers 1, 2 and 3 choosing the longest prefix.
fn router_in(mode: RouterMode) -> Router {
    let router = Router::new(
        setup(
            mode,
            vec![(
                Role::Aggregated,
                role_policies("longest", LongestPrefix, vec![]),
            )],
        ),
        RouterOptions::default(),
    );
    for id in 1..=3 {
        assert!(router.register_worker(plain(id, Role::Aggregated)).is_ok());
    }
    router
}

fn kv_router() -> Router {
    router_in(RouterMode::Kv)
}

#[test]
fn the_policy_chooses_among_allowed_workers_even_when_another_holds_the_longer_prefix() {
    let router = kv_router();
    let prompt = tokens(16, 3);
    router.apply_event(&stored(worker(1), 0, &prompt, 4));
    router.apply_event(&stored(worker(3), 0, &prompt, 2));
    let unfiltered = router.preview(&request("u", Role::Aggregated, prompt.clone()));
    assert_eq!(unfiltered.map(|b| b.worker), Ok(worker(1)));

    let filtered = request("f", Role::Aggregated, prompt.clone())
        .with_allowed_workers(CandidateFilter::new([2, 3]));
    let booking = router.book(&filtered).expect("booking");
    assert_eq!(booking.worker, worker(3));
    assert_eq!(booking.stats.cached_blocks, 2);
    assert_eq!(
        router.load_of(worker(3)).map(|l| l.active_requests),
        Some(1)
    );
    assert_eq!(router.load_of(worker(1)), Some(WorkerLoad::default()));
}

#[test]
fn a_filter_allowing_no_worker_of_the_role_books_nothing() {
    let router = kv_router();
    let request = request("n", Role::Aggregated, tokens(8, 1))
        .with_allowed_workers(CandidateFilter::new([9]));
    assert_eq!(
        router.book(&request),
        Err(BookError::NoAllowedWorkers {
            role: Role::Aggregated,
            allowed: vec![9],
        })
    );
    assert!(router.preview(&request).is_err());
    for id in 1..=3 {
        assert_eq!(router.load_of(worker(id)), Some(WorkerLoad::default()));
    }
    assert_eq!(
        router.metrics().book_errors.get("no_allowed_workers"),
        Some(&1)
    );
}

#[test]
fn book_on_refuses_a_worker_outside_the_filter() {
    let router = kv_router();
    let request = request("p", Role::Aggregated, tokens(8, 2))
        .with_allowed_workers(CandidateFilter::new([2]));
    assert!(matches!(
        router.book_on(&request, worker(1), None),
        Err(BookError::WorkerNotAllowed { .. })
    ));
    assert_eq!(router.load_of(worker(1)), Some(WorkerLoad::default()));
    assert_eq!(
        router.book_on(&request, worker(2), None).map(|b| b.worker),
        Ok(worker(2))
    );
}

#[test]
fn blind_modes_choose_among_allowed_workers() {
    for mode in [
        RouterMode::RoundRobin,
        RouterMode::Random,
        RouterMode::LeastLoaded,
    ] {
        let router = router_in(mode);
        for n in 0..6 {
            let request = request(&format!("r{n}"), Role::Aggregated, tokens(8, n))
                .with_allowed_workers(CandidateFilter::new([2]));
            assert_eq!(
                router.book(&request).map(|b| b.worker),
                Ok(worker(2)),
                "{mode:?}"
            );
        }
    }
}

#[test]
fn a_policy_choosing_outside_the_filter_books_nothing() {
    let router = Router::new(
        setup(
            RouterMode::Kv,
            vec![(
                Role::Aggregated,
                role_policies("fixed", Fixed(worker(1), None), vec![]),
            )],
        ),
        RouterOptions::default(),
    );
    for id in 1..=3 {
        assert!(router.register_worker(plain(id, Role::Aggregated)).is_ok());
    }
    let request = request("o", Role::Aggregated, tokens(8, 1))
        .with_allowed_workers(CandidateFilter::new([2]));
    assert_eq!(
        router.book(&request),
        Err(BookError::WorkerNotAllowed {
            worker: worker(1),
            allowed: vec![2],
        })
    );
    for id in 1..=3 {
        assert_eq!(router.load_of(worker(id)), Some(WorkerLoad::default()));
    }
    assert_eq!(
        router.metrics().book_errors.get("worker_not_allowed"),
        Some(&1)
    );
}
