//! Shadow policies: evaluated off the booking, on the request and candidates the live policies
//! saw, under the configuration of the booking's time; their reports add up, their failures
//! never reach the live booking, and a full queue drops and counts.

mod router_fixtures;

use dynamo_kv_router::router::{
    Role, RolePolicies, Router, RouterMode, RouterOptions, RouterSetup, SHADOW_QUEUE_CASES,
    ShadowPolicies,
};
use router_fixtures::*;

/// Live: the longest cached prefix with a `kv.fetch` copy sender. Shadows as given.
fn setup_with(shadows: Vec<ShadowPolicies>) -> RouterSetup {
    let mut live = role_policies("longest", LongestPrefix, vec![hint("fetch", CopySender)]);
    live.shadows = shadows;
    setup(RouterMode::Kv, vec![(Role::Decode, live)])
}

fn shadow(name: &str, policies: RolePolicies) -> ShadowPolicies {
    ShadowPolicies {
        name: name.to_owned(),
        policies,
    }
}

/// Books on worker 2 and sends one `test.emit` action.
fn fixed_on_two() -> ShadowPolicies {
    shadow(
        "fixed-2",
        role_policies(
            "fixed",
            Fixed(worker(2), None),
            vec![hint("emit", Emit::new("s", 1))],
        ),
    )
}

/// Two hinting decode workers; worker 1 caches the first 8 blocks of `prompt`.
fn router_with(shadows: Vec<ShadowPolicies>, prompt: &[u32]) -> Router {
    let router = Router::new(setup_with(shadows), RouterOptions::default());
    for id in 1..=2 {
        router
            .register_worker(hinting(id, Role::Decode))
            .expect("registers");
    }
    router.apply_event(&stored(worker(1), 0, prompt, 8));
    router
}

#[test]
fn a_shadow_reports_what_it_would_have_done_beside_the_live_choice() {
    let prompt = tokens(32, 1);
    let router = router_with(vec![fixed_on_two()], &prompt);
    for n in 0..3 {
        let booking = router
            .book(&request(&format!("r{n}"), Role::Decode, prompt.clone()))
            .expect("books");
        assert_eq!(booking.worker, worker(1), "the live policy books");
    }
    assert_eq!(router.run_pending_shadows(None), 3);
    assert_eq!(router.run_pending_shadows(None), 0, "each booking once");
    let reports = router.shadow_reports();
    assert_eq!(reports.len(), 1);
    let report = &reports[0];
    assert_eq!(
        (
            report.role.as_str(),
            report.name.as_str(),
            report.selection_type.as_str()
        ),
        ("decode", "fixed-2", "fixed")
    );
    assert_eq!(
        (report.decisions, report.agreed, report.failures),
        (3, 0, 0)
    );
    assert_eq!(report.prompt_blocks, 24);
    assert_eq!(
        (report.live_cached_blocks, report.shadow_cached_blocks),
        (24, 0)
    );
    assert_eq!(
        (report.live_hit_rate(), report.shadow_hit_rate()),
        (1.0, 0.0)
    );
    assert_eq!((report.shadow_hints, report.shadow_hint_actions), (3, 3));
    assert_eq!(report.shadow_fetch_blocks, 0);
    // The live hint: worker 1 holds the whole prompt, so there is nothing to fetch.
    assert_eq!(report.live_fetch_blocks, 0);
    assert!(report.live_imbalance >= 1.0 && report.shadow_imbalance >= 1.0);
    let text = router.prometheus_text();
    assert!(
        text.contains(
            "kv_router_shadow_decisions_total{role=\"decode\",shadow=\"fixed-2\",policy_type=\"fixed\"} 3\n"
        ),
        "{text}"
    );
    assert!(text.contains("kv_router_shadow_cases_dropped_total 0\n"));
}

#[test]
fn a_shadow_that_fetches_counts_the_blocks_it_would_have_named() {
    let prompt = tokens(32, 2);
    // The shadow books on worker 2, which caches nothing; its copy sender fetches worker 1's 8.
    let fetching = shadow(
        "fetch-on-2",
        role_policies(
            "fixed",
            Fixed(worker(2), None),
            vec![hint("fetch", CopySender)],
        ),
    );
    let router = router_with(vec![fetching], &prompt);
    router
        .book(&request("r", Role::Decode, prompt.clone()))
        .expect("books");
    router.run_pending_shadows(None);
    let report = &router.shadow_reports()[0];
    assert_eq!(report.shadow_fetch_blocks, 8);
    assert_eq!(report.shadow_hint_actions, 1);
}

