//! The booking pipeline's rules, one test each.

mod router_fixtures;

use dynamo_kv_router::kv::{EngineBlockHash, sequence_hashes_for_tokens};
use dynamo_kv_router::plugins::KvCopy;
use dynamo_kv_router::router::{BookError, MAX_HINT_ACTIONS, Role, Router, RouterMode};
use dynamo_kv_router::wire::PROTOCOL_VERSION;
use router_fixtures::*;
use std::sync::atomic::Ordering;

fn tags(booking: &dynamo_kv_router::router::Booking) -> Vec<(String, String)> {
    booking
        .hint
        .iter()
        .flat_map(|hint| &hint.actions)
        .map(|a| {
            let tag = a
                .payload
                .get("tag")
                .and_then(|t| t.as_str())
                .unwrap_or(&a.action_type);
            let i = a
                .payload
                .get("i")
                .map(|i| i.to_string())
                .unwrap_or_default();
            (a.action_id.clone(), format!("{tag}{i}"))
        })
        .collect()
}

fn agg_router(hints: Vec<dynamo_kv_router::router::RoleHint>) -> Router {
    let router = router(
        RouterMode::Kv,
        vec![(
            Role::Aggregated,
            role_policies("longest", LongestPrefix, hints),
        )],
    );
    for id in 1..=3 {
        assert!(
            router
                .register_worker(hinting(id, Role::Aggregated))
                .is_ok()
        );
    }
    router
}

#[test]
fn actions_are_numbered_a1_onwards_in_policy_order() {
    let router = agg_router(vec![
        hint("x", Emit::new("x", 2)),
        hint("y", Emit::new("y", 3)),
    ]);
    let booking = router.book(&request("req-7", Role::Aggregated, tokens(40, 1)));
    let booking = booking.expect("booked");
    let hint = booking.hint.clone().expect("a hint");
    assert_eq!(hint.protocol_version, PROTOCOL_VERSION);
    assert_eq!(hint.message_id, "req-7");
    let expected: Vec<(String, String)> = ["x0", "x1", "y0", "y1", "y2"]
        .iter()
        .enumerate()
        .map(|(n, tag)| (format!("a{}", n + 1), tag.to_string()))
        .collect();
    assert_eq!(tags(&booking), expected);
    assert_eq!(booking.stats.hint_policies_run, 2);
    assert_eq!(booking.stats.actions, 5);
    assert_eq!(booking.stats.blocks, 10);
    let metrics = router.metrics();
    assert_eq!(
        (metrics.bookings, metrics.hints_sent, metrics.hint_actions),
        (1, 1, 5)
    );
}

#[test]
fn actions_past_32_are_dropped_from_the_end_and_counted() {
    let router = agg_router(vec![
        hint("x", Emit::new("x", 20)),
        hint("y", Emit::new("y", 20)),
        hint("z", Emit::new("z", 1)),
    ]);
    let booking = router
        .book(&request("r", Role::Aggregated, tokens(8, 1)))
        .expect("booked");
    let tags = tags(&booking);
    assert_eq!(tags.len(), MAX_HINT_ACTIONS);
    assert_eq!(tags[31], ("a32".to_owned(), "y11".to_owned()));
    assert_eq!(booking.stats.actions_dropped, 9);
    assert_eq!(router.metrics().hint_actions_dropped, 9);
}

#[test]
fn the_committed_copy_action_survives_the_cap() {
    let copy = KvCopy {
        source: worker(2),
        source_endpoint: "tcp://10.0.0.2:23280".into(),
        first_block: 0,
        block_hashes: [11, 22, 33].map(EngineBlockHash).to_vec(),
    };
    let router = router(
        RouterMode::Kv,
        vec![(
            Role::Decode,
            role_policies(
                "fixed",
                Fixed(worker(1), Some(copy.clone())),
                vec![hint("many", Emit::new("m", 40)), hint("copy", CopySender)],
            ),
        )],
    );
    for id in 1..=2 {
        assert!(router.register_worker(hinting(id, Role::Decode)).is_ok());
    }
    let booking = router
        .book(&request("r", Role::Decode, tokens(8, 1)))
        .expect("booked");
    assert_eq!(booking.committed_kv_copy, Some(copy));
    let hint = booking.hint.expect("hint");
    assert_eq!(hint.actions.len(), 32);
    let last = &hint.actions[31];
    assert_eq!(
        (last.action_id.as_str(), last.action_type.as_str()),
        ("a32", "kv.fetch")
    );
    assert_eq!(
        last.payload["block_hashes"],
        serde_json::json!([11, 22, 33])
    );
    assert_eq!(hint.actions[30].payload["i"], serde_json::json!(30));
    assert_eq!(booking.stats.actions_dropped, 9);
}

