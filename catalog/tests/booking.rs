//! The built-ins inside a real router: kvcr commits a copy that kv_fetch sends, and kv_fetch's
//! best effort obeys `min_additional_blocks`, with events feeding the index.

use dynamo_kv_router::kv::{EngineBlockHash, KvCacheEventData, RouterEvent, block_hashes};
use dynamo_kv_router::plugins::{KvCopy, Partition, PolicyParameters, PolicyRegistry};
use dynamo_kv_router::router::RouterOptions;
use dynamo_kv_router::router::{
    HintOrigin, Prompt, Role, RoleHint, RolePolicies, RouteRequest, Router, RouterMode,
    RouterSetup, WorkerCapabilities, WorkerId, WorkerInfo,
};
use dynamo_router_catalog as _;
use serde_json::{Value, json};
use std::collections::BTreeMap;

const BLOCK_SIZE: u32 = 4;

fn worker(id: u64) -> WorkerId {
    WorkerId::new(id, 0)
}

fn endpoint(id: u64) -> String {
    format!("tcp://10.0.0.{id}:23280")
}

fn hinting(id: u64) -> WorkerInfo {
    WorkerInfo::new(
        worker(id),
        Role::Decode,
        WorkerCapabilities::hint_source(endpoint(id)),
    )
}

fn plain(id: u64) -> WorkerInfo {
    WorkerInfo::new(worker(id), Role::Decode, WorkerCapabilities::none())
}

/// `blocks` full blocks of tokens starting at `first_token`.
fn prompt(first_token: u32, blocks: u32) -> Vec<u32> {
    (first_token..first_token + blocks * BLOCK_SIZE).collect()
}

/// The engine hash worker `id` reports for block `index`.
fn engine(id: u64, index: usize) -> EngineBlockHash {
    EngineBlockHash(id * 100 + index as u64)
}

/// Worker `id`'s first event: it stored the first `blocks` blocks of `tokens` from the root,
/// each named by its engine hash and carrying its local hash.
fn stored(id: u64, tokens: &[u32], blocks: usize) -> RouterEvent {
    let blocks = block_hashes(tokens, BLOCK_SIZE)
        .into_iter()
        .take(blocks)
        .enumerate()
        .map(|(index, local)| (engine(id, index), local));
    RouterEvent::new(worker(id), 0, KvCacheEventData::stored(None, blocks))
}

fn request(id: &str, tokens: Vec<u32>) -> RouteRequest {
    RouteRequest::new(id, Role::Decode, Prompt::Tokens(tokens))
}

/// A router whose decode role runs `selection` with `parameters` and, when `hints` is `None`,
/// the hint policies registered as its defaults (else the listed ones).
fn router(selection: &str, parameters: Value, hints: Option<Vec<(&str, Value)>>) -> Router {
    let registry = PolicyRegistry::linked().expect("the linked registrations are valid");
    let partition = Partition {
        role: Role::Decode,
        block_size: BLOCK_SIZE,
    };
    let constructed = registry
        .worker_selection_policy(selection)
        .expect("linked")
        .construct_worker_selection(PolicyParameters::new(parameters), &partition)
        .expect("valid parameters");
    let listed: Vec<(String, Value, HintOrigin)> = match hints {
        Some(hints) => hints
            .into_iter()
            .map(|(name, parameters)| (name.to_owned(), parameters, HintOrigin::Listed))
            .collect(),
        None => registry
            .default_hint_policies(selection)
            .map(|entry| (entry.name.clone(), json!({}), HintOrigin::Default))
            .collect(),
    };
    let hints = listed
        .into_iter()
        .map(|(name, parameters, origin)| RoleHint {
            constructed: registry
                .hint_policy(&name)
                .expect("linked")
                .construct_hint(PolicyParameters::new(parameters), &partition)
                .expect("valid parameters"),
            policy_type: name,
            name: None,
            origin,
        })
        .collect();
    let setup = RouterSetup {
        router_mode: RouterMode::Kv,
        block_size: BLOCK_SIZE,
        roles: BTreeMap::from([(
            Role::Decode,
            RolePolicies::new(selection, constructed, hints),
        )]),
    };
    Router::new(setup, RouterOptions::default())
}

/// Books `id` on the only registered worker to give it decode load, then ends its prefill.
fn warm(router: &Router, id: &str, first_token: u32, blocks: u32) {
    router
        .book(&request(id, prompt(first_token, blocks)))
        .expect("booked");
    router.prefill_complete(id);
}

