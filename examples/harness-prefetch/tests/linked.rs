//! A router build that registers nothing by hand: naming the crate links `harness_prefetch`.

use dynamo_kv_router::plugins::prelude::*;
use dynamo_kv_router::plugins::request_view::NoBlockLookup;
use harness_prefetch as _;

fn linked_prefetch(parameters: dynamo_kv_router::serde_json::Value) -> ConstructedHint {
    let registry = PolicyRegistry::linked().expect("the linked registrations are valid");
    let entry = registry
        .hint_policy("harness_prefetch")
        .expect("linking the crate registers harness_prefetch");
    let partition = Partition {
        role: Role::Decode,
        block_size: 4,
    };
    entry
        .construct_hint(HintPolicyParameters::new(parameters), &partition)
        .map(|built| ConstructedHint(built.instance))
        .map_err(|error| error.to_string())
        .expect("valid parameters")
}

struct ConstructedHint(Arc<dyn HintPolicy>);

fn hints(policy: &ConstructedHint, session: &SessionContext, cached: usize) -> Vec<HintAction> {
    let worker = WorkerId::new(7, 0);
    let candidates = [Candidate {
        worker,
        cached_blocks: cached,
        load: WorkerLoad::default(),
        router_hint: true,
        source_endpoint: None,
    }];
    let hashes = [11, 22, 33, 44, 55].map(dynamo_kv_router::kv::SequenceHash);
    let request = RequestView {
        request_id: "r1",
        role: Role::Decode,
        prompt_tokens: 20,
        block_size: 4,
        session,
        sequence_hashes: &hashes,
        candidates: &candidates,
        blocks: &NoBlockLookup,
    };
    policy
        .0
        .build_hints(&HintContext::new(request, worker, None))
        .expect("harness_prefetch does not fail")
}

#[test]
fn linking_registers_the_macro_policy_with_its_description() {
    let registry = PolicyRegistry::linked().unwrap();
    let entry = registry.hint_policy("harness_prefetch").unwrap();
    assert_eq!(
        entry.summary,
        "Asks the booked worker to prefetch the session's context it does not hold yet."
    );
    assert_eq!(entry.type_name.as_deref(), Some("HarnessPrefetch"));
    assert_eq!(entry.parameters_type.as_deref(), Some("PrefetchConfig"));
    assert_eq!(
        entry.location.crate_name.as_deref(),
        Some("harness-prefetch")
    );
    assert!(
        entry.location.file.ends_with("src/lib.rs"),
        "{:?}",
        entry.location
    );
    assert!(entry.defaults.is_empty());
    // The manual registration is not linked: it exists only where `register` is called.
    assert!(registry.get("harness_prefetch_manual").is_none());
}

#[test]
fn prefetches_up_to_max_blocks_past_the_cached_prefix_of_a_session() {
    let policy = linked_prefetch(dynamo_kv_router::serde_json::json!({ "max_blocks": 2 }));
    let session = SessionContext::new("chat-42");
    let actions = hints(&policy, &session, 1);
    assert_eq!(
        actions,
        [HintAction::new(
            "kv.prefetch",
            "1.0",
            dynamo_kv_router::serde_json::json!({
                "session_id": "chat-42",
                "first_block": 1,
                "block_hashes": [22, 33],
            }),
        )]
    );
    // Everything cached: nothing to prefetch.
    assert!(hints(&policy, &session, 5).is_empty());
}

#[test]
fn requests_outside_a_session_get_no_action() {
    let policy = linked_prefetch(dynamo_kv_router::serde_json::json!({ "max_blocks": 64 }));
    assert!(hints(&policy, &SessionContext::default(), 0).is_empty());
}

#[test]
fn max_blocks_defaults_and_unknown_fields_are_rejected() {
    let policy = linked_prefetch(dynamo_kv_router::serde_json::Value::Null);
    let actions = hints(&policy, &SessionContext::new("s"), 0);
    assert_eq!(
        actions[0].payload["block_hashes"],
        dynamo_kv_router::serde_json::json!([11, 22, 33, 44, 55])
    );

    let registry = PolicyRegistry::linked().unwrap();
    let entry = registry.hint_policy("harness_prefetch").unwrap();
    let partition = Partition {
        role: Role::Decode,
        block_size: 4,
    };
    let typo = HintPolicyParameters::new(dynamo_kv_router::serde_json::json!({ "max_blcoks": 2 }));
    let error = entry.construct_hint(typo, &partition).err().unwrap();
    assert_eq!(
        error.to_string(),
        "max_blcoks: unknown field `max_blcoks`; remove it or correct its spelling"
    );
}

#[test]
fn the_manual_registration_adds_a_second_name_beside_the_linked_one() {
    let mut registry = PolicyRegistry::linked().unwrap();
    harness_prefetch::register(&mut registry).unwrap();
    let names: Vec<_> = registry
        .names(dynamo_kv_router::plugins::PolicyKind::Hint)
        .collect();
    assert!(names.contains(&"harness_prefetch"), "{names:?}");
    assert!(names.contains(&"harness_prefetch_manual"), "{names:?}");
    // Registering it twice names both call sites.
    let error = harness_prefetch::register(&mut registry).unwrap_err();
    assert!(error.to_string().contains("registered twice"), "{error}");
}
