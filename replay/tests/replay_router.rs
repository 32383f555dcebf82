//! The replay through the real router and the built-in catalog: the built-in configurations on
//! the generated workload, and the Mooncake trace when `KV_ROUTER_TRACE` names it.

use dynamo_kv_router::config::ConfigOverrides;
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_router_catalog as _;
use kv_router_replay::{
    ClusterConfig, Comparison, ReplayOptions, SyntheticWorkload, builtin_configs, compare,
    read_trace_file,
};

fn registry() -> PolicyRegistry {
    PolicyRegistry::linked().expect("the built-in catalog is consistent")
}

fn check_invariants(comparison: &Comparison) {
    assert!(
        comparison.invariants_hold(),
        "{:?}",
        comparison.invariant_violations()
    );
    for config in &comparison.configs {
        assert_eq!(
            config.served, config.requests,
            "{}: {:?}",
            config.name, config.book_failures
        );
        assert_eq!(config.hints.policy_failures, 0);
        for stage in &config.stages {
            assert_eq!(stage.served, config.requests, "{}", config.name);
            // The router books on a view fed by events that lag the workers; it is mostly right.
            assert!(
                stage.router_view_exact_rate > 0.5,
                "{}: router view right {:.3}",
                config.name,
                stage.router_view_exact_rate
            );
        }
    }
}

#[test]
fn builtin_configurations_on_the_generated_workload() {
    let workload = SyntheticWorkload {
        sessions: 120,
        ..SyntheticWorkload::default()
    }
    .generate()
    .prepare();
    let configs = builtin_configs(&registry(), &ConfigOverrides::default()).unwrap();
    let options = ReplayOptions {
        cluster: ClusterConfig {
            workers_per_role: 4,
            ..ClusterConfig::default()
        },
        ..ReplayOptions::default()
    };
    let comparison = compare(&workload, Vec::new(), &configs, &options).unwrap();
    println!("{}", comparison.table());
    check_invariants(&comparison);
    // Seeded workload and seeded policies: the same replay gives the same measurements.
    // (Configurations are loaded afresh: a policy's random state advances as it books.)
    let fresh = builtin_configs(&registry(), &ConfigOverrides::default()).unwrap();
    let again = compare(&workload, Vec::new(), &fresh, &options).unwrap();
    for (first, second) in comparison.configs.iter().zip(&again.configs) {
        assert_eq!(first.stages, second.stages);
        assert_eq!(first.ttft_ms, second.ttft_ms);
    }
    let (hinted, plain) = (&comparison.configs[0], &comparison.configs[1]);
    assert!(hinted.hints.hints_sent > 0 && hinted.hints.fetch_actions > 0);
    assert_eq!(plain.hints.hints_sent, 0);
    assert_eq!(plain.stages[0].fetched, 0);
    assert!(
        hinted.stages[0].fetched > 0,
        "the kv.fetch hints were executed"
    );
    // Sessions reuse their context and prompts are shared: KV-aware routing hits.
    assert!(
        plain.stages[0].local_rate > 0.3,
        "{}",
        plain.stages[0].local_rate
    );
    let html = comparison.to_html();
    assert!(html.starts_with("<!DOCTYPE html>") && html.matches("<svg").count() == 3);
    let json: serde_json::Value = serde_json::from_str(&comparison.to_json()).unwrap();
    assert_eq!(json["configs"].as_array().map(Vec::len), Some(2));
}

#[test]
fn mooncake_trace_with_sixteen_workers() {
    const TEST: &str = "mooncake_trace_with_sixteen_workers";
    let Some(path) = std::env::var_os("KV_ROUTER_TRACE") else {
        test_skip::skip_unless_ci(
            TEST,
            "set KV_ROUTER_TRACE to the Mooncake trace (mooncake_synthetic_trace.jsonl)",
        );
        return;
    };
    let path = std::path::PathBuf::from(path);
    if !path.exists() {
        let reason = format!("KV_ROUTER_TRACE={} does not exist", path.display());
        test_skip::skip_unless_ci(TEST, &reason);
        return;
    }
    let trace = read_trace_file(&path, true).unwrap();
    let workload = trace.workload.prepare();
    let configs = builtin_configs(&registry(), &ConfigOverrides::default()).unwrap();
    let options = ReplayOptions {
        cluster: ClusterConfig {
            workers_per_role: 16,
            ..ClusterConfig::default()
        },
        ..ReplayOptions::default()
    };
    let comparison = compare(&workload, trace.bad_lines, &configs, &options).unwrap();
    println!("{}", comparison.table());
    check_invariants(&comparison);
    assert_eq!(comparison.workload.requests, 3993);
}