#[test]
fn kvcr_commits_a_copy_that_kv_fetch_sends() {
    // kvcr with multiplier 0.5 and no `hints`: kv_fetch runs by default.
    let router = router(
        "kvcr",
        json!({"shared_cache_multiplier": 0.5, "seed": 1}),
        None,
    );
    assert_eq!(
        router.setup().roles[&Role::Decode].hints[0].policy_type,
        "kv_fetch"
    );
    let main = prompt(0, 10);

    // w3 (no hints) carries 3 active blocks; w1 (a source) carries 20.
    router.register_worker(plain(3)).unwrap();
    warm(&router, "warm-3", 10_000, 3);
    router.register_worker(hinting(1)).unwrap();
    warm(&router, "warm-1", 20_000, 20);
    router.register_worker(hinting(2)).unwrap();
    router.apply_event(&stored(1, &main, 8));
    router.apply_event(&stored(3, &main, 4));

    // Costs (prefill 10 blocks): w1 2 + 20 = 22; w2 10; w3 6 + 3 = 9 → w3 without credit.
    // With credit: w2 10 - 0.5 * 8 = 6; w3 10 - 4 - 0.5 * 4 + 3 = 7 → w2, because of w1's blocks.
    let booking = router.book(&request("req-main", main)).expect("booked");
    assert_eq!(booking.worker, worker(2));
    let hashes: Vec<EngineBlockHash> = (0..8).map(|index| engine(1, index)).collect();
    assert_eq!(
        booking.committed_kv_copy,
        Some(KvCopy {
            source: worker(1),
            source_endpoint: endpoint(1),
            first_block: 0,
            block_hashes: hashes.clone(),
        })
    );
    let hint = booking.hint.expect("w2 accepts hints");
    let envelope: Value = serde_json::from_str(&hint.to_json()).unwrap();
    assert_eq!(
        envelope,
        json!({
            "protocol_version": "0.1",
            "message_id": "req-main",
            "actions": [{
                "action_id": "a1",
                "action_type": "kv.fetch",
                "action_version": "1.0",
                "payload": {"source_control_endpoint": endpoint(1), "block_hashes": hashes},
            }],
        })
    );
}

#[test]
fn kv_fetch_best_effort_obeys_min_additional_blocks() {
    for (min_additional_blocks, expect_fetch) in [(3, true), (4, false)] {
        let router = router(
            "dynamo-default-cost-fn",
            json!({}),
            Some(vec![(
                "kv_fetch",
                json!({"min_additional_blocks": min_additional_blocks}),
            )]),
        );
        let main = prompt(0, 10);
        router.register_worker(hinting(1)).unwrap();
        warm(&router, "warm-1", 20_000, 20);
        router.register_worker(hinting(2)).unwrap();
        router.apply_event(&stored(1, &main, 8));
        router.apply_event(&stored(2, &main, 5));

        // w1 2 + 20 = 22, w2 5 → w2, which lacks 3 of w1's blocks.
        let booking = router.book(&request("req-1", main)).expect("booked");
        assert_eq!(booking.worker, worker(2));
        assert_eq!(booking.committed_kv_copy, None);
        let actions: Vec<Value> = booking
            .hint
            .iter()
            .flat_map(|hint| &hint.actions)
            .map(|action| serde_json::to_value(action).unwrap())
            .collect();
        if expect_fetch {
            // Root-aligned: w1's engine hashes of blocks 0..8; w2 fetches the 3 it lacks.
            let hashes: Vec<EngineBlockHash> = (0..8).map(|index| engine(1, index)).collect();
            assert_eq!(
                actions,
                [json!({
                    "action_id": "a1",
                    "action_type": "kv.fetch",
                    "action_version": "1.0",
                    "payload": {"source_control_endpoint": endpoint(1), "block_hashes": hashes},
                })]
            );
        } else {
            assert!(actions.is_empty(), "{actions:?}");
        }
    }
}

#[test]
fn the_decode_term_counts_blocks_shared_with_active_requests_once() {
    let router = router("dynamo-default-cost-fn", json!({"seed": 3}), Some(vec![]));
    // w1 runs A (8 blocks), w2 runs Z (3 unrelated blocks); both prefills are done.
    router.register_worker(plain(1)).unwrap();
    warm(&router, "a", 0, 8);
    router.register_worker(plain(2)).unwrap();
    // Z on w1: 3 + 8 + 3 = 14, on w2: 3 + 0 + 3 = 6 → w2.
    let z = router
        .book(&request("z", prompt(50_000, 3)))
        .expect("booked");
    assert_eq!(z.worker, worker(2));
    router.prefill_complete("z");

    // Y shares A's first 6 blocks and adds 2 of its own (8 blocks).
    let mut y = prompt(0, 6);
    y.extend(prompt(90_000, 2));
    // w1: prefill 8 + 8 active + 2 not shared = 18; w2: 8 + 3 + 8 = 19 → w1. Counting each
    // request's blocks separately (8 + 8 on w1 against 3 + 8 on w2) would pick w2.
    let booking = router.book(&request("y", y)).expect("booked");
    assert_eq!(booking.worker, worker(1));
    let loads: BTreeMap<WorkerId, u64> = router
        .workers()
        .into_iter()
        .map(|(info, load)| (info.id, load.active_blocks))
        .collect();
    assert_eq!(loads, BTreeMap::from([(worker(1), 10), (worker(2), 3)]));
    router.release("a");
    assert_eq!(
        router.workers()[0].1.active_blocks,
        8,
        "Y keeps the shared blocks"
    );
}
