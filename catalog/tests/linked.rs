//! Canary: a binary that links the catalog has every built-in policy, with its kind, defaults
//! and commitments, in `PolicyRegistry::linked()`.

use dynamo_kv_router::plugins::registry::PolicyKind;
use dynamo_kv_router::plugins::{
    Commitments, HintHost, Partition, PolicyParameters, PolicyRegistry,
};
use dynamo_kv_router::router::Role;
use dynamo_router_catalog as _;
use serde_json::json;

const DECODE: Partition = Partition {
    role: Role::Decode,
    block_size: 16,
};

#[test]
fn linking_the_catalog_registers_the_built_ins() {
    let registry = PolicyRegistry::linked().expect("the linked registrations are valid");

    let default = registry
        .worker_selection_policy("dynamo-default-cost-fn")
        .expect("dynamo-default-cost-fn is linked");
    assert_eq!(default.kind, PolicyKind::WorkerSelection);
    assert_eq!(default.commitments, Commitments::NONE);
    assert!(
        default
            .summary
            .starts_with("Chooses the worker with the lowest upstream cost")
    );

    let kvcr = registry
        .worker_selection_policy("kvcr")
        .expect("kvcr is linked");
    assert_eq!(kvcr.kind, PolicyKind::WorkerSelection);
    assert_eq!(kvcr.commitments, Commitments::KV_COPY);

    let kv_fetch = registry
        .hint_policy("kv_fetch")
        .expect("kv_fetch is linked");
    assert_eq!(kv_fetch.kind, PolicyKind::Hint);
    assert_eq!(kv_fetch.commitments, Commitments::KV_COPY);
    assert_eq!(kv_fetch.defaults, [HintHost::worker_selection("kvcr")]);
    assert!(
        kv_fetch
            .summary
            .starts_with("Sends the booked worker a `kv.fetch` hint")
    );

    let under_kvcr: Vec<_> = registry
        .default_hint_policies("kvcr")
        .map(|entry| entry.name.as_str())
        .collect();
    assert_eq!(under_kvcr, ["kv_fetch"]);
    assert_eq!(
        registry
            .default_hint_policies("dynamo-default-cost-fn")
            .count(),
        0
    );
}

#[test]
fn linked_built_ins_construct_with_their_commitments() {
    let registry = PolicyRegistry::linked().expect("the linked registrations are valid");
    let kvcr = registry
        .worker_selection_policy("kvcr")
        .expect("kvcr is linked");
    let committing = kvcr
        .construct_worker_selection(
            PolicyParameters::new(json!({"shared_cache_multiplier": 0.5})),
            &DECODE,
        )
        .expect("valid parameters");
    assert_eq!(committing.commitments, Commitments::KV_COPY);
    let plain = kvcr
        .construct_worker_selection(PolicyParameters::empty(), &DECODE)
        .expect("valid parameters");
    assert_eq!(plain.commitments, Commitments::NONE);
    let error = kvcr
        .construct_worker_selection(
            PolicyParameters::new(json!({"shared_cache_multiplier": 2})),
            &DECODE,
        )
        .err()
        .expect("2 is out of range");
    assert!(
        error.to_string().contains("shared_cache_multiplier"),
        "{error}"
    );

    let kv_fetch = registry
        .hint_policy("kv_fetch")
        .expect("kv_fetch is linked");
    let built = kv_fetch
        .construct_hint(PolicyParameters::empty(), &DECODE)
        .expect("valid parameters");
    assert_eq!(built.commitments, Commitments::KV_COPY);

    let default = registry
        .worker_selection_policy("dynamo-default-cost-fn")
        .expect("dynamo-default-cost-fn is linked");
    let built = default
        .construct_worker_selection(PolicyParameters::new(json!({"seed": 1})), &DECODE)
        .expect("valid parameters");
    assert_eq!(built.commitments, Commitments::NONE);
}
