//! The ideal hit rate (every block cached forever on one worker) bounds what any configuration
//! reuses, overall and in every window of arrival time.

use dynamo_kv_router::config::ConfigOverrides;
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_router_catalog as _;
use kv_router_replay::{ClusterConfig, ReplayOptions, SyntheticWorkload, builtin_configs, compare};

#[test]
fn no_configuration_reuses_more_than_the_ideal() {
    let workload = SyntheticWorkload {
        sessions: 80,
        ..SyntheticWorkload::default()
    }
    .generate()
    .prepare();
    let registry = PolicyRegistry::linked().unwrap();
    let configs = builtin_configs(&registry, &ConfigOverrides::default()).unwrap();
    let options = ReplayOptions {
        cluster: ClusterConfig {
            workers_per_role: 4,
            ..ClusterConfig::default()
        },
        ..ReplayOptions::default()
    };
    let comparison = compare(&workload, Vec::new(), &configs, &options).unwrap();
    let ideal = &comparison.workload.ideal_hit_rate;
    assert!(
        ideal.overall > 0.0 && ideal.overall < 1.0,
        "{}",
        ideal.overall
    );
    for config in &comparison.configs {
        let stage = &config.stages[0];
        let reused = (stage.local + stage.fetched) as f64 / stage.blocks as f64;
        assert!(reused <= ideal.overall + 1e-12, "{}: {reused}", config.name);
        for point in &config.hit_rate_over_time {
            let window = ideal
                .over_time
                .iter()
                .find(|ideal| ideal.t_s == point.t_s)
                .unwrap_or_else(|| panic!("no ideal window at {} s", point.t_s));
            assert!(
                point.reused <= window.reused + 1e-12,
                "{} at {} s: {} > {}",
                config.name,
                point.t_s,
                point.reused,
                window.reused
            );
        }
    }
}