#[test]
fn an_erroring_and_a_panicking_policy_drop_only_their_own_actions() {
    let router = agg_router(vec![
        hint("before", Emit::new("b", 2)),
        hint("erroring", BrokenHint { panic: false }),
        hint("panicking", BrokenHint { panic: true }),
        hint("after", Emit::new("a", 1)),
    ]);
    let booking = router
        .book(&request("r", Role::Aggregated, tokens(8, 1)))
        .expect("booked");
    assert_eq!(
        tags(&booking),
        vec![
            ("a1".to_owned(), "b0".to_owned()),
            ("a2".to_owned(), "b1".to_owned()),
            ("a3".to_owned(), "a0".to_owned())
        ]
    );
    assert_eq!(booking.stats.policy_failures, 2);
    assert_eq!(booking.stats.hint_policies_run, 4);
    let failures = router.metrics().hint_policy_failures;
    let by_name = |name: &str| {
        failures
            .iter()
            .find(|f| f.name == name)
            .map(|f| (f.errors, f.panics))
    };
    assert_eq!(by_name("erroring"), Some((1, 0)));
    assert_eq!(by_name("panicking"), Some((0, 1)));
    assert_eq!(by_name("before"), Some((0, 0)));
    assert!(router.prometheus_text().contains(
        "kv_router_hint_policy_failures_total{role=\"aggregated\",policy_type=\"panicking\",name=\"panicking\",kind=\"panic\"} 1"
    ));
}

/// Returns one object payload and one that is not an object.
struct NonObjectPayload;

impl dynamo_kv_router::plugins::HintPolicy for NonObjectPayload {
    fn build_hints(
        &self,
        _context: &dynamo_kv_router::plugins::HintContext<'_>,
    ) -> Result<Vec<dynamo_kv_router::plugins::HintAction>, dynamo_kv_router::plugins::PolicyError>
    {
        use dynamo_kv_router::plugins::HintAction;
        Ok(vec![
            HintAction::new("test.ok", "1.0", serde_json::json!({})),
            HintAction::new("test.list", "1.0", serde_json::json!([1, 2])),
        ])
    }
}

#[test]
fn a_non_object_payload_is_a_policy_error() {
    let router = agg_router(vec![
        hint("before", Emit::new("b", 1)),
        hint("lists", NonObjectPayload),
        hint("after", Emit::new("a", 1)),
    ]);
    let booking = router
        .book(&request("r", Role::Aggregated, tokens(8, 1)))
        .expect("booked");
    assert_eq!(
        tags(&booking),
        vec![
            ("a1".to_owned(), "b0".to_owned()),
            ("a2".to_owned(), "a0".to_owned())
        ]
    );
    assert_eq!(booking.stats.policy_failures, 1);
    let failures = router.metrics().hint_policy_failures;
    let lists = failures
        .iter()
        .find(|f| f.name == "lists")
        .map(|f| f.errors);
    assert_eq!(lists, Some(1));
}

#[test]
fn no_hint_policy_runs_without_router_hint() {
    let emit = Emit::new("x", 3);
    let runs = emit.runs.clone();
    let router = router(
        RouterMode::Kv,
        vec![(
            Role::Aggregated,
            role_policies("longest", LongestPrefix, vec![hint("x", emit)]),
        )],
    );
    assert!(router.register_worker(plain(1, Role::Aggregated)).is_ok());
    let booking = router
        .book(&request("r", Role::Aggregated, tokens(8, 1)))
        .expect("booked");
    assert_eq!(booking.hint, None);
    assert_eq!(booking.stats.hint_policies_run, 0);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let metrics = router.metrics();
    assert_eq!(
        (metrics.hints_skipped_no_router_hint, metrics.hints_sent),
        (1, 0)
    );
}

