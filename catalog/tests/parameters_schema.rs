//! The built-in policies describe their parameters: the whole-config schema of a registry of
//! the catalog carries each parameter's range and default as the policies' own checks enforce
//! them.

use dynamo_kv_router::config::json_schema::router_config_schema;
use dynamo_kv_router::plugins::{PolicyKind, PolicyRegistry};
use dynamo_router_catalog as _;
use serde_json::{Value, json};

fn schema() -> Value {
    let registry = PolicyRegistry::linked().unwrap_or_else(|error| panic!("{error}"));
    router_config_schema(&registry).to_value()
}

#[test]
fn kvcr_parameters_carry_their_ranges_and_defaults() {
    let schema = schema();
    let kvcr = &schema["$defs"]["parameters:kvcr"];
    assert_eq!(kvcr["additionalProperties"], json!(false), "{kvcr}");
    let multiplier = &kvcr["properties"]["shared_cache_multiplier"];
    assert_eq!(multiplier["minimum"], json!(0.0), "{multiplier}");
    assert_eq!(multiplier["maximum"], json!(1.0), "{multiplier}");
    assert_eq!(multiplier["default"], json!(0.0), "{multiplier}");
    for field in [
        "overlap_score_credit",
        "prefill_load_scale",
        "decode_active_request_weight",
        "router_temperature",
    ] {
        assert_eq!(kvcr["properties"][field]["minimum"], json!(0.0), "{field}");
    }
    assert_eq!(
        kvcr["properties"]["overlap_score_credit"]["default"],
        json!(1.0)
    );
    let rules = schema["$defs"]["role_mapping"]["allOf"]
        .as_array()
        .expect("one rule per described selection policy");
    assert!(
        rules
            .iter()
            .any(|rule| rule["if"]["properties"]["type"]["const"] == "kvcr"),
        "{rules:?}"
    );
}

#[test]
fn every_built_in_policy_is_described() {
    let registry = PolicyRegistry::linked().unwrap_or_else(|error| panic!("{error}"));
    for (kind, name) in [
        (PolicyKind::WorkerSelection, "dynamo-default-cost-fn"),
        (PolicyKind::WorkerSelection, "kvcr"),
        (PolicyKind::Hint, "kv_fetch"),
    ] {
        assert!(
            registry.describe_parameters(kind, name).is_some(),
            "{name} is not described"
        );
    }
    let kv_fetch = registry
        .describe_parameters(PolicyKind::Hint, "kv_fetch")
        .expect("described")
        .to_value();
    assert_eq!(
        kv_fetch["properties"]["min_additional_blocks"]["minimum"],
        json!(1)
    );
    assert_eq!(
        kv_fetch["properties"]["min_additional_blocks"]["default"],
        json!(1)
    );
    // Asked as the other kind, a policy has no parameters schema.
    assert!(
        registry
            .describe_parameters(PolicyKind::Hint, "kvcr")
            .is_none()
    );
}
