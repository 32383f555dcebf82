//! End to end: the configurations of "Write a KV Hint Plugin" start in a build that links the
//! built-in catalog and `harness_prefetch`, book requests against a small cluster fed by KV
//! events, and send exactly the expected hint envelopes.

mod support;

use dynamo_kv_router::kv::EngineBlockHash;
use dynamo_kv_router::plugins::KvCopy;
use dynamo_kv_router::router::{HintOrigin, Role, Router, WorkerCapabilities, WorkerInfo};
use dynamo_router_catalog as _;
use harness_prefetch as _;
use support::*;

/// The page's YAML, exactly as written.
const PAGE: &str = "\
worker_selection:
  decode:
    type: dynamo-default-cost-fn
    hints:
      - type: harness_prefetch
        parameters:
          max_blocks: 64
  prefill:
    type: dynamo-default-cost-fn
    hints: []
";

/// The page's YAML with kvcr committing copies on decode (so `kv_fetch` must be listed to send
/// them) and the bare default cost on prefill.
const KVCR_PAGE: &str = "\
worker_selection:
  decode:
    type: kvcr
    parameters:
      shared_cache_multiplier: 0.5
    hints:
      - type: kv_fetch
      - type: harness_prefetch
        parameters:
          max_blocks: 64
  prefill: dynamo-default-cost-fn
";

/// Decode workers 1 and 2 accept hints and serve KV; decode worker 3 advertises no
/// `router_hint`; prefill workers 4 and 5 accept hints and serve KV.
fn register_cluster(router: &Router, ids: &[u64]) {
    for &id in ids {
        let info = match id {
            1 | 2 => hinting(id, Role::Decode),
            3 => WorkerInfo::new(worker(id), Role::Decode, WorkerCapabilities::none()),
            _ => hinting(id, Role::Prefill),
        };
        router.register_worker(info).expect("a new worker");
    }
}

#[test]
fn the_shipped_page_configuration_is_the_pages() {
    assert_eq!(include_str!("../../examples/router-build/page.yaml"), PAGE);
}

#[test]
fn the_pages_configuration_prefetches_the_session_on_hint_workers_only() {
    let router = router("page.yaml", PAGE);
    let decode = &router.setup().roles[&Role::Decode];
    assert_eq!(decode.selection_type, "dynamo-default-cost-fn");
    let hints: Vec<_> = decode
        .hints
        .iter()
        .map(|hint| (hint.policy_type.as_str(), hint.origin))
        .collect();
    assert_eq!(hints, [("harness_prefetch", HintOrigin::Listed)]);
    assert!(router.setup().roles[&Role::Prefill].hints.is_empty());

    register_cluster(&router, &[1, 2, 3, 4, 5]);
    let chat = prompt(0, 10);
    let other = prompt(50_000, 4);
    apply(&router, &stored(1, 0, &chat, 8));
    apply(&router, &stored(3, 0, &other, 4));
    apply(&router, &stored(5, 0, &chat, 10));

    // Costs (10 blocks): w1 10 - 8 = 2, w2 10, w3 10 → w1, which lacks blocks 8 and 9. Only
    // harness_prefetch runs: the page lists no kv_fetch, though no peer could serve them anyway.
    let booking = book(
        &router,
        "req-1",
        Role::Decode,
        chat.clone(),
        Some("chat-42"),
    );
    assert_eq!(booking.worker, worker(1));
    assert_eq!(booking.committed_kv_copy, None);
    let hashes = sequence_hashes(&chat);
    assert_eq!(
        envelope(&booking).as_deref(),
        Some(
            format!(
                r#"{{"protocol_version":"0.1","message_id":"req-1","actions":[{{"action_id":"a1","action_type":"kv.prefetch","action_version":"1.0","payload":{{"block_hashes":{},"first_block":8,"session_id":"chat-42"}}}}]}}"#,
                json_list(&hashes[8..])
            )
            .as_str()
        )
    );

    // w1 now carries 32 prefill tokens and 10 blocks: w1 6 + 10 = 16, w2 4, w3 4 - 4 = 0 → w3,
    // which advertises no router_hint: no policy runs and no hint is sent.
    let booking = book(&router, "req-2", Role::Decode, other, Some("chat-42"));
    assert_eq!(booking.worker, worker(3));
    assert_eq!(booking.hint, None);
    assert_eq!(booking.stats.hint_policies_run, 0);

    // w1 4 + 10 = 14, w2 2, w3 2 + 4 = 6 → w2, which accepts hints, but the request belongs to
    // no session: harness_prefetch asks for nothing, so there is no hint.
    let booking = book(&router, "req-3", Role::Decode, prompt(90_000, 2), None);
    assert_eq!(booking.worker, worker(2));
    assert_eq!(booking.hint, None);
    assert_eq!(booking.stats.hint_policies_run, 1);

    // Prefill runs `hints: []`: w5 caches the whole prompt and gets no hint.
    let booking = book(&router, "req-1", Role::Prefill, chat, Some("chat-42"));
    assert_eq!(booking.worker, worker(5));
    assert_eq!(booking.hint, None);
    assert_eq!(booking.stats.hint_policies_run, 0);
}

