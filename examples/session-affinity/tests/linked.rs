//! Canary: linking the example catalog registers `session-affinity`, built from its parameters.

use dynamo_kv_router::plugins::registry::PolicyKind;
use dynamo_kv_router::plugins::{Commitments, Partition, PolicyParameters, PolicyRegistry};
use dynamo_kv_router::router::Role;
use session_affinity as _;

#[test]
fn linking_the_catalog_registers_session_affinity() {
    let registry = PolicyRegistry::linked().expect("the linked registrations are valid");
    let entry = registry
        .worker_selection_policy("session-affinity")
        .expect("session-affinity is linked");
    assert_eq!(entry.kind, PolicyKind::WorkerSelection);
    assert_eq!(entry.commitments, Commitments::NONE);
    assert!(
        entry
            .summary
            .starts_with("Keeps each session on the worker that served its previous request"),
        "{}",
        entry.summary
    );

    let partition = Partition {
        role: Role::Decode,
        block_size: 16,
    };
    let parameters = PolicyParameters::new(serde_json::json!({"max_active_blocks": 128}));
    let built = entry
        .construct_worker_selection(parameters, &partition)
        .expect("valid parameters");
    assert_eq!(built.commitments, Commitments::NONE);
    let parameters = PolicyParameters::new(serde_json::json!({"max_sessions": 0}));
    let error = entry
        .construct_worker_selection(parameters, &partition)
        .err()
        .expect("0 sessions is rejected");
    assert!(error.to_string().contains("max_sessions"), "{error}");
}
