//! Startup of a role whose `kvcr` commits KV copies: `hints: []` leaves nothing to send them and
//! fails; without a `hints` key the role runs `kv_fetch` by default, and bookings send it.

mod support;

use dynamo_kv_router::plugins::Commitments;
use dynamo_kv_router::router::{HintOrigin, Role};
use dynamo_router_catalog as _;
use harness_prefetch as _;
use support::*;

const COMMITTING_WITHOUT_HINTS: &str = "\
worker_selection:
  decode:
    type: kvcr
    parameters:
      shared_cache_multiplier: 0.5
    hints: []
";

const COMMITTING_WITH_DEFAULT_HINTS: &str = "\
worker_selection:
  decode:
    type: kvcr
    parameters:
      shared_cache_multiplier: 0.5
";

#[test]
fn committing_kvcr_with_no_hints_fails_startup() {
    let Err(error) = load("router.yaml", COMMITTING_WITHOUT_HINTS) else {
        panic!("nothing would send the committed copies, yet the configuration loaded");
    };
    assert_eq!(error.role, Some(Role::Decode));
    assert_eq!(
        error.to_string(),
        "router.yaml:6:12: worker_selection.decode.hints: worker-selection policy `kvcr`, as \
         configured, commits KV copies, but the role runs no hint policy that sends them; add \
         exactly one to `hints` (linked: `kv_fetch`), or configure `kvcr` not to commit copies"
    );
    let rendered = error.render(COMMITTING_WITHOUT_HINTS);
    assert!(
        rendered.ends_with("6 |     hints: []\n  |            ^\n  = in role `decode`\n"),
        "{rendered}"
    );

    // With the multiplier at 0 kvcr commits nothing, and `hints: []` is fine.
    let setup = load("router.yaml", &COMMITTING_WITHOUT_HINTS.replace("0.5", "0"))
        .expect("nothing is committed");
    let decode = &setup.roles[&Role::Decode];
    assert_eq!(decode.selection.commitments, Commitments::NONE);
    assert!(decode.hints.is_empty());
}

#[test]
fn committing_kvcr_without_a_hints_key_runs_kv_fetch_by_default() {
    let router = router("router.yaml", COMMITTING_WITH_DEFAULT_HINTS);
    let decode = &router.setup().roles[&Role::Decode];
    assert_eq!(decode.selection.commitments, Commitments::KV_COPY);
    let hints: Vec<_> = decode
        .hints
        .iter()
        .map(|hint| {
            (
                hint.policy_type.as_str(),
                hint.name.as_deref(),
                hint.origin,
                hint.constructed.commitments,
            )
        })
        .collect();
    // harness_prefetch is linked too, but runs only where listed.
    assert_eq!(
        hints,
        [("kv_fetch", None, HintOrigin::Default, Commitments::KV_COPY)]
    );

    // w1 holds 8 of the 10 blocks but carries 20 active blocks; w2 is idle and empty.
    router
        .register_worker(hinting(1, Role::Decode))
        .expect("a new worker");
    let warm = book(&router, "warm-1", Role::Decode, prompt(20_000, 20), None);
    assert_eq!(warm.worker, worker(1));
    router.prefill_complete("warm-1");
    router
        .register_worker(hinting(2, Role::Decode))
        .expect("a new worker");
    let chat = prompt(0, 10);
    apply(&router, &stored(1, 0, &chat, 8));

    // Without credit: w1 2 + 20 = 22, w2 10 → w2 either way, so kvcr commits nothing and the
    // default kv_fetch sends a best-effort fetch of w1's 8 blocks.
    let booking = book(&router, "req-1", Role::Decode, chat.clone(), None);
    assert_eq!(booking.worker, worker(2));
    assert_eq!(booking.committed_kv_copy, None);
    let fetched: Vec<dynamo_kv_router::kv::EngineBlockHash> =
        (0..8).map(|index| engine_hash(1, index)).collect();
    let expected = format!(
        r#"{{"protocol_version":"0.1","message_id":"req-1","actions":[{{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{{"block_hashes":{},"source_control_endpoint":"tcp://10.0.0.1:23280"}}}}]}}"#,
        json_list(&fetched)
    );
    assert_eq!(envelope(&booking).as_deref(), Some(expected.as_str()));
    router.release("req-1");

    // w3 caches 4 blocks and carries 3 (a prompt it cached whole): without credit w2 10,
    // w3 6 + 3 = 9 → w3; with credit w2 6, w3 7 → w2, so kvcr commits w1's copy and kv_fetch
    // sends exactly that.
    router
        .register_worker(hinting(3, Role::Decode))
        .expect("a new worker");
    let cached = prompt(10_000, 3);
    apply(&router, &stored(3, 0, &cached, 3));
    let warm = book(&router, "warm-3", Role::Decode, cached, None);
    assert_eq!((warm.worker, warm.hint), (worker(3), None));
    apply(&router, &stored(3, 1, &chat, 4));
    let booking = book(&router, "req-2", Role::Decode, chat, None);
    assert_eq!(booking.worker, worker(2));
    let copy = booking
        .committed_kv_copy
        .as_ref()
        .expect("the credit changed the choice");
    assert_eq!(copy.block_hashes, fetched);
    let expected = expected.replace("req-1", "req-2");
    assert_eq!(envelope(&booking).as_deref(), Some(expected.as_str()));
}