#[test]
fn kvcr_on_decode_sends_the_committed_copy_then_the_prefetch() {
    let router = router("kvcr-page.yaml", KVCR_PAGE);
    let decode = &router.setup().roles[&Role::Decode];
    assert_eq!(decode.selection_type, "kvcr");
    let hints: Vec<_> = decode
        .hints
        .iter()
        .map(|hint| hint.policy_type.as_str())
        .collect();
    assert_eq!(hints, ["kv_fetch", "harness_prefetch"]);
    let prefill = &router.setup().roles[&Role::Prefill];
    assert_eq!(prefill.selection_type, "dynamo-default-cost-fn");
    assert!(prefill.hints.is_empty());

    // Load: w3 carries 3 active blocks, w1 20 (each booked while it was the cheapest).
    register_cluster(&router, &[3]);
    let warm = book(&router, "warm-3", Role::Decode, prompt(10_000, 3), None);
    assert_eq!((warm.worker, warm.hint), (worker(3), None));
    router.prefill_complete("warm-3");
    register_cluster(&router, &[1]);
    let warm = book(&router, "warm-1", Role::Decode, prompt(20_000, 20), None);
    assert_eq!((warm.worker, warm.hint), (worker(1), None));
    router.prefill_complete("warm-1");
    register_cluster(&router, &[2, 4, 5]);

    let chat = prompt(0, 10);
    apply(&router, &stored(1, 0, &chat, 8));
    apply(&router, &stored(3, 0, &chat, 4));
    apply(&router, &stored(4, 0, &chat, 6));

    // Without credit: w1 2 + 20 = 22, w2 10, w3 6 + 3 = 9 → w3. With half credit for w1's
    // blocks: w2 10 - 4 = 6, w3 10 - 4 - 2 + 3 = 7 → w2, because of the copy from w1.
    let booking = book(
        &router,
        "req-1",
        Role::Decode,
        chat.clone(),
        Some("chat-42"),
    );
    assert_eq!(booking.worker, worker(2));
    let fetched: Vec<EngineBlockHash> = (0..8).map(|index| engine_hash(1, index)).collect();
    assert_eq!(
        booking.committed_kv_copy,
        Some(KvCopy {
            source: worker(1),
            source_endpoint: endpoint(1),
            first_block: 0,
            block_hashes: fetched.clone(),
        })
    );
    let hashes = sequence_hashes(&chat);
    assert_eq!(
        envelope(&booking).as_deref(),
        Some(
            format!(
                r#"{{"protocol_version":"0.1","message_id":"req-1","actions":[{{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{{"block_hashes":{},"source_control_endpoint":"tcp://10.0.0.1:23280"}}}},{{"action_id":"a2","action_type":"kv.prefetch","action_version":"1.0","payload":{{"block_hashes":{},"first_block":0,"session_id":"chat-42"}}}}]}}"#,
                json_list(&fetched),
                json_list(&hashes),
            )
            .as_str()
        )
    );
    assert_eq!(
        (booking.stats.hint_policies_run, booking.stats.actions),
        (2, 2)
    );

    // The next turn of the session, after w2 fetched and computed the whole prompt: w2 holds
    // 10 of its 12 blocks and no peer holds more, so kv_fetch has nothing to add and the
    // prefetch is the only action, numbered a1.
    router.release("req-1");
    apply(&router, &stored(2, 0, &chat, 10));
    let turn = prompt(0, 12);
    let booking = book(
        &router,
        "req-2",
        Role::Decode,
        turn.clone(),
        Some("chat-42"),
    );
    assert_eq!(booking.worker, worker(2));
    assert_eq!(booking.committed_kv_copy, None);
    assert_eq!(
        envelope(&booking).as_deref(),
        Some(
            format!(
                r#"{{"protocol_version":"0.1","message_id":"req-2","actions":[{{"action_id":"a1","action_type":"kv.prefetch","action_version":"1.0","payload":{{"block_hashes":{},"first_block":10,"session_id":"chat-42"}}}}]}}"#,
                json_list(&sequence_hashes(&turn)[10..]),
            )
            .as_str()
        )
    );

    // A request w3 caches whole goes to w3, which advertises no router_hint: no hint, although
    // a committing policy and two hint policies are configured.
    let other = prompt(50_000, 4);
    apply(&router, &stored(3, 1, &other, 4));
    let booking = book(&router, "req-3", Role::Decode, other, Some("chat-7"));
    assert_eq!(booking.worker, worker(3));
    assert_eq!(booking.hint, None);
    assert_eq!(booking.committed_kv_copy, None);
    assert_eq!(booking.stats.hint_policies_run, 0);

    // Prefill runs the bare default cost, which has no default hints: w4 caches 6 blocks and is
    // booked without a hint, although w5 accepts hints.
    let booking = book(&router, "req-1", Role::Prefill, chat, Some("chat-42"));
    assert_eq!(booking.worker, worker(4));
    assert_eq!(booking.hint, None);
    assert_eq!(booking.stats.hint_policies_run, 0);
}
