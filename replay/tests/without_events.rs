//! The replay without KV events (upstream's `--no-kv-events`): each configuration runs beside
//! itself with events, its router predicting caches from its bookings in virtual time.

use dynamo_kv_router::config::ConfigOverrides;
use dynamo_kv_router::kv::ApproximateConfig;
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_router_catalog as _;
use kv_router_replay::{
    ClusterConfig, ReplayError, ReplayOptions, SyntheticWorkload, builtin_configs, compare,
};
use std::time::Duration;

fn options(without_events: Option<ApproximateConfig>) -> ReplayOptions {
    ReplayOptions {
        cluster: ClusterConfig {
            workers_per_role: 4,
            ..ClusterConfig::default()
        },
        without_events,
        ..ReplayOptions::default()
    }
}

#[test]
fn without_events_the_router_still_hits_on_the_generated_workload() {
    let registry = PolicyRegistry::linked().expect("the built-in catalog is consistent");
    let workload = SyntheticWorkload {
        sessions: 120,
        ..SyntheticWorkload::default()
    }
    .generate()
    .prepare();
    let configs = builtin_configs(&registry, &ConfigOverrides::default()).unwrap();
    let comparison = compare(
        &workload,
        Vec::new(),
        &configs,
        &options(Some(ApproximateConfig::default())),
    )
    .unwrap();
    println!("{}", comparison.table());
    assert!(
        comparison.invariants_hold(),
        "{:?}",
        comparison.invariant_violations()
    );
    let names: Vec<&str> = comparison.configs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "kvcr+kv_fetch",
            "kvcr+kv_fetch (no events)",
            "default-cost no-hints",
            "default-cost no-hints (no events)"
        ]
    );
    let (with, without) = (&comparison.configs[2], &comparison.configs[3]);
    assert_eq!(without.served, without.requests);
    assert!(with.without_kv_events.is_none());
    assert!(without.without_kv_events.is_some());
    let local = without.stages[0].local_rate;
    assert!(
        local > 0.1,
        "predictions steer sessions back: local {local:.3}"
    );
    assert!(
        local <= with.stages[0].local_rate + 0.05,
        "events should not lose to predictions by much: {local:.3} vs {:.3}",
        with.stages[0].local_rate
    );
    let table = comparison.table();
    assert!(
        table.contains("kv events") && table.contains("off (ttl 120 s)"),
        "{table}"
    );
    let json: serde_json::Value = serde_json::from_str(&comparison.to_json()).unwrap();
    assert_eq!(
        json["configs"][1]["without_kv_events"]["router_ttl_secs"],
        120.0
    );
    assert!(json["configs"][0].get("without_kv_events").is_none());

    // A zero TTL predicts nothing past each booking: every worker looks cold again.
    let cold = ApproximateConfig {
        ttl: Duration::ZERO,
        ..ApproximateConfig::default()
    };
    let configs = builtin_configs(&registry, &ConfigOverrides::default()).unwrap();
    let comparison = compare(&workload, Vec::new(), &configs[1..], &options(Some(cold))).unwrap();
    let cold_local = comparison.configs[1].stages[0].local_rate;
    assert!(cold_local < local, "{cold_local:.3} vs {local:.3}");
}

#[test]
fn without_events_and_replicas_do_not_combine() {
    let registry = PolicyRegistry::linked().expect("the built-in catalog is consistent");
    let workload = SyntheticWorkload {
        sessions: 2,
        ..SyntheticWorkload::default()
    }
    .generate()
    .prepare();
    let configs = builtin_configs(&registry, &ConfigOverrides::default()).unwrap();
    let options = ReplayOptions {
        replicas: 2,
        ..options(Some(ApproximateConfig::default()))
    };
    let error = compare(&workload, Vec::new(), &configs, &options).unwrap_err();
    assert!(matches!(error, ReplayError::WithoutEventsWithReplicas));
}