#[test]
fn no_actions_means_no_hint() {
    let router = agg_router(vec![hint("none", Emit::new("x", 0))]);
    let booking = router
        .book(&request("r", Role::Aggregated, tokens(8, 1)))
        .expect("booked");
    assert_eq!(booking.hint, None);
    assert_eq!(booking.stats.hint_policies_run, 1);
    assert_eq!(router.metrics().hints_sent, 0);
}

#[test]
fn non_kv_modes_run_no_hints_and_follow_their_rule() {
    for mode in [
        RouterMode::RoundRobin,
        RouterMode::Random,
        RouterMode::LeastLoaded,
    ] {
        let emit = Emit::new("x", 3);
        let runs = emit.runs.clone();
        let router = router(
            mode,
            vec![(
                Role::Decode,
                role_policies("longest", LongestPrefix, vec![hint("x", emit)]),
            )],
        );
        for id in [3, 1, 2] {
            assert!(router.register_worker(hinting(id, Role::Decode)).is_ok());
        }
        let chosen: Vec<u64> = (0..6)
            .map(|n| {
                let booking = router
                    .book(&request(&format!("r{n}"), Role::Decode, tokens(16, n)))
                    .expect("booked");
                assert_eq!(booking.hint, None, "{mode}");
                assert_eq!(booking.committed_kv_copy, None);
                booking.worker.worker_id
            })
            .collect();
        assert_eq!(runs.load(Ordering::SeqCst), 0, "{mode}");
        match mode {
            RouterMode::RoundRobin => assert_eq!(chosen, [1, 2, 3, 1, 2, 3]),
            RouterMode::LeastLoaded => assert_eq!(chosen, [1, 2, 3, 1, 2, 3]),
            _ => {
                let again = router_with_same_seed(mode);
                assert_eq!(chosen, again);
            }
        }
        assert_eq!(router.metrics().hints_skipped_no_router_hint, 0);
    }
}

/// Random mode spreads bookings uniformly: over 3,000 bookings on 3 workers each worker's
/// count is Binomial(3000, 1/3) (mean 1,000, σ = √(3000 · 1/3 · 2/3) ≈ 25.8), and a booking
/// repeats the previous one's worker with probability 1/3 (round robin never repeats; a stuck
/// picker always does). Both must fall within 5σ, which a uniform picker misses with
/// probability below 10⁻⁶.
#[test]
fn random_mode_spreads_bookings_uniformly() {
    const BOOKINGS: usize = 3_000;
    let router = router(RouterMode::Random, vec![]);
    for id in [3, 1, 2] {
        assert!(router.register_worker(hinting(id, Role::Decode)).is_ok());
    }
    let chosen: Vec<u64> = (0..BOOKINGS)
        .map(|n| {
            let id = format!("r{n}");
            let booking = router
                .book(&request(&id, Role::Decode, tokens(16, n as u32)))
                .expect("booked");
            router.release(&id);
            booking.worker.worker_id
        })
        .collect();
    let within_5_sigma = |count: usize, trials: usize| {
        let (n, p) = (trials as f64, 1.0 / 3.0);
        let sigma = (n * p * (1.0 - p)).sqrt();
        (count as f64 - n * p).abs() <= 5.0 * sigma
    };
    for worker in [1, 2, 3] {
        let count = chosen.iter().filter(|w| **w == worker).count();
        assert!(
            within_5_sigma(count, BOOKINGS),
            "worker {worker}: {count} of {BOOKINGS}"
        );
    }
    let repeats = chosen.windows(2).filter(|pair| pair[0] == pair[1]).count();
    assert!(within_5_sigma(repeats, BOOKINGS - 1), "{repeats} repeats");
}

fn router_with_same_seed(mode: RouterMode) -> Vec<u64> {
    let router = router(mode, vec![]);
    for id in [3, 1, 2] {
        assert!(router.register_worker(hinting(id, Role::Decode)).is_ok());
    }
    (0..6)
        .map(|n| {
            router
                .book(&request(&format!("r{n}"), Role::Decode, tokens(16, n)))
                .map(|b| b.worker.worker_id)
                .unwrap_or(0)
        })
        .collect()
}

