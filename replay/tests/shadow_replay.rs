//! Shadows in the replay: every booking is shadowed, the live policies book exactly as they do
//! without the shadow, a shadow that is the live configuration agrees on every booking, and the
//! table names each configuration's shadows.

use dynamo_kv_router::config::{self, ConfigOverrides, ConfigSource};
use dynamo_kv_router::plugins::PolicyRegistry;
use dynamo_router_catalog as _;
use kv_router_replay::shadow_table::shadow_table;
use kv_router_replay::{ClusterConfig, ReplayConfig, ReplayOptions, SyntheticWorkload, compare};

const BASELINE: &str = "\
router_mode: kv
block_size: 16
worker_selection:
  aggregated:
    type: dynamo-default-cost-fn
    parameters: {seed: 7}
    hints: []
";

fn config(name: &str, yaml: &str) -> ReplayConfig {
    let registry = PolicyRegistry::linked().expect("the built-in catalog is consistent");
    let source = ConfigSource::new(name, yaml);
    let setup = config::load(&source, &registry, &ConfigOverrides::default())
        .unwrap_or_else(|error| panic!("{}", error.render(yaml)));
    ReplayConfig {
        name: name.to_owned(),
        setup,
    }
}

#[test]
fn shadows_see_every_booking_and_leave_the_live_policies_alone() {
    let workload = SyntheticWorkload {
        sessions: 60,
        ..SyntheticWorkload::default()
    }
    .generate()
    .prepare();
    let shadowed = format!(
        "{BASELINE}    shadow:\n      - type: dynamo-default-cost-fn\n        name: same-as-live\n        parameters: {{seed: 7}}\n        hints: []\n      - type: kvcr\n        name: kvcr\n        parameters: {{shared_cache_multiplier: 0.5, seed: 7}}\n"
    );
    let configs = [config("baseline", BASELINE), config("shadowed", &shadowed)];
    let options = ReplayOptions {
        cluster: ClusterConfig {
            workers_per_role: 4,
            ..ClusterConfig::default()
        },
        ..ReplayOptions::default()
    };
    let comparison = compare(&workload, Vec::new(), &configs, &options).expect("replays");
    let (baseline, shadowed) = (&comparison.configs[0], &comparison.configs[1]);
    assert!(baseline.shadows.is_empty());
    assert_eq!(
        baseline.stages, shadowed.stages,
        "the shadows changed a live choice"
    );
    assert_eq!(baseline.ttft_ms, shadowed.ttft_ms);

    let bookings = shadowed.requests as u64;
    let [kvcr, same] = &shadowed.shadows[..] else {
        panic!("two shadows: {:?}", shadowed.shadows);
    };
    assert_eq!(
        (kvcr.name.as_str(), same.name.as_str()),
        ("kvcr", "same-as-live")
    );
    assert_eq!(same.decisions, bookings);
    // A separate instance with the same seed draws the same tie-breaks: it agrees on every one.
    assert_eq!(same.agreed, bookings);
    assert_eq!(same.shadow_cached_blocks, same.live_cached_blocks);
    assert_eq!(kvcr.decisions, bookings);
    assert!(
        kvcr.agreed < bookings,
        "kvcr chose like the default cost every time"
    );
    // kvcr lists no hints, so its registered default (kv_fetch) would have run.
    assert!(kvcr.shadow_hints > 0 && kvcr.shadow_fetch_blocks > 0);
    assert_eq!(kvcr.failures, 0);

    let table = shadow_table(&comparison.configs).expect("a shadow table");
    assert!(
        table.contains("same-as-live (dynamo-default-cost-fn)"),
        "{table}"
    );
    assert!(table.contains("100.0%"), "{table}");
    assert_eq!(table.lines().count(), 5, "{table}");
    let json = comparison.to_json();
    assert!(json.contains("\"shadows\""), "the JSON report carries them");
}