#[test]
fn a_failing_shadow_is_counted_and_the_live_booking_is_untouched() {
    let prompt = tokens(32, 3);
    let broken = shadow(
        "broken",
        role_policies("broken", BrokenSelection { panic: true }, Vec::new()),
    );
    let router = router_with(vec![broken, fixed_on_two()], &prompt);
    let booking = router
        .book(&request("r", Role::Decode, prompt.clone()))
        .expect("the live booking does not see the shadow");
    assert_eq!(booking.worker, worker(1));
    router.run_pending_shadows(None);
    let reports = router.shadow_reports();
    let by_name: Vec<(&str, u64, u64)> = reports
        .iter()
        .map(|r| (r.name.as_str(), r.decisions, r.failures))
        .collect();
    assert_eq!(by_name, [("broken", 0, 1), ("fixed-2", 1, 0)]);
    // A shadow's failures are not the live hint policies'.
    assert!(
        router
            .metrics()
            .hint_policy_failures
            .iter()
            .all(|f| f.errors + f.panics == 0)
    );
}

#[test]
fn without_shadows_nothing_is_queued() {
    let prompt = tokens(32, 4);
    let router = router_with(Vec::new(), &prompt);
    router
        .book(&request("r", Role::Decode, prompt.clone()))
        .expect("books");
    assert_eq!(router.run_pending_shadows(None), 0);
    assert!(router.shadow_reports().is_empty());
    assert!(
        !router
            .prometheus_text()
            .contains("kv_router_shadow_decisions_total")
    );
}

#[test]
fn a_full_queue_drops_and_counts_without_slowing_the_booking() {
    let prompt = tokens(32, 5);
    let router = router_with(vec![fixed_on_two()], &prompt);
    let extra = 10;
    for n in 0..SHADOW_QUEUE_CASES + extra {
        let id = format!("r{n}");
        router
            .book(&request(&id, Role::Decode, prompt.clone()))
            .expect("books");
        router.release(&id);
    }
    assert_eq!(router.shadow_cases_dropped(), extra as u64);
    assert_eq!(router.run_pending_shadows(None), SHADOW_QUEUE_CASES);
    assert_eq!(
        router.shadow_reports()[0].decisions,
        SHADOW_QUEUE_CASES as u64
    );
}

#[test]
fn a_booking_is_shadowed_by_the_configuration_it_was_booked_under() {
    let prompt = tokens(32, 6);
    let router = router_with(vec![fixed_on_two()], &prompt);
    router
        .book(&request("before", Role::Decode, prompt.clone()))
        .expect("books");
    router
        .replace_policies(setup_with(Vec::new()))
        .expect("same block size and roles");
    router
        .book(&request("after", Role::Decode, prompt.clone()))
        .expect("books");
    assert_eq!(
        router.run_pending_shadows(None),
        1,
        "only the first is shadowed"
    );
    assert_eq!(router.shadow_reports()[0].decisions, 1);
}

#[test]
fn an_evaluator_thread_waits_for_bookings() {
    let prompt = tokens(32, 7);
    let router = std::sync::Arc::new(router_with(vec![fixed_on_two()], &prompt));
    let evaluator = {
        let router = std::sync::Arc::clone(&router);
        std::thread::spawn(move || {
            let mut seen = 0;
            while seen < 5 {
                seen += router.run_pending_shadows(Some(std::time::Duration::from_millis(20)));
            }
            seen
        })
    };
    for n in 0..5 {
        router
            .book(&request(&format!("r{n}"), Role::Decode, prompt.clone()))
            .expect("books");
    }
    assert_eq!(evaluator.join().expect("the evaluator ran"), 5);
    assert_eq!(router.shadow_reports()[0].decisions, 5);
}

#[test]
fn a_paced_evaluator_takes_a_batch_at_a_time() {
    let prompt = tokens(32, 8);
    let router = router_with(vec![fixed_on_two()], &prompt);
    for n in 0..40 {
        router
            .book(&request(&format!("r{n}"), Role::Decode, prompt.clone()))
            .expect("books");
    }
    let wait = std::time::Duration::from_millis(10);
    assert_eq!(router.run_shadows_paced(wait, 1.0), 32);
    assert_eq!(router.run_shadows_paced(wait, 0.5), 8);
    assert_eq!(
        router.run_shadows_paced(wait, 0.5),
        0,
        "nothing left: it waited and returned"
    );
    assert_eq!(router.shadow_reports()[0].decisions, 40);
}