#[test]
fn least_loaded_prefers_fewer_active_blocks() {
    let router = router(RouterMode::LeastLoaded, vec![]);
    for id in 1..=2 {
        assert!(router.register_worker(plain(id, Role::Decode)).is_ok());
    }
    let big = router
        .book(&request("big", Role::Decode, tokens(400, 0)))
        .expect("booked");
    assert_eq!(big.worker, worker(1));
    for n in 0..3 {
        let small = router
            .book(&request(&format!("s{n}"), Role::Decode, tokens(4, n)))
            .expect("booked");
        assert_eq!(small.worker, worker(2));
    }
    router.release("big");
    let next = router
        .book(&request("n", Role::Decode, tokens(4, 9)))
        .expect("booked");
    assert_eq!(next.worker, worker(1));
}

#[test]
fn selection_errors_and_panics_are_book_errors_and_reserve_nothing() {
    for panic in [false, true] {
        let router = router(
            RouterMode::Kv,
            vec![(
                Role::Prefill,
                role_policies("broken", BrokenSelection { panic }, vec![]),
            )],
        );
        assert!(router.register_worker(hinting(1, Role::Prefill)).is_ok());
        let error = router
            .book(&request("r", Role::Prefill, tokens(8, 0)))
            .err();
        let reason = if panic {
            "selection_panicked"
        } else {
            "selection_failed"
        };
        assert_eq!(error.as_ref().map(BookError::reason), Some(reason));
        let metrics = router.metrics();
        assert_eq!(metrics.book_errors.get(reason), Some(&1));
        assert_eq!((metrics.bookings, metrics.active_bookings), (0, 0));
        assert!(
            router
                .workers()
                .iter()
                .all(|(_, load)| load.active_requests == 0)
        );
    }
}

#[test]
fn a_selection_naming_a_non_candidate_is_a_book_error() {
    // Worker 9 is known to the index only through events; worker 2 serves another role.
    let router = router(
        RouterMode::Kv,
        vec![
            (
                Role::Decode,
                role_policies("fixed", Fixed(worker(9), None), vec![]),
            ),
            (
                Role::Prefill,
                role_policies("fixed", Fixed(worker(2), None), vec![]),
            ),
        ],
    );
    assert!(router.register_worker(hinting(1, Role::Decode)).is_ok());
    assert!(router.register_worker(hinting(2, Role::Decode)).is_ok());
    assert!(router.register_worker(hinting(3, Role::Prefill)).is_ok());
    let prompt = tokens(8, 0);
    let _ = router.apply_event(&stored(worker(9), 0, &prompt, 2));
    let error = router
        .book(&request("r", Role::Decode, prompt.clone()))
        .err();
    assert!(matches!(error, Some(BookError::NotACandidate { worker, .. }) if worker == worker_9()));
    let error = router.book(&request("r", Role::Prefill, prompt)).err();
    assert!(matches!(error, Some(BookError::NotACandidate { .. })));
    assert_eq!(
        router.metrics().book_errors.get("not_a_candidate"),
        Some(&2)
    );
}

fn worker_9() -> dynamo_kv_router::router::WorkerId {
    worker(9)
}

#[test]
fn missing_role_config_and_missing_workers_are_book_errors() {
    let router = router(
        RouterMode::Kv,
        vec![(
            Role::Decode,
            role_policies("longest", LongestPrefix, vec![]),
        )],
    );
    assert_eq!(
        router
            .book(&request("r", Role::Prefill, tokens(8, 0)))
            .err(),
        Some(BookError::NoRoleConfig {
            role: Role::Prefill
        })
    );
    assert_eq!(
        router.book(&request("r", Role::Decode, tokens(8, 0))).err(),
        Some(BookError::NoWorkers { role: Role::Decode })
    );
    assert!(router.register_worker(hinting(1, Role::Prefill)).is_ok());
    assert!(
        router
            .book(&request("r", Role::Decode, tokens(8, 0)))
            .is_err()
    );
}

#[test]
fn only_registered_workers_are_candidates_and_overlaps_come_from_events() {
    let router = agg_router(vec![hint("fetch", CopySender)]);
    let prompt = tokens(40, 5); // 10 blocks of 4
    // Worker 2 caches 6 blocks, worker 3 caches 3, unregistered worker 8 caches all 10.
    assert_eq!(
        router.apply_event(&stored(worker(2), 0, &prompt, 6)),
        dynamo_kv_router::kv::EventOutcome::Applied
    );
    let _ = router.apply_event(&stored(worker(3), 0, &prompt, 3));
    let _ = router.apply_event(&stored(worker(8), 0, &prompt, 10));
    let booking = router
        .book(&request("r", Role::Aggregated, prompt.clone()))
        .expect("booked");
    assert_eq!(booking.worker, worker(2));
    assert_eq!(booking.stats.cached_blocks, 6);
    assert_eq!(booking.stats.blocks, 10);
    // The booked worker has the longest prefix: no fetch.
    assert_eq!(booking.hint, None);

    // Now book on worker 3 by deregistering 2... instead, a fixed choice shows the fetch.
    let router = router_fixed_on(worker(3));
    let _ = router.apply_event(&stored(worker(2), 0, &prompt, 6));
    let _ = router.apply_event(&stored(worker(3), 0, &prompt, 3));
    let booking = router
        .book(&request("r", Role::Aggregated, prompt.clone()))
        .expect("booked");
    let hint = booking.hint.expect("fetch hint");
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    // Root-aligned: the source's engine hashes from block 0 to the end of its prefix.
    let expected: Vec<EngineBlockHash> = hashes[..6].iter().map(|h| engine_of(*h)).collect();
    assert_eq!(
        hint.actions[0].payload["block_hashes"],
        serde_json::json!(expected)
    );
    assert_eq!(
        hint.actions[0].payload["source_control_endpoint"],
        serde_json::json!("tcp://10.0.0.2:23280")
    );
}

fn router_fixed_on(id: dynamo_kv_router::router::WorkerId) -> Router {
    let router = router(
        RouterMode::Kv,
        vec![(
            Role::Aggregated,
            role_policies("fixed", Fixed(id, None), vec![hint("fetch", CopySender)]),
        )],
    );
    for n in 1..=3 {
        assert!(router.register_worker(hinting(n, Role::Aggregated)).is_ok());
    }
    router
}

#[test]
fn deregistering_a_worker_removes_its_blocks() {
    let router = agg_router(vec![]);
    let prompt = tokens(40, 5);
    let _ = router.apply_event(&stored(worker(2), 0, &prompt, 6));
    let _ = router.apply_event(&stored(worker(3), 0, &prompt, 4));
    assert_eq!(router.metrics().index_memberships, 10);
    assert!(router.deregister_worker(worker(2)).is_ok());
    assert_eq!(router.metrics().index_memberships, 4);
    assert!(router.deregister_worker(worker(2)).is_err());
    assert!(router.register_worker(hinting(2, Role::Aggregated)).is_ok());
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    assert_eq!(router.cached_prefix(worker(2), &hashes), 0);
    assert_eq!(router.cached_prefix(worker(3), &hashes), 4);
}

#[test]
fn registering_twice_is_an_error() {
    let router = agg_router(vec![]);
    assert!(
        router
            .register_worker(hinting(1, Role::Aggregated))
            .is_err()
    );
}

#[test]
fn precomputed_block_prompts_use_their_hashes() {
    let router = agg_router(vec![]);
    let prompt = tokens(40, 5);
    let hashes = sequence_hashes_for_tokens(&prompt, BLOCK_SIZE);
    let _ = router.apply_event(&stored(worker(3), 0, &prompt, 5));
    let request = dynamo_kv_router::router::RouteRequest::new(
        "r",
        Role::Aggregated,
        dynamo_kv_router::router::Prompt::Blocks {
            sequence_hashes: hashes,
            prompt_tokens: 40,
        },
    );
    let booking = router.book(&request).expect("booked");
    assert_eq!(
        (booking.worker, booking.stats.cached_blocks),
        (worker(3), 5)
    );
}

#[test]
fn router_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Router>();
}
